"""The rules in streaming form: one point at a time, bounded state.

Each class mirrors one batch rule of `tb_crash_signals/rules/` and must fire
on exactly the same points (tests/test_monitor.py checks it on random series).
State is sized by the rule's windows, never by the run's length.

Protocol: `check(i, step, value)` is called for every point of the rule's hit
signal, in order, and returns None or a `StreamHit`; it decides with the
state *before* the point. What rules share lives in one `Channel` per signal:
its recent raw points (this point included when the checks run) and its
forward-filled windows (pushed after the checks). A rule that compares
signals reads the other signal's channel, which the monitor updates first
(`ORDER`), since batch rules look up other signals "at or before" the step.

The checks run on every training step, so the common path of each is a few
comparisons against cheap necessary conditions (a lower bound of a window's
minimum, running quarter sums); the exact computation, the batch rule's own
arithmetic, runs only when those pass.
"""

from __future__ import annotations

import array
import collections
import dataclasses
import math
from itertools import islice

import numpy as np

from tb_crash_signals.analysis.rules.base import Fit, fmt
from tb_crash_signals.analysis.rules.growth import fit_window, quarter_rise
from tb_crash_signals.ingest.series import Series
from tb_crash_signals.analysis.signals import SIGNALS

_MAD_TO_SIGMA = 1.4826
_isfinite = math.isfinite
_log = math.log
_nan, _inf = math.nan, math.inf
# Channels are updated in this order, so a rule reading another signal sees
# that signal's point of the same step: the plateau rule reads the learning
# rate, the validation rules read the train loss.
ORDER = ("lr", "grad_norm", "update_ratio", "train_loss", "val_loss")
assert sorted(ORDER) == sorted(SIGNALS)


class Window:
    """The last `size` forward-filled values of a signal (NaN before its first
    finite value), with a cheap lower bound of their minimum.

    The bound is the minimum of the current block of pushes and of the block
    before it (blocks of `size` pushes), which together cover the window: two
    comparisons a push instead of a monotonic deque.
    """

    __slots__ = ("size", "values", "last", "cur", "prev", "low", "fill")

    def __init__(self, size):
        self.size = size
        self.values = collections.deque(maxlen=size)
        self.last = _nan
        self.cur = self.prev = _inf
        self.low = _inf  # min(prev, cur): the bound, inf until something finite is pushed
        self.fill = 0

    def push(self, x):
        """Appends one value (forward-filled)."""
        if x - x == 0.0:  # finite
            self.last = x
        else:
            x = self.last
        self.values.append(x)
        if x < self.cur:  # False for NaN: leading NaNs do not count
            self.cur = x
            if x < self.low:
                self.low = x
        fill = self.fill + 1
        if fill == self.size:
            self.low = self.prev = self.cur
            self.cur, self.fill = _inf, 0
        else:
            self.fill = fill

    def lower_bound(self):
        """At most the minimum of the window; NaN if nothing finite was pushed."""
        m = self.low
        return m if m != _inf else _nan

    def tail(self, k):
        """The last k values (fewer if fewer were pushed)."""
        values = self.values
        n = len(values)
        return list(values) if n <= k else list(islice(values, n - k, None))

    def minimum(self, k):
        """The minimum of the last k values, as stats.trailing_min sees it
        (NaN when none is finite; NaN can only lead, being forward-filled)."""
        values = self.values
        if not values or values[-1] != values[-1]:
            return _nan
        tail = values if len(values) <= k else islice(values, len(values) - k, None)
        return min(x for x in tail if x == x)


class Channel:
    """One signal as the monitor has seen it: counters, the recent raw points
    (for messages and the summary) and the forward-filled windows rules share."""

    __slots__ = ("name", "n", "steps", "values", "max_finite", "window", "log_window",
                 "log_value", "checks", "always", "screen", "open")

    def __init__(self, name, recent):
        self.name = name
        self.n = 0
        self.steps = collections.deque(maxlen=recent)
        self.values = collections.deque(maxlen=recent)
        self.max_finite = -_inf
        self.window = None  # Window of the values, if a rule needs one
        self.log_window = None  # Window of log(value) (NaN for value <= 0)
        self.log_value = _nan  # log(value) of the point being checked, if there is a log window
        self.checks = []  # (code, bound check method) of the rules that fire on it
        self.always = []  # ... those the screen cannot vouch for
        self.screen = None  # Screen of the others, if any
        self.open = {}  # code -> the episode of that rule on this signal that can still grow

    def need(self, size, log=False):
        """Makes the shared window at least `size` long (before any point)."""
        attr = "log_window" if log else "window"
        current = getattr(self, attr)
        if current is None or current.size < size:
            setattr(self, attr, Window(size))

    def last_step(self):
        return self.steps[-1] if self.n else None

    def recent(self) -> Series:
        return Series(
            np.fromiter(self.steps, dtype=np.int64, count=len(self.steps)),
            np.fromiter(self.values, dtype=np.float64, count=len(self.values)),
            np.zeros(len(self.steps)),
        )


@dataclasses.dataclass(frozen=True)
class Quiet:
    """Values for which a stream's check is sure to return None and to leave
    its state as it was: a finite v with lo <= v <= hi, v <= prev_factor x
    the previous point (when that is > 0), v < floor_factor x the lower bound
    of the signal's window (when that is > 0), log(v) at most log_margin above
    the lower bound of the log window. None: that condition is not needed."""

    lo: float = -_inf
    hi: float = _inf
    prev_factor: float | None = None
    floor_factor: float | None = None
    log_margin: float | None = None


class Screen:
    """The Quiet conditions of one signal's streams, combined: while a value
    meets them all, the monitor skips those streams' checks (most points of a
    healthy run), so their necessary conditions cost one call, not one each."""

    __slots__ = ("lo", "hi", "prev_factor", "floor_factor", "log_margin",
                 "channel", "values", "window", "log_window")

    def __init__(self, quiets: list, channel: "Channel"):
        self.lo = max(q.lo for q in quiets)
        self.hi = min(q.hi for q in quiets)
        # The smallest factor implies the others, as the bases are > 0.
        self.prev_factor = _least(q.prev_factor for q in quiets)
        self.floor_factor = _least(q.floor_factor for q in quiets)
        self.log_margin = _least(q.log_margin for q in quiets)
        self.channel = channel
        self.values = channel.values
        self.window = channel.window if self.floor_factor is not None else None
        self.log_window = channel.log_window if self.log_margin is not None else None

    def quiet(self, v):
        """True if every screened stream is sure to stay quiet at the finite value v
        (the channel holds v as its last point; its windows end before it)."""
        if not self.lo <= v <= self.hi:
            return False
        if self.prev_factor is not None:
            try:
                prev = self.values[-2]
            except IndexError:  # the first point
                return False
            if not (prev > 0 and v <= self.prev_factor * prev):
                return False
        w = self.window
        if w is not None:
            lb = w.low
            if not (lb > 0 and lb != _inf and v < self.floor_factor * lb):
                return False
        w = self.log_window
        if w is not None:  # w.low is inf while nothing finite was pushed: quiet
            if self.channel.log_value - w.low > self.log_margin:
                return False
        return True


def _least(values):
    given = [v for v in values if v is not None]
    return min(given) if given else None


class Stream:
    """Base of the streaming rules: `hits` are the signals it is checked on."""

    hits: tuple = ()

    @classmethod
    def needs(cls, p, signal) -> list:
        """The shared windows this rule reads: (signal, size, log)."""
        return []

    def quiet(self) -> Quiet | None:
        """When this stream may be skipped (see Quiet); None: never."""
        return None


class StreamHit:
    __slots__ = ("note", "fit")

    def __init__(self, note=None, fit: Fit | None = None):
        self.note = note
        self.fit = fit


HIT = StreamHit()


def _median_mad(window: Window, i: int, size: int, min_points: int, mad=True):
    """Median/MAD of the `size` points before i, as stats.trailing_median_mad computes them."""
    if i < min_points:
        return _nan, _nan
    w = np.asarray(window.tail(size), dtype=np.float64)
    if i < size:
        w = w[np.isfinite(w)]
        if w.size < min_points:
            return _nan, _nan
    m = np.median(w)
    return float(m), (float(np.median(np.abs(w - m))) if mad else _nan)


def _small_median(values):
    """np.median of a few values (NaN if any is NaN), in pure Python."""
    xs = sorted(values)
    n = len(xs)
    if n == 0 or xs[0] != xs[0] or xs[-1] != xs[-1] or any(x != x for x in xs):
        return _nan
    mid = n // 2
    return xs[mid] if n % 2 else (xs[mid - 1] + xs[mid]) / 2.0


def _finite_median(values):
    return _small_median([x for x in values if _isfinite(x)])


class NonFinite(Stream):
    hits = SIGNALS

    def __init__(self, p, signal, channels):
        pass

    def check(self, i, step, v):
        return None if _isfinite(v) else HIT


class LossBound(Stream):
    hits = ("train_loss", "val_loss")

    def __init__(self, p, signal, channels):
        self.max = p.max_loss

    def quiet(self):
        return Quiet(lo=-self.max, hi=self.max)

    def check(self, i, step, v):
        return HIT if abs(v) > self.max and v - v == 0.0 else None


class GradThreshold(Stream):
    hits = ("grad_norm",)

    def __init__(self, p, signal, channels):
        self.threshold = p.threshold

    def quiet(self):
        return Quiet(hi=self.threshold)

    def check(self, i, step, v):
        return HIT if v > self.threshold else None


class LossJump(Stream):
    hits = ("train_loss",)

    def __init__(self, p, signal, channels):
        self.factor = p.factor
        self.min_i = max(1, p.min_history)
        self.values = channels[signal].values  # holds this point and the ones before

    def quiet(self):
        return Quiet(prev_factor=self.factor)

    def check(self, i, step, v):
        if i >= self.min_i and v > self.factor * self.values[-2]:
            return HIT
        return None


class _Spike(Stream):
    """loss-spike (linear) and grad-norm-spike (log), as rules.spikes._spike_index."""

    log = False

    @classmethod
    def needs(cls, p, signal):
        return [(signal, p.window, cls.log)]

    def __init__(self, p, signal, channels):
        self.p = p
        self.size = p.window
        self.min_points = p.min_points
        self.min_ratio = p.min_ratio
        self.log_ratio = math.log(p.min_ratio)
        ch = channels[signal]
        self.window = ch.log_window if self.log else ch.window

    def quiet(self):
        # Not a candidate: see check.
        if self.log:
            return Quiet(log_margin=self.log_ratio)
        return Quiet(floor_factor=self.min_ratio)

    def check(self, i, step, v):
        if i < self.min_points:
            return None
        window = self.window
        if self.log:
            x = _log(v) if v > 0 else _nan
            if not x - x == 0.0:
                return None
            # Candidate: x - (trailing min) > log(min_ratio); the bound first.
            if not x - window.lower_bound() > self.log_ratio:
                return None
            if not x - window.minimum(self.size) > self.log_ratio:
                return None
        else:
            x = v
            if not x - x == 0.0:
                return None
            # Candidate: trailing min <= 0 (or none) or x >= min_ratio x min.
            lo = window.lower_bound()
            if lo > 0 and x < self.min_ratio * lo:
                return None
            lo = window.minimum(self.size)
            if lo > 0 and x < self.min_ratio * lo:
                return None
        return self._decide(i, v, x)

    def _decide(self, i, v, x):
        p = self.p
        med, mad = _median_mad(self.window, i, p.window, p.min_points)
        if self.log:
            spike = (x - med) > max(p.z * _MAD_TO_SIGMA * mad, self.log_ratio)
        else:
            scale = max(_MAD_TO_SIGMA * mad, 1e-3 * abs(med))
            spike = (x - med) > p.z * scale and (x >= p.min_ratio * med if med > 0 else True)
        if not spike:
            return None
        base = math.exp(med) if self.log else med
        ratio = v / base if base > 0 else _nan
        return StreamHit(note=f"{fmt(ratio)}x its recent median {fmt(base)}")


class LossSpike(_Spike):
    hits = ("train_loss",)


class GradSpike(_Spike):
    hits = ("grad_norm",)
    log = True


class LossDivergence(Stream):
    hits = ("train_loss",)

    @classmethod
    def needs(cls, p, signal):
        return [(signal, p.window, False)]

    def __init__(self, p, signal, channels):
        self.p = p
        self.size = p.window
        self.factor = p.factor
        self.min_points = p.min_points
        self.consecutive = p.consecutive
        self.window = channels[signal].window
        # Consecutive elevated points, ending at point `last` (kept lazily, so
        # points that are not elevated need not touch the state).
        self.run = 0
        self.last = -2

    def quiet(self):
        return Quiet(floor_factor=self.factor)  # not elevated: see _elevated

    def check(self, i, step, v):
        if i >= self.min_points and v - v == 0.0 and self._elevated(i, v):
            self.run = self.run + 1 if self.last == i - 1 else 1
            self.last = i
            return HIT if self.run > self.consecutive else None
        return None

    def _elevated(self, i, v):
        # Elevated needs v >= factor x (trailing min) unless that min is <= 0.
        lo = self.window.lower_bound()
        if lo > 0 and v < self.factor * lo:
            return False
        lo = self.window.minimum(self.size)
        if lo > 0 and v < self.factor * lo:
            return False
        med, _ = _median_mad(self.window, i, self.size, self.min_points, mad=False)
        return v >= self.factor * med and med > 0


class GradGrowth(Stream):
    hits = ("grad_norm",)

    # The running quarter sums are recomputed exactly this often, so their
    # rounding drift stays far below _SLACK.
    _RESYNC = 1024
    _SLACK = 1e-6

    @classmethod
    def needs(cls, p, signal):
        # The run's normal level: forward-filled logs before the fit window.
        return [(signal, p.baseline_window + p.window, True)]

    def __init__(self, p, signal, channels):
        self.p = p
        w = self.w = p.window
        self.threshold = p.threshold
        self.q, self.rise = quarter_rise(p)
        self.q_rise = self.q * self.rise
        self.logs = collections.deque(maxlen=w)  # logs, 0.0 where not finite
        self.steps = collections.deque(maxlen=w)
        self.channel = channels[signal]  # its log_value: log(v), computed once a point
        self.history = self.channel.log_window
        self.last_bad = -w  # index of the last non-finite log
        # Sums of the first and the last q logs of the window, kept running
        # once the window is full, and recomputed every _RESYNC points.
        self.first = self.last = 0.0
        self.count = self._RESYNC
        self.full = False

    def check(self, i, step, v):
        logs = self.logs
        x = self.channel.log_value
        if not x - x == 0.0:
            x = 0.0
            self.last_bad = i
        if self.full:  # the window slides (the usual case)
            q = self.q
            self.last += x - logs[-q]
            self.first += logs[q] - logs[0]
            logs.append(x)
            self.steps.append(step)
            self.count -= 1
            if not self.count:
                self._resync()
        else:
            self._fill(x, step)
        if i - self.last_bad < self.w or not v < self.threshold or i < self.w - 1:
            return None
        # A necessary condition, with a slack far above the running sums'
        # rounding: the exact (numpy) test in _decide settles close calls.
        if self.last - self.first < self.q_rise - self._SLACK:
            return None
        return self._decide(i)

    def _fill(self, x, step):
        """Appends while the window is not full yet (or is no longer than a quarter)."""
        self.logs.append(x)
        self.steps.append(step)
        self._resync()
        self.full = len(self.logs) == self.w and self.w > self.q

    def _resync(self):
        """The quarter sums afresh (exactly, from the window)."""
        logs, q = self.logs, self.q
        n = len(logs)
        self.first = sum(islice(logs, min(q, n)))
        self.last = sum(islice(logs, max(n - q, 0), None))
        self.count = self._RESYNC

    def _decide(self, i):
        p, w, q = self.p, self.w, self.q
        logs = np.fromiter(self.logs, dtype=np.float64, count=w)  # all finite here
        # The batch rule's exact arithmetic.
        if logs[w - q :].sum() / q - logs[:q].sum() / q < self.rise:
            return None
        lo = i - w + 1
        base = _nan
        if lo >= w:
            # The history is pushed after this check: it ends at point i - 1.
            hist = list(self.history.values)
            before = np.asarray(hist[: len(hist) - (w - 1)][-p.baseline_window :], dtype=np.float64)
            if lo < p.baseline_window:
                before = before[np.isfinite(before)]
                base = float(np.median(before)) if before.size >= w else _nan
            else:
                base = float(np.median(before))
        steps = np.fromiter(self.steps, dtype=np.int64, count=w)
        fit = fit_window(steps, logs, base, p)
        return None if fit is None else StreamHit(fit=fit)


class Plateau(Stream):
    """loss-plateau, as rules.progress.loss_plateau."""

    hits = ("train_loss",)

    def __init__(self, p, signal, channels):
        k = self.k = max(1, p.smooth)
        self.mid, self.odd = k // 2, k % 2 == 1
        self.window = collections.deque(maxlen=k)  # forward-filled losses, this point included
        self.last = _nan
        self.best = _nan
        self.settled = False
        self.rel = p.rel_improvement
        self.fraction, self.min_patience = p.patience_fraction, p.min_patience
        self.cap = max(p.max_patience, p.min_patience)
        self.capped_from = _capped_from(p.patience_fraction, self.min_patience, self.cap)
        self.capped_hit = StreamHit(note=str(self.cap))
        # Ring: the best as of each recent point (an array pickles as one block).
        self.bests = array.array("d", [_nan]) * (self.cap + 1)
        # The learning rate's recent points (its channel is updated first).
        self.lr = channels["lr"].values

    def check(self, i, step, v):
        finite = v - v == 0.0
        if finite:
            self.last = v
        window = self.window
        y = self.last
        window.append(y)
        if i >= self.k - 1:
            # Once settled, the window's median is >= best after every point,
            # and for an odd window only a new value below best can take the
            # median below it: otherwise the median need not be computed.
            # Forward-filled: NaN can only lead, so a finite first value means all are.
            if (y < self.best or not self.settled) and window[0] == window[0]:
                xs = sorted(window)
                mid = self.mid
                sm = xs[mid] if self.odd else (xs[mid - 1] + xs[mid]) / 2.0
                if not sm >= self.best:  # fmin: a NaN best takes sm
                    self.best = sm
                self.settled = self.odd
        else:
            sm = _finite_median(window)
            if sm - sm == 0.0 and not sm >= self.best:
                self.best = sm
        best = self.best
        ring = self.bests
        size = len(ring)
        ring[i % size] = best
        if i >= self.capped_from:
            patience = self.cap
        else:
            grown = int(self.fraction * (i + 1))  # floor, for i >= 0
            patience = min(grown if grown > self.min_patience else self.min_patience, self.cap)
        if i < patience or not finite:
            return None
        ref = ring[(i - patience) % size]
        if best > ref - self.rel * abs(ref) and not self._lr_rising():
            if patience == self.cap:  # a stall fires on every point: one hit object
                return self.capped_hit
            return StreamHit(note=str(patience))
        return None

    def _lr_rising(self):
        """The last lr point above the one 3 points before it (warm-up)."""
        lr = self.lr
        n = len(lr)
        return n > 0 and lr[-1] > lr[-4 if n >= 4 else 0]


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


class ValStagnation(Stream):
    hits = ("val_loss",)

    def __init__(self, p, signal, channels):
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

    @classmethod
    def needs(cls, p, signal):
        return [("train_loss", p.smooth, False)] if getattr(p, "smooth", 1) > 1 else []

    def __init__(self, smooth, channels):
        self.smooth = max(1, smooth)
        self.train = channels["train_loss"]  # updated before the validation channel

    def train_now(self):
        """The (smoothed) train loss at the last train point."""
        train = self.train
        if train.n == 0:
            return _nan
        if self.smooth == 1:
            return train.values[-1]  # unsmoothed: the raw value, NaN/Inf included
        window = train.window.tail(self.smooth)
        if train.n < self.smooth:
            return _finite_median(window)
        return _small_median(window)


class Overfit(_TrainAtVal):
    def __init__(self, p, signal, channels):
        super().__init__(1, channels)
        self.p = p

    def check(self, i, step, v):
        t = self.train_now()
        if t < self.p.max_train_loss and v > self.p.ratio * t:
            return StreamHit(note=fmt(t))
        return None


class ValDivergence(_TrainAtVal):
    def __init__(self, p, signal, channels):
        super().__init__(p.smooth, channels)
        self.p = p
        self.best = _inf
        self.best_i = 0
        self.best_step = None
        self.train_at_best = _nan
        self.above = 0

    def check(self, i, step, v):
        p = self.p
        masked = v if _isfinite(v) else _inf
        if i == 0 or masked < self.best:
            self.best = min(masked, self.best) if i else masked
            self.best_i, self.best_step = i, step
            self.train_at_best = self.train_now()
        above = _isfinite(v) and v >= self.best * (1 + p.min_rise) and self.best > 0
        self.above = self.above + 1 if above else 0
        if (
            i >= p.min_evaluations
            and self.above >= p.evaluations
            and i - self.best_i >= p.evaluations
            and self.train_now() < self.train_at_best
        ):
            return StreamHit(note=f"{fmt(self.best)} at step {self.best_step}")
        return None


class _RatioBand(Stream):
    hits = ("update_ratio",)
    above = True

    def __init__(self, p, signal, channels):
        self.high, self.low = p.high, p.low
        self.warmup, self.consecutive = p.warmup, p.consecutive
        self.run = 0

    def check(self, i, step, v):
        out = (v > self.high) if self.above else (v < self.low and v >= 0)
        self.run = self.run + 1 if out and i >= self.warmup else 0
        return HIT if self.run >= self.consecutive else None


class RatioHigh(_RatioBand):
    above = True


class RatioLow(_RatioBand):
    above = False


class LrNonPositive(Stream):
    hits = ("lr",)

    def __init__(self, p, signal, channels):
        self.consecutive = p.consecutive
        # Consecutive zeros, ending at point `last` (kept lazily).
        self.zeros = 0
        self.last = -2

    def quiet(self):
        return Quiet(lo=5e-324) if self.consecutive > 0 else None  # lo: v > 0

    def check(self, i, step, v):
        if v == 0:
            self.zeros = self.zeros + 1 if self.last == i - 1 else 1
            self.last = i
            return HIT if self.zeros >= self.consecutive else None
        return HIT if v < 0 or self.consecutive == 0 else None


class LrJump(Stream):
    hits = ("lr",)

    def __init__(self, p, signal, channels):
        self.factor = p.factor
        self.min_i = p.warmup + 1
        self.values = channels[signal].values  # holds this point and the ones before

    def quiet(self):
        return Quiet(prev_factor=self.factor)

    def check(self, i, step, v):
        if i >= self.min_i:
            prev = self.values[-2]
            if v > self.factor * prev and prev > 0:
                return HIT
        return None


class LrRising(Stream):
    hits = ("lr",)

    def __init__(self, p, signal, channels):
        self.p = p
        self.peak = _nan
        self.first = None
        self.limit = _nan  # peak_factor x the peak when the lr first decayed
        self.from_i = 0

    def check(self, i, step, v):
        finite = v - v == 0.0
        if finite and not v <= self.peak:  # fmax ignores NaN
            self.peak = v
        if self.first is None:
            if finite and v < 0.5 * self.peak:
                self.first = i
                self.limit = self.p.peak_factor * self.peak
                self.from_i = max(i + 1, self.p.warmup)
            return None
        if finite and v > self.limit and i >= self.from_i:
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
