"""CS116: the train loss fell from far above a uniform guess straight onto it, and stays there."""

from __future__ import annotations

import collections
import dataclasses
import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from tb_crash_signals.analysis.rules.base import Hits, fmt, param, rule, since_index
from tb_crash_signals.analysis.stats import sliding_max, sliding_min
from tb_crash_signals.analysis.streaming import Stream, StreamHit, small_median


@dataclasses.dataclass(frozen=True)
class CollapseParams:
    points: int = param(8, "points in a row the loss must stay flat at the guess's loss", at_least=2)
    band: float = param(
        0.01, "flat: the largest of those points at most this share above the smallest (a model whose "
        "outputs went constant sees every batch alike)", above=0.0,
    )
    tolerance: float = param(
        0.01, "their median within this share of ln k, the cross-entropy of a uniform guess over k "
        "classes", above=0.0,
    )
    max_classes: int = param(
        20, "k from 2 to this: beyond it the ln k lie closer together than `tolerance`, and any loss "
        "would be near one", at_least=2,
    )
    above: float = param(
        2.0, "and one of the (up to) `points` points before them at least this multiple of their median: the "
        "loss fell from far above chance (confidently wrong predictions) straight onto it, which a "
        "run that converges there does not", above=1.0,
    )
    cooldown: int = param(20, "points after which a new episode starts")


def chance_classes(level: float, p: CollapseParams, slack: float | None = None) -> int | None:
    """The k whose ln k the level is within `tolerance` (or `slack`) of, 2 <= k <= max_classes;
    else None (the smallest such k)."""
    tol = p.tolerance if slack is None else slack
    if not 0.0 < level <= math.log(p.max_classes) * (1.0 + tol) or tol >= 1.0:
        return None
    for k in range(max(2, math.floor(math.exp(level / (1.0 + tol)))),
                   min(p.max_classes, math.ceil(math.exp(level / (1.0 - tol)))) + 1):
        if abs(level / math.log(k) - 1.0) <= tol:
            return k
    return None


def _note(level: float, fell_from: float, k: int) -> str:
    return f"stuck at {fmt(level)} = ln {k} (a uniform guess over {k} classes) straight after {fmt(fell_from)}"


def _describe(ep, p):
    return (f"train loss collapsed at step {ep.start_step}: {ep.note}, flat for {p.points} points; "
            "the model's outputs no longer depend on its input")


class CollapseStream(Stream):
    hits = ("train_loss",)

    def __init__(self, p, signal, channels):
        self.p = p
        values = channels["train_loss"].values  # this point included when the check runs
        self.own = 2 * p.points > values.maxlen
        self.values = collections.deque(maxlen=2 * p.points) if self.own else values
        # A point of the window is within this share of ln k if its median is within tolerance.
        self.slack = (1.0 + p.tolerance) * (1.0 + p.band) - 1.0
        self.flat = 1.0 + p.band
        self.prev = math.nan
        # Points in a row each within `band` of the one before. Once they span the window and the
        # points before it, no point there can be `above` x the level (a chain of 2 x points
        # steps of at most `band` each rises less than that): a loss resting on a level -- a
        # plateau, a run stuck at chance for good -- costs two comparisons a point.
        self.run = 0
        # In logs: flat ** (2 x points) overflows for a large `points`.
        self.settled = 2 * p.points if 2 * p.points * math.log1p(p.band) < math.log(p.above) else math.inf

    def check(self, i, step, v):
        p, prev = self.p, self.prev
        self.prev = v
        if self.own:
            self.values.append(v)
        # Cheap necessary conditions first: this point and the one before are both in the flat
        # window, and this one near some ln k.
        flat = self.flat
        # The test a falling loss fails first (a conjunction: the order changes only its cost).
        if not (prev <= flat * v and v <= flat * prev and v > 0.0 and prev > 0.0):
            self.run = 0
            return None
        run = self.run = self.run + 1
        if i < p.points or run >= self.settled or chance_classes(v, p, self.slack) is None:
            return None
        n = p.points
        values = self.values
        window = [values[j] for j in range(-n, 0)]
        lo, hi = min(window), max(window)
        if not (lo > 0.0 and hi <= flat * lo and math.isfinite(hi)):
            return None
        before = [x for x in (values[j] for j in range(max(-2 * n, -len(values)), -n)) if x == x]
        top = max(before, default=math.nan)
        if not top >= p.above * lo:  # the level is at least lo
            return None
        level = small_median(window)  # np.median's, bit for bit
        k = chance_classes(level, p)
        if k is None or not top >= p.above * level:
            return None
        return StreamHit(note=_note(level, top, k))


@rule(
    code="CS116", objective=True, start=True, symbol="collapse", family="divergence", severity="critical",
    signals=("train_loss",), params=CollapseParams, describe=_describe, peak="first",
    stream=CollapseStream,
    advice="the model collapsed (dead units after a too-large step): restart from a checkpoint before the "
    "jump with a lower learning rate or a warm-up; it will not recover by itself",
)
def collapse(data, p: CollapseParams, since=None):
    """The train loss fell from far above a uniform guess straight onto it, and stays there.

    The last `points` losses are flat (within `band`) at ln k, the
    cross-entropy of guessing every one of k classes alike (within
    `tolerance`, 2 <= k <= `max_classes`), and one of the (up to) `points`
    points before them is at least `above` x that level. A classifier whose loss
    went far above chance -- confidently wrong -- and then sits at exactly
    ln k has outputs that no longer depend on its input: a too-large step
    killed its units (the "loss stuck at 2.303" of a 10-class model). A run
    that converges to a loss near some ln k gets there gradually, not in one
    fall from twice as high.
    """
    s = data.get("train_loss")
    n = p.points
    if s is None or len(s) <= n:
        return
    v = s.values
    first = max(since_index(s, since), n)  # a hit needs a point before its window
    if first >= len(v):
        return
    # NaN as -inf: a window holding one is not flat (its min is not positive), and the points
    # before a window are read without it.
    x = np.where(np.isnan(v), -np.inf, v)
    lo = sliding_min(x, n)[first - n + 1:]  # of the window ending at each point from `first`
    hi = sliding_max(x, n)[first - n + 1:]
    flat = np.flatnonzero((lo > 0) & (hi <= (1.0 + p.band) * lo) & np.isfinite(hi))
    if flat.size == 0:
        return
    at = flat + first
    level = np.median(sliding_window_view(v, n)[at - n + 1], axis=1)
    # The largest of the (up to) n points before each window (-inf: none).
    top = sliding_max(np.concatenate([np.full(n - 1, -np.inf), x]), n)[at - n]
    fell = np.flatnonzero(top >= p.above * level)
    hits, notes = [], {}
    for j in fell.tolist():
        k = chance_classes(float(level[j]), p)
        if k is not None:
            i = int(at[j])
            hits.append(i)
            notes[i] = _note(float(level[j]), float(top[j]), k)
    if hits:
        yield Hits("train_loss", np.asarray(hits), note=notes.get)
