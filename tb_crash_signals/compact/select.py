"""Which points of a scalar series to keep: a pure function of its steps and values.

Recent steps are kept in full; older ones are summarised per bucket of `every`
steps (buckets are aligned on multiples of `every`) by the points that carry
the evidence:

* the first point at which the bucket's finite minimum occurs and the first at
  which its finite maximum occurs: a one-step spike keeps its real step and
  value, and so does the best loss so far;
* the first and the last point of each non-finite kind (NaN, +Inf, -Inf): where
  a NaN stretch starts and ends;
* the bucket's last point (what a chart at that resolution shows);

plus the series' first point, the steps given by the analysis (where its
findings start or peak) with the points just before and after them, and
whole step ranges to keep in full.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

__all__ = ["keep_mask", "in_ranges"]


def in_ranges(steps: np.ndarray, ranges: Iterable[tuple[int, int]]) -> np.ndarray:
    """bool per step (sorted steps): inside one of the inclusive [first, last] step ranges."""
    ranges = sorted((int(a), int(b)) for a, b in ranges if b >= a)
    out = np.zeros(steps.shape[0], dtype=bool)
    if not ranges or not steps.shape[0]:
        return out
    merged = [list(ranges[0])]
    for a, b in ranges[1:]:
        if a <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    first = np.searchsorted(steps, [a for a, _ in merged], side="left")
    last = np.searchsorted(steps, [b for _, b in merged], side="right")
    for i, j in zip(first.tolist(), last.tolist()):
        out[i:j] = True
    return out


def _first_per_group(mask: np.ndarray, group: np.ndarray, last: bool = False) -> np.ndarray:
    """Indices of the first (or last) True of `mask` in each run of equal `group` values."""
    idx = np.flatnonzero(mask)
    if not idx.shape[0]:
        return idx
    g = group[idx]
    if last:
        edge = np.ones(idx.shape[0], dtype=bool)
        edge[:-1] = g[1:] != g[:-1]
    else:
        edge = np.ones(idx.shape[0], dtype=bool)
        edge[1:] = g[1:] != g[:-1]
    return idx[edge]


def keep_mask(
    steps: np.ndarray,
    values: np.ndarray,
    *,
    keep_last: int,
    every: int,
    keep_steps: np.ndarray | None = None,
    full_ranges: Iterable[tuple[int, int]] = (),
) -> np.ndarray:
    """bool per point: keep it (see module docstring).

    Args:
        steps: strictly increasing int64 steps of one tag (what TensorBoard shows).
        values: float64 values (NaN and +/-Inf as logged).
        keep_last: the points at steps > last step - keep_last are kept in full.
        every: bucket width in steps (>= 1) for the older points.
        keep_steps: steps kept wherever they occur, with their neighbouring
            points (the analysis' findings).
        full_ranges: inclusive step ranges kept in full.
    """
    steps = np.asarray(steps, dtype=np.int64)
    values = np.asarray(values, dtype=np.float64)
    n = steps.shape[0]
    keep = np.zeros(n, dtype=bool)
    if n == 0:
        return keep
    keep[0] = keep[-1] = True
    recent = steps > steps[-1] - keep_last if keep_last > 0 else np.zeros(n, dtype=bool)
    keep |= recent
    old = np.flatnonzero(~recent)
    if old.shape[0]:
        s, v = steps[old], values[old]
        bucket = s // every
        starts = np.flatnonzero(np.concatenate([[True], bucket[1:] != bucket[:-1]]))
        group = np.repeat(np.arange(starts.shape[0]), np.diff(np.append(starts, s.shape[0])))
        finite = np.isfinite(v)
        picks = [np.append(starts[1:] - 1, s.shape[0] - 1)]  # each bucket's last point
        if finite.any():
            lo = np.where(finite, v, np.inf)
            hi = np.where(finite, v, -np.inf)
            mins = np.minimum.reduceat(lo, starts)[group]
            maxs = np.maximum.reduceat(hi, starts)[group]
            picks.append(_first_per_group(finite & (v == mins), group))
            picks.append(_first_per_group(finite & (v == maxs), group))
        if not finite.all():
            for kind in (np.isnan(v), v == np.inf, v == -np.inf):
                picks.append(_first_per_group(kind, group))
                picks.append(_first_per_group(kind, group, last=True))
        keep[old[np.concatenate(picks)]] = True
    if keep_steps is not None and len(keep_steps):
        at = np.flatnonzero(np.isin(steps, np.asarray(keep_steps, dtype=np.int64)))
        # with their neighbours: a one-step spike still reads as one step, back to normal after it
        keep[np.concatenate([at, np.maximum(at - 1, 0), np.minimum(at + 1, n - 1)])] = True
    keep |= in_ranges(steps, full_ranges)
    return keep
