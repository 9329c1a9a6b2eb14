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


class _TrailingMin:
    """Min of the last `size` forward-filled values (monotonic deque, O(1))."""

    __slots__ = ("size", "queue", "i")

    def __init__(self, size):
        self.size = size
        self.queue = collections.deque()  # (index, value), values increasing
        self.i = 0

    def value(self):
        return self.queue[0][1] if self.queue else math.nan

    def push(self, x):
        x = x if _isfinite(x) else math.inf
        q = self.queue
        while q and q[-1][1] >= x:
            q.pop()
        q.append((self.i, x))
        self.i += 1
        while q[0][0] <= self.i - 1 - self.size:
            q.popleft()


def _trailing_min_value(tm: _TrailingMin):
    v = tm.value()
    return math.nan if v == math.inf else v


def _median_mad(window: _Filled, i: int, size: int, min_points: int, mad=True):
    """Median/MAD of the points before i, as stats.trailing_median_mad computes them."""
    if i < min_points:
        return math.nan, math.nan
    w = np.fromiter(window.values, dtype=np.float64, count=len(window.values))
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


class _Spike(Stream):
    """loss-spike (linear) and grad-norm-spike (log), as rules.spikes._spike_index."""

    log = False

    def __init__(self, p, signal):
        self.p = p
        self.window = _Filled(p.window)
        self.tmin = _TrailingMin(p.window)
        self.log_ratio = math.log(p.min_ratio)

    def check(self, i, step, v):
        p = self.p
        x = _log(v) if self.log else v
        hit = None
        if i >= p.min_points and _isfinite(x):
            lo = _trailing_min_value(self.tmin)
            if self.log:
                candidate = x - lo > self.log_ratio
            else:
                candidate = not (lo > 0) or x >= p.min_ratio * lo
            if candidate:
                med, mad = _median_mad(self.window, i, p.window, p.min_points)
                if self.log:
                    spike = (x - med) > max(p.z * _MAD_TO_SIGMA * mad, self.log_ratio)
                else:
                    scale = max(_MAD_TO_SIGMA * mad, 1e-3 * abs(med))
                    spike = (x - med) > p.z * scale and (x >= p.min_ratio * med if med > 0 else True)
                if spike:
                    base = math.exp(med) if self.log else med
                    ratio = v / base if base > 0 else math.nan
                    hit = StreamHit(note=f"{fmt(ratio)}x its recent median {fmt(base)}")
        self.window.push(x)
        self.tmin.push(x if _isfinite(x) else self.window.last)
        return hit


class LossSpike(_Spike):
    hits = ("train_loss",)


class GradSpike(_Spike):
    hits = ("grad_norm",)
    log = True


class LossDivergence(Stream):
    hits = ("train_loss",)

    def __init__(self, p, signal):
        self.p = p
        self.window = _Filled(p.window)
        self.tmin = _TrailingMin(p.window)
        self.run = 0

    def check(self, i, step, v):
        p = self.p
        elevated = False
        if _isfinite(v) and i >= p.min_points:
            lo = _trailing_min_value(self.tmin)
            if not (lo > 0 and v < p.factor * lo):
                med, _ = _median_mad(self.window, i, p.window, p.min_points, mad=False)
                elevated = v >= p.factor * med and med > 0
        self.run = self.run + 1 if elevated else 0
        self.window.push(v)
        self.tmin.push(v if _isfinite(v) else self.window.last)
        return HIT if self.run > p.consecutive else None


class GradGrowth(Stream):
    hits = ("grad_norm",)

    def __init__(self, p, signal):
        self.p = p
        w = p.window
        self.q, self.rise = quarter_rise(p)
        self.logs = collections.deque(maxlen=w)  # raw log values
        self.steps = collections.deque(maxlen=w)
        self.history = _Filled(p.baseline_window + w)  # forward-filled logs
        self.bad = 0  # non-finite logs in the window

    def _may_rise(self):
        """A quick pure-Python version of the quarter test, with a safety margin.

        It only rules windows out when they miss the rise by far more than
        any rounding difference, so the exact test decides every close call.
        """
        logs, q = self.logs, self.q
        w = len(logs)
        first = sum(logs[k] for k in range(q))
        last = sum(logs[k] for k in range(w - q, w))
        return (last - first) / q >= self.rise - 1e-9 * (1.0 + abs(first) + abs(last))

    def check(self, i, step, v):
        p, w = self.p, self.p.window
        x = _log(v)
        if len(self.logs) == w and not _isfinite(self.logs[0]):
            self.bad -= 1
        self.logs.append(x)
        self.steps.append(step)
        if not _isfinite(x):
            self.bad += 1
        hit = None
        if i >= w - 1 and self.bad == 0 and v < p.threshold and self._may_rise():
            logs = np.fromiter(self.logs, dtype=np.float64, count=w)
            q = self.q
            # The batch rule's exact arithmetic, once the quick test passed.
            first_q = logs[:q].sum() / q
            last_q = logs[w - q :].sum() / q
            if last_q - first_q >= self.rise:
                lo = i - w + 1
                # The baseline: forward-filled logs before the window.
                before = list(self.history.values)[: len(self.history.values) - (w - 1)]
                base = math.nan
                if lo >= w:
                    arr = np.asarray(before[-p.baseline_window :], dtype=np.float64)
                    if lo < p.baseline_window:
                        arr = arr[np.isfinite(arr)]
                        base = float(np.median(arr)) if arr.size >= w else math.nan
                    else:
                        base = float(np.median(arr))
                steps = np.fromiter(self.steps, dtype=np.int64, count=w)
                fit = fit_window(steps, logs, base, p)
                if fit is not None:
                    hit = StreamHit(fit=fit)
        self.history.push(x)
        return hit


class Plateau(Stream):
    """loss-plateau, as rules.progress.loss_plateau."""

    hits = ("train_loss",)
    feeds = ("lr",)

    def __init__(self, p, signal):
        self.p = p
        self.smooth = _Filled(max(1, p.smooth))
        self.best = math.nan
        self.bests = collections.deque(maxlen=max(p.max_patience, p.min_patience) + 1)
        self.lr = collections.deque(maxlen=4)  # the last lr point and the one 3 before

    def feed(self, signal, i, step, v):
        self.lr.append(v)

    def check(self, i, step, v):
        p = self.p
        self.smooth.push(v)
        window = self.smooth.values
        sm = _finite_median(window) if i < window.maxlen - 1 else _small_median(window)
        if _isfinite(sm) and not (sm >= self.best):  # fmin: a NaN best takes sm
            self.best = sm
        self.bests.append(self.best)
        patience = min(
            max(p.min_patience, math.floor(p.patience_fraction * (i + 1))),
            max(p.max_patience, p.min_patience),
        )
        if i - patience < 0 or not _isfinite(v):
            return None
        ref = self.bests[-(patience + 1)]
        warmup = bool(self.lr) and self.lr[-1] > self.lr[0]
        if self.best > ref - p.rel_improvement * abs(ref) and not warmup:
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
        self.train_now = math.nan

    def feed(self, signal, i, step, v):
        self.n_train += 1
        self.train.push(v)
        if self.smooth == 1:
            self.train_now = v
            return
        window = self.train.values
        if self.n_train < self.smooth:
            self.train_now = _finite_median(window)
        else:
            self.train_now = _small_median(window)


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
