"""CS112, CS102: loss and grad-norm spikes out of their local range and noise."""

from __future__ import annotations

import dataclasses
import math
from itertools import islice

import numpy as np

from tb_crash_signals.analysis.rules.base import (
    Hits,
    fmt,
    learnt_to,
    max_noise_param,
    noise_window_param,
    param,
    rule,
    since_index,
)
from tb_crash_signals.analysis.rules.growth import LOSS_BEST_SMOOTH
from tb_crash_signals.analysis.signals import SIGNAL_LABELS
from tb_crash_signals.analysis.stats import (
    best_levels,
    finite_anchor,
    initial_level,
    known_level_at,
    noise_decades,
    trailing_max,
    trailing_median_mad_at,
    trailing_min,
)
from tb_crash_signals.analysis.streaming import Quiet, Stream, StreamHit, shared_level, tail_median

_RECOVERY_LIMIT = 200  # points after a spike in which its recovery is looked for
_FAST = 5  # a recovery within this many points is fast
NOT_RECOVERED = "not recovered"  # a spike's note once _RECOVERY_LIMIT points passed without its recovery


@dataclasses.dataclass(frozen=True)
class SpikeParams:
    window: int = param(50, "trailing points forming the baseline (median) and the local range (max)", at_least=2)
    min_points: int = param(20, "points needed before the rule can fire (warm-up)")
    min_ratio: float = param(3.0, "the point must be at least this multiple of the baseline median", above=0.0)
    envelope: float = param(
        2.0, "... and at least this multiple of the largest of those points: out of the local noise"
    )
    min_rise: float = param(
        0.05, "... and above the median by at least this share of the run's initial level (the median "
        "of its first 10 points), so a jump between two losses near zero is no spike"
    )
    min_undo: float = param(
        0.2, "... and by at least this share of the progress the run has made (its initial level minus "
        "its best level, the lowest median of 31 points): a single tiny batch near the noise floor "
        "reaches 5-10x its median (a regression's 0.1 on a median of 0.015, having started at 1.0); a "
        "spike that matters throws back a good part of what the run learnt; 0: never", at_least=0.0,
    )
    noise_window: int = noise_window_param(from_recent=True)
    max_noise: float = max_noise_param("spike")
    cooldown: int = param(10, "quiet points after which a new episode starts")


@dataclasses.dataclass(frozen=True)
class GradSpikeParams(SpikeParams):
    min_ratio: float = param(5.0, "the grad norm must be at least this multiple of its baseline median", above=0.0)
    min_rise: float = param(0.0, "unused for the grad norm (it has no initial level to speak of)")
    min_undo: float = param(0.0, "unused for the grad norm (it makes no progress to undo)")
    learnt: float = param(
        0.01, "no spike while the train loss's level (the median of its last 31 points) is at most this "
        "share of its initial level: a loss learnt two decades down (an easy or separable task) leaves "
        "the grad norm at a hundredth of its early size, where one batch's gradient jumps 10x without "
        "moving the loss (healthy runs of the kind: 4-8 such spikes in 3 000 steps); a spike that "
        "matters there moves the loss, which CS112 reads; 0: never", at_least=0.0,
    )


def is_spike(x, med, top, init, noise, p: SpikeParams, best=math.nan) -> bool:
    """The decision at a point x against the median and max of the window before it, the run's
    initial and best levels and the noise of the longer window (shared by the batch rule and its
    stream)."""
    if not (math.isfinite(x) and med > 0 and x >= p.min_ratio * med and x >= p.envelope * top):
        return False
    if p.min_rise > 0 and not (x - med >= p.min_rise * init):
        return False
    if p.min_undo > 0 and init > best and not (x - med >= p.min_undo * (init - best)):
        return False
    return not noise >= p.max_noise


def spike_note(value, baseline) -> str:
    ratio = value / baseline if baseline > 0 else math.nan
    return f"{fmt(ratio)}x its recent median {fmt(baseline)}"


def _spike_index(values, p: SpikeParams, i0: int):
    """Indices >= i0 where the series spikes, and the baseline median at each."""
    # A decision at i reads the `window` points before it, forward-filled: the slice starts
    # at the last good point before them (the whole series when i0 is near its start).
    look = max(p.window, p.min_points)
    c0 = 0 if i0 <= look else finite_anchor(values, i0 - look)
    x = values if c0 == 0 else values[c0:]  # the series itself: memoised results
    r0 = i0 - c0
    top = trailing_max(x, p.window)[r0:]
    xs = x[r0:]
    with np.errstate(invalid="ignore"):
        # A window holding a point under zero (a likelihood's loss crossing it) has no ratio.
        candidate = (xs >= p.envelope * top) & np.isfinite(xs) & (trailing_min(x, p.window)[r0:] >= 0)
    candidate[: max(p.min_points - i0, 0)] = False
    cand = np.flatnonzero(candidate) + r0
    if cand.size == 0:
        return cand, np.zeros(0)
    med, _ = trailing_median_mad_at(x, p.window, p.min_points, cand, mad=False)
    init, known_after = initial_level(values)
    best = best_levels(values, LOSS_BEST_SMOOTH) if p.min_undo > 0 else None
    keep = []
    for j, i in enumerate(cand.tolist()):
        g = i + c0
        noise = noise_decades(values[max(g - p.noise_window, 0) : g])
        level = init if g > known_after else math.nan
        low = math.nan if best is None else float(best[g])
        if is_spike(float(x[i]), float(med[j]), float(top[i - r0]), level, noise, p, low):
            keep.append(j)
    keep = np.asarray(keep, dtype=np.int64)
    return cand[keep] + c0, med[keep]


class Recovery:
    """How a series comes back after a spike: the first later point at or
    below a quarter of the way from the baseline to the spike, within
    `_RECOVERY_LIMIT` points. Fed point by point (the stream's follow); the
    batch rule feeds it the points after the spike."""

    __slots__ = ("start_step", "level", "seen", "note", "done")

    def __init__(self, start_step, peak, baseline):
        self.start_step = start_step
        self.level = baseline + 0.25 * (peak - baseline)
        self.seen = 0
        self.note = "not recovered yet"
        self.done = False

    def push(self, step, v):
        """Takes the next point; returns the note when it changes, else None."""
        self.seen += 1
        if v <= self.level and math.isfinite(v):
            kind = "fast" if self.seen - 1 < _FAST else "slow"
            took = int(step) - int(self.start_step)
            self.note = f"{kind} recovery in {took} step{'s' if took != 1 else ''}"
            self.done = True
            return self.note
        if self.seen >= _RECOVERY_LIMIT:
            self.note, self.done = NOT_RECOVERED, True
            return self.note
        return None


def recovery_note(s, start, baseline) -> str | None:
    """The recovery of the spike at index `start` of series `s` (None without a baseline)."""
    if not np.isfinite(baseline):
        return None
    watch = Recovery(s.steps[start], s.values[start], baseline)
    after = s.values[start + 1 : start + 1 + _RECOVERY_LIMIT]
    with np.errstate(invalid="ignore"):
        back = np.flatnonzero(np.isfinite(after) & (after <= watch.level))
    if back.size:
        watch.seen = int(back[0])
        watch.push(s.steps[start + 1 + back[0]], after[back[0]])
    elif after.size >= _RECOVERY_LIMIT:
        watch.note = NOT_RECOVERED
    return watch.note


def _spike_hits(signal, s, p, since, drop=None):
    """Hits at the spikes of series s from `since` on, less those `drop(steps)` marks."""
    idx, med = _spike_index(s.values, p, since_index(s, since))
    if idx.size and drop is not None:
        keep = ~drop(s.steps[idx])
        idx, med = idx[keep], med[keep]
    if idx.size == 0:
        return None
    base = dict(zip(idx.tolist(), med.tolist()))

    def note(i):
        b = base[i]
        rec = recovery_note(s, i, b)
        return spike_note(s.values[i], b) + (f"; {rec}" if rec else "")

    return Hits(signal, idx, note=note, note_lookahead=_RECOVERY_LIMIT)


def _describe_spike(ep, p):
    span = ep.end_step - ep.start_step
    where = f"step {ep.start_step}" + (f" (+{span} steps)" if span else "")
    return f"{SIGNAL_LABELS[ep.signal]} spike at {where}: {ep.note}"


class _SpikeStream(Stream):
    """loss-spike and grad-norm-spike, point by point, as `_spike_index` decides."""

    @classmethod
    def needs(cls, p, signal):
        return [(signal, p.window, False)]

    def __init__(self, p, signal, channels):
        self.p = p
        self.size = p.window
        self.min_points = p.min_points
        self.channel = ch = channels[signal]
        self.window = ch.window
        self.median = tail_median(ch, p.window)  # of the points before
        # The best level, pushed by the monitor at every point (so the screen may skip this stream).
        self.best = shared_level(ch, LOSS_BEST_SMOOTH, best=True) if p.min_undo > 0 else None
        self.loss_level = self.loss_initial = None  # the train loss's, read by the grad norm's (`learnt`)

    def quiet(self):
        # Not a candidate (x >= envelope x the window's max >= envelope x the last point), or
        # below min_ratio x the window's min <= its median: see check.
        return Quiet(prev_factor=self.p.envelope if self.p.envelope > 0 else None,
                     floor_factor=self.p.min_ratio)

    def check(self, i, step, v):
        # Keeps no state of its own: the screen may skip it (see quiet).
        if i < self.min_points or not v - v == 0.0:
            return None
        window, p = self.window, self.p
        lo = window.lower_bound()
        if lo > 0:
            if v < p.min_ratio * lo:
                return None
        elif not window.minimum(self.size) >= 0:
            return None
        top = window.maximum(self.size)
        if not v >= p.envelope * top:
            return None
        med = self.median.before(i, i, p.min_points)
        # The noise (a numpy pass over noise_window points) is is_spike's last test: only then.
        best = math.nan if self.best is None else self.best.low
        if not is_spike(v, med, top, self.channel.initial.value, math.nan, p, best):
            return None
        if self.loss_level is not None and learnt_to(self.loss_level.value, self.loss_initial.value, p.learnt):
            return None
        values = self.channel.values  # the raw recent points, this one last
        before = list(islice(values, max(len(values) - 1 - p.noise_window, 0), len(values) - 1))
        if noise_decades(before) >= p.max_noise:
            return None
        return StreamHit(note=spike_note(v, med), follow=Recovery(step, v, med))


class LossSpikeStream(_SpikeStream):
    hits = ("train_loss",)


class GradSpikeStream(_SpikeStream):
    hits = ("grad_norm",)

    def __init__(self, p, signal, channels):
        super().__init__(p, signal, channels)
        if p.learnt > 0:
            loss = channels["train_loss"]  # taken before the grad norm at a step (ORDER)
            # Its `value` is the level (the best level's window, shared with CS112 and CS113).
            self.loss_level = shared_level(loss, LOSS_BEST_SMOOTH, best=True)
            self.loss_initial = loss.initial


@rule(
    code="CS112", objective=True, symbol="loss-spike", family="spike", severity="warning",
    signals=("train_loss",), params=SpikeParams, describe=_describe_spike,
    stream=LossSpikeStream,
    advice="inspect the data batch at the spike step; repeated spikes call for a lower "
    "learning rate, warm-up or gradient clipping",
)
def loss_spike(data, p: SpikeParams, since=None):
    """The train loss jumps far out of its local range.

    Condition: the loss is at least `min_ratio` x the median of the previous
    `window` points and `envelope` x their largest (out of the local noise,
    so a heavy-tailed small-batch loss does not spike on its ordinary jumps),
    rises above that median by `min_rise` of the run's initial level and by
    `min_undo` of the progress the run has made, and the series is not pure
    noise at this scale (the quartiles of its last `noise_window` points less
    than `max_noise` decades apart). The median
    baseline is robust: a spike does not inflate its own baseline. The
    message classifies the recovery as fast (< 5 points), slow, or none. A
    window holding a point under zero (a negative log-likelihood going through
    zero) gives no ratio: no spike is read there.
    """
    s = data.get("train_loss")
    if s is not None and len(s) > p.min_points:
        hits = _spike_hits("train_loss", s, p, since=since)
        if hits is not None:
            yield hits


@rule(
    code="CS102", symbol="grad-norm-spike", family="spike", severity="warning",
    signals=("grad_norm", "train_loss"), params=GradSpikeParams, describe=_describe_spike,
    stream=GradSpikeStream,
    advice="a batch produced an outsized gradient: clip gradients and inspect the batch",
)
def grad_norm_spike(data, p: GradSpikeParams, since=None):
    """The gradient norm jumps far out of its local range.

    As `loss-spike`, with `min_ratio` 5: healthy grad norms wander 3x around
    their median; none while the train loss stands `learnt` (a hundredth) of
    its initial level or under.
    """
    s = data.get("grad_norm")
    if s is not None and len(s) > p.min_points:
        train = data.get("train_loss")
        drop = None
        if p.learnt > 0 and train is not None and len(train):
            def drop(steps):
                level, init = known_level_at(train, LOSS_BEST_SMOOTH, steps)
                with np.errstate(invalid="ignore"):
                    return learnt_to(level, init, p.learnt)
        hits = _spike_hits("grad_norm", s, p, since=since, drop=drop)
        if hits is not None:
            yield hits
