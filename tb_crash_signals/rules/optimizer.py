"""CS5xx: optimiser settings out of band (update ratio, learning rate)."""

from __future__ import annotations

import dataclasses

import numpy as np

from tb_crash_signals.rules.base import Hits, fmt, rule
from tb_crash_signals.stats import run_lengths


@dataclasses.dataclass(frozen=True)
class UpdateRatioParams:
    """Parameters of `update-ratio-high` and `update-ratio-low`.

    Attributes:
        low: healthy lower bound of |delta theta| / |theta| per step.
        high: healthy upper bound (DeepDiagnosis: outside [1e-5, 1e-1] is a
            learning-rate problem).
        consecutive: points out of band in a row before the rule fires
            (update ratio is often logged every ~10 steps).
        warmup: points ignored at the start (the first updates are large).
        cooldown: points back in band after which a new episode starts.
    """

    low: float = 1e-5
    high: float = 1e-1
    consecutive: int = 3
    warmup: int = 3
    cooldown: int = 10


def _out_of_band(data, p, above: bool):
    s = data.get("update_ratio")
    if s is None or len(s) == 0:
        return
    v = s.values
    with np.errstate(invalid="ignore"):
        out = (v > p.high) if above else ((v < p.low) & (v >= 0))
    out[: p.warmup] = False
    idx = np.flatnonzero(run_lengths(out) >= p.consecutive)
    if idx.size:
        yield Hits("update_ratio", idx)


def _describe_ratio(ep, p, above):
    s = ep.series
    bound = p.high if above else p.low
    word = "above" if above else "below"
    return (
        f"update ratio {fmt(s.values[ep.peak])} {word} the healthy band's {fmt(bound)} "
        f"from step {int(s.steps[ep.start])}"
    )


@rule(
    code="CS501", symbol="update-ratio-high", family="optimizer", severity="warning",
    signals=("update_ratio",), params=UpdateRatioParams,
    describe=lambda ep, p: _describe_ratio(ep, p, True),
    advice="each step changes the weights too much: lower the learning rate or add warm-up",
)
def update_ratio_high(data, p: UpdateRatioParams):
    """Parameter updates are too large relative to the parameters.

    Fires when |delta theta| / |theta| stays above `high` for `consecutive`
    logged points (after `warmup`).
    """
    yield from _out_of_band(data, p, above=True)


@rule(
    code="CS502", symbol="update-ratio-low", family="optimizer", severity="warning",
    signals=("update_ratio",), params=UpdateRatioParams,
    describe=lambda ep, p: _describe_ratio(ep, p, False), peak="min",
    advice="the weights barely move: raise the learning rate, check that the schedule did "
    "not decay to zero and that parameters are not frozen",
)
def update_ratio_low(data, p: UpdateRatioParams):
    """Parameter updates are too small to learn anything.

    Fires when |delta theta| / |theta| stays below `low` for `consecutive`
    logged points (after `warmup`).
    """
    yield from _out_of_band(data, p, above=False)


@dataclasses.dataclass(frozen=True)
class LrNonPositiveParams:
    """Parameters of `lr-nonpositive`.

    Attributes:
        consecutive: zero learning-rate points in a row before the rule fires
            (schedules legitimately end at 0 on their last step; a negative
            learning rate fires at once).
        cooldown: points after which a new episode starts.
    """

    consecutive: int = 3
    cooldown: int = 10


@rule(
    code="CS511", symbol="lr-nonpositive", family="optimizer", severity="warning",
    signals=("lr",), params=LrNonPositiveParams, peak="min",
    describe=lambda ep, p: (
        f"learning rate is {fmt(ep.series.values[ep.start])} at step "
        f"{int(ep.series.steps[ep.start])}"
    ),
    advice="a zero or negative learning rate stops (or reverses) training: check the "
    "scheduler's configuration and the number of total steps it was given",
)
def lr_nonpositive(data, p: LrNonPositiveParams):
    """The learning rate is negative, or zero for several points in a row."""
    s = data.get("lr")
    if s is None or len(s) == 0:
        return
    v = s.values
    with np.errstate(invalid="ignore"):
        if not (v <= 0).any():  # the usual case: nothing to find
            return
        hit = (v < 0) | (run_lengths(v == 0) >= p.consecutive)
    idx = np.flatnonzero(hit)
    if idx.size:
        yield Hits("lr", idx)


@dataclasses.dataclass(frozen=True)
class LrJumpParams:
    """Parameters of `lr-jump` and `lr-rising`.

    Attributes:
        factor: `lr-jump` fires when the learning rate rises more than this
            multiple in one logged point (drops are what schedules do).
        warmup: points ignored at the start (warm-up ramps from ~0).
        peak_factor: `lr-rising` fires when, after the learning rate has
            decayed, it climbs above `peak_factor` x its earlier peak.
        cooldown: points after which a new episode starts.
    """

    factor: float = 5.0
    warmup: int = 3
    peak_factor: float = 1.5
    cooldown: int = 10


@rule(
    code="CS512", symbol="lr-jump", family="optimizer", severity="warning",
    signals=("lr",), params=LrJumpParams,
    describe=lambda ep, p: (
        f"learning rate jumped {fmt(ep.series.values[ep.start - 1])} -> "
        f"{fmt(ep.series.values[ep.start])} at step {int(ep.series.steps[ep.start])}"
    ),
    advice="a sudden learning-rate increase often triggers a loss spike: check the "
    "scheduler (restarts, a resumed run with a reset schedule)",
)
def lr_jump(data, p: LrJumpParams):
    """The learning rate multiplies by more than `factor` from one point to the next."""
    s = data.get("lr")
    if s is None or len(s) <= p.warmup + 1:
        return
    v = s.values
    with np.errstate(invalid="ignore"):
        jump = (v[1:] > p.factor * v[:-1]) & (v[:-1] > 0)
    jump[: p.warmup] = False
    idx = np.flatnonzero(jump) + 1
    if idx.size:
        yield Hits("lr", idx)


@rule(
    code="CS513", symbol="lr-rising", family="optimizer", severity="warning",
    signals=("lr",), params=LrJumpParams,
    describe=lambda ep, p: (
        f"learning rate climbed to {fmt(ep.series.values[ep.peak])} after decaying, above "
        f"{fmt(p.peak_factor)}x its earlier peak (step {int(ep.series.steps[ep.start])})"
    ),
    advice="the learning rate grows after warm-up: check the scheduler direction and "
    "whether the schedule was restarted",
)
def lr_rising(data, p: LrJumpParams):
    """After warm-up and some decay, the learning rate rises well above its earlier peak.

    Cyclic schedules that return to the same peak do not fire.
    """
    s = data.get("lr")
    if s is None or len(s) < 2:
        return
    v = np.where(np.isfinite(s.values), s.values, np.nan)
    peak = np.fmax.accumulate(v)
    with np.errstate(invalid="ignore"):
        decayed = np.flatnonzero(v < 0.5 * peak)
    if decayed.size == 0:
        return
    # The schedule's peak as of the first point where it had clearly decayed.
    first = int(decayed[0])
    with np.errstate(invalid="ignore"):
        hit = v > p.peak_factor * peak[first]
    hit[: max(first + 1, p.warmup)] = False
    idx = np.flatnonzero(hit)
    if idx.size:
        yield Hits("lr", idx)
