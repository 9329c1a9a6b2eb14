"""Chart-ready columns: min/max decimation that keeps spikes, and JSON helpers.

A chart a few hundred pixels wide cannot show a million points, but it must
still show the one-step spike among them. Random sampling (TensorBoard's
reservoir) drops it; averaging flattens it. Keeping, for each step bucket, the
point with the smallest and the one with the largest value keeps every
excursion that would be visible at that resolution.

Pure numpy: nothing here imports TensorBoard or Werkzeug.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np

from tb_crash_signals.series import Series

DEFAULT_MAX_POINTS = 2000


def _first_per_group(group_of_hit: np.ndarray, hits: np.ndarray) -> np.ndarray:
    """For sorted group ids of candidate positions, the first candidate of each group."""
    if hits.size == 0:
        return hits
    keep = np.ones(hits.size, dtype=bool)
    keep[1:] = group_of_hit[1:] != group_of_hit[:-1]
    return hits[keep]


def _bucket_extremes(steps: np.ndarray, values: np.ndarray, buckets: int) -> np.ndarray:
    """Positions of the min and max of `values` in each of `buckets` equal step ranges.

    `values` must be finite; `steps` sorted. Returns positions into the arrays.
    """
    n = steps.shape[0]
    if n == 0 or buckets <= 0:
        return np.zeros(0, np.int64)
    s0, s1 = float(steps[0]), float(steps[-1])
    span = s1 - s0
    if span <= 0:
        bucket = np.zeros(n, np.int64)
    else:
        bucket = np.floor((steps.astype(np.float64) - s0) / span * buckets).astype(np.int64)
        np.clip(bucket, 0, buckets - 1, out=bucket)
    # Steps are sorted, so each bucket is a contiguous slice.
    starts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
    counts = np.diff(np.r_[starts, n])
    group = np.repeat(np.arange(starts.size), counts)
    out = []
    for reduce in (np.minimum, np.maximum):
        extreme = reduce.reduceat(values, starts)
        hits = np.flatnonzero(values == np.repeat(extreme, counts))
        out.append(_first_per_group(group[hits], hits))
    return np.concatenate(out)


def _nonfinite_boundaries(values: np.ndarray) -> np.ndarray:
    """First and last position of every stretch of non-finite values."""
    bad = ~np.isfinite(values)
    if not bad.any():
        return np.zeros(0, np.int64)
    edges = np.diff(np.r_[False, bad, False].astype(np.int8))
    first = np.flatnonzero(edges == 1)
    last = np.flatnonzero(edges == -1) - 1
    return np.unique(np.r_[first, last])


def _evenly(positions: np.ndarray, k: int) -> np.ndarray:
    """At most k of `positions`, spread evenly (keeping the first and last)."""
    if positions.size <= k:
        return positions
    if k <= 0:
        return positions[:0]
    pick = np.unique(np.round(np.linspace(0, positions.size - 1, k)).astype(np.int64))
    return positions[pick]


def decimate(
    steps: np.ndarray,
    values: np.ndarray,
    max_points: int = DEFAULT_MAX_POINTS,
    keep_steps: Iterable[int] = (),
) -> np.ndarray:
    """Chooses at most `max_points` positions of a series to draw.

    Always kept (in this priority when even they exceed the budget): the
    first and last point, the points at `keep_steps` (e.g. episode starts and
    peaks), and the first and last point of every stretch of non-finite
    values (so the chart shows the gap where it is). The remaining budget is
    split into step buckets; each keeps the position of its minimum and of
    its maximum finite value, so a spike stays visible.

    Args:
        steps: sorted int steps.
        values: float values (NaN/Inf allowed).
        max_points: the budget (at least 2 when the series has 2 points).
        keep_steps: steps to keep if present in `steps`.

    Returns:
        Sorted unique int64 positions into `steps`/`values`.
    """
    steps = np.asarray(steps)
    values = np.asarray(values, dtype=np.float64)
    n = steps.shape[0]
    max_points = max(int(max_points), 2)
    if n <= max_points:
        return np.arange(n, dtype=np.int64)

    wanted = np.asarray(sorted({int(s) for s in keep_steps}), dtype=np.int64)
    if wanted.size:
        pos = np.searchsorted(steps, wanted)
        ok = pos < n
        pos, w = pos[ok], wanted[ok]
        wanted_pos = pos[steps[pos] == w]
    else:
        wanted_pos = np.zeros(0, np.int64)

    must = np.unique(np.r_[np.int64(0), np.int64(n - 1), wanted_pos])
    if must.size > max_points:
        must = np.unique(np.r_[np.int64(0), np.int64(n - 1), _evenly(must, max_points - 2)])
    nonfinite = np.setdiff1d(_nonfinite_boundaries(values), must, assume_unique=False)
    room = max_points - must.size
    if nonfinite.size > room:
        nonfinite = _evenly(nonfinite, room)
    must = np.union1d(must, nonfinite)

    buckets = (max_points - must.size) // 2
    finite = np.flatnonzero(np.isfinite(values))
    extremes = finite[_bucket_extremes(steps[finite], values[finite], buckets)]
    chosen = np.union1d(must, extremes)
    # Two extremes of neighbouring buckets may coincide with `must`; the
    # union can only be smaller than the sum, never larger than max_points.
    return chosen.astype(np.int64)


def json_values(values: np.ndarray) -> list:
    """Floats for JSON: non-finite values become None (null)."""
    out = values.astype(np.float64).tolist()
    if not np.isfinite(values).all():
        out = [v if math.isfinite(v) else None for v in out]
    return out


def columns(
    series: Series,
    max_points: int = DEFAULT_MAX_POINTS,
    keep_steps: Iterable[int] = (),
) -> dict:
    """{"steps": [...], "values": [...]} of a decimated series, null for non-finite."""
    idx = decimate(series.steps, series.values, max_points, keep_steps)
    return {
        "steps": series.steps[idx].tolist(),
        "values": json_values(series.values[idx]),
    }


def nonfinite_label(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def nonfinite_points(series: Series, cap: int = 200) -> list[dict]:
    """The first `cap` non-finite points as {"step", "value": "NaN"|"Infinity"|"-Infinity"}."""
    bad = np.flatnonzero(~np.isfinite(series.values))[:cap]
    return [
        {"step": int(series.steps[i]), "value": nonfinite_label(float(series.values[i]))}
        for i in bad
    ]


def gap_band(
    train: Series | None,
    val: Series | None,
    max_points: int = DEFAULT_MAX_POINTS,
) -> dict | None:
    """Validation steps with the val loss and the train loss at-or-before each.

    None unless both series have points. Entries are null where a value is
    missing (no train point yet) or non-finite.
    """
    if train is None or val is None or not len(train) or not len(val):
        return None
    idx = decimate(val.steps, val.values, max_points)
    steps = val.steps[idx]
    pos = np.searchsorted(train.steps, steps, side="right") - 1
    t = np.full(steps.shape, np.nan)
    ok = pos >= 0
    t[ok] = train.values[pos[ok]]
    return {
        "steps": steps.tolist(),
        "train": json_values(t),
        "val": json_values(val.values[idx]),
    }


def episode_steps(episodes: Sequence[dict], signal: str) -> set[int]:
    """Start, end and peak steps of the episodes on `signal` (report JSON dicts)."""
    out: set[int] = set()
    for e in episodes:
        if e.get("signal") != signal:
            continue
        for key in ("start_step", "peak_step", "end_step"):
            v = e.get(key)
            if isinstance(v, int):
                out.add(v)
    return out
