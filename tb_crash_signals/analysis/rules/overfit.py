"""CS401-CS404: the model stops generalising, or never did (validation vs training)."""

from __future__ import annotations

import dataclasses
import math
from itertools import islice

import numpy as np

from tb_crash_signals.analysis.rules.base import (
    TRAIN_LEVEL_POINTS,
    Hits,
    fmt,
    learnt_to,
    on_another_scale,
    param,
    rule,
    since_index,
    train_levels_at,
)
from tb_crash_signals.analysis.rules.plateau import LR_FELL, lr_course
from tb_crash_signals.analysis.stats import (
    known_level_at,
    run_lengths,
    trailing_median_inclusive_at,
    value_at_or_before,
)
from tb_crash_signals.analysis.streaming import Stream, StreamHit, finite_median, shared_level, small_median


def _train_at_val_steps(data, smooth: int, which=None):
    """(val series, the train loss at or before each validation step).

    The train loss is smoothed by a trailing median of `smooth` points.
    With `which` (validation indices), only those are computed (NaN elsewhere).
    """
    train, val = data.get("train_loss"), data.get("val_loss")
    if train is None or val is None or len(val) == 0 or len(train) == 0:
        return None, None
    which = np.arange(len(val)) if which is None else np.asarray(which, dtype=np.int64)
    out = np.full(val.steps.shape, np.nan)
    if smooth <= 1:
        out[which] = value_at_or_before(train.steps, train.values, val.steps[which])
        return val, out
    # The smoothed train loss is needed only at the validation steps.
    pos = np.searchsorted(train.steps, val.steps[which], side="right") - 1
    ok = pos >= 0
    out[which[ok]] = trailing_median_inclusive_at(train.values, smooth, pos[ok])
    return val, out


@dataclasses.dataclass(frozen=True)
class OverfitParams:
    max_train_loss: float = param(0.1, "the train loss must be below this (the article's 0.1)")
    ratio: float = param(
        5.0, "... and the validation loss above this multiple of the train loss (the article's 5)"
    )
    cooldown: int = param(10, "evaluations after which a new episode starts")


class _TrainAtVal(Stream):
    """The train loss at or before each validation point, optionally smoothed."""

    hits = ("val_loss",)

    @classmethod
    def needs(cls, p, signal):
        return [("train_loss", p.smooth, False)] if getattr(p, "smooth", 1) > 1 else []

    def __init__(self, smooth, channels):
        self.smooth = max(1, smooth)
        self.train = channels["train_loss"]  # updated before the validation channel

    def train_now(self):
        """The (smoothed) train loss at the last train point."""
        train = self.train
        if train.n == 0:
            return math.nan
        smooth = self.smooth
        if smooth == 1:
            return train.values[-1]  # unsmoothed: the raw value, NaN/Inf included
        if train.n < smooth:
            return finite_median(train.window.tail(smooth))
        return _median_of_last(list(islice(reversed(train.window.values), smooth)))


def _median_of_last(xs) -> float:
    """small_median of Window.tail(len(xs)), given its points newest first: taken in their order,
    so equal values (zeros' signs) sort as there."""
    return small_median(reversed(xs))


def _describe_overfit(ep, p):
    return (
        f"train loss {ep.note} < {fmt(p.max_train_loss)} while validation loss "
        f"{fmt(ep.start_value)} is > {fmt(p.ratio)}x it (step {ep.start_step})"
    )


class OverfitStream(_TrainAtVal):
    def __init__(self, p, signal, channels):
        super().__init__(1, channels)
        self.p = p

    def check(self, i, step, v):
        t = self.train_now()
        if t < self.p.max_train_loss and v > self.p.ratio * t:
            return StreamHit(note=fmt(t))
        return None


@rule(
    code="CS401", objective=True, symbol="overfitting", family="overfit", severity="warning",
    signals=("train_loss", "val_loss"), params=OverfitParams, describe=_describe_overfit,
    stream=OverfitStream, default=False,
    advice="the model memorises the training set: add regularisation (weight decay, "
    "dropout, augmentation), get more data, or stop at the best validation step",
)
def overfitting(data, p: OverfitParams, since=None):
    """Train loss near zero while validation loss is many times higher (source article rule).

    Condition at each validation point: train_loss < max_train_loss and
    val_loss > ratio x train_loss, with the train loss logged at the same step
    (or the last one before it). Opt-in (select CS401, or the `article`
    preset, which makes it critical as the article does): on classifiers and
    tiny batches whose train loss goes to ~0 it fires on healthy runs
    (docs/detection.md); `val-divergence` is the default overfitting signal.
    """
    val = data.get("val_loss")
    if val is None:
        return
    i0 = since_index(val, since)
    val, train = _train_at_val_steps(data, smooth=1, which=np.arange(i0, len(val)))
    if val is None:
        return
    with np.errstate(invalid="ignore"):
        hit = (train[i0:] < p.max_train_loss) & (val.values[i0:] > p.ratio * train[i0:])
    idx = np.flatnonzero(hit) + i0
    if idx.size:
        yield Hits("val_loss", idx, note=lambda i: fmt(train[i]))


@dataclasses.dataclass(frozen=True)
class ValDivergenceParams:
    evaluations: int = param(
        2, "the last this-many evaluations must all be above the best (a rise that persists)"
    )
    min_rise: float = param(0.10, "... by at least this much (relative)")
    min_rise_start: float = param(
        0.01, "... and the last by at least this share of the train loss's initial level (the median of "
        "its first 10 points; the validation loss's first evaluation often comes after much learning): "
        "a validation loss learnt down near zero (an easy or separable task) wanders by tens of percent "
        "of almost nothing (4e-5 to 3e-4 on a start of 1.4: healthy runs of the kind rose 0.01-0.5 % of "
        "their start; the real logs' overfits 5.7 % or more at their first hit); not while the train loss "
        "is on another scale (base.SCALE_APART); 0: never", at_least=0.0,
    )
    smooth: int = param(5, "trailing train points whose median is compared (noise)")
    min_evaluations: int = param(3, "evaluations needed before the rule can fire")
    lr_restart: float = param(
        1.5, "... unless the learning rate, fallen by the best validation step (under 0.9x its peak "
        "then), is now above this multiple of what it was then: a warm restart or a cyclic schedule "
        "climbing back, whose larger steps raise the validation loss for a while", above=0.0,
    )
    jump: float = param(
        3.0, "a rise that went up at least this many times within two evaluations (an evaluation over the "
        "one two before it, from the evaluation before the rise on) is told as a jump: overfitting "
        "raises the validation loss by tens of percent an evaluation, while a jump with the train loss "
        "still falling points at the evaluation itself (BatchNorm statistics, the validation data, "
        "overflow); 0: never told", at_least=0.0,
    )
    cooldown: int = param(10, "evaluations after which a new episode starts")


# What a CS402 note adds when its rise came in a jump (see `jump`; the incidents read it).
JUMP_NOTE = "within two evaluations"


def valdiv_note(best, best_step, jumped=math.nan, p=None) -> str:
    """A CS402 hit's note: the best it rose from, and the jump it rose by (`jumped`, its largest rise
    within two evaluations, see `jump`) when that is `p.jump`x or more."""
    note = f"{fmt(best)} at step {best_step}"
    if p is not None and p.jump > 0.0 and jumped >= p.jump:
        note += f", after a jump of {fmt(jumped)}x {JUMP_NOTE},"
    return note


def val_jumped(message: str) -> bool:
    """Whether a CS402 message tells a rise that came in a jump."""
    return JUMP_NOTE in message


def _rise(v, before) -> float:
    """An evaluation over the one two before it (or the one before the rise): NaN unless both are
    positive and finite."""
    if before > 0.0 and before < math.inf and v > 0.0 and v < math.inf:
        return v / before
    return math.nan


def _largest_rise(values, first: int, last: int) -> float:
    """The largest _rise of the evaluations first..last of a rise, each over the one two before it, from
    the evaluation before the rise (`first - 1`) on (NaN if none is known)."""
    largest = math.nan
    for k in range(first, last + 1):
        ref = max(k - 2, first - 1)
        r = _rise(float(values[k]), float(values[ref]) if ref >= 0 else math.nan)
        if r == r and not r <= largest:  # NaN never counts; any rise beats none
            largest = r
    return largest


def _describe_valdiv(ep, p):
    return (
        f"validation loss rose to {fmt(ep.start_value)} from its best {ep.note} "
        f"while train loss kept falling (step {ep.start_step})"
    )


class ValDivergenceStream(_TrainAtVal):
    def __init__(self, p, signal, channels):
        super().__init__(p.smooth, channels)
        self.p = p
        self.rise = 1 + p.min_rise  # `above` is at least this multiple of the best
        self.initial = channels["train_loss"].initial  # pushed with the train point before this one
        self.train_level = shared_level(channels["train_loss"], TRAIN_LEVEL_POINTS)
        self.best = math.inf
        self.best_i = 0
        self.best_step = None
        self.train_at_best = math.nan  # None: not taken yet, from best_tail (see _at_best)
        self.best_tail = None
        self.above = 0
        self.lr = channels["lr"]  # updated before the validation channel
        self.lr_bar = math.inf  # lr_restart x the learning rate at the best, if it had fallen then
        self.two_back = self.one_back = math.nan  # the evaluations two before this one and the one before
        self.rise_from = math.nan  # the evaluation before the current rise
        self.jumped = math.nan  # the current rise's largest rise within two evaluations (_largest_rise)

    def check(self, i, step, v):
        p = self.p
        # An if, not a boolean assigned: its comparison jumps, so 3.11 specialises it.
        if v - v == 0.0:
            finite, masked = True, v
        else:
            finite, masked = False, math.inf
        if i == 0 or masked < self.best:
            self.best = masked
            self.best_i, self.best_step = i, step
            train = self.train
            if self.smooth > 1 and train.n >= self.smooth:
                # train_now's points only, their median taken if it is ever read (most bests are not).
                self.train_at_best = None
                self.best_tail = list(islice(reversed(train.window.values), self.smooth))
            else:
                self.train_at_best = self.train_now()
            lr = self.lr.values[-1] if self.lr.values else math.nan
            self.lr_bar = p.lr_restart * lr if lr < LR_FELL * self.lr.max_finite else math.inf
        # An if, not a boolean assigned: its comparisons jump, so 3.11 specialises them.
        if finite and v >= self.best * self.rise and self.best > 0.0:
            self.above += 1
            if self.above == 1:
                self.rise_from, self.jumped = self.one_back, math.nan
            r = _rise(v, self.rise_from if self.above <= 2 else self.two_back)
            if r == r and not r <= self.jumped:  # the largest known, as _largest_rise
                self.jumped = r
        else:
            # No rise now: none to tell (a hit outside one, with `evaluations` 0, has no jump).
            self.above, self.jumped = 0, math.nan
        self.two_back, self.one_back = self.one_back, v
        if (
            i >= p.min_evaluations
            and self.above >= p.evaluations
            and i - self.best_i >= p.evaluations
            and self.train_now() < self._at_best()
            and not self.train.values[-1] > self.rise * self._at_best()
            and not (self.lr.values and self.lr.values[-1] > self.lr_bar)
            and not (self.initial.value * p.min_rise_start > v - self.best  # NaN (not known yet): no floor
                     and not on_another_scale(self.train_level.value, v))
        ):
            return StreamHit(note=valdiv_note(self.best, self.best_step, self.jumped, p))
        return None

    def _at_best(self):
        """The (smoothed) train loss at the best validation point (train_now's then)."""
        t = self.train_at_best
        if t is None:
            t = self.train_at_best = _median_of_last(self.best_tail)
            self.best_tail = None
        return t


@rule(
    code="CS402", objective=True, symbol="val-divergence", family="overfit", severity="warning",
    signals=("train_loss", "val_loss"), params=ValDivergenceParams, describe=_describe_valdiv,
    stream=ValDivergenceStream,
    advice="overfitting has begun: keep the checkpoint at the best validation step, add "
    "regularisation or augmentation, or stop early",
)
def val_divergence(data, p: ValDivergenceParams, since=None):
    """Validation loss rising while train loss falls: the onset of overfitting.

    Fires at a validation point when the last `evaluations` validation losses
    all sit `min_rise` above the best one before them (the last also
    `min_rise_start` of the train loss's initial level above it), and the (smoothed)
    train loss is lower than it was at that best validation step, its last
    point no `min_rise` above that level (a smoothed loss logged every 50
    steps lags far behind a train loss climbing with the validation loss:
    a divergence, not overfitting) -- unless
    the learning rate, which had fallen by that step, has climbed back to
    `lr_restart` x what it was then (a warm restart, a cyclic schedule). A rise
    that went up `jump` x within two evaluations is told as a jump.
    """
    val = data.get("val_loss")
    if val is None or len(val) <= p.min_evaluations or data.get("train_loss") is None:
        return
    v = val.values
    finite = np.isfinite(v)
    masked = np.where(finite, v, np.inf)
    best_idx = np.zeros(len(v), np.int64)
    running = np.minimum.accumulate(masked)
    # Index of the running minimum: the last point where it was set.
    is_new = np.concatenate([[True], running[1:] < running[:-1]])
    best_idx = np.maximum.accumulate(np.where(is_new, np.arange(len(v)), 0))
    best = running
    idx = np.arange(len(v))
    # The smoothed train loss is needed at the points from `since` on and at their bests.
    i0 = since_index(val, since)
    _, train = _train_at_val_steps(data, p.smooth, np.union1d(idx[i0:], best_idx[i0:]))
    if train is None:
        return
    # The last train point at or before each validation point, as logged.
    _, last = _train_at_val_steps(data, 1, idx[i0:])
    with np.errstate(invalid="ignore"):
        above = finite & (v >= best * (1 + p.min_rise)) & (best > 0)
        hit = (
            (idx >= p.min_evaluations)
            & (run_lengths(above) >= p.evaluations)
            & (idx - best_idx >= p.evaluations)
            & (train < train[best_idx])
            & ~(last > (1 + p.min_rise) * train[best_idx])
        )
    if hit.any() and p.min_rise_start > 0:
        # The train loss is taken before the validation loss at a step: its initial level, once known
        # (its 10th point), as of the train point at or before each evaluation.
        known, init = known_level_at(data["train_loss"], 1, val.steps)
        with np.errstate(invalid="ignore"):
            apart = on_another_scale(train_levels_at(data, val.steps), v)
            hit &= ~((known == known) & (init * p.min_rise_start > v - best) & ~apart)
    if hit.any():
        # The schedule climbed back since the best: its larger steps, not overfitting.
        at, peak, _ = lr_course(data, val.steps, LR_FELL)
        with np.errstate(invalid="ignore"):
            fallen = at < LR_FELL * peak
            hit &= ~(fallen[best_idx] & (at > p.lr_restart * at[best_idx]))
    out = np.flatnonzero(hit[i0:]) + i0
    if out.size:
        runs = run_lengths(above)

        def note(i):
            first = i - int(runs[i]) + 1  # the rise's first evaluation above the best
            return valdiv_note(best[i], int(val.steps[best_idx[i]]), _largest_rise(v, first, i), p)

        yield Hits("val_loss", out, note=note)


@dataclasses.dataclass(frozen=True)
class MemorisedParams:
    smooth: int = param(9, "trailing points whose median is the train loss's level", at_least=1)
    learnt: float = param(
        1e-3, "the train loss's level must be at most this share of its initial level (the median of "
        "its first 10 points): three decades down, the training set is learnt by heart", above=0.0,
    )
    unlearnt: float = param(
        0.5, "... while the validation loss is at least this share of the train loss's initial level: it "
        "learnt nothing that generalises. Runs that memorised a small training set stand at 1.1-15 x it "
        "in the detection corpus; healthy tiny-batch runs on an easy task, whose train loss also falls "
        "three decades, at 0.04 x", above=0.0,
    )
    cooldown: int = param(10, "evaluations after which a new episode starts")


def _describe_memorised(ep, p):
    return (
        f"train loss at {ep.note} while validation loss {fmt(ep.start_value)} has learnt nothing "
        f"(step {ep.start_step}): the model learnt its training set by heart"
    )


def _memorised_note(level, init) -> str:
    return f"{fmt(level)}, {fmt(level / init)}x where it started ({fmt(init)}),"


class _TrainLevelAtVal(Stream):
    """A check at each validation point that reads the train loss's level (`p.smooth` points) and
    initial level from its channel."""

    hits = ("val_loss",)

    def __init__(self, p, signal, channels):
        train = channels["train_loss"]  # updated before the validation channel at a step
        self.level = shared_level(train, p.smooth)
        self.initial = train.initial
        self.train_level = shared_level(train, TRAIN_LEVEL_POINTS)  # its scale's (on_another_scale)


class MemorisedStream(_TrainLevelAtVal):
    """memorised, at each validation point."""

    def __init__(self, p, signal, channels):
        super().__init__(p, signal, channels)
        self.learnt, self.unlearnt = p.learnt, p.unlearnt
        self.low = math.inf  # the validation loss's lowest so far (np.fmin.accumulate's)

    def check(self, i, step, v):
        if v < self.low:
            self.low = v
        init = self.initial.value
        if not init > 0.0:
            return None
        level = self.level.value
        bar = self.unlearnt * init
        if learnt_to(level, init, self.learnt) and v >= bar and self.low >= bar:
            return StreamHit(note=_memorised_note(level, init))
        return None


@rule(
    code="CS403", objective=True, symbol="memorised", family="overfit", severity="warning",
    signals=("train_loss", "val_loss"), params=MemorisedParams, describe=_describe_memorised,
    stream=MemorisedStream,
    advice="the model memorised the training set: keep the checkpoint at the best validation step; add "
    "regularisation (weight decay, dropout, augmentation) or more data",
)
def memorised(data, p: MemorisedParams, since=None):
    """The train loss fell three decades while the validation loss learnt nothing.

    At each validation point: the train loss's level (the trailing median of
    `smooth` points at its last point at or before the step) is at most
    `learnt` x its initial level (the median of its first 10 points), and the
    validation loss is at least `unlearnt` x that initial level, as it has
    been at every evaluation so far (one that once learnt under it and rose
    since is overfitting, CS402's story). The article's overfitting rule
    (CS401) on the run's own scale: a train loss
    under 0.1 with a validation loss 5x it is any classifier on an easy
    task; a train loss a thousandth of where it started with a validation
    loss still where training started is a training set learnt by heart,
    whether or not the validation loss rises (CS402).
    """
    train, val = data.get("train_loss"), data.get("val_loss")
    if train is None or val is None or len(train) == 0 or len(val) == 0:
        return
    i0 = since_index(val, since)
    at, init = known_level_at(train, p.smooth, val.steps[i0:])
    if not init > 0.0:
        return
    bar = p.unlearnt * init
    low = np.fmin.accumulate(val.values)[i0:]  # the lowest so far: one that learnt once is overfitting (CS402)
    with np.errstate(invalid="ignore"):
        hit = learnt_to(at, init, p.learnt) & (val.values[i0:] >= bar) & (low >= bar)
    idx = np.flatnonzero(hit) + i0
    if idx.size:
        yield Hits("val_loss", idx, note=lambda i: _memorised_note(float(at[i - i0]), init))


@dataclasses.dataclass(frozen=True)
class UnlearntParams:
    smooth: int = param(9, "trailing points whose median is the train loss's level", at_least=1)
    learnt: float = param(
        0.9, "the train loss's level must be at most this share of its initial level (the median of its first "
        "10 points): it learnt something", above=0.0,
    )
    unlearnt: float = param(
        0.95, "... while the validation loss's best so far is at least this share of where training started "
        "(the highest of its first evaluation, the train loss's first point and its initial level): it learnt "
        "nothing. A classifier on shuffled labels learns its training set slowly while its validation loss "
        "stays at chance (1.79 over 6 classes, its train loss 0.9x its start after 2 000 steps). A first "
        "evaluation after an epoch of learning is measured against the train loss's start: its first point "
        "(on epoch means, the first epoch's, above the median of the first ten), so a run that learnt in its "
        "first epoch and then stalled is not caught", above=0.0,
    )
    min_evaluations: int = param(
        5, "evaluations needed before the rule can fire (and none while the train loss is on another scale, "
        "base.SCALE_APART)", at_least=1,
    )
    cooldown: int = param(10, "evaluations after which a new episode starts")


def _describe_unlearnt(ep, p):
    return f"validation loss has learnt nothing: {ep.note} (step {ep.start_step})"


def _unlearnt_note(best, start, level, init) -> str:
    return (f"its best {fmt(best)} is still where training started ({fmt(start)}), while the train loss fell to "
            f"{fmt(level)} ({fmt(level / init)}x its start)")


class UnlearntStream(_TrainLevelAtVal):
    """val-unlearnt, at each validation point."""

    def __init__(self, p, signal, channels):
        super().__init__(p, signal, channels)
        self.p = p
        self.first = math.nan
        self.best = math.inf  # the lowest finite validation loss so far

    def check(self, i, step, v):
        if i == 0:
            self.first = v
        if v - v == 0.0 and v < self.best:
            self.best = v
        p = self.p
        init = self.initial.value
        if i + 1 < p.min_evaluations or not init > 0.0 or self.best == math.inf:
            return None
        if on_another_scale(self.train_level.value, v):
            return None
        level = self.level.value
        start = _start(self.first, self.initial.head[0], init)
        if learnt_to(level, init, p.learnt) and self.best >= p.unlearnt * start:
            return StreamHit(note=_unlearnt_note(self.best, start, level, init))
        return None


def _start(first_val: float, first_train: float, init: float) -> float:
    """Where training started, for CS404: the highest of the first evaluation (NaN: left out), the
    train loss's first finite point and its initial level."""
    start = first_train if first_train > init else init
    return first_val if first_val > start else start


@rule(
    code="CS404", objective=True, symbol="val-unlearnt", family="overfit", severity="warning",
    signals=("train_loss", "val_loss"), params=UnlearntParams, describe=_describe_unlearnt,
    stream=UnlearntStream,
    advice="nothing the model learns carries over to the validation data: check that the labels match their "
    "inputs (shuffled apart, a wrong label file or column, an augmentation applied to one and not the other) and "
    "that the validation data comes from the training distribution through the same preprocessing; a training "
    "set of a few batches is learnt by heart (more data, regularisation)",
)
def val_unlearnt(data, p: UnlearntParams, since=None):
    """The train loss learnt while the validation loss learnt nothing.

    At each validation point from the `min_evaluations`-th: the train loss's
    level (the trailing median of `smooth` points at its last point at or
    before the step) is at most `learnt` x its initial level (the median of
    its first 10 points), while the lowest finite validation loss so far is
    at least `unlearnt` x where training started (the highest of the first
    evaluation, the train loss's first point and its initial level). Labels shuffled apart from
    their inputs give a validation loss at chance while the train loss
    slowly learns the training set: a rise too small for CS402, a train loss
    nowhere near CS403's three decades.
    """
    train, val = data.get("train_loss"), data.get("val_loss")
    if train is None or val is None or len(train) == 0 or len(val) < p.min_evaluations:
        return
    i0 = since_index(val, since)
    at, init = known_level_at(train, p.smooth, val.steps[i0:])
    if not init > 0.0:
        return
    v = val.values
    best = np.minimum.accumulate(np.where(np.isfinite(v), v, np.inf))[i0:]
    t = train.values
    start = _start(float(v[0]), float(t[np.isfinite(t)][0]), init)
    idx = np.arange(i0, len(v))
    with np.errstate(invalid="ignore"):
        hit = ((idx + 1 >= p.min_evaluations) & learnt_to(at, init, p.learnt) & np.isfinite(best)
               & (best >= p.unlearnt * start) & ~on_another_scale(train_levels_at(data, val.steps[i0:]), v[i0:]))
    out = np.flatnonzero(hit) + i0
    if out.size:
        yield Hits("val_loss", out, note=lambda i: _unlearnt_note(float(best[i - i0]), start, float(at[i - i0]), init))
