"""Full-resolution scalar source over a TensorBoard logdir.

Reads every scalar point of every run straight from the event files (no
reservoir sampling), incrementally: each :meth:`RunReader.reload` parses only
the bytes appended since the previous call. Nothing in the logdir is ever
written or modified.

Files are reached through an `ingest.storage.Storage`: the local filesystem by default,
or any fsspec URL (``s3://bucket/logs``), where only the appended byte ranges are fetched
and listings are shared by every run of the logdir (`ingest.remote`).

Run discovery follows TensorBoard: every directory under the logdir (walked
without following symlinks) that holds a file whose name contains
``tfevents`` is a run, named by its path relative to the logdir with ``/``
separators (``.`` for the logdir itself). Files of a run are read in sorted
name order.

Restart purge: when a tag is logged at a step below the largest step seen so
far for that tag, its points at steps >= that step are dropped (the training
restarted from a checkpoint), then reading continues. The purge is per tag,
as TensorBoard does for files without a session log: a second writer sharing
the run directory with other tags (your own SummaryWriter next to
Lightning's) must not wipe the first one's data. A value logged again at the
same step replaces the earlier one. A tag that went back to its first step
twice or more is named in the run's problems: a step counter that starts
again (each epoch's batch index logged as the step) keeps only its last round.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from tb_crash_signals.ingest import records, scalars
from tb_crash_signals.ingest.redact import redact
from tb_crash_signals.ingest.series import Series
from tb_crash_signals.ingest.storage import Storage, StorageError, local_path, storage_for

__all__ = ["discover_runs", "RunReader", "ReaderStats", "LogdirSource", "reload_readers"]

_CHUNK_BYTES = records.MAX_RECORD_LEN + 16  # one read always holds a whole record
_MAX_CHUNKS = 64  # per-tag append chunks before they are consolidated
# A file's unparsed tail (a record still being written) is kept between reloads up to
# this size, so the next reload fetches only the bytes appended after it.
_MAX_TAIL = 1 << 20
# A tag that went back to its first step this many times is told in the run's problems: one restart
# is a job started over; more, a step counter that starts again.
RESTARTS_TOLD = 2
# Runs whose first ranges are fetched ahead of the one being parsed from a remote storage:
# enough to cover a request's latency (13 ms from a server on 127.0.0.1, tens of ms from
# an object store) with parsing (~20-40 ms per run of 10 k steps); more adds concurrent
# streams whose handling competes with the parse for the GIL.
PREFETCH_RUNS = 4


def discover_runs(logdir, storage: Storage | None = None) -> list[str]:
    """Names of the runs under `logdir` (sorted), TensorBoard-style."""
    storage = storage or storage_for(os.fspath(logdir))
    return storage.run_dirs(storage.normpath(local_path(logdir)))


@dataclasses.dataclass
class ReaderStats:
    """Counters of one RunReader (cumulative over reloads).

    Attributes:
        records: good records parsed.
        scalar_points: scalar points read (including ones purged later).
        corrupt_records: corrupt records skipped (bad CRC, bad length,
            unparsable payload).
        files: event files known.
        bytes_read: bytes read from the files (each byte once: a partial record
            at the end of a file is kept, not read again).
        truncated_tail: some file currently ends inside a record (its writer
            is presumably still writing; the rest is read on a later reload).
        purges: restart purges applied.
    """

    records: int = 0
    scalar_points: int = 0
    corrupt_records: int = 0
    files: int = 0
    bytes_read: int = 0
    truncated_tail: bool = False
    purges: int = 0


class _FileState:
    __slots__ = ("name", "offset", "size", "tail", "resyncing", "corrupt", "truncated", "error", "shrunk")

    def __init__(self, name):
        self.name = name
        self.offset = 0  # where the next parse starts
        self.size = 0  # bytes of the file read so far
        self.tail = b""  # the bytes from `offset` to `size`, when kept
        self.resyncing = False
        self.corrupt = 0
        self.truncated = False
        self.error = None
        self.shrunk = None


class _TagStore:
    """Append-friendly storage of one tag's points (lists of numpy chunks)."""

    __slots__ = (
        "steps", "walls", "values", "n", "max_step", "increasing", "cache", "rewrites", "buffers", "first_step",
        "restarts",
    )

    def __init__(self):
        self.steps, self.walls, self.values = [], [], []
        self.n = 0
        self.max_step = None
        self.increasing = True  # steps strictly increasing overall
        self.cache = None
        # Changes other than points appended after the last step (purges, a
        # step logged again or out of order): while this count is unchanged,
        # the tag's series only grows.
        self.rewrites = 0
        # Once consolidated: arrays with room to spare whose first points are
        # the first chunk of each list (see _consolidate), else None.
        self.buffers = None
        # The first step ever appended, and the restart purges back to it or before: a step
        # counter that starts again (each epoch's batch index logged as the step) purges all
        # but its last round.
        self.first_step = None
        self.restarts = 0

    def append(self, steps, walls, values, purge: bool = False) -> int:
        """Appends points in write order; returns how many restart purges it made.

        With `purge`, a step lower than the tag's largest so far is a restart:
        the tag's points at that step and later are dropped first.
        """
        k = steps.shape[0]
        if not k:
            return 0
        purges = 0
        if purge:
            while k:
                prev = np.iinfo(np.int64).min if self.max_step is None else self.max_step
                before = np.maximum.accumulate(np.concatenate([[prev], steps[:-1]]))
                back = np.flatnonzero(steps < before)
                if not back.shape[0]:
                    break
                j = int(back[0])
                self._append(steps[:j], walls[:j], values[:j])
                if self.first_step is not None and steps[j] <= self.first_step:
                    self.restarts += 1
                self.purge(int(steps[j]))
                purges += 1
                steps, walls, values = steps[j:], walls[j:], values[j:]
                k = steps.shape[0]
        self._append(steps, walls, values)
        return purges

    def _append(self, steps, walls, values):
        k = steps.shape[0]
        if not k:
            return
        if self.increasing:
            ok = self.max_step is None or steps[0] > self.max_step
            if ok and k > 1:
                ok = bool(np.all(steps[1:] > steps[:-1]))
            self.increasing = ok
        if not self.increasing:  # the series is sorted anew: earlier points may move
            self.rewrites += 1
        m = int(steps.max())
        self.max_step = m if self.max_step is None else max(self.max_step, m)
        if self.first_step is None:
            self.first_step = int(steps[0])
        self.steps.append(steps)
        self.walls.append(walls)
        self.values.append(values)
        self.n += k
        self.cache = None
        if len(self.steps) > _MAX_CHUNKS:
            self._consolidate()

    def _consolidate(self):
        """Joins the chunks into one read-only array per column (shared with the cached Series).

        They are the first points of buffers with a quarter to spare, so the
        points appended later are copied in after them (a view of more of
        the buffer) rather than the whole tag again: reading the 1 % a
        training run appends costs 1 % of its points, not 100 %.
        """
        columns = (self.steps, self.walls, self.values)
        if len(self.steps) == 1 and not self.steps[0].flags.writeable:
            return
        done = self.steps[0].shape[0] if self.buffers is not None else 0
        if self.buffers is None or self.buffers[0].shape[0] < self.n:
            size = self.n + self.n // 4
            self.buffers = tuple(np.empty(size, c[0].dtype) for c in columns)
            done = 0
        for buffer, chunks in zip(self.buffers, columns):
            at = done
            for chunk in chunks[1:] if done else chunks:
                buffer[at : at + chunk.shape[0]] = chunk
                at += chunk.shape[0]
        views = [b[: self.n] for b in self.buffers]
        for a in views:
            a.flags.writeable = False  # shared with the cached Series (later writes go after it)
        self.steps, self.walls, self.values = ([a] for a in views)

    def purge(self, step) -> bool:
        if not self.n or self.max_step < step:
            return False
        self._consolidate()
        s, w, v = self.steps[0], self.walls[0], self.values[0]
        keep = s < step
        self.rewrites += 1
        self.buffers = None
        s, w, v = s[keep], w[keep], v[keep]
        for a in (s, w, v):
            a.flags.writeable = False
        self.steps, self.walls, self.values = [s], [w], [v]
        self.n = int(s.shape[0])
        self.max_step = int(s.max()) if self.n else None
        if not self.increasing:
            self.increasing = self.n < 2 or bool(np.all(s[1:] > s[:-1]))
        self.cache = None
        return True

    def series(self) -> Series:
        if self.cache is None:
            if not self.n:
                self.cache = Series.empty()
            else:
                self._consolidate()
                s, w, v = self.steps[0], self.walls[0], self.values[0]
                if self.increasing:
                    self.cache = Series(s, v, w)
                else:
                    self.cache = Series.from_arrays(s, v, w)
        return self.cache


class RunReader:
    """Reads every scalar of one run directory, incrementally.

    Args:
        run_dir: directory holding the run's event files.
        purge: apply the restart purge (see module docstring).
        storage: where `run_dir` is (default: the local filesystem, or the fsspec
            storage of a URL).
    """

    def __init__(self, run_dir, purge: bool = True, storage: Storage | None = None):
        run_dir = local_path(run_dir)
        self.storage = storage or storage_for(os.fspath(run_dir))
        self.run_dir = self.storage.normpath(run_dir)
        self.purge = purge
        self.stats = ReaderStats()
        self._files: dict[str, _FileState] = {}
        self._tags: dict[str, _TagStore] = {}
        self._plugins: dict[str, str] = {}
        self._list_error = None

    # -- public API ---------------------------------------------------------

    def tags(self) -> list[str]:
        """Sorted tags that currently have at least one point."""
        return sorted(t for t, st in self._tags.items() if st.n)

    def series(self, tag: str) -> Series:
        """All points of `tag` (KeyError if the run never logged it)."""
        return self._tags[tag].series()

    def revision(self, tag: str) -> int:
        """Changes of `tag`'s points other than appends after its last step.

        While it stays the same, `series(tag)` only grows: it is an earlier
        `series(tag)` with points appended (what incremental analysis needs).
        """
        return self._tags[tag].rewrites

    def problems(self) -> list[str]:
        """Human-readable issues with this run's files."""
        out = []
        if self._list_error:
            out.append(f"cannot list run directory: {self._list_error}")
        for name in sorted(self._files):
            fs = self._files[name]
            if fs.corrupt:
                plural = "s" if fs.corrupt != 1 else ""
                out.append(f"{fs.corrupt} corrupt record{plural} skipped in {name}")
            if fs.error:
                out.append(f"cannot read {name}: {fs.error}")
            if fs.shrunk:
                out.append(f"{name} shrank from {fs.shrunk[0]} to {fs.shrunk[1]} bytes; not re-read")
        for tag in sorted(self._tags):
            restarts = self._tags[tag].restarts
            if restarts >= RESTARTS_TOLD:
                out.append(
                    f"{redact(tag)!r} went back to its first step {restarts} times (a step counter that starts "
                    "again, such as each epoch's batch index?): only the points since the last time are "
                    "analysed, as a restarted run's; log a global step"
                )
        return out

    def reload(self) -> bool:
        """Reads what was appended since the last call; True if any tag changed."""
        changed = False
        try:
            names = self.storage.event_files(self.run_dir)
            self._list_error = None
        except OSError as e:
            self._list_error = _message(e)
            names = []
        for name in names:
            if name not in self._files:
                self._files[name] = _FileState(name)
        self.stats.files = len(self._files)
        for name in sorted(self._files):
            changed |= self._read_file(self._files[name])
        self.stats.truncated_tail = any(fs.truncated for fs in self._files.values())
        return changed

    def planned_reads(self) -> list[tuple[str, int, int]]:
        """The first read the next `reload` makes of each file that grew, as (path,
        offset, length): what a remote storage can fetch ahead (`reload_readers`).
        Asks only for the listing and sizes (a remote storage answers from its listing)."""
        storage = self.storage
        try:
            names = storage.event_files(self.run_dir)
        except OSError:
            return []
        out = []
        for name in names:
            fs = self._files.get(name)
            offset, tail, known = (fs.offset, fs.tail, fs.size) if fs is not None else (0, b"", 0)
            path = storage.join(self.run_dir, name)
            try:
                size = storage.size(path)
            except OSError:
                continue
            if size <= known:
                continue
            pos = offset + len(tail)
            n = max(0, min(_CHUNK_BYTES - len(tail), size - pos))
            if n:
                out.append((path, pos, n))
        return out

    # -- reading ------------------------------------------------------------

    def _read_file(self, fs: _FileState) -> bool:
        storage = self.storage
        path = storage.join(self.run_dir, fs.name)
        changed = False
        try:
            size = storage.size(path)
            if size < fs.size:
                fs.shrunk = (fs.size, size)
                return False
            fs.shrunk = None
            if size == fs.size:  # nothing appended (a pending tail is not re-read)
                fs.error = None
                return False
            want = _CHUNK_BYTES
            tail = fs.tail
            pos = fs.offset + len(tail)  # the next byte to fetch
            while True:
                # Never ask for more than the file holds: a read of n bytes allocates n
                # up front, and `want` can be the 64 MiB record bound.
                n = max(0, min(want - len(tail), size - pos))
                new = storage.read(path, pos, n) if n else b""
                self.stats.bytes_read += len(new)
                pos += len(new)
                data = tail + new if tail else new
                if not data:
                    break
                res = records.scan_records(data, 0, resyncing=fs.resyncing, verify_data=False)
                fs.corrupt += res.n_corrupt
                self.stats.corrupt_records += res.n_corrupt
                fs.truncated = res.truncated
                fs.resyncing = res.resyncing
                if res.offsets.shape[0]:
                    dec = scalars.decode_scalars(data, res.offsets, res.lengths, verify=True)
                    fs.corrupt += dec.n_corrupt
                    self.stats.corrupt_records += dec.n_corrupt
                    changed |= self._apply(dec)
                fs.offset += res.end
                tail = data[res.end:] if res.end < len(data) else b""
                fs.size = max(fs.size, pos)
                if len(new) < n or pos >= size:
                    break  # all the file holds now
                if res.end == 0:  # a record longer than the chunk: read more at once
                    if want >= records.MAX_RECORD_LEN + 16:
                        break
                    want = min(2 * want, records.MAX_RECORD_LEN + 16)
            # A tail too big to keep is read again from `offset` next time.
            fs.tail = tail if len(tail) <= _MAX_TAIL else b""
            fs.error = None
        except OSError as e:
            fs.error = _message(e)
        return changed

    def _apply(self, dec: scalars.DecodedBatch) -> bool:
        self.stats.records += dec.n_records
        for tag, plugin in dec.plugins:
            self._plugins.setdefault(tag, plugin)
        p_rec, p_tag = dec.point_rec, dec.point_tag
        p_step, p_wall, p_val = dec.point_step, dec.point_wall, dec.point_value
        if dec.point_tensor.any():
            ok_tag = np.array(
                [self._plugins.get(t, "") in ("", scalars.SCALAR_PLUGIN) for t in dec.tags],
                dtype=bool,
            )
            keep = ~dec.point_tensor | ok_tag[p_tag]
            if not keep.all():
                p_rec, p_tag, p_step = p_rec[keep], p_tag[keep], p_step[keep]
                p_wall, p_val = p_wall[keep], p_val[keep]
        self.stats.scalar_points += int(p_rec.shape[0])

        n = p_rec.shape[0]
        changed = self._append(dec.tags, p_tag[:n], p_step[:n], p_wall[:n], p_val[:n])
        return changed

    def _append(self, tags, p_tag, p_step, p_wall, p_val) -> bool:
        k = p_tag.shape[0]
        if not k:
            return False
        if bool(np.all(p_tag == p_tag[0])):
            groups = [(int(p_tag[0]), slice(0, k))]
            order = None
        else:
            order = records.stable_order(p_tag)
            st = p_tag[order]
            cuts = [0] + (np.flatnonzero(np.diff(st)) + 1).tolist() + [k]
            groups = [(int(st[a]), slice(a, b)) for a, b in zip(cuts[:-1], cuts[1:])]
            p_step, p_wall, p_val = p_step[order], p_wall[order], p_val[order]
        for tid, sl in groups:
            tag = tags[tid]
            store = self._tags.get(tag)
            if store is None:
                store = self._tags[tag] = _TagStore()
            self.stats.purges += store.append(p_step[sl], p_wall[sl], p_val[sl], purge=self.purge)
        return True


def reload_readers(readers, ahead: int = PREFETCH_RUNS) -> bool:
    """Reloads `readers` in order; True if any changed.

    Over a remote storage the first reads of the next `ahead` readers are fetched
    while the current one is parsed (`Storage.prefetch`, itself bounded in bytes), so
    the scan waits for one request's latency at a time at most, not for each in turn.
    """
    readers = list(readers)
    changed = False
    issued = 0
    for i, reader in enumerate(readers):
        while issued < min(len(readers), i + 1 + ahead):
            nxt = readers[issued]
            if nxt.storage.remote:
                nxt.storage.prefetch(nxt.planned_reads())
            issued += 1
        changed |= reader.reload()
    return changed


def _message(e: OSError) -> str:
    """An OSError as a problem line: a storage's own message, else the system's."""
    if isinstance(e, StorageError):
        return str(e)
    return redact(e.strerror or str(e))


class LogdirSource:
    """Every run under a logdir, read at full resolution.

    Args:
        logdir: the TensorBoard logdir (a local path or an fsspec URL).
        purge: apply the restart purge in every run.
        storage: where the logdir is (default: from `logdir`, see `storage.storage_for`).
    """

    def __init__(self, logdir, purge: bool = True, storage: Storage | None = None):
        logdir = local_path(logdir)
        self.storage = storage or storage_for(os.fspath(logdir))
        self.logdir = self.storage.normpath(logdir)
        self.purge = purge
        self._readers: dict[str, RunReader] = {}
        self._error = None

    def discover(self) -> list[str]:
        """The runs under the logdir now (a reader is made for each new one, nothing is read)."""
        try:
            if not self.storage.isdir(self.logdir):
                self._error = f"logdir {redact(self.logdir)} is not a readable directory"
                runs = []
            else:
                self._error = None
                runs = self.storage.run_dirs(self.logdir)
        except OSError as e:  # os.walk swallows most errors; a remote listing does not
            self._error = f"cannot list logdir: {_message(e)}"
            runs = []
        for run in runs:
            if run not in self._readers:
                path = self.storage.run_path(self.logdir, run)
                self._readers[run] = RunReader(path, purge=self.purge, storage=self.storage)
        return runs

    def error(self) -> str | None:
        """Why the logdir itself could not be listed at the last discovery, or None."""
        return self._error

    def reload(self) -> bool:
        """Discovers new runs and reads what was appended; True if anything changed."""
        self.discover()
        return reload_readers(self._readers[run] for run in sorted(self._readers))

    def runs(self) -> list[str]:
        return sorted(self._readers)

    def reader(self, run: str) -> RunReader:
        return self._readers[run]

    def run_tags(self) -> dict[str, list[str]]:
        return {run: self._readers[run].tags() for run in sorted(self._readers)}

    def series(self, run: str, tag: str) -> Series:
        """All points of (run, tag); KeyError if either is unknown."""
        return self._readers[run].series(tag)

    def problems(self) -> list[str]:
        out = [self._error] if self._error else []
        for run in sorted(self._readers):
            out.extend(f"run {run}: {p}" for p in self._readers[run].problems())
        return out
