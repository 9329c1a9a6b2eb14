"""CS511-CS514: the learning rate out of band (non-positive, jumping, rising after decay, leaping far
above anything the run trained at)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tb_crash_signals.analysis import stats
from tb_crash_signals.analysis.rules.base import Hits, fmt, param, rule, since_index
from tb_crash_signals.analysis.stats import finite_peak, run_lengths
from tb_crash_signals.analysis.streaming import HIT, Quiet, Stream

_CHUNK = 1 << 16  # points per step of lr-rising's scan for the first decay


def ramp_points(v: np.ndarray) -> np.ndarray:
    """For each learning-rate value: whether it rose from the one before to its highest yet (its
    finite peak so far): a ramp still going, not a decay after a restart, nor a cyclic schedule
    climbing back to the peak it had."""
    up = np.zeros(v.shape[0], bool)
    with np.errstate(invalid="ignore"):
        up[1:] = (v[1:] > v[:-1]) & (v[1:] >= finite_peak(v)[1:])
    return up


def ramping_at(lr, steps) -> np.ndarray:
    """For each of `steps`: `ramp_points` as of the learning rate's last point at or before it."""
    if lr is None or len(lr) < 2:
        return np.zeros(np.shape(steps), bool)
    return stats.value_at_or_before(lr.steps, ramp_points(lr.values).astype(np.float64), steps) > 0


def ramping(channel) -> bool:
    """`ramping_at` as of the learning rate channel's last point (the monitor's)."""
    if channel.n < 2:
        return False
    values = channel.values
    return bool(values[-1] > values[-2] and values[-1] >= channel.max_finite)


def _run_start(s, since, consecutive: int) -> tuple[int, int]:
    """(i0, a): hits are wanted from i0; runs of `consecutive` points are counted from a."""
    i0 = since_index(s, since)
    return i0, (max(i0 - consecutive, 0) if consecutive > 0 else 0)


@dataclasses.dataclass(frozen=True)
class LrNonPositiveParams:
    consecutive: int = param(
        3, "zero learning-rate points in a row before the rule fires (schedules legitimately end "
        "at 0 on their last step; a negative learning rate fires at once)"
    )
    cooldown: int = param(10, "points after which a new episode starts")


class LrNonPositiveStream(Stream):
    hits = ("lr",)

    def __init__(self, p, signal, channels):
        self.consecutive = p.consecutive
        # Consecutive zeros, ending at point `last` (kept lazily).
        self.zeros = 0
        self.last = -2

    def quiet(self):
        return Quiet(lo=5e-324) if self.consecutive > 0 else None  # lo: v > 0

    def check(self, i, step, v):
        if v == 0:
            self.zeros = self.zeros + 1 if self.last == i - 1 else 1
            self.last = i
            return HIT if self.zeros >= self.consecutive else None
        return HIT if v < 0 or self.consecutive == 0 else None


@rule(
    code="CS511", symbol="lr-nonpositive", family="optimizer", severity="warning",
    signals=("lr",), params=LrNonPositiveParams, peak="min", stream=LrNonPositiveStream,
    describe=lambda ep, p: (
        f"learning rate is {fmt(ep.start_value)} at step "
        f"{ep.start_step}"
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
        if p.consecutive > 0 and not (v <= 0).any():  # the usual case: nothing to find
            return
        hit = (v < 0) | (run_lengths(v == 0) >= p.consecutive)
    idx = np.flatnonzero(hit) + a
    idx = idx[idx >= i0]
    if idx.size:
        yield Hits("lr", idx)


@dataclasses.dataclass(frozen=True)
class LrJumpParams:
    factor: float = param(
        5.0, "`lr-jump` fires when the learning rate rises more than this multiple in one logged "
        "point (drops are what schedules do)"
    )
    above_peak: float = param(
        1.25, "... and lands above this multiple of its peak before the jump: a return to the peak the "
        "run already trained at is a scheduled restart (SGDR, cosine with restarts), not a fault (the "
        "margin: the peak logged before may be a point past the schedule's own); 0: any jump", at_least=0.0,
    )
    warmup: int = param(3, "points ignored at the start (warm-up ramps from ~0)")
    peak_factor: float = param(
        1.5, "`lr-rising` fires when, after the learning rate has decayed, it climbs above this "
        "multiple of its earlier peak"
    )
    cooldown: int = param(10, "points after which a new episode starts")


class _RiseStream(Stream):
    """A learning-rate rule that fires only where the rate rose over `factor` x its point before
    (a jump; a leap over `factor` x the peak before is one too), from its `warmup` + 1-th point:
    the monitor's screen skips it at every other point."""

    hits = ("lr",)

    def __init__(self, p, signal, channels):
        self.factor = p.factor
        self.min_i = p.warmup + 1
        self.channel = channels[signal]

    def quiet(self):
        return Quiet(prev_factor=self.factor)


class LrJumpStream(_RiseStream):
    def __init__(self, p, signal, channels):
        super().__init__(p, signal, channels)
        self.above_peak = p.above_peak
        self.values = self.channel.values  # holds this point and the ones before

    def check(self, i, step, v):
        if i >= self.min_i:
            prev = self.values[-2]
            # The channel's max_finite is the peak before this point while the checks run.
            if v > self.factor * prev and prev > 0 and v > self.above_peak * self.channel.max_finite:
                return HIT
        return None


@rule(
    code="CS512", symbol="lr-jump", family="optimizer", severity="warning",
    signals=("lr",), params=LrJumpParams, stream=LrJumpStream,
    describe=lambda ep, p: (
        f"learning rate jumped {fmt(ep.prev_value)} -> "
        f"{fmt(ep.start_value)} at step {ep.start_step}"
    ),
    advice="a sudden learning-rate increase often triggers a loss spike: check the "
    "scheduler (restarts, a resumed run with a reset schedule)",
)
def lr_jump(data, p: LrJumpParams, since=None):
    """The learning rate multiplies by more than `factor` from one point to the next, to above
    `above_peak` x its peak before: a restart to the peak the run trained at before is a schedule's."""
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
        peak = finite_peak(v)  # NaN never at idx - 1: v[idx - 1] > 0
        with np.errstate(invalid="ignore"):
            idx = idx[v[idx] > p.above_peak * peak[idx - 1]]
    if idx.size:
        yield Hits("lr", idx)


@dataclasses.dataclass(frozen=True)
class LrLeapParams:
    factor: float = param(
        20.0, "the learning rate lands above this multiple of the highest it had before, in one logged "
        "point: an order of magnitude and then some over the rates the run trained at (a 10x jump leaves "
        "most small runs shaken but alive; the 30-60x a scheduler restart gone wrong gives, and more, "
        "crashes them within a few steps)", above=1.0,
    )
    warmup: int = param(
        3, "points ignored at the start (a warm-up from ~0, or a schedule's first coarse points)"
    )
    cooldown: int = param(10, "points after which a new episode starts")


class LrLeapStream(_RiseStream):
    def check(self, i, step, v):
        # The channel's max_finite is the peak before this point while the checks run.
        peak = self.channel.max_finite
        if i >= self.min_i and peak > 0 and v > self.factor * peak and v - v == 0.0:
            return HIT
        return None


@rule(
    code="CS514", symbol="lr-leap", family="optimizer", severity="critical",
    signals=("lr",), params=LrLeapParams, stream=LrLeapStream,
    describe=lambda ep, p: (
        f"learning rate leapt {fmt(ep.prev_value)} -> {fmt(ep.start_value)} at step {ep.start_step}, "
        f"over {fmt(p.factor)}x the highest it had trained at"
    ),
    advice="a learning rate this far above anything the run trained at throws it off within a few "
    "steps: stop it, fix the scheduler (a restart, a resumed run's reset schedule, a unit slip) and "
    "resume from a checkpoint before this step",
)
def lr_leap(data, p: LrLeapParams, since=None):
    """The learning rate leaps in one logged point to more than `factor` x the highest it had
    before: a crash in waiting, flagged before the loss shows it.

    The peak is that of every finite point before (none counts until it is positive); the first
    `warmup` points are not judged. A leap is also a CS512 jump, whose warning stays: this rule
    makes the far ones critical."""
    s = data.get("lr")
    if s is None or len(s) <= p.warmup + 1:
        return
    v = s.values
    a = max(since_index(s, since), p.warmup + 1)
    peak = finite_peak(v)  # peak[i - 1]: the highest finite point before i
    with np.errstate(invalid="ignore"):
        hit = np.isfinite(v[a:]) & (peak[a - 1 : -1] > 0) & (v[a:] > p.factor * peak[a - 1 : -1])
    idx = np.flatnonzero(hit) + a
    if idx.size:
        yield Hits("lr", idx)


class LrRisingStream(Stream):
    hits = ("lr",)

    def __init__(self, p, signal, channels):
        self.p = p
        self.peak = math.nan
        self.first = None
        self.limit = math.nan  # peak_factor x the peak when the lr first decayed
        self.from_i = 0

    def check(self, i, step, v):
        finite = v - v == 0.0
        if finite and not v <= self.peak:  # fmax ignores NaN
            self.peak = v
        if self.first is None:
            if finite and v < 0.5 * self.peak:
                self.first = i
                self.limit = self.p.peak_factor * self.peak
                self.from_i = max(i + 1, self.p.warmup)
            return None
        if finite and v > self.limit and i >= self.from_i:
            return HIT
        return None


@rule(
    code="CS513", symbol="lr-rising", family="optimizer", severity="warning",
    signals=("lr",), params=LrJumpParams, stream=LrRisingStream,
    describe=lambda ep, p: (
        f"learning rate climbed to {fmt(ep.peak_value)} after decaying, above "
        f"{fmt(p.peak_factor)}x its earlier peak (step {ep.start_step})"
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
