"""CS101: the gradient norm crosses the source article's absolute threshold."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tb_crash_signals.analysis.rules.base import Hits, Threshold, fmt, param, rule, since_index
from tb_crash_signals.analysis.streaming import HIT, Quiet, Stream, small_median


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
        "finite points; of those before the point, early on): a run whose gradients start near the "
        "threshold (a regression on unscaled targets) has not exploded when they cross it; 0 turns this "
        "off", at_least=0.0,
    )
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
        # The grad norm's first finite points before this one (at most 10; pushed after the checks).
        self.head = channels["grad_norm"].initial.head

    def quiet(self):
        return Quiet(hi=self.threshold)

    def check(self, i, step, v):
        if v > self.threshold and (self.count_nonfinite or v != math.inf):
            head = self.head
            if not (head and v <= self.min_rise * small_median(head)):
                return HIT
        return None


def _starting_level(values: np.ndarray, index: np.ndarray) -> np.ndarray:
    """For each point: the median of the finite points before it among the run's first 10
    finite points (NaN before the first one)."""
    first = np.flatnonzero(np.isfinite(values))[:10]
    with np.errstate(over="ignore", invalid="ignore"):  # huge values: inf, as small_median gives
        medians = np.array([np.nan] + [np.median(values[first[:j]]) for j in range(1, first.size + 1)])
    return medians[np.searchsorted(first, index, side="left")]


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
    unscaled targets) cross it without one (the preset sets 0).
    """
    s = data.get("grad_norm")
    if s is not None:
        i0 = since_index(s, since)
        v = s.values[i0:]
        above = v > p.threshold
        if not p.count_nonfinite:
            above &= v != np.inf
        start = _starting_level(s.values, np.arange(i0, i0 + v.shape[0]))
        with np.errstate(over="ignore", invalid="ignore"):
            above &= ~(v <= p.min_rise * start)
        idx = np.flatnonzero(above) + i0
        if idx.size:
            yield Hits("grad_norm", idx)
