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
    lr_course,
    plateau_patience,
    smoothed_loss,
    stalls,
)
from tb_crash_signals.analysis.stats import initial_level, noisy_at
from tb_crash_signals.analysis.streaming import Stream, StreamHit, recent_logs, shared_level

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


class ConvergedStream(Stream):
    """loss-levelled-off, point by point (the learning rate's peak read from its channel)."""

    hits = ("train_loss",)

    def __init__(self, p, signal, channels):
        loss = channels["train_loss"]
        self.p = p
        self.level = shared_level(loss, p.smooth)
        self.initial = loss.initial  # pushed after the checks: as of the points before
        self.noise = recent_logs(loss, p.noise_window, np.log10)  # of the points before
        self.own = getattr(self.noise, "values", None)  # kept by the stream itself, if at all
        self.lr = channels["lr"]  # updated before the loss
        self.rel, self.learnt = p.rel_improvement, p.learnt
        self.patience = Patience(p)
        self.least = self.patience.least  # at most the patience at any point
        # The best smoothed loss, and the learning rate's peak (-inf before any), as of each of the
        # last `cap` points: both monotone.
        self.bests = AsOf(self.patience.cap)
        self.peaks = AsOf(self.patience.cap)
        self.best = self.peak = math.nan  # the last values pushed to them (NaN: none yet)

    def check(self, i, step, v):
        # AsOf.push's own test first, without its call: both change at few points.
        best = self.level.low
        if not best == self.best:  # a change (its last is the last pushed)
            self.best = best
            self.bests.changed(i, best)
        peak = self.lr.max_finite
        if not peak == self.peak:
            self.peak = peak
            self.peaks.changed(i, peak)
        hit = None
        # Learnt (NaN until the initial level is known): the cheapest of its conditions first.
        # Not before min_patience points, under the least patience (see _check's first test).
        if i >= self.least and v - v == 0.0 and self.level.value < self.learnt * self.initial.value:
            hit = self._check(i, best, peak)
        if self.own is not None:
            self.own.append(v)
        return hit

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
    """
    s = data.get("train_loss")
    if s is None or len(s) <= p.min_patience:
        return
    n = len(s)
    i0 = since_index(s, since)
    if i0 >= n:
        return
    hit = stalls(s.values, i0, p)
    if hit.size:
        init, known_after = initial_level(s.values)
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
