"""CS201: exponential growth of the gradient norm that predicts an explosion before it happens."""

from __future__ import annotations

import collections
import dataclasses
import math
from itertools import islice

import numpy as np

from tb_crash_signals.analysis.rules.base import Fit, Hits, fmt, level_noise, param, rule, since_index
from tb_crash_signals.analysis.rules.learning_rate import ramping, ramping_at
from tb_crash_signals.analysis.stats import (
    best_levels,
    chunks,
    finite_anchor,
    hinge_fit,
    initial_level,
    jitter_at,
    linear_fit,
    positive_log,
    smoothed_level,
    trailing_median_mad_at,
    value_at_or_before,
    window_sums,
)
from tb_crash_signals.analysis.streaming import SortedSpan, Stream, StreamHit, recent_logs, shared_level


@dataclasses.dataclass(frozen=True)
class GrowthParams:
    window: int = param(40, "points in the sliding log-linear fit", at_least=2)
    window_steps: int = param(
        200, "... but no more points than span this many steps, at the cadence of the grad norm's first 6 "
        "points: logged every 10 steps, 20 points (a 40-point window and the normal level before it would "
        "wait 500 steps, past most explosions of a run that short)", at_least=1,
    )
    min_window: int = param(16, "... and never fewer than this many points", at_least=2)
    slow_window: int = param(
        100, "points in a second, longer fit window, read where the grad norm's cadence gives it more "
        "points than `window` (as many as span `window_steps`, at most this): logged at every step, 40 "
        "points of a grad norm doubling every 60 steps grow 1.6x, under `min_growth`, and the explosion "
        "came with no projection. It decides only where the short window's own line grows under "
        "`min_growth` (a growth too slow for it, not one it saw and held back), on its projection alone, "
        "and while the growth goes on to its end (its last `window`/2 points rising at least half as fast "
        "as its fit: a warm-up's grad norm that rose and settled fits a 100-point line too); 0: the "
        "short window alone", at_least=0,
    )
    min_r2: float = param(
        0.6, "the fit must explain at least this share of the variance of log(grad norm) "
        "over the window (a sustained, steady growth)"
    )
    min_growth: float = param(
        2.0, "fitted growth factor over the window (2.0: doubled)", above=0.0
    )
    threshold: float = param(
        100.0, "the explosion threshold the projection aims at (as `grad-norm-threshold`)"
    )
    horizon: int = param(
        150, "fires only when the projected crossing is at most this many steps ahead (a fit of 40 "
        "points logged every 5 steps spans 200)"
    )
    max_extrapolation: float = param(
        2.0, "... and at most this multiple of the fit's own span ahead: a line through 40 steps says "
        "little of step 140 (a warm-up's grad norm doubles a few times with its learning rate, then "
        "settles)", above=0.0,
    )
    baseline_window: int = param(
        200, "points before the fit window whose median is the run's normal level", at_least=2
    )
    min_baseline: int = param(
        10, "points before the fit window that tell the run's normal level (as many as the window's 40 "
        "would judge a run logged every 5 steps only from its 79th point)", at_least=2
    )
    min_excess: float = param(
        2.0, "the current value must be at least this multiple of that normal level, so the "
        "early rise of a healthy run is not an alarm", above=0.0,
    )
    rel_excess: float = param(
        4.0, "... or, whatever the projection, at least this multiple of it while the train loss is not "
        "improving (see `loss_up`): small models crash far under the threshold", above=0.0,
    )
    loss_up: float = param(
        1.1, "the train loss is not improving when its level (median of 7 points) is at least this "
        "multiple of its best level (the lowest median of 31 points)"
    )
    loss_up_z: float = param(
        3.0, "... and at least this many noise units above it (the jitter of the loss's last 50 points "
        "around their trend, over the square root of 7: its level's noise): a per-step loss's 7-point "
        "median wanders 10-20 % above its best with the batches, while a small-init network's grad norm "
        "climbs 10-30x in its long warm-up; 0: the ratio alone", at_least=0.0,
    )
    loss_falling: float = param(
        0.95, "no prediction while the train loss falls fast: its level (median of 7 points) under this "
        "multiple of its best level (the lowest median of 31 points), new lows far under the slow "
        "best -- a run that starts to learn, whose grad norm rises with its first large steps",
        above=0.0,
    )
    learning_excess: float = param(
        100.0, "... unless the grad norm stands at least this multiple of the run's normal level: a run's "
        "first large steps raise it a few times over (healthy CNNs 10-15x, a long warm-up from a small "
        "initialisation up to ~40x), a loss scale that doubles without bound hundreds of times while the "
        "loss still learns; 0: always quiet then", at_least=0.0,
    )
    quiet_in_ramp: bool = param(
        True, "no prediction while the learning rate still ramps up (above its point before, at its "
        "highest yet) and the train loss has not turned up (see `loss_up`): a warm-up's larger steps "
        "make larger gradients, and a long warm-up's grad norm rises "
        "5-20x before it settles; a ramp past the stable rate shows in the loss too"
    )
    one_step: bool = param(
        True, "no prediction when one level shift makes all the growth: the window with its best single "
        "step (two levels, before and after a point) taken out neither grows `min_growth`x nor ends "
        "`min_excess`x above the run's normal level, and the points after the step do not keep rising. A "
        "grad norm that jumps once from its normal level and stays (layers unfrozen, a loss or batch "
        "rescaled) has moved to a new one, and a line through that step projects a crossing the points "
        "after it do not head for; a loss scale's later stairs stand on the earlier ones, and an "
        "exponential's first steps bend up rather than step",
    )
    under_start: float = param(
        2.0, "no prediction while the grad norm (the median of its last 3 points) stands under this "
        "multiple of its initial level (the median of its first 10 finite points): deep into convergence "
        "(a noise-free fit under full-batch Adam at a loss of 1e-6) a grad norm 10-100x under where it "
        "started bursts 20-50x and comes back within tens of steps, again and again, up to about its "
        "initial level; an explosion passes this on its way to the threshold; 0: never quiet",
        at_least=0.0,
    )
    cooldown: int = param(20, "points without a prediction after which a new episode starts")


def _describe_growth(ep, p):
    f = ep.fit
    if f is None:
        return "grad norm growing exponentially"
    when = (
        f"crosses {fmt(f.threshold)} in ~{f.projected_step - f.end_step} steps (step {f.projected_step})"
        if f.projected_step is not None
        else f"heading for {fmt(f.threshold)}"
    )
    return (
        f"grad norm doubling every {fmt(f.doubling_steps)} steps since step {f.start_step} "
        f"(r2 {f.r2:.2f}); {when}"
    )


class GradGrowthStream(Stream):
    """The short fit window's decisions, and the slow window's where the cadence gives it more
    points (see `slow_window`)."""

    hits = ("grad_norm",)  # the loss's side is read from its shared levels when a window decides

    @classmethod
    def needs(cls, p, signal):
        # The run's normal level: forward-filled logs before the longer fit window.
        return [(signal, p.baseline_window + max(p.window, p.slow_window), True)]

    def __init__(self, p, signal, channels):
        self.short = _WindowStream(p, signal, channels)
        self.slow = None
        if p.slow_window > p.window:
            self.slow = _WindowStream(dataclasses.replace(p, window=p.slow_window), signal, channels)

    def check(self, i, step, v):
        short = self.short
        hit = short.check(i, step, v)
        slow = self.slow
        if slow is not None:
            # Past the cadence, a finite log under the short window's first bar (`min_excess` over the
            # low of the log window both read) is under the slow one's: it has nothing to do or keep.
            if i >= CADENCE_POINTS and slow.own_steps is None:
                x = short.channel.log_value
                if x - short.history.low < short.min_excess:
                    return hit
            other = slow.check(i, step, v)
            if i == CADENCE_POINTS - 1:  # the windows are set
                if slow.w <= self.short.w:
                    self.slow = None  # this cadence gives it no more points than the short one
                slow.short = self.short.w
            elif hit is None:
                return other
        return hit


class _WindowStream:
    """One fit window's decisions, point by point, as the batch rule takes them."""

    # The slack of the quarter pre-filter: far above the rounding of a Python sum of q logs,
    # so the exact (numpy) test in _decide settles close calls.
    _SLACK = 1e-6

    def __init__(self, p, signal, channels):
        self.signal = signal
        self.loss = channels["train_loss"].shared.setdefault(_LOSS, _LossRatio(channels["train_loss"]))
        self.lr = channels["lr"]
        self.threshold = p.threshold
        self.log_threshold = math.log(p.threshold) if p.threshold > 0 else -math.inf  # (no value under it)
        self.min_excess = math.log(p.min_excess)  # as fit_window computes it
        self.learning_excess = math.log(p.learning_excess) if p.learning_excess > 0 else math.inf
        self.min_baseline = p.min_baseline
        self.min_growth = math.log(p.min_growth)
        self.channel = channels[signal]  # its log_value: log(v), computed once a point
        # The fit window is read from the log window (which ends at the point before) only when
        # it holds w finite logs: then they are the window's logs, unfilled, so the stream keeps
        # nothing per point but the index of the last non-finite log.
        self.history = self.channel.log_window
        self.own_steps = None
        self._window(p)
        self.last_bad = -self.w
        self.first_step = None  # the grad norm's first step: its cadence, with its 6th
        self.short = 0  # the slow window's: the short one's points (see fit_window)

    def _window(self, p):
        """Takes `p.window` as the fit window: what depends on it."""
        self.p, self.w = p, p.window
        self.q, self.rise = quarter_rise(p)
        self.q_rise = self.q * self.rise
        self.baseline = _Baseline(self.history, self.w, p.baseline_window, p.min_baseline)
        # The window's steps: the channel's recent ones, unless it keeps fewer than w.
        if self.w > self.channel.steps.maxlen or self.own_steps is not None:
            self.own_steps = collections.deque(self.own_steps or (), maxlen=self.w)

    def _at_cadence(self, i, step):
        """Notes the first step; at the CADENCE_POINTS-th point, takes the window the grad norm's
        cadence allows (`window_for`), before any window can be decided."""
        if i == 0:
            self.first_step = step
        elif i == CADENCE_POINTS - 1:
            w = window_for(self.p, self.first_step, step)
            if w != self.w:
                self._window(dataclasses.replace(self.p, window=w))

    def check(self, i, step, v):
        if i < CADENCE_POINTS:
            self._at_cadence(i, step)
        if self.own_steps is not None:
            self.own_steps.append(step)
        x = self.channel.log_value
        if not x - x == 0.0:
            self.last_bad = i
            return None
        w = self.w
        # fit_window's first test needs the run's normal level: the median of the history
        # before the window, unknown while under min_baseline points precede it, and at least
        # the history's lower bound (its window holds those points). Cheapest first: on most
        # points the current log is not min_excess above that bound.
        if i - self.last_bad < w or not v < self.threshold or i - w + 1 < self.min_baseline:
            return None
        hist = self.history
        if x - hist.low < self.min_excess:
            return None
        # A necessary condition on the quarters' sums, with a slack far above their rounding (in
        # whatever order they are summed). Read from the right end: an islice of a deque walks it
        # from its start.
        logs = hist.values
        q = self.q
        if w >= 2 * q:
            back = reversed(logs)
            last = sum(islice(back, q - 1)) + x
            first = sum(islice(back, w - 2 * q, w - q))  # the iterator has passed q - 1 of them
        else:  # quarters that overlap (w < 4)
            n = len(logs)
            first = sum(islice(logs, n - w + 1, n - w + 1 + q))
            last = sum(islice(logs, n - q + 1, n)) + x
        if last - first < self.q_rise - self._SLACK:
            return None
        return self._decide(i, x)

    def _decide(self, i, x):
        p, w, q = self.p, self.w, self.q
        base = self.baseline.at(i)
        # fit_window's first tests, before the arrays are built: they reject most windows.
        if not base - base == 0.0 or x - base < self.min_excess:
            return None
        loss_ratio = self.loss.ratio
        if loss_ratio < p.loss_falling and not x - base >= self.learning_excess:
            return None
        hist = self.history.values
        n = len(hist)
        ys = list(islice(hist, n - w + 1, n))
        ys.append(x)  # all finite
        steps = self.channel.steps if self.own_steps is None else self.own_steps  # ending at this point
        xs = list(islice(steps, len(steps) - w, None))
        if not self._may_fit(xs, ys):
            return None
        # The batch rule's exact arithmetic.
        logs = np.array(ys, dtype=np.float64)
        if logs[w - q :].sum() / q - logs[:q].sum() / q < self.rise:
            return None
        noise = self.loss.noise() if loss_ratio >= p.loss_up and p.loss_up_z > 0 else math.nan
        fit = fit_window(np.array(xs, dtype=np.int64), logs, base, p, loss_ratio, ramping(self.lr), noise,
                         self.channel.initial.value, self.short)
        return None if fit is None else StreamHit(fit=fit)

    def _may_fit(self, xs, ys) -> bool:
        """fit_window's tests of the window's lines (the whole window's: rising, steady,
        `min_growth` over the window; the slow window's, its last `short` points' under it), in
        Python floats: False only where they fail by far more than the rounding that differs from
        numpy's, so numpy's arithmetic, which costs more on a window of tens of points, decides
        the rest. Noisy grad norms reach here often and fail them."""
        slack = self._SLACK
        short = self.short
        if short:
            line = _line(xs[-short:], ys[-short:])
            if line is not None and line[0] > self.min_growth + slack:
                return False
        line = _line(xs, ys)
        if line is None:
            return True
        growth, b, r2 = line
        if growth < self.min_growth - slack or (b > 0 and r2 < self.p.min_r2 - slack):
            return False
        if short:
            # The slow window's end must rise at SLOW_END x the fit's slope, which is at least the
            # whole window's b (the hinge's only steeper) and at most tail / SLOW_END: the
            # projection within `horizon` then needs that much of the tail too.
            end = _line(xs[-_tail(short):], ys[-_tail(short):])
            if end is not None:
                need = SLOW_END * b
                if self.p.horizon > 0:
                    need = max(need, SLOW_END * (self.log_threshold - sorted(ys[-3:])[1]) / self.p.horizon)
                return end[1] >= need - slack
        return True


def _line(xs, ys) -> tuple[float, float, float] | None:
    """The least-squares line of ys on xs in Python floats: its rise over the span of xs, its
    slope and its r2; None where xs or ys do not vary."""
    w = len(ys)
    x0 = float(xs[0])
    dx = [float(x) - x0 for x in xs]  # as linear_fit takes the steps
    xm, ym = sum(dx) / w, sum(ys) / w
    dx = [x - xm for x in dx]
    dy = [y - ym for y in ys]
    sxx = sum([a * a for a in dx])
    syy = sum([b * b for b in dy])
    if not (sxx > 0 and syy > 0):
        return None
    b = sum([a * c for a, c in zip(dx, dy)]) / sxx
    # r2 = 1 - sum((dy - b dx)^2) / syy = b^2 sxx / syy for the least-squares b.
    return b * float(xs[-1] - xs[0]), b, b * b * sxx / syy


class _Baseline:
    """The run's normal level for the window ending at point i, as the batch rule takes it: the
    median of the forward-filled logs of the `size` points before the window (of the finite ones
    while fewer than `size` precede it; NaN under `least` of them, or with a NaN among `size`).

    The points are a SortedSpan moved along the log window (which ends at point i - 1) only when
    asked: the decisions come in runs of consecutive points, each moving the span by one point.
    """

    def __init__(self, history, w, size, least):
        self.history, self.w, self.least = history, w, least
        self.span = SortedSpan(size)

    def at(self, i):
        span, least = self.span, self.least
        lo = i - self.w + 1
        if lo < least:
            return math.nan
        hist = self.history.values
        span.move_to(hist, len(hist) - i, lo)
        if (len(span.sorted) < least) if lo < span.size else span.nans:
            return math.nan
        return span.median()


@rule(
    code="CS201", symbol="grad-norm-growth", family="growth", severity="critical",
    signals=("grad_norm", "train_loss", "lr"), params=GrowthParams, describe=_describe_growth,
    stream=GradGrowthStream,
    advice="an explosion is coming: lower the learning rate now, enable gradient clipping, "
    "and checkpoint before the projected step",
)
def grad_norm_growth(data, p: GrowthParams, since=None):
    """The gradient norm grows exponentially toward the explosion threshold.

    A least-squares line is fitted to log(grad norm) against step over a
    sliding window of `window` points (fewer on a grad norm logged every 10
    steps or more: those spanning `window_steps`, at least `min_window`),
    and, where the cadence gives it more points, over a slower one of
    `slow_window` points, for a growth too slow for the short window (see
    `slow_window`).
    The rule fires when the fit is steady (r2 >= min_r2), grows at least
    `min_growth`x over the window, the current
    value is still under `threshold` but `min_excess`x above the run's normal
    level, and the fit, from the grad norm's current level (the median of
    its last 3 points), projects the crossing within `horizon` steps and
    within `max_extrapolation` times the fit's span -- or the
    grad norm is already `rel_excess`x its normal level while the train loss
    stopped improving: the source article's third layer, flagging an
    explosion before it happens. No prediction while the train loss falls
    fast (its level under `loss_falling` x its best level): a grad norm
    rising with a run's first large steps is learning, until it stands
    `learning_excess` x its normal level; nor while the learning rate still
    ramps up and the loss has not turned up out of its noise (`quiet_in_ramp`,
    `loss_up_z`): a warm-up's grad norm rises with its steps; nor while the
    grad norm stands under `under_start` x its initial level. When the growth
    began inside the window, the fit starts where it did (the breakpoint of a
    flat stretch then a line that fits best, at least 10 points before the
    window's end). The fit is returned so the crossing can be drawn.
    """
    s = data.get("grad_norm")
    if s is None or len(s) < CADENCE_POINTS:
        return
    fits = {}
    windows = windows_for(p, int(s.steps[0]), int(s.steps[CADENCE_POINTS - 1]))
    for w in windows:
        short = windows[0] if w != windows[0] else 0
        for i, fit in _window_fits(data, s, dataclasses.replace(p, window=w), since, short):
            fits.setdefault(i, fit)
    if fits:
        yield Hits("grad_norm", np.asarray(sorted(fits)), fits=fits)


def _window_fits(data, s, p: GrowthParams, since, short: int = 0):
    """(index, fit) of the points whose window of `p.window` points fires (`short`: see fit_window)."""
    w = p.window
    if len(s) < w + 2:
        return
    i0 = max(since_index(s, since), w - 1)  # the first window ends at w - 1
    # A decision at i reads its window and the (forward-filled) normal level
    # before the window: at least `min_baseline` of the `baseline_window` points before it.
    look = w - 1 + max(p.baseline_window, p.min_baseline)
    c0 = 0 if i0 <= look else finite_anchor(s.values, i0 - look, positive=True)
    v = s.values if c0 == 0 else s.values[c0:]  # the series itself: memoised log
    steps = s.steps[c0:]
    logv = positive_log(v)
    candidates = _rising(logv, v, p, i0 - c0)
    if candidates.size == 0:
        return
    base_med, _ = trailing_median_mad_at(logv, p.baseline_window, p.min_baseline, candidates - w + 1,
                                         mad=False)
    train = data.get("train_loss")
    ratios = loss_ratio_at(train, steps[candidates])
    noises = loss_noise_at(train, steps[candidates])
    ramps = ramping_at(data.get("lr"), steps[candidates])
    initial, known_after = initial_level(s.values)
    for i, base, ratio, noise, ramp in zip(candidates.tolist(), base_med.tolist(), ratios.tolist(), noises.tolist(),
                                           ramps.tolist()):
        lo = i - w + 1
        start = initial if i + c0 > known_after else math.nan
        fit = fit_window(steps[lo : i + 1], logv[lo : i + 1], base, p, ratio, ramp, noise, start, short)
        if fit is not None:
            yield i + c0, fit


HINGE_LEAST = 10  # points from the growth's start on, at least, for its own fit
LOSS_SMOOTH, LOSS_BEST_SMOOTH = 7, 31  # the train loss's level and best level (see `loss_up`)
LOSS_NOISE_POINTS = 50  # the train loss's points whose jitter is its noise (see `loss_up_z`)


def loss_ratio_at(train, steps) -> np.ndarray:
    """The train loss's level over its best level, at the last loss point at or before each step."""
    if train is None or len(train) == 0:
        return np.full(np.shape(steps), np.nan)
    level = smoothed_level(train.values, LOSS_SMOOTH)
    best = best_levels(train.values, LOSS_BEST_SMOOTH)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(best > 0, level / best, np.nan)
    return value_at_or_before(train.steps, ratio, steps)


def loss_noise_at(train, steps) -> np.ndarray:
    """The noise of the train loss's level (see `loss_up_z`) at the last loss point at or before
    each step: from the jitter of the LOSS_NOISE_POINTS points before that one (NaN if none)."""
    out = np.full(np.shape(steps), np.nan)
    if train is None or len(train) == 0:
        return out
    at = np.searchsorted(train.steps, steps, side="right") - 1
    known = np.flatnonzero(at >= 0)
    if known.size:
        out[known] = level_noise(jitter_at(train.values, at[known], LOSS_NOISE_POINTS), LOSS_SMOOTH)
    return out


class _LossRatio:
    """The train loss's side of the rule: its level over its best level at its last point, and
    that level's noise (the monitor pushes the shared levels at every loss point, and the recent
    logs keep its points: both are read only when needed)."""

    def __init__(self, channel):
        self.level = shared_level(channel, LOSS_SMOOTH)
        self.best_level = shared_level(channel, LOSS_BEST_SMOOTH, best=True)
        self.recent = recent_logs(channel, LOSS_NOISE_POINTS, np.log)

    @property
    def ratio(self):
        best = self.best_level.low
        return self.level.value / best if best > 0 else math.nan

    def noise(self) -> float:
        return level_noise(self.recent.jitter(), LOSS_SMOOTH)


_LOSS = "grad-norm-growth: loss level"  # Channel.shared key of the loss side


def _rising(logv: np.ndarray, v: np.ndarray, p: GrowthParams, first: int) -> np.ndarray:
    """Ends (>= first) of the windows that pass the cheap vectorised pre-filter.

    The window must hold only finite logs, end under the threshold, and its
    last quarter must sit well above its first quarter. Only these
    candidates get an exact fit. Computed in cache-sized chunks of ends.
    """
    found = [_rising_chunk(logv, v, p, a, b) for a, b in chunks(first, v.shape[0])]
    return np.concatenate(found) if found else np.zeros(0, np.int64)


def _rising_chunk(logv, v, p: GrowthParams, first: int, stop: int) -> np.ndarray:
    w = p.window
    q, rise = quarter_rise(p)
    part = logv[first - w + 1 : stop]  # the windows ending at first .. stop - 1
    finite = np.isfinite(part)
    filled = np.where(finite, part, 0.0)
    # Quarter means summed directly (not as cumsum differences), in numpy's
    # own order of additions, so the online monitor, summing the same q
    # values with numpy, gets bit-identical results.
    quarter = window_sums(filled, q) / q
    m = stop - first
    rising = quarter[w - q : w - q + m] - quarter[:m] >= rise
    with np.errstate(invalid="ignore"):
        rising &= v[first:stop] < p.threshold
    if not finite.all():
        ncum = np.concatenate([[0], np.cumsum(~finite)])
        rising &= (ncum[w:] - ncum[:m]) == 0
    return np.flatnonzero(rising) + first


def fit_window(steps: np.ndarray, logv: np.ndarray, base: float, p: GrowthParams,
               loss_ratio: float = math.nan, ramping: bool = False, loss_noise: float = math.nan,
               initial: float = math.nan, short: int = 0) -> Fit | None:
    """The growth decision for one window that passed the quarter pre-filter.

    Shared by the batch rule and the online monitor, so both decide alike.

    Args:
        steps: the window's steps (int64).
        logv: log(grad norm) over the window, all finite.
        base: median log(grad norm) of the points before the window (the
            run's normal level), NaN when unknown.
        loss_ratio: the train loss's level over its best level at the window's
            end (NaN when unknown).
        ramping: the learning rate still ramps up at the window's end (see
            `quiet_in_ramp`).
        loss_noise: the noise of the train loss's level there, in log units (see
            `loss_up_z`; NaN when unknown: the ratio alone).
        initial: the grad norm's initial level (see `under_start`; NaN while unknown).
        short: for the slow window, the short window's points: it decides only where their own line
            grows under `min_growth` (a growth too slow for them), not where the short window saw the
            growth and held back, and on its projection alone.
    """
    # The current value must stand well above the run's normal level.
    if not np.isfinite(base) or logv[-1] - base < math.log(p.min_excess):
        return None
    # The projection starts from where the grad norm is now (the median of its last 3 logs), not
    # from the fitted line's end: a line through a curve that bends, or through a jump, ends far
    # from the last points, and its crossing with it. The line drawn is moved to pass there too.
    # Under `under_start` x its initial level nothing is projected: asked before any fit.
    now = float(np.median(logv[-3:]))
    if p.under_start > 0 and initial > 0 and now < math.log(p.under_start * initial):
        return None
    # (NaN, no train loss: no such evidence.)
    if loss_ratio < p.loss_falling and not (p.learning_excess > 0 and logv[-1] - base >= math.log(p.learning_excess)):
        return None
    # The train loss has turned up: `loss_up` x its best level, out of its level's noise.
    turned_up = loss_ratio >= p.loss_up and not math.log(loss_ratio) < p.loss_up_z * loss_noise
    if ramping and p.quiet_in_ramp and not turned_up:
        return None
    _, b, r2 = linear_fit(steps, logv)
    span = float(steps[-1] - steps[0])
    if b <= 0 or r2 < p.min_r2 or b * span < math.log(p.min_growth):
        return None
    if short and (linear_fit(steps[-short:], logv[-short:])[1] * float(steps[-1] - steps[-short])
                  >= math.log(p.min_growth)):
        return None
    # The slow window is read for its projection alone: the short one tells the relative excess.
    relative = not short and logv[-1] - base >= math.log(p.rel_excess) and turned_up
    if p.one_step and not relative and _one_step(steps, logv, base, span, b, p):
        return None
    # A growth that began inside the window: a line through the whole window straddles the flat
    # stretch before it and projects the crossing late; the line from the breakpoint that fits best
    # (a flat stretch, then a line) is the growth's own, when it is steeper and steady.
    k, _, b2, r22 = hinge_fit(steps, logv, HINGE_LEAST)
    window_steps, tail = steps, _tail(short)
    if k > 0 and r22 >= p.min_r2 and b2 > b:
        b, r2 = b2, r22
        steps = steps[k:]
        span = float(steps[-1] - steps[0])
    # The slow window's growth must go on to its end: a warm-up's grad norm that rose and settled
    # fits a line over 100 points as well, its last stretch flat.
    if short and linear_fit(window_steps[-tail:], logv[-tail:])[1] < SLOW_END * b:
        return None
    ahead = (math.log(p.threshold) - now) / b
    if (ahead > p.horizon or ahead > p.max_extrapolation * span) and not relative:
        return None
    return Fit(
        code="CS201", signal="grad_norm", start_step=int(steps[0]),
        end_step=int(steps[-1]), start_value=float(math.exp(now - b * span)), growth_per_step=b,
        doubling_steps=math.log(2) / b, r2=r2,
        projected_step=int(steps[-1] + max(0.0, math.ceil(ahead))), threshold=p.threshold,
    )


def _one_step(steps, logv, base, span, b, p: GrowthParams) -> bool:
    """Whether one level shift is all the window's growth: with it taken out, the window neither
    grows `min_growth`x nor ends `min_excess`x above the run's normal level, and the points after it
    (STEP_AFTER at least) do not keep rising (their own line, less STEP_ERRORS of its standard
    errors, under STEP_SLOPE x the fit's slope b): the first steps of an exponential growth, a bend
    rather than a step, go on rising."""
    flat, k = without_step(logv)
    if (linear_fit(steps, flat)[1] * span >= math.log(p.min_growth)
            or float(np.median(flat[-3:])) - base >= math.log(p.min_excess)
            or logv.shape[0] - k < STEP_AFTER):
        return False
    _, after, r2 = linear_fit(steps[k:], logv[k:])
    n = logv.shape[0] - k
    # The slope's standard error, from its r2: a dozen noisy points after a shift tilt by chance.
    error = abs(after) * math.sqrt(max(1.0 - r2, 0.0) / (r2 * (n - 2))) if n > 2 and r2 > 0.0 else math.inf
    return after - STEP_ERRORS * error < STEP_SLOPE * b


SLOW_END = 0.5  # the slow window's last short/2 points rise at least this share of its fit's slope


def _tail(short: int) -> int:
    """The slow window's last points that must go on rising (see SLOW_END)."""
    return max(short // 2, 3)


STEP_AFTER = 3  # points after a level shift that tell whether it goes on rising
STEP_SLOPE = 0.25  # ... it does when their line is at least this share of the fit's slope,
STEP_ERRORS = 2.0  # ... this many of its standard errors under their slope


def without_step(y: np.ndarray) -> tuple[np.ndarray, int]:
    """y with its best single level shift taken out, and where the later level starts: the split into
    two runs of points whose means fit y with the least squared error, the later run moved down by the
    difference of those means."""
    n = y.shape[0]
    c = np.cumsum(y)
    c2 = np.cumsum(y * y)
    k = np.arange(1, n)  # the later run starts at k
    left, right = c[:-1], c[-1] - c[:-1]
    sse = (c2[:-1] - left * left / k) + ((c2[-1] - c2[:-1]) - right * right / (n - k))
    j = int(np.argmin(sse))
    shift = right[j] / (n - j - 1) - left[j] / (j + 1)
    out = y.copy()
    out[j + 1 :] -= shift
    return out, j + 1


CADENCE_POINTS = 6  # the grad-norm points whose steps tell its cadence


def window_for(p: GrowthParams, first_step: int, step: int) -> int:
    """The fit window's points for a grad norm whose first CADENCE_POINTS points span first_step ..
    step: `window`, or as many as span `window_steps` at that cadence, not under `min_window`."""
    gap = (step - first_step) / (CADENCE_POINTS - 1)
    if not gap > 0:
        return p.window
    return min(p.window, max(p.min_window, math.ceil(p.window_steps / gap)))


def windows_for(p: GrowthParams, first_step: int, step: int) -> list[int]:
    """The fit windows read at that cadence (see `window_for`): the short one, then the slow one
    where it holds more points."""
    w = window_for(p, first_step, step)
    if p.slow_window > 0:
        slow = window_for(dataclasses.replace(p, window=p.slow_window), first_step, step)
        if slow > w:
            return [w, slow]
    return [w]


def quarter_rise(p: GrowthParams) -> tuple[int, float]:
    """The pre-filter: quarter length q and the rise its means must show."""
    return max(2, p.window // 4), 0.5 * math.log(p.min_growth)
