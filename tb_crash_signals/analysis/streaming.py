"""The streaming form of the rules: one point at a time, bounded state.

Every rule module pairs its batch function with a `Stream` subclass that
must fire on exactly the same points (tests/contract checks whole episodes
on long series, the demo runs and real logs). State is sized by the rule's
windows, never by the run's length. This module holds what the streams
share; the online `Monitor` (tb_crash_signals.online) drives them.

Protocol: `check(i, step, value)` is called for every point of the rule's hit
signal, in order, and returns None or a `StreamHit`; it decides with the
state *before* the point. What rules share lives in one `Channel` per signal:
its recent raw points (this point included when the checks run), its trailing
levels (`shared_level`: pushed before the checks, so they include the point),
its forward-filled windows and initial level (pushed after the checks), and
the sorted logs of its recent points for the noise estimates (`RecentLogs`,
advanced only when a check asks). A rule that compares signals reads the other
signal's channel, which the monitor updates first (`ORDER`), since batch rules
look up other signals "at or before" the step; what it needs of the other
signal is read from that channel when needed rather than tracked at every
point of it (`Stream.idle`), where the channel holds enough of it.

The checks run on every training step, so the common path of each is a few
comparisons against cheap necessary conditions (a lower bound of a window's
minimum, running quarter sums); the exact computation, the batch rule's own
arithmetic, runs only when those pass.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from bisect import bisect_left as _bisect_left
from bisect import insort as _insort
from itertools import islice
from operator import attrgetter
from operator import sub as _sub

import numpy as np

from tb_crash_signals.analysis import stats as _stats
from tb_crash_signals.analysis.signals import SIGNALS
from tb_crash_signals.analysis.stats import MAD_TO_SIGMA, mad_sorted, percentile_sorted
from tb_crash_signals.ingest.series import Series

_isfinite = math.isfinite
_SQRT6 = math.sqrt(6.0)
_nan, _inf = math.nan, math.inf
# Channels are updated in this order, so a rule reading another signal sees
# that signal's point of the same step: the plateau and blow-up rules read the
# learning rate, the grad-norm rules (skipped steps, jumps, growth) and the
# validation rules read the train loss.
ORDER = ("lr", "train_loss", "grad_norm", "update_ratio", "val_loss")
assert sorted(ORDER) == sorted(SIGNALS)
_by_k = attrgetter("k")  # a level's window length (sort key)


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
        # Walked from the end: an islice of the deque itself would walk it from its start.
        tail = list(islice(reversed(self.values), k))
        tail.reverse()
        return tail

    def maximum(self, k):
        """The maximum of the last k values, as stats.trailing_max sees it (NaN when none is
        finite)."""
        return self._extreme(k, max)

    def minimum(self, k):
        """The minimum of the last k values, as stats.trailing_min sees it (NaN when none is
        finite)."""
        return self._extreme(k, min)

    def _extreme(self, k, pick):
        values = self.values
        if not values or values[-1] != values[-1]:
            return _nan
        n = len(values)
        if n <= k:
            first, tail = values[0], values
        else:
            first, tail = values[n - k], islice(values, n - k, None)
        if first == first:  # NaN can only lead (forward-filled): none in the tail, no filter needed
            return pick(tail)
        return pick(x for x in tail if x == x)


class Channel:
    """One signal as the monitor has seen it: counters, the recent raw points
    (for messages and the summary) and the forward-filled windows rules share."""

    __slots__ = ("name", "n", "steps", "values", "max_finite", "window", "log_window", "log_value",
                 "checks", "always", "screen", "quiet_lo", "quiet_hi", "rest", "rest_from", "checks_at_rest",
                 "always_at_rest", "codes", "open", "follows", "shared", "levels", "initial", "heading")

    def __init__(self, name, recent):
        self.name = name
        self.n = 0
        self.steps = collections.deque(maxlen=recent)
        self.values = collections.deque(maxlen=recent)
        self.max_finite = -_inf
        self.window = None  # Window of the values, if a rule needs one
        self.log_window = None  # Window of log(value) (NaN for value <= 0)
        self.log_value = _nan  # log(value) of the point being checked, if there is a log window
        self.checks = []  # the bound check methods of the rules that fire on it (with their codes
        # while the monitor builds them)
        self.always = []  # ... those the screen cannot vouch for
        # Finite values in [quiet_lo, quiet_hi] need only `always` (an empty band: every check);
        # `screen`, if any, moves quiet_hi after each point.
        self.quiet_lo, self.quiet_hi = _inf, -_inf
        self.screen = None
        self.rest = None  # RestScreen of some of `always`, if any
        self.rest_from = _inf  # ... asked from this point on (its `after`)
        self.checks_at_rest = self.always_at_rest = None  # checks and always without those
        self.codes = {}  # bound check method -> its rule's code
        self.open = {}  # code -> the episode of that rule on this signal that can still grow
        self.follows = []  # episodes whose note still reads this signal's points
        # What the streams of one rule derive from this signal for each other (a rule
        # checked on another signal reads it): key -> object, made by the first that needs it.
        self.shared = {}
        self.levels = None  # Levels of those among them, pushed at every point before the checks
        self.initial = InitialLevel()  # pushed after the checks: known from the 11th finite point on
        self.heading = True  # the initial level is still unknown: pushed at this point

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
    the previous point (when that is finite and > 0), v < floor_factor x the lower bound
    of the signal's window (when that is > 0), and, with `after_out`, the previous point
    within [lo, hi] too (a stream that judges a point outside by the one after it). None:
    that condition is not needed."""

    lo: float = -_inf
    hi: float = _inf
    prev_factor: float | None = None
    floor_factor: float | None = None
    after_out: bool = False


@dataclasses.dataclass(frozen=True)
class Rest:
    """When a stream that keeps counts may be skipped at a finite point (see Stream.rest): at
    points from `after` on, while its `busy` is false (nothing counted, nothing fired that the
    point could extend), if every bar (level, factor, best) holds: level.value < factor x
    best.low with best.low > 0, of the signal's shared Levels (pushed before the checks). Its
    check would then return None and leave its state as it was."""

    after: int
    bars: tuple = ()


class Stream:
    """Base of the streaming rules: `hits` are the signals it is checked on."""

    hits: tuple = ()
    # True: nothing to do at this signal's points (what the rule needs of it is read from the
    # channel when needed); the monitor does not call its check.
    idle: bool = False
    # For a stream with a Rest: true while a point could change its counts (kept by its check).
    busy: bool = False

    @classmethod
    def needs(cls, p, signal) -> list:
        """The shared windows this rule reads: (signal, size, log)."""
        return []

    def quiet(self) -> Quiet | None:
        """When this stream may be skipped (see Quiet); None: never."""
        return None

    def rest(self) -> Rest | None:
        """When a stream that is never quiet may be skipped (see Rest); None: never."""
        return None


class StreamHit:
    """A stream fired: the note and fit of the hit, as the batch rule's `Hits` give them.

    `follow`, for a note that reads points after the hit (a spike's
    recovery), is fed the signal's later points (`push(step, value)`, which
    returns the note once it changes) until its `done` is true.
    """

    __slots__ = ("note", "fit", "follow")

    def __init__(self, note=None, fit=None, follow=None):
        self.note = note
        self.fit = fit
        self.follow = follow


class NoteLater(StreamHit):
    """A hit whose note is `make(*args)`, built when read: the monitor reads it only at the hit
    that opens an episode, not at the many that extend one."""

    __slots__ = ("make", "args")

    def __init__(self, make, *args):
        self.make, self.args = make, args
        self.fit = self.follow = None

    @property
    def note(self):
        return self.make(*self.args)


HIT = StreamHit()
# What a check returns once it will never fire again on its channel (a rule for another kind of
# series, told apart by its first points): the monitor stops calling it.
RETIRED = StreamHit()


class SortedSpan:
    """The forward-filled points [end - size, end) of a series (fewer at its start), kept in order
    and sorted (their finite ones; a forward-filled series' only NaNs lead it), moved along the
    series when asked: a sort of the whole span when the last ask is far back, one insertion and
    one removal a point when asks come point after point. Equal values stay in the order they
    came, so the sorted list is the one a stable sort gives, zeros' signs included."""

    __slots__ = ("size", "values", "sorted", "nans", "end")

    def __init__(self, size):
        self.size = size
        self.values = collections.deque()  # the span's points, oldest first
        self.sorted = []  # ... its finite ones, sorted
        self.nans = 0
        self.end = -1  # the span holds the points before this one (-1: nothing yet)

    def move_to(self, source, offset, end):
        """Holds the points before `end`, where source[offset + j] is point j (source: a deque
        holding at least those the move reads)."""
        size = self.size
        gap = end - self.end
        if not gap:
            return
        if 0 < gap < size // 4 and self.end >= 0:
            values, xs = self.values, self.sorted
            for x in [source[offset + j] for j in range(self.end, end)]:
                values.append(x)
                if x == x:
                    _insort(xs, x)
                else:
                    self.nans += 1
                if len(values) > size:
                    old = values.popleft()
                    if old == old:
                        del xs[_bisect_left(xs, old)]
                    else:
                        self.nans -= 1
        else:
            values = self.values = collections.deque(islice(source, offset + max(end - size, 0), offset + end))
            xs = self.sorted = sorted([x for x in values if x == x])
            self.nans = len(values) - len(xs)
        self.end = end

    def median(self):
        """np.median of the span's finite points (NaN if none)."""
        xs = self.sorted
        n = len(xs)
        if not n:
            return _nan
        mid = n // 2
        return xs[mid] if n % 2 else (xs[mid - 1] + xs[mid]) / 2.0


class TailMedian:
    """The median of a channel's `size` forward-filled points before a given one, as
    stats.trailing_median_mad_at computes it (np.median's values, in pure Python), shared by the
    streams that ask at the same points (the spike, blow-up and jump-together rules on one
    signal): a SortedSpan moved along the channel's Window when asked."""

    __slots__ = ("window", "span")

    def __init__(self, window, size):
        self.window = window
        self.span = SortedSpan(size)

    def before(self, end, received, min_points):
        """The median at point `end` (of the points before it), the window having received
        `received` points (its last is point received - 1 >= end - 1)."""
        if end < min_points:
            return _nan
        span = self.span
        wv = self.window.values
        span.move_to(wv, len(wv) - received, end)
        if (len(span.sorted) < min_points) if end < span.size else span.nans:
            return _nan
        return span.median()


def tail_median(channel, size: int) -> TailMedian:
    """The channel's shared TailMedian of `size` points (its Window must hold them, see needs)."""
    key = ("tail median", size)
    found = channel.shared.get(key)
    if found is None:
        found = channel.shared[key] = TailMedian(channel.window, size)
    return found


def small_median(values):
    """np.median of a few values (NaN if any is NaN), in pure Python."""
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        return _nan
    total = sum(xs)
    # A NaN makes the sum NaN; so do +inf and -inf together, hence the full check then.
    if total != total and any(x != x for x in xs):
        return _nan
    mid = n // 2
    return xs[mid] if n % 2 else (xs[mid - 1] + xs[mid]) / 2.0


class Calls:
    """Several calls with no argument made as one, in order (picklable, unlike a lambda: a
    Monitor's state is)."""

    __slots__ = ("calls",)

    def __init__(self, *calls):
        self.calls = calls

    def __call__(self):
        for call in self.calls:
            call()


class Level:
    """A trailing median of k forward-filled points, pushed point by point (stats.smoothed_level),
    with its running minimum (fmin: the "best level").

    The window's finite values are also kept sorted, updated by bisection per push rather than
    sorted whole: equal values sit in arrival order and the oldest leaves first, so the list is
    the stable sort of the window and the median is small_median's, bit for bit. Forward-filled,
    the window holds finite values after its leading NaNs, which are only counted.
    """

    __slots__ = ("k", "window", "last", "n", "sorted", "nans", "mid", "odd", "value", "low", "history",
                 "low_from", "on_low")

    def __init__(self, k):
        self.k = max(1, k)
        self.window = collections.deque(maxlen=self.k)
        self.last = _nan
        self.n = 0  # points pushed, until the usual case
        self.sorted = []
        self.nans = 0
        self.mid, self.odd = self.k // 2, self.k % 2
        self.value = _nan  # the level at the last point
        self.low = _nan  # the lowest level so far (from its `low_from`-th point)
        self.history = None  # its last values (see keep), if a stream reads them
        self.low_from = 1  # a best level's: stats.best_levels (see shared_level)
        self.on_low = None  # called with no argument each time `low` falls, if set (by a stream)

    def also_on_low(self, call):
        """Adds a call (no argument) made each time `low` falls, after those added before."""
        self.on_low = call if self.on_low is None else Calls(self.on_low, call)

    def keep(self, size):
        """Keeps at least its last `size` levels in `history` (the last is that at the last
        point): one deque shared by the streams that read past levels, appended as it is pushed."""
        if self.history is None or self.history.maxlen < size:
            self.history = collections.deque(self.history or (), maxlen=size)

    def push(self, v):
        """Takes the next point; returns the level at it (NaN while unknown)."""
        if v - v == 0.0:
            self.last = v
        x = self.last
        window = self.window
        xs = self.sorted
        # The usual case: full and finite, as it stays once it is (forward-filled, x is finite
        # then), so it does not count the points.
        if not self.nans and len(window) == self.k:
            old = window[0]
            window.append(x)
            # The same value leaving and coming leaves the list as it was (not so for a zero,
            # whose sign may differ).
            if old != x or x == 0.0:
                del xs[_bisect_left(xs, old)]
                _insort(xs, x)
            mid = self.mid
            b = self.value = xs[mid] if self.odd else (xs[mid - 1] + xs[mid]) / 2.0
            if not b >= self.low:  # b is finite here: fmin
                self.low = b
                if self.on_low is not None:
                    self.on_low()
            if self.history is not None:
                self.history.append(b)
            return b
        self.n += 1
        if len(window) == self.k:
            old = window[0]
            if old == old:
                del xs[_bisect_left(xs, old)]
            else:
                self.nans -= 1
        window.append(x)
        if x == x:
            _insort(xs, x)
        else:
            self.nans += 1
        n = len(xs)
        if (self.n >= self.k and self.nans) or n == 0:  # NaN can only lead, being forward-filled
            b = self.value = _nan
        else:
            mid = n // 2
            b = self.value = xs[mid] if n % 2 else (xs[mid - 1] + xs[mid]) / 2.0
            if not b >= self.low and self.n >= self.low_from:
                self.low = b
                if self.on_low is not None:
                    self.on_low()
        if self.history is not None:
            self.history.append(b)
        return b


class Levels:
    """A channel's shared Levels, pushed together. They share one window of the last points,
    the longest level's, and one push updates them all in place, as each would: a point enters
    every sorted list and the point k back leaves that of the level of k, once its window is
    full (`fast`); until then (`growing`) it only enters. The growing levels all hold every
    point so far, so they share one sorted list of them (`head`) and one median, and a level
    takes its own copy of that list when its window fills. A series that starts with non-finite
    points (a NaN forward-filled) is pushed level by level instead, until every window is full
    and finite, as it stays."""

    __slots__ = ("levels", "window", "last", "fast", "fast_even", "growing", "head", "filling")

    def __init__(self):
        self.levels = []
        self.window = None  # the shared window, from the first finite point or once every level is full
        self.last = _nan
        # (level, -k, its sorted list, mid, history) for each level whose window is full, k odd
        self.fast = ()
        self.fast_even = ()  # ... k even
        self.growing = ()  # the levels whose window is not full yet, shortest first (their points all finite)
        self.head = None  # while some are: every point so far, sorted (their sorted list)
        self.filling = 0  # level by level: pushes left before every window can be full (the longest k)

    def add(self, level: Level):
        """Adds a level (before any point)."""
        self.levels.append(level)
        self.filling = max(self.filling, level.k)

    def push(self, v):
        """Takes the next point, for every level."""
        window = self.window
        if window is None:
            if v - v == 0.0 and not self.levels[0].window:  # finite from the first point
                self._share()
                window = self.window
            else:
                self._push_each(v)
                return
        if v - v == 0.0:
            self.last = v
        x = self.last
        for level, back, xs, mid, history in self.fast:
            old = window[back]
            # As in Level.push: the same value leaving and coming leaves the list as it was.
            if old != x or x == 0.0:
                del xs[_bisect_left(xs, old)]
                _insort(xs, x)
            b = level.value = xs[mid]
            if not b >= level.low:
                level.low = b
                if level.on_low is not None:
                    level.on_low()
            if history is not None:
                history.append(b)
        for level, back, xs, mid, history in self.fast_even:  # the same, the median of two
            old = window[back]
            if old != x or x == 0.0:
                del xs[_bisect_left(xs, old)]
                _insort(xs, x)
            b = level.value = (xs[mid - 1] + xs[mid]) * 0.5
            if not b >= level.low:
                level.low = b
                if level.on_low is not None:
                    level.on_low()
            if history is not None:
                history.append(b)
        window.append(x)
        growing = self.growing
        if growing:
            # Level.push of the growing levels, which hold every point so far: x is the n-th.
            # Inline, not a method: at every point of a short run.
            n = len(window)
            xs = self.head
            _insort(xs, x)
            mid = n // 2
            # x 0.5, the same as / 2.0 (both round the same exact half), which 3.11 does not specialise.
            b = xs[mid] if n % 2 else (xs[mid - 1] + xs[mid]) * 0.5
            for level in growing:
                level.value = b
                if not b >= level.low and n >= level.low_from:
                    level.low = b
                    if level.on_low is not None:
                        level.on_low()
                if level.history is not None:
                    level.history.append(b)
            if growing[0].k == n:  # the shortest is full
                self._sort_by_fill()

    def _push_each(self, v):
        for level in self.levels:
            level.push(v)
        # No window is full before the longest level's k pushes: no test until then (a short
        # run, epoch by epoch, may never get there).
        if self.filling > 1:
            self.filling -= 1
        elif all(not level.nans and len(level.window) == level.k for level in self.levels):
            self._share()

    def _share(self):
        longest = max(self.levels, key=_by_k)
        # Every level's window is the last k points of the same forward-filled series.
        self.window = collections.deque(longest.window, maxlen=longest.k)
        self.last = longest.last
        # Shared at the first finite point (nothing held yet) or once every level is full (none grows).
        self.head = []
        for level in self.levels:
            level.window = None  # superseded by the shared one (smaller snapshots)
        self._sort_by_fill()

    def _sort_by_fill(self):
        """Moves the levels whose window the shared one fills to `fast`."""
        n = len(self.window)
        for level in self.growing:
            if level.k <= n:  # from now on its points leave as well as enter: its own sorted list
                level.sorted = self.head.copy()
        # Comprehensions, not generators (a call per item): it runs each time a level fills up.
        self.fast = tuple([(level, -level.k, level.sorted, level.mid, level.history)
                           for level in self.levels if level.k <= n and level.odd])
        self.fast_even = tuple([(level, -level.k, level.sorted, level.mid, level.history)
                                for level in self.levels if level.k <= n and not level.odd])
        self.growing = tuple(sorted([level for level in self.levels if level.k > n], key=_by_k))
        if not self.growing:
            self.head = None


def shared_level(channel, k: int, history: int = 0, best: bool = False) -> Level:
    """The channel's trailing median of `k` points, shared by every stream that asks for it
    (made before any point). The monitor pushes it at every point of the channel before the
    checks, so during a check its `value` and `low` are those at the point being checked, and
    its `history` (kept if a stream asks for `history` > 0 levels) ends with that point's.
    `best`: its `low` is a best level (stats.best_levels), counted from the point where its
    window holds min(k, BEST_FROM) points; a level of the same k whose `low` is the lowest
    level at any point (CS202's early best) is another."""
    k = max(1, k)
    key = ("level", k, best)
    level = channel.shared.get(key)
    if level is None:
        level = channel.shared[key] = Level(k)
        if best:
            level.low_from = min(k, _stats.BEST_FROM)
        if channel.levels is None:
            channel.levels = Levels()
        channel.levels.add(level)
    if history > 0:
        level.keep(history)
    return level


class InitialLevel:
    """The median of the first 10 finite points (stats.initial_level), known after the 10th;
    `known` is the index of the first point that knows it (inf before), counting the points
    pushed."""

    __slots__ = ("head", "value", "pushed", "known")

    def __init__(self):
        self.head = []
        self.value = _nan
        self.pushed = 0
        self.known = _inf

    def push(self, v):
        """Takes a point (after the point's own decision: the level is known from the next on)."""
        self.pushed += 1
        if len(self.head) < 10 and v - v == 0.0:
            self.head.append(v)
            if len(self.head) == 10:
                self.value = small_median(self.head)  # np.median's, bit for bit
                self.known = self.pushed


class RecentLogs:
    """stats.noise_decades and stats.log_spread of the `size` raw points of a channel before its
    current one, without their per-call numpy log and sort of the whole window.

    It keeps the window's logs (numpy's, each computed once, when its point enters: numpy's
    log of a value does not depend on the array it is taken in) and the sorted ones, and
    advances from the channel's recent points only when asked, so nothing runs at the points
    where no stream asks; equal logs are interchangeable, so the sorted list is the one those
    functions sort, and their results are the same bit for bit. Once a stream reads the jitter,
    the second differences of those logs are kept the same way, in order and sorted.
    """

    __slots__ = ("channel", "size", "log", "logs", "sorted", "end", "at", "result", "jitter_at", "jitter_result",
                 "diffs", "sorted_diffs", "valid", "last_two", "rough_until")

    def __init__(self, channel, size, log):
        self.channel = channel
        self.size = size
        self.log = log  # np.log10 (noise_decades) or np.log (log_spread)
        self.logs = collections.deque()  # each point's log in the window, None if not positive and finite
        self.sorted = []
        self.end = 0  # the window holds the points before this one
        self.at = -1  # the result is that at this end
        self.result = _nan
        self.jitter_at, self.jitter_result = -1, _nan  # ... and the jitter's
        # Once the jitter is asked for: the second differences of the window's logs (those of
        # positive finite points, in order), in order and sorted, how many logs, and the last two.
        self.diffs = self.sorted_diffs = None
        self.valid, self.last_two = 0, (_nan, _nan)
        self.rough_until = (-1, _nan)  # through this count the jitter is sure to stay at least this bar

    def _advance(self):
        end = self.channel.n - 1
        gap = end - self.end
        if gap <= 0:
            return
        size, logs, xs = self.size, self.logs, self.sorted
        self.end = end
        values = self.channel.values  # its last point is the current one
        n = len(values)
        if gap >= size // 4:  # a sort of the whole window costs less than that many insertions
            gap = min(end, size)
            new = list(islice(values, n - 1 - gap, n - 1))
            positive = [x for x in new if x > 0 and x - x == 0.0]
            lg = self.log(np.array(positive, dtype=np.float64)).tolist() if positive else []
            self.sorted = sorted(lg)
            it = iter(lg)
            # Comprehensions rather than generators here and below: a generator is resumed, a call,
            # per item.
            self.logs = collections.deque([next(it) if x > 0 and x - x == 0.0 else None for x in new])
            self.diffs = None  # rebuilt from the logs when the jitter is next asked for
            return
        log = self.log
        # Once the jitter is read: the second differences too (stats.second_differences'
        # subtractions, so the same numbers).
        diffs, sd = self.diffs, self.sorted_diffs
        valid, (before, last) = self.valid, self.last_two
        # By index, not an islice: that would walk the deque from its start.
        for x in [values[j] for j in range(n - 1 - gap, n - 1)]:
            if x > 0 and x - x == 0.0:
                y = float(log(x))  # numpy's log of one value: the one it takes within an array
                logs.append(y)
                _insort(xs, y)
                if diffs is not None:
                    if valid >= 2:
                        d = (y - last) - (last - before)
                        diffs.append(d)
                        _insort(sd, d)
                    valid += 1
                    before, last = last, y
            else:
                logs.append(None)
            if len(logs) > size:
                old = logs.popleft()
                if old is not None:
                    del xs[_bisect_left(xs, old)]
                    if diffs is not None:
                        if valid >= 3:
                            del sd[_bisect_left(sd, diffs.popleft())]
                        valid -= 1
        self.valid, self.last_two = valid, (before, last)

    def noise_decades(self):
        """stats.noise_decades of the window (built with np.log10)."""
        if self.at != self.channel.n:
            self.at = self.channel.n
            self._advance()
            xs = self.sorted
            self.result = (percentile_sorted(xs, 0.75) - percentile_sorted(xs, 0.25)
                           if len(xs) >= 10 else _nan)
        return self.result

    def log_spread(self):
        """stats.log_spread of the window (built with np.log)."""
        if self.at != self.channel.n:
            self.at = self.channel.n
            self._advance()
            xs = self.sorted
            if len(xs) < 10:
                self.result = _nan
            else:
                self.result = MAD_TO_SIGMA * mad_sorted(xs)
        return self.result


    def jitter(self):
        """stats.jitter of the window (built with np.log): its logs in order."""
        if self.jitter_at != self.channel.n:
            self.jitter_at = self.channel.n
            self._advance()
            if self.diffs is None:
                lg = [x for x in self.logs if x is not None]
                d = _stats.second_differences(lg)
                self.diffs, self.sorted_diffs = collections.deque(d), sorted(d)
                self.valid = len(lg)
                self.last_two = tuple(([_nan, _nan] + lg)[-2:])
            self.jitter_result = _stats.jitter_of_sorted_diffs(self.sorted_diffs)
        return self.jitter_result

    def jitter_under(self, bar):
        """The jitter if it is under `bar`, else None (NaN is not under). Once it is found at or
        above the bar, it is not computed again for as many points as it surely stays there:
        each point adds at most one second difference and removes at most one, so after k points
        at least ceil((n - k) / 2) - k of the n differences there are now lie within the median
        absolute deviation then, either side of its median: twice that deviation is at least the
        narrowest span of that many of today's sorted differences."""
        n = self.channel.n
        until, above = self.rough_until
        if n <= until and bar <= above:
            return None
        jit = self.jitter()
        if jit < bar:
            return jit
        self.rough_until = (n + _rough_for(self.sorted_diffs, bar), bar)
        return None


def _rough_for(d, bar) -> int:
    """How many more points the jitter of sorted second differences `d` surely stays >= bar
    (see RecentLogs.jitter_under); 0 if not even one."""
    n = len(d)
    # The bar on a span (a deviation of half the span), with room for the rounding of both sides.
    need = 2.0 * bar * _SQRT6 / _stats.MAD_TO_SIGMA * (1.0 + 1e-9)

    def holds(k):
        h = (n - k + 1) // 2 - k
        return h >= 2 and min(map(_sub, d[h - 1 :], d)) >= need

    lo, hi = 0, n // 4  # holds(lo) is assumed: the jitter itself is at or above the bar
    while lo < hi:
        k = (lo + hi + 1) // 2
        if holds(k):
            lo = k
        else:
            hi = k - 1
    return lo


class OwnRecent:
    """A stream's own last `size` raw points, for a window longer than the channel keeps: the
    stream appends each point to `values` after its decision."""

    __slots__ = ("values",)

    def __init__(self, size):
        self.values = collections.deque(maxlen=size)

    def noise_decades(self):
        return _stats.noise_decades(self.values)

    def log_spread(self):
        return _stats.log_spread(self.values)

    def jitter(self):
        return _stats.jitter(self.values)

    def jitter_under(self, bar):
        jit = self.jitter()
        return jit if jit < bar else None


def recent_logs(channel, size: int, log) -> RecentLogs | OwnRecent:
    """The channel's shared RecentLogs of `size` points and that log (np.log10 for noise_decades,
    np.log for log_spread), or an OwnRecent when the channel keeps fewer recent points."""
    if size + 1 > channel.values.maxlen:
        return OwnRecent(size)
    key = ("recent logs", size, log.__name__)
    found = channel.shared.get(key)
    if found is None:
        found = channel.shared[key] = RecentLogs(channel, size, log)
    return found


def finite_median(values):
    """small_median of the finite values."""
    return small_median([x for x in values if _isfinite(x)])
