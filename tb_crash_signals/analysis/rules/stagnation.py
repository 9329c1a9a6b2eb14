"""CS302: the validation loss stopped moving (source article rule)."""

from __future__ import annotations

import collections
import dataclasses

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from tb_crash_signals.analysis.rules.base import (
    TRAIN_LEVEL_POINTS,
    Hits,
    fmt,
    on_another_scale,
    param,
    rule,
    since_index,
    train_levels_at,
)
from tb_crash_signals.analysis.stats import known_level_at
from tb_crash_signals.analysis.streaming import HIT, Stream, shared_level


@dataclasses.dataclass(frozen=True)
class StagnationParams:
    evaluations: int = param(10, "how many previous validation values are compared (the article's 10)")
    tolerance: float = param(
        0.0005, "all of them within this absolute distance of the current value (the article's 0.001, "
        "which a healthy run settling under a decayed learning rate meets; the `article` preset keeps it)"
    )
    min_level: float = param(
        0.05, "and the validation loss must still be at least this share of where the run started (its "
        "first value, or the train loss's initial level, the median of its first 10 points, if higher: "
        "a first evaluation after an epoch or a hundred steps has already learnt most of an easy task; not "
        "while the train loss is on another scale, base.SCALE_APART): a loss that converged to ~0 moves less "
        "than the absolute tolerance (the `article` preset sets 0)"
    )
    cooldown: int = param(10, "evaluations after which a new episode starts")


def _describe_stagnation(ep, p):
    return (
        f"validation loss stuck at {fmt(ep.start_value)}: the last {p.evaluations} "
        f"evaluations within {fmt(p.tolerance)} (step {ep.start_step})"
    )


class ValStagnationStream(Stream):
    hits = ("val_loss",)

    def __init__(self, p, signal, channels):
        self.p = p
        self.values = collections.deque(maxlen=p.evaluations)
        self.first = None
        self.initial = channels["train_loss"].initial  # taken before the validation loss at a step
        self.train_level = shared_level(channels["train_loss"], TRAIN_LEVEL_POINTS)

    def check(self, i, step, v):
        p = self.p
        hit = None
        if self.first is None:
            self.first = v
        values = self.values
        # The last value first: a moving loss fails there, without the walk over the window.
        if i >= p.evaluations and (not values or abs(values[-1] - v) < p.tolerance):
            tol = p.tolerance
            for x in values:  # a loop, not all() of a generator: that costs a call per value
                if not abs(x - v) < tol:
                    break
            else:
                start = self.first
                # NaN (not known, no train loss): the first value
                if self.initial.value > start and not on_another_scale(self.train_level.value, v):
                    start = self.initial.value
                if not (p.min_level > 0 and v < p.min_level * start):
                    hit = HIT
        self.values.append(v)
        return hit


@rule(
    code="CS302", objective=True, symbol="val-stagnation", family="stagnation", severity="warning",
    signals=("val_loss",), params=StagnationParams, describe=_describe_stagnation, peak="first",
    stream=ValStagnationStream,
    advice="validation stopped moving: stop early, or change the learning-rate schedule; "
    "if it never moved, the model is not learning at all",
)
def val_stagnation(data, p: StagnationParams, since=None):
    """The validation loss has not moved for many evaluations (source article rule).

    Condition: the previous `evaluations` validation losses are all within
    `tolerance` of the current one, as in the article's TrainingMonitor, and
    the loss is still at least `min_level` x where the run started (its first
    value, or the train loss's initial level if higher).
    """
    s = data.get("val_loss")
    k = p.evaluations
    if s is None or len(s) <= k:
        return
    i0 = max(since_index(s, since), k)  # the first window ends at k
    if i0 >= len(s):
        return
    wins = sliding_window_view(s.values[i0 - k :], k + 1)
    cur = wins[:, -1:]
    with np.errstate(invalid="ignore"):
        close = np.all(np.abs(wins[:, :-1] - cur) < p.tolerance, axis=1)
        if p.min_level > 0:
            start = np.full(len(s) - i0, s.values[0])
            train = data.get("train_loss")
            if train is not None and len(train):
                # The train loss's initial level, once known, as of its point at or before each evaluation.
                known, init = known_level_at(train, 1, s.steps[i0:])
                apart = on_another_scale(train_levels_at(data, s.steps[i0:]), s.values[i0:])
                start = np.where((known == known) & (init > start) & ~apart, init, start)
            close &= ~(s.values[i0:] < p.min_level * start)
    idx = np.flatnonzero(close) + i0
    if idx.size:
        yield Hits("val_loss", idx)
