"""CS113: the train loss lost what it had learnt and stays there (sustained divergence)."""

from __future__ import annotations

import dataclasses
import math
from itertools import islice

import numpy as np

from tb_crash_signals.analysis.rules.base import (
    Hits,
    best_level_param,
    early_jitter_param,
    early_points_param,
    fell_by,
    fmt,
    level_noise,
    level_param,
    max_noise_param,
    noise_window_param,
    param,
    rule,
    since_index,
    spread_window_param,
    trend_noise_param,
)
from tb_crash_signals.analysis.signals import SIGNAL_LABELS
from tb_crash_signals.analysis.stats import (
    best_levels,
    ffill_nonfinite,
    initial_level,
    jitter_at,
    jitter_decades,
    jitter_of_short,
    log_spread_at,
    noise_gate_at,
    run_lengths,
    smoothed_level,
)
from tb_crash_signals.analysis.streaming import NoteLater, Rest, Stream, recent_logs, shared_level


@dataclasses.dataclass(frozen=True)
class DivergenceParams:
    smooth: int = level_param(9)
    best_smooth: int = best_level_param()
    factor: float = param(2.0, "the current level must be at least this multiple of the best level")
    lost: float = param(
        0.5, "... and have lost at least this share of the progress from the initial level (the "
        "median of the first 10 points) to the best"
    )
    learnt: float = param(
        0.75, "... unless the best level is at most this share of the initial level: a run that "
        "learnt that much has diverged once it lost `lost` of it, at any multiple of its best (a "
        "classifier drifting back toward chance never doubles its best)", above=0.0,
    )
    learnt_z: float = param(
        2.5, "... where a fall from the initial level to the best counts as learnt only if it stands at least "
        "this many times the loss's robust log spread over `spread_window` points: a flat noisy loss (a "
        "fine-tune from a trained model, a job resumed at its floor) has a lowest 31-point median under "
        "the median of its first 10 points by noise alone; 0 never asks", at_least=0.0,
    )
    z: float = param(
        3.0, "... and at least this many noise units above the best level (the loss's robust log spread over "
        "`spread_window` points, over the square root of `smooth`): the median of 9 points of a noisy "
        "small-batch loss wanders that far above its lowest 31-point median without any divergence. The "
        "best level has noise of its own, and as the lowest of many medians sits ~2 of its noise units "
        "under the loss's level: with the level's two noise units, ~3.3 of the level's",
        at_least=0.0,
    )
    spread_window: int = spread_window_param()
    above_best: int = param(
        2, "... and, from `min_points` on, above the `above_best`-th highest of the `best_smooth` points "
        "whose median last lowered the best level (forward-filled, as the median reads them), or at the "
        "initial level: a loss "
        "whose batches fall into two populations (mixup's mixed and clean batches, 3-4x apart) has "
        "medians that flip between them by chance, its best level a lucky stretch of mostly clean "
        "batches whose few mixed ones stand where the level flips to; a divergence lifts the level over "
        "nearly all the points of its best, or back to where it started; 0 never asks", at_least=0,
    )
    consecutive: int = param(5, "points in a row at that level before the rule fires", at_least=1)
    back: float = param(
        1.5, "once fired, the divergence lasts until the level is back under this multiple of the best: "
        "a loss bouncing around `factor` x its best is one divergence, not one per bounce", above=0.0,
    )
    noise_window: int = noise_window_param()
    max_noise: float = max_noise_param("alarm")
    trend_noise: float = trend_noise_param()
    min_points: int = param(31, "points needed before the rule can fire (the best level's median of 31) ...")
    early_points: int = early_points_param()
    early_jitter: float = early_jitter_param()
    cooldown: int = param(20, "points back under that level after which a new episode starts")
    far: float = param(
        4.0, "a level at least this multiple of the best and above the initial level passes the noise "
        "gates (`max_noise`, `early_jitter`) on a loss whose jitter over its last 30 points is under "
        "`far_jitter`: a run climbing away from where it started has diverged, even while the climb "
        "itself spreads the quartiles and the points are too few for `min_points`; 0 never", at_least=0.0,
    )
    far_jitter: float = param(
        0.5, "see `far`: tiny-batch losses that span decades, whose medians of 9 wander 4x, jitter more"
    )


# The far path reads the jitter of a loss's last this many points (the one checked included).
FAR_POINTS = 30


def far_gone(level, best, init, recent, p: DivergenceParams) -> bool:
    """Whether the level is `far` x the best and above the initial level, on a loss whose last
    FAR_POINTS points (`recent()`, the one checked included) jitter less than `far_jitter`."""
    return (p.far > 0 and best > 0 and level >= p.far * best and level >= init
            and jitter_of_short(recent()) < p.far_jitter)


def elevated(level, best, init, p: DivergenceParams):
    """Whether the current level has lost what the run learnt: arrays or scalars (the batch rule
    and its stream share it)."""
    with np.errstate(invalid="ignore"):
        return (
            ((level >= p.factor * best) | (best <= p.learnt * init))
            & (best > 0)
            & ~((init > best) & (level - best < p.lost * (init - best)))
        )


def out_of_noise(level, best, spread, p: DivergenceParams) -> bool:
    """Whether the level stands `z` noise units above the best (a spread unknown, NaN: yes). A
    level at or under zero (a loss that goes negative) stands no ratio above a positive best."""
    ratio = level / best
    return not spread > 0.0 or (ratio > 0.0 and math.log(ratio) > p.z * level_noise(spread, max(1, p.smooth)))


def best_top(ordered, p: DivergenceParams) -> float:
    """The `above_best`-th highest of `ordered` (the sorted finite values of the window whose median
    set the best level): the bar of `above_best`; -inf when it holds fewer (no bar)."""
    return ordered[-p.above_best] if len(ordered) >= p.above_best else -math.inf


def best_tops_at(v, best, where, p: DivergenceParams) -> np.ndarray:
    """best_top at each of `where`: of the forward-filled `best_smooth` points (as the best level's
    median reads them) up to the last point at or before it where the best levels `best` fell (or
    first became known)."""
    filled = ffill_nonfinite(v)
    points = np.arange(best.shape[0])
    with np.errstate(invalid="ignore"):
        fell = np.isfinite(best) & ~(best >= np.r_[np.nan, best[:-1]])
    last = np.maximum.accumulate(np.where(fell, points, -1))[where]
    # One bar per best level: a run that stays diverged reads the same one at every point.
    falls, at = np.unique(last, return_inverse=True)
    tops = []
    for j in falls.tolist():
        window = filled[max(j - p.best_smooth + 1, 0) : j + 1] if j >= 0 else filled[:0]
        tops.append(best_top(np.sort(window[np.isfinite(window)]), p))
    return np.asarray(tops, dtype=np.float64)[at.reshape(-1)]


def learnt_beyond_noise(level, best, init, spread, p: DivergenceParams) -> bool:
    """Whether an elevated level stands on a fall the run really made: `factor` x the best asks
    for none; otherwise the fall from the initial level to the best is `learnt_z` x the loss's log
    spread or more (a spread unknown, NaN: yes)."""
    if not p.learnt_z > 0.0 or level >= p.factor * best or not spread > 0.0:
        return True
    return fell_by(init, best, p.learnt_z, spread)


def learnt_beyond_noise_at(level, best, init, spread, p: DivergenceParams) -> np.ndarray:
    """learnt_beyond_noise over arrays, the same booleans (the points within a hair of the bar are
    decided by learnt_beyond_noise itself, as out_of_noise_at does)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        free = ~(p.learnt_z > 0.0) | (level >= p.factor * best) | ~(spread > 0.0)
        ratio = init / best
        lhs = np.log(np.where(ratio > 0.0, ratio, np.nan))
        rhs = p.learnt_z * spread
        out = free | (lhs >= rhs)
        near = np.flatnonzero(~free & ~(np.abs(lhs - rhs) > 1e-9 * np.abs(rhs)) & (ratio > 0.0))
    for j in near.tolist():
        out[j] = learnt_beyond_noise(level[j], best[j], init[j], spread[j], p)
    return out


def out_of_noise_at(level, best, spread, p: DivergenceParams) -> np.ndarray:
    """out_of_noise over arrays, the same booleans: numpy's log may differ from math.log in its last
    bit, so the points within a hair of the bar are decided by out_of_noise itself."""
    with np.errstate(invalid="ignore", divide="ignore"):
        lhs = np.log(level / best)
        rhs = p.z * (1.25 * spread / math.sqrt(max(1, p.smooth)))  # level_noise's, operation by operation
        out = ~(spread > 0.0) | (lhs > rhs)
        near = np.flatnonzero((spread > 0.0) & ~(np.abs(lhs - rhs) > 1e-9 * np.abs(rhs)))
    for j in near.tolist():
        out[j] = out_of_noise(level[j], best[j], spread[j], p)
    return out


def rest_factor(p: DivergenceParams) -> float:
    """The multiple of the best level under which `elevated` is false for any initial level: a
    best at most `learnt` x the initial level must regain `lost` x (1 / learnt - 1) of itself."""
    return min(p.factor, 1.0 + p.lost * (1.0 / p.learnt - 1.0))


def early_best(best, level_low):
    """The best level before `min_points` (CS113, CS202): the lower of the best level and the
    lowest current level so far. Before its `best_smooth` points the best level is the median of
    all the points so far (from the 10th), which lags far behind a loss that fell fast."""
    return level_low if best != best or level_low < best else best


def early_bests(best, level, min_points):
    """`early_best` at every point of a series: `best` and `level` arrays."""
    k = min(min_points, best.shape[0])
    out = best.copy()
    out[:k] = np.fmin(best[:k], np.fmin.accumulate(level[:k]))
    return out


# The early gate reads the jitter of at most this many points before the level's window: the
# noise the loss has now. A loss that fell smoothly at first and turned noisy later (a one-cycle
# warm-up raising the learning rate) is no smooth loss whose 1.1x bump is a climb.
EARLY_JITTER_POINTS = 16


def early_jitter_at(i, values, p, width=None) -> float:
    """The `jitter` of the last EARLY_JITTER_POINTS points before the level's window at point i (of
    `width` points, `smooth` if None), of the run's `values` from its first (an array, or the
    channel's recent points while it holds them all): a short run's noise, which its quartiles
    would mistake for its trend and the climb."""
    k = max(i - (width or p.smooth) + 1, 0)
    a = max(k - EARLY_JITTER_POINTS, 0)
    return jitter_of_short(values[a:k].tolist() if isinstance(values, np.ndarray) else islice(values, a, k))


def gate_noise(i, noise_at, values, p) -> float:
    """The noise the gates of CS113 and CS202 compare with `max_noise` at point i (batch and
    stream): from `min_points` on, `noise_at(i)`, that of the `noise_window` points before i;
    before it, 0 on a smooth loss (`early_jitter_at` under `early_jitter`), else inf."""
    if i >= p.min_points:
        return noise_at(i)
    return 0.0 if early_jitter_at(i, values, p) < p.early_jitter else math.inf


def lift_trend_gates(v, ends, gates, p) -> np.ndarray:
    """The noise gates at `ends` (noise_gate_at's, changed in place) read around the loss's trend
    (`trend_noise`, CS113's and CS202's): NaN where one holds but the jitter of its `noise_window`
    points, as decades between quartiles, is under `trend_noise`."""
    gated = np.flatnonzero(gates >= p.max_noise) if p.trend_noise > 0 else ()
    if len(gated):
        held = jitter_decades(jitter_at(v, ends[gated], p.noise_window)) >= p.trend_noise
        gates[gated] = np.where(held, gates[gated], np.nan)
    return gates


def trend_lifted(noise: float, recent, p) -> float:
    """lift_trend_gates at a stream's point: `recent` the RecentLogs (np.log) of the `noise_window`
    points before it, whose jitter is read only where the gate holds."""
    if p.trend_noise > 0 and noise >= p.max_noise and not jitter_decades(recent.jitter()) >= p.trend_noise:
        return math.nan
    return noise


def inside_divergence(up, level, best, values, p) -> np.ndarray:
    """The points of a sustained divergence (CS113, CS118): every finite point from where `up` held
    `p.consecutive` points in a row until the level is back under `p.back` x the best. A point both
    firing and back under `back` fires, as in the streams."""
    points = np.arange(len(values))
    fired = np.maximum.accumulate(np.where(run_lengths(up) >= p.consecutive, points, -1))
    with np.errstate(invalid="ignore"):
        recovered = np.maximum.accumulate(np.where(level < p.back * best, points, -1))
    return np.flatnonzero((fired >= 0) & (fired >= recovered) & np.isfinite(values))


def _describe_divergence(ep, p):
    return (
        f"{SIGNAL_LABELS[ep.signal]} at {ep.note} from step {ep.start_step}: the run lost what it "
        f"had learnt (peak {fmt(ep.peak_value)})"
    )


class LossDivergenceStream(Stream):
    hits = ("train_loss",)

    def __init__(self, p, signal, channels):
        self.p = p
        self.level = shared_level(channels["train_loss"], p.smooth)
        self.best_level = shared_level(channels["train_loss"], p.best_smooth, best=True)
        self.initial = channels["train_loss"].initial  # pushed after the checks: as of the points before
        self.noise = recent_logs(channels["train_loss"], p.noise_window, np.log10)  # of the points before
        self.spread = recent_logs(channels["train_loss"], p.spread_window, np.log)  # of the points before
        # The windows the stream keeps itself, if any (a channel keeping fewer points than they read).
        self.jitter = recent_logs(channels["train_loss"], p.noise_window, np.log)  # the gate's, around the trend
        self.own = tuple(o for o in (getattr(r, "values", None) for r in (self.noise, self.spread, self.jitter))
                         if o is not None)
        self.values = channels["train_loss"].values
        self.start = min(p.min_points, p.early_points)
        self.run = 0
        self.inside = False  # fired, and the level not yet back under `back` x the best
        # `above_best`'s bar, read where the best level falls (the Level calls it, at points where
        # the rule may rest too) from the window its median was taken of: the Level's own sorted
        # list once full, the shared one of every point so far before.
        self.top = -math.inf
        self.levels = channels["train_loss"].levels
        if p.above_best > 0:
            self.best_level.also_on_low(self._note_best)

    def _note_best(self):
        self.top = best_top(self.best_level.sorted or self.levels.head, self.p)

    def rest(self):
        # Under `rest_factor` x the best nothing is elevated (see check); nothing must be counted
        # or inside, nor kept per point by the stream itself.
        if self.own:
            return None
        p = self.p
        return Rest(after=max(p.min_points, self.start), bars=((self.level, rest_factor(p), self.best_level),))

    def _recent(self):
        return islice(reversed(self.values), FAR_POINTS)  # the jitter reads either order alike

    def _noise_at(self, i):
        return trend_lifted(self.noise.noise_decades(), self.jitter, self.p)  # of the points before the current one

    def check(self, i, step, v):
        if i < self.start:
            # Nothing is elevated before `start`: the run and `inside` stay at their start (0, False).
            for own in self.own:
                own.append(v)
            return None
        p = self.p
        level = self.level.value
        best = self.best_level.low
        if i < p.min_points:
            best = early_best(best, self.level.low)
        init = self.initial.value
        # `elevated` on floats, without its numpy error state (a context manager a point).
        # An if, not a boolean assigned: its comparisons jump, so 3.11 specialises them.
        if (v - v == 0.0 and (level >= p.factor * best or best <= p.learnt * init)
                and best > 0.0 and not (init > best and level - best < p.lost * (init - best))):
            up = True
        else:
            up = False
        if up and (p.z > 0.0 or p.learnt_z > 0.0):
            spread = self.spread.log_spread()
            up = ((p.z <= 0.0 or out_of_noise(level, best, spread, p))
                  and learnt_beyond_noise(level, best, init, spread, p))
        if up and i >= p.min_points and not (level > self.top or level >= init):
            up = False
        if up and gate_noise(i, self._noise_at, self.values, p) >= p.max_noise:
            up = far_gone(level, best, init, self._recent, p)
        for own in self.own:
            own.append(v)
        self.run = self.run + 1 if up else 0
        if up and self.run >= p.consecutive:
            self.inside = True
        elif level < p.back * best:
            self.inside = False
        self.busy = self.run > 0 or self.inside
        if self.inside and v - v == 0.0:
            return NoteLater(_note, level, best)
        return None


def _note(level, best) -> str:
    return f"{fmt(level / best)}x its best level {fmt(best)}"


@rule(
    code="CS113", objective=True, start=True, symbol="loss-divergence", family="divergence", severity="critical",
    signals=("train_loss",), params=DivergenceParams, describe=_describe_divergence,
    stream=LossDivergenceStream,
    advice="the run is diverging: stop it, restore an earlier checkpoint, lower the "
    "learning rate (PaLM restarted ~100 steps before spikes and skipped batches)",
)
def loss_divergence(data, p: DivergenceParams, since=None):
    """The train loss lost what the run had learnt, and stays there (sustained divergence).

    The loss's current level (trailing median of `smooth` points) has lost at
    least `lost` of the progress from the initial level to its best level so
    far (the lowest trailing median of `best_smooth` points), and is at least
    `factor` x that best, unless the best is at most `learnt` x the initial
    level (a classifier drifting back toward chance never doubles its best)
    by a fall of at least `learnt_z` x the loss's robust log spread (a flat
    noisy loss's lowest median lies under its first points by noise alone),
    `z` noise units above that best (the loss's robust log spread), for
    `consecutive` points in a row, on a loss that is not pure noise (tiny
    batches), and from `min_points` on above all but `above_best` - 1 of the
    points whose median set the best level, or at the initial level (a
    loss of two populations, mixup's, flips its median). A spike that comes back does
    not fire; a jump that stays, or a slow climb, does. Once fired, every finite
    point is part of the divergence until the level is back under `back` x
    the best. Before `min_points`, from `early_points` on, a smooth loss (see
    `early_jitter`: epoch means of a short run) is judged against the lower
    of its best level and its lowest current level. A level `far` (4) x its
    best and above the initial level passes the noise gates on a loss whose
    last 30 points jitter under `far_jitter`: a run climbing away from where
    it started, whose climb itself spreads the quartiles the gate reads.
    """
    s = data.get("train_loss")
    if s is None or len(s) <= min(p.min_points, p.early_points):
        return
    v = s.values
    level = smoothed_level(v, p.smooth)
    lowest = best_levels(v, p.best_smooth)
    best = early_bests(lowest, level, p.min_points)
    init, known_after = initial_level(v)
    # The initial level is known from the point after its 10th.
    inits = np.where(np.arange(len(v)) > known_after, init, np.nan)
    up = elevated(level, best, inits, p) & np.isfinite(v)
    up[: min(p.min_points, p.early_points)] = False

    # Only where the level is that high; that is every point of a run that stays diverged.
    where = np.flatnonzero(up)
    if where.size and (p.z > 0.0 or p.learnt_z > 0.0):
        spread = log_spread_at(v, where, p.spread_window)
        up[where] = ((out_of_noise_at(level[where], best[where], spread, p) if p.z > 0.0 else True)
                     & learnt_beyond_noise_at(level[where], best[where], inits[where], spread, p))
        where = np.flatnonzero(up)
    late = where[where >= p.min_points]
    if late.size and p.above_best > 0:
        tops = best_tops_at(v, lowest, late, p)
        up[late] = (level[late] > tops) | (level[late] >= inits[late])
        where = np.flatnonzero(up)
        late = where[where >= p.min_points]
    gates = lift_trend_gates(v, late, noise_gate_at(v, late, p.noise_window, p.max_noise), p)
    noise = dict(zip(late.tolist(), gates.tolist()))
    for i in where.tolist():
        if gate_noise(i, noise.get, v, p) >= p.max_noise:
            up[i] = far_gone(level[i], best[i], inits[i], lambda i=i: v[max(i - FAR_POINTS + 1, 0):i + 1].tolist(), p)
    idx = inside_divergence(up, level, best, v, p)
    idx = idx[idx >= since_index(s, since)]
    if idx.size:
        yield Hits("train_loss", idx, note=lambda i: _note(level[i], best[i]))
