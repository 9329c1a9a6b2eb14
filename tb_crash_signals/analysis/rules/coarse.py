"""CS118: a train loss logged every few dozen steps, or one whose points are smooth means (an epoch's
loss), lost what the run had learnt, within a few points."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tb_crash_signals.analysis.rules.base import Hits, fmt, level_noise, param, rule, since_index
from tb_crash_signals.analysis.rules.divergence import elevated, inside_divergence
from tb_crash_signals.analysis.signals import SIGNAL_LABELS
from tb_crash_signals.analysis.stats import (
    LN10,
    MAD_TO_SIGMA,
    jitter_decades,
    jitter_of_short,
    mad_sorted,
    percentile_sorted,
    value_at_or_before,
)
from tb_crash_signals.analysis.streaming import RETIRED, Stream, StreamHit, small_median


@dataclasses.dataclass(frozen=True)
class CoarseParams:
    every: float = param(
        25.0, "the rule reads a loss whose first `min_points` points lie at least this many steps apart "
        "on average (Lightning logs every 50 steps by default, the HuggingFace Trainer every 500): "
        "each point is a stretch of training, and the sustained divergence (CS113), whose windows "
        "of 9 and 31 points suit a loss logged every few steps, would need a thousand steps or more",
        above=0.0,
    )
    points: int = param(
        3, "trailing points whose median is the loss's level (its initial level: the median of its "
        "first this many finite points, or its first if higher: logged every 50 steps, a loss fell "
        "most of its fall before its second point)", at_least=1,
    )
    best_points: int = param(
        5, "trailing points whose median, at its lowest so far, is the loss's best level: the lowest of "
        "many 3-point medians of a noisy loss is far under its level (a frozen network's per-batch loss "
        "sampled every 50 steps doubles its lowest 3-point median in noise)", at_least=1,
    )
    factor: float = param(
        1.75, "the level must be at least this multiple of the best level ... (a 3-point median of a "
        "loss logged every 50 steps: 1.5 also took noisy climbs at 1.5-1.6x)"
    )
    lost: float = param(
        0.5, "... and have lost at least this share of the progress from the initial level to the best"
    )
    learnt: float = param(
        0.5, "... unless the best level is at most this share of the initial level: a run that learnt "
        "that much has diverged once it lost `lost` of it, at any multiple of its best (less than "
        "CS113's 0.75: 3-point medians of a loss sampled every 50 steps are noisy, and a loss that "
        "learnt a quarter of its start wanders over half of that in noise)", above=0.0,
    )
    z: float = param(
        2.0, "... and at least this many noise units above the best level: the robust log spread of the "
        "points before the level's window (1.4826 x their MAD), x 1.25 over the square root of "
        "`points`: a noisy per-step loss sampled every 50 steps wanders that far over its lowest "
        "3-point median", at_least=0.0,
    )
    jump: float = param(
        5.0, "... or, on a sparse loss, the point itself is the level where it is at least this multiple "
        "of the largest of the `points` points before it: a loss logged every 50 steps that ended a "
        "stretch 5x where it stood has diverged now, and the next point, 50 steps on, only confirms "
        "it (the gates above still hold: a noisy loss's jump stays within its noise). Not on a loss "
        "logged at every step, whose one point may be one batch's spike; 0 never", at_least=0.0,
    )
    climb: int = param(
        3, "... or, on a sparse loss, the point itself is the level where it ends this many rises in a row (each "
        "point above the one before) while the learning rate rose over them: an exponential schedule or a "
        "range test logged every 50 steps climbs 1.3-1.5x a point once its rate passes the stable one, and "
        "its 3-point median stands one point behind (the gates above still hold: a climb within the "
        "loss's noise, or to a level its points already stood at, is none). Not on a loss logged at "
        "every step; 0 never", at_least=0,
    )
    consecutive: int = param(
        1, "points in a row at that level before the rule fires (each point is a stretch of "
        "training, and the level already a median of `points` of them: a second point is 50 "
        "steps more of a divergence)", at_least=1,
    )
    back: float = param(
        1.5, "once fired, the divergence lasts until the level is back under this multiple of the best",
        above=0.0,
    )
    noise_points: int = param(
        50, "the points before the level's window (the last this many) whose spread is the loss's "
        "noise; with fewer than 4 of them, no alarm", at_least=4,
    )
    max_noise: float = param(
        0.5, "no alarm while their quartiles lie this many decades apart or more: the per-step loss of "
        "tiny batches, sampled once every few dozen steps, spans decades", above=0.0,
    )
    trend_noise: float = param(
        0.3, "... unless the jitter of those points (around the line through their neighbours, as "
        "decades between quartiles; at least 10 of them) is under this: quartiles that far apart then "
        "hold the run's fall, a decade learnt in its first twenty points, not its batches' noise; "
        "0: the quartiles alone", at_least=0.0,
    )
    within: float = param(
        0.05, "no alarm on a sparse loss while more than this share of the points before the level's "
        "window, from the first under the level's bar on (what the run had learnt, up to `noise_points` "
        "of them), stand at or above the level: a loss of two populations (mixup's mixed and clean "
        "batches, each point one batch) reaches 2-4x its lowest 5-point median whenever two mixed "
        "batches follow each other, a level a fifth of its own points already stood at; a divergence "
        "climbs over all of them. Not on a smooth loss (an epoch's mean), whose points carry no "
        "batch's draw; 1: never", above=0.0,
    )
    smooth_jitter: float = param(
        0.05, "the rule also reads a loss logged at every step whose points are smooth means (Keras "
        "logs `epoch_loss` at step = epoch; a full-batch loss): the jitter of its first 12 points "
        "(a robust standard deviation of log values around their trend, from second differences) "
        "under this, and that of the points before the level's window too, at each alarm (a "
        "per-batch loss is smooth while it sits at chance, then learns noisily); 0: sparse losses "
        "only", at_least=0.0,
    )
    noisy_jitter: float = param(
        0.2, "... until a later block of 12 points jitters this much or more: the rule then retires from "
        "the loss (a per-batch loss that left chance jitters 0.2-0.5; an epoch loss that falls fast or "
        "jumps once, ~0.1)", above=0.0,
    )
    min_points: int = param(6, "points needed before the rule can fire", at_least=2)
    cooldown: int = param(10, "points back under that level after which a new episode starts")


# Fewer positive points than this before the level's window: no quartiles, no alarm.
_NOISE_MIN = 4
# A loss logged at every step is read while each block of this many points is smooth (the first under
# `smooth_jitter`, the later ones under `noisy_jitter`), told at the block's last point: the first
# block before any alarm can be (the jitter of the points before the level's window needs 10 of them).
SMOOTH_POINTS = 12


def quiet(level, best, before, p: CoarseParams, smooth: bool = False, bar: float = -math.inf) -> bool:
    """Whether the level stands no divergence over the best for the points before its window
    (`before`): too few of them to tell, pure noise at the loss's scale (tiny batches: quartiles
    `max_noise` decades apart, unless their jitter around the trend spans under `trend_noise`), on a
    sparse loss more than `within` of them from the first under `bar` (the least elevated level) on
    at or above the level, not smooth on a loss read for its smooth points (`smooth`: their jitter
    `smooth_jitter` or more), or the level within `z` noise units of the best (their robust log
    spread, as CS113's)."""
    logs = sorted(math.log10(x) for x in before if 0.0 < x < math.inf)
    if len(logs) < _NOISE_MIN:
        return True
    if not smooth and _among_learnt(level, before, bar, p.within):
        return True
    jitter = None  # of those points (second differences of their logs): read once, where a gate needs it
    if percentile_sorted(logs, 0.75) - percentile_sorted(logs, 0.25) >= p.max_noise:
        # Quartiles far apart may hold the loss's trend, not its noise: a run logged every 50 steps
        # that learnt a decade spans it in its first twenty points, each point close to the line
        # through its neighbours. Fewer than 10 points: no telling, the quartiles stand.
        if p.trend_noise <= 0:
            return True
        jitter = jitter_of_short(before)
        if not jitter_decades(jitter) < p.trend_noise:
            return True
    if smooth:
        if jitter is None:
            jitter = jitter_of_short(before)
        if not jitter < p.smooth_jitter:
            return True
    if p.z <= 0.0:
        return False
    spread = MAD_TO_SIGMA * mad_sorted(logs) * LN10  # in natural-log units
    return not (level > 0.0 and math.log(level / best) > p.z * level_noise(spread, p.points))


def _among_learnt(level, before, bar, within) -> bool:
    """Whether more than `within` of the points of `before` from the first under `bar` on stand at
    or above the level (none under it: no)."""
    first = next((j for j, x in enumerate(before) if x < bar), len(before))
    learnt = len(before) - first
    return learnt > 0 and sum(1 for x in before[first:] if x >= level) > within * learnt


def _bar(best, init, p: CoarseParams) -> float:
    """The least level `elevated` can say yes to, for a best level (positive) and an initial one."""
    lost = best + p.lost * (init - best) if init > best else -math.inf
    return lost if best <= p.learnt * init else max(p.factor * best, lost)


def _note(level, best, gap) -> str:
    cadence = f"logged every {fmt(gap)} steps" if gap == gap else "each point a smooth mean, as an epoch's loss"
    return f"{fmt(level / best)}x its best level {fmt(best)} ({cadence})"


def smooth_block(values, p: CoarseParams, first: bool) -> bool:
    """Whether a block of SMOOTH_POINTS points of a loss logged at every step (a list) is smooth:
    its jitter under `smooth_jitter` for the first block, under `noisy_jitter` for a later one."""
    return p.smooth_jitter > 0 and jitter_of_short(values) < (p.smooth_jitter if first else p.noisy_jitter)


def smooth_until(values, p: CoarseParams) -> int:
    """The last point of the first block of SMOOTH_POINTS points that is not smooth (`smooth_block`;
    the number of points if none is): where the rule retires from a loss logged at every step."""
    n = len(values)
    for end in range(SMOOTH_POINTS, n + 1, SMOOTH_POINTS):
        if not smooth_block(values[end - SMOOTH_POINTS:end].tolist(), p, end == SMOOTH_POINTS):
            return end - 1
    return n


def _describe(ep, p):
    return (
        f"{SIGNAL_LABELS[ep.signal]} at {ep.note} from step {ep.start_step}: the run lost what it "
        f"had learnt (peak {fmt(ep.peak_value)})"
    )


def _largest(values):
    """np.max of a list of values: NaN if one is NaN (Python's max depends on where it stands)."""
    top = max(values)
    return top if top == top and all(x == x for x in values) else math.nan


def _median_of_last(values, k):
    """np.median of the last `k` of a list of values (NaN while fewer, or if one is NaN)."""
    return small_median(values[-k:]) if len(values) >= k else math.nan


class CoarseDivergenceStream(Stream):
    hits = ("train_loss",)

    def __init__(self, p, signal, channels):
        self.p = p
        self.values = []  # the last `keep` points (a list: its slices are cheap)
        self.keep = max(max(p.points, p.best_points) + p.noise_points, SMOOTH_POINTS)
        self.first_step = None
        self.gap = math.nan
        # No longer read: a dense loss, from its `min_points`-th point; a loss logged at every step,
        # from a block of points that is not smooth.
        self.retired = False
        self.smooth = False  # a loss logged at every step, read while its points are smooth
        self.pending = False  # ... waiting for its first SMOOTH_POINTS points to tell
        self.head = []  # the first `points` finite points (the initial level's)
        self.init = math.nan
        self.best = math.nan
        self.run = 0
        self.inside = False
        self.lr = channels["lr"].values  # updated before the train loss's channel
        self.lr_at = []  # the learning rate as of each of the last `climb` + 1 points (`_climbed`)

    def check(self, i, step, v):
        if self.retired:
            return RETIRED
        p = self.p
        if p.climb > 0:
            at = self.lr_at
            at.append(self.lr[-1] if self.lr else math.nan)
            if len(at) > p.climb + 1:
                del at[0]
        k = p.min_points - 1
        if i < k:
            # Nothing fires before the `min_points`-th point: the points wait there, and a dense
            # loss is told apart before any work on them.
            if i == 0:
                self.first_step = step
            self.values.append(v)
            return None
        if i == k:
            if step - self.first_step >= p.every * i:
                self.gap = (step - self.first_step) / i  # the cadence its note gives
                self._replay()
            elif step - self.first_step == i and p.smooth_jitter > 0:
                self.smooth = self.pending = True  # every step logged: its first points tell
            else:
                return self._retire()  # a dense loss: CS113 reads it
        if self.pending:
            self.values.append(v)
            if i < SMOOTH_POINTS - 1:
                return None
            # Every block of SMOOTH_POINTS points so far, as the batch rule reads them: more than one
            # when the rule waits for more than SMOOTH_POINTS points (`min_points`).
            if smooth_until(np.asarray(self.values), p) < len(self.values):
                return self._retire()
            self.pending = False
            self.values.pop()
            self._replay()
        finite = self._advance(v)
        values = self.values
        if (self.smooth and i >= SMOOTH_POINTS and (i + 1) % SMOOTH_POINTS == 0
                and not smooth_block(values[-SMOOTH_POINTS:], p, False)):
            return self._retire()  # a per-batch loss that left chance, or a run that crashed
        best, init = self.best, self.init
        up = False
        lr = self.lr
        # Read only where it can matter: inside a divergence, or at a candidate.
        level = judged = math.nan
        if finite and init == init and best > 0.0 and not (lr and lr[-1] <= 0.0):
            bar = _bar(best, init, p)
            # A median of at most 3 points reaches the bar only if the last point or the one
            # before does: most points of a run are told no candidate without it.
            if p.points > 3 or v >= bar or (len(values) > 1 and values[-2] >= bar):
                level = judged = self._level()
                m = p.points
                if (p.jump > 0 and not self.smooth and len(values) > m
                        and v >= p.jump * _largest(values[-m - 1:-1])):
                    judged = v
                elif p.climb > 0 and not self.smooth and self._climbed():
                    judged = v
                if ((judged >= p.factor * best or best <= p.learnt * init)
                        and not (init > best and judged - best < p.lost * (init - best))):
                    hi = max(len(values) - m, 0)
                    up = not quiet(judged, best, values[max(hi - p.noise_points, 0):hi], p, self.smooth, bar)
        if self.inside and level != level:
            level = self._level()
        self.run = self.run + 1 if up else 0
        if up and self.run >= p.consecutive:
            self.inside = True
        elif level < p.back * best or not best > 0.0:  # (a best at 0: the loss reached 0 since)
            self.inside = False
        if self.inside and finite:
            return StreamHit(note=_note(judged if up else level, best, self.gap))
        return None

    def _climbed(self):
        """Whether the last point ends `climb` rises in a row while the learning rate rose over them
        (its value at or before the climb's first point's step under its last one)."""
        k = self.p.climb
        values, at = self.values, self.lr_at
        if len(values) <= k or len(at) <= k:
            return False
        run = values[-k - 1:]
        return all(a < b for a, b in zip(run, run[1:])) and at[0] < at[-1]

    def _retire(self):
        self.retired = True
        self.values = []
        return RETIRED

    def _replay(self):
        """Takes the points that waited for the cadence's decision into the windows."""
        waiting, self.values = self.values, []
        for x in waiting:
            self._advance(x)

    def _level(self):
        """The level: the median of the last `points` points (NaN while fewer, or with a NaN)."""
        return _median_of_last(self.values, self.p.points)

    def _advance(self, v):
        """Takes point v into the windows, the initial level and the best level: whether it is
        finite."""
        p = self.p
        values = self.values
        values.append(v)
        if len(values) > self.keep:
            del values[0]
        finite = v - v == 0.0
        if finite and len(self.head) < p.points:
            self.head.append(v)
            if len(self.head) == p.points:
                self.init = max(small_median(self.head), self.head[0])
        low = _median_of_last(values, p.best_points)
        if low == low and not low >= self.best:
            self.best = low
        return finite


def _medians(v, k):
    """The median of the `k` values ending at each point, NaN while fewer or when one is NaN."""
    out = np.full(v.shape[0], np.nan)
    if v.shape[0] >= k:
        out[k - 1:] = np.median(np.lib.stride_tricks.sliding_window_view(v, k), axis=1)
    return out


@rule(
    code="CS118", objective=True, start=True, symbol="coarse-divergence", family="divergence", severity="critical",
    signals=("train_loss", "lr"), params=CoarseParams, describe=_describe, stream=CoarseDivergenceStream,
    advice="the run is diverging: stop it, restore an earlier checkpoint, lower the learning rate",
)
def coarse_divergence(data, p: CoarseParams, since=None):
    """A train loss logged every few dozen steps, or one whose points are smooth means (an epoch's
    loss), lost what the run had learnt, within a few points.

    On a loss whose first `min_points` points lie `every` (25) steps apart or
    more on average, or logged at every step with its first 12 points smooth
    (their jitter under `smooth_jitter`: Keras' `epoch_loss`, logged at step =
    epoch; a full-batch loss; read until a later block of 12 points jitters
    `noisy_jitter` or more), the sustained divergence is read over `points` (3)-point
    medians: the level has lost at least `lost` of the progress from the
    initial level (the median of the first `points` finite points, or the
    first if higher) to its best
    level so far (the lowest median of `best_points` points), and is at least
    `factor` x that best, unless the best is at most `learnt` x the initial
    level, and `z` noise units above it, for `consecutive` points in a row
    (on a sparse loss, a point at least `jump` x the largest of the `points`
    before it is judged as the level itself: the next point is 50 steps
    more of it),
    from the `min_points`-th point on; never while the points before the
    level's window are pure noise (tiny batches: their quartiles `max_noise`
    decades apart or more, unless their jitter around the loss's trend spans
    under `trend_noise`: a run that learnt a decade in its first points) or
    fewer than 4, nor, on a sparse loss, while more than `within` (5 %) of
    them from the first under the level's bar on stand at or above the level
    (a loss of two populations, as mixup's: its level stands where its own
    points already stood), nor while the learning rate
    stands at zero or below (the weights do not move: the loss's climb is
    its batches' noise; CS511 tells the rate), nor, on a loss read for its
    smooth points, while the points before the level's window jitter
    `smooth_jitter` or more (a per-batch loss sits smooth at chance, then
    learns noisily). Once
    fired, every finite point is part of the divergence until the level is
    back under `back` x the best. A run logged every 50 steps for 1 000 holds
    20 points, fewer than the 31 the sustained divergence (CS113) waits for;
    a Keras run of 30 epochs, 30 points, and a 9-point median five points in
    a row would tell its divergence a third of the run late.
    """
    s = data.get("train_loss")
    if s is None or len(s) < p.min_points:
        return
    k = p.min_points - 1
    span = int(s.steps[k]) - int(s.steps[0])  # Python ints, as the stream's: no int64 wrap-around
    v = s.values
    smooth = span < p.every * k
    if smooth and span != k:
        return
    until = smooth_until(v, p) if smooth else len(s)  # where the rule retires
    if smooth and until < SMOOTH_POINTS:
        return
    gap = math.nan if smooth else span / k
    m = p.points
    level = _medians(v, m)
    # The level a point is judged at: on a sparse loss, the point itself where it jumped `jump` x the
    # largest of the `points` before it.
    judged = level.copy()
    if p.jump > 0 and not smooth and v.shape[0] > m:
        with np.errstate(invalid="ignore"):
            top = np.max(np.lib.stride_tricks.sliding_window_view(v[:-1], m), axis=1)
            jumped = np.flatnonzero(v[m:] >= p.jump * top) + m
        judged[jumped] = v[jumped]
    lr = data.get("lr")
    lr_at = value_at_or_before(lr.steps, lr.values, s.steps) if lr is not None and len(lr) else None
    if p.climb > 0 and not smooth and v.shape[0] > p.climb and lr_at is not None:
        c = p.climb
        with np.errstate(invalid="ignore"):
            rises = np.lib.stride_tricks.sliding_window_view(v[1:] > v[:-1], c).all(axis=1)
            climbed = np.flatnonzero(rises & (lr_at[:-c] < lr_at[c:])) + c
        judged[climbed] = v[climbed]
    best = np.fmin.accumulate(_medians(v, p.best_points))
    finite = np.flatnonzero(np.isfinite(v))
    if finite.size < m:
        return
    init = max(float(np.median(v[finite[:m]])), float(v[finite[0]]))
    known = int(finite[m - 1])  # the initial level is known from this point on
    up = elevated(judged, best, init, p) & np.isfinite(v)
    up[: max(k, known)] = False
    if lr_at is not None:
        with np.errstate(invalid="ignore"):
            up &= ~(lr_at <= 0.0)
    for i in np.flatnonzero(up).tolist():
        hi = max(i + 1 - m, 0)
        if quiet(judged[i], best[i], v[max(hi - p.noise_points, 0):hi].tolist(), p, smooth, _bar(best[i], init, p)):
            up[i] = False
    # A best level at 0 or under (the loss reached 0 since it fired) ends the divergence, whatever
    # the level (NaN while a NaN is among its points): no ratio stands over it.
    with np.errstate(invalid="ignore"):
        idx = inside_divergence(up, np.where(best > 0.0, level, -np.inf), best, v, p)
    idx = idx[(idx >= since_index(s, since)) & (idx < until)]
    if idx.size:
        yield Hits("train_loss", idx, note=lambda i: _note(judged[i] if up[i] else level[i], best[i], gap))
