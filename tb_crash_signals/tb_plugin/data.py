"""Every point of a run's mapped signals: from its event files, else from TensorBoard.

Where the run's directory can be reached -- on the local filesystem, or in
object storage through fsspec (`ingest.remote`) -- its event files are read at
full resolution by one incremental `RunReader` per run (cached, bounded by
points held): TensorBoard itself keeps only a random reservoir of 1000 points
per tag, which almost surely misses a one-step spike. Where the files cannot
be reached (no fsspec backend or credentials for a remote logdir, a run whose
directory is gone), what TensorBoard holds is read through its data provider
and the result says `sampled` when the reservoir of a tag is full.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading

from tensorboard.data import provider as tb_provider

from tb_crash_signals.ingest.reader import RunReader
from tb_crash_signals.ingest.series import Series
from tb_crash_signals.tb_plugin.metadata import SCALARS_PLUGIN
from tb_crash_signals.tb_plugin.state import LRU, ReaderSlot

# TensorBoard's default reservoir size for scalars, in both loaders
# (data_ingester.DEFAULT_TENSOR_SIZE_GUIDANCE and the Rust data server).
DEFAULT_SCALAR_SAMPLES = 1000
# "All points TensorBoard holds" when reading from the data provider.
PROVIDER_DOWNSAMPLE = 1_000_000_000


@dataclasses.dataclass(frozen=True)
class Loaded:
    """A run's data as loaded.

    Attributes:
        data: signal -> series, for the mapped signals that have data.
        sampled: some series is TensorBoard's full reservoir (not every step).
        problems: what the readers found wrong (corrupt records, unreadable files).
        key: identifies the data (readers and their generations, TensorBoard's
            per-tag size, max step and wall time).
        lineage: identifies what each series extends while points are only
            appended to it (reader, tag, rewrites); None if a series comes
            from TensorBoard.
    """

    data: dict
    sampled: bool
    problems: list
    key: tuple
    lineage: tuple | None


class RunData:
    """Loads runs' data through cached readers, or TensorBoard's data provider."""

    def __init__(self, provider, capacity: int, max_readers: int, point_budget: int, count,
                 storage_of=None):
        self._provider = provider
        self._storage_of = storage_of  # directory -> its Storage (default: from the path)
        self._capacity = capacity
        self._count = count  # count(what): the service's statistics
        self._lock = threading.Lock()
        self._tokens = itertools.count(1)
        self.readers = LRU(
            max_readers,
            max_weight=point_budget,
            weight=lambda slot: slot.reader.stats.scalar_points,
        )

    def _slot(self, run, directory) -> ReaderSlot:
        with self._lock:
            slot = self.readers.get(run)
            if slot is None or slot.directory != directory:
                storage = self._storage_of(directory) if self._storage_of is not None else None
                slot = ReaderSlot(RunReader(directory, storage=storage), next(self._tokens), directory)
                self.readers.put(run, slot)
                self._count("readers_created")
            return slot

    def load(self, refs, dirs, listing, ctx, eid) -> Loaded:
        """Every point of each signal of `refs` (signal -> TagRef).

        Args:
            dirs: member run -> its directory (local path or URL), or None.
            listing: TensorBoard's `list_scalars` (run -> tag -> metadata).
            ctx, eid: TensorBoard's request context and experiment id.
        """
        data: dict[str, Series] = {}
        problems: list[str] = []
        key = []
        from_files: dict[str, dict[str, Series]] = {}
        revisions: dict[tuple, tuple] = {}  # (member, tag) -> (reader token, rewrites)
        for member in sorted({ref.run for ref in refs.values()}):
            directory = dirs.get(member)
            if directory is None:
                continue
            slot = self._slot(member, directory)
            wanted = {ref.tag for ref in refs.values() if ref.run == member}
            with slot.lock:
                if slot.reader.reload():
                    slot.generation += 1
                have = set(slot.reader.tags())
                from_files[member] = {t: slot.reader.series(t) for t in wanted & have}
                for t in wanted & have:
                    revisions[(member, t)] = (slot.token, slot.reader.revision(t))
                problems.extend(f"run {member}: {p}" for p in slot.reader.problems())
                key.append((member, slot.token, slot.generation))
        with self._lock:
            self.readers.evict()

        missing = []
        for dim, ref in refs.items():
            s = from_files.get(ref.run, {}).get(ref.tag)
            if s is not None:
                data[dim] = s
            else:
                missing.append((dim, ref))
        lineage = None
        if not missing:
            lineage = tuple(
                sorted((dim, r.run, r.tag) + revisions[(r.run, r.tag)] for dim, r in refs.items())
            )
        sampled = False
        if missing and self._provider is not None:
            sampled = self._from_provider(missing, listing, ctx, eid, data, key)
        return Loaded(data, sampled, problems, tuple(key), lineage)

    def _from_provider(self, missing, listing, ctx, eid, data, key) -> bool:
        """Reads the `missing` (signal, ref) pairs from TensorBoard; True if sampled."""
        runs = sorted({ref.run for _, ref in missing})
        tags = sorted({ref.tag for _, ref in missing})
        got = self._provider.read_scalars(
            ctx,
            experiment_id=eid,
            plugin_name=SCALARS_PLUGIN,
            downsample=PROVIDER_DOWNSAMPLE,
            run_tag_filter=tb_provider.RunTagFilter(runs=runs, tags=tags),
        )
        sampled = False
        for dim, ref in missing:
            points = (got.get(ref.run) or {}).get(ref.tag)
            if points is None:
                continue
            data[dim] = Series.from_arrays(
                [p.step for p in points], [p.value for p in points], [p.wall_time for p in points]
            )
            # A reservoir that is not full holds every point logged.
            if self._capacity and len(points) >= self._capacity:
                sampled = True
            meta = (listing.get(ref.run) or {}).get(ref.tag)
            key.append(
                ("tb", ref.run, ref.tag, len(points),
                 getattr(meta, "max_step", None), getattr(meta, "max_wall_time", None))
            )
        return sampled
