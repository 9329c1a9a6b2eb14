"""Where every scalar point of a run lives: its event file, its record, its place in the event.

:func:`map_run` reads a run directory as :class:`~.reader.RunReader` does (the
same files in the same order, the same scalar decoding, the same restart purge
and "last value per step wins"), and keeps, for every point, the record it came
from and the position of its value in that event's summary. Tools that rewrite
a run's event files (``compact``) decide per point and rebuild per record.

Every record's data CRC is verified, whatever its length (the reader checks
only records of scalar size), so a record known to be good can be copied byte
for byte. Files are mapped read-only; nothing is written.
"""

from __future__ import annotations

import dataclasses
import mmap
import os

import numpy as np

from tb_crash_signals.ingest import records, scalars
from tb_crash_signals.ingest.series import Series

__all__ = ["FileMap", "RunMap", "map_run", "visible_points"]


@dataclasses.dataclass
class FileMap:
    """The good records of one event file.

    Attributes:
        name: file name inside the run directory.
        size: bytes in the file when it was read.
        data: the file's bytes (a read-only mapping; empty for an empty file).
        offsets, lengths: int64 data offset and length of every good record.
        end: where the good framing stops: a truncated tail (a writer still
            writing) or trailing garbage starts there.
        truncated: the file ends inside a record.
        corrupt: corrupt records skipped (bad length, bad CRC, unparsable).
        parsed: bool per record: parsed with protobuf (any layout other than
            one scalar value); values: summary values in those (0 otherwise).
        error: why the file could not be read, or None.
    """

    name: str
    size: int = 0
    data: object = b""
    offsets: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    lengths: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    end: int = 0
    truncated: bool = False
    corrupt: int = 0
    parsed: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, bool))
    values: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    error: str | None = None

    @property
    def n_records(self) -> int:
        return int(self.offsets.shape[0])

    def record(self, i: int) -> bytes:
        """The serialized Event of record i."""
        o, n = int(self.offsets[i]), int(self.lengths[i])
        return bytes(memoryview(self.data)[o : o + n])

    def framed(self, first: int, last: int) -> memoryview:
        """Records first..last (inclusive, consecutive) with their framing, as in the file."""
        a = int(self.offsets[first]) - 12
        b = int(self.offsets[last] + self.lengths[last]) + 4
        return memoryview(self.data)[a:b]


@dataclasses.dataclass
class RunMap:
    """Every scalar point of a run, in write order (file, record, value), with its origin.

    Attributes:
        run: run name; path: its directory.
        files: the run's event files in read order.
        tags: tag names referenced by `tag`.
        file, rec, index: per point: file position in `files` (int32), record
            in that file (int64), value position in the event's summary (int32).
        tag, step, wall, value: int32 / int64 / float64 / float64 per point.
        meta: bool per point: its value carries summary metadata.
        visible: bool per point: shown after the restart purge (a later point
            of the tag at a step <= its step hides it); computed when not given.
    """

    run: str
    path: str
    files: list
    tags: list
    file: np.ndarray
    rec: np.ndarray
    index: np.ndarray
    tag: np.ndarray
    step: np.ndarray
    wall: np.ndarray
    value: np.ndarray
    meta: np.ndarray
    visible: np.ndarray | None = None
    _by_tag: dict = dataclasses.field(default_factory=dict, repr=False)

    def __post_init__(self):
        order = records.stable_order(self.tag)
        sorted_tags = self.tag[order]
        cuts = [0] + (np.flatnonzero(np.diff(sorted_tags)) + 1).tolist() + [order.shape[0]]
        compute = self.visible is None
        if compute:
            self.visible = np.ones(self.step.shape[0], dtype=bool)
        for a, b in zip(cuts[:-1], cuts[1:]):
            if b > a:
                idx = order[a:b]
                self._by_tag[self.tags[int(sorted_tags[a])]] = idx
                if compute:
                    self.visible[idx] = visible_points(self.step[idx])

    def scalar_tags(self) -> list[str]:
        """Sorted tags with at least one point."""
        return sorted(self._by_tag)

    def points(self, tag: str, visible_only: bool = True) -> np.ndarray:
        """Indices of the tag's points in write order (the visible ones: increasing steps)."""
        idx = self._by_tag[tag]
        return idx[self.visible[idx]] if visible_only else idx

    def series(self, tag: str) -> Series:
        """What the reader shows for `tag`."""
        idx = self.points(tag)
        return Series(self.step[idx], self.value[idx], self.wall[idx])

    def problems(self) -> list[str]:
        out = []
        for f in self.files:
            if f.error:
                out.append(f"cannot read {f.name}: {f.error}")
            if f.corrupt:
                plural = "s" if f.corrupt != 1 else ""
                out.append(f"{f.corrupt} corrupt record{plural} skipped in {f.name}")
            tail = f.size - f.end
            if tail > 0:
                why = "ends inside a record (still being written?)" if f.truncated else "ends in garbage"
                out.append(f"{f.name} {why}: its last {tail} bytes are not part of any good record")
        return out

    def close(self) -> None:
        for f in self.files:
            if isinstance(f.data, mmap.mmap):
                try:
                    f.data.close()
                except BufferError:  # a slice is still referenced (an interrupted write's traceback)
                    pass  # unmapped when the last reference goes
                f.data = b""


def visible_points(steps: np.ndarray) -> np.ndarray:
    """Which points of one tag (steps in write order) survive the restart purge.

    A point is shown unless a later point of the tag has a step <= its own:
    a step below the largest so far purges the points at that step and later
    (a restart), and a step logged again replaces the earlier value. The
    survivors have strictly increasing steps in write order.
    """
    n = steps.shape[0]
    out = np.ones(n, dtype=bool)
    if n > 1:
        later_min = np.minimum.accumulate(steps[::-1])[::-1]
        out[:-1] = steps[:-1] < later_min[1:]
    return out


def _event_files(run_dir: str) -> list[str]:
    names = []
    for e in os.scandir(run_dir):
        if "tfevents" not in e.name:
            continue
        try:
            if e.is_file():
                names.append(e.name)
        except OSError:
            continue
    return sorted(names)


def _read_file(path: str, fm: FileMap) -> None:
    with open(path, "rb") as f:
        fm.size = os.fstat(f.fileno()).st_size
        if fm.size == 0:
            return
        fm.data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    res = records.scan_records(fm.data, 0, verify_data=False)  # data CRCs: decode_scalars(verify=True)
    offsets, lengths = res.offsets, res.lengths
    fm.corrupt = res.n_corrupt
    fm.end, fm.truncated = res.end, res.truncated
    long = np.flatnonzero(lengths > records.DATA_CRC_MAX_LEN)
    if long.shape[0]:  # decode_scalars leaves these to the parser; a copy must be known good
        arr = np.frombuffer(fm.data, dtype=np.uint8)
        crc = records.mask_crcs(records.crc32c_ranges(arr, offsets[long], lengths[long]))
        bad = long[crc != records.u32_at(arr, offsets[long] + lengths[long])]
        if bad.shape[0]:
            keep = np.ones(offsets.shape[0], dtype=bool)
            keep[bad] = False
            offsets, lengths = offsets[keep], lengths[keep]
            fm.corrupt += int(bad.shape[0])
    fm.offsets, fm.lengths = offsets, lengths


_BATCH_BYTES = records.MAX_RECORD_LEN + 16  # the reader's read size: its batches see the same tag plugins
_COLUMNS = (np.int32, np.int64, np.int32, np.int32, np.int64, np.float64, np.float64, bool)


def _batches(offsets: np.ndarray, lengths: np.ndarray) -> list[tuple[int, int]]:
    """Consecutive record ranges spanning at most _BATCH_BYTES each (one record at least)."""
    ends = offsets + lengths + 4
    out, a, n = [], 0, offsets.shape[0]
    while a < n:
        b = max(a + 1, int(np.searchsorted(ends, offsets[a] - 12 + _BATCH_BYTES, side="right")))
        out.append((a, b))
        a = b
    return out


def _map_file(fm: FileMap, fi: int, tag_ids: dict, plugins: dict) -> list:
    """The file's points as column parts (see RunMap), decoded batch by batch."""
    n = fm.n_records
    fm.parsed = np.zeros(n, dtype=bool)
    fm.values = np.zeros(n, dtype=np.int64)
    parts, bad = [], []
    for a, b in _batches(fm.offsets, fm.lengths):
        dec = scalars.decode_scalars(fm.data, fm.offsets[a:b], fm.lengths[a:b], verify=True)
        fm.parsed[a + dec.parsed_rec] = True
        fm.values[a + dec.parsed_rec] = dec.parsed_values
        bad.append(a + dec.bad_rec)  # a bad data CRC, or not an Event (counted in dec.n_corrupt)
        fm.corrupt += dec.n_corrupt
        for tag, plugin in dec.plugins:
            plugins.setdefault(tag, plugin)
        keep = ~dec.point_tensor
        if dec.point_tensor.any():  # tensors of another plugin are not scalars (as the reader)
            ok_tag = np.array([plugins.get(t, "") in ("", scalars.SCALAR_PLUGIN) for t in dec.tags], dtype=bool)
            keep |= ok_tag[dec.point_tag]
        ids = np.array([tag_ids.setdefault(t, len(tag_ids)) for t in dec.tags], dtype=np.int32)
        everything = bool(keep.all())

        def pick(x, keep=keep, everything=everything):
            return x if everything else x[keep]

        parts.append([
            np.full(int(keep.sum()), fi, dtype=np.int32),
            pick(dec.point_rec) + a,
            pick(dec.point_index).astype(np.int32),
            ids[pick(dec.point_tag)] if ids.shape[0] else np.zeros(0, np.int32),
            pick(dec.point_step),
            pick(dec.point_wall),
            pick(dec.point_value),
            pick(dec.point_meta),
        ])
    bad = np.concatenate(bad) if bad else np.zeros(0, np.int64)
    if bad.shape[0]:  # drop them: record indices count good records only
        keep = np.ones(n, dtype=bool)
        keep[bad] = False
        remap = np.cumsum(keep) - 1
        fm.offsets, fm.lengths = fm.offsets[keep], fm.lengths[keep]
        fm.parsed, fm.values = fm.parsed[keep], fm.values[keep]
        for part in parts:
            part[1] = remap[part[1]]
    return parts


def map_run(run: str, run_dir: str) -> RunMap:
    """Reads every event file of `run_dir` (see module docstring)."""
    run_dir = os.fspath(run_dir)
    files: list[FileMap] = []
    tag_ids: dict[str, int] = {}  # in id order
    plugins: dict[str, str] = {}
    parts: list = []
    for fi, name in enumerate(_event_files(run_dir)):
        fm = FileMap(name)
        files.append(fm)
        try:
            _read_file(os.path.join(run_dir, name), fm)
        except (OSError, ValueError) as e:
            fm.error = getattr(e, "strerror", None) or str(e)
            continue
        if fm.n_records:
            parts.extend(_map_file(fm, fi, tag_ids, plugins))
    cols = []
    for i, dtype in enumerate(_COLUMNS):  # column by column, freeing the parts: one copy at a time
        cols.append(np.concatenate([p[i] for p in parts]).astype(dtype, copy=False) if parts else np.zeros(0, dtype))
        for p in parts:
            p[i] = None
    file, rec, index, tag, step, wall, value, meta = cols
    return RunMap(run, run_dir, files, list(tag_ids), file, rec, index, tag, step, wall, value, meta)
