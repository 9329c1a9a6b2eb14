"""CS101: the gradient norm crosses the source article's absolute threshold."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tb_crash_signals.analysis.rules.base import Hits, Threshold, fmt, param, rule, since_index
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

    def quiet(self):
        return Quiet(hi=self.threshold)

    def check(self, i, step, v):
        if v > self.threshold and (self.count_nonfinite or v != math.inf):
            return HIT
        return None


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
    the same steps).
    """
    s = data.get("grad_norm")
    if s is not None:
        i0 = since_index(s, since)
        v = s.values[i0:]
        above = v > p.threshold
        if not p.count_nonfinite:
            above &= v != np.inf
        idx = np.flatnonzero(above) + i0
        if idx.size:
            yield Hits("grad_norm", idx)
