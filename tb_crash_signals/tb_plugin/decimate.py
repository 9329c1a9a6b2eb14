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

from tb_crash_signals.ingest.series import Series

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

    `Decimator` computes the same positions from cached block extremes.
    """
    return _select(steps, values, max_points, keep_steps, None)


def _select(steps, values, max_points, keep_steps, cached) -> np.ndarray:
    """`decimate`; with `cached` (a Decimator and the series), from its caches."""
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
    bounds = _nonfinite_boundaries(values) if cached is None else cached[0]._nonfinite_boundaries()
    nonfinite = np.setdiff1d(bounds, must, assume_unique=False)
    room = max_points - must.size
    if nonfinite.size > room:
        nonfinite = _evenly(nonfinite, room)
    must = np.union1d(must, nonfinite)

    buckets = (max_points - must.size) // 2
    if cached is None:
        finite = np.flatnonzero(np.isfinite(values))
        extremes = finite[_bucket_extremes(steps[finite], values[finite], buckets)]
    else:
        extremes = cached[0]._bucket_extremes(cached[1], buckets)
    chosen = np.union1d(must, extremes)
    # Two extremes of neighbouring buckets may coincide with `must`; the
    # union can only be smaller than the sum, never larger than max_points.
    return chosen.astype(np.int64)


# Points per block of a Decimator's cached extremes: a bucket's extremes read
# its partial blocks' points (< 2 x _BLOCK) and its whole blocks' extremes.
_BLOCK = 32
# Series shorter than this are decimated directly: a pass over their points
# costs less than the cached path's fixed cost (~1.5 ms).
_DIRECT_BELOW = 50_000


class Decimator:
    """`decimate`, `columns` and `nonfinite_points` of one series that only grows.

    Pass it the series at each call: each must be the previous one with
    points appended (the caller knows, e.g. from the reader). It keeps the
    smallest and largest finite value of every block of _BLOCK points and
    the stretches of non-finite values, extended over appended points. A
    bucket's extremes then come from its whole blocks plus at most two
    partial blocks, and its bounds from a bisection on the same bucket
    function `decimate` evaluates: a chart of a million points costs a few
    milliseconds, the same positions as `decimate` (tests/test_decimate.py
    checks it) without a pass over every point.
    """

    def __init__(self):
        self.size = 0  # points covered
        # The points last drawn: positions (sorted) and the JSON text of their values.
        self._texts = (np.zeros(0, np.int64), np.zeros(0, object))
        # Per complete block: the min and max of its finite values (+/-inf:
        # none), and the position of their first occurrence.
        self._blocks = (np.zeros(0), np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64))
        self._bad: list[list[int]] = []  # [first, last] of each stretch of non-finite values
        self._first_finite: int | None = None

    def positions(self, series: Series, max_points: int = DEFAULT_MAX_POINTS, keep_steps=()):
        """decimate(series.steps, series.values, max_points, keep_steps)."""
        self._extend(series)
        if len(series) < _DIRECT_BELOW:
            return decimate(series.steps, series.values, max_points, keep_steps)
        return _select(series.steps, series.values, max_points, keep_steps, (self, series))

    def columns(self, series: Series, max_points: int = DEFAULT_MAX_POINTS, keep_steps=()) -> dict:
        """columns(series, max_points, keep_steps)."""
        idx = self.positions(series, max_points, keep_steps)
        return {"steps": series.steps[idx].tolist(), "values": json_values(series.values[idx])}

    def columns_json(self, series: Series, max_points: int = DEFAULT_MAX_POINTS, keep_steps=()) -> str:
        """json.dumps(columns(series, max_points, keep_steps)), the same text.

        Writing a float is most of the cost of the JSON (~1 us each), and
        after points are appended most drawn points are drawn again: their
        text is kept from the previous call.
        """
        idx = self.positions(series, max_points, keep_steps)
        drawn, known = self._texts
        texts = np.empty(idx.shape[0], object)
        at = np.minimum(np.searchsorted(drawn, idx), max(drawn.shape[0] - 1, 0))
        hit = drawn[at] == idx if drawn.shape[0] else np.zeros(idx.shape[0], bool)
        texts[hit] = known[at[hit]]
        new = np.flatnonzero(~hit)
        # As json.dumps writes them (float.__repr__; non-finite values are null).
        texts[new] = [repr(v) if math.isfinite(v) else "null" for v in series.values[idx[new]].tolist()]
        self._texts = (idx, texts)
        steps = ", ".join(map(str, series.steps[idx].tolist()))
        return '{"steps": [' + steps + '], "values": [' + ", ".join(texts.tolist()) + "]}"

    def nonfinite_points(self, series: Series, cap: int = 200) -> list[dict]:
        """nonfinite_points(series, cap)."""
        self._extend(series)
        out = []
        for first, last in self._bad:
            for i in range(first, min(last + 1, first + cap - len(out))):
                label = nonfinite_label(float(series.values[i]))
                out.append({"step": int(series.steps[i]), "value": label})
            if len(out) >= cap:
                break
        return out

    def _extend(self, series: Series) -> None:
        old, n = self.size, len(series)
        if n == old:
            return
        v = series.values
        done, blocks = self._blocks[0].shape[0], n // _BLOCK
        if blocks > done:
            part = v[done * _BLOCK : blocks * _BLOCK].reshape(-1, _BLOCK)
            finite = np.isfinite(part)
            low, high = np.where(finite, part, np.inf), np.where(finite, part, -np.inf)
            at = np.arange(done, blocks) * _BLOCK
            new = (low.min(axis=1), high.max(axis=1),
                   at + low.argmin(axis=1), at + high.argmax(axis=1))
            self._blocks = tuple(np.concatenate([a, b]) for a, b in zip(self._blocks, new))
        # A stretch reaching the old end may go on: scan again from its start.
        scan = old
        if self._bad and self._bad[-1][1] == old - 1:
            scan = self._bad.pop()[0]
        bad = ~np.isfinite(v[scan:])
        if bad.any():
            edges = np.diff(np.r_[False, bad, False].astype(np.int8))
            firsts = np.flatnonzero(edges == 1) + scan
            lasts = np.flatnonzero(edges == -1) - 1 + scan
            self._bad.extend([int(a), int(b)] for a, b in zip(firsts, lasts))
        if self._first_finite is None and not bad.all():
            self._first_finite = scan + int(np.argmin(bad))
        self.size = n

    def _nonfinite_boundaries(self) -> np.ndarray:
        """_nonfinite_boundaries(series.values)."""
        if not self._bad:
            return np.zeros(0, np.int64)
        return np.unique(np.asarray(self._bad, dtype=np.int64).ravel())

    def _bucket_extremes(self, series: Series, buckets: int) -> np.ndarray:
        """Positions of the min and max finite value of each step bucket, as `decimate` picks."""
        steps, values = series.steps, series.values
        if self._first_finite is None or buckets <= 0:
            return np.zeros(0, np.int64)
        f0 = self._first_finite
        f1 = _last_finite(values)
        s0, span = float(steps[f0]), float(steps[f1]) - float(steps[f0])
        if span <= 0:  # one finite point
            return np.array([f0], np.int64)

        def bucket_of(pos):  # as `_bucket_extremes` computes it, point by point
            b = np.floor((steps[pos].astype(np.float64) - s0) / span * buckets).astype(np.int64)
            return np.clip(b, 0, buckets - 1)

        targets = np.arange(1, buckets)
        # Where each bucket starts, roughly (the bucket function in exact
        # arithmetic), as a narrow bracket for the exact bisection.
        guess = s0 + targets * (span / buckets)
        slack = 1.0 + 1e-9 * (abs(s0) + span)
        # (int64 bounds: a float needle would make searchsorted convert all steps)
        lo = np.searchsorted(steps, np.floor(guess - slack).astype(np.int64), side="left")
        hi = np.searchsorted(steps, np.ceil(guess + slack).astype(np.int64), side="right")
        lo, hi = np.clip(lo, f0, f1 + 1), np.clip(hi, f0, f1 + 1)
        # Checked, not trusted: a bracket that does not hold is the whole range.
        lo[(lo > f0) & (bucket_of(np.maximum(lo - 1, f0)) >= targets)] = f0
        hi[(hi <= f1) & (bucket_of(np.minimum(hi, f1)) < targets)] = f1 + 1
        starts = _first_at_least(bucket_of, targets, lo, hi)
        bounds = np.r_[f0, starts, f1 + 1]
        lo, hi = bounds[:-1], bounds[1:]
        lo, hi = lo[hi > lo], hi[hi > lo]
        return _segment_extremes(values, self._blocks, lo, hi)


def _last_finite(values: np.ndarray) -> int:
    size = 64
    while True:
        lo = max(values.shape[0] - size, 0)
        hit = np.flatnonzero(np.isfinite(values[lo:]))
        if hit.size:
            return lo + int(hit[-1])
        size *= 4


def _first_at_least(func, targets: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """For each target t, the first position p with func(p) >= t (func non-decreasing).

    Searched in [lo, hi), a bracket that must hold it: func(lo - 1) < t
    (or lo is the first position) and func(hi) >= t (or hi is one past the last).
    """
    while True:
        open_ = lo < hi
        if not open_.any():
            return lo
        mid = (lo + hi) // 2
        ge = func(np.minimum(mid, hi - 1)) >= targets
        hi = np.where(open_ & ge, mid, hi)
        lo = np.where(open_ & ~ge, mid + 1, lo)


def _segment_extremes(values, blocks, lo, hi) -> np.ndarray:
    """Positions of the first min and first max finite value of each segment [lo, hi).

    `blocks`: a Decimator's block extremes. Each segment is a head (up to its
    first whole block), whole blocks, and a tail; the first occurrence of
    the extreme is in the first of these (in that order) holding it.
    Segments without a finite value give nothing.
    """
    first_block = -(-lo // _BLOCK)
    end_block = hi // _BLOCK
    body = first_block < end_block
    head_end = np.where(body, first_block * _BLOCK, hi)
    tail_start = np.where(body, end_block * _BLOCK, hi)
    bmin, bmax, amin, amax = blocks
    out = []
    for op, none, bval, bpos in ((np.minimum, np.inf, bmin, amin), (np.maximum, -np.inf, bmax, amax)):
        head = _piece_extremes(values, lo, head_end, op, none)
        whole = _block_extremes(bval, bpos, first_block, end_block, body, op, none)
        tail = _piece_extremes(values, tail_start, hi, op, none)
        best = op(op(head[0], whole[0]), tail[0])
        pos = np.where(head[0] == best, head[1], np.where(whole[0] == best, whole[1], tail[1]))
        out.append(pos[best != none])
    return np.concatenate(out)


def _ranges(lo, lengths):
    """The concatenated ranges [lo, lo + length), and where each starts in it."""
    offsets = np.cumsum(lengths) - lengths
    return np.repeat(lo - offsets, lengths) + np.arange(int(lengths.sum())), offsets


def _piece_extremes(values, lo, hi, op, none):
    """Extreme finite value of each piece [lo, hi) (`none`: it has none), its first position."""
    val = np.full(lo.shape, none)
    pos = np.zeros(lo.shape, np.int64)
    some = np.flatnonzero(hi > lo)
    if some.size:
        lengths = (hi - lo)[some]
        idx, offsets = _ranges(lo[some], lengths)
        v = values[idx]
        v = np.where(np.isfinite(v), v, none)
        ext = op.reduceat(v, offsets)
        hit = np.flatnonzero(v == np.repeat(ext, lengths))
        first = _first_per_group(np.repeat(np.arange(some.size), lengths)[hit], hit)
        val[some] = ext
        pos[some] = idx[first]
    return val, pos


def _block_extremes(bval, bpos, first, end, body, op, none):
    """Extreme of the whole blocks [first, end) of each segment, and its first position."""
    val = np.full(first.shape, none)
    pos = np.zeros(first.shape, np.int64)
    some = np.flatnonzero(body)
    if some.size:
        lengths = (end - first)[some]
        idx, offsets = _ranges(first[some], lengths)
        b = bval[idx]
        ext = op.reduceat(b, offsets)
        hit = np.flatnonzero(b == np.repeat(ext, lengths))
        which = idx[_first_per_group(np.repeat(np.arange(some.size), lengths)[hit], hit)]
        val[some] = ext
        pos[some] = bpos[which]
    return val, pos


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
    val_decimator: Decimator | None = None,
) -> dict | None:
    """Validation steps with the val loss and the train loss at-or-before each.

    None unless both series have points. Entries are null where a value is
    missing (no train point yet) or non-finite. `val_decimator`: a
    Decimator of `val`, to decimate it faster.
    """
    if train is None or val is None or not len(train) or not len(val):
        return None
    if val_decimator is not None:
        idx = val_decimator.positions(val, max_points)
    else:
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
