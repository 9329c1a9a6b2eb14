"""CS0xx: values no training objective can have (NaN/Inf, absurd loss), and skipped fp16 steps.

A NaN/Inf train loss or learning rate means training has diverged. A NaN/Inf gradient
norm (or update ratio) while the train loss is finite is what a dynamic loss
scaler (fp16 mixed precision) produces on the steps it skips: training goes
on, so it is reported (`grad-overflow`, info), not alarmed -- unless it keeps
happening (`overflow-burst`). A NaN/Inf validation loss while the train loss is
finite is the evaluation's (`val-nonfinite`, a warning): the weights the train
loss is computed with are finite.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tb_crash_signals.analysis.rules.base import (
    Hits,
    fmt,
    param,
    rose_from_start,
    rose_from_starts,
    rule,
    since_index,
)
from tb_crash_signals.analysis.signals import SIGNAL_LABELS, SIGNALS
from tb_crash_signals.analysis.stats import run_lengths, starting_level, value_at_or_before
from tb_crash_signals.analysis.streaming import HIT, Quiet, Stream, StreamHit

# Signals whose NaN/Inf is training gone wrong whatever the loss says.
_ALWAYS = ("train_loss", "lr")
# Signals a loss scaler makes NaN/Inf on skipped steps.
_SCALED = ("grad_norm", "update_ratio")
# Signals whose NaN/Inf is the training's only with the train loss non-finite too (or none logged).
_WITH_LOSS = _SCALED + ("val_loss",)


def loss_finite_at(data, steps) -> np.ndarray:
    """Whether the last train loss logged at or before each step is finite (False if none)."""
    train = data.get("train_loss")
    if train is None or len(train) == 0:
        return np.zeros(np.shape(steps), bool)
    return np.isfinite(value_at_or_before(train.steps, train.values, steps))


def _what(v) -> str:
    return "NaN" if math.isnan(v) else ("+Inf" if v > 0 else "-Inf")


class _LossState:
    """The train loss as a stream of another signal sees it: its last value, at or before the
    step (the train-loss channel is updated first)."""

    def __init__(self, channels):
        self.train = channels["train_loss"]

    def loss_finite(self) -> bool:
        train = self.train
        return train.n > 0 and math.isfinite(train.values[-1])


@dataclasses.dataclass(frozen=True)
class NonFiniteParams:
    cooldown: int = param(20, "points without NaN/Inf after which a new episode starts")


def _describe_nonfinite(ep, p):
    more = f" ({ep.hits} non-finite points)" if ep.hits > 1 else ""
    return f"{SIGNAL_LABELS[ep.signal]} is {_what(ep.start_value)} at step {ep.start_step}{more}"


class NonFiniteStream(Stream, _LossState):
    hits = SIGNALS

    def __init__(self, p, signal, channels):
        _LossState.__init__(self, channels)
        self.always = signal in _ALWAYS

    def quiet(self):
        return Quiet()  # every finite value

    def check(self, i, step, v):
        if math.isfinite(v) or not (self.always or not self.loss_finite()):
            return None
        return HIT


@rule(
    code="CS001", symbol="nonfinite", family="nonfinite", severity="critical",
    signals=SIGNALS, params=NonFiniteParams, describe=_describe_nonfinite, peak="first",
    stream=NonFiniteStream,
    advice="training has diverged: restore the last good checkpoint, lower the learning rate, "
    "clip gradients, check the batch at the first NaN step and fp16 overflow",
)
def nonfinite(data, p: NonFiniteParams, since=None):
    """The train loss or the learning rate is NaN/Inf (or the validation loss or grad norm, with the train loss).

    Fires on every NaN or infinite train loss or learning rate, and on a
    NaN/Inf validation loss, grad norm or update ratio when the last train
    loss logged at or before it is not finite (or there is none). Once the
    train loss is non-finite the weights usually are too, and the run cannot
    recover by itself.
    """
    for signal, s in data.items():
        i0 = since_index(s, since)
        idx = np.flatnonzero(~np.isfinite(s.values[i0:])) + i0
        if signal in _WITH_LOSS and idx.size:
            idx = idx[~loss_finite_at(data, s.steps[idx])]
        if idx.size:
            yield Hits(signal, idx)


@dataclasses.dataclass(frozen=True)
class ValNonFiniteParams:
    cooldown: int = param(10, "evaluations without NaN/Inf after which a new episode starts")


def _describe_val_nonfinite(ep, p):
    more = f"; {ep.hits} such evaluations" if ep.hits > 1 else ""
    return f"validation loss is {_what(ep.start_value)} at step {ep.start_step} while the train loss is finite{more}"


class _WhileLossFinite(Stream, _LossState):
    """A NaN/Inf point of its signal while the train loss is finite."""

    def __init__(self, p, signal, channels):
        _LossState.__init__(self, channels)

    def quiet(self):
        return Quiet()

    def check(self, i, step, v):
        return HIT if not math.isfinite(v) and self.loss_finite() else None


def _while_loss_finite(data, s, since) -> np.ndarray:
    """The indices (from `since` on) of the NaN/Inf points of `s` while the train loss is finite."""
    i0 = since_index(s, since)
    idx = np.flatnonzero(~np.isfinite(s.values[i0:])) + i0
    return idx[loss_finite_at(data, s.steps[idx])] if idx.size else idx


class ValNonFiniteStream(_WhileLossFinite):
    hits = ("val_loss",)


@rule(
    code="CS005", symbol="val-nonfinite", family="nonfinite", severity="warning",
    signals=("val_loss",), params=ValNonFiniteParams, describe=_describe_val_nonfinite, peak="first",
    stream=ValNonFiniteStream,
    advice="the training goes on; the evaluation produced NaN/Inf: check the validation data for "
    "NaN/Inf, an empty validation set or batch (the mean of nothing is NaN), and overflow in an "
    "fp16 evaluation",
)
def val_nonfinite(data, p: ValNonFiniteParams, since=None):
    """The validation loss is NaN/Inf while the train loss is finite.

    The train loss logged at or before the evaluation is computed with the
    same weights: finite, they are. On its own, what went wrong is the
    evaluation (its data, an empty batch, an fp16 overflow), which the advice
    says; inside a divergence it is the divergence's (its incident tells it).
    A run whose weights turned NaN shows it in its next train loss, which
    `nonfinite` tells.
    """
    s = data.get("val_loss")
    if s is not None and len(s):
        idx = _while_loss_finite(data, s, since)
        if idx.size:
            yield Hits("val_loss", idx)


@dataclasses.dataclass(frozen=True)
class OverflowParams:
    cooldown: int = param(50, "points without a skipped step after which a new episode starts")


def _describe_overflow(ep, p):
    more = f"; {ep.hits} such points" if ep.hits > 1 else ""
    return (
        f"{SIGNAL_LABELS[ep.signal]} is {_what(ep.start_value)} at step {ep.start_step} while the "
        f"train loss is finite: a step skipped by the loss scaler (fp16 overflow){more}"
    )


class OverflowStream(_WhileLossFinite):
    hits = _SCALED


@rule(
    code="CS003", symbol="grad-overflow", family="overflow", severity="info",
    signals=_SCALED, params=OverflowParams, describe=_describe_overflow, peak="first",
    stream=OverflowStream,
    advice="nothing to do while it stays rare: a dynamic loss scaler skips the step and lowers "
    "its scale; if it happens often, start from a lower initial scale or use bf16",
)
def grad_overflow(data, p: OverflowParams, since=None):
    """The grad norm (or update ratio) is NaN/Inf while the train loss is finite.

    What fp16 mixed precision with a dynamic loss scaler logs on the steps it
    skips (the scaled gradients overflowed; the weights were not updated):
    training continues normally, so this is information, not an alarm.
    """
    for signal in _SCALED:
        s = data.get(signal)
        if s is not None:
            idx = _while_loss_finite(data, s, since)
            if idx.size:
                yield Hits(signal, idx)


@dataclasses.dataclass(frozen=True)
class OverflowBurstParams:
    consecutive: int = param(
        8, "skipped steps in a row (grad norm NaN/Inf, loss finite) before the rule fires: the "
        "loss scaler halves its scale each time, so 8 in a row is a scale 256x lower", at_least=1,
    )
    start_points: int = param(
        50, "... but a burst that begins within the grad norm's first this many points is the scaler "
        "calibrating from its initial scale", at_least=0,
    )
    start_consecutive: int = param(
        24, "... and fires only from this many in a row: from an initial scale of 2^32 (Megatron's "
        "default) a scaler skips ~16 steps before it reaches a scale that fits", at_least=1,
    )
    cooldown: int = param(50, "points after which a new episode starts")


def _describe_burst(ep, p):
    return (
        f"grad norm non-finite on {ep.note or p.consecutive}+ consecutive points from step {ep.start_step} "
        "while the loss is finite: the loss scaler keeps skipping steps"
    )


def _burst_needs(start: int, p: OverflowBurstParams) -> int:
    """Skipped steps in a row a burst that began at point `start` needs to fire."""
    return p.start_consecutive if start < p.start_points else p.consecutive


class OverflowBurstStream(Stream, _LossState):
    hits = ("grad_norm",)

    def __init__(self, p, signal, channels):
        _LossState.__init__(self, channels)
        self.p = p
        self.run = 0
        self.needs = p.consecutive  # by the current burst's start

    def check(self, i, step, v):
        if not math.isfinite(v) and self.loss_finite():
            self.run += 1
            if self.run == 1:
                self.needs = _burst_needs(i, self.p)
            return StreamHit(note=str(self.needs)) if self.run >= self.needs else None
        self.run = 0
        return None


@rule(
    code="CS004", symbol="overflow-burst", family="overflow", severity="warning",
    signals=("grad_norm",), params=OverflowBurstParams, describe=_describe_burst,
    stream=OverflowBurstStream, peak="first",
    advice="the loss scaler cannot find a scale that works: check for an fp16 overflow in the "
    "model (large activations, a missing normalisation), or train in bf16/fp32",
)
def overflow_burst(data, p: OverflowBurstParams, since=None):
    """The grad norm is NaN/Inf on many consecutive points while the loss is finite.

    Isolated skipped steps are normal with fp16 loss scaling (`grad-overflow`);
    a long run of them means no update is being applied. Early in the run a
    longer one is the scaler calibrating (`start_points`, `start_consecutive`).
    """
    s = data.get("grad_norm")
    if s is None or len(s) == 0:
        return
    i0 = since_index(s, since)
    a = max(i0 - max(p.consecutive, p.start_consecutive), 0)
    if a <= p.start_points:  # (a burst's start decides what it needs: read from the first point)
        a = 0
    bad = ~np.isfinite(s.values[a:])
    if not bad.any():
        return
    bad &= loss_finite_at(data, s.steps[a:])
    if a and bad[0]:
        # A burst under way at the window's first point began before it, maybe within the first
        # `start_points`: read from the first point, where its start is known.
        a = 0
        bad = ~np.isfinite(s.values) & loss_finite_at(data, s.steps)
    runs = run_lengths(bad)
    at = np.arange(a, a + runs.shape[0])
    needs = np.where(at - runs + 1 < p.start_points, p.start_consecutive, p.consecutive)
    idx = np.flatnonzero(bad & (runs >= needs)) + a
    idx = idx[idx >= i0]
    if idx.size:
        notes = {int(i): str(int(needs[i - a])) for i in idx.tolist()}
        yield Hits("grad_norm", idx, note=notes.get)


@dataclasses.dataclass(frozen=True)
class LossBoundParams:
    max_loss: float = param(
        1e4, "a train or validation loss above this (in absolute value) is critical",
    )
    min_rise: float = param(
        3.0, "... when it is at least this multiple of where the loss started (the median of its "
        "first 10 finite points; of those before the point, early on), which is within the bound: a "
        "loss that starts beyond it (summed over a large batch, unnormalised regression targets) tells "
        "its scale, and the relative rules judge it, and one that starts near it crosses it as it "
        "wanders; 0 turns this off (the plain bound, from the first point on)", at_least=0.0,
    )
    first_fall: float = param(
        1000.0, "... and a first point beyond the bound is critical at the next point when that one "
        "is this many times smaller: the first logged interval blew up (a Keras epoch's mean over a "
        "first epoch that exploded, then a model collapsed to chance), which no learning curve does "
        "in one point (with `min_rise` 0, the first point itself is)", above=1.0,
    )
    cooldown: int = param(20, "points back under the bound after which a new episode starts")


def _describe_bound(ep, p):
    label = SIGNAL_LABELS[ep.signal]
    if abs(ep.prev_value) > p.max_loss and abs(ep.prev_value) >= p.first_fall * abs(ep.start_value):
        # The fall after a first point beyond the bound.
        return (
            f"{label}'s first point, {fmt(ep.prev_value)}, was beyond the bound {fmt(p.max_loss)}; "
            f"it fell to {fmt(ep.start_value)} at step {ep.start_step}: "
            "it blew up within its first logged interval"
        )
    return f"{label} reached {fmt(ep.peak_value)} at step {ep.peak_step}, beyond the bound {fmt(p.max_loss)}"


class LossBoundStream(Stream):
    hits = ("train_loss", "val_loss")

    def __init__(self, p, signal, channels):
        self.max = p.max_loss
        self.min_rise = p.min_rise
        self.first_fall = p.first_fall
        # The loss's first finite points before this one (at most 10; pushed after the checks).
        self.head = channels[signal].initial.head
        self.first = None  # a first point beyond the bound, judged at the next point

    def quiet(self):
        return Quiet(lo=-self.max, hi=self.max, after_out=True)

    def check(self, i, step, v):
        first = self.first
        if first is not None:
            self.first = None
            if v - v == 0.0 and abs(v) * self.first_fall <= abs(first):
                return HIT
        if abs(v) > self.max and v - v == 0.0:
            if self.min_rise and not self.head:
                self.first = v
            elif rose_from_start(v, self.head, self.max, self.min_rise):
                return HIT
        return None


def _fell_after_first(values: np.ndarray, p: LossBoundParams) -> np.ndarray:
    """The index after a first finite point beyond the bound when the loss is `first_fall` x
    lower there (empty otherwise, and with `min_rise` 0, which judges the first point itself)."""
    finite = np.flatnonzero(np.isfinite(values))
    if not p.min_rise or not finite.size or finite[0] + 1 >= values.shape[0]:
        return np.empty(0, dtype=np.intp)
    first, after = values[finite[0]], values[finite[0] + 1]
    if abs(first) > p.max_loss and np.isfinite(after) and abs(after) * p.first_fall <= abs(first):
        return np.array([finite[0] + 1])
    return np.empty(0, dtype=np.intp)


@rule(
    code="CS002", symbol="loss-bound", family="explosion", severity="critical",
    signals=("train_loss", "val_loss"), params=LossBoundParams, describe=_describe_bound,
    stream=LossBoundStream,
    advice="the loss is far beyond any plausible value: the learning rate is far too high "
    "or the inputs/labels are broken; check data scaling and lower the learning rate",
)
def loss_bound(data, p: LossBoundParams, since=None):
    """A loss is larger than any plausible training objective (absolute bound).

    The first layer of the source article's filter applied to the loss: an
    absolute threshold. No usual objective (cross-entropy, MSE on normalised
    targets) gets near the default bound; a loss that starts beyond it
    (summed over a large batch, unnormalised regression targets) tells its
    scale, not an explosion, and is left to the relative rules, as is one that
    crosses it without rising `min_rise` x from its start. A first point
    beyond the bound is judged by the next: `first_fall` x lower, the first
    logged interval blew up (`min_rise` 0: the plain bound, from the first
    point).
    """
    for signal in ("train_loss", "val_loss"):
        s = data.get(signal)
        if s is not None:
            i0 = since_index(s, since)
            idx = np.flatnonzero(np.abs(s.values[i0:]) > p.max_loss) + i0
            idx = idx[np.isfinite(s.values[idx])]
            starts = starting_level(s.values, idx)
            idx = idx[rose_from_starts(s.values[idx], starts, p.max_loss, p.min_rise)]
            fell = _fell_after_first(s.values, p)
            idx = np.union1d(idx, fell[fell >= i0])
            if idx.size:
                yield Hits(signal, idx)
