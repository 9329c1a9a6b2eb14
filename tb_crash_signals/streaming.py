"""The rules in streaming form: one point at a time, bounded state.

Each class mirrors one batch rule of `tb_crash_signals/rules/` and must fire
on exactly the same points (tests/test_monitor.py checks it on random series).
State is sized by the rule's windows, never by the run's length.

Protocol: `check(i, step, value)` is called for every point of the rule's hit
signal, in order, and returns None or a `StreamHit`; it decides with the
state *before* the point and then absorbs it. Cross-signal rules also get
`feed(signal, i, step, value)` for their other signals, before any `check`
of the same step, since batch rules look up other signals "at or before".
"""

from __future__ import annotations

import collections
import math
from itertools import islice

import numpy as np

from tb_crash_signals.rules.base import Fit, fmt
from tb_crash_signals.rules.growth import fit_window, quarter_rise
from tb_crash_signals.signals import SIGNALS

_MAD_TO_SIGMA = 1.4826
_isfinite = math.isfinite


class Stream:
    """Base of the streaming rules: `hits` are checked, `feeds` only observed."""

    hits: tuple = ()
    feeds: tuple = ()

    def feed(self, signal, i, step, v):  # pragma: no cover - overridden where used
        pass


class StreamHit:
    __slots__ = ("note", "fit")

    def __init__(self, note=None, fit: Fit | None = None):
        self.note = note
        self.fit = fit


HIT = StreamHit()


class _Filled:
    """A window of forward-filled values (NaN before the first finite one)."""

    __slots__ = ("values", "last")

    def __init__(self, size):
        self.values = collections.deque(maxlen=size)
        self.last = math.nan

    def push(self, x):
        if _isfinite(x):
            self.last = x
        self.values.append(self.last)


def _median_mad(window: _Filled, i: int, size: int, min_points: int, mad=True):
    """Median/MAD of the points before i, as stats.trailing_median_mad computes them."""
    if i < min_points:
        return math.nan, math.nan
    w = np.fromiter(window.values, dtype=np.float64, count=len(window.values))  # before i
    if i < size:
        w = w[np.isfinite(w)]
        if w.size < min_points:
            return math.nan, math.nan
    m = np.median(w)
    return float(m), (float(np.median(np.abs(w - m))) if mad else math.nan)


def _small_median(values):
    """np.median of a few values (NaN if any is NaN), in pure Python."""
    xs = sorted(values)
    n = len(xs)
    if n == 0 or xs[0] != xs[0] or xs[-1] != xs[-1] or any(x != x for x in xs):
        return math.nan
    mid = n // 2
    return xs[mid] if n % 2 else (xs[mid - 1] + xs[mid]) / 2.0


def _finite_median(values):
    return _small_median([x for x in values if _isfinite(x)])


def _log(v):
    return math.log(v) if v > 0 else math.nan


class NonFinite(Stream):
    hits = SIGNALS

    def __init__(self, p, signal):
        pass

    def check(self, i, step, v):
        return None if _isfinite(v) else HIT


class LossBound(Stream):
    hits = ("train_loss", "val_loss")

    def __init__(self, p, signal):
        self.max = p.max_loss

    def check(self, i, step, v):
        return HIT if _isfinite(v) and abs(v) > self.max else None


class GradThreshold(Stream):
    hits = ("grad_norm",)

    def __init__(self, p, signal):
        self.threshold = p.threshold

    def check(self, i, step, v):
        return HIT if v > self.threshold else None


class LossJump(Stream):
    hits = ("train_loss",)

    def __init__(self, p, signal):
        self.p = p
        self.prev = math.nan

    def check(self, i, step, v):
        prev, self.prev = self.prev, v
        if i >= max(1, self.p.min_history) and v > self.p.factor * prev:
            return HIT
        return None


class _Windowed(Stream):
    """A forward-filled window and its trailing minimum, inlined for speed.

    `values` holds the last `size` forward-filled values (NaN before the first
    finite one), `mins` a monotonic deque of (index, value) giving their
    minimum, as stats.trailing_median_mad and stats.trailing_min see them.
    """

    def _init_window(self, size):
        self.size = size
        self.values = collections.deque(maxlen=size)
        self.last = math.nan
        self.mins = collections.deque()
        self.count = 0

    def _absorb(self, x):
        if x - x == 0.0:  # finite
            self.last = x
        last = self.last
        self.values.append(last)
        y = last if last == last else math.inf
        mins = self.mins
        while mins and mins[-1][1] >= y:
            mins.pop()
        mins.append((self.count, y))
        self.count += 1
        if mins[0][0] <= self.count - 1 - self.size:
            mins.popleft()

    def _trailing_min(self):
        mins = self.mins
        if not mins or mins[0][1] == math.inf:
            return math.nan
        return mins[0][1]


class _Spike(_Windowed):
    """loss-spike (linear) and grad-norm-spike (log), as rules.spikes._spike_index."""

    log = False

    def __init__(self, p, signal):
        self.p = p
        self.min_points = p.min_points
        self.min_ratio = p.min_ratio
        self._init_window(p.window)
        self.log_ratio = math.log(p.min_ratio)

    def check(self, i, step, v):
        if self.log:
            x = math.log(v) if v > 0 else math.nan
        else:
            x = v
        hit = None
        if i >= self.min_points and x - x == 0.0:
            lo = self._trailing_min()
            if self.log:
                candidate = x - lo > self.log_ratio
            else:
                candidate = not (lo > 0) or x >= self.min_ratio * lo
            if candidate:
                hit = self._decide(i, v, x)
        self._absorb(x)
        return hit

    def _decide(self, i, v, x):
        p = self.p
        med, mad = _median_mad(self, i, p.window, p.min_points)
        if self.log:
            spike = (x - med) > max(p.z * _MAD_TO_SIGMA * mad, self.log_ratio)
        else:
            scale = max(_MAD_TO_SIGMA * mad, 1e-3 * abs(med))
            spike = (x - med) > p.z * scale and (x >= p.min_ratio * med if med > 0 else True)
        if not spike:
            return None
        base = math.exp(med) if self.log else med
        ratio = v / base if base > 0 else math.nan
        return StreamHit(note=f"{fmt(ratio)}x its recent median {fmt(base)}")


class LossSpike(_Spike):
    hits = ("train_loss",)


class GradSpike(_Spike):
    hits = ("grad_norm",)
    log = True


class LossDivergence(_Windowed):
    hits = ("train_loss",)

    def __init__(self, p, signal):
        self.p = p
        self.factor = p.factor
        self.min_points = p.min_points
        self.consecutive = p.consecutive
        self._init_window(p.window)
        self.run = 0

    def check(self, i, step, v):
        elevated = False
        if i >= self.min_points and v - v == 0.0:
            lo = self._trailing_min()
            if not (lo > 0 and v < self.factor * lo):
                med, _ = _median_mad(self, i, self.p.window, self.min_points, mad=False)
                elevated = v >= self.factor * med and med > 0
        self.run = self.run + 1 if elevated else 0
        self._absorb(v)
        return HIT if self.run > self.consecutive else None


class GradGrowth(Stream):
    hits = ("grad_norm",)

    def __init__(self, p, signal):
        self.p = p
        w = self.w = p.window
        self.threshold = p.threshold
        self.q, self.rise = quarter_rise(p)
        self.logs = collections.deque(maxlen=w)  # raw log values
        self.steps = collections.deque(maxlen=w)
        self.history = collections.deque(maxlen=p.baseline_window + w)  # forward-filled logs
        self.last = math.nan
        self.bad = 0  # non-finite logs in the window
        self.margin = self.rise - 1e-9

    def check(self, i, step, v):
        w, logs = self.w, self.logs
        x = math.log(v) if v > 0 else math.nan
        if len(logs) == w and not logs[0] - logs[0] == 0.0:
            self.bad -= 1
        logs.append(x)
        self.steps.append(step)
        finite = x - x == 0.0
        if not finite:
            self.bad += 1
        hit = None
        if i >= w - 1 and self.bad == 0 and v < self.threshold:
            # A quick pure-Python quarter test with a safety margin: it only
            # rules out windows that miss the rise by far more than rounding,
            # so the exact (numpy) test below decides every close call.
            q = self.q
            first = sum(islice(logs, q))
            last = sum(islice(reversed(logs), q))
            if (last - first) / q >= self.margin - 1e-9 * (abs(first) + abs(last)):
                hit = self._decide(i)
        if finite:
            self.last = x
        self.history.append(self.last)
        return hit

    def _decide(self, i):
        p, w, q = self.p, self.w, self.q
        logs = np.fromiter(self.logs, dtype=np.float64, count=w)
        # The batch rule's exact arithmetic.
        if logs[w - q :].sum() / q - logs[:q].sum() / q < self.rise:
            return None
        lo = i - w + 1
        base = math.nan
        if lo >= w:
            # The run's normal level: forward-filled logs before the window.
            hist = list(self.history)
            before = np.asarray(hist[: len(hist) - (w - 1)][-p.baseline_window :], dtype=np.float64)
            if lo < p.baseline_window:
                before = before[np.isfinite(before)]
                base = float(np.median(before)) if before.size >= w else math.nan
            else:
                base = float(np.median(before))
        steps = np.fromiter(self.steps, dtype=np.int64, count=w)
        fit = fit_window(steps, logs, base, p)
        return None if fit is None else StreamHit(fit=fit)


class Plateau(Stream):
    """loss-plateau, as rules.progress.loss_plateau."""

    hits = ("train_loss",)
    feeds = ("lr",)

    def __init__(self, p, signal):
        self.p = p
        self.k = max(1, p.smooth)
        self.window = collections.deque(maxlen=self.k)  # forward-filled losses
        self.last = math.nan
        self.best = math.nan
        self.cap = max(p.max_patience, p.min_patience)
        self.bests = [math.nan] * (self.cap + 1)  # ring: best as of each recent point
        self.lr = collections.deque(maxlen=4)  # the last lr point and the one 3 before

    def feed(self, signal, i, step, v):
        self.lr.append(v)

    def _smoothed(self, i):
        window = self.window
        k = self.k
        if i < k - 1:
            return _finite_median(window)
        # Forward-filled: NaN can only lead the window (before the first finite loss).
        if window[0] != window[0]:
            return math.nan
        xs = sorted(window)
        mid = k // 2
        return xs[mid] if k % 2 else (xs[mid - 1] + xs[mid]) / 2.0

    def check(self, i, step, v):
        p = self.p
        if v - v == 0.0:
            self.last = v
        self.window.append(self.last)
        sm = self._smoothed(i)
        if sm - sm == 0.0 and not (sm >= self.best):  # fmin: a NaN best takes sm
            self.best = sm
        ring = self.bests
        size = len(ring)
        ring[i % size] = self.best
        grown = int(p.patience_fraction * (i + 1))  # floor, for i >= 0
        patience = min(grown if grown > p.min_patience else p.min_patience, self.cap)
        if i < patience or not v - v == 0.0:
            return None
        ref = ring[(i - patience) % size]
        lr = self.lr
        if self.best > ref - p.rel_improvement * abs(ref) and not (lr and lr[-1] > lr[0]):
            return StreamHit(note=str(patience))
        return None


class ValStagnation(Stream):
    hits = ("val_loss",)

    def __init__(self, p, signal):
        self.p = p
        self.values = collections.deque(maxlen=p.evaluations)

    def check(self, i, step, v):
        p = self.p
        hit = None
        if i >= p.evaluations and all(abs(x - v) < p.tolerance for x in self.values):
            hit = HIT
        self.values.append(v)
        return hit


class _TrainAtVal(Stream):
    """The train loss at or before each validation point, optionally smoothed."""

    hits = ("val_loss",)
    feeds = ("train_loss",)

    def __init__(self, smooth):
        self.train = _Filled(max(1, smooth))
        self.n_train = 0
        self.smooth = max(1, smooth)
        self._train_now = math.nan
        self._stale = False

    def feed(self, signal, i, step, v):
        self.n_train += 1
        self.train.push(v)
        self.raw_last = v
        self._stale = True

    @property
    def train_now(self):
        """The (smoothed) train loss at the last train point, computed when asked."""
        if self._stale:
            window = self.train.values
            if self.smooth == 1:
                self._train_now = self.raw_last  # unsmoothed: the raw value, NaN/Inf included
            elif self.n_train < self.smooth:
                self._train_now = _finite_median(window)
            else:
                self._train_now = _small_median(window)
            self._stale = False
        return self._train_now


class Overfit(_TrainAtVal):
    def __init__(self, p, signal):
        super().__init__(1)
        self.p = p

    def check(self, i, step, v):
        t = self.train_now
        if t < self.p.max_train_loss and v > self.p.ratio * t:
            return StreamHit(note=fmt(t))
        return None


class ValDivergence(_TrainAtVal):
    def __init__(self, p, signal):
        super().__init__(p.smooth)
        self.p = p
        self.best = math.inf
        self.best_i = 0
        self.best_step = None
        self.train_at_best = math.nan
        self.above = 0

    def check(self, i, step, v):
        p = self.p
        masked = v if _isfinite(v) else math.inf
        if i == 0 or masked < self.best:
            self.best = min(masked, self.best) if i else masked
            self.best_i, self.best_step = i, step
            self.train_at_best = self.train_now
        above = _isfinite(v) and v >= self.best * (1 + p.min_rise) and self.best > 0
        self.above = self.above + 1 if above else 0
        if (
            i >= p.min_evaluations
            and self.above >= p.evaluations
            and i - self.best_i >= p.evaluations
            and self.train_now < self.train_at_best
        ):
            return StreamHit(note=f"{fmt(self.best)} at step {self.best_step}")
        return None


class _RatioBand(Stream):
    hits = ("update_ratio",)
    above = True

    def __init__(self, p, signal):
        self.p = p
        self.run = 0

    def check(self, i, step, v):
        p = self.p
        out = (v > p.high) if self.above else (v < p.low and v >= 0)
        out = out and i >= p.warmup
        self.run = self.run + 1 if out else 0
        return HIT if self.run >= p.consecutive else None


class RatioHigh(_RatioBand):
    above = True


class RatioLow(_RatioBand):
    above = False


class LrNonPositive(Stream):
    hits = ("lr",)

    def __init__(self, p, signal):
        self.p = p
        self.zeros = 0

    def check(self, i, step, v):
        self.zeros = self.zeros + 1 if v == 0 else 0
        return HIT if v < 0 or self.zeros >= self.p.consecutive else None


class LrJump(Stream):
    hits = ("lr",)

    def __init__(self, p, signal):
        self.p = p
        self.prev = math.nan

    def check(self, i, step, v):
        prev, self.prev = self.prev, v
        p = self.p
        if i >= p.warmup + 1 and v > p.factor * prev and prev > 0:
            return HIT
        return None


class LrRising(Stream):
    hits = ("lr",)

    def __init__(self, p, signal):
        self.p = p
        self.peak = math.nan
        self.first = None
        self.peak_at_first = math.nan

    def check(self, i, step, v):
        p = self.p
        x = v if _isfinite(v) else math.nan
        if _isfinite(x) and not (x <= self.peak):  # fmax ignores NaN
            self.peak = x
        if self.first is None:
            if x < 0.5 * self.peak:
                self.first, self.peak_at_first = i, self.peak
            return None
        if i >= max(self.first + 1, p.warmup) and x > p.peak_factor * self.peak_at_first:
            return HIT
        return None


STREAMS = {
    "CS001": NonFinite,
    "CS002": LossBound,
    "CS101": GradThreshold,
    "CS102": GradSpike,
    "CS111": LossJump,
    "CS112": LossSpike,
    "CS113": LossDivergence,
    "CS201": GradGrowth,
    "CS301": Plateau,
    "CS302": ValStagnation,
    "CS401": Overfit,
    "CS402": ValDivergence,
    "CS501": RatioHigh,
    "CS502": RatioLow,
    "CS511": LrNonPositive,
    "CS512": LrJump,
    "CS513": LrRising,
}
