"""Causal, vectorised statistics the rules share (pure numpy).

"Trailing" always means the window of points strictly before i, so a value
never takes part in its own baseline: a spike cannot hide itself.
"""

from __future__ import annotations

import contextlib
import math
import threading
from bisect import bisect_left as _bisect_left

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

# Rows of windows handled per chunk: bounds the memory of the window copies
# that np.median makes (chunk * window * 8 bytes).
_CHUNK = 1 << 15
# Elements per chunk of the element-wise pipelines (sliding extremes, medians
# of 9, window sums): a few float64 arrays of this length stay in a 1 MiB L2
# cache, and reused buffers spare the page faults of fresh 8 MB temporaries.
_CACHE_CHUNK = 1 << 14
# Chunk of pipelines whose temporaries are fresh arrays: 64 KiB ones come from
# the heap's free lists (glibc maps blocks from 128 KiB afresh, page by page).
_SMALL_CHUNK = 1 << 13

# A normal distribution's standard deviation is 1.4826 x its median absolute deviation.
MAD_TO_SIGMA = 1.4826
LN10 = math.log(10.0)

# Per-thread memo of intermediate arrays, active inside memo().
_MEMO = threading.local()


def positive_log(values: np.ndarray) -> np.ndarray:
    """log(v) where v > 0, NaN elsewhere (NaN included); memoised inside memo().

    Same values as np.where(v > 0, np.log(np.where(v > 0, v, 1.0)), np.nan).
    """
    cache = getattr(_MEMO, "cache", None)
    if cache is not None:
        hit = cache.get(("log", id(values)))
        if hit is not None and hit[0] is values:
            return hit[1]
    out = np.full(values.shape[0], np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        np.log(values, out=out, where=values > 0)
    if cache is not None:
        cache[("log", id(values))] = (values, out)
        out.flags.writeable = False
    return out


def ffill_nonfinite(values: np.ndarray) -> np.ndarray:
    """Replaces NaN/Inf by the previous finite value (NaN before the first)."""
    finite = np.isfinite(values)
    if finite.all():
        return values
    idx = np.where(finite, np.arange(values.shape[0]), -1)
    np.maximum.accumulate(idx, out=idx)
    out = np.where(idx >= 0, values[np.maximum(idx, 0)], np.nan)
    return out


def trailing_median_mad_at(
    values: np.ndarray, window: int, min_points: int, at: np.ndarray, mad: bool = True
) -> tuple[np.ndarray, np.ndarray | None]:
    """Median and MAD of the up-to-`window` finite-filled points before each index of `at`.

    An index with fewer than `min_points` predecessors gets NaN. Returns
    arrays aligned with `at` (the MAD is None unless `mad`): rules pre-filter
    with a cheap necessary condition and pay for medians only where it matters.
    """
    at = np.asarray(at, dtype=np.int64)
    med = np.full(at.shape[0], np.nan)
    dev = np.full(at.shape[0], np.nan) if mad else None
    ok = at >= min_points
    if not ok.any():
        return med, dev
    x = ffill_nonfinite(values.astype(np.float64, copy=False))
    # Expanding windows for the first points (fewer than `window` before them).
    for j in np.flatnonzero(ok & (at < window)).tolist():
        w = x[: at[j]]
        w = w[np.isfinite(w)]
        if w.size >= min_points:
            m = np.median(w)
            med[j] = m
            if mad:
                dev[j] = np.median(np.abs(w - m))
    full = np.flatnonzero(ok & (at >= window))
    if full.size:
        wins = sliding_window_view(x[:-1], window)  # row j covers x[j:j+window]
        for start in range(0, full.size, _CHUNK):
            pos = full[start : start + _CHUNK]
            block = wins[at[pos] - window]
            m = np.median(block, axis=1)
            med[pos] = m
            if mad:
                dev[pos] = np.median(np.abs(block - m[:, None]), axis=1)
    return med, dev


def finite_anchor(values: np.ndarray, i: int, positive: bool = False) -> int:
    """The last j <= i where values[j] is finite (and > 0 if `positive`), else i.

    Forward-filling values[j:] gives, from j on, the same numbers as
    forward-filling all of values (non-finite points take the last finite
    value; before any, they stay NaN): a rule that looks back a bounded
    number of points before i can start its slice at j.
    """
    if i <= 0:
        return 0
    size = 64
    while True:
        lo = max(i - size + 1, 0)
        part = values[lo : i + 1]
        ok = np.isfinite(part)
        if positive:
            ok &= part > 0
        hit = np.flatnonzero(ok)
        if hit.size:
            return lo + int(hit[-1])
        if lo == 0:
            return i
        size *= 4


def consecutive_runs(pos: np.ndarray) -> np.ndarray:
    """For sorted unique integers, how many consecutive integers end at each.

    Equal to run_lengths(mask)[pos] for the mask that is True exactly at
    `pos`, at the cost of len(pos) rather than of the mask's length.
    """
    pos = np.asarray(pos, dtype=np.int64)
    if pos.size == 0:
        return np.zeros(0, np.int64)
    k = np.arange(pos.size)
    starts = np.ones(pos.size, bool)
    starts[1:] = pos[1:] - pos[:-1] != 1
    first = np.maximum.accumulate(np.where(starts, k, 0))
    return k - first + 1


def chunks(start: int, stop: int, size: int | None = None):
    """(a, b) bounds of consecutive chunks of [start, stop) (of _SMALL_CHUNK points)."""
    size = size or _SMALL_CHUNK
    for a in range(start, stop, size):
        yield a, min(a + size, stop)


def window_sums(x: np.ndarray, q: int) -> np.ndarray:
    """x[j:j+q].sum() for every j, bit-identical to numpy's own sum.

    numpy sums a row with its pairwise algorithm (sequentially below 8
    values, with 8 interleaved accumulators up to 128, halving above);
    the same additions in the same order over shifted slices, chunk by
    chunk, are ~10x faster than reducing the rows of a window view.
    """
    m = max(x.shape[0] - q + 1, 0)
    out = np.empty(m)
    for a, b in chunks(0, m):
        out[a:b] = _pairwise_sum([x[a + j : b + j] for j in range(q)])
    out += 0.0  # the reduction starts from 0.0 (a sum of -0.0s is 0.0)
    return out


def _pairwise_sum(cols: list) -> np.ndarray:
    """numpy's pairwise sum of the columns (up to the sign of a zero total)."""
    n = len(cols)
    if n < 8:
        total = cols[0]
        for c in cols[1:]:
            total = total + c
        return total
    if n <= 128:
        acc = cols[:8]
        stop = n - n % 8
        for i in range(8, stop, 8):
            acc = [acc[k] + cols[i + k] for k in range(8)]
        total = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
        for c in cols[stop:]:
            total += c
        return total
    half = n // 2
    half -= half % 8
    return _pairwise_sum(cols[:half]) + _pairwise_sum(cols[half:])


@contextlib.contextmanager
def memo(carry: dict | None = None):
    """Within this block, trailing_min results are reused for the same array object.

    The engine opens one per analysis (its series are not modified while
    the rules run): loss-spike and loss-divergence share the train loss's
    trailing minimum.

    `carry` (see `carried`) holds values over a prefix of the data that the
    rules left in an earlier analysis; the engine passes it only when the
    data have just grown since, under the same config. Rules add to it.
    """
    prev = getattr(_MEMO, "cache", None), getattr(_MEMO, "carry", None)
    _MEMO.cache = {}
    _MEMO.carry = {} if carry is None else carry
    try:
        yield
    finally:
        _MEMO.cache, _MEMO.carry = prev


def carried(key):
    """What a rule carried under `key` from an earlier analysis of this run, or None.

    For running values over a prefix (the plateau's best loss so far), which
    are the same for any longer data: a resumed analysis then continues them
    over the new points instead of recomputing the whole prefix.
    """
    carry = getattr(_MEMO, "carry", None)
    return None if carry is None else carry.get(key)


def carry(key, value) -> None:
    """Leaves `value` for the next analysis of this run (see `carried`)."""
    store = getattr(_MEMO, "carry", None)
    if store is not None:
        store[key] = value


def trailing_min(values: np.ndarray, window: int) -> np.ndarray:
    """Min of the up-to-`window` finite-filled points before each i (NaN for i == 0)."""
    cache = getattr(_MEMO, "cache", None)
    if cache is not None:
        hit = cache.get((id(values), window))
        if hit is not None and hit[0] is values:
            return hit[1]
    out = _trailing_min(values, window)
    if cache is not None:
        cache[(id(values), window)] = (values, out)
        out.flags.writeable = False
    return out


def _trailing_min(values: np.ndarray, window: int) -> np.ndarray:
    # The min over the finite-filled x. The fill leaves NaN only before the
    # first finite point: those count as +inf (never the min), and a window
    # holding nothing else gives NaN.
    n = values.shape[0]
    out = np.empty(n)
    out[:1] = np.nan
    if n < 2:
        return out
    x = ffill_nonfinite(values.astype(np.float64, copy=False))
    filled_all = bool(np.isfinite(x[0]))  # ffill leaves NaN only in a prefix
    if not filled_all:
        x = np.where(np.isfinite(x), x, np.inf)
    head = min(window, n)
    np.minimum.accumulate(x[: head - 1], out=out[1:head])
    if n > window:
        sliding_min(x[:-1], window, out=out[window:])
    if not filled_all:
        out[np.isposinf(out)] = np.nan
    return out


def trailing_max(values: np.ndarray, window: int) -> np.ndarray:
    """Max of the up-to-`window` finite-filled points before each i (NaN for i == 0);
    memoised inside memo() like trailing_min."""
    cache = getattr(_MEMO, "cache", None)
    if cache is not None:
        hit = cache.get(("max", id(values), window))
        if hit is not None and hit[0] is values:
            return hit[1]
    n = values.shape[0]
    out = np.empty(n)
    out[:1] = np.nan
    if n >= 2:
        x = ffill_nonfinite(values.astype(np.float64, copy=False))
        filled_all = bool(np.isfinite(x[0]))
        if not filled_all:
            x = np.where(np.isfinite(x), x, -np.inf)
        head = min(window, n)
        np.maximum.accumulate(x[: head - 1], out=out[1:head])
        if n > window:
            sliding_max(x[:-1], window, out=out[window:])
        if not filled_all:
            out[np.isneginf(out)] = np.nan
    if cache is not None:
        cache[("max", id(values), window)] = (values, out)
        out.flags.writeable = False
    return out


def sliding_max(y: np.ndarray, window: int, out: np.ndarray | None = None) -> np.ndarray:
    """max(y[j:j+window]) for every j (no NaN in y)."""
    return _sliding_extreme(np.maximum, y, window, out)


def sliding_min(y: np.ndarray, window: int, out: np.ndarray | None = None) -> np.ndarray:
    """min(y[j:j+window]) for every j (no NaN in y)."""
    return _sliding_extreme(np.minimum, y, window, out)


def _sliding_extreme(op, y: np.ndarray, window: int, out) -> np.ndarray:
    """op (np.maximum or np.minimum) over every `window`-point window of y.

    Equal to ``op.reduce(sliding_window_view(y, window), axis=1)`` (min and
    max select one of their inputs, so the grouping changes no value; only
    the sign of a zero tied with its opposite can differ, which no comparison
    sees) at O(n log window): extremes of spans 1, 2, 4, ... are combined by
    doubling, and the window is the extreme of two overlapping spans.
    Cache-sized chunks keep every pass in cache.
    """
    w = max(int(window), 1)
    m = max(y.shape[0] - w + 1, 0)
    if out is None:
        out = np.empty(m, dtype=y.dtype)
    if m == 0:
        return out
    chunk = min(_CACHE_CHUNK, m)
    bufs = (np.empty(chunk + w), np.empty(chunk + w))
    for a in range(0, m, chunk):
        b = min(a + chunk, m)
        src, size, span = y[a : b + w - 1], b - a + w - 1, 1
        while 2 * span <= w:  # src[j] = extreme of the `span` points from j
            size -= span
            dst = bufs[0][:size]
            op(src[:size], src[span : span + size], out=dst)
            src, span, bufs = dst, 2 * span, bufs[::-1]
        op(src[: b - a], src[w - span : w - span + b - a], out=out[a:b])
    return out


def run_lengths(mask: np.ndarray) -> np.ndarray:
    """For each i, how many consecutive True values end at i (0 where False)."""
    mask = np.asarray(mask, dtype=bool)
    n = mask.shape[0]
    if n == 0:
        return np.zeros(0, np.int64)
    idx = np.arange(1, n + 1)
    last_false = np.where(~mask, idx, 0)
    np.maximum.accumulate(last_false, out=last_false)
    return np.where(mask, idx - last_false, 0)


def finite_peak(values: np.ndarray) -> np.ndarray:
    """The largest finite value up to each point (NaN before any): what the online monitor's
    channels keep as `max_finite`."""
    return np.fmax.accumulate(np.where(np.isfinite(values), values, np.nan))


def value_at_or_before(series_steps, series_values, steps) -> np.ndarray:
    """The last value of a series logged at or before each of `steps` (NaN if none)."""
    pos = np.searchsorted(series_steps, steps, side="right") - 1
    out = np.full(np.shape(steps), np.nan)
    ok = pos >= 0
    out[ok] = series_values[pos[ok]]
    return out


def linear_fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """Least squares y = a + b x; returns (a, b, r2) with x taken relative to x[0]."""
    x = x.astype(np.float64) - float(x[0])
    xm, ym = x.mean(), y.mean()
    dx, dy = x - xm, y - ym
    sxx = float(dx @ dx)
    if sxx <= 0:
        return float(ym), 0.0, 0.0
    b = float(dx @ dy) / sxx
    a = ym - b * xm
    ss_tot = float(dy @ dy)
    resid = dy - b * dx
    r2 = 1.0 - float(resid @ resid) / ss_tot if ss_tot > 0 else 0.0
    return float(a), b, r2


def hinge_fit(x: np.ndarray, y: np.ndarray, least: int) -> tuple[int, float, float, float]:
    """Least squares y = a + b max(x - x[k], 0) over the breakpoints k that leave at least `least`
    points from k on: a flat stretch, then a line (k = 0: a line). Returns (k, a, b, r2 of the
    points from k on about their own line's fit, as `linear_fit` gives it)."""
    x = x.astype(np.float64) - float(x[0])
    n = x.shape[0]
    last = max(n - max(least, 2), 0)
    ks = np.arange(last + 1)
    # Column j of h: max(x - x[k_j], 0) for every point.
    h = np.maximum(x[:, None] - x[None, ks], 0.0)
    hm = h.mean(axis=0)
    ym = y.mean()
    dh = h - hm
    dy = y - ym
    shh = np.einsum("ij,ij->j", dh, dh)
    shy = dy @ dh
    with np.errstate(invalid="ignore", divide="ignore"):
        gain = np.where(shh > 0, shy * shy / shh, 0.0)
    k = int(np.argmax(gain))
    b = float(shy[k] / shh[k]) if shh[k] > 0 else 0.0
    a = float(ym - b * hm[k])
    _, _, r2 = linear_fit(x[k:], y[k:])
    return k, a, b, r2


def trailing_median_inclusive(values: np.ndarray, k: int) -> np.ndarray:
    """Median of the up-to-k points ending at each i (a causal smoother)."""
    n = values.shape[0]
    x = ffill_nonfinite(values.astype(np.float64, copy=False))
    out = np.empty(n)
    k = max(1, k)
    with np.errstate(over="ignore"):  # two huge middle values: inf, as np.median gives
        for i in range(min(k - 1, n)):
            w = x[: i + 1]
            w = w[np.isfinite(w)]
            out[i] = np.median(w) if w.size else np.nan
    if n >= k:
        sliding_median(x, k, out=out[k - 1 :])
    return out


def smoothed_level(values: np.ndarray, k: int) -> np.ndarray:
    """trailing_median_inclusive, NaN where a full window still holds the NaN before the first
    finite point (what streaming.Level computes point by point); memoised inside memo() (read
    only then): several rules read the train loss's level and best level."""
    cache = getattr(_MEMO, "cache", None)
    if cache is not None:
        hit = cache.get(("level", id(values), k))
        if hit is not None and hit[0] is values:
            return hit[1]
    out = _smoothed_level(values, k)
    if cache is not None:
        cache[("level", id(values), k)] = (values, out)
        out.flags.writeable = False
    return out


# A best level is a median of at least this many points, as the initial level is: the median of a
# noisy loss's first few points is no level the run reached (streaming.Level's `low_from`).
BEST_FROM = 10


def best_levels(values: np.ndarray, k: int) -> np.ndarray:
    """The best level at each point: the lowest smoothed_level of `k` points so far, counted from
    the point where its window holds min(k, BEST_FROM) points (NaN before); memoised as
    smoothed_level is (CS113, CS202 and CS201 read the same one)."""
    cache = getattr(_MEMO, "cache", None)
    if cache is not None:
        hit = cache.get(("best", id(values), k))
        if hit is not None and hit[0] is values:
            return hit[1]
    out = smoothed_level(values, k).copy()
    out[: min(k, BEST_FROM) - 1] = np.nan
    np.fmin.accumulate(out, out=out)
    if cache is not None:
        cache[("best", id(values), k)] = (values, out)
        out.flags.writeable = False
    return out


def _smoothed_level(values: np.ndarray, k: int) -> np.ndarray:
    out = trailing_median_inclusive(values, k)
    finite = np.flatnonzero(np.isfinite(values))
    first = int(finite[0]) if finite.size else values.shape[0]
    k = max(1, k)
    if first > 0 and values.shape[0] >= k:
        out[k - 1 : first + k - 1] = np.nan
    return out


# The interquartile range of a normal distribution, in standard deviations.
QUARTILES_PER_SIGMA = 1.3489795003921634


def jitter_decades(jitter):
    """How many decades apart the quartiles of white noise lie whose natural-log standard
    deviation is `jitter` (a float or an array; NaN stays NaN): noise_decades read around a
    series' own trend, which its quartiles count as noise."""
    return QUARTILES_PER_SIGMA * jitter / LN10


def noise_decades(window) -> float:
    """Interquartile range of log10 of the positive finite values (NaN under 10 of them): how
    many decades a per-step series spans at the scale of its ordinary noise."""
    lg = _positive_logs(window, np.log10)
    if lg is None:
        return float("nan")
    return percentile_sorted(lg, 0.75) - percentile_sorted(lg, 0.25)


def _full_windows(values: np.ndarray, ends: np.ndarray, window: int) -> np.ndarray:
    """Which windows values[e - window : e] exist whole and hold only positive finite values."""
    good = np.isfinite(values) & (values > 0)
    bad_before = np.concatenate([[0], np.cumsum(~good)])
    full = ends >= window
    full[full] = bad_before[ends[full]] == bad_before[ends[full] - window]
    return full


def _per_window(values: np.ndarray, ends, window: int, series, width: int, of_rows, one) -> np.ndarray:
    """one(values[max(e - window, 0) : e]) for each e of `ends`, the same numbers, for rules that
    judge every point of a long stretch (a run stuck after a divergence): windows of `window`
    positive finite points at once, as `width`-wide rows of `series()` (their logs, or the logs'
    second differences, over the whole series: row j is window j's) reduced by `of_rows`, which
    takes along rows the steps `one` takes on a window (numpy's median and percentile do, row by
    row); the others one by one."""
    ends = np.asarray(ends, dtype=np.int64)
    out = np.empty(ends.shape[0])
    idx = np.flatnonzero(_full_windows(values, ends, window) & (window >= 10))
    if idx.size:
        rows = sliding_window_view(series(), width)
        for a in range(0, idx.size, _ROWS_PER_CHUNK):
            part = idx[a : a + _ROWS_PER_CHUNK]
            out[part] = of_rows(rows[ends[part] - window])
    rest = np.ones(ends.shape[0], bool)
    rest[idx] = False
    for k in np.flatnonzero(rest).tolist():
        e = int(ends[k])
        out[k] = one(values[max(e - window, 0) : e])
    return out


_ROWS_PER_CHUNK = 4096


def _logs_of(values: np.ndarray, log) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return log(values.astype(np.float64, copy=False))


def _mad_rows(rows: np.ndarray) -> np.ndarray:
    return np.median(np.abs(rows - np.median(rows, axis=1)[:, None]), axis=1)


def jitter_at(values: np.ndarray, ends, window: int) -> np.ndarray:
    """jitter of the `window` points before each of `ends` (see _per_window)."""
    return _per_window(values, ends, window, lambda: _second_differences_of_logs(values), window - 2,
                       lambda rows: MAD_TO_SIGMA * _mad_rows(rows) / math.sqrt(6.0), jitter)


def _second_differences_of_logs(values: np.ndarray) -> np.ndarray:
    # A loss of exactly 0 logs -inf, and -inf - -inf is NaN: that window's row is not finite, and
    # _per_window reads it the slow way, without a warning on the user's screen.
    logs = _logs_of(values, np.log)
    with np.errstate(invalid="ignore"):
        return np.diff(logs, 2)


def log_spread_at(values: np.ndarray, ends, window: int) -> np.ndarray:
    """log_spread of the `window` points before each of `ends` (see _per_window)."""
    return _per_window(values, ends, window, lambda: _logs_of(values, np.log), window,
                       lambda rows: MAD_TO_SIGMA * _mad_rows(rows), log_spread)


def noisy_at(values: np.ndarray, ends, window: int, limit: float) -> np.ndarray:
    """noise_decades_at(values, ends, window) >= limit, the same booleans, for the noise gates of
    rules that judge every point of a long stretch (a converged run: a million points). A window
    of positive finite values whose log10 range (its largest minus its smallest) is under `limit`
    has its quartiles closer still: only the others are computed."""
    ends = np.asarray(ends, dtype=np.int64)
    out = np.zeros(ends.shape[0], bool)
    exact = np.ones(ends.shape[0], bool)
    full = np.flatnonzero(_full_windows(values, ends, window) & (window >= 10))
    if full.size:
        logs = _logs_of(values, np.log10)
        lo, hi = int(ends[full].min()) - window, int(ends[full].max())  # the span the full windows cover
        span = logs[lo:hi]
        spread = sliding_max(span, window) - sliding_min(span, window)
        # A margin of rounding: the quartiles' interpolation may land an ulp past the extremes.
        exact[full] = ~(spread[ends[full] - window - lo] < limit * (1.0 - 1e-9))
    where = np.flatnonzero(exact)
    if where.size:
        out[where] = noise_decades_at(values, ends[where], window) >= limit
    return out


def noise_gate_at(values: np.ndarray, ends, window: int, limit: float) -> np.ndarray:
    """noise_decades_at as a gate that only compares it with `limit` (>=) reads it, at the cost of
    noisy_at: `limit` where the noise reaches it, NaN where it does not (the same comparisons)."""
    return np.where(noisy_at(values, ends, window, limit), limit, np.nan)


def noise_decades_at(values: np.ndarray, ends, window: int) -> np.ndarray:
    """noise_decades of the `window` points before each of `ends` (see _per_window)."""
    def of_rows(rows):
        return _percentile_rows(rows, 0.75) - _percentile_rows(rows, 0.25)

    return _per_window(values, ends, window, lambda: _logs_of(values, np.log10), window, of_rows, noise_decades)


def log_spread(window) -> float:
    """A robust standard deviation of log of the positive finite values (1.4826 x their MAD;
    NaN under 10 of them)."""
    lg = _positive_logs(window, np.log)
    if lg is None:
        return float("nan")
    return MAD_TO_SIGMA * mad_sorted(lg)


_nan_float, _SQRT6 = float("nan"), math.sqrt(6.0)


def jitter(values) -> float:
    """The point-to-point noise of a series around its own trend, in log units: a robust estimate
    (1.4826 x the MAD, over sqrt(6)) of the standard deviation of white noise from the second
    differences of the logs of its positive finite values (NaN under 10 of them). A smooth curve,
    however fast it falls or bends, has nearly none; tiny-batch noise has much."""
    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x) & (x > 0)]
    return jitter_of_logs(np.log(x))


def jitter_of_short(values) -> float:
    """`jitter` of a few tens of values (a list, a deque or an array), with numpy's logs and the
    rest in Python: the same numbers, without the dozen numpy calls that cost more than the work."""
    positive = [x for x in values if x > 0 and x - x == 0.0]
    if len(positive) < 10:
        return _nan_float
    return jitter_of_log_list(np.log(np.array(positive, dtype=np.float64)).tolist())


def jitter_of_logs(logs) -> float:
    """`jitter` from the logs of a series' positive finite values, in order (NaN under 10)."""
    if len(logs) < 10:
        return float("nan")
    d = np.diff(np.asarray(logs, dtype=np.float64), 2)
    return MAD_TO_SIGMA * float(np.median(np.abs(d - np.median(d)))) / math.sqrt(6.0)


def jitter_of_log_list(logs: list) -> float:
    """jitter_of_logs of a short list, in Python (the same numbers: np.diff's subtractions, np.median's
    middle values): the online monitor reads it on windows of tens of points, where numpy's calls
    cost more than the work."""
    n = len(logs)
    if n < 10:
        return _nan_float
    d = second_differences(logs)
    d.sort()
    return jitter_of_sorted_diffs(d)


def second_differences(logs: list) -> list:
    """np.diff(logs, 2) of a list, in Python: the same subtractions, so the same numbers."""
    return [(logs[i + 2] - logs[i + 1]) - (logs[i + 1] - logs[i]) for i in range(len(logs) - 2)]


def jitter_of_sorted_diffs(d: list) -> float:
    """jitter_of_log_list from its second differences, sorted (NaN under 8 of them)."""
    if len(d) < 8:
        return _nan_float
    return MAD_TO_SIGMA * mad_sorted(d) / _SQRT6


def mad_sorted(xs: list) -> float:
    """np.median(np.abs(xs - np.median(xs))) of sorted, NaN-free values, without building the
    deviations: they are the two sorted runs either side of the median (below it read backwards),
    and their middle order statistics are found by bisecting on how many come from each run."""
    n = len(xs)
    m = median_sorted(xs)
    split = _bisect_left(xs, m)
    below, above = split, n - split
    # The c smallest deviations: i of them from below the median, c - i from above.
    c = n // 2 if n % 2 == 0 else n // 2 + 1
    lo, hi = max(0, c - above), min(c, below)
    while lo < hi:
        i = (lo + hi) // 2
        # below's (i+1)-th smallest deviation against above's (c-i)-th
        if m - xs[split - 1 - i] < xs[split + c - i - 1] - m:
            lo = i + 1
        else:
            hi = i
    i, j = lo, c - lo
    a = m - xs[split - i] if i else -math.inf
    b = xs[split + j - 1] - m if j else -math.inf
    kth = a if a > b else b
    if n % 2:
        return abs(kth)  # x - m is -0.0 for x = -0.0 and m = 0.0; abs(x - m) is not
    a = m - xs[split - 1 - i] if i < below else math.inf
    b = xs[split + j] - m if j < above else math.inf
    return abs((kth + (a if a < b else b)) / 2.0)


# These run at every point of the online monitor on windows of tens of points, where a numpy
# reduction's call overhead is most of the cost: the logs stay numpy's (its log is not libm's),
# the order statistics are taken in Python, with np.median's and np.percentile's arithmetic
# (tests/unit/analysis/test_stats.py holds them to numpy's results bit for bit).

def _positive_logs(window, log) -> list | None:
    """The sorted logs of the positive finite values, or None under 10 of them."""
    x = np.asarray(window, dtype=np.float64)
    x = x[np.isfinite(x) & (x > 0)]
    if x.size < 10:
        return None
    lg = log(x).tolist()
    lg.sort()
    return lg


def median_sorted(xs: list) -> float:
    """np.median of sorted, NaN-free values."""
    n = len(xs)
    mid = n // 2
    return xs[mid] if n % 2 else (xs[mid - 1] + xs[mid]) / 2.0


def percentile_sorted(xs: list, q: float) -> float:
    """np.percentile(xs, 100 q) (method "linear") of sorted, NaN-free values."""
    n = len(xs)
    virtual = (n - 1) * q
    below = math.floor(virtual)
    gamma = virtual - below
    a, b = xs[below], xs[min(below + 1, n - 1)]
    diff = b - a
    return b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma


def _percentile_rows(rows: np.ndarray, q: float) -> np.ndarray:
    """percentile_sorted of each row of NaN-free values: one np.partition at the upper of the two
    positions it interpolates (the lower is the largest left of it; np.percentile partitions at
    both, a path of numpy's ~5x slower)."""
    n = rows.shape[1]
    virtual = (n - 1) * q
    below = math.floor(virtual)
    gamma = virtual - below
    above = min(below + 1, n - 1)
    part = np.partition(rows, above, axis=1)
    b = part[:, above]
    a = part[:, :above].max(axis=1) if above > below else b
    diff = b - a
    return b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma


# A log whose first step is at least this many logging intervals in begins past its run's start.
LATE_START = 3


def starts_late(first_step, second_step) -> bool:
    """Whether a series whose first two points lie at these steps begins past its run's start:
    its first step at least LATE_START of its logging intervals in (the gap between the two).
    A job resumed from a checkpoint into a new log directory (the HuggingFace Trainer writes each
    job to a new `runs/<time>` directory) logs from the checkpoint's step on, its loss already at
    the level the run had learnt; a fresh run logs its first point at step 0 or one interval in
    (every `logging_steps` from that many, Lightning's first at 49 of 50)."""
    gap = second_step - first_step
    return first_step > 0 and gap > 0 and first_step >= LATE_START * gap


# The finite points whose median is a run's initial level.
INITIAL_POINTS = 10


def initial_level(values: np.ndarray) -> tuple[float, int]:
    """A run's initial level, the median of its first 10 finite points (INITIAL_POINTS), and the
    index of the 10th (the level is known from the next point on); (NaN, len) when there are fewer."""
    where = np.flatnonzero(np.isfinite(values))[:INITIAL_POINTS]
    if where.size < INITIAL_POINTS:
        return float("nan"), values.shape[0]
    return float(np.median(values[where])), int(where[-1])


def starting_level(values: np.ndarray, index: np.ndarray) -> np.ndarray:
    """For each point of `index`: the median of the finite points before it among the series'
    first 10 finite points (NaN before the first one), as a stream reads its channel's head."""
    first = np.flatnonzero(np.isfinite(values))[:10]
    with np.errstate(over="ignore", invalid="ignore"):  # huge values: inf, as small_median gives
        medians = np.array([np.nan] + [np.median(values[first[:j]]) for j in range(1, first.size + 1)])
    return medians[np.searchsorted(first, index, side="left")]


def known_level_at(series, k: int, steps) -> tuple[np.ndarray, float]:
    """A series' level (smoothed_level of k points) at its last point at or before each of
    `steps`, NaN where its initial level was not known yet (before its 10th finite point), and that
    initial level (NaN if it never is): what a stream reads from the channel's shared level and
    initial level at a later signal's point of the same step."""
    init, known_after = initial_level(series.values)
    level = smoothed_level(series.values, k)
    known = np.full(level.shape, np.nan)
    known[known_after:] = level[known_after:]
    return value_at_or_before(series.steps, known, steps), init


_NETWORK_MAX = 9  # windows up to this size use a sorting network


def sliding_median(x: np.ndarray, k: int, out: np.ndarray | None = None) -> np.ndarray:
    """np.median of every k-point window of x (bit-identical, faster for small k).

    Small windows are sorted column-wise by min/max networks (which select
    inputs, and propagate NaN as np.median does), in cache-sized chunks;
    the median is the middle column, or for even k the mean of the two
    middle ones computed as np.median computes it.
    """
    m = max(x.shape[0] - k + 1, 0)
    if out is None:
        out = np.empty(m)
    if k > _NETWORK_MAX:
        return _partition_median(x, k, out)
    if k == 9:
        return _sliding_median9(x, out)
    for a in range(0, m, _CACHE_CHUNK):
        b = min(a + _CACHE_CHUNK, m)
        out[a:b] = _network_median([x[a + j : b + j] for j in range(k)])
    return out


def _partition_median(x: np.ndarray, k: int, out: np.ndarray) -> np.ndarray:
    """np.median of every k-point window of x, into out (bit-identical), for larger windows:
    np.partition of blocks of windows at the middle position (for even k, the element before it
    is the largest of those left of it), NaN where a window holds one (its maximum is NaN), and
    the mean of the middle slice as np.median takes it (its -0.0 -> 0.0). np.median itself
    copies every window at once (a 1 M-point series, 31-point windows: 250 MB) and partitions at
    two positions, a slower path of numpy's: ~10x slower."""
    m = out.shape[0]
    mid = k // 2
    rows = max(1, (1 << 18) // k)  # blocks of ~2 MB of windows
    for a in range(0, m, rows):
        b = min(a + rows, m)
        windows = sliding_window_view(x[a : b + k - 1], k)
        part = np.partition(windows, mid, axis=1)
        if k % 2:
            med = part[:, mid] + 0.0
        else:
            with np.errstate(over="ignore"):  # two huge middle values: inf, as np.median gives
                med = ((part[:, :mid].max(axis=1) + 0.0) + part[:, mid]) / 2.0
        out[a:b] = np.where(np.isnan(windows.max(axis=1)), np.nan, med)
    return out


def _sliding_median9(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """np.median of every 9-point window of x, into out (bit-identical).

    A window is three consecutive triples; with each triple sorted, its
    median is med3(max of the three minima, med3 of the three middles, min of
    the three maxima) -- the classic 19-exchange median-of-9 network, with
    only the min or the max kept where the other output is unused. Each
    triple is sorted once and shared by the three windows that contain it:
    19 min/max per point instead of 72 for the general network.
    """
    m = out.shape[0]
    chunk = max(min(_CACHE_CHUNK, m), 1)
    buf = [np.empty(chunk + 7) for _ in range(6)]
    for a in range(0, m, chunk):
        b = min(a + chunk, m)
        _median9_chunk(x[a : b + 8], out[a:b], buf)
    return out


def _median9_chunk(x, out, buf):
    k = out.shape[0]  # x holds k + 8 points
    t = k + 6  # sorted triples x[j:j+3], j < t
    # Sort each pair (x[j], x[j+1]), then each triple with x[j+2].
    p_lo, p_hi, lo, mid, hi, tmp = (v[: t + 1] for v in buf)
    np.minimum(x[:-1], x[1:], out=p_lo)
    np.maximum(x[:-1], x[1:], out=p_hi)
    np.maximum(p_lo[:t], x[2:], out=tmp[:t])
    np.minimum(p_lo[:t], x[2:], out=lo[:t])
    np.minimum(p_hi[:t], tmp[:t], out=mid[:t])
    np.maximum(p_hi[:t], tmp[:t], out=hi[:t])
    # The window at j holds the triples at j, j+3 and j+6.
    lows = p_lo[:k]
    np.maximum(lo[:k], lo[3 : k + 3], out=lows)
    np.maximum(lows, lo[6 : k + 6], out=lows)
    highs = p_hi[:k]
    np.minimum(hi[:k], hi[3 : k + 3], out=highs)
    np.minimum(highs, hi[6 : k + 6], out=highs)
    _med3(mid[:k], mid[3 : k + 3], mid[6 : k + 6], out, tmp[:k])
    _med3(lows, out, highs, out, tmp[:k])
    # np.median takes the mean of the middle slice even for odd k (so -0.0
    # becomes 0.0): do the same.
    out += 0.0


def _med3(a, b, c, out, tmp):
    """out = median of (a, b, c) = max(min(a, b), min(max(a, b), c)); out may be a or b."""
    np.maximum(a, b, out=tmp)
    np.minimum(tmp, c, out=tmp)
    np.minimum(a, b, out=out)
    np.maximum(out, tmp, out=out)


def _network_median(cols: list) -> np.ndarray:
    """np.median across k equal-length columns (k <= _NETWORK_MAX), bit-identical."""
    k = len(cols)
    if k == 3:  # median of three: four min/max
        a, b, c = cols
        return np.maximum(np.minimum(a, b), np.minimum(np.maximum(a, b), c)) + 0.0
    cols = list(cols)
    for rnd in range(k):
        for j in range(rnd % 2, k - 1, 2):
            a, b = cols[j], cols[j + 1]
            cols[j], cols[j + 1] = np.minimum(a, b), np.maximum(a, b)
    # np.median takes the mean of the middle slice even for odd k (so -0.0
    # becomes 0.0): do the same.
    if k % 2:
        return cols[k // 2] + 0.0
    with np.errstate(over="ignore"):  # two huge middle values: inf, as np.median gives
        return ((cols[k // 2 - 1] + 0.0) + cols[k // 2]) / 2.0


def trailing_median_inclusive_at(values: np.ndarray, k: int, at: np.ndarray) -> np.ndarray:
    """trailing_median_inclusive(values, k)[at], computing only those points."""
    at = np.asarray(at, dtype=np.int64)
    k = max(1, k)
    if k > _NETWORK_MAX or at.shape[0] * 4 > values.shape[0]:
        return trailing_median_inclusive(values, k)[at]
    values = values.astype(np.float64, copy=False)
    out = np.full(at.shape[0], np.nan)
    early = at < k - 1
    for j in np.flatnonzero(early).tolist():
        w = ffill_nonfinite(values[: at[j] + 1])  # forward-filling is causal
        w = w[np.isfinite(w)]
        if w.size:
            out[j] = np.median(w)
    late = np.flatnonzero(~early)
    if late.size:
        pos = at[late]
        cols = [values[pos - (k - 1 - j)] for j in range(k)]
        if not all(np.isfinite(c).all() for c in cols):  # else nothing to fill
            x = ffill_nonfinite(values)
            cols = [x[pos - (k - 1 - j)] for j in range(k)]
        out[late] = _network_median(cols)
    return out
