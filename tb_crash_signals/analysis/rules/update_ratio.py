"""CS501, CS502: parameter updates too large or too small for the parameters (update ratio)."""

from __future__ import annotations

import dataclasses

import numpy as np

from tb_crash_signals.analysis.rules.base import BandEdge, Hits, fmt, learnt_to, param, rule, since_index
from tb_crash_signals.analysis.stats import known_level_at, run_lengths
from tb_crash_signals.analysis.streaming import HIT, Stream, shared_level

# The train loss's level CS502 reads: its trailing median of this many points (CS301's).
LOSS_SMOOTH = 9


@dataclasses.dataclass(frozen=True)
class UpdateRatioParams:
    low: float = param(1e-5, "healthy lower bound of |delta theta| / |theta| per step")
    high: float = param(
        1e-1, "healthy upper bound (DeepDiagnosis: outside [1e-5, 1e-1] is a learning-rate problem)"
    )
    consecutive: int = param(
        3, "points out of band in a row before the rule fires (update ratio is often logged "
        "every ~10 steps)"
    )
    warmup: int = param(3, "points ignored at the start (the first updates are large)")
    cooldown: int = param(10, "points back in band after which a new episode starts")


@dataclasses.dataclass(frozen=True)
class UpdateRatioLowParams(UpdateRatioParams):
    consecutive: int = param(
        8, "points under the band in a row before the rule fires: the updates of a run that has "
        "converged dip under it for a few points (an easy task near zero loss, a decayed schedule); "
        "a learning rate far too low keeps them there"
    )
    converged: float = param(
        1e-3, "... and not while the train loss's level (the median of its last 9 points) is at most this "
        "share of its initial level: a loss that fell three decades has little left to learn, and its "
        "updates shrink with its gradient (a memorised training set, a batch overfit on purpose), whatever "
        "the learning rate; 0: never", at_least=0.0,
    )


def _run_start(s, since, consecutive: int) -> tuple[int, int]:
    """(i0, a): hits are wanted from i0; runs of `consecutive` points are counted from a."""
    i0 = since_index(s, since)
    return i0, (max(i0 - consecutive, 0) if consecutive > 0 else 0)


def _out_of_band(data, p, above: bool, since):
    s = data.get("update_ratio")
    if s is None or len(s) == 0:
        return
    i0, a = _run_start(s, since, p.consecutive)
    v = s.values[a:]
    with np.errstate(invalid="ignore"):
        out = (v > p.high) if above else ((v < p.low) & (v >= 0))
    out[: max(p.warmup - a, 0)] = False
    idx = np.flatnonzero(run_lengths(out) >= p.consecutive) + a
    idx = idx[idx >= i0]
    train = data.get("train_loss")
    if idx.size and not above and p.converged > 0 and train is not None and len(train):
        # The loss is taken before the update ratio at a step: its level at the same step counts.
        level, init = known_level_at(train, LOSS_SMOOTH, s.steps[idx])
        with np.errstate(invalid="ignore"):
            idx = idx[~learnt_to(level, init, p.converged)]
    if idx.size:
        yield Hits("update_ratio", idx)


def _describe_ratio(ep, p, above):
    bound = p.high if above else p.low
    word = "above" if above else "below"
    return (
        f"update ratio {fmt(ep.peak_value)} {word} the healthy band's {fmt(bound)} "
        f"from step {ep.start_step}"
    )


class _RatioBand(Stream):
    hits = ("update_ratio",)
    above = True

    def __init__(self, p, signal, channels):
        self.high, self.low = p.high, p.low
        self.warmup, self.consecutive = p.warmup, p.consecutive
        self.run = 0

    def check(self, i, step, v):
        out = (v > self.high) if self.above else (v < self.low and v >= 0)
        self.run = self.run + 1 if out and i >= self.warmup else 0
        return HIT if self.run >= self.consecutive else None


class RatioHighStream(_RatioBand):
    above = True


class RatioLowStream(_RatioBand):
    above = False

    def __init__(self, p, signal, channels):
        super().__init__(p, signal, channels)
        self.converged = p.converged
        loss = channels["train_loss"]
        self.level = shared_level(loss, LOSS_SMOOTH)
        self.initial = loss.initial  # the loss is taken before the update ratio at a step

    def check(self, i, step, v):
        hit = super().check(i, step, v)
        if hit is not None and self.converged > 0:
            if learnt_to(self.level.value, self.initial.value, self.converged):
                return None
        return hit


@rule(
    code="CS501", symbol="update-ratio-high", family="optimizer", severity="warning",
    signals=("update_ratio",), params=UpdateRatioParams,
    describe=lambda ep, p: _describe_ratio(ep, p, True),
    stream=RatioHighStream, overlays=(BandEdge("update_ratio", "high", "high"),),
    advice="each step changes the weights too much: lower the learning rate or add warm-up",
)
def update_ratio_high(data, p: UpdateRatioParams, since=None):
    """Parameter updates are too large relative to the parameters.

    Fires when |delta theta| / |theta| stays above `high` for `consecutive`
    logged points (after `warmup`).
    """
    yield from _out_of_band(data, p, above=True, since=since)


@rule(
    code="CS502", symbol="update-ratio-low", family="optimizer", severity="warning",
    signals=("update_ratio", "train_loss"), params=UpdateRatioLowParams,
    describe=lambda ep, p: _describe_ratio(ep, p, False), peak="min",
    stream=RatioLowStream, overlays=(BandEdge("update_ratio", "low", "low"),),
    advice="the weights barely move: raise the learning rate, check that the schedule did "
    "not decay to zero and that parameters are not frozen",
)
def update_ratio_low(data, p: UpdateRatioLowParams, since=None):
    """Parameter updates are too small to learn anything.

    Fires when |delta theta| / |theta| stays below `low` for `consecutive`
    logged points (after `warmup`), unless the train loss's level has fallen
    to `converged` x its initial level or under: a loss that learnt nearly
    all there was to learn takes small steps, its gradient nearly gone.
    """
    yield from _out_of_band(data, p, above=False, since=since)
