"""Causal, vectorised statistics the rules share (pure numpy).

"Trailing" always means the window of points strictly before i, so a value
never takes part in its own baseline: a spike cannot hide itself.
"""

from __future__ import annotations

import contextlib
import threading

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

# Rows of windows handled per chunk: bounds the memory of the window copies
# that np.median makes (chunk * window * 8 bytes).
_CHUNK = 1 << 15

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


def trailing_median_mad(
    values: np.ndarray, window: int, min_points: int, at: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Median and MAD of the up-to-`window` finite-filled points before each i.

    Points with fewer than `min_points` predecessors get NaN. With `at`, only
    those indices are computed (the rest stay NaN): rules pre-filter with a
    cheap necessary condition and pay for medians only where it matters.
    """
    n = values.shape[0]
    med = np.full(n, np.nan)
    mad = np.full(n, np.nan)
    if n <= min_points:
        return med, mad
    x = ffill_nonfinite(values.astype(np.float64, copy=False))
    idx = np.arange(n) if at is None else np.unique(np.asarray(at, dtype=np.int64))
    idx = idx[idx >= min_points]
    # Expanding windows for the first points (fewer than `window` before them).
    for i in idx[idx < window].tolist():
        w = x[:i]
        w = w[np.isfinite(w)]
        if w.size >= min_points:
            m = np.median(w)
            med[i], mad[i] = m, np.median(np.abs(w - m))
    full = idx[idx >= window]
    if full.size:
        wins = sliding_window_view(x[:-1], window)  # row j covers x[j:j+window]
        for start in range(0, full.size, _CHUNK):
            rows = full[start : start + _CHUNK]
            block = wins[rows - window]
            m = np.median(block, axis=1)
            med[rows] = m
            mad[rows] = np.median(np.abs(block - m[:, None]), axis=1)
    return med, mad


@contextlib.contextmanager
def memo():
    """Within this block, trailing_min results are reused for the same array object.

    engine.run_rules opens one per analysis (its series are not modified while
    the rules run): loss-spike and loss-divergence share the train loss's
    trailing minimum.
    """
    prev = getattr(_MEMO, "cache", None)
    _MEMO.cache = {}
    try:
        yield
    finally:
        _MEMO.cache = prev


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
    # Equal to -trailing_max(-x, window) on the finite-filled x (a min selects
    # one of its inputs), without the negations.
    n = values.shape[0]
    out = np.full(n, np.nan)
    if n < 2:
        return out
    x = ffill_nonfinite(values.astype(np.float64, copy=False))
    if not np.isfinite(x).all():
        x = np.where(np.isfinite(x), x, np.inf)
    head = min(window, n)
    out[1:head] = np.minimum.accumulate(x[: head - 1])
    if n > window:
        out[window:] = sliding_max(-x[:-1], window)
        np.negative(out[window:], out=out[window:])
    out[np.isposinf(out)] = np.nan
    return out


def trailing_max(values: np.ndarray, window: int) -> np.ndarray:
    """Max of the up-to-`window` points before each i (NaN for i == 0)."""
    n = values.shape[0]
    out = np.full(n, np.nan)
    if n < 2:
        return out
    x = np.where(np.isfinite(values), values, -np.inf)
    head = min(window, n)
    out[1:head] = np.maximum.accumulate(x[: head - 1])
    if n > window:
        out[window:] = sliding_max(x[:-1], window)
    out[np.isneginf(out)] = np.nan
    return out


def sliding_max(y: np.ndarray, window: int) -> np.ndarray:
    """max(y[j:j+window]) for every j (van Herk / Gil-Werman, O(n), no NaN in y).

    Equal to ``sliding_window_view(y, window).max(axis=1)`` (a max selects one
    of its inputs, so the grouping does not change any bit) at O(n) instead of
    O(n * window).
    """
    m = y.shape[0]
    w = int(window)
    if w <= 1 or m < w:
        return y[: max(m - w + 1, 0)].copy() if w <= 1 else np.zeros(0, y.dtype)
    nb = -(-m // w)
    pad = np.full(nb * w, -np.inf)
    pad[:m] = y
    # Running max within each block of w, forwards (pre) and backwards (suf),
    # one strided column at a time (faster than accumulate along short rows).
    pre = pad.reshape(nb, w)
    suf = pre.copy()
    for j in range(1, w):
        np.maximum(pre[:, j - 1], pre[:, j], out=pre[:, j])
    for j in range(w - 2, -1, -1):
        np.maximum(suf[:, j + 1], suf[:, j], out=suf[:, j])
    return np.maximum(suf.ravel()[: m - w + 1], pre.ravel()[w - 1 : m])


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


def debiased_ema(values: np.ndarray, weight: float) -> np.ndarray:
    """TensorBoard's smoothing: an EMA debiased for its zero start; skips non-finite."""
    out = np.empty(values.shape[0])
    last, count = 0.0, 0
    for i, v in enumerate(values):
        if not np.isfinite(v):
            out[i] = v
            continue
        last = last * weight + (1 - weight) * v
        count += 1
        out[i] = last / (1 - weight**count) if weight > 0 else v
    return out


def trailing_median_inclusive(values: np.ndarray, k: int) -> np.ndarray:
    """Median of the up-to-k points ending at each i (a causal smoother)."""
    n = values.shape[0]
    x = ffill_nonfinite(values.astype(np.float64, copy=False))
    out = np.full(n, np.nan)
    k = max(1, k)
    for i in range(min(k - 1, n)):
        w = x[: i + 1]
        w = w[np.isfinite(w)]
        if w.size:
            out[i] = np.median(w)
    if n >= k:
        out[k - 1 :] = sliding_median(x, k)
    return out


_NETWORK_MAX = 9  # windows up to this size use a sorting network


def sliding_median(x: np.ndarray, k: int) -> np.ndarray:
    """np.median of every k-point window of x (bit-identical, faster for small k).

    Small windows are sorted column-wise by an odd-even transposition network
    of np.minimum/np.maximum (which select inputs, and propagate NaN as
    np.median does); the median is the middle column, or for even k the mean
    of the two middle ones computed as np.median computes it.
    """
    if k > _NETWORK_MAX:
        return np.median(sliding_window_view(x, k), axis=1)
    m = x.shape[0] - k + 1
    cols = [x[j : j + m] for j in range(k)]
    return _network_median(cols)


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
    return ((cols[k // 2 - 1] + 0.0) + cols[k // 2]) / 2.0


def trailing_median_inclusive_at(values: np.ndarray, k: int, at: np.ndarray) -> np.ndarray:
    """trailing_median_inclusive(values, k)[at], computing only those points."""
    at = np.asarray(at, dtype=np.int64)
    k = max(1, k)
    if k > _NETWORK_MAX or at.shape[0] * 4 > values.shape[0]:
        return trailing_median_inclusive(values, k)[at]
    x = ffill_nonfinite(values.astype(np.float64, copy=False))
    out = np.full(at.shape[0], np.nan)
    early = at < k - 1
    for j in np.flatnonzero(early).tolist():
        w = x[: at[j] + 1]
        w = w[np.isfinite(w)]
        if w.size:
            out[j] = np.median(w)
    late = np.flatnonzero(~early)
    if late.size:
        pos = at[late]
        out[late] = _network_median([x[pos - (k - 1 - j)] for j in range(k)])
    return out
