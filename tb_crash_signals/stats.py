"""Causal, vectorised statistics the rules share (pure numpy).

"Trailing" always means the window of points strictly before i, so a value
never takes part in its own baseline: a spike cannot hide itself.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

# Rows of windows handled per chunk: bounds the memory of the window copies
# that np.median makes (chunk * window * 8 bytes).
_CHUNK = 1 << 15


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


def trailing_min(values: np.ndarray, window: int) -> np.ndarray:
    """Min of the up-to-`window` finite-filled points before each i (NaN for i == 0)."""
    x = ffill_nonfinite(values.astype(np.float64, copy=False))
    x = np.where(np.isfinite(x), x, np.inf)
    return -trailing_max(-x, window)


def trailing_max(values: np.ndarray, window: int) -> np.ndarray:
    """Max of the up-to-`window` points before each i (NaN for i == 0)."""
    n = values.shape[0]
    out = np.full(n, np.nan)
    if n < 2:
        return out
    x = np.where(np.isfinite(values), values, -np.inf)
    for i in range(1, min(window, n)):
        out[i] = x[:i].max()
    if n > window:
        out[window:] = sliding_window_view(x[:-1], window).max(axis=1)
    out[np.isneginf(out)] = np.nan
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
        out[k - 1 :] = np.median(sliding_window_view(x, k), axis=1)
    return out
