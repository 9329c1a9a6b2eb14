"""The fast statistics are bit-identical to the plain numpy they replace."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import sliding_window_view

from tb_crash_signals.analysis import stats

SPECIALS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 2.0, 1e308, -1e308]


def same_bits(a, b) -> bool:
    """Equal bits, but for NaN: any sign or payload (no decision sees it)."""
    nan = np.isnan(a)
    return (
        np.array_equal(nan, np.isnan(b))
        and a[~nan].tobytes() == b[~nan].tobytes()
    )

arrays = st.lists(
    st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(SPECIALS)),
    max_size=120,
).map(lambda v: np.asarray(v, dtype=np.float64))


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    """Chunk boundaries everywhere: the chunked loops must not change any bit."""
    monkeypatch.setattr(stats, "_CACHE_CHUNK", 7)
    monkeypatch.setattr(stats, "_SMALL_CHUNK", 5)


@settings(max_examples=400, deadline=None)
@given(arrays, st.integers(1, 40))
def test_sliding_median_is_np_median_bit_for_bit(x, k):
    if x.size < k:
        return
    with np.errstate(all="ignore"):
        want = np.median(sliding_window_view(x, k), axis=1)
        got = stats.sliding_median(x, k)
    assert same_bits(got, want)


@settings(max_examples=300, deadline=None)
@given(arrays, st.integers(1, 40))
def test_sliding_extremes_select_the_window_extremes(x, w):
    x = x[~np.isnan(x)]
    if x.size < w:
        return
    view = sliding_window_view(x, w)
    assert np.array_equal(stats.sliding_max(x, w), view.max(axis=1))
    assert np.array_equal(stats.sliding_min(x, w), view.min(axis=1))


@settings(max_examples=300, deadline=None)
@given(arrays, st.integers(1, 150))
def test_window_sums_add_in_numpys_order(x, q):
    if x.size < q:
        return
    with np.errstate(all="ignore"):
        assert same_bits(stats.window_sums(x, q), sliding_window_view(x, q).sum(axis=1))


@given(st.lists(st.booleans(), max_size=80))
def test_consecutive_runs_are_run_lengths_at_the_true_points(mask):
    mask = np.asarray(mask, dtype=bool)
    pos = np.flatnonzero(mask)
    assert stats.consecutive_runs(pos).tolist() == stats.run_lengths(mask)[pos].tolist()


@given(arrays, st.integers(0, 130), st.booleans())
def test_forward_filling_from_the_anchor_fills_as_from_the_start(x, i, positive):
    if not x.size:
        return
    i = min(i, x.size - 1)
    j = stats.finite_anchor(x, i, positive)
    assert j <= i
    y = np.where(x > 0, x, np.nan) if positive else x
    filled = stats.ffill_nonfinite(y)
    assert np.array_equal(stats.ffill_nonfinite(y[j:]), filled[j:], equal_nan=True)


def _numpy_noise_decades(window):
    x = np.asarray(window, dtype=np.float64)
    x = x[np.isfinite(x) & (x > 0)]
    if x.size < 10:
        return float("nan")
    q75, q25 = np.percentile(np.log10(x), [75, 25])
    return float(q75 - q25)


def _numpy_log_spread(window):
    x = np.asarray(window, dtype=np.float64)
    x = x[np.isfinite(x) & (x > 0)]
    if x.size < 10:
        return float("nan")
    lg = np.log(x)
    return float(stats.MAD_TO_SIGMA * np.median(np.abs(lg - np.median(lg))))


_window_values = st.one_of(
    st.floats(min_value=1e-300, max_value=1e300),
    st.sampled_from([0.0, -1.0, float("nan"), float("inf"), -float("inf"), 1.0, 2.5]),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_window_values, max_size=130))
def test_noise_decades_and_log_spread_are_numpys_bit_for_bit(window):
    for ours, theirs in ((stats.noise_decades, _numpy_noise_decades), (stats.log_spread, _numpy_log_spread)):
        got, want = ours(window), theirs(window)
        assert (got != got and want != want) or got == want, (ours.__name__, got, want)


@settings(max_examples=200, deadline=None)
@given(st.lists(_window_values, max_size=300), st.sampled_from([5, 10, 50, 128]))
def test_the_noise_at_many_ends_is_that_of_each_window(values, window):
    values = np.asarray(values, dtype=np.float64)
    # ... and the same length of positive finite values, whose windows take the vectorised path.
    positive = np.exp(3.0 * np.random.default_rng(values.size).standard_normal(values.size))
    for series in (values, positive):
        ends = np.arange(series.shape[0] + 1)
        for at, one in ((stats.noise_decades_at, stats.noise_decades), (stats.jitter_at, stats.jitter),
                        (stats.log_spread_at, stats.log_spread)):
            got = at(series, ends, window)
            for e, g in zip(ends.tolist(), got.tolist()):
                want = one(series[max(e - window, 0) : e])
                assert (g != g and want != want) or g == want, (at.__name__, e, g, want)


@settings(max_examples=200, deadline=None)
@given(st.lists(_window_values, max_size=300), st.sampled_from([5, 10, 50, 128]),
       st.sampled_from([0.05, 0.3, 0.5, 2.0]), st.floats(min_value=0.0, max_value=3.0))
def test_noisy_at_is_the_noise_at_each_end_against_the_limit(values, window, limit, scale):
    values = np.asarray(values, dtype=np.float64)
    # ... and positive finite values whose windows' ranges fall on both sides of the limit.
    positive = np.exp(scale * np.random.default_rng(values.size).standard_normal(values.size))
    for series in (values, positive):
        ends = np.arange(series.shape[0] + 1)
        want = stats.noise_decades_at(series, ends, window) >= limit
        assert (stats.noisy_at(series, ends, window, limit) == want).all()
        some = ends[::3]
        assert (stats.noisy_at(series, some, window, limit) == want[::3]).all()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(min_value=-700, max_value=700), max_size=80))
def test_jitter_of_a_log_list_is_numpys_bit_for_bit(logs):
    got, want = stats.jitter_of_log_list(logs), stats.jitter_of_logs(np.asarray(logs, dtype=np.float64))
    assert (got != got and want != want) or got == want, (got, want)


def test_jitter_reads_the_noise_around_a_trend_not_the_trend():
    t = np.arange(40)
    assert stats.jitter(3.0 * np.exp(-t / 4.0) + 0.2) < 0.01  # smooth, however fast it falls and bends
    rng = np.random.default_rng(0)
    noisy = (3.0 * np.exp(-t / 4.0) + 0.2) * np.exp(0.2 * rng.standard_normal(40))
    assert 0.1 < stats.jitter(noisy) < 0.4  # estimates the log noise's standard deviation (0.2)
    assert np.isnan(stats.jitter([1.0, 2.0, np.nan, -1.0] * 3))  # under 10 positive finite values


@settings(max_examples=300, deadline=None)
@given(arrays)
def test_jitter_of_a_short_series_is_jitters_bit_for_bit(x):
    want = stats.jitter(x)
    for values in (x, x.tolist()):
        got = stats.jitter_of_short(values)
        assert (got != got and want != want) or got == want, (got, want)


def test_hinge_fit_finds_where_a_flat_series_starts_to_grow():
    rng = np.random.default_rng(3)
    x = np.arange(100, 140) * 5  # 40 points, 5 steps apart
    y = np.where(x < 600, 0.0, 0.04 * (x - 600)) + 0.05 * rng.standard_normal(x.size)
    k, a, b, r2 = stats.hinge_fit(x, y, least=10)
    assert 17 <= k <= 23  # the growth starts at point 20
    assert b == pytest.approx(0.04, rel=0.1)
    assert a == pytest.approx(0.0, abs=0.1) and r2 > 0.9
    # A line from its first point: the breakpoint stays at (or near) the start, the slope the line's.
    k, _, b, _ = stats.hinge_fit(x, 0.02 * (x - x[0]) + 0.05 * rng.standard_normal(x.size), least=10)
    assert k <= 3 and b == pytest.approx(0.02, rel=0.1)
    # At least `least` points from the breakpoint on, whatever the data.
    k, _, _, _ = stats.hinge_fit(x, np.where(np.arange(x.size) < 38, 0.0, 5.0), least=10)
    assert k <= x.size - 10


@pytest.mark.parametrize("first, second, late", [
    (0, 1, False), (1, 2, False),  # logged every step from its start
    (500, 1000, False),  # the HuggingFace Trainer's default: every 500 steps, from step 500
    (49, 99, False),  # Lightning's: every 50, the first at 49
    (1500, 1501, True),  # a job resumed from its checkpoint at step 1500, logging every step
    (1500, 2000, True),  # ... every 500 steps, from a checkpoint at 1000
    (1000, 1500, False),  # ... from one at 500: one interval short of telling
])
def test_a_log_begins_past_its_start_when_its_first_step_is_three_intervals_in(first, second, late):
    assert stats.starts_late(first, second) is late
