"""CS113: the train loss blows up and stays up (sustained divergence)."""

from __future__ import annotations

import dataclasses

import numpy as np

from tb_crash_signals.analysis.rules.base import Hits, fmt, param, rule, since_index
from tb_crash_signals.analysis.signals import SIGNAL_LABELS
from tb_crash_signals.analysis.stats import (
    consecutive_runs,
    finite_anchor,
    trailing_median_mad_at,
    trailing_min,
)
from tb_crash_signals.analysis.streaming import HIT, Quiet, Stream, median_mad_before


@dataclasses.dataclass(frozen=True)
class DivergenceParams:
    window: int = param(100, "trailing points forming the baseline (median)", at_least=2)
    min_points: int = param(10, "points needed before the rule can fire")
    factor: float = param(2.5, "a point is elevated when loss >= factor x baseline")
    consecutive: int = param(
        4, "fires once more than this many consecutive points are elevated "
        "(LLM Foundry: 2x the window mean for > 4 steps)"
    )
    cooldown: int = param(20, "non-elevated points after which a new episode starts")


def _describe_divergence(ep, p):
    return (
        f"{SIGNAL_LABELS[ep.signal]} stayed >= {fmt(p.factor)}x its baseline for "
        f"{p.consecutive + 1}+ points from step {ep.start_step} (peak {fmt(ep.peak_value)})"
    )


class LossDivergenceStream(Stream):
    hits = ("train_loss",)

    @classmethod
    def needs(cls, p, signal):
        return [(signal, p.window, False)]

    def __init__(self, p, signal, channels):
        self.size = p.window
        self.factor = p.factor
        self.min_points = p.min_points
        self.consecutive = p.consecutive
        self.window = channels[signal].window
        # Consecutive elevated points, ending at point `last` (kept lazily, so
        # points that are not elevated need not touch the state).
        self.run = 0
        self.last = -2

    def quiet(self):
        return Quiet(floor_factor=self.factor)  # not elevated: see _elevated

    def check(self, i, step, v):
        if i >= self.min_points and v - v == 0.0 and self._elevated(i, v):
            self.run = self.run + 1 if self.last == i - 1 else 1
            self.last = i
            return HIT if self.run > self.consecutive else None
        return None

    def _elevated(self, i, v):
        # Elevated needs v >= factor x (trailing min) unless that min is <= 0.
        lo = self.window.lower_bound()
        if lo > 0 and v < self.factor * lo:
            return False
        lo = self.window.minimum(self.size)
        if lo > 0 and v < self.factor * lo:
            return False
        med, _ = median_mad_before(self.window, i, self.size, self.min_points, mad=False)
        return v >= self.factor * med and med > 0


@rule(
    code="CS113", symbol="loss-divergence", family="divergence", severity="critical",
    signals=("train_loss",), params=DivergenceParams, describe=_describe_divergence,
    stream=LossDivergenceStream,
    advice="the run is diverging: stop it, restore an earlier checkpoint, lower the "
    "learning rate (PaLM restarted ~100 steps before spikes and skipped batches)",
)
def loss_divergence(data, p: DivergenceParams, since=None):
    """The train loss blows up and stays up (sustained divergence).

    Condition: more than `consecutive` points in a row with loss >= factor x
    the median of the `window` points before them. Unlike a spike it does not
    come back down.
    """
    s = data.get("train_loss")
    if s is None or len(s) <= p.min_points:
        return
    i0 = since_index(s, since)
    # A hit at i needs the `consecutive` points before it elevated too, each
    # judged on the (forward-filled) `window` points before it.
    e0 = max(i0 - p.consecutive, 0)
    look = max(p.window, p.min_points)
    c0 = 0 if e0 <= look else finite_anchor(s.values, e0 - look)
    v = s.values if c0 == 0 else s.values[c0:]  # the series itself: memoised results
    r0 = e0 - c0
    lo = trailing_min(v, p.window)[r0:]
    vs = v[r0:]
    with np.errstate(invalid="ignore"):
        candidate = np.isfinite(vs) & ~((lo > 0) & (vs < p.factor * lo))
    cand = np.flatnonzero(candidate) + r0
    med, _ = trailing_median_mad_at(v, p.window, p.min_points, cand, mad=False)
    with np.errstate(invalid="ignore"):
        # Non-finite points are `nonfinite`'s business (not candidates).
        elevated = cand[(v[cand] >= p.factor * med) & (med > 0)]
    idx = elevated[consecutive_runs(elevated) > p.consecutive] + c0
    idx = idx[idx >= i0]
    if idx.size:
        yield Hits("train_loss", idx)
