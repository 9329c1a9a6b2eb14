"""CS5xx: optimiser settings out of band (update ratio, learning rate)."""

from __future__ import annotations

import dataclasses

import numpy as np

from tb_crash_signals.analysis import stats
from tb_crash_signals.analysis.rules.base import Hits, fmt, rule, since_index
from tb_crash_signals.analysis.stats import run_lengths

_CHUNK = 1 << 16  # points per step of lr-rising's scan for the first decay


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
def update_ratio_high(data, p: UpdateRatioParams, since=None):
    """Parameter updates are too large relative to the parameters.

    Fires when |delta theta| / |theta| stays above `high` for `consecutive`
    logged points (after `warmup`).
    """
    yield from _out_of_band(data, p, above=True, since=since)


@rule(
    code="CS502", symbol="update-ratio-low", family="optimizer", severity="warning",
    signals=("update_ratio",), params=UpdateRatioParams,
    describe=lambda ep, p: _describe_ratio(ep, p, False), peak="min",
    advice="the weights barely move: raise the learning rate, check that the schedule did "
    "not decay to zero and that parameters are not frozen",
)
def update_ratio_low(data, p: UpdateRatioParams, since=None):
    """Parameter updates are too small to learn anything.

    Fires when |delta theta| / |theta| stays below `low` for `consecutive`
    logged points (after `warmup`).
    """
    yield from _out_of_band(data, p, above=False, since=since)


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
def lr_nonpositive(data, p: LrNonPositiveParams, since=None):
    """The learning rate is negative, or zero for several points in a row."""
    s = data.get("lr")
    if s is None or len(s) == 0:
        return
    i0, a = _run_start(s, since, p.consecutive)
    v = s.values[a:]
    with np.errstate(invalid="ignore"):
        if not (v <= 0).any():  # the usual case: nothing to find
            return
        hit = (v < 0) | (run_lengths(v == 0) >= p.consecutive)
    idx = np.flatnonzero(hit) + a
    idx = idx[idx >= i0]
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
def lr_jump(data, p: LrJumpParams, since=None):
    """The learning rate multiplies by more than `factor` from one point to the next."""
    s = data.get("lr")
    if s is None or len(s) <= p.warmup + 1:
        return
    v = s.values
    a = max(since_index(s, since), 1)  # jump[j] compares point a + j with the one before
    with np.errstate(invalid="ignore"):
        jump = (v[a:] > p.factor * v[a - 1 : -1]) & (v[a - 1 : -1] > 0)
    jump[: max(p.warmup + 1 - a, 0)] = False  # points 1 .. warmup
    idx = np.flatnonzero(jump) + a
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
def lr_rising(data, p: LrJumpParams, since=None):
    """After warm-up and some decay, the learning rate rises well above its earlier peak.

    Cyclic schedules that return to the same peak do not fire.
    """
    s = data.get("lr")
    if s is None or len(s) < 2:
        return
    decay = _first_decay(s.values)
    if decay is None:
        return
    # The schedule's peak as of the first point where it had clearly decayed.
    first, peak = decay
    a = max(since_index(s, since), first + 1, p.warmup)
    v = s.values[a:]
    with np.errstate(invalid="ignore"):
        hit = np.isfinite(v) & (v > p.peak_factor * peak)
    idx = np.flatnonzero(hit) + a
    if idx.size:
        yield Hits("lr", idx)


def _first_decay(values):
    """(first i where values[i] < 0.5 x the running peak of the finite values, that peak), or None.

    Continues the scan where the previous analysis of the run left it
    (stats.carried): once found, the decay point never changes.
    """
    got = stats.carried("lr-rising decay")  # (points scanned, running peak, decay or None)
    done, peak, found = got if got is not None and got[0] <= values.shape[0] else (0, np.nan, None)
    if found is None:
        found, peak = _scan_decay(values, done, peak)
    stats.carry("lr-rising decay", (values.shape[0], peak, found))
    return found


def _scan_decay(values, start: int, peak):
    """_first_decay over values[start:], the running peak before `start` being `peak`.

    Returns (the decay or None, the running peak at the end). Scans in
    chunks and runs the (slow, sequential) running maximum only over a chunk
    that can hold the decay: its minimum below half the peak so far.
    """
    for a in range(start, values.shape[0], _CHUNK):
        part = values[a : a + _CHUNK]
        v = np.where(np.isfinite(part), part, np.nan)
        top = np.fmax(peak, np.fmax.reduce(v))
        with np.errstate(invalid="ignore"):
            if np.fmin.reduce(v) < 0.5 * top:
                running = np.fmax(np.fmax.accumulate(v), peak)
                below = np.flatnonzero(v < 0.5 * running)
                if below.size:
                    return (a + int(below[0]), running[below[0]]), top
        peak = top
    return None, peak
