"""CS114, CS115: one logged point that is already the crash, under any absolute threshold.

A loss 100x its recent median in one point, a loss that jumps right after the
learning rate did, a loss that multiplied at each of its last points up to 10x
its recent median, or the loss and the grad norm jumping 10x together at the
same step: each is the crash itself, even while the grad norm is still far
under the explosion threshold of small models.
"""

from __future__ import annotations

import collections
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
from tb_crash_signals.analysis.stats import (
    initial_level,
    noise_decades,
    trailing_max,
    trailing_median_mad_at,
    trailing_min,
)
from tb_crash_signals.analysis.streaming import (
    Quiet,
    Stream,
    StreamHit,
    recent_logs,
    tail_median,
)


@dataclasses.dataclass(frozen=True)
class BlowupParams:
    window: int = param(50, "trailing points forming the baseline (median) and the local range (max)", at_least=2)
    min_points: int = param(
        5, "points needed before the rule can fire (a run thrown off by a far too large step in its first "
        "dozen points crashes there)"
    )
    big: float = param(100.0, "a loss at least this multiple of its recent median is a crash by itself")
    after_lr: float = param(
        1.5, "... or this multiple of it (and `envelope` x the window's largest point) right after "
        "the learning rate jumped"
    )
    envelope: float = param(1.3, "see `after_lr`")
    climb: int = param(
        2, "... or the last this-many points each rose `climb_rise` x the one before, up to `climb_big` x "
        "the recent median: an explosion over a few logged points (epoch-level runs cross 100x in three "
        "or four); 0 never", at_most=200,
    )
    climb_rise: float = param(1.5, "see `climb`")
    climb_big: float = param(10.0, "see `climb`")
    climb_from: float = param(
        3.0, "... the point before the crash already at least this multiple of that median: a climb out "
        "of the loss's range, not a noisy per-step loss's rise from a low batch through an ordinary one "
        "to an outlier", at_least=0.0,
    )
    climb_level: float = param(
        0.25, "... and the crash at least this share of the run's initial level (the median of its first 10 "
        "points; before it is known, any level): a per-step loss near zero multiplies from a lucky batch to "
        "an unlucky one (0.004, 0.04, 0.11 of a start at 1.1) without blowing up; 0 any", at_least=0.0,
    )
    lr_factor: float = param(5.0, "a learning-rate jump is a rise by more than this multiple in one logged point")
    lr_lag: int = param(
        3, "the jump is one of the last this-many learning-rate points at or before the loss's step (at "
        "most 255: the monitor keeps the last 256 points of each signal)", at_least=1, at_most=255,
    )
    min_rise: float = param(
        0.05, "the loss must rise above its median by at least this share of the run's initial level "
        "(the median of its first 10 points; before it is known, any rise): jumps between losses near zero are "
        "no crash"
    )
    noise_window: int = noise_window_param()
    max_noise: float = max_noise_param("alarm")
    cooldown: int = param(20, "points after which a new episode starts")


def lr_jumped(lr_values, factor: float):
    """Whether each learning-rate point rose more than `factor` x the one before it."""
    out = np.zeros(lr_values.shape[0], bool)
    with np.errstate(invalid="ignore"):
        out[1:] = (lr_values[1:] > factor * lr_values[:-1]) & (lr_values[:-1] > 0)
    return out


def _lr_jump_before(lr, steps, p: BlowupParams) -> np.ndarray:
    """For each step: the largest learning-rate jump factor among its last `lr_lag` lr points
    at or before it (0 if none jumped)."""
    out = np.zeros(steps.shape[0])
    if lr is None or len(lr) < 2:
        return out
    v = lr.values
    jumped = lr_jumped(v, p.lr_factor)
    if not jumped.any():
        return out
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(jumped, v / np.concatenate([[np.nan], v[:-1]]), 0.0)
    pos = np.searchsorted(lr.steps, steps, side="right") - 1
    for k in range(max(p.lr_lag, 1)):
        at = pos - k
        ok = at >= 0
        out[ok] = np.maximum(out[ok], ratio[at[ok]])
    return out


def blowup_kind(x, med, top, lr_ratio, init, before, p: BlowupParams) -> str | None:
    """Which crash a loss point is (None: none), from its median and max before it, the
    learning-rate jump just before it, the run's initial level and its last `climb` points
    before it, oldest first (shared by the batch rule and its stream)."""
    if not (math.isfinite(x) and med > 0 and x - med >= p.min_rise * (init if init == init else 0.0)):
        return None
    # Right after a jump of the learning rate, a jump of the loss is the learning rate's doing,
    # however large: told so (the run is sick however soon the loss falls back, analysis.recovery).
    if lr_ratio > 0 and x >= p.after_lr * med and x >= p.envelope * top:
        return "lr"
    if x >= p.big * med:
        return "big"
    if (p.climb > 0 and x >= p.climb_big * med and climbed(before, x, p) and before[-1] >= p.climb_from * med
            and not x < p.climb_level * init):
        return "climb"
    return None


def fire_floor(p: BlowupParams, lr_jumped: bool = True) -> float:
    """The smallest multiple of the recent median (so of the window's minimum) at which a point
    can fire: `big`, `climb_big` if climbs count, `after_lr` right after a learning-rate jump."""
    floor = min(p.big, p.climb_big if p.climb > 0 else math.inf)
    return min(floor, p.after_lr) if lr_jumped else floor


def climbed(before, x, p: BlowupParams) -> bool:
    """Whether x ends `climb` points in a row, each `climb_rise` x the one before it."""
    if len(before) < p.climb:
        return False
    for prev in reversed(before):
        if not (prev > 0 and x >= p.climb_rise * prev):
            return False
        x = prev
    return True


# How the note tells a jump the learning rate caused (`after_lr_jump`): no scare the run came back
# from, however soon the loss falls back (analysis.recovery).
AFTER_LR_NOTE = "right after the learning rate jumped"


def after_lr_jump(message: str) -> bool:
    """Whether a CS114 message tells a jump right after the learning rate jumped."""
    return AFTER_LR_NOTE in message


def _note(kind, x, med, lr_ratio, start=None) -> str:
    if kind == "big":
        return f"{fmt(x / med)}x its recent median {fmt(med)} in one point"
    if kind == "climb":
        return f"{fmt(x / med)}x its recent median {fmt(med)}, multiplying at every point from {fmt(start)}"
    return (
        f"{fmt(x / med)}x its recent median {fmt(med)} {AFTER_LR_NOTE} {fmt(lr_ratio)}x"
    )


def _describe_blowup(ep, p):
    return f"train loss blew up at step {ep.start_step}: {ep.note}"


_LR_JUMPS = "loss-blowup: lr jumps"  # the key of the learning rate channel's _LrJumps


class _LrJumps:
    """The learning rate's jumps among its last `lag` points: (index in its channel, ratio to the
    point before), noted by the rule's check on the learning rate, which the monitor's screen calls
    only where the rate may have jumped."""

    __slots__ = ("recent",)

    def __init__(self, lag: int):
        self.recent = collections.deque(maxlen=lag)  # at most one jump a point


class LossBlowupStream(Stream):
    hits = ("train_loss", "lr")  # checked on the loss; the learning rate's jumps are noted as they come

    @classmethod
    def needs(cls, p, signal):
        return [(signal, p.window, False)] if signal == "train_loss" else []

    def __init__(self, p, signal, channels):
        self.p = p
        self.lag = max(p.lr_lag, 1)
        self.lr_channel = channels["lr"]
        self.jumps = self.lr_channel.shared.setdefault(_LR_JUMPS, _LrJumps(self.lag))
        self.on_lr = signal == "lr"
        if self.on_lr:
            self.lr = self.lr_channel.values  # ends with the point checked
            self.check = self._note_jump
            return
        self.window = channels[signal].window
        self.values = channels[signal].values  # ends with the point checked
        self.median = tail_median(channels[signal], p.window)  # of the points before
        self.floor, self.floor_without_lr = fire_floor(p), fire_floor(p, lr_jumped=False)
        self.noise = recent_logs(channels[signal], p.noise_window, np.log10)  # of the points before
        self.own = getattr(self.noise, "values", None)  # kept by the stream itself, if at all
        self.initial = channels[signal].initial  # pushed after the checks: as of the points before

    def quiet(self):
        if self.on_lr:  # a rise of lr_factor x or less is no jump
            return Quiet(prev_factor=self.p.lr_factor)
        # Under min(big, after_lr, climb_big) x the window's min (see _check); nothing to keep
        # unless the stream keeps its own recent points.
        if self.own is not None:
            return None
        return Quiet(floor_factor=self.floor)

    def _note_jump(self, i, step, v):
        """The check on the learning rate: notes its jumps."""
        if i:
            prev = self.lr[-2]
            if prev > 0 and v > self.p.lr_factor * prev:
                self.jumps.recent.append((i, v / prev))
        return None

    def check(self, i, step, v):
        hit = self._check(i, v)
        if self.own is not None:
            self.own.append(v)
        return hit

    def _check(self, i, v):
        p = self.p
        if i < p.min_points or not v - v == 0.0:
            return None
        lo = self.window.lower_bound()
        if lo > 0:
            if v < self.floor * lo:
                return None  # under the smallest multiple of the window's min <= its median
        elif not self.window.minimum(p.window) >= 0:
            return None  # a point under zero in the window: no ratio
        lr_ratio = self._lr_jump()
        if not lr_ratio > 0 and lo > 0 and self.floor_without_lr >= 0 and v < self.floor_without_lr * lo:
            return None  # no jump of the learning rate: only "big" or "climb" could be, and neither is
        med = self.median.before(i, i, p.min_points)
        values = self.values
        n = len(values)
        before = [values[j] for j in range(max(n - 1 - p.climb, 0), n - 1)] if p.climb > 0 else ()
        kind = blowup_kind(v, med, self.window.maximum(p.window), lr_ratio, self.initial.value, before, p)
        if kind is None or self.noise.noise_decades() >= p.max_noise:
            return None
        return StreamHit(note=_note(kind, v, med, lr_ratio, before[0] if before else None))

    def _lr_jump(self):
        """The largest jump among the learning rate's last `lr_lag` points (0 if none)."""
        best = 0.0
        recent = self.jumps.recent
        if recent:
            first = self.lr_channel.n - self.lag
            for j, ratio in recent:
                if j >= first and ratio > best:
                    best = ratio
        return best


@rule(
    code="CS114", objective=True, symbol="loss-blowup", family="divergence", severity="critical",
    signals=("train_loss",), params=BlowupParams, describe=_describe_blowup,
    stream=LossBlowupStream,
    advice="the run crashed at this step: stop it and resume from a checkpoint before it with a "
    "lower learning rate; check the batch and any scheduler restart at this step",
)
def loss_blowup(data, p: BlowupParams, since=None):
    """One train-loss point is the crash: `big` x its recent median, a jump right after the
    learning rate jumped, or the end of a climb that multiplied it at every point.

    Fires on a train loss at least `big` (100) x the median of its previous
    `window` points, or at least `after_lr` x that median and `envelope` x
    their largest while one of the last `lr_lag` learning-rate points rose
    more than `lr_factor` x the one before it (a scheduler restart that
    throws the run off), or at least `climb_big` (10) x that median with
    each of its last `climb` (2) points `climb_rise` (1.5) x the one before,
    the last of them `climb_from` (3) x the median already, and the point at
    least `climb_level` (a quarter) of the run's initial level
    (an explosion over a few logged points: an epoch-level run whose loss
    goes 2.9, 3.4, 11, 31, 80 has crashed at 31). Under any absolute
    threshold: the loss of a small model that explodes from 0.003 to 1.0 is
    a crash at 1.0. A window holding a point under zero (a negative
    log-likelihood going through zero) gives no ratio: no blow-up is read
    there (NaN/Inf and the loss bound still are).
    """
    s = data.get("train_loss")
    if s is None or len(s) <= p.min_points:
        return
    v = s.values
    i0 = since_index(s, since)
    with np.errstate(invalid="ignore"):
        # A window holding a point under zero (a likelihood's loss crossing it) has no ratio.
        low = trailing_min(v, p.window)
        candidate = (low >= 0) & (v >= fire_floor(p) * low)
    candidate[: max(p.min_points, i0)] = False
    cand = np.flatnonzero(candidate)
    if cand.size == 0:
        return
    med, _ = trailing_median_mad_at(v, p.window, p.min_points, cand, mad=False)
    top = trailing_max(v, p.window)[cand]
    lr_ratio = _lr_jump_before(data.get("lr"), s.steps[cand], p)
    init, known_after = initial_level(v)
    hits, notes = [], {}
    for j, i in enumerate(cand.tolist()):
        level = init if i > known_after else math.nan
        before = v[max(i - p.climb, 0):i].tolist() if p.climb > 0 else ()
        kind = blowup_kind(float(v[i]), float(med[j]), float(top[j]), float(lr_ratio[j]), level, before, p)
        if kind is not None and not noise_decades(v[max(i - p.noise_window, 0) : i]) >= p.max_noise:
            hits.append(i)
            notes[i] = _note(kind, float(v[i]), float(med[j]), float(lr_ratio[j]), before[0] if before else None)
    if hits:
        yield Hits("train_loss", np.asarray(hits), note=notes.get)


@dataclasses.dataclass(frozen=True)
class JumpTogetherParams:
    window: int = param(50, "trailing points forming each signal's baseline (median)", at_least=2)
    min_points: int = param(
        2, "points of each signal needed before the rule can fire: a run thrown off by a far too large "
        "step in its first few points crashes there, and both signals 10x their first points together "
        "is no warm-up (a warm-up's grad norm rises while its loss falls)"
    )
    factor: float = param(
        10.0, "the grad norm must be at least this multiple of its recent median, and the train loss "
        "logged at the same step ..."
    )
    loss_factor: float = param(
        10.0, "... at least this multiple of its own (per step, both jump at the same update)"
    )
    min_rise: float = param(
        0.05, "the loss must rise above its median by at least this share of the run's initial level "
        "(the median of its first 10 points; before it is known, any rise): jumps between losses near zero are "
        "no crash"
    )
    noise_window: int = noise_window_param(from_recent=True)
    max_noise: float = max_noise_param("alarm")
    cooldown: int = param(20, "points after which a new episode starts")


@dataclasses.dataclass(frozen=True)
class ValJumpTogetherParams(JumpTogetherParams):
    factor: float = param(
        10.0, "the validation loss must be at least this multiple of its recent median, and the train "
        "loss logged at the same step ..."
    )
    loss_factor: float = param(
        3.0, "... at least this multiple of its own: an epoch's mean train loss (Keras) averages the "
        "batches before the weights broke, the validation loss measured after them holds the break "
        "whole (a transformer's epoch: train 5.9x, validation 55x); a validation loss 10x its recent "
        "evaluations is no noise"
    )


_PARTNERS = {"grad_norm": "grad norm", "val_loss": "validation loss"}


def _describe_together(ep, p):
    return f"{_PARTNERS[ep.signal]} and train loss jumped together at step {ep.start_step}: {ep.note}"


def _together_note(partner, g_ratio, l_ratio) -> str:
    return f"{_PARTNERS[partner]} {fmt(g_ratio)}x and train loss {fmt(l_ratio)}x their recent medians"


class JumpTogetherStream(Stream):
    """CS115's stream, checked on the partner signal (its hits); CS117's reads the validation loss."""

    hits = ("grad_norm",)  # the loss's side is read from its channel

    @classmethod
    def needs(cls, p, signal):
        # The loss's window holds its point of this step too (it is updated first).
        return [(signal, p.window, False), ("train_loss", p.window + 1, False)]

    def __init__(self, p, signal, channels):
        self.p = p
        self.signal = signal
        self.init = channels["train_loss"].initial
        self.window = channels[signal].window
        self.median = tail_median(channels[signal], p.window)  # of the points before
        self.train = channels["train_loss"]
        self.loss_median = tail_median(self.train, p.window)  # of the points before its last
        self.noise = recent_logs(channels[signal], p.noise_window, np.log10)  # of the points before
        self.own = getattr(self.noise, "values", None)  # kept by the stream itself, if at all
        self.loss_noise = recent_logs(self.train, p.noise_window, np.log10)  # before the loss's last point

    def quiet(self):
        # Under `factor` x the window's min (see _check); nothing to keep unless the stream keeps
        # its own recent points.
        if self.own is not None:
            return None
        return Quiet(floor_factor=self.p.factor)

    def check(self, i, step, v):
        hit = self._check(i, step, v)
        if self.own is not None:
            self.own.append(v)
        return hit

    def _check(self, i, step, v):
        p = self.p
        if i < p.min_points or not v - v == 0.0:
            return None
        lo = self.window.lower_bound()
        if lo > 0 and v < p.factor * lo:
            return None
        train = self.train
        if train.n == 0 or train.steps[-1] != step:
            return None
        loss = train.values[-1]
        if not loss - loss == 0.0:
            return None
        # The loss's median before its last point is at least its window's lower bound.
        lo = train.window.low
        if lo > 0:
            if p.loss_factor >= 0 and loss < p.loss_factor * lo:
                return None
        elif not min((x for x in train.window.tail(p.window + 1)[:-1] if x == x), default=math.nan) >= 0:
            return None  # a loss point under zero before this one (NaN leads only, as trailing_min skips)
        g_med = self.median.before(i, i, p.min_points)
        l_med = self.loss_median.before(train.n - 1, train.n, p.min_points)
        if (
            g_med > 0 and l_med > 0 and v >= p.factor * g_med and loss >= p.loss_factor * l_med
            and loss - l_med >= p.min_rise * self._init_before(train.n - 1)
        ):
            if not (self.loss_noise.noise_decades() >= p.max_noise or self.noise.noise_decades() >= p.max_noise):
                return StreamHit(note=_together_note(self.signal, v / g_med, loss / l_med))
        return None

    def _init_before(self, last):
        """The loss's initial level as known at its point `last` (before it)."""
        init = self.init
        return init.value if init.known <= last else 0.0


@rule(
    code="CS115", objective=True, symbol="jump-together", family="divergence", severity="critical",
    signals=("grad_norm", "train_loss"), params=JumpTogetherParams, describe=_describe_together,
    stream=JumpTogetherStream,
    advice="a single update threw the weights off (a corrupted batch under a large learning rate): "
    "resume from a checkpoint before this step, skip the batch, lower the learning rate, clip gradients",
)
def jump_together(data, p: JumpTogetherParams, since=None):
    """The grad norm and the train loss jump `factor` (10) x together at the same step.

    Each against the median of its previous `window` points, both logged at
    that step: one of them alone can be a noisy batch, both together are an
    update that went wrong -- a crash signal even while the grad norm is far
    under the explosion threshold. A loss window holding a point under zero
    gives no ratio (CS117 alike).
    """
    yield from jumped_together(data, p, since, "grad_norm")


class ValJumpTogetherStream(JumpTogetherStream):
    hits = ("val_loss",)  # checked after the train loss at a step (ORDER): its point there is known


@rule(
    code="CS117", objective=True, symbol="val-jump-together", family="divergence", severity="critical",
    signals=("val_loss", "train_loss"), params=ValJumpTogetherParams, describe=_describe_together,
    stream=ValJumpTogetherStream,
    advice="the weights broke at this step (the validation loss, measured apart from any batch, jumped "
    "with the train loss): resume from a checkpoint before it, lower the learning rate, clip gradients",
)
def val_jump_together(data, p: ValJumpTogetherParams, since=None):
    """The validation loss jumps `factor` (10) x and the train loss `loss_factor` (3) x together.

    As CS115, with the validation loss in place of the grad norm (each against
    the median of its previous `window` points): the train loss alone can be a
    bad batch, the validation loss is measured on data no update saw, so both at
    once are weights that broke. Epoch-level logs (Keras) hold both at every
    epoch and often no grad norm.
    """
    yield from jumped_together(data, p, since, "val_loss")


def jumped_together(data, p: JumpTogetherParams, since, partner: str):
    """CS115's (partner "grad_norm") and CS117's ("val_loss") batch rule: hits on the partner."""
    g, s = data.get(partner), data.get("train_loss")
    if g is None or s is None or len(g) <= p.min_points or len(s) <= p.min_points:
        return
    i0 = since_index(g, since)
    gv = g.values
    with np.errstate(invalid="ignore"):
        low = trailing_min(gv, p.window)
        candidate = np.isfinite(gv) & (~(low > 0) | (gv >= p.factor * low))
    candidate[: max(p.min_points, i0)] = False
    cand = np.flatnonzero(candidate)
    if cand.size == 0:
        return
    pos = np.searchsorted(s.steps, g.steps[cand])
    same = (pos < len(s)) & (s.steps[np.minimum(pos, len(s) - 1)] == g.steps[cand])
    cand, pos = cand[same], pos[same]
    if cand.size == 0:
        return
    g_med, _ = trailing_median_mad_at(gv, p.window, p.min_points, cand, mad=False)
    l_med, _ = trailing_median_mad_at(s.values, p.window, p.min_points, pos, mad=False)
    loss = s.values[pos]
    # A loss window holding a point under zero (a likelihood's loss crossing it) has no ratio.
    with np.errstate(invalid="ignore"):
        positive = trailing_min(s.values, p.window)[pos] >= 0
    init, known_after = initial_level(s.values)
    inits = np.where(pos > known_after, init, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        ok = (g_med > 0) & (l_med > 0) & (gv[cand] >= p.factor * g_med) & (loss >= p.loss_factor * l_med)
        ok &= np.isfinite(loss) & (loss - l_med >= p.min_rise * inits) & positive
    notes = {}
    for i, j, gm, lv, lm in zip(cand[ok], pos[ok], g_med[ok], loss[ok], l_med[ok]):
        noisy = noise_decades(s.values[max(j - p.noise_window, 0) : j]) >= p.max_noise
        if not (noisy or noise_decades(gv[max(i - p.noise_window, 0) : i]) >= p.max_noise):
            notes[int(i)] = _together_note(partner, gv[i] / gm, lv / lm)
    if notes:
        yield Hits(partner, np.asarray(sorted(notes)), note=notes.get)
