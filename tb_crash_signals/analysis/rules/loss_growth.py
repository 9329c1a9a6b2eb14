"""CS202: the train loss climbs away from its best, out of its noise -- a divergence before the crash."""

from __future__ import annotations

import collections
import dataclasses
import math
from itertools import islice

import numpy as np

from tb_crash_signals.analysis.rules.base import (
    Fit,
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
from tb_crash_signals.analysis.rules.blowup import lr_jumped
from tb_crash_signals.analysis.rules.divergence import (
    EARLY_JITTER_POINTS,
    early_bests,
    early_jitter_at,
    lift_trend_gates,
    trend_lifted,
)
from tb_crash_signals.analysis.rules.learning_rate import ramp_points, ramping, ramping_at
from tb_crash_signals.analysis.stats import (
    INITIAL_POINTS,
    best_levels,
    finite_peak,
    initial_level,
    jitter_at,
    linear_fit,
    log_spread_at,
    noise_decades,
    noise_gate_at,
    sliding_min,
    smoothed_level,
    value_at_or_before,
)
from tb_crash_signals.analysis.streaming import (
    Level,
    Quiet,
    Rest,
    Stream,
    StreamHit,
    recent_logs,
    shared_level,
    small_median,
)

_GRAD = "loss-growth: grad norm trend"  # Channel.shared key of the grad-norm side
_LR = "loss-growth: learning-rate trend"  # ... and of the learning rate's
_LR_JUMP = "loss-growth: learning-rate jump"  # ... and its last jump
_CORROBORATED = ("with grad", "slow with grad")  # decisions that need `consecutive` points, not `consecutive_alone`


@dataclasses.dataclass(frozen=True)
class LossGrowthParams:
    smooth: int = level_param(7)
    fast: int = param(
        3, "... or, on a smooth loss (the jitter of its `spread_window` points before under `early_jitter`: "
        "averaged or epoch losses), the median of this many, with that jitter as its noise: a 7-point "
        "median lags a smooth climb by most of its lead", at_least=1,
    )
    best_smooth: int = best_level_param()
    ratio: float = param(1.3, "the current level must be at least this multiple of the best level ...")
    z: float = param(
        4.0, "... and that far above it in units of the level's own noise (the loss's robust log spread "
        "over `spread_window` points, over the square root of `smooth`)"
    )
    ratio_with_grad: float = param(
        1.25, "... or, while the grad norm climbs too (see `grad_rise`), at least this multiple ..."
    )
    z_with_grad: float = param(3.5, "... and this many noise units above it")
    ratio_with_lr: float = param(
        1.1, "... or, while the learning rate is still rising (see `lr_up`), at least this multiple"
    )
    z_with_lr: float = param(
        3.0, "... and this many noise units above it: a loss that climbs as its rate keeps rising is on "
        "its way up, and a noisy one (a CNN logged every 10 steps) would reach several times its best "
        "before it cleared the grad norm's bar"
    )
    max_ratio: float = param(
        10.0, "the rule tells the climb only below this multiple of the best level: beyond it the run "
        "has diverged, and re-opening at every further rise would repeat the story. Far enough for a "
        "loss that fell decades (a regression): at 3-10x its best it is still far under its start, where "
        "the sustained divergence (CS113) needs half the progress lost", above=1.0,
    )
    slow_ratio: float = param(
        1.5, "... or, with the grad norm or the learning rate rising, the slow level (the trailing median "
        "of `best_smooth` points) at least this multiple of the best, `z` noise units above it (over the "
        "square root of `best_smooth`) and rising: a per-step loss too noisy for the short level"
    )
    lost: float = param(
        0.3, "and the level must have lost at least this share of the progress from the initial level "
        "(the median of the first 10 points) to the best: at a warm-up's peak a classifier's loss bumps "
        "2-4x its best with the grad norm, having lost 12-20 % of what it learnt, and comes back as the "
        "rate decays"
    )
    lost_with_lr: float = param(
        0.1, "... or this share while the learning rate climbs ever faster (see `lr_faster`): an "
        "exponential rate or a quadratic ramp does not come back"
    )
    lost_decades: float = param(
        0.2, "... or, with the learning rate rising, this share of its fall in log terms (of the decades from "
        "the initial level to the best): a regression loss that fell from 1 to 0.03 under a warm-up that "
        "overshoots has lost little of its progress at 4x its best, and a fifth of its decades at 2x (with "
        "the grad norm alone, a converged classifier's per-step loss bumps 3x its best); 0: never", at_least=0.0,
    )
    learnt_z: float = param(
        1.5, "a run has progress to lose only if its fall from the initial level to the best stands at least "
        "this many times the loss's log spread (the noise read around its trend, below): a loss that never "
        "left its start (a model that cannot learn its task, its per-batch loss wandering) has a lowest "
        "31-point median under its first 10 points' by noise alone (up to 1.3 spreads where the rule first "
        "fired on such runs), and its level wanders back up from it with the grad norm. Such a loss climbs "
        "only from its initial level, by the same bars. The detection corpus's dev divergences the rule "
        "tells had fallen 1.7 spreads or more, 4 or more from their first 3 points (`head_z`), or climbed "
        "twice their initial level; 0 never asks", at_least=0.0,
    )
    head_z: float = param(
        2.5, "... or if its fall from the median of its first 3 points to the best stands at least this many "
        "spreads (that median is noisier than the first 10 points'): a regression whose loss fell fourfold "
        "within its first 10 points learnt there, and the median of those 10 is already low (4.1 and 6.9 "
        "spreads where the rule first fired on the dev corpus's two). Models that cannot learn stood up to "
        "1.7 spreads under it there, and up to 2.5 at later points: the margin is thin; 0 never asks",
        at_least=0.0,
    )
    spread_window: int = spread_window_param()
    noise_window: int = noise_window_param()
    max_noise: float = max_noise_param("alarm")
    spread_jitter: float = param(
        1.5, "the loss's noise is read around its own trend: its log spread over `spread_window` points "
        "counts at most this multiple of its `jitter` there (logged every 10 steps, 50 points span the "
        "run's fall and its climb, whose spread is the trend's, not noise); 0: the spread alone",
        at_least=0.0,
    )
    trend_noise: float = trend_noise_param()
    grad_smooth: int = param(9, "trailing grad-norm points whose median is its level", at_least=1)
    grad_warmup: int = param(20, "grad-norm points before its level's minimum is tracked (its early transient)")
    grad_rise: float = param(2.0, "the grad norm climbs when its level is this multiple of that minimum ...")
    grad_back: int = param(10, "... and `grad_up` x its level this many grad-norm points before", at_least=1)
    grad_up: float = param(1.1, "see `grad_back`")
    lr_back: int = param(10, "the learning rate is rising when it is `lr_up` x its value this many LR points "
                         "before, above its point before and at its highest yet (a ramp, a range test, a warm-up "
                         "that overshoots; not the decay after a restart, nor a cyclic schedule climbing back to "
                         "the rate the run trained at; at most 127: twice that within the 256 points the monitor "
                         "keeps)", at_least=1, at_most=127)
    lr_up: float = param(1.2, "see `lr_back`", above=1.0)
    lr_jump: float = param(
        5.0, "the grad norm's climb is no evidence while the learning rate it follows jumped: more than "
        "this multiple in one logged point (a warm restart, a reset schedule) ...", above=1.0,
    )
    lr_jump_back: int = param(
        100, "... among its last this-many points (at most 255: the monitor keeps the last 256 points of "
        "each signal; 0: never) ...", at_least=0, at_most=255,
    )
    lr_jump_level: float = param(
        0.5, "... and it is still at least this multiple of the value it jumped to: a higher step size "
        "makes larger gradients, and the loss's bump after a warm restart is no divergence",
    )
    lr_climb_back: int = param(
        255, "... nor while it climbed back `lr_jump` x from the lowest of its last this-many points (all "
        "finite), to no new high: a cyclic schedule's up-phase, whose larger steps make larger gradients "
        "too (at most 255, the points the monitor keeps; 0: never)", at_least=0, at_most=255,
    )
    lr_since_best: float = param(
        1.5, "the learning rate is also rising when it is at least this multiple of its value where the "
        "best level last fell, above its point before and at its highest yet: a schedule that keeps "
        "climbing past the rate the run learnt best at (an exponential rate, a range test, a ramp), "
        "however slowly it climbs per logged point; 0: never", at_least=0.0,
    )
    lr_faster: float = param(
        1.1, "either rise lowers the bars to `ratio_with_lr` and `z_with_lr` only while the learning rate "
        "climbs ever faster: its rise a point over its last `lr_back` points more than this multiple of its "
        "rise a point over the `lr_back` points before them (`lr_up`), or before the point where the best "
        "level last fell (all of them, if fewer: `lr_since_best`); a steadier rise holds the grad norm's "
        "bars (`ratio_with_grad`, `z_with_grad`). An exponential rate, a range test or a quadratic ramp "
        "climbs ever faster; a linear or cosine warm-up as fast or slower, to the peak its schedule set, "
        "and a loss 10-15 % over its best on the way is no divergence. Too few points to tell: faster; "
        "0: every rise", at_least=0.0,
    )
    fit_window: int = param(10, "level points in the log-linear fit drawn and projected", at_least=3)
    target: float = param(2.0, "the fit projects when the level reaches this multiple of the best", above=0.0)
    consecutive: int = param(
        3, "points in a row that must climb (with the grad norm) before the rule fires: a divergence "
        "persists, a bouncing loss does not", at_least=1,
    )
    consecutive_alone: int = param(
        10, "... and without the grad norm climbing: longer than the slow recovery of a spike (on a smooth "
        "loss told by its fast level, `consecutive`: its bumps are over within a point or two)", at_least=1,
    )
    min_points: int = param(31, "points needed before the rule can fire ...")
    early_points: int = early_points_param()
    early_jitter: float = early_jitter_param()
    early_noisy: float = param(
        1.5, "... and one whose jitter is under twice that is judged too, with its jitter taken this many "
        "times over (its climb must stand further out of its noise), and with the grad norm or the learning "
        "rate rising also on its fast level (epoch means of a small dataset: the 7-point level lags a climb "
        "of 30 points by most of its lead); 0: not judged", at_least=0.0,
    )
    early_left: float = param(
        0.75, "... and before `min_points` a climb is told only once its level stands above the highest "
        "level before its lowest (out of the range the loss started in), or the loss learnt: its lowest "
        "level under this multiple of that highest (a per-batch loss at chance for its first dozen "
        "points, smooth and a little under and over its start, has no progress to lose); 0: always",
        at_least=0.0,
    )
    early_learnt: float = param(
        0.5, "... and a noisier one, only with the grad norm or the learning rate rising, once its level "
        "fell under this multiple of its highest before (a loss that bounces at its start learnt nothing to "
        "lose), its noise gate the decades its points before span: a warm-up that overshoots within the "
        "first 30 points of a run logged every 10 steps; 0: not judged", at_least=0.0,
    )
    cooldown: int = param(
        60, "points without a climb after which a new episode starts: a loss bouncing after it diverged "
        "climbs again every few dozen points, and that is the same divergence"
    )


def early_spread_noise(i, values, p: LossGrowthParams, width: int, corroborated: bool = False):
    """Before `min_points`: the loss's spread (its `jitter`, `early_noisy` x on a loss a little
    noisier than `early_jitter`) and the noise its gate reads (0 on a smooth loss or a little
    noisier; on a noisier one that learnt, `corroborated` by the grad norm or the learning rate,
    the decades its points span (`early_learnt`); else inf), from the points before the window of
    the level that tells (`width` points; of the run's `values`)."""
    spread = early_jitter_at(i, values, p, width)
    if spread < p.early_jitter:
        return spread, 0.0
    if p.early_noisy > 0 and spread < 2.0 * p.early_jitter:
        # A little noisier than smooth (epoch means of a run still learning): judged, its climb
        # out of its jitter taken `early_noisy` x.
        return p.early_noisy * spread, 0.0
    if corroborated and p.early_learnt > 0:
        # A noisier loss, with the grad norm or the learning rate rising: judged once it learnt (its
        # lowest level under `early_learnt` x its highest before), its gate the decades the same
        # points span.
        head = _head(values, i)
        k = max(i - width + 1, 0)
        noise = noise_decades(head[max(k - EARLY_JITTER_POINTS, 0) : k])
        if noise == noise:
            _, low, top = _start_range(head, width)
            if low <= p.early_learnt * top:
                return spread, noise
    return spread, math.inf


def _head(values, i):
    """The run's points up to point i, as an array (`values` an array or a channel's deque)."""
    return values[: i + 1] if isinstance(values, np.ndarray) else np.array(list(islice(values, 0, i + 1)))


def _start_range(head, width: int):
    """The level of `width` points at the last of the points `head`, its lowest finite level so far and
    the highest before that lowest (NaN, NaN, NaN without a finite level)."""
    level = smoothed_level(head, width)
    now = level[-1]
    level = level[np.isfinite(level)]
    if not level.size:
        return now, math.nan, math.nan
    low = int(np.argmin(level))
    return now, level[low], level[: low + 1].max()


def left_start(i, values, p: LossGrowthParams, width: int) -> bool:
    """Before `min_points`: whether the level of `width` points at point i (of the run's `values`)
    stands above the highest level before its lowest, or the loss learnt (that lowest under
    `early_left` x the highest): a per-batch loss at chance for its first dozen points, a little
    under and over its start, has no progress to lose, however smooth its points."""
    if p.early_left <= 0:
        return True
    now, low, top = _start_range(_head(values, i), width)
    if low != low:  # no finite level yet
        return True
    return bool(now > top or low <= p.early_left * top)


def _around_trend(v, ends, spreads, noises, p: LossGrowthParams):
    """The spreads and noise gates at `ends` read around the loss's trend (see `spread_jitter` and
    `trend_noise`)."""
    if p.spread_jitter > 0:
        spreads = np.fmin(spreads, p.spread_jitter * jitter_at(v, ends, p.spread_window))
    return spreads, lift_trend_gates(v, ends, noises, p)


# How the learning rate rises, as `lr_rising` reads it (0: it does not): as fast as it did or
# slower (a linear or cosine warm-up), or ever faster (see `lr_faster`; True reads as faster).
STEADY, FASTER = 2, 3


def climbing(level, before, slow, slow_before, best, init, spread, noise, grad_rising, lr_rising,
             p: LossGrowthParams, finishing=False, width=None, head=math.nan):
    """The decision at one loss point, from its level (of `width` points, `smooth` if None) now
    and `width` points before, and its slow
    level (`best_smooth` points) now and `smooth` points before: "with grad" (the grad norm
    climbing or the learning rate rising with it), "slow with grad" (the slow level climbing,
    with one of them), "alone" or False (shared by the batch rule and its
    stream). `finishing`: the level was still under `max_ratio` at the point before, so this point,
    where it crosses, may count ("with grad" only): a fast divergence outruns its level, and the
    sustained divergence needs more points still. `head`: the median of the first 3 finite points
    (`has_progress`)."""
    if not best > 0 or noise >= p.max_noise:
        return False
    faster = lr_rising and lr_rising != STEADY  # (True reads as faster)
    # With no progress to lose (`learnt_z`), the climb is measured from where the loss started,
    # whose level, a median of 10 points, has noise of its own. Beyond max_ratio x the best the run
    # has diverged either way: the sustained divergence (CS113) tells the rest.
    from_start = not has_progress(best, init, head, spread, p)
    base = init if from_start else best
    progress = (p.lost_with_lr if faster else p.lost) * (init - base) if init > base else 0.0
    if level > 0 and level > before:
        # The progress lost: a share of the fall from the initial level to the best (a smaller one
        # while the learning rate rises ever faster); with the rate rising, or a share of its decades
        # (see `lost_decades`).
        lost = level - base >= progress
        if lost or (lr_rising and _lost_decades(level, base, init, p)):
            within = level / best < p.max_ratio
            if within or finishing:
                r = level / base
                sd = level_noise(spread, width or p.smooth) if spread == spread else 0.0
                if from_start:
                    sd = math.hypot(sd, level_noise(spread, INITIAL_POINTS))
                if lost and bool(grad_rising) and r >= p.ratio_with_grad and math.log(r) > p.z_with_grad * sd:
                    return "with grad"
                if lr_rising:  # a steady rise holds the grad norm's bars (`lr_faster`)
                    ratio, z = (p.ratio_with_lr, p.z_with_lr) if faster else (p.ratio_with_grad, p.z_with_grad)
                    if r >= ratio and math.log(r) > z * sd:
                        return "with grad"
                if lost and r >= p.ratio and math.log(r) > p.z * sd and within:
                    return "alone"
    # A per-step loss too noisy for the short level still shows its climb in the long one; alone
    # that is also how a spike's slow recovery looks, so it needs the grad norm or the LR with it.
    if (grad_rising or lr_rising) and slow > 0 and slow > slow_before and (
            slow - base >= progress or (lr_rising and _lost_decades(slow, base, init, p))):
        r = slow / base
        sd = level_noise(spread, p.best_smooth) if spread == spread else 0.0
        if from_start:
            sd = math.hypot(sd, level_noise(spread, INITIAL_POINTS))
        if p.slow_ratio <= r and slow / best < p.max_ratio and math.log(r) > p.z * sd:
            return "slow with grad"
    return False


def has_progress(best, init, head, spread, p: LossGrowthParams) -> bool:
    """Whether the fall from the initial level to the best stands `learnt_z` x the loss's log spread,
    or the fall from `head` (the median of the first 3 points, NaN if unknown) `head_z` x (a
    spread unknown, NaN, or no fall from the initial level: yes, there is nothing to tell apart)."""
    if not (p.learnt_z > 0.0 and spread > 0.0 and init > best > 0.0):
        return True
    return fell_by(init, best, p.learnt_z, spread) or (p.head_z > 0.0 and head > best
                                                       and fell_by(head, best, p.head_z, spread))


def _lost_decades(level, best, init, p: LossGrowthParams) -> bool:
    """Whether a level (> 0) lost `lost_decades` of the decades from the initial level to the best."""
    return p.lost_decades > 0 and init > best and math.log(level / best) >= p.lost_decades * math.log(init / best)


def projection(steps, levels, best, p: LossGrowthParams) -> Fit | None:
    """The log-linear fit of the last levels and when it reaches `target` x the best (None if
    it is not rising or the levels are not all positive)."""
    levels = np.asarray(levels, dtype=np.float64)
    if levels.size < 3 or not (np.isfinite(levels).all() and (levels > 0).all()):
        return None
    a, b, r2 = linear_fit(np.asarray(steps, dtype=np.int64), np.log(levels))
    if b <= 0:
        return None
    span = float(steps[-1] - steps[0])
    goal = p.target * best
    ahead = (math.log(goal) - (a + b * span)) / b
    if not ahead < 1e12:  # never, at this rate
        return None
    return Fit(
        code="CS202", signal="train_loss", start_step=int(steps[0]), end_step=int(steps[-1]),
        start_value=float(math.exp(a)), growth_per_step=b, doubling_steps=math.log(2) / b, r2=r2,
        projected_step=int(steps[-1] + max(0.0, math.ceil(ahead))), threshold=goal,
    )


def _describe(ep, p):
    head = f"train loss climbing from step {ep.start_step}: {ep.note}"
    # The fit of the first hit, as the note: the latest may be of a level that stopped climbing
    # (its doubling thousands of steps) beside a note "9x its best" (the chart draws the latest).
    f = ep.first_fit if ep.first_fit is not None else ep.fit
    if f is None:
        return head
    when = (
        f"{fmt(p.target)}x its best in ~{f.projected_step - f.end_step} steps (step {f.projected_step})"
        if f.projected_step > f.end_step
        else f"{fmt(p.target)}x its best already"
    )
    return f"{head}; doubling every {fmt(f.doubling_steps)} steps, {when}"


def _note(level, best, grad_rising, lr_rising) -> str:
    why = ", with the grad norm" if grad_rising else ", with the learning rate still rising" if lr_rising else ""
    return f"{fmt(level / best)}x its best level {fmt(best)}{why}"


def _lr_rising(lr, p: LossGrowthParams) -> np.ndarray:
    """For each learning-rate point: whether it is `lr_up` x its value `lr_back` points before,
    above its point before (still rising: the learning rate that jumped at a restart decays) and
    at least its finite peak so far (a new high: a cyclic schedule climbs back to its peak); how
    (STEADY or FASTER, see `lr_faster`), else 0."""
    v = lr.values
    out = np.zeros(v.shape[0], np.int8)
    k = p.lr_back
    if k < v.shape[0]:
        rising = np.zeros(v.shape[0], bool)
        with np.errstate(invalid="ignore"):
            rising[k:] = (v[k:] >= p.lr_up * v[:-k]) & (v[:-k] > 0)
        rising &= ramp_points(v)
        out[rising] = STEADY
        out[rising & _rising_faster(v, k, p.lr_faster)] = FASTER
    return out


def _rising_faster(v, k: int, factor: float) -> np.ndarray:
    """For each learning-rate point: whether its rise a point over its last k points is more than
    `factor` x that over the k points before them (see `lr_faster`; True with fewer points, or factor 0)."""
    out = np.ones(v.shape[0], bool)
    if factor > 0 and v.shape[0] > 2 * k:
        pos = np.arange(2 * k, v.shape[0])
        with np.errstate(invalid="ignore"):
            out[2 * k:] = ~(_rise_at(v, pos, k) <= factor * _rise_at(v, pos - k, k))
    return out


def _rise_at(v, pos, k: int) -> np.ndarray:
    """The learning rate's rise a point over the k points up to each of the points `pos` (over all
    the points before one of the first k; NaN at the first)."""
    back = np.minimum(np.maximum(pos, 0), k)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(back > 0, (v[pos] - v[pos - back]) / back, np.nan)


def _speed(rise, rise_before, factor: float) -> int:
    """FASTER when the learning rate's rise a point is more than `factor` x the rise it is read
    against (or either is NaN, or factor is 0), else STEADY: `lr_faster` for one point, as
    `_rising_faster` and `_lr_since_best_at` read it for many."""
    return FASTER if factor == 0 or not rise <= factor * rise_before else STEADY


def _channel_rise(channel, k: int, skip: int = 0) -> float:
    """_rise_at of a channel's point `skip` points before its last (the stream's side: the channel
    keeps its last 256 points, and `lr_back` is at most 127)."""
    back = min(channel.n - 1 - skip, k)
    values = channel.values
    return (values[-1 - skip] - values[-1 - skip - back]) / back if back > 0 else math.nan


class _LrJump:
    """The learning rate's last jump (see `lr_jump`), kept by the rule's check on the learning rate,
    which runs only where the monitor's screen sees one (`Quiet.prev_factor`)."""

    __slots__ = ("at", "to")

    def __init__(self):
        self.at, self.to = -1, math.nan  # its point's index in the channel, and the value it jumped to

    def note(self, i, v, before, p: LossGrowthParams):
        if v > p.lr_jump * before and before > 0:
            self.at, self.to = i, v

    def restarted(self, channel, p: LossGrowthParams) -> bool:
        """Whether the jump is among the channel's last `lr_jump_back` points and the learning rate
        still `lr_jump_level` x the value it jumped to (as _lr_restarted_at)."""
        return (self.at >= 0 and channel.n - 1 - self.at < p.lr_jump_back
                and channel.values[-1] >= p.lr_jump_level * self.to)


def _lr_since_best_at(v, loss_steps, lr, cand, p: LossGrowthParams) -> np.ndarray:
    """For each of the loss points `cand`: whether the learning rate, as of its last point at or
    before it, rose point to point to its highest yet, at least `lr_since_best` x its value at the
    loss point where the best level last fell (see `lr_since_best`); how (STEADY or FASTER, see
    `lr_faster`), else 0."""
    best = best_levels(v, p.best_smooth)
    fell = np.zeros(v.shape[0], bool)
    fell[0] = np.isfinite(best[0])
    with np.errstate(invalid="ignore"):
        fell[1:] = (best[1:] < best[:-1]) | (np.isfinite(best[1:]) & ~np.isfinite(best[:-1]))
    last_fell = np.maximum.accumulate(np.where(fell, np.arange(v.shape[0]), -1))[cand]
    then = value_at_or_before(lr.steps, lr.values, loss_steps[np.maximum(last_fell, 0)])
    now = value_at_or_before(lr.steps, lr.values, loss_steps[cand])
    with np.errstate(invalid="ignore"):
        rising = ((last_fell >= 0) & ramping_at(lr, loss_steps[cand]) & (then > 0)
                  & (now >= p.lr_since_best * then))
    out = np.where(rising, FASTER, 0).astype(np.int8)
    if p.lr_faster > 0 and rising.any():
        # Faster than where the best level last fell (see `lr_faster`).
        pos_then = np.searchsorted(lr.steps, loss_steps[np.maximum(last_fell, 0)], side="right") - 1
        pos_now = np.searchsorted(lr.steps, loss_steps[cand], side="right") - 1
        k = p.lr_back
        with np.errstate(invalid="ignore"):
            steady = _rise_at(lr.values, pos_now, k) <= p.lr_faster * _rise_at(lr.values, pos_then, k)
        out[rising & steady] = STEADY
    return out


def _lr_restarted_at(lr, steps, p: LossGrowthParams) -> np.ndarray:
    """For each of `steps`: whether the learning rate, as of its last point at or before it, jumped
    (see `lr_jump`) among its last `lr_jump_back` points and is still `lr_jump_level` x the value it
    jumped to."""
    out = np.zeros(np.shape(steps), bool)
    if lr is None or len(lr) < 2 or p.lr_jump_back == 0:
        return out
    v = lr.values
    jumps = np.flatnonzero(lr_jumped(v, p.lr_jump))
    if jumps.size == 0:
        return out
    pos = np.searchsorted(lr.steps, steps, side="right") - 1
    k = np.searchsorted(jumps, pos, side="right") - 1  # the last jump at or before each point
    ok = (pos >= 0) & (k >= 0)
    j = jumps[np.maximum(k, 0)]
    with np.errstate(invalid="ignore"):
        return ok & (pos - j < p.lr_jump_back) & (v[np.maximum(pos, 0)] >= p.lr_jump_level * v[j])


def _climbed_back(channel, p: LossGrowthParams) -> bool:
    """Whether the learning rate, as of its last point, is under its peak so far and at least
    `lr_jump` x the lowest of its `lr_climb_back` points before it, all finite (as
    _lr_climbed_back_at). Read only when the grad norm climbs: it walks those points."""
    values = channel.values
    n = len(values)
    now = values[-1] if n else math.nan
    if n < 2 or not now < channel.max_finite:
        return False
    window = list(islice(values, n - 1 - min(p.lr_climb_back, n - 1), n - 1))
    total = sum(window)
    if not total - total == 0.0:  # a NaN or an infinite point among them (or a sum past 1e308)
        if not all(x - x == 0.0 for x in window):
            return False
    low = min(window)
    return low > 0 and now >= p.lr_jump * low


def _lr_climbed_back_at(lr, steps, p: LossGrowthParams) -> np.ndarray:
    """For each of `steps`: whether the learning rate, as of its last point at or before it, climbed
    back (see `lr_climb_back`): under its peak so far, and at least `lr_jump` x the lowest of its
    `lr_climb_back` points before that one, none of them NaN or infinite."""
    out = np.zeros(np.shape(steps), bool)
    if lr is None or len(lr) < 2 or p.lr_climb_back == 0:
        return out
    v = lr.values
    n, w = v.shape[0], p.lr_climb_back
    bad = ~np.isfinite(v)
    filled = np.where(bad, np.inf, v)
    low = np.full(n, np.nan)  # the lowest of the up-to-w points before each
    head = min(w, n)
    low[1:head] = np.minimum.accumulate(filled[: head - 1])
    if n > w:
        sliding_min(filled[:-1], w, out=low[w:])
    count = np.concatenate([[0], np.cumsum(bad)])
    idx = np.arange(n)
    clean = count[idx] == count[np.maximum(idx - w, 0)]  # no non-finite point among them
    with np.errstate(invalid="ignore"):
        back = (v < finite_peak(v)) & clean & (low > 0) & (v >= p.lr_jump * low)
    back[0] = False
    pos = np.searchsorted(lr.steps, steps, side="right") - 1
    return (pos >= 0) & back[np.maximum(pos, 0)]


class _LrTrendOfChannel:
    """The learning rate's side of the rule (`_lr_rising`): whether it is rising, as of its last
    point, read from its channel when needed (so nothing runs at the learning rate's points)."""

    def __init__(self, p: LossGrowthParams, channel):
        self.back, self.up, self.faster = p.lr_back, p.lr_up, p.lr_faster
        self.channel = channel

    @property
    def rising(self):
        """0, STEADY or FASTER."""
        ch = self.channel
        k = self.back
        if ch.n <= k:
            return 0
        values = ch.values
        back = values[-1 - k]
        if not (values[-1] >= self.up * back and back > 0 and ramping(ch)):
            return 0
        # `lr_faster`, as _rising_faster: too few points to tell read as faster.
        return FASTER if ch.n <= 2 * k else _speed(_channel_rise(ch, k), _channel_rise(ch, k, k), self.faster)


def _grad_rising(g, p: LossGrowthParams) -> np.ndarray:
    """For each grad-norm point: whether its level climbs (see `grad_rise`)."""
    gl = smoothed_level(g.values, p.grad_smooth)
    n = gl.shape[0]
    out = np.zeros(n, bool)
    if n <= p.grad_warmup:
        return out
    low = np.full(n, np.nan)
    low[p.grad_warmup:] = np.fmin.accumulate(gl[p.grad_warmup:])
    k = max(p.grad_back, 1)
    back = np.full(n, np.nan)
    if k < n:
        back[k:] = gl[:-k]
    with np.errstate(invalid="ignore"):
        out = (gl >= p.grad_rise * low) & (gl >= p.grad_up * back) & (low > 0)
    return out


class _GradTrend:
    """The grad norm's side of the rule: whether its level climbs, as of its last point (worked
    out when the loss's decision reads it, from the state kept at every grad-norm point)."""

    def __init__(self, p: LossGrowthParams):
        self.p = p
        self.warmup = p.grad_warmup
        self.level = Level(p.grad_smooth)
        self.levels = collections.deque(maxlen=max(p.grad_back, 1) + 1)
        self.low = math.nan
        self.n = 0

    def check(self, i, step, v):
        """Takes a grad-norm point (the stream's check on the grad norm: it never fires)."""
        gl = self.level.push(v)
        self.levels.append(gl)
        if self.n >= self.warmup and (gl < self.low or (self.low != self.low and gl == gl)):
            self.low = gl
        self.n += 1
        return None

    @property
    def rising(self):
        levels = self.levels
        if not levels:
            return False
        p, gl, low = self.p, levels[-1], self.low
        back = levels[0] if len(levels) > max(p.grad_back, 1) else math.nan
        return bool(gl >= p.grad_rise * low and gl >= p.grad_up * back and low > 0)


class LossGrowthStream(Stream):
    hits = ("train_loss", "grad_norm", "lr")  # checked on the loss; the other sides only follow

    def __init__(self, p, signal, channels):
        self.p = p
        self.signal = signal
        self.grad = channels["grad_norm"]
        self.lr = channels["lr"]
        if signal == "grad_norm":
            self.trend = self.grad.shared.setdefault(_GRAD, _GradTrend(p))
            self.check = self.trend.check  # one call a grad-norm point, not two
            return
        if signal == "lr":
            self.jump = self.lr.shared.setdefault(_LR_JUMP, _LrJump())
            self.lr_values = self.lr.values  # holds this point and the ones before
            self.lr.shared.setdefault(_LR, _LrTrendOfChannel(p, self.lr))
            if p.lr_jump_back:
                self.check = self._note_jump  # only at the jumps, which the screen lets through
            else:
                self.idle = True
            return
        # The levels of the last points (for the level `smooth` points before and the fit) are
        # the shared Levels' histories, so a point where the rule rests changes nothing here.
        ch = channels["train_loss"]
        self.level = shared_level(ch, p.smooth, history=max(p.fit_window, p.smooth + 1))
        self.fast = shared_level(ch, p.fast, history=max(p.fit_window, p.fast + 1))
        self.best_level = shared_level(ch, p.best_smooth, history=p.smooth + 1, best=True)
        self.initial = ch.initial  # pushed after the checks: as of the points before
        self.lr_jump = self.lr.shared.setdefault(_LR_JUMP, _LrJump())
        # The learning rate where the best level last fell (`lr_since_best`), noted by the level as
        # it falls: at points where the rule may rest.
        self.lr_at_best = self.lr_rise_at_best = math.nan  # ... and its rise a point then (_channel_rise)
        if p.lr_since_best > 0:
            self.best_level.also_on_low(self._note_best)
        self.values = ch.values
        self.start = min(p.min_points, p.early_points)
        self.noise = recent_logs(ch, p.noise_window, np.log10)  # of the points before
        self.spread = recent_logs(ch, p.spread_window, np.log)
        self.noise_jitter = recent_logs(ch, p.noise_window, np.log)  # the gate's, around the trend
        # Kept by the stream itself, if at all.
        self.own = [r.values for r in (self.noise, self.spread, self.noise_jitter) if hasattr(r, "values")]
        # The fit's steps: the channel's recent ones, unless it keeps fewer than fit_window.
        self.steps = ch.steps if p.fit_window <= ch.steps.maxlen else collections.deque(maxlen=p.fit_window)
        self.own_steps = self.steps is not ch.steps
        self.run = 0  # points in a row that climbed, ending at the last one
        self.run_with_grad = 0  # ... with the grad norm climbing too
        self.run_smooth = 0  # ... on a smooth loss, told by its fast level
        self.under, self.checked = False, -1  # the level under max_ratio at the last point checked
        # A larger spread raises climbing's bars only for non-negative z's (the defaults).
        self.bars_fall = p.z >= 0 and p.z_with_grad >= 0 and p.z_with_lr >= 0
        self.low_ratio = min(p.ratio_with_grad, p.ratio_with_lr)
        self.level_ratio = min(p.ratio_with_grad, p.ratio)  # the lowest bar on a level without the LR rising

    def rest(self):
        # A point is no candidate while both levels are under their bars (see check); the run
        # counts must be zero, and nothing kept per point by the stream itself.
        p = self.p
        # A skipped point counts as under max_ratio (see check): its bar must be at most that.
        if self.signal != "train_loss" or self.own or self.own_steps or self.low_ratio > p.max_ratio:
            return None
        # A smooth loss is judged against the lower of the best level and the level's lowest.
        return Rest(after=max(p.min_points, self.start),
                    bars=tuple((level, factor, best) for best in (self.best_level, self.level)
                               for level, factor in ((self.level, self.low_ratio), (self.fast, self.low_ratio),
                                                     (self.best_level, p.slow_ratio))))

    def _head(self) -> float:
        """The median of the first 3 finite points once the initial level is known (as the batch
        rule reads it), else NaN."""
        head = self.initial.head
        return small_median(head[:3]) if len(head) == 10 else math.nan

    def _may_climb(self, told, levels, width, b, slow_before, best, init, rising, lr_rising, finishing):
        """Whether `climbing` can say yes on this level, before its noise estimates (which cost the
        most): the level above its value `width` points before (or the slow one, with the grad norm
        or the learning rate) and under max_ratio unless `finishing`; with a zero spread (which only
        lowers its bars when z >= 0) and no noise gate, it must climb."""
        p = self.p
        before = levels[-1 - width] if len(levels) > width else math.nan
        top = math.inf if finishing else p.max_ratio * best
        if not ((before < told < top) or ((rising or lr_rising) and slow_before < b < top)):
            return False
        return not self.bars_fall or bool(climbing(told, before, b, slow_before, best, init, 0.0, math.nan,
                                                   rising, lr_rising, p, finishing, width))

    def quiet(self):
        # On the learning rate, read from its channel, it notes only the jumps.
        if self.signal == "lr" and self.check == self._note_jump:
            return Quiet(prev_factor=self.p.lr_jump)
        return None

    def _around_trend(self, spread, noise):
        """The batch rule's _around_trend at this point: np.fmin's choice, and the gate lifted where
        the jitter of its window spans under `trend_noise` (read only where the gate holds)."""
        p = self.p
        if p.spread_jitter > 0:
            bound = p.spread_jitter * self.spread.jitter()
            if bound < spread or spread != spread:
                spread = bound
        return spread, trend_lifted(noise, self.noise_jitter, p)

    def _note_best(self):
        """The best level fell at this loss point: the learning rate's last point, at or before it."""
        lr = self.lr
        self.lr_at_best = lr.values[-1] if lr.n else math.nan
        self.lr_rise_at_best = _channel_rise(lr, self.p.lr_back)

    def _note_jump(self, i, step, v):
        """The check on the learning rate, when its trend is read from its channel: its jumps."""
        if i:
            self.jump.note(i, v, self.lr_values[-2], self.p)

    def check(self, i, step, v):
        if i < self.start - 1 and not self.own_steps:
            # No candidate before `start`: the run counts stay at 0, and `under` is read from the
            # point before `start` on, which is checked in full.
            for own in self.own:
                own.append(v)
            return None
        p = self.p
        level = self.level.value
        fast = self.fast.value
        b = self.best_level.value
        best = self.best_level.low
        init = self.initial.value
        if self.own_steps:
            self.steps.append(step)
        low = self.level.low
        early = i < p.min_points
        # early_best's, inline: at every point.
        best_smooth = low if best != best or low < best else best
        if early:  # a short run: its own best level, no slow level, the jitter gate for noise
            best, b = best_smooth, math.nan  # early_best(best, low), which best_smooth is
        hit = None
        # On a smooth loss its fast level tells, against the lower of the best level and the level's
        # lowest (see the batch rule). Which loss is smooth costs a jitter, read only when the choice
        # can change what happens: a climb possible on either level, or the two on different sides
        # of max_ratio (the next point's `finishing`).
        told, width, levels, top_best = level, p.smooth, self.level.history, best
        how = smooth = False
        said_by = None  # (level, its history, its best) when the fast level tells a little noisier loss
        if i >= self.start and v - v == 0.0 and best_smooth > 0.0:
            # Candidates, so far. Ifs, not booleans assigned: their comparisons jump, so 3.11 specialises them.
            if best > 0.0 and (level >= self.low_ratio * best or b >= p.slow_ratio * best):
                seven = True
            else:
                seven = False
            if fast >= self.low_ratio * best_smooth or b >= p.slow_ratio * best_smooth:
                quick = True
            else:
                quick = False
            # apart = (level < max_ratio x best) != (fast < max_ratio x best_smooth), in jumps
            if level < p.max_ratio * best:
                apart = not fast < p.max_ratio * best_smooth
            else:
                apart = fast < p.max_ratio * best_smooth
        else:
            seven = quick = apart = False
        rising = lr_rising = False
        if seven or quick:
            lr_trend = self.lr.shared.get(_LR)
            lr_rising = 0 if lr_trend is None else lr_trend.rising
            if lr_rising != FASTER:
                # `lr_since_best`, as _lr_since_best_at: the ratio first (under a constant or
                # decaying rate it fails, and the ramp is not read). lr_at_best is NaN without a
                # learning rate then, or with lr_since_best 0.
                then = self.lr_at_best
                if then > 0.0 and self.lr.values[-1] >= p.lr_since_best * then and ramping(self.lr):
                    lr_rising = _speed(_channel_rise(self.lr, p.lr_back), self.lr_rise_at_best, p.lr_faster)
            if not lr_rising:
                # Then climbing's bars are `ratio_with_grad` (or `ratio`) x the best on a level and
                # `slow_ratio` x on the slow one: a level under both does not climb, whatever the grad
                # norm does, which is not read (the usual point the rest screen lets through: a noisy
                # loss a little over its best).
                if seven and not (level >= self.level_ratio * best or b >= p.slow_ratio * best):
                    seven = False
                if quick and not (fast >= self.level_ratio * best_smooth or b >= p.slow_ratio * best_smooth):
                    quick = False
        if seven or quick:
            # The point before was under max_ratio (a point the rest screen skipped was far under it).
            finishing = self.under or self.checked != i - 1
            trend = self.grad.shared.get(_GRAD)
            rising = (trend is not None and trend.rising
                      and not (p.lr_jump_back and self.lr_jump.restarted(self.lr, p))
                      and not (p.lr_climb_back and _climbed_back(self.lr, p)))
            slow = self.best_level.history
            slow_before = slow[-1 - p.smooth] if len(slow) > p.smooth else math.nan
            seven = seven and self._may_climb(
                level, self.level.history, p.smooth, b, slow_before, best, init, rising, lr_rising, finishing)
            quick = quick and self._may_climb(
                fast, self.fast.history, p.fast, b, slow_before, best_smooth, init, rising, lr_rising, finishing)
        if seven or quick or apart:
                jit = self.spread.jitter_under(p.early_jitter)
                smooth = jit is not None
                if smooth:
                    told, width, levels, top_best = fast, p.fast, self.fast.history, best_smooth
                if quick if smooth else seven:
                    before = levels[-1 - width] if len(levels) > width else math.nan
                    if early:
                        spread, noise = early_spread_noise(i, self.values, p, width, rising or lr_rising)
                    else:
                        spread, noise = self.spread.log_spread(), self.noise.noise_decades()
                        if p.spread_jitter > 0 or p.trend_noise > 0:
                            spread, noise = self._around_trend(spread, noise)
                    if smooth:
                        spread = jit
                    how = climbing(told, before, b, slow_before, top_best, init, spread, noise, rising, lr_rising,
                                   p, finishing, width, self._head())
                if (early and quick and not smooth and how not in _CORROBORATED and (rising or lr_rising)
                        and p.early_noisy > 0):
                    jit = self.spread.jitter_under(2.0 * p.early_jitter)
                    if jit is not None:
                        # A short run a little noisier than smooth, with the grad norm or the learning
                        # rate rising: its fast level may tell too, its jitter taken `early_noisy` x.
                        quick_how = climbing(fast, self.fast.history[-1 - p.fast] if len(self.fast.history) > p.fast
                                             else math.nan, b, slow_before, best_smooth, init, p.early_noisy * jit,
                                             early_spread_noise(i, self.values, p, p.fast)[1], rising, lr_rising,
                                             p, finishing, p.fast, self._head())
                        if quick_how in _CORROBORATED:
                            how, said_by = quick_how, (fast, self.fast.history, best_smooth)
        under = told < p.max_ratio * top_best
        self.run = self.run + 1 if how else 0
        self.run_with_grad = self.run_with_grad + 1 if how in _CORROBORATED else 0
        self.run_smooth = self.run_smooth + 1 if how and smooth else 0
        if (how and (self.run >= p.consecutive_alone or max(self.run_with_grad, self.run_smooth) >= p.consecutive)
                and not (early and not left_start(i, self.values, p, p.fast if said_by is not None else width))):
            w = p.fit_window
            if said_by is not None:
                told, levels, top_best = said_by
            steps = list(islice(self.steps, max(len(self.steps) - w, 0), None))
            fit = projection(steps, list(islice(levels, max(len(levels) - w, 0), None)), top_best, p)
            said = b if how.startswith("slow") else told
            hit = StreamHit(note=_note(said, top_best, how in _CORROBORATED and rising,
                                       how in _CORROBORATED and lr_rising), fit=fit)
        self.busy = self.run > 0
        self.under, self.checked = under, i
        for own in self.own:
            own.append(v)
        return hit


@rule(
    code="CS202", objective=True, start=True, symbol="loss-growth", family="growth", severity="critical",
    signals=("train_loss", "grad_norm", "lr"), params=LossGrowthParams, describe=_describe, stream=LossGrowthStream,
    advice="the run is diverging before it crashes: lower the learning rate now (or stop the LR "
    "ramp), enable gradient clipping, and keep the checkpoint from before the climb",
)
def loss_growth(data, p: LossGrowthParams, since=None):
    """The train loss climbs away from its best level, out of its own noise: a divergence under way.

    The loss's current level (trailing median of `smooth` points) is at
    least `ratio` x its best level so far, and that far in units of the
    level's noise (`z`); or, while the grad norm climbs too (its level
    `grad_rise` x its minimum and still rising), `ratio_with_grad` x and
    `z_with_grad` units: the loss and the grad norm rising together is a
    divergence, not a noisy batch; so is the loss climbing while the learning
    rate still rises (`lr_up` x over `lr_back` points, to its highest yet: a
    ramp or range test left running, a warm-up that overshoots; not a cyclic
    schedule climbing back to its peak; or to `lr_since_best` x the rate where
    the best level last fell, however slowly per logged point),
    `ratio_with_lr` x and `z_with_lr` units (a rate rising no faster than it
    did, a linear or cosine warm-up on its way to its peak, holds the grad
    norm's bars: `lr_faster`). With one of
    those, a per-step loss too noisy for the short level may show the climb in
    its slow level (the trailing median of `best_smooth` points, `slow_ratio`
    x the best). Beyond
    `max_ratio` x the best the run has diverged: the rule stops there, and the
    sustained divergence (CS113) tells the rest. The level must be rising (above its value
    `smooth` points before: the slow recovery of a spike falls) for
    `consecutive` points in a row with the grad norm or the learning rate, or
    on a smooth loss (below), else `consecutive_alone`. The level must also have lost `lost` of
    the progress from the initial level (`lost_with_lr` while the learning rate climbs ever
    faster), and the loss must not be pure noise
    (tiny batches). A log-linear fit of the last levels projects when the
    loss reaches `target` x its best. Many small models diverge this way
    with a grad norm far under any explosion threshold. Before `min_points`,
    from `early_points` on, a smooth loss (see `early_jitter`: epoch means of a
    short run) is judged against the lower of its best level and its lowest
    current level, with its jitter as its noise and no slow level, and told
    only once its level left the range it started in (`early_left`). The point
    where the level crosses `max_ratio` still counts, with the grad norm or
    the learning rate rising (a fast divergence outruns its level). A smooth
    loss (the jitter of its `spread_window` points before under
    `early_jitter`: averaged or epoch losses) is judged on its fast level (the
    median of `fast` points), against the lower of its best level and the
    level's lowest, with that jitter as its noise: a 7-point median lags a
    smooth climb by most of the lead it could give. The noise is read around
    the loss's own trend (`spread_jitter`): a run logged every 10 steps holds
    its fall and its climb within the windows, whose spread is no noise.
    """
    s = data.get("train_loss")
    start = min(p.min_points, p.early_points)
    if s is None or len(s) <= start:
        return
    v = s.values
    level = smoothed_level(v, p.smooth)
    fast = smoothed_level(v, p.fast)
    slow = smoothed_level(v, p.best_smooth)
    best = early_bests(best_levels(v, p.best_smooth), level, p.min_points)
    # Before min_points: no slow level (see the stream).
    slow_told = slow.copy()
    slow_told[: p.min_points] = np.nan
    init, known_after = initial_level(v)
    head = float(np.median(v[np.isfinite(v)][:3])) if init == init else math.nan  # see has_progress
    first = since_index(s, since)
    # A hit at i needs the points before it to have climbed too.
    i0 = max(first - (max(p.consecutive, p.consecutive_alone) - 1), start)
    low = min(p.ratio_with_grad, p.ratio_with_lr)
    best_smooth = np.fmin(best, np.fmin.accumulate(level))
    with np.errstate(invalid="ignore"):
        # Past max_ratio on both levels and the slow one (if any), a point is over it whichever level
        # tells, and cannot climb unless the point before was under it: a run that stays diverged
        # is decided here, not point by point below.
        deep = ((level >= p.max_ratio * best) & (fast >= p.max_ratio * best)
                & ~(slow_told < p.max_ratio * best))
        settled = np.zeros(v.shape[0], bool)
        settled[1:] = deep[1:] & deep[:-1]
        maybe = np.flatnonzero(
            ((np.fmax(level[i0:], fast[i0:]) >= low * best_smooth[i0:])
             | (slow_told[i0:] >= p.slow_ratio * best_smooth[i0:])) & (best_smooth[i0:] > 0) & np.isfinite(v[i0:])
            & ~settled[i0:]
        ) + i0
    if maybe.size == 0:
        return
    g = data.get("grad_norm")
    lr = data.get("lr")
    rising, lr_rising = _corroborated(s, v, g, lr, maybe, p)
    # Where either level might tell a climb: whether the loss is smooth there (then its fast level
    # tells), and the jitter that is then its noise; or, before `min_points`, a little noisier (under
    # 2 x `early_jitter`) with the grad norm or the learning rate rising, where the stream reads its
    # fast level too.
    jitters = jitter_at(v, maybe, p.spread_window)
    smooth = jitters < p.early_jitter
    told = level.copy()
    told[maybe[smooth]] = fast[maybe[smooth]]
    best = best.copy()
    best[maybe[smooth]] = best_smooth[maybe[smooth]]
    with np.errstate(invalid="ignore"):
        under = (told < p.max_ratio * best) & ~deep  # see climbing's `finishing`
        at = best[maybe]
        keep = ((told[maybe] >= low * at) | (slow_told[maybe] >= p.slow_ratio * at)) & (at > 0)
        nearly = np.zeros(maybe.size, bool)
        if p.early_noisy > 0:
            bs = best_smooth[maybe]
            nearly = ((maybe < p.min_points) & ~smooth & (jitters < 2.0 * p.early_jitter) & (rising | (lr_rising > 0))
                      & ((fast[maybe] >= low * bs) | (slow_told[maybe] >= p.slow_ratio * bs)))
        keep |= nearly
    cand, smooth, nearly, jitters = maybe[keep], smooth[keep], nearly[keep], jitters[keep]
    rising, lr_rising = rising[keep], lr_rising[keep]
    if cand.size == 0:
        return
    hits, fits, told_by = [], {}, {}

    w = p.fit_window
    # Climbing points in a row (with the grad norm; on a smooth loss), ending at point `last`.
    run = run_with_grad = run_smooth = 0
    last = -2
    # The noise estimates of the candidates past min_points, at once (the same numbers).
    late = cand[cand >= p.min_points]
    spread_at = log_spread_at(v, late, p.spread_window)
    noise_at = noise_gate_at(v, late, p.noise_window, p.max_noise)
    if p.spread_jitter > 0 or p.trend_noise > 0:
        spread_at, noise_at = _around_trend(v, late, spread_at, noise_at, p)
    spreads = dict(zip(late.tolist(), spread_at.tolist()))
    noises = dict(zip(late.tolist(), noise_at.tolist()))
    for i, grad_up, lr_up, fast_i, nearly_i, jit in zip(cand.tolist(), rising.tolist(), lr_rising.tolist(),
                                                        smooth.tolist(), nearly.tolist(), jitters.tolist()):
        lv, width, best_i = (fast, p.fast, float(best_smooth[i])) if fast_i else (level, p.smooth, float(best[i]))
        if i < p.min_points:
            spread, noise = early_spread_noise(i, v, p, width, grad_up or lr_up)
        else:
            spread, noise = spreads[i], noises[i]
        if fast_i:
            spread = jit
        init_i, head_i = (init, head) if i > known_after else (math.nan, math.nan)
        before_level = float(lv[i - width]) if i >= width else math.nan
        slow_before = float(slow[i - p.smooth]) if i >= p.smooth else math.nan
        if last != i - 1:
            run = run_with_grad = run_smooth = 0
        last = i
        finishing = bool(under[i - 1]) if i else False
        how = climbing(float(lv[i]), before_level, float(slow_told[i]), slow_before, best_i, init_i,
                       spread, noise, grad_up, lr_up, p, finishing=finishing, width=width, head=head_i)
        if nearly_i and how not in _CORROBORATED:
            # A short run a little noisier than smooth, with the grad norm or the learning rate rising
            # (see the stream).
            noise = early_spread_noise(i, v, p, p.fast)[1]
            quick_how = climbing(float(fast[i]), float(fast[i - p.fast]) if i >= p.fast else math.nan,
                                 float(slow_told[i]), slow_before, float(best_smooth[i]), init_i,
                                 p.early_noisy * jit, noise, grad_up, lr_up, p, finishing=finishing, width=p.fast,
                                 head=head_i)
            if quick_how in _CORROBORATED:
                how, lv, best_i, width = quick_how, fast, float(best_smooth[i]), p.fast
        run = run + 1 if how else 0
        run_with_grad = run_with_grad + 1 if how in _CORROBORATED else 0
        run_smooth = run_smooth + 1 if how and fast_i else 0
        if how:
            if not (run >= p.consecutive_alone or max(run_with_grad, run_smooth) >= p.consecutive) or i < first:
                continue
            if i < p.min_points and not left_start(i, v, p, width):
                continue
            lo = max(i - w + 1, 0)
            fit = projection(s.steps[lo : i + 1], lv[lo : i + 1], best_i, p)
            hits.append(i)
            said = float(slow[i] if how.startswith("slow") else lv[i])
            # The note is read for an episode's first hit only: formatted then.
            told_by[i] = (said, best_i, how in _CORROBORATED and grad_up, how in _CORROBORATED and lr_up)
            if fit is not None:
                fits[i] = fit
    if hits:
        def note(i):
            said, best_i, grad_up, lr_up = told_by[i]
            return _note(said, best_i, grad_up, lr_up)

        yield Hits("train_loss", np.asarray(hits), fits=fits, note=note)


def _corroborated(s, v, g, lr, cand, p: LossGrowthParams):
    """For each of the loss points `cand`: whether the grad norm climbs (discounted after a jump or
    a climb back of the learning rate) and whether the learning rate is rising, as the stream reads
    them there."""
    rising = np.zeros(cand.size, bool)
    if g is not None and len(g):
        # The grad norm's last point before the loss's step (the monitor sees no later one).
        rising = value_at_or_before(g.steps, _grad_rising(g, p).astype(np.float64), s.steps[cand] - 1) > 0
    # The learning rate is logged before the loss at a step (the monitor's order): its point at the step counts.
    if rising.any():  # the learning rate's restarts and climbs only discount a climbing grad norm
        rising &= ~_lr_restarted_at(lr, s.steps[cand], p)
        rising &= ~_lr_climbed_back_at(lr, s.steps[cand], p)
    lr_rising = np.zeros(cand.size, np.int8)  # 0, STEADY or FASTER
    if lr is not None and len(lr):
        lr_rising = value_at_or_before(lr.steps, _lr_rising(lr, p).astype(np.float64), s.steps[cand]).astype(np.int8)
        if p.lr_since_best > 0:
            lr_rising = np.maximum(lr_rising, _lr_since_best_at(v, s.steps, lr, cand, p))
    return rising, lr_rising
