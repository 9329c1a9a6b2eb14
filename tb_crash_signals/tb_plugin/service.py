"""The plugin's analysis service: the `runs`, `analysis` and `rules` answers, cached (no HTTP).

Runs and tags come from TensorBoard's data provider (`list_scalars`), so the
tab shows the runs TensorBoard shows, with either loader; every point comes
from `data.RunData`. Results are cached per logical run, keyed on the identity
of the data (event-file sizes and mtimes, reader generations, TensorBoard's
per-tag `max_step`/`max_wall_time`, the config file's mtime), behind per-run
locks, in bounded LRUs; the `runs` listing keeps only a small summary per
run. A run that grew is re-analysed from its last analysis
(`analyze_run(resume=...)`). On big logdirs `runs` answers within a time
budget and the background worker analyses the rest.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import logging
import threading
import time

from tensorboard import errors

from tb_crash_signals.analysis.config import Config
from tb_crash_signals.analysis.engine import analyze_run
from tb_crash_signals.analysis.signals import SIGNALS, LogicalRun, group_runs
from tb_crash_signals.executors import default_jobs
from tb_crash_signals.report.document import run_to_json
from tb_crash_signals.tb_plugin import payloads
from tb_crash_signals.tb_plugin.data import RunData
from tb_crash_signals.tb_plugin.locator import RunLocator
from tb_crash_signals.tb_plugin.metadata import PENDING, SCALARS_PLUGIN
from tb_crash_signals.tb_plugin.pool import AnalysisPool, RunTask
from tb_crash_signals.tb_plugin.state import LRU, ConfigInForce, ConfigState, Entry, rank_entries
from tb_crash_signals.tb_plugin.worker import BackgroundWorker

logger = logging.getLogger("tensorboard")


@dataclasses.dataclass(frozen=True)
class Limits:
    """What the service keeps and how long a `runs` request may analyse.

    Attributes:
        max_readers: event-file readers kept (one per run).
        reader_points: points all readers may hold together.
        max_analyses: `analysis` payloads kept.
        max_resumable: last analyses kept to resume from once points are
            appended (their hits and chart caches) ...
        resume_hits: ... holding at most this many hit indices (8 bytes each).
        lazy_runs: above this many runs, a `runs` request answers within
            about `runs_budget` seconds: it analyses runs, most recently
            written first, until then and lists the others as pending while
            the background worker analyses them in the same order.
        runs_budget: see `lazy_runs`.
        worker_patience: seconds the worker waits for requests to finish.
        pool_processes: worker processes for the background pass (0: it runs
            in a thread of TensorBoard's process, on one core).
    """

    max_readers: int = 256
    reader_points: int = 50_000_000
    max_analyses: int = 256
    max_resumable: int = 32
    resume_hits: int = 20_000_000
    lazy_runs: int = 100
    runs_budget: float = 1.5
    worker_patience: float = 30.0
    pool_processes: int = dataclasses.field(default_factory=default_jobs)


class _Resume:
    """A run's last analysis, to resume from: its key (see `_resumable`), the engine's
    checkpoint and the chart caches (signal -> decimate.Decimator)."""

    __slots__ = ("key", "checkpoint", "charts")

    def __init__(self, key, checkpoint, charts):
        self.key, self.checkpoint, self.charts = key, checkpoint, charts


@dataclasses.dataclass(frozen=True)
class _Job:
    """What analysing one listed run needs: the run, TensorBoard's listing and request
    context, and the config in force."""

    logical: LogicalRun
    listing: dict
    cfg: ConfigInForce
    ctx: object
    eid: str


class AnalysisService:
    """Answers the plugin's routes with plain values.

    Args:
        provider: TensorBoard's data provider (None: no runs).
        locator: maps run names to local directories.
        config: the config file in force.
        capacity: TensorBoard's scalar reservoir size (to tell `sampled`).
        limits: cache sizes and time budgets.
    """

    def __init__(self, provider, locator: RunLocator, config: ConfigState, capacity: int,
                 limits: Limits = Limits()):
        self._provider = provider
        self._locator = locator
        self._config = config
        self.limits = limits
        self._lock = threading.Lock()
        self.stats = collections.Counter()  # analyses, readers_created, cache_hits (tests, debugging)
        self.data = RunData(provider, capacity, limits.max_readers, limits.reader_points, self._count,
                            storage_of=locator.storage_of)
        self._storage_warned = None  # the storage error last logged
        self._run_locks: dict[str, threading.Lock] = {}
        self._summaries: dict[str, Entry] = {}
        self._analyses = LRU(limits.max_analyses)
        self._resume = LRU(limits.max_resumable, max_weight=limits.resume_hits,
                           weight=lambda r: r.checkpoint.hits)
        self._failures: dict[str, Entry] = {}  # run -> failed entry, current while its key is
        self._grouping = None  # (key, logical runs) of the last `runs` request, see `_grouped`
        self.pool = AnalysisPool(limits.pool_processes) if limits.pool_processes > 0 else None
        self._pool_keys = itertools.count(1)
        self.worker = BackgroundWorker(
            lambda job, key: self._analyse_listed(job, key),
            limits.worker_patience,
            on_done=lambda: self._count("background_analyses"),
            offload=self._offload if self.pool is not None else None,
            landed=self._landed,
            max_in_flight=2 * max(1, limits.pool_processes),
        )

    # -- the answers --------------------------------------------------------

    def runs(self, ctx, eid) -> dict:
        """The `runs` listing: every logical run's summary, sick first."""
        started = time.monotonic()
        cfg = self._config.get()
        listing = self._listing(ctx, eid)
        logical = self._grouped(listing, cfg)
        lazy = len(logical) > self.limits.lazy_runs
        entries = []
        waiting = []  # big logdirs: (job, data key) without a current summary
        for lr in logical:
            job = _Job(lr, listing, cfg, ctx, eid)
            try:
                entry, key = self._ensure(job, want_payload=False, cheap=lazy)
            except Exception as e:
                logger.exception("crash_signals: analysing run %r failed", lr.name)
                entry, key = self._failed_entry(lr, f"{type(e).__name__}: {e}"), None
            if entry is None:
                waiting.append((job, key))
            else:
                entries.append(entry)
        if waiting:
            # Most recently written first: the runs being trained, then the newest.
            waiting.sort(key=lambda w: (-_last_write(w[0].logical, listing), w[0].logical.name))
            busy = self.worker.busy()
            deadline = started + self.limits.runs_budget
            queue = []
            for job, key in waiting:
                if busy or time.monotonic() >= deadline:
                    queue.append((job, key))  # the worker is on it already, or no time left
                else:
                    entries.append(self._analyse_listed(job, key))
            self.worker.replace({job.logical.name: (job, key) for job, key in queue})
            entries.extend(self._pending_entry(job.logical, key) for job, key in queue)
            self.worker.start()
        self._forget({lr.name for lr in logical})
        problems = [p for e in entries for p in e.problems]
        pending = sum(1 for e in entries if e.summary.get("pending"))
        listing_payload = payloads.runs_listing(rank_entries(entries), problems, pending, cfg.error)
        listing_payload["storage_error"] = self._storage_error()
        return listing_payload

    def analysis(self, ctx, eid, name: str) -> str:
        """The `analysis` payload of run `name`, as JSON text.

        Raises:
            errors.NotFoundError: no logical run has that name.
        """
        cfg = self._config.get()
        listing = self._listing(ctx, eid)
        logical = group_runs({run: list(tags) for run, tags in listing.items()}, cfg.config.signals)
        match = [lr for lr in logical if lr.name == name]
        if not match:
            parent = [lr.name for lr in logical if name in lr.members]
            hint = f"; it is part of run {parent[0]!r}" if parent else ""
            raise errors.NotFoundError(f"no run named {payloads.shown(name)}{hint}")
        lr = match[0]
        try:
            _, text = self._ensure(_Job(lr, listing, cfg, ctx, eid), want_payload=True)
        except Exception as e:
            logger.exception("crash_signals: analysing run %r failed", lr.name)
            return payloads.failed_analysis(lr, f"{type(e).__name__}: {e}", cfg.error)
        return text

    def logical_runs(self, ctx, eid) -> list[LogicalRun]:
        """The logical runs of TensorBoard's listing (as `runs` lists them)."""
        return self._grouped(self._listing(ctx, eid), self._config.get())

    def _storage_error(self) -> str | None:
        """The remote logdir's fatal error (logged once per message), or None."""
        message = self._locator.storage_error()
        if message is not None:
            message += "; the tab analyses TensorBoard's sampled points (not every step) until this is fixed"
            if message != self._storage_warned:
                logger.warning("crash_signals: %s", message)
        self._storage_warned = message
        return message

    def rules(self) -> dict:
        cfg = self._config.get()
        return payloads.rules_payload(cfg.config, cfg.error)

    # What the routes answer when the above raised something unexpected.

    def runs_failed(self, message) -> dict:
        return payloads.failed_runs_listing(message, self._config_error())

    def analysis_failed(self, name, message) -> dict:
        lr = LogicalRun(name=name or "", members=(name or "",), signals={k: None for k in SIGNALS}, tags={})
        return payloads.failed_analysis(lr, message, self._config_error())

    def rules_failed(self, message) -> dict:
        return payloads.rules_payload(Config(), message)

    def _config_error(self):
        try:
            return self._config.get().error
        except Exception:
            return None

    # -- analysis and caching -----------------------------------------------

    def _listing(self, ctx, eid) -> dict:
        if self._provider is None:
            return {}
        return self._provider.list_scalars(ctx, experiment_id=eid, plugin_name=SCALARS_PLUGIN)

    def _count(self, what):
        with self._lock:
            self.stats[what] += 1

    def _run_lock(self, name) -> threading.Lock:
        with self._lock:
            lock = self._run_locks.get(name)
            if lock is None:
                lock = self._run_locks[name] = threading.Lock()
            return lock

    def _grouped(self, listing, cfg: ConfigInForce):
        """`group_runs` of TensorBoard's listing, memoised on the config and the runs' tags.

        Matching every tag name against the signal patterns costs ~0.2 ms per
        run: most of a `runs` request that finds every summary current.
        """
        key = (cfg.key, tuple(sorted((run, tuple(sorted(tags))) for run, tags in listing.items())))
        with self._lock:
            if self._grouping is not None and self._grouping[0] == key:
                return self._grouping[1]
        logical = group_runs({run: list(tags) for run, tags in listing.items()}, cfg.config.signals)
        with self._lock:
            self._grouping = (key, logical)
        return logical

    def _ensure(self, job: _Job, want_payload: bool, cheap: bool = False):
        """The run's summary entry (and analysis payload text if wanted), cached.

        With `cheap` (big logdirs; summaries only), nothing is read or
        analysed: the result is the run's current summary, or (None, key)
        when it has none.

        Returns (entry, payload text or None) -- or (None, key) when cheap.
        """
        logical, listing, cfg = job.logical, job.listing, job.cfg
        refs = {dim: ref for dim, ref in logical.signals.items() if ref is not None}
        members = sorted({ref.run for ref in refs.values()})
        with self._run_lock(logical.name):
            dirs = {m: self._locator.directory(m) for m in members}
            lkey = _logical_key(logical)
            tb_stats = tuple(
                (m, t, getattr(ts, "max_step", None), getattr(ts, "max_wall_time", None))
                for m in members
                if dirs[m] is None
                for t, ts in sorted((listing.get(m) or {}).items())
            )
            fast_key = (cfg.key, lkey, tb_stats, tuple((m, self._locator.signature(dirs[m])) for m in members))
            if cheap:
                return self._current(logical.name, fast_key)
            with self._lock:
                entry = self._summaries.get(logical.name)
            if entry is not None and entry.fast_key == fast_key:
                hit = self._cached_payload(logical.name, entry, want_payload)
                if hit is not False:
                    self._count("cache_hits")
                    return entry, hit

            loaded = self.data.load(refs, dirs, listing, job.ctx, job.eid)
            data_key = (cfg.key, lkey, loaded.key)
            if entry is not None and entry.data_key == data_key:
                entry.fast_key = fast_key
                hit = self._cached_payload(logical.name, entry, want_payload)
                if hit is not False:
                    self._count("cache_hits")
                    return entry, hit

            self._count("analyses")
            resume_key = None if loaded.lineage is None else (cfg.key, lkey, loaded.lineage)
            resume = self._resumable(logical.name, resume_key)
            result = analyze_run(logical, loaded.data, cfg.config, loaded.sampled, resume=resume.checkpoint)
            if result.checkpoint.since is not None:
                self._count("incremental_analyses")
            report = run_to_json(result)
            entry = Entry(logical.name, fast_key, data_key, payloads.runs_item(report, result), loaded.problems)
            text = payloads.analysis_payload(
                report, result, cfg.config, cfg.error, loaded.problems, resume.charts
            )
            with self._lock:
                self._summaries[logical.name] = entry
                self._analyses.put(logical.name, (data_key, text))
                if resume_key is not None:
                    self._resume.put(logical.name, _Resume(resume_key, result.checkpoint, resume.charts))
            return entry, (text if want_payload else None)

    def _resumable(self, name, key) -> _Resume:
        """The run's last analysis if its data can only have grown since (same key), else a blank.

        The key holds the config, the tag mapping and each series' lineage
        (reader, tag, rewrites): while it is unchanged, every series is the
        one analysed then with points appended, which is what
        `analyze_run(resume=...)` and the chart caches (`decimate.Decimator`)
        require. A restart purge, another reader or config: a full analysis.
        """
        with self._lock:
            prev = self._resume.pop(name)
        if key is not None and prev is not None and prev.key == key:
            return prev
        return _Resume(key, None, {})

    def _current(self, name, fast_key):
        """The run's current summary (or its failure) as (entry, None), else (None, fast_key)."""
        with self._lock:
            entry = self._summaries.get(name)
            failed = self._failures.get(name)
        if entry is not None and entry.fast_key == fast_key:
            self._count("cache_hits")
            return entry, None
        if failed is not None and failed.fast_key == fast_key:
            return failed, None
        return None, fast_key

    def _cached_payload(self, name, entry, want_payload):
        """None if no payload is wanted, the cached text, or False if it must be rebuilt."""
        if not want_payload:
            return None
        with self._lock:
            cached = self._analyses.get(name)
        if cached is not None and cached[0] == entry.data_key:
            return cached[1]
        return False

    def _analyse_listed(self, job: _Job, key) -> Entry:
        """Full analysis of a pending run (a `runs` request or the worker): its entry.

        A failure is remembered under the run's data key (`key`), so the run is
        not retried, and not listed as pending, until its data change.
        """
        try:
            entry, _ = self._ensure(job, want_payload=False)
            return entry
        except Exception as e:
            logger.exception("crash_signals: analysing run %r failed", job.logical.name)
            entry = self._failed_entry(job.logical, f"{type(e).__name__}: {e}")
            entry.fast_key = key
            with self._lock:
                self._failures[job.logical.name] = entry
            return entry

    # -- the background pass in worker processes (pool.py) ---------------------

    def _offload(self, job: _Job, key):
        """A future of the pool's analysis of a pending run, or None to analyse it here
        (a member TensorBoard alone can read, or a summary that became current)."""
        if key is None:
            return None
        members = sorted({ref.run for ref in job.logical.signals.values() if ref is not None})
        dirs = {m: self._locator.directory(m) for m in members}
        if not members or any(d is None for d in dirs.values()):
            return None
        with self._lock:
            entry = self._summaries.get(job.logical.name)
        if entry is not None and entry.fast_key == key:
            return None
        task = RunTask(
            job.logical,
            {m: (d, self._locator.storage_of(d).portable([d])) for m, d in dirs.items()},
            job.cfg.config, job.cfg.error,
        )
        return self.pool.submit(task)

    def _landed(self, future, job: _Job, key) -> bool:
        """Stores the pool's analysis of a run under the fast key it was sent with
        (files that grew since change that key: the run is analysed again)."""
        name = job.logical.name
        try:
            outcome = future.result()
        except Exception as e:
            logger.warning("crash_signals: the analysis pool failed on run %r (%s: %s); analysing it here",
                           name, type(e).__name__, e)
            return False
        if outcome.summary is None:
            return False
        # A data key no reader's ever equals: only the fast key can make this entry current.
        entry = Entry(name, key, ("pool", next(self._pool_keys)), outcome.summary, outcome.problems)
        with self._lock:
            current = self._summaries.get(name)
            if current is not None and current.fast_key == key:
                return True  # a request analysed it meanwhile
            self._summaries[name] = entry
            self._analyses.put(name, (entry.data_key, outcome.text))
        self._count("pool_analyses")
        return True

    def _pending_entry(self, logical, key) -> Entry:
        """The `runs` line of a run whose analysis is not finished.

        `"health": "pending"`, unless the run's last full analysis (same config
        and tag mapping, older data) found it sick: the rules are causal, so
        those findings stand; that line is listed with `"pending": true`.
        """
        with self._lock:
            prev = self._summaries.get(logical.name)
        if prev is not None and prev.health in ("critical", "warning") and _same_setup(prev.fast_key, key):
            return Entry(logical.name, None, None, dict(prev.summary, pending=True), prev.problems)
        summary = payloads.unanalysed_item(
            logical, PENDING, "analysing: queued for a full-resolution analysis", pending=True
        )
        return Entry(logical.name, None, None, summary, [])

    def _failed_entry(self, logical, message) -> Entry:
        summary = payloads.unanalysed_item(logical, "no_signals", f"analysis failed: {message}", error=message)
        return Entry(logical.name, None, None, summary, [f"run {logical.name}: analysis failed: {message}"])

    def _forget(self, names):
        """Drops cached state of runs TensorBoard no longer lists."""
        with self._lock:
            for name in [n for n in self._summaries if n not in names]:
                del self._summaries[name]
                self._analyses.pop(name)
            for name in [n for n in self._resume.keys() if n not in names]:
                self._resume.pop(name)
            for name in [n for n in self._failures if n not in names]:
                del self._failures[name]
            for name in [n for n in self._run_locks if n not in names]:
                if not self._run_locks[name].locked():
                    del self._run_locks[name]
        self.worker.forget(names)


def _logical_key(logical):
    return (
        logical.name,
        logical.members,
        tuple((k, (v.run, v.tag) if v else None) for k, v in sorted(logical.signals.items())),
        tuple((m, tuple(t)) for m, t in sorted(logical.tags.items())),
    )


def _last_write(logical, listing) -> float:
    """Wall time of the run's newest point as TensorBoard lists it (-inf if unknown)."""
    times = [
        ts.max_wall_time
        for member in logical.members
        for ts in (listing.get(member) or {}).values()
        if getattr(ts, "max_wall_time", None) is not None
    ]
    return max(times, default=float("-inf"))


def _same_setup(old_key, new_key) -> bool:
    """Whether two fast keys of `_ensure` share config and tag mapping (only the data differ).

    Relies on the fast key's layout: (config key, logical key, ...).
    """
    return (
        isinstance(old_key, tuple)
        and isinstance(new_key, tuple)
        and len(old_key) >= 2
        and old_key[:2] == new_key[:2]
    )
