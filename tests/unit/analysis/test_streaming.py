"""The streaming windows' order statistics are the batch functions' own, bit for bit."""

from __future__ import annotations

import math
import pickle

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tb_crash_signals.analysis import stats
from tb_crash_signals.analysis.streaming import (
    Channel,
    Level,
    Levels,
    RecentLogs,
    TailMedian,
    Window,
    finite_median,
    small_median,
)

# Repeats and zeros of both signs: the sorted window must place equal values as a stable sort does.
SPECIALS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 2.0, 2.0, 1e308, -1e308]

series = st.tuples(
    st.integers(0, 30),  # leading NaNs, as a forward-filled window starts
    st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(SPECIALS)),
             max_size=150),
).map(lambda t: np.asarray([math.nan] * t[0] + t[1], dtype=np.float64))


def same_bits(a, b) -> bool:
    nan = np.isnan(a)
    return np.array_equal(nan, np.isnan(b)) and a[~nan].tobytes() == b[~nan].tobytes()


@settings(max_examples=400, deadline=None)
@given(series, st.integers(1, 40))
def test_level_pushed_point_by_point_is_the_median_of_its_window(x, k):
    level = Level(k)
    got, want, window, last = [], [], [], math.nan
    for v in x.tolist():
        got.append(level.push(v))
        last = v if math.isfinite(v) else last
        window = (window + [last])[-k:]
        # Sorted afresh: what the bisected list must equal, zeros' signs included.
        if len(window) < k:
            want.append(finite_median(window))
        else:
            want.append(math.nan if window[0] != window[0] else small_median(window))
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert same_bits(got, want)
    # The batch rule's level (which may give a zero of the other sign).
    batch = stats.smoothed_level(x, k)
    assert np.array_equal(got, batch, equal_nan=True)


@settings(max_examples=300, deadline=None)
@given(series, st.lists(st.integers(1, 40), min_size=1, max_size=4, unique=True))
def test_levels_pushed_together_are_each_level_pushed_alone(x, ks):
    """Sharing one window, from the first point or after leading NaNs, changes no level's value,
    lowest value or history, zeros' signs included."""
    together, alone = Levels(), []
    for k in ks:
        level = Level(k)
        level.keep(3)
        together.add(level)
        mine = Level(k)
        mine.keep(3)
        alone.append(mine)
    for v in x.tolist():
        together.push(v)
        for mine in alone:
            mine.push(v)
        for level, mine in zip(together.levels, alone):
            got = [level.value, level.low, *level.history]
            want = [mine.value, mine.low, *mine.history]
            assert same_bits(np.asarray(got), np.asarray(want))


@settings(max_examples=300, deadline=None)
@given(series, st.integers(1, 40), st.integers(1, 50))
def test_window_extremes_are_those_of_its_finite_tail(x, size, k):
    w = Window(size)
    filled, last = [], math.nan
    for v in x.tolist():
        w.push(v)
        last = v if math.isfinite(v) else last
        filled = (filled + [last])[-size:]
        tail = [y for y in filled[-k:] if y == y]
        for got, want in ((w.maximum(k), max(tail, default=math.nan)), (w.minimum(k), min(tail, default=math.nan))):
            assert same_bits(np.asarray([got]), np.asarray([want]))


@settings(max_examples=300, deadline=None)
@given(series, st.sampled_from([10, 12, 50]), st.lists(st.booleans(), min_size=1, max_size=40))
def test_recent_logs_read_now_and_then_are_the_batch_functions_of_the_window_before(x, size, asks):
    """Read at irregular points (gaps the window steps over one by one, or re-sorts), the noise,
    spread and jitter kept as points come and go are those of the raw window, bit for bit."""
    # Positive values as well, whose logs and second differences are all kept.
    for values in (x.tolist(), np.exp(np.sin(np.arange(x.size) / 3.0) + 0.1 * x.size).tolist()):
        channel = Channel("train_loss", 256)
        recent = RecentLogs(channel, size, np.log)
        for i, v in enumerate(values):
            channel.n += 1
            channel.values.append(v)
            if not asks[i % len(asks)]:
                continue
            window = np.asarray(values[max(i - size, 0) : i], dtype=np.float64)
            for got, want in ((recent.jitter(), stats.jitter(window)), (recent.log_spread(), stats.log_spread(window))):
                assert same_bits(np.asarray([got]), np.asarray([want])), (i, got, want)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.one_of(st.floats(-1e6, 1e6), st.sampled_from([0.0, -0.0, 1.0, 1.5, -2.0])), min_size=1, max_size=80))
def test_mad_of_sorted_values_is_numpys_bit_for_bit(xs):
    xs.sort()
    a = np.asarray(xs, dtype=np.float64)
    want = float(np.median(np.abs(a - np.median(a))))
    assert same_bits(np.asarray([stats.mad_sorted(xs)]), np.asarray([want]))


@settings(max_examples=300, deadline=None)
@given(series, st.sampled_from([4, 10, 50]), st.integers(0, 12), st.lists(st.booleans(), min_size=1, max_size=40))
def test_tail_median_read_now_and_then_is_the_batch_median_before_each_point(x, size, min_points, asks):
    """Asked at irregular points, the sorted tail kept from the window gives the batch rules' median of
    the `size` points before (NaN under min_points of them, or with a NaN among a full window); a
    zero's sign may differ from numpy's, as the pure-Python medians' may (no decision sees it)."""
    window = Window(size + 1)
    before, before_last = TailMedian(window, size), TailMedian(window, size)
    med, _ = stats.trailing_median_mad_at(x, size, min_points, np.arange(x.size), mad=False)
    for i, v in enumerate(x.tolist()):
        if asks[i % len(asks)]:
            got = before.before(i, i, min_points)
            assert got == med[i] or (got != got and med[i] != med[i]), (i, got, med[i])
        window.push(v)
        # ... and from the window's next point on, of the points before its last one.
        if asks[(i + 7) % len(asks)]:
            got = before_last.before(i, i + 1, min_points)
            assert got == med[i] or (got != got and med[i] != med[i]), (i, got, med[i])


@settings(max_examples=300, deadline=None)
@given(series, st.sampled_from([12, 50]), st.lists(st.booleans(), min_size=1, max_size=20),
       st.sampled_from([0.0, 0.01, 0.05, 0.3, 2.0]))
def test_jitter_under_a_bar_is_the_jitter_under_it_however_rarely_computed(x, size, asks, bar):
    """Asked at irregular points, `jitter_under` answers what the jitter of the window would:
    its value under the bar, None at or above it (or NaN), while skipping the points it is sure of."""
    rng = np.random.default_rng(x.size)
    noisy = np.exp(rng.normal(0.0, rng.uniform(0.0, 1.0), x.size) + np.linspace(1, 0, x.size))
    for values in (x.tolist(), noisy.tolist()):
        channel = Channel("train_loss", 256)
        recent = RecentLogs(channel, size, np.log)
        for i, v in enumerate(values):
            channel.n += 1
            channel.values.append(v)
            if asks[i % len(asks)]:
                want = stats.jitter(np.asarray(values[max(i - size, 0) : i], dtype=np.float64))
                got = recent.jitter_under(bar)
                assert got == (want if want < bar else None), (i, got, want)


class _Falls:
    def __init__(self, name, seen):
        self.name, self.seen = name, seen

    def fell(self):
        self.seen.append(self.name)


def test_a_best_levels_calls_each_run_in_order_where_it_falls_and_survive_a_pickle():
    # Two rules read where the shared best level falls (CS113 and CS202): one's call adds to the other's.
    seen = []
    x = np.array([5.0, 4.0, 3.0, 3.5, 4.0, 2.0, 6.0, 1.0])
    level = Level(3)
    level.also_on_low(_Falls("first", seen).fell)
    level.also_on_low(_Falls("second", seen).fell)
    falls = []
    for i, v in enumerate(x.tolist()):
        before = len(seen)
        level.push(v)
        if len(seen) > before:
            falls.append(i)
            assert seen[before:] == ["first", "second"]
    lows = np.fmin.accumulate(stats.smoothed_level(x, 3))
    assert falls == [i for i in range(len(x)) if lows[i] == lows[i] and not lows[i] >= (lows[i - 1] if i else np.nan)]
    assert len(falls) >= 3
    copy = pickle.loads(pickle.dumps(level))
    copy.push(0.5)
    copy.push(0.5)
    assert copy.low == 0.5 and len(seen) == 2 * len(falls)  # the copy calls copies of the readers
