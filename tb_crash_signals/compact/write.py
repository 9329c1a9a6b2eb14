"""Writing a compacted run: the kept records of each source event file, in their order.

Per record of the source (known good: framing and data CRC verified):

* every value kept: the record is copied byte for byte, framing included
  (consecutive ones as one slice of the file);
* no value kept: it is left out;
* some kept: the event is rebuilt with the kept values only (same step, wall
  time, other fields and value order) and framed anew with the vectorised
  framing of :mod:`~tb_crash_signals.ingest.writer`.

Values that are not scalar points (histograms, images, text, hparams) and
events without a summary (file version, graphs, session logs) are kept as they
are, unless `scalars_only`, which keeps of those only the file-version and
session-log events (what a reader needs to interpret the file).

A tag's summary metadata (its plugin, description, data class) is stored on
the first value written with it; when that value is not kept, the metadata is
attached to the tag's next kept value, so TensorBoard still knows the tag is a
scalar.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
from tensorboard.compat.proto import event_pb2

from tb_crash_signals.ingest.recordmap import RunMap
from tb_crash_signals.ingest.writer import AtomicFile, frame_records

__all__ = ["WriteStats", "write_run"]

_DROP, _COPY, _REBUILD = 0, 1, 2
_FRAMING_KEPT = ("file_version", "session_log")


@dataclasses.dataclass
class WriteStats:
    """What writing one run did."""

    files: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    records_in: int = 0
    records_out: int = 0
    rebuilt: int = 0


def _relocated_metadata(rmap: RunMap, keep: np.ndarray) -> dict:
    """(file, record) -> {value index: SummaryMetadata} to attach (see module docstring)."""
    out: dict = {}
    for tag in rmap.scalar_tags():
        idx = rmap.points(tag, visible_only=False)
        with_meta = idx[rmap.meta[idx]]
        if not with_meta.shape[0] or keep[with_meta[0]]:
            continue
        first = int(with_meta[0])
        later = idx[(idx > first) & keep[idx]]
        if not later.shape[0] or rmap.meta[later[0]]:
            continue
        fm = rmap.files[int(rmap.file[first])]
        ev = event_pb2.Event.FromString(fm.record(int(rmap.rec[first])))
        meta = ev.summary.value[int(rmap.index[first])].metadata
        to = int(later[0])
        out.setdefault((int(rmap.file[to]), int(rmap.rec[to])), {})[int(rmap.index[to])] = meta
    return out


def _rebuild(data: bytes, kept_points: set, point_values: set, scalars_only: bool, meta: dict) -> bytes | None:
    """The event with only the kept values (None if nothing is left to keep)."""
    ev = event_pb2.Event.FromString(data)
    if not ev.HasField("summary"):
        return data if ev.WhichOneof("what") in _FRAMING_KEPT else None
    values = list(ev.summary.value)
    out = event_pb2.Event()
    out.CopyFrom(ev)
    out.summary.ClearField("value")
    for i, v in enumerate(values):
        if i in point_values:
            if i not in kept_points:
                continue
        elif scalars_only:
            continue
        nv = out.summary.value.add()
        nv.CopyFrom(v)
        if i in meta:
            nv.metadata.CopyFrom(meta[i])
    if not out.summary.value:
        return None
    return out.SerializeToString()


def _file_plan(rmap: RunMap, fi: int, keep: np.ndarray, scalars_only: bool, meta: dict):
    """(action per record, {record: new payload}) for file `fi`."""
    fm = rmap.files[fi]
    n = fm.n_records
    # Points are stored file by file: this file's are one slice.
    sel = np.arange(*np.searchsorted(rmap.file, [fi, fi + 1]))
    rec = rmap.rec[sel]
    npts = np.bincount(rec, minlength=n)
    nkeep = np.bincount(rec[keep[sel]], minlength=n)
    pure = ~fm.parsed | (fm.values == npts)  # every value of the event is a scalar point
    action = np.full(n, _COPY, dtype=np.int8)
    scalar = npts > 0
    partial = scalar & (nkeep < npts)
    action[scalar & (nkeep == 0) & pure] = _DROP
    action[partial & ~((nkeep == 0) & pure)] = _REBUILD
    if scalars_only:
        action[~scalar & ~fm.parsed] = _DROP  # a one-value event that is not a scalar point
        action[~scalar & fm.parsed] = _REBUILD
        action[scalar & ~pure & (action == _COPY)] = _REBUILD
    touched = [r for (f, r) in meta if f == fi]
    action[touched] = _REBUILD
    payloads = {}
    if (action == _REBUILD).any():
        # Points of each rebuilt record: value positions, and those kept.
        by_rec: dict = {}
        mine = action[rec] == _REBUILD
        for p, r in zip(sel[mine].tolist(), rec[mine].tolist()):
            entry = by_rec.setdefault(r, (set(), set()))
            entry[0].add(int(rmap.index[p]))
            if keep[p]:
                entry[1].add(int(rmap.index[p]))
        for r in np.flatnonzero(action == _REBUILD).tolist():
            point_values, kept_points = by_rec.get(r, (set(), set()))
            new = _rebuild(fm.record(r), kept_points, point_values, scalars_only, meta.get((fi, r), {}))
            if new is None:
                action[r] = _DROP
            else:
                payloads[r] = new
    return action, payloads


_LONG_SPAN = 1 << 16  # copied as a view of the source; shorter spans are gathered with numpy
_GATHER_BYTES = 1 << 22  # output bytes per gather (its index costs 8x that)


def _spans(arr: np.ndarray, a: np.ndarray, b: np.ndarray):
    """The bytes arr[a_i:b_i], in order: long spans as views, runs of short ones gathered at once."""
    lens = b - a
    cuts = np.flatnonzero(lens >= _LONG_SPAN).tolist()
    lo = 0
    for j in cuts + [a.shape[0]]:
        if j > lo:  # short spans lo..j-1, in batches of about _GATHER_BYTES
            ends = np.cumsum(lens[lo:j])
            bounds = np.searchsorted(ends, np.arange(_GATHER_BYTES, int(ends[-1]), _GATHER_BYTES), side="right")
            for p, q in zip([0, *bounds.tolist()], [*bounds.tolist(), j - lo]):
                if q > p:
                    sl = slice(lo + p, lo + q)
                    out_start = np.cumsum(lens[sl]) - lens[sl]
                    idx = np.arange(int(lens[sl].sum()), dtype=np.int64) + np.repeat(a[sl] - out_start, lens[sl])
                    yield arr[idx]
        if j < a.shape[0]:
            yield arr[int(a[j]) : int(b[j])]
        lo = j + 1


def _chunks(fm, action: np.ndarray, framed: dict):
    """The output file's byte chunks, in record order: copied records as the source's bytes.

    Consecutive copied records are one span, broken wherever the next good
    record does not start where the previous one ends (a corrupt record lay
    between them).
    """
    copy = action == _COPY
    touching = fm.offsets[1:] - 12 == fm.offsets[:-1] + fm.lengths[:-1] + 4
    prev = np.concatenate([[False], copy[:-1] & touching])
    nxt = np.concatenate([copy[1:] & touching, [False]])
    run_starts = np.flatnonzero(copy & ~prev)
    run_ends = np.flatnonzero(copy & ~nxt)
    a = fm.offsets[run_starts] - 12
    b = fm.offsets[run_ends] + fm.lengths[run_ends] + 4
    arr = np.frombuffer(fm.data, dtype=np.uint8) if fm.n_records else np.zeros(0, np.uint8)
    rebuilt = sorted(framed)
    lo = 0
    for r, hi in zip(rebuilt, np.searchsorted(run_starts, rebuilt).tolist()):
        yield from _spans(arr, a[lo:hi], b[lo:hi])
        yield framed[r]
        lo = hi
    yield from _spans(arr, a[lo:], b[lo:])


def write_run(rmap: RunMap, keep: np.ndarray, out_dir: str, scalars_only: bool = False) -> WriteStats:
    """Writes the kept points of `rmap` (bool per point) as event files in `out_dir`.

    Every readable source event file gets a file of the same name, written
    under a temporary name and renamed when complete.
    """
    os.makedirs(out_dir, exist_ok=True)
    stats = WriteStats()
    meta = _relocated_metadata(rmap, keep)
    for fi, fm in enumerate(rmap.files):
        if fm.error:  # unreadable: reported by RunMap.problems, not replaced by an empty file
            continue
        stats.files += 1
        stats.bytes_in += fm.size
        stats.records_in += fm.n_records
        if fm.n_records:
            action, payloads = _file_plan(rmap, fi, keep, scalars_only, meta)
        else:
            action, payloads = np.zeros(0, np.int8), {}
        order = sorted(payloads)
        framed = dict(zip(order, frame_records([payloads[r] for r in order])))
        with AtomicFile(os.path.join(out_dir, fm.name)) as out:
            out.write(_chunks(fm, action, framed))
            out.commit()
        stats.bytes_out += out.size
        stats.records_out += int((action != _DROP).sum())
        stats.rebuilt += len(payloads)
    return stats
