"""CS303: the train loss levelled off after it learnt (a note, not an alarm)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tb_crash_signals.analysis.rules.base import (
    Hits,
    fmt,
    max_noise_param,
    noise_window_param,
    param,
    rule,
    since_index,
)
from tb_crash_signals.analysis.rules.plateau import (
    LR_FELL,
    AsOf,
    Patience,
    learnt_level,
    lr_course,
    plateau_patience,
    smoothed_loss,
    stalls,
)
from tb_crash_signals.analysis.stats import initial_level, noisy_at
from tb_crash_signals.analysis.streaming import (
    Level,
    Stream,
    StreamHit,
    recent_logs,
    shared_level,
    small_median,
)

_inf = math.inf


@dataclasses.dataclass(frozen=True)
class ConvergedParams:
    smooth: int = param(
        21, "trailing points whose median is the smoothed loss: a longer median than CS301's, so a noisy "
        "per-step loss is not told converged in a lull"
    )
    rel_improvement: float = param(
        0.02, "progress means the best smoothed loss fell by at least this fraction over the patience window"
    )
    min_patience: int = param(30, "points the best must have stood still before the rule tells it")
    patience_fraction: float = param(
        0.35, "... or this share of the points logged so far, if larger: a third of a run spent without "
        "progress is compute the run could have saved", at_least=0.0, at_most=1.0,
    )
    max_patience: int = param(2000, "... but never more than this many points (bounds the monitor's history)")
    learnt: float = param(
        0.75, "only once the smoothed loss is under this share of the initial level (the median of the "
        "first 10 points): a stall above it is stuck near where it started, CS301's warning (CS301's "
        "`stuck`, the same share)"
    )
    coarse_every: float = param(
        25.0, "a loss whose first `coarse_points` points lie this many steps apart or more on average "
        "(Lightning logs every 50 steps) is read over `coarse_smooth`-point medians with a patience of "
        "`coarse_patience` points: a run of 1 200 steps logged every 50 holds 24 points, fewer than "
        "`min_patience`; 0: never", at_least=0.0,
    )
    coarse_points: int = param(6, "... points that tell the cadence (nothing is told before them)", at_least=2)
    coarse_smooth: int = param(5, "... the smoothed loss of such a loss: the median of this many points", at_least=1)
    coarse_patience: int = param(
        8, "... and the least patience, in points (each 25 steps or more of training)", at_least=6,
    )
    start_points: int = param(
        3, "... and learnt is read there against the median of the first this many points, or the first "
        "point, when higher than the initial level: logged every 50 steps, a loss fell most of its fall "
        "before its second point, and the median of its first 10 is a level it learnt", at_least=1, at_most=10,
    )
    noise_window: int = noise_window_param()
    max_noise: float = max_noise_param("note")
    cooldown: int = param(50, "points after which a new episode starts")


def _describe_converged(ep, p):
    return (
        f"train loss levelled off after it learnt: not {p.rel_improvement:.0%} lower in "
        f"{ep.note or 'many points'} (around {fmt(ep.start_value)} at step {ep.start_step})"
    )


def _note(patience) -> str:
    return f"{int(patience)} points"


def coarse_cadence(steps, p) -> bool:
    """Whether a loss is read coarsely (`coarse_every`): its first `coarse_points` points lie
    `coarse_every` steps apart or more on average."""
    k = p.coarse_points - 1
    return p.coarse_every > 0 and len(steps) > k and int(steps[k]) - int(steps[0]) >= p.coarse_every * k


class CoarseHead:
    """A stream's first `coarse_points` points, until they tell the cadence (coarse_cadence)."""

    __slots__ = ("last", "first_step", "values", "every")

    def __init__(self, p):
        self.last = p.coarse_points - 1 if p.coarse_every > 0 else -1  # the point that tells it
        self.first_step = None
        self.values = []
        self.every = p.coarse_every

    def coarse(self, i, step, v) -> bool:
        """Takes point i; whether the cadence is now told coarse (at the last of the points only)."""
        if i == 0:
            self.first_step = step
        self.values.append(v)
        return i == self.last and step - self.first_step >= self.every * i

    def reading(self, k: int, cap: int):
        """A coarse loss's own level of `k` points over the points before the one being told (its
        check pushes that one), with its bests as of each (an AsOf of `cap`) and the last of them."""
        level, bests, best = Level(k), AsOf(cap), math.nan
        for j, x in enumerate(self.values[:-1]):
            level.push(x)
            if not level.low == best:
                best = level.low
                bests.changed(j, best)
        return level, bests, best


class ConvergedStream(Stream):
    """loss-levelled-off, point by point (the learning rate's peak read from its channel)."""

    hits = ("train_loss",)

    def __init__(self, p, signal, channels):
        loss = channels["train_loss"]
        self.p = p
        self.level = shared_level(loss, p.smooth)
        self.initial = loss.initial  # pushed after the checks: as of the points before
        self.learnt_at = math.nan  # learnt x learnt_from, once the initial level is known
        self.coarse = False  # True once the cadence is told coarse: the level is then the stream's own
        self.head = CoarseHead(p)  # until the cadence is told, then None
        self.decide_at = self.head.last
        self.noise = recent_logs(loss, p.noise_window, np.log10)  # of the points before
        self.own = getattr(self.noise, "values", None)  # kept by the stream itself, if at all
        self.lr = channels["lr"]  # updated before the loss
        self.rel, self.learnt = p.rel_improvement, p.learnt
        self.patience = Patience(p)
        # At most the patience at any point, and not before the cadence is told.
        self.least = max(self.patience.least, self.decide_at)
        # The best smoothed loss, and the learning rate's peak (-inf before any), as of each of the
        # last `cap` points: both monotone.
        self.bests = AsOf(self.patience.cap)
        self.peaks = AsOf(self.patience.cap)
        self.best = self.peak = math.nan  # the last values pushed to them (NaN: none yet)

    def check(self, i, step, v):
        if i <= self.decide_at:
            self._head(i, step, v)
        level = self.level
        if self.coarse:
            level.push(v)
        # AsOf.push's own test first, without its call: both change at few points.
        best = level.low
        if not best == self.best:  # a change (its last is the last pushed)
            self.best = best
            self.bests.changed(i, best)
        peak = self.lr.max_finite
        if not peak == self.peak:
            self.peak = peak
            self.peaks.changed(i, peak)
        hit = None
        # Not before the least patience (see _check's first test), and only once learnt (NaN until
        # the initial level is known).
        if i >= self.least and v - v == 0.0:
            at = self.learnt_at
            if at != at:
                at = self._learnt_at()
            if level.value < at:
                hit = self._check(i, best, peak)
        if self.own is not None:
            self.own.append(v)
        return hit

    def _head(self, i, step, v):
        """At the point that tells the cadence, a coarse loss's level becomes the stream's own."""
        head = self.head
        if head.coarse(i, step, v):
            p = self.p
            self.coarse = True
            self.patience = Patience(dataclasses.replace(p, min_patience=p.coarse_patience))
            self.least = max(self.patience.least, self.decide_at)
            self.level, self.bests, self.best = head.reading(p.coarse_smooth, self.patience.cap)
        if i == self.decide_at:
            self.head = None

    def _learnt_at(self):
        """learnt x learnt_from, once the initial level is known (NaN before)."""
        initial = self.initial
        if initial.value == initial.value:
            ref = initial.value
            if self.coarse:
                head = initial.head
                ref = max(ref, small_median(head[: self.p.start_points]), head[0])
            self.learnt_at = self.learnt * ref
        return self.learnt_at

    def _check(self, i, best, peak):
        patience = self.patience.at(i)
        if i < patience:
            return None
        start = i - patience
        ref = self.bests.as_of(start)
        if not best > ref - self.rel * abs(ref):
            return None
        then = self.peaks.as_of(start)
        if peak > then and then != -_inf:  # a new peak since the stall began: a warm-up, not convergence
            return None
        if self.noise.noise_decades() >= self.p.max_noise:
            return None
        return StreamHit(note=_note(patience))


@rule(
    code="CS303", objective=True, start=True, symbol="loss-levelled-off", family="plateau", severity="info",
    signals=("train_loss",), params=ConvergedParams, describe=_describe_converged, peak="first",
    stream=ConvergedStream,
    advice="the loss no longer improves at this learning rate: stop the run (keep its best checkpoint) "
    "or lower the learning rate to go further",
)
def loss_converged(data, p: ConvergedParams, since=None):
    """The train loss learnt, then levelled off (a note: a run that converged is not sick).

    As CS301, with its smoothed loss (trailing median of `smooth` points) and
    patience P = max(min_patience, patience_fraction x (i+1)), at most
    max_patience: at point i the best smoothed loss so far is not
    `rel_improvement` below the best as of P points earlier. Told only once
    the run has learnt (its smoothed loss under `learnt` x the initial level;
    above it CS301 warns of a loss stuck near its start), while the learning
    rate has reached no new peak over those P points (a loss flat during a
    warm-up has not had its chance yet), and not on a series too noisy to
    tell (`max_noise`). The labelled plateaus of the detection corpus are
    mostly such runs: a loss flat for the last 40 % of its points.

    A loss whose first `coarse_points` points lie `coarse_every` (25) steps
    apart or more on average (Lightning logs every 50 steps) is read
    coarsely: `coarse_smooth`-point medians, a least patience of
    `coarse_patience` points, and learnt against the median of its first
    `start_points` points or its first point where higher than the initial
    level (it fell most of its fall before its second point). Nothing is
    told before the cadence is known.
    """
    s = data.get("train_loss")
    coarse = s is not None and coarse_cadence(s.steps, p)
    if coarse:
        p = dataclasses.replace(p, smooth=p.coarse_smooth, min_patience=p.coarse_patience)
    if s is None or len(s) <= p.min_patience:
        return
    n = len(s)
    i0 = since_index(s, since)
    if i0 >= n:
        return
    hit = stalls(s.values, i0, p)
    if p.coarse_every > 0:
        hit = hit[hit >= p.coarse_points - 1]  # nothing is told before the cadence is
    if hit.size:
        init, known_after = initial_level(s.values)
        if coarse:  # learnt against its first points' level, or its first point (see the params)
            init = learnt_level(s.values, init, known_after, p.start_points)
        now = smoothed_loss(s.values, max(1, p.smooth), int(hit[0]), int(hit[-1]) + 1)[hit - hit[0]]
        _, peak, _ = lr_course(data, s.steps[: hit[-1] + 1], LR_FELL)
        start = hit - plateau_patience(hit, p)
        with np.errstate(invalid="ignore"):
            keep = (hit > known_after) & (now < p.learnt * init) & ~(peak[hit] > peak[start])
        hit = hit[keep]
        if hit.size:
            hit = hit[~noisy_at(s.values, hit, p.noise_window, p.max_noise)]
    if hit.size:
        yield Hits("train_loss", hit, note=lambda i: _note(plateau_patience(np.int64(i), p)))
