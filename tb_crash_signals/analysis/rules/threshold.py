"""CS101: the gradient norm crosses the source article's absolute threshold."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tb_crash_signals.analysis.rules.base import (
    Hits,
    Threshold,
    fmt,
    param,
    rose_from_start,
    rose_from_starts,
    rule,
    since_index,
)
from tb_crash_signals.analysis.stats import starting_level
from tb_crash_signals.analysis.streaming import HIT, Quiet, Stream


@dataclasses.dataclass(frozen=True)
class GradNormThresholdParams:
    threshold: float = param(
        100.0, "the gradient norm above which updates are out of control (the article's 100)"
    )
    count_nonfinite: bool = param(
        False, "an Inf grad norm counts as above the threshold, as in the article (by default NaN/Inf "
        "is left to `nonfinite` and `grad-overflow`, which tell a divergence from a skipped fp16 step)"
    )
    min_rise: float = param(
        3.0, "... and at least this multiple of where the grad norm started (the median of its first 10 "
        "finite points; of those before the point, early on): an explosion is growth; a grad norm "
        "whose start is not known yet (its first point) is not judged; 0 turns this and `headroom` "
        "off (the article's plain threshold)", at_least=0.0,
    )
    headroom: float = param(
        3.0, "... and only when it started at least this many times under the threshold: the "
        "threshold assumes gradients of order 1, and one that starts near or above it (a loss summed "
        "over the batch, unscaled regression targets) wanders across it as it learns; the relative "
        "rules judge those", at_least=1.0,
    )
    approach: float = param(
        3.0, "... and only when the two points before it were at least threshold / `approach` "
        "(the norm climbs toward the threshold), the one before was above it too, or the point is "
        "`approach` x the threshold or `leap` x the largest of the 3 before: a lone point of a heavy-tailed norm "
        "that lands not far over the threshold is a spike (CS102) until the next stays above",
        at_least=1.0,
    )
    leap: float = param(30.0, "see `approach`: a grad norm this many times the largest of its 3 points "
                        "before broke in one update", at_least=1.0)
    cooldown: int = param(20, "points back under the threshold after which a new episode starts")


def _describe_threshold(ep, p):
    return (
        f"grad norm {fmt(ep.start_value)} > {fmt(p.threshold)} at step {ep.start_step}"
        f" (peak {fmt(ep.peak_value)} at step {ep.peak_step})"
    )


class GradThresholdStream(Stream):
    hits = ("grad_norm",)

    def __init__(self, p, signal, channels):
        self.threshold = p.threshold
        self.count_nonfinite = p.count_nonfinite
        self.min_rise = p.min_rise
        self.headroom = p.headroom
        self.near = p.threshold / p.approach
        self.far = p.threshold * p.approach
        self.leap = p.leap
        self.values = channels["grad_norm"].values  # the recent raw points, this one last
        # The grad norm's first finite points before this one (at most 10; pushed after the checks).
        self.head = channels["grad_norm"].initial.head

    def quiet(self):
        return Quiet(hi=self.threshold)

    def check(self, i, step, v):
        if v > self.threshold and (self.count_nonfinite or v != math.inf):
            if rose_from_start(v, self.head, self.threshold, self.min_rise, self.headroom):
                if not self.min_rise:
                    return HIT
                values = self.values
                n = len(values)
                before = values[-2] if n > 1 else math.nan
                earlier = values[-3] if n > 2 else math.nan
                oldest = values[-4] if n > 3 else math.nan
                if crossed(v, before, earlier, oldest, self.threshold, self.near, self.far, self.leap):
                    return HIT
        return None


def crossed(v, before, earlier, oldest, threshold: float, near: float, far: float, leap: float):
    """Whether a point `v` over the threshold, after the points `oldest`, `earlier` and `before`
    (NaN: none), is an explosion rather than a heavy tail's lone spike (see
    GradNormThresholdParams.approach); for floats, or arrays of them. A leap is read against the
    largest of the three: a heavy tail's low point just before its spike multiplies nothing."""
    recent = np.fmax(np.fmax(before, earlier), oldest)
    return ((before > threshold) | ((before >= near) & (earlier >= near)) | (v >= far) | (v >= leap * recent))


@rule(
    code="CS101", symbol="grad-norm-threshold", family="explosion", severity="critical",
    signals=("grad_norm",), params=GradNormThresholdParams, describe=_describe_threshold,
    stream=GradThresholdStream, overlays=(Threshold("grad_norm", "threshold"),),
    advice="clip gradients (e.g. max norm 1.0) and lower the learning rate; "
    "resume from a checkpoint before the explosion",
)
def grad_norm_threshold(data, p: GradNormThresholdParams, since=None):
    """The gradient norm is above an absolute threshold (source article rule).

    Condition: grad_norm > threshold (default 100), as in the article's
    TrainingMonitor; an Inf grad norm counts only with `count_nonfinite`
    (the `article` preset sets it, so code written against the article sees
    the same steps). The norm must also be `min_rise` x where it started (the
    median of its first 10 finite points; of those before it, early on): an
    explosion is growth, and gradients that start near the threshold (large
    unscaled targets) cross it without one. A grad norm that starts within
    `headroom` x of the threshold, or at its first point, is not judged against
    it: its scale is not the article's (the preset sets `min_rise` 0, the plain
    threshold). A point is judged when the two before it were at least
    threshold / `approach`, the one before was above the threshold, or it is
    `approach` x the threshold or `leap` x the largest of the three before: a
    grad norm that climbs toward the threshold, stays above it, leaps far over
    it or multiplies in one update crosses it; a heavy-tailed one whose lone
    spike lands just over it does not (CS102 tells the spike).
    """
    s = data.get("grad_norm")
    if s is not None:
        i0 = since_index(s, since)
        v = s.values[i0:]
        above = v > p.threshold
        if not p.count_nonfinite:
            above &= v != np.inf
        above &= rose_from_starts(v, starting_level(s.values, np.arange(i0, i0 + v.shape[0])),
                                  p.threshold, p.min_rise, p.headroom)
        if p.min_rise and v.size:
            padded = np.concatenate([[np.nan] * 3, s.values])[i0 : i0 + v.shape[0] + 3]
            with np.errstate(invalid="ignore"):
                above &= crossed(v, padded[2:-1], padded[1:-2], padded[:-3], p.threshold, p.threshold / p.approach,
                                 p.threshold * p.approach, p.leap)
        idx = np.flatnonzero(above) + i0
        if idx.size:
            yield Hits("grad_norm", idx)
