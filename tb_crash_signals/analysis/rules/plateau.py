"""CS301: the train loss stopped making progress (trend layer)."""

from __future__ import annotations

import dataclasses
import math
from bisect import bisect_right as _bisect_right
from bisect import insort as _insort
from itertools import islice

import numpy as np

from tb_crash_signals.analysis import stats
from tb_crash_signals.analysis.rules.base import (
    Hits,
    fmt,
    level_noise,
    max_noise_param,
    noise_window_param,
    param,
    rule,
    since_index,
)
from tb_crash_signals.analysis.stats import (
    chunks,
    finite_anchor,
    initial_level,
    jitter,
    jitter_of_short,
    noisy_at,
    trailing_median_inclusive,
)
from tb_crash_signals.analysis.streaming import NoteLater, Stream, recent_logs, shared_level, small_median

# What the note says of a stall while the loss is stuck near its start; above it (at least ABOVE
# times its initial level); or back near it after it had learnt (its best level under `stuck` x the
# initial one, its level at least ABOVE times that best). The last two lost ground rather than never
# moved: analysis.recovery and the incidents tell them apart with `lost_ground`.
STUCK_NOTE = "near where it started"
ABOVE_NOTE = "above where it started"
BACK_NOTE = "back near where it started after it had learnt"
# ... and, of a loss stuck near its start, that updates far larger than training takes came before:
# a learning rate too high wrecked the weights (the incidents tell it with `large_updates`).
LARGE_UPDATES_NOTE = "after updates far too large"
# ... and of a stall under a learning rate that decayed to ~0 (its share of its peak follows): the
# incidents fold it into a learning rate at zero's story (`lr_gone`).
LR_GONE_NOTE = "with the learning rate at"
ABOVE = 1.25
# Back near its start: a level this much above the best, once the loss had learnt (a fast start's
# initial level, the median of its first 10 points, is already part-way down: its first point tells
# what it learnt from). A warm-up that overshoots undoes a tenth to a fifth of what a run learnt.
BACK = 1.1
# ... and out of the noise of the level: a noisy loss's smoothed level wanders 10-20 % over its best.
BACK_Z = 3.0
NOISE_POINTS = 50
# The learning rate has fallen when it is under this share of its peak so far (`lr_fell`'s default;
# CS402 reads a schedule's course with it too).
LR_FELL = 0.9
_nan, _inf = math.nan, math.inf


@dataclasses.dataclass(frozen=True)
class PlateauParams:
    smooth: int = param(9, "trailing points whose median is the smoothed loss")
    rel_improvement: float = param(
        0.01, "progress means the best smoothed loss fell by at least this fraction over the "
        "patience window"
    )
    min_patience: int = param(8, "points the best must have stood still before the rule fires")
    patience_fraction: float = param(
        0.4, "... or this share of the points logged so far, if larger, so a long run must "
        "stall for a proportionate time", at_least=0.0, at_most=1.0,
    )
    max_patience: int = param(
        2000, "... but never more than this many points (bounds the online monitor's history)"
    )
    max_warmup: int = param(
        100, "a rising learning rate is a warm-up (no plateau) only within this many points, and only "
        "before it first fell (see `lr_fell`): one that rose through all of them ever faster from ~0 (an "
        "exponential schedule, a range test, a polynomial ramp) is a schedule gone wrong, not a warm-up; "
        "a cosine warm-up from a floor (OneCycleLR's, from a 25th of its peak) rises ever faster at first "
        "too, a few times over"
    )
    stuck: float = param(
        0.75, "a stall counts only while the smoothed loss is at least this share of the level it started "
        "at (see `start_points`; the first point when the first 10 blew up from it, 3x: the run is stuck "
        "near where it started; a loss at two thirds of its start has learnt what it can when most of it "
        "cannot be learnt: a diffusion model's noise-prediction MSE), or of the initial level (the "
        "median of the first 10 points) once the loss had learnt under that share and came back there, "
        "1.1x its best and 3 noise units of its level above it (lost ground) ..."
    )
    start_points: int = param(
        3, "... where the level it started at is the median of the first this many points (1-10) if "
        "higher than the initial level (not where those blew up from the first point, unless the "
        "learning rate has fallen: see `lr_fell`): a loss that fell fast in its first points (a "
        "contrastive loss halved in 30 steps, a regression at its floor by its 10th point) has learnt "
        "that fall, the median of its first 10 is part-way down, and the median of 3 is no one "
        "batch's; 10: the initial level alone", at_least=1, at_most=10,
    )
    learnt_drop: float = param(
        0.2, "... and never once the smoothed loss is at most this share of the level `start_points` "
        "reads, or of its first point if higher, whatever the learning rate: a loss that fell fivefold "
        "within its first points (a regression at its noise floor by its 3rd logged point, or by its "
        "2nd) has learnt, its initial level already trained; 0 never", at_least=0.0,
    )
    early_points: int = param(
        15, "... and one that began within the first this many points (or the 10 that set the initial "
        "level) only on a smooth loss (see `early_jitter`): a per-step loss at chance for its first "
        "~20 steps is a slow start", at_least=1, at_most=64,
    )
    early_steps: int = param(
        150, "... but a stall that began this many steps or more after the first logged point, past the 10 "
        "points that set the initial level, is no early one: logged every 50 steps (Lightning's default), "
        "15 points are 750 steps, far past any slow start; logged every 1-10 steps, the 15 points come first. "
        "Within those 10 points a stall stays early however sparse the log, unless the loss is smooth "
        "enough (`sparse_jitter`): the lowest of a few noisy medians there is no level to stall against (on "
        "the sparse dev sets, counting them whatever their noise: plateaus found 61 -> 64 of 88, healthy "
        "warnings 0.5 -> 1.8 per 10k)", at_least=1,
    )
    early_jitter: float = param(
        0.003, "a smooth loss: the noise of "
        "its points so far (its first 64 at most) around their own trend (see `jitter`) under this. Epoch "
        "means stuck from the first epoch are a plateau; a per-step loss's first points cannot tell one "
        "from a slow start"
    )
    sparse_jitter: float = param(
        0.01, "... but a stall that began within those 10 points, `early_steps` or more after the first logged "
        "point (a loss logged every 20 steps or more sparsely), counts on a loss whose jitter is under this: "
        "the 1% the stall asks (`rel_improvement`), so its smoothed level is read against a level, not "
        "against its noise (a classifier held at chance, logged every 50 steps, moves ~1% a point; a noisy "
        "regression's 10-20%). 0 keeps such a stall to `early_jitter`", at_least=0.0,
    )
    lr_floor: float = param(
        0.01, "... or while the learning rate is at most this share of its peak so far (it decayed to ~0), "
        "and was when the stall began: a schedule that decays into the stall (a cosine cycle's end, "
        "one-cycle's anneal) is converging, as is a run that learnt and slows down under a working "
        "learning rate"
    )
    lr_climb: float = param(
        1.2, "... or while the learning rate, once it fell, has climbed to at least this multiple of its "
        "peak as of the stall's start (a schedule that climbs back far above where it was: cyclic "
        "schedules and restarts return to their peak, no higher)", above=0.0,
    )
    lr_fell: float = param(
        LR_FELL, "the learning rate fell when it was under this share of its peak so far (as the loss's "
        "points see it: its value at or before each)", above=0.0,
    )
    updates_high: float = param(
        0.05, "a loss stuck near where it started after an update ratio (the updates' norm over the "
        "weights') of at least this is told so: a learning rate too high spoilt the weights (dead or "
        "saturated units), not one too low. Healthy runs of the detection corpus peak at 0.04; its runs "
        "at a learning rate far too high, and its transformers without warm-up, at 0.05-0.35; 0: never",
        at_least=0.0,
    )
    noise_window: int = noise_window_param()
    max_noise: float = max_noise_param("plateau")
    cooldown: int = param(50, "points after which a new episode starts")


def _describe_plateau(ep, p):
    return (
        f"train loss has not improved by {p.rel_improvement:.0%} for "
        f"{ep.note or 'many points'} (around {fmt(ep.start_value)} at step {ep.start_step})"
    )


def lost_ground_at(level, best, best_of_first, learnt, noise) -> bool:
    """Whether a stall's smoothed loss is back near its start after it had learnt (see
    plateau_note): `level` and `best` over the initial level, `best_of_first` the best over the
    level the loss learnt from; the best under `learnt` x either, the level at least BACK x the
    best and BACK_Z x its `noise` above it."""
    return bool(best > 0.0 and (best < learnt or best_of_first < learnt) and level >= BACK * best
                and not math.log(level / best) < BACK_Z * noise)


def plateau_note(patience, lr_fraction, lr_climb=math.nan, level=math.nan, best=math.nan, learnt=math.nan,
                 updates=math.nan, updates_high=0.0, best_of_first=math.nan, noise=math.nan) -> str:
    """How long the loss stood still, and why it is a plateau: the learning rate gone (its share
    of its peak), or climbing far above where it was (its multiple of the peak as of the stall's
    start), else the loss stuck near where it started, above it (`level`: the smoothed loss over
    its initial level, at least ABOVE), or back near it after it had learnt (`best`: its best
    level over the initial one, or `best_of_first` over its first point if higher, under `learnt`;
    the level at least BACK times that best, and BACK_Z times its `noise` above it: the jitter of its
    last NOISE_POINTS points over the square root of the smoothing, in log units). Stuck
    near its start, the note adds updates far too large when the update ratio's peak so far
    (`updates`) reached `updates_high` (> 0)."""
    if lr_fraction == lr_fraction:
        why = f", {LR_GONE_NOTE} {fmt(100 * lr_fraction)}% of its peak"
    elif lr_climb == lr_climb:
        why = f", while the learning rate climbed back to {fmt(lr_climb)}x its earlier peak"
    elif level >= ABOVE:
        why = f", {ABOVE_NOTE} ({fmt(level)}x its initial level)"
    elif lost_ground_at(level, best, best_of_first, learnt, noise):
        why = f", {BACK_NOTE} ({fmt(level / best)}x its best level)"
    elif updates_high > 0 and updates >= updates_high:
        why = f", {STUCK_NOTE} {LARGE_UPDATES_NOTE} (update ratio up to {fmt(updates)})"
    else:
        why = f", {STUCK_NOTE}"
    return f"{int(patience)} points{why}"


def lr_gone(message: str) -> bool:
    """Whether a CS301 message tells a stall under a learning rate that decayed to ~0."""
    return f", {LR_GONE_NOTE} " in message


def lost_ground(message: str) -> bool:
    """Whether a CS301 message tells a stall above where the loss started, or back near there
    after it had learnt (see plateau_note)."""
    return ABOVE_NOTE in message or BACK_NOTE in message


def large_updates(message: str) -> bool:
    """Whether a CS301 message tells a loss stuck near its start after updates far too large."""
    return LARGE_UPDATES_NOTE in message


def stuck_near_start(message: str) -> bool:
    """Whether a CS301 message tells a loss stuck near its start under a learning rate that did not
    decay, with no sign of updates far too large (see plateau_note)."""
    return STUCK_NOTE in message and not lost_ground(message) and not large_updates(message)


def level_noise_at(values, i: int, smooth: int) -> float:
    """The noise of the smoothed loss at point i (see plateau_note): the jitter of the NOISE_POINTS
    points ending there, over the square root of `smooth` (at least 1, as smoothed_loss takes it)."""
    return level_noise(jitter_of_short(values[max(i + 1 - NOISE_POINTS, 0) : i + 1]), max(1, smooth))


def updates_peak(updates, step) -> float:
    """The largest finite update ratio logged before `step` (the monitor takes a step's update ratio
    after its loss), NaN if none: the `updates` Series, or None."""
    if updates is None:
        return math.nan
    before = updates.values[: int(np.searchsorted(updates.steps, step, side="left"))]
    before = before[np.isfinite(before)]
    return float(before.max()) if before.size else math.nan


def start_level(values, init: float, known_after: int, points: int) -> float:
    """The level a stall under a decaying schedule is measured against: the initial level `init`,
    or the median of the first `points` finite points if higher (`init, known_after` are
    stats.initial_level of `values`: its 10 finite points end at `known_after`)."""
    if init != init:
        return init
    head = values[: known_after + 1]
    # At most the 10 points the initial level reads (the stream keeps those only).
    head = head[np.isfinite(head)][: min(points, 10)]
    return max(init, float(np.median(head)))


# A warm-up's stall counts once the loss learnt this many noise units of its smoothed level (in log
# terms) under where it started (as a stall's clear drop, recovery.CLEAR_Z): see learnt_clearly.
LEARNT_Z = 10.0


def lost_what_it_learnt(start: float, ref: float, now: float, stuck: float) -> bool:
    """Whether a stall that began during the warm-up counts, by its levels (with learnt_clearly):
    its best as it began (`ref`) stood `stuck` x under the level the loss started at (`start`,
    start_level), and its smoothed level (`now`) is back at `stuck` x that start or above. A warm-up
    holds off a plateau while a tiny learning rate has not given the loss its chance; this one had
    it, and the ramp took it back (a loss a little over its best as the ramp goes on, far under its
    start, has lost little)."""
    return start > 0.0 and 0.0 < ref <= stuck * start and now >= stuck * start


def learnt_clearly(start: float, ref: float, noise: float) -> bool:
    """... and its fall from `start` to `ref` stands LEARNT_Z units of the smoothed level's noise
    (`noise`, level_noise_at): a per-step loss's best 9-point median stands under its start by
    noise alone (`start` and `ref` positive: lost_what_it_learnt's)."""
    return math.log(start / ref) >= LEARNT_Z * noise


def learnt_level(values, init: float, known_after: int, points: int) -> float:
    """The level a loss has learnt from: start_level, or its first finite point if higher (NaN while
    the initial level `init` is unknown)."""
    first = start_level(values, init, known_after, points)
    if first != first:
        return first
    return max(first, float(values[np.isfinite(values)][0]))


def sparse_start(values, steps, init: float, known_after: int, early_steps: int) -> float:
    """The initial level a stall is told against: `init` (stats.initial_level of `values`, its 10
    finite points ending at `known_after`), or the first finite point if higher when those 10 span
    `early_steps` steps or more: a loss logged every 50 steps fell most of its fall before its
    second point, and the median of its first 10 is a level it learnt, not where it started.
    Otherwise blown_up_start."""
    if init != init:
        return init
    head = values[: known_after + 1]
    head = head[np.isfinite(head)]
    if int(steps[known_after]) - int(steps[0]) >= early_steps:  # ints: no int64 wrap-around
        return max(init, float(head[0]))
    return blown_up_start(init, head)


BLOWN_UP = 3.0  # the first 10 points blew up when their largest is this multiple of the first


def blew_up(head) -> bool:
    """Whether a loss's first points (`head`) blew up from the first of them: their largest BLOWN_UP x it."""
    first = float(head[0])
    return first > 0 and max(head) >= BLOWN_UP * first


def blown_up_start(init: float, head) -> float:
    """The initial level `init`, or the first point if lower when the first 10 points (`head`)
    blew up from it (`blew_up`, and it at least half their median: a start, not a lucky batch):
    a run that blew up in its first steps and then sat at its start level (a classifier at
    chance) has not learnt, though the median of its first 10 says it has."""
    first = float(head[0])
    if blew_up(head) and 2 * first >= init:
        return min(init, first)
    return init


def plateau_patience(index, p: PlateauParams):
    """Points the best loss must have stood still at point `index` (vectorised)."""
    grown = np.floor(p.patience_fraction * (np.asarray(index) + 1)).astype(np.int64)
    return np.minimum(np.maximum(p.min_patience, grown), max(p.max_patience, p.min_patience))


def _warmup_ends(data, steps, max_warmup: int, fell: np.ndarray) -> np.ndarray:
    """For each of the first `max_warmup` points, then for all later ones (the last entry): the
    last point at or before it whose learning rate was still ramping up, -1 if none. A stall
    counts from the end of the warm-up: a loss held flat by a tiny warm-up learning rate has not
    had its chance to fall. Only the first ramp is a warm-up: a learning rate rising after it
    fell (`fell`, per loss point) is a schedule's later course. A learning rate rising through
    all `max_warmup` points is a schedule gone wrong, not a warm-up, if it rose ever faster from
    ~0 (`accelerating`); so is one rising exponentially (`exponential`, from the 20th point on):
    from then on the stall counts from the start."""
    m = max(1, min(steps.shape[0], max_warmup))
    warm = _in_warmup(data, steps[:m]) & ~fell[:m]
    ends = np.maximum.accumulate(np.where(warm, np.arange(m), -1))
    lr = data.get("lr")
    if lr is not None and m > _EXP_FROM and warm[_EXP_FROM:].any():
        at = stats.value_at_or_before(lr.steps, lr.values, steps[:m]).tolist()
        for k in np.flatnonzero(warm[_EXP_FROM:]).tolist():
            k += _EXP_FROM
            if exponential(at, k):
                ends[k:] = -1
                return np.append(ends, -1)
    after = ends[-1]
    if m == max_warmup and after == m - 1:
        at = stats.value_at_or_before(lr.steps, lr.values, steps[[0, m // 2, m - 1]])
        if accelerating(*at.tolist()):
            after = -1
    return np.append(ends, after)


# The first point at which a rising learning rate can be told exponential.
_EXP_FROM = 20


def exponential(lr, k: int) -> bool:
    """Whether a learning rate rose exponentially from point 0 to point k (`lr` holds its value as
    of each point): at least doubled, by as much on a log scale in the second half as in the
    first (x 0.8 to x 1.5), and, if it rose at every point, over each quarter of the way alike
    (within 1.5x of one another). An exponential schedule or a range test rises evenly on
    that scale; a warm-up does not: from ~0 (linear: log t) mostly early, and from a floor
    (one-cycle's cosine from 1/25 of its peak) mostly late at first, then ever less, its halves
    alike for a while on the way (not finite: no)."""
    first, middle, last = lr[0], lr[k // 2], lr[k]
    if not (0.0 < first < middle < math.inf and 2.0 * first <= last < math.inf):
        return False
    early, late = math.log(middle / first), math.log(last / middle)
    if not 0.8 * early <= late <= 1.5 * early:
        return False
    head = lr[: k + 1]
    if not all(a < b for a, b in zip(head, head[1:])):
        return True  # a staircase (logged or stepped more sparsely than the loss): the halves tell
    marks = (first, lr[k // 4], middle, lr[3 * k // 4], last)
    rises = [math.log(b / a) for a, b in zip(marks, marks[1:])]
    return max(rises) <= 1.5 * min(rises)


def accelerating(first, middle, last) -> bool:
    """Whether a learning rate rising through the `max_warmup` points (at their first, middle
    and last) rose faster in their second half from ~0 (to over FLOOR_SPAN x its first value): an
    exponential schedule, a range test or a polynomial ramp, where a linear (or cosine) warm-up
    from ~0 rises as fast or slower. A cosine warm-up from a floor rises faster at first too
    (PyTorch's OneCycleLR from a 25th of its peak, over 30 % of the run: hundreds of points
    for a run fed at every step), but never past FLOOR_SPAN x where it began (NaN: as if it
    did)."""
    return not (last - middle <= 1.1 * (middle - first)) and not (last < FLOOR_SPAN * first)


# A warm-up from a floor rises at most this many times over (OneCycleLR's `div_factor`, 25).
FLOOR_SPAN = 25.0


def _in_warmup(data, steps):
    """True where the learning rate is still ramping up (a flat loss is expected)."""
    lr = data.get("lr")
    if lr is None or len(lr) < 2:
        return np.zeros(steps.shape[0], bool)
    v = lr.values
    if lr.steps.shape == steps.shape and np.array_equal(lr.steps, steps):
        # Logged at the same steps (the usual case): pos is 0..n-1, so the two
        # gathers below are shifted slices.
        back = np.empty_like(v)
        back[:3] = v[0]
        back[3:] = v[:-3]
        with np.errstate(invalid="ignore"):
            return v > back
    pos = np.searchsorted(lr.steps, steps, side="right") - 1
    back = np.maximum(pos - 3, 0)
    with np.errstate(invalid="ignore"):
        return (pos >= 0) & (v[np.maximum(pos, 0)] > v[back])


class _LrPeak:
    """The learning rate's side of the rule, read from its channel (updated before the loss):
    its running peak of finite values (the channel's max_finite) and its last value."""

    __slots__ = ("channel",)

    def __init__(self, channel):
        self.channel = channel

    def fraction(self) -> float:
        ch = self.channel
        peak = ch.max_finite  # -inf before a finite value
        return ch.values[-1] / peak if peak > 0 else math.nan


def lr_course(data, steps, lr_fell: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The learning rate as the loss's points (`steps`, from the run's first) see it: its last
    value at or before each step (NaN before any), its peak so far (the largest finite value
    logged at or before it, NaN before any), and whether it fell (under `lr_fell` x that peak)
    at or before each point."""
    lr = data.get("lr")
    if lr is None or len(lr) == 0:
        nan = np.full(np.shape(steps), np.nan)
        return nan, nan, np.zeros(np.shape(steps), bool)
    v = lr.values
    at = stats.value_at_or_before(lr.steps, v, steps)
    peak = stats.value_at_or_before(lr.steps, stats.finite_peak(v), steps)
    with np.errstate(invalid="ignore"):
        fell = np.logical_or.accumulate(at < lr_fell * peak)
    return at, peak, fell


# The points whose jitter tells a smooth loss (`early_jitter`): with the defaults a stall that began
# within the first 15 points is judged by the 25th; a bound for configs whose patience keeps the
# stall's start within those points for long (a patience_fraction near 1).
_HEAD = 64


class PlateauStream(Stream):
    """loss-plateau, point by point (the learning rate's peak read from its channel)."""

    hits = ("train_loss",)  # the learning rate's side is read from its channel

    def __init__(self, p, signal, channels):
        self.lr_peak = _LrPeak(channels["lr"])
        self.stuck, self.lr_floor, self.max_warmup = p.stuck, p.lr_floor, p.max_warmup
        self.max_noise = p.max_noise
        self.noise = recent_logs(channels["train_loss"], p.noise_window, np.log10)  # of the points before
        self.own = getattr(self.noise, "values", None)  # kept by the stream itself, if at all
        self.initial = channels["train_loss"].initial  # pushed after the checks: as of the points before
        self.start_points = min(p.start_points, 10)  # of the initial level's 10 points (as start_level)
        self.start = math.nan  # start_level, once the initial level is known and asked for
        self.learnt_drop = p.learnt_drop
        # The logs of the positive finite points among the first _HEAD so far, while a stall may
        # have begun before the initial level was known or within `early_points`; None after. The
        # points are kept in `head_raw` until the logs are read (`_head_logs`): numpy's log of a
        # value is the same in an array, so one call takes them all.
        self.head_logs = []
        self.head_raw = []
        # The second differences of head_logs so far, sorted, and how many logs they cover: the
        # jitter (jitter_of_log_list) of a head that grew by a point adds one, not all again.
        self.head_diffs = []
        self.head_done = 0
        self.early_jitter, self.early_points = p.early_jitter, p.early_points
        self.early_steps = p.early_steps
        self.sparse_jitter = max(p.early_jitter, p.sparse_jitter)
        self.head_steps = []  # the steps of the first `early_points` points (`_stall_bar`)
        # The steps of the points until the initial level is known, then None (kept on as
        # `known_steps` while the head's logs are, for `_stall_bar`); and that level as the stalls
        # are told against it (sparse_start), NaN until then.
        self.init_steps = []
        self.known_steps = None
        self.init_value = math.nan
        # The smoothed loss at this point, and its best so far (`_running_best`'s).
        self.level = shared_level(channels["train_loss"], p.smooth)
        self.values, self.smooth = channels["train_loss"].values, p.smooth  # the note's noise (`_note`)
        self.warmed = -1  # the last point of the warm-up (a rising learning rate), -1 if none
        self.lr_marks = {}  # the learning rate at the first, middle and last of the `max_warmup` points
        self.lr_head = []  # ... and at each of them, until it is told exponential
        self.marks_at = (0, self.max_warmup // 2, self.max_warmup - 1)
        self.exp_at = None  # the point it was, if it was
        self.rel = p.rel_improvement
        self.patience = Patience(p)
        self.cap = self.patience.cap
        # The first point whose stall cannot begin within `early_points`: before it, the head's
        # logs are kept whatever the initial level, without reading the patience.
        self.head_from = self.patience.first_start(p.early_points)
        # The screen in check needs a patience of at least 1: from the first point with min_patience
        # >= 1 (else after the warm-up, where the patience has grown, as the defaults have it).
        self.screen_from = 0 if min(p.min_patience, self.cap) >= 1 else self.max_warmup + 1
        # The best as of each of the last `cap` points, and the learning rate's peak (its channel's
        # max_finite: -inf before any) as of each from its fall on: both monotone, kept where they
        # changed.
        self.bests = AsOf(self.cap)
        self.best = math.nan  # the last value pushed to bests (NaN: none yet)
        self.peaks = AsOf(self.cap)
        # Whether the learning rate is gone (`lr_floor`) as of each of those points, and at the last.
        self.gone = AsOf(self.cap)
        self.gone_now = None
        self.lr_climb, self.lr_fell = p.lr_climb, p.lr_fell
        self.fell_at = math.inf  # the point at which the learning rate first fell (see lr_course)
        # ... whether it has (check tests this rather than the int or inf, which 3.11 would compare
        # unspecialised)
        self.fallen = False
        self.fell_peak = math.nan  # ... and its peak then, the lowest its peak is as of any later point
        # The learning rate's recent points (its channel is updated first).
        self.lr_channel = channels["lr"]
        self.lr = channels["lr"].values
        # The update ratio's peak so far (-inf before any), for the note of a loss stuck near its start.
        self.updates = channels["update_ratio"]
        self.updates_high = p.updates_high

    def check(self, i, step, v):
        if self.init_steps is not None:
            if self.initial.known == _inf:
                self.init_steps.append(step)
            else:
                self._sparse_start()
        if self.head_logs is not None:
            if i < self.early_points:
                self.head_steps.append(step)
            if i >= self.head_from and i - self.patience.at(i) >= self.initial.known:
                # i - patience never decreases: no later stall began that early
                self.head_logs = self.head_raw = self.known_steps = None
            elif i < _HEAD and v > 0.0 and v < _inf:
                self.head_raw.append(v)  # its log (numpy's, as the batch rule's jitter takes it) when read
        lrs = self.lr
        init = self.init_value
        if lrs:
            lr_now = lrs[-1]
            peak = self.lr_channel.max_finite
            # An if, not a boolean assigned: its comparisons jump, so 3.11 specialises them.
            if peak > 0.0 and lr_now / peak <= self.lr_floor:
                gone = True
            else:
                gone = False
            if gone is not self.gone_now:
                self.gone_now = gone
                self.gone.changed(i, gone)
            fallen = self.fallen
            if not fallen and lr_now < self.lr_fell * peak:
                self.fell_at = i
                self.fell_peak = peak
                self.fallen = fallen = True
            if fallen:  # _climb reads the peak as of points from the fall on only
                of = self.peaks.of
                if not of or not (peak == of[-1]):  # AsOf.push's own test first, without its call
                    self.peaks.changed(i, peak)
                if init == init:  # a decaying schedule (fell_at <= i): start_level
                    init = self._start_level(init)
        else:
            # No learning rate yet (its peak -inf): not gone, not fallen.
            lr_now = _nan
            gone = fallen = False
            if self.gone_now is not False:
                self.gone_now = False
                self.gone.changed(i, False)
        if i < self.max_warmup:
            # The warm-up (see _warm_up), inline: at every point of a short run.
            if self.exp_at is None:
                self.lr_head.append(lr_now)
                # Rising: the last lr point above the one 3 points before it.
                if lrs and lr_now > lrs[-4 if len(lrs) >= 4 else 0] and not fallen:  # fell_at > i
                    self._rising(i)
            if i in self.marks_at:
                self.lr_marks[i] = lr_now
        elif i == self.max_warmup:
            self._warm_up(i)
        best = self.level.low
        if not best == self.best:  # a change (its last is the last pushed)
            self.best = best
            self.bests.changed(i, best)
        # The usual point of a run that learns: its learning rate not gone and its level well under
        # `stuck` x the initial one, it cannot fire; nor while its learning rate has not climbed back
        # above its peak when it fell (which the peak as of the stall's start is at least), the stall
        # starting before this point (a patience of at least 1).
        if (i >= self.screen_from and not gone
                and not self.level.value >= self.stuck * init
                and not (fallen and self.fell_at < i and lr_now >= self.lr_climb * self.fell_peak)):
            if self.own is not None:
                self.own.append(v)
            return None
        # Not before min_patience points, under the least patience (see _check's first test).
        hit = self._check(i, v, init, fallen) if i >= self.patience.least else None
        if hit is not None and self.noise.noise_decades() >= self.max_noise:
            hit = None
        if self.own is not None:
            self.own.append(v)
        return hit

    def _sparse_start(self):
        """sparse_start, once the initial level is known (its 10th finite point was the last one)."""
        steps, initial = self.init_steps, self.initial
        init = initial.value
        if steps[initial.known - 1] - steps[0] >= self.early_steps:
            init = max(init, initial.head[0])
        else:
            init = blown_up_start(init, initial.head)
        self.init_value = init
        self.known_steps, self.init_steps = steps, None

    def _stall_bar(self, start):
        """The jitter under which a stall that began at point `start` counts (inf: whatever its
        jitter): `early_jitter` within `early_steps` of the first point, before the initial level
        was known or within `early_points`; `sparse_jitter` before the level was known but later
        (read while the head's logs are kept)."""
        before_known = start < self.initial.known
        if before_known:
            steps = self.init_steps if self.init_steps is not None else self.known_steps
        elif start < self.early_points:
            steps = self.head_steps
        else:
            return _inf
        if steps[start] - steps[0] < self.early_steps:
            return self.early_jitter
        return self.sparse_jitter if before_known else _inf

    def _start_level(self, init):
        """start_level, once the initial level (`init`) is known: its first 10 finite points are in."""
        if self.start != self.start:
            self.start = max(init, small_median(self.initial.head[: self.start_points]))
        return self.start

    def _had_chance(self, ref):
        """Whether a stall in the warm-up whose best as it began was `ref` counts (lost_what_it_learnt
        and learnt_clearly; False while the initial level is unknown)."""
        if not self.init_value == self.init_value:
            return False
        start = self._start_level(self.init_value)
        # The levels first: the noise reads the last 50 points, at every point of a long stall.
        return (lost_what_it_learnt(start, ref, self.level.value, self.stuck)
                and learnt_clearly(start, ref, self._noise()))

    def _learnt_from(self):
        """The level a loss that fell `learnt_drop` x has learnt from: start_level, or the first
        point if higher."""
        start = self._start_level(self.init_value)
        return max(start, self.initial.head[0]) if start == start else start

    def _rising(self, i):
        """The learning rate rises at warm-up point i (< max_warmup): a warm-up unless it rose
        exponentially or ever faster (see _warmup_ends)."""
        self.warmed = i
        if i >= _EXP_FROM and exponential(self.lr_head, i):
            self.exp_at, self.warmed, self.lr_head = i, -1, []  # not a warm-up (see _warmup_ends)

    def _warm_up(self, i):
        """At point `max_warmup`, the end of the warm-up check follows inline (where the learning
        rate still ramps up, `warmed`): one that rose all along, ever faster, was no warm-up (see
        _warmup_ends)."""
        if self.warmed == i - 1:
            marks = self.lr_marks
            if accelerating(*(marks.get(j, math.nan) for j in self.marks_at)):
                self.warmed = -1  # rising all along, ever faster: not a warm-up (see _warmup_ends)

    def _head_jitter(self):
        """jitter_of_log_list of the head's logs: their second differences (the same
        subtractions) kept sorted as the head grows, inserted in order as a stable sort has them."""
        logs = self._head_logs()
        n = len(logs)
        if n < 10:
            return math.nan
        diffs = self.head_diffs
        for j in range(max(self.head_done, 2), n):
            _insort(diffs, (logs[j] - logs[j - 1]) - (logs[j - 1] - logs[j - 2]))
        self.head_done = n
        return stats.jitter_of_sorted_diffs(diffs)

    def _head_logs(self):
        """The logs of the head's points (see head_logs), those kept raw taken now."""
        raw = self.head_raw
        if raw:
            self.head_logs.extend(np.log(np.array(raw, dtype=np.float64)).tolist())
            raw.clear()
        return self.head_logs

    def _check(self, i, v, init, fallen):
        finite = v - v == 0.0
        best = self.level.low
        patience = self.patience.at(i)
        if i < patience or not finite:
            return None
        ref = self.bests.as_of(i - patience)
        # Past the warm-up, or after the run learnt (see the batch rule).
        if best > ref - self.rel * abs(ref) and (i - patience >= self.warmed or self._had_chance(ref)):
            # Gone now, and already when the stall began: not a schedule decaying into it.
            gone = self.gone_now and self.gone.as_of(i - patience) is True
            climb = self._climb(i - patience)
            climbed = climb >= self.lr_climb
            level = self.level.value
            # Stuck near where it started: against start_level (see the batch rule) unless the start
            # blew up from the first point; else back near the initial level after it had learnt.
            stuck_at = init if fallen or not init >= self.initial.value else self._start_level(init)
            learnt = level <= self.learnt_drop * self._learnt_from()
            stuck = level >= self.stuck * stuck_at and not learnt
            if (not stuck and not learnt and not fallen and init > 0.0 and level >= self.stuck * init
                    and lost_ground_at(level / init, best / init, self._of_first(best), self.stuck,
                                       self._noise())):
                stuck, stuck_at = True, init
            if stuck and self.head_logs is not None:
                bar = self._stall_bar(i - patience)
                stuck = bar == _inf or self._head_jitter() < bar
            if gone or climbed or stuck:
                init = stuck_at
                positive = init > 0.0
                return NoteLater(self._note, patience, self.lr_peak.fraction() if gone else math.nan,
                                 climb if climbed and not gone else math.nan,
                                 level / init if positive else math.nan,
                                 best / init if positive else math.nan, self.stuck,
                                 self.updates.max_finite, self.updates_high, self._of_first(best))
        return None

    def _of_first(self, best):
        """The best level over the level the loss learnt from (NaN unless that is positive)."""
        start = self._learnt_from()
        return best / start if start > 0.0 else math.nan

    def _note(self, *args):
        """plateau_note, with the level's noise as of this point (read at the hit that opens an
        episode)."""
        return plateau_note(*args, self._noise())

    def _noise(self):
        """level_noise_at this point (the channel's values end at it during the checks)."""
        recent = list(islice(self.values, max(len(self.values) - NOISE_POINTS, 0), None))
        return level_noise_at(recent, len(recent) - 1, self.smooth)

    def _climb(self, start):
        """The learning rate now over its peak as of point `start`, if it had fallen by then (NaN
        if not, or without a positive peak)."""
        if self.fell_at > start:
            return math.nan
        peak = self.peaks.as_of(start)
        lr = self.lr_peak.channel
        return lr.values[-1] / peak if peak > 0 else math.nan


class Patience:
    """plateau_patience of a stream's params at a point, in Python."""

    __slots__ = ("fraction", "least", "cap", "capped_from")

    def __init__(self, p):
        self.fraction, self.least = p.patience_fraction, p.min_patience
        self.cap = max(p.max_patience, p.min_patience)
        self.capped_from = _capped_from(p.patience_fraction, p.min_patience, self.cap)

    def at(self, i):
        if i >= self.capped_from:
            return self.cap
        grown = int(self.fraction * (i + 1))  # floor, for i >= 0
        return min(grown if grown > self.least else self.least, self.cap)

    def first_start(self, j):
        """The first point i whose stall starts at j or later (i - at(i) >= j). i - at(i) never
        decreases (the patience grows by at most one a point, the fraction being at most 1),
        so a bisection finds it; i = j + cap is one."""
        lo, hi = max(j, 0), max(j, 0) + self.cap
        while lo < hi:
            mid = (lo + hi) // 2
            if mid - self.at(mid) >= j:
                hi = mid
            else:
                lo = mid + 1
        return lo


class AsOf:
    """A value pushed at every point, as of any of the last `span` points, kept as the points where
    it changed: a monotone one (a best so far, a peak) costs memory only while it moves, not
    `span` slots (a `max_patience` of 10^9 would be 8 GB). What is older than the span is
    forgotten in blocks, when the lists have doubled."""

    __slots__ = ("at", "of", "span", "prune_at")

    def __init__(self, span):
        self.at, self.of = [], []  # the points where it changed, and its value from then on
        self.span = span
        self.prune_at = 4096  # the length at which what is too old is forgotten (amortised)

    def push(self, i, x):
        of = self.of
        if not of or not (x == of[-1]):  # NaN: every point a change, as NaN never equals itself
            self.changed(i, x)

    def changed(self, i, x):
        """`push` of a value the caller knows differs from the last pushed (the streams keep the
        last one and test it without a call: it changes at few points)."""
        at, of = self.at, self.of
        at.append(i)
        of.append(x)
        if len(at) >= self.prune_at:
            # Keep the last change at or before the oldest point that can be asked.
            lo = _bisect_right(at, i - self.span) - 1
            if lo > 0:
                del at[:lo], of[:lo]
            self.prune_at = max(4096, 2 * len(at))

    def as_of(self, j):
        """Its value as of point j, one of the last `span` points (NaN before its first point)."""
        k = _bisect_right(self.at, j) - 1
        return self.of[k] if k >= 0 else math.nan


def _capped_from(fraction, min_patience, cap):
    """The first point whose patience is the cap: floor(fraction x (i+1)) >= cap."""
    if min_patience >= cap:
        return 0
    if fraction <= 0 or cap / fraction > 2.0**63:  # never within an int64 step count
        return math.inf
    i = max(0, math.ceil(cap / fraction) - 1)
    # Settle float rounding against the very expression the check uses.
    while int(fraction * (i + 1)) < cap:
        i += 1
    while i > 0 and int(fraction * i) >= cap:
        i -= 1
    return i


@rule(
    code="CS301", objective=True, start=True, symbol="loss-plateau", family="plateau", severity="warning",
    signals=("train_loss", "update_ratio"), params=PlateauParams, describe=_describe_plateau, peak="first",
    stream=PlateauStream,
    advice="the model stopped learning: check the learning rate (too low or decayed to 0), "
    "frozen parameters, or dead activations; stop the run if it has converged",
)
def loss_plateau(data, p: PlateauParams, since=None):
    """The best train loss has not improved for a long stretch (trend layer).

    The loss is smoothed with a trailing median of `smooth` points. At point
    i with patience P = max(min_patience, patience_fraction x (i+1)), at most
    max_patience, the rule
    fires when the best smoothed loss so far is not `rel_improvement` below
    the best as of P points earlier -- while the run is stuck near where it
    started (its smoothed loss still `stuck` x the initial level, the median
    of its first 10 points, or x the median of its first `start_points`
    points if higher (not where its first points blew up from the first),
    and x its first point if higher on a loss whose first 10
    points span `early_steps` steps or more; or back at `stuck` x the
    initial level after it had learnt, out of its level's noise: lost
    ground; on a smooth loss only, its jitter under `early_jitter`, if the
    stall began within the 10 points that set that level or the first
    `early_points` and `early_steps`, or under `sparse_jitter` if it began
    within those 10 points but `early_steps` or more in), its learning rate
    has decayed to ~0 (`lr_floor` x its peak), or its learning rate, after it
    fell, climbed back to `lr_climb` x its peak as of the stall's start (a
    schedule gone wrong: the loss stalls under a step too large). The P
    points must all come after the warm-up (a learning rate still ramping up
    within the first `max_warmup` points, before it first fell): a loss held
    flat by a tiny warm-up learning rate has not had its chance yet; one that
    learnt, clearly out of its noise, and was taken back near its start as the
    ramp went on had it, and its stall counts. A
    learning rate rising exponentially (from the 20th point), or ever faster
    from ~0 through all `max_warmup` points (past 25x its first value), is no
    warm-up. A run that learnt and
    slows down under a working learning rate is converging. A loss stuck
    near where it started after an update ratio of `updates_high` or more
    (logged before the point) is told as such: the learning rate was too
    high and spoilt the weights, which its incident's advice says.
    """
    s = data.get("train_loss")
    if s is None or len(s) <= p.min_patience:
        return
    n = len(s)
    i0 = since_index(s, since)
    if i0 >= n:
        return
    m = max(1, min(n, p.max_warmup))
    warmed = _warmup_ends(data, s.steps, p.max_warmup, lr_course(data, s.steps[:m], p.lr_fell)[2])
    hit, best, ref = stalls(s.values, i0, p, with_best=True)
    raw0, known_after = initial_level(s.values)
    init0 = sparse_start(s.values, s.steps, raw0, known_after, p.early_steps)
    first = start_level(s.values, init0, known_after, p.start_points)
    kept = hit - plateau_patience(hit, p) >= warmed[np.minimum(hit, max(1, p.max_warmup))]
    # A warm-up holds off a plateau while a tiny learning rate has not given the loss its chance; one
    # that learnt before the stall began, and lost it, had it (lost_what_it_learnt, learnt_clearly).
    with np.errstate(invalid="ignore"):
        maybe = ~kept & (hit > known_after) & (ref <= p.stuck * first) & (ref > 0.0)
    for j in np.flatnonzero(maybe).tolist():
        i, r = int(hit[j]), float(ref[j])
        now = float(smoothed_loss(s.values, max(1, p.smooth), i, i + 1)[0])
        kept[j] = (lost_what_it_learnt(first, r, now, p.stuck)
                   and learnt_clearly(first, r, level_noise_at(s.values, i, p.smooth)))
    hit, best = hit[kept], best[kept]
    if hit.size:
        # Only a run stuck near where it started, or whose learning rate is gone, is on a plateau.
        # The learning rate as the hits see it: gone, fallen (against start_level), or climbed back.
        at, peak, fell = lr_course(data, s.steps[: hit[-1] + 1], p.lr_fell)
        # Stuck near where it started: against start_level (the first points' level: a loss that
        # fell fast within its first 10 points learnt that fall), but against the first point
        # where the start blew up from it (blown_up_start); a schedule that decayed reads
        # start_level in any case. Lost ground back near the 10 points' level is read below.
        init = np.where(fell[hit], first, first if not init0 < raw0 else init0)
        # A loss `learnt_drop` x its first point, or the level of its first points, has learnt.
        learnt_from = learnt_level(s.values, init0, known_after, p.start_points)
        # One smoothing over the hits' span (a point's smoothed value does not depend on where the
        # span starts), not one per hit: a run stuck after a divergence stalls at every point.
        now = smoothed_loss(s.values, max(1, p.smooth), int(hit[0]), int(hit[-1]) + 1)[hit - hit[0]]
        with np.errstate(invalid="ignore"):
            learnt = now <= p.learnt_drop * learnt_from
            stuck = (hit > known_after) & (now >= p.stuck * init) & ~learnt
            # Back near the initial level after it had learnt, out of the level's noise: lost ground.
            lost = (hit > known_after) & ~fell[hit] & ~stuck & ~learnt & (now >= p.stuck * init0) & (init0 > 0.0)
        for j in np.flatnonzero(lost).tolist():
            of_first = float(best[j]) / learnt_from if learnt_from > 0.0 else math.nan
            lost[j] = lost_ground_at(float(now[j]) / init0, float(best[j]) / init0, of_first, p.stuck,
                                     level_noise_at(s.values, int(hit[j]), p.smooth))
        init = np.where(lost, init0, init)
        stuck |= lost
        # A stall that began before the initial level was known, or within the first `early_points`,
        # counts only on a smooth loss.
        start = hit - plateau_patience(hit, p)  # the stall's start, >= 0: the stall needs its patience
        # In Python ints, as the stream's steps: hostile steps near the int64 bounds do not wrap around.
        since_first = s.steps[np.minimum(start, n - 1)].astype(object) - int(s.steps[0])
        soon = (since_first < p.early_steps).astype(bool)
        early = (start < p.early_points) & soon
        for j in np.flatnonzero(stuck & ((start <= known_after) | early)).tolist():
            bar = p.early_jitter if soon[j] else max(p.early_jitter, p.sparse_jitter)
            stuck[j] = jitter(s.values[: min(hit[j] + 1, _HEAD)]) < bar
        with np.errstate(invalid="ignore", divide="ignore"):
            fraction = np.where(peak > 0, at / peak, np.nan)  # of its peak so far, at each point
            frac = fraction[hit]
            # Gone now, and already when the stall began: not a schedule decaying into it.
            gone = (frac <= p.lr_floor) & (fraction[start] <= p.lr_floor)
            # The learning rate, once it fell, climbed back far above its peak as of the stall's start.
            climb = np.where(fell[start] & (peak[start] > 0), at[hit] / peak[start], np.nan)
            climbed = climb >= p.lr_climb
        # What each hit's note says, looked up only for the hits that start an episode.
        noted = hit
        fractions, climbs = np.where(gone, frac, np.nan), np.where(climbed & ~gone, climb, np.nan)
        with np.errstate(invalid="ignore", divide="ignore"):
            levels = np.where(init > 0.0, now / init, np.nan)
            bests = np.where(init > 0.0, best / init, np.nan)
            best_of_first = best / learnt_from if learnt_from > 0.0 else np.full(best.shape, np.nan)
        hit = hit[stuck | gone | climbed]
        if hit.size:
            hit = hit[~noisy_at(s.values, hit, p.noise_window, p.max_noise)]
    if hit.size:
        updates = data.get("update_ratio")

        def note(i):
            j = int(np.searchsorted(noted, i))
            return plateau_note(plateau_patience(np.int64(i), p), float(fractions[j]), float(climbs[j]),
                                float(levels[j]), float(bests[j]), p.stuck,
                                updates_peak(updates, s.steps[i]), p.updates_high,
                                float(best_of_first[j]), level_noise_at(s.values, i, p.smooth))

        yield Hits("train_loss", hit, note=note)


def stalls(values, i0: int, p, with_best: bool = False):
    """The points i >= i0 where the best smoothed loss (the trailing median of `p.smooth` points) is
    not `p.rel_improvement` below the best as of P(i) points earlier (plateau_patience of `p`'s
    patience fields) and the point is finite: CS301's and CS303's stall. `with_best`: and that
    best at each of them, and the best as of P(i) points earlier."""
    n = len(values)
    # The reference is the best as of P points back, P never above `cap`.
    cap = max(p.max_patience, p.min_patience)
    b0 = max(i0 - cap, 0)
    k = max(1, p.smooth)
    best = _running_best(values, k, b0)  # best[j - b0], j >= b0
    # The next analysis, once points are appended, starts about `cap` before the end.
    if b0 < n - cap:
        stats.carry(("loss-plateau best", k), (n - cap, best[n - cap - 1 - b0]))
    ref = _best_before(best, b0, i0, n, p)
    hit = []
    for a, b in chunks(i0, n):  # cache-sized: no 8 MB temporaries
        cur, r = best[a - b0 : b - b0], ref[a - i0 : b - i0]
        with np.errstate(invalid="ignore"):
            stalled = cur > r - p.rel_improvement * np.abs(r)
        stalled &= np.isfinite(values[a:b])
        hit.append(np.flatnonzero(stalled) + a)
    hit = np.concatenate(hit)
    return (hit, best[hit - b0], ref[hit - i0]) if with_best else hit


def _running_best(values, k: int, start: int) -> np.ndarray:
    """The lowest smoothed loss up to each point j >= start (NaN before any).

    The smoothed loss is the trailing median of k points; before `start` only
    its minimum matters.
    """
    sm = smoothed_loss(values, k, start, len(values))
    best = np.fmin.accumulate(sm, out=sm)
    if start:
        np.fmin(best, _best_before_point(values, k, start), out=best)
    return best


def _best_before_point(values, k: int, stop: int) -> float:
    """The lowest smoothed loss of the points before `stop` (NaN if none).

    Continued from what the previous analysis of the run carried (the best
    before some earlier point, see loss_plateau), so a re-analysis after
    appended points computes the medians of the new points only.
    """
    got = stats.carried(("loss-plateau best", k))
    done, best = got if got is not None and got[0] <= stop else (0, np.nan)
    if stop > done:
        best = np.fmin(best, np.fmin.reduce(smoothed_loss(values, k, done, stop)))
    return best


def smoothed_loss(values, k: int, start: int, stop: int) -> np.ndarray:
    """The smoothed loss of the points [start, stop), +/-Inf as NaN."""
    # A median reads k - 1 earlier points, forward-filled.
    a = 0 if start <= k - 1 else finite_anchor(values, start - (k - 1))
    return _finite_or_nan(trailing_median_inclusive(values[a:stop], k)[start - a :])


def _finite_or_nan(x: np.ndarray) -> np.ndarray:
    """x with +/-Inf replaced by NaN (in place; a median of finite points is finite
    unless the mean of two huge middle values overflows)."""
    bad = ~np.isfinite(x)
    if bad.any():
        x[bad] = np.nan
    return x


def _best_before(best, b0: int, i0: int, n: int, p: PlateauParams) -> np.ndarray:
    """For i in [i0, n): the best as of P(i) points earlier (NaN when i < P(i))."""
    ref = np.empty(n - i0)
    cap = max(p.max_patience, p.min_patience)
    # P(i) grows with i up to `cap`; from `fixed` on it is `cap`, a plain shift.
    fixed = max(_patience_reaches_cap(n, p), cap)
    h = min(max(fixed, i0), n)
    if i0 < h:
        idx = np.arange(i0, h)
        before = idx - plateau_patience(idx, p)
        ok = before >= 0
        ref[: h - i0] = np.where(ok, best[np.maximum(before, b0) - b0], np.nan)
    if h < n:
        ref[h - i0 :] = best[h - cap - b0 : n - cap - b0]
    return ref


def _patience_reaches_cap(n: int, p: PlateauParams) -> int:
    """The first point i < n whose patience is `cap` (n if none).

    P(i) is non-decreasing in i (patience_fraction >= 0), so a bisection on
    the very function the rule evaluates finds it exactly.
    """
    cap = max(p.max_patience, p.min_patience)
    if not p.patience_fraction >= 0 or plateau_patience(np.int64(n - 1), p) < cap:
        return n
    lo, hi = 0, n - 1  # P(hi) == cap
    while lo < hi:
        mid = (lo + hi) // 2
        if plateau_patience(np.int64(mid), p) >= cap:
            hi = mid
        else:
            lo = mid + 1
    return lo
