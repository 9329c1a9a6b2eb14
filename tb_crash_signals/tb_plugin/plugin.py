"""The Crash Signals TensorBoard plugin: routes, full-resolution data, caches.

Runs and tags come from TensorBoard's data provider (``list_scalars``), so the
tab shows the runs TensorBoard shows, with either loader. The points analysed
come, whenever the run's directory is reachable on the local filesystem, from
the run's event files read at full resolution by :class:`source.RunReader`
(one incremental reader per run, cached): TensorBoard itself keeps only a
random reservoir of 1000 points per tag, which almost surely misses a one-step
spike. Where the files cannot be reached (a remote ``gs://`` logdir, a run
whose directory is gone), the plugin analyses what TensorBoard holds
(``read_scalars``) and reports ``sampled: true`` when TensorBoard's reservoir
for a tag is full.

Analysis results are cached per logical run, keyed on the identity of the data
(event-file sizes and mtimes, reader generations, TensorBoard's per-tag
``max_step``/``max_wall_time``, the config file's mtime), behind per-run locks,
in bounded LRUs; the ``runs`` listing keeps only a small summary per run.

Routes (under ``/data/plugin/crash_signals/``, see docs/http_api.md): ``runs``,
``analysis?run=R``, ``rules``, ``index.js``, ``index.css``.
"""

from __future__ import annotations

import collections
import itertools
import logging
import os
import secrets
import threading
import time

from tensorboard import errors, plugin_util
from tensorboard.backend import http_util
from tensorboard.data import provider as tb_provider
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from tb_crash_signals.analysis.catalogue import catalogue_json
from tb_crash_signals.analysis.config import Config
from tb_crash_signals.analysis.engine import analyze_run
from tb_crash_signals.analysis.overlays import chart_overlays
from tb_crash_signals.analysis.signals import SIGNALS, LogicalRun, group_runs
from tb_crash_signals.ingest.reader import RunReader
from tb_crash_signals.ingest.series import Series
from tb_crash_signals.report.document import SCHEMA_VERSION, run_to_json
from tb_crash_signals.tb_plugin import decimate
from tb_crash_signals.tb_plugin.locator import RunLocator, file_signature, parse_logdir_spec  # noqa: F401
from tb_crash_signals.tb_plugin.state import (
    _LRU,
    _ConfigState,
    _dumps,
    _Entry,
    _rank_entries,
    _ReaderSlot,
)

PLUGIN_NAME = "crash_signals"
PENDING = "pending"  # `health` of a run listed before its analysis is done (big logdirs)
TAB_NAME = "Crash Signals"
SCALARS_PLUGIN = "scalars"
STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")

# TensorBoard's default reservoir size for scalars, in both loaders
# (data_ingester.DEFAULT_TENSOR_SIZE_GUIDANCE and the Rust data server).
DEFAULT_SCALAR_SAMPLES = 1000
# "All points TensorBoard holds" when reading from the data provider.
PROVIDER_DOWNSAMPLE = 1_000_000_000

logger = logging.getLogger("tensorboard")

# -- the plugin --------------------------------------------------------------


class CrashSignalsPlugin(base_plugin.TBPlugin):
    """Ranks runs by crash signals and serves each run's findings and curves."""

    plugin_name = PLUGIN_NAME

    max_points = decimate.DEFAULT_MAX_POINTS
    nonfinite_cap = 200
    max_readers = 256
    max_analyses = 256
    # Incremental re-analysis: the last analysis of this many runs (its hits and
    # chart caches) is kept to resume from once points are appended, holding
    # at most this many hit indices (8 bytes each) in all.
    max_resumable = 32
    resume_hit_budget = 20_000_000
    # Readers hold every point of every scalar tag of their run: bound the total.
    reader_point_budget = 50_000_000
    # Big logdirs: when more than `lazy_runs` runs are listed, a `runs` request
    # answers within about `runs_budget` seconds (counted from its start): it
    # analyses runs at full resolution, most recently written first, until
    # then, and lists the others as pending (`"health": "pending"`) while one
    # background thread analyses them in the same order; the tab re-polls.
    lazy_runs = 100
    runs_budget = 1.5
    worker_patience = 30.0  # seconds the worker waits for requests to finish before it goes on

    def __init__(self, context):
        self._provider = context.data_provider
        flags = context.flags
        logdir = getattr(flags, "logdir", None) if flags is not None else None
        logdir = logdir or getattr(context, "logdir", None)
        spec = getattr(flags, "logdir_spec", None) if flags is not None else None
        self._locator = RunLocator(logdir, spec)
        explicit = getattr(flags, "crash_signals_config", None) if flags is not None else None
        self._config = _ConfigState(self._locator, explicit)
        hints = context.sampling_hints
        if hints is None and flags is not None:
            hints = getattr(flags, "samples_per_plugin", None)
        hints = hints or {}
        self._capacity = hints.get(SCALARS_PLUGIN, DEFAULT_SCALAR_SAMPLES)

        self._lock = threading.Lock()
        self._tokens = itertools.count(1)
        self._run_locks: dict[str, threading.Lock] = {}
        self._summaries: dict[str, _Entry] = {}
        self._analyses = _LRU(self.max_analyses)
        self._resume = _LRU(  # run -> _Resume (see `_resumable`)
            self.max_resumable,
            max_weight=self.resume_hit_budget,
            weight=lambda r: r.checkpoint.hits,
        )
        self._readers = _LRU(
            self.max_readers,
            max_weight=self.reader_point_budget,
            weight=lambda slot: slot.reader.stats.scalar_points,
        )
        self._assets: dict[str, tuple] = {}
        self.stats = collections.Counter()  # analyses, readers_created, cache_hits (tests, debugging)
        # Big logdirs (see `lazy_runs`): the runs whose analysis is pending, in the order the
        # background worker takes them (run -> its arguments), and analyses that failed
        # (run -> entry, current while its data key is).
        self._background: dict[str, tuple] = {}
        self._failures: dict[str, _Entry] = {}
        self._worker = None
        # Requests being served; the worker waits for none (see `_foreground`).
        self._active = 0
        self._idle = threading.Condition(self._lock)
        self._grouping = None  # (key, logical runs) of the last `runs` request, see `_grouped`

    # -- TBPlugin -----------------------------------------------------------

    def get_plugin_apps(self):
        return {
            "/runs": self._json_route(self._foreground(self._runs_impl), (), self._runs_fallback),
            "/analysis": self._json_route(
                self._foreground(self._analysis_impl), ("run",), self._analysis_fallback
            ),
            "/rules": self._json_route(self._rules_impl, (), self._rules_fallback),
            "/index.js": self._asset_route("index.js", "text/javascript"),
            "/index.css": self._asset_route("index.css", "text/css"),
        }

    def is_active(self):
        return False  # enabled by data_plugin_names: whenever there are scalars

    def data_plugin_names(self):
        return (SCALARS_PLUGIN,)

    def frontend_metadata(self):
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name=TAB_NAME)

    # -- route plumbing ----------------------------------------------------

    def _json_route(self, impl, params, fallback):
        allowed = set(params)

        @wrappers.Request.application
        def app(request):
            unknown = sorted(k for k in request.args if k not in allowed)
            if unknown:
                expected = ", ".join(sorted(allowed)) or "none"
                raise errors.InvalidArgumentError(
                    f"unknown query parameter {unknown[0]!r} (expected: {expected})"
                )
            for k in allowed:
                if len(request.args.getlist(k)) > 1:
                    raise errors.InvalidArgumentError(f"parameter {k!r} given more than once")
            try:
                payload = impl(request)
            except errors.PublicError:
                raise
            except Exception as e:
                logger.exception("crash_signals: %s failed", request.path)
                try:
                    payload = fallback(request, f"internal error: {type(e).__name__}: {e}")
                except Exception:
                    logger.exception("crash_signals: fallback for %s failed", request.path)
                    return http_util.Respond(
                        request,
                        "Crash Signals could not answer this request; see TensorBoard's log.",
                        "text/plain",
                        code=503,
                    )
            if isinstance(payload, str):
                return http_util.Respond(request, payload, "application/json")
            return http_util.Respond(request, _dumps(payload), "application/json")

        return app

    def _asset_route(self, name, content_type):
        @wrappers.Request.application
        def app(request):
            body = self._read_asset(name)
            if body is None:
                return http_util.Respond(
                    request,
                    f"Crash Signals: the frontend bundle static/{name} is missing from the "
                    "tb_crash_signals package. Build it with `npm ci && npm run build` in "
                    "frontend/ (or reinstall the package with `pip install .`).",
                    "text/plain",
                    code=404,
                )
            return http_util.Respond(request, body, content_type)

        return app

    def _read_asset(self, name):
        path = os.path.join(STATIC_DIR, name)  # `name` is one of two constants
        try:
            st = os.stat(path)
        except OSError:
            return None
        key = (st.st_mtime_ns, st.st_size)
        cached = self._assets.get(name)
        if cached is not None and cached[0] == key:
            return cached[1]
        try:
            with open(path, "rb") as f:
                body = f.read()
        except OSError:
            return None
        self._assets[name] = (key, body)
        return body

    # -- data access -------------------------------------------------------

    def _listing(self, request):
        ctx = plugin_util.context(request.environ)
        eid = plugin_util.experiment_id(request.environ)
        if self._provider is None:
            return ctx, eid, {}
        listing = self._provider.list_scalars(ctx, experiment_id=eid, plugin_name=SCALARS_PLUGIN)
        return ctx, eid, listing

    def _count(self, what):
        with self._lock:
            self.stats[what] += 1

    def _run_lock(self, name) -> threading.Lock:
        with self._lock:
            lock = self._run_locks.get(name)
            if lock is None:
                lock = self._run_locks[name] = threading.Lock()
            return lock

    def _reader_slot(self, run, directory) -> _ReaderSlot:
        with self._lock:
            slot = self._readers.get(run)
            if slot is None or slot.directory != directory:
                slot = _ReaderSlot(RunReader(directory), next(self._tokens), directory)
                self._readers.put(run, slot)
                self.stats["readers_created"] += 1  # under self._lock
            return slot

    def _load(self, logical, refs, dirs, listing, ctx, eid):
        """Every point of each mapped signal: from event files, else from TensorBoard.

        Returns (data, sampled, problems, key, lineage), key identifying the
        data; lineage identifies what each series extends while only points
        are appended to it (reader, tag, rewrites; None if any series comes
        from TensorBoard).
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
            slot = self._reader_slot(member, directory)
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
            self._readers.evict()

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
            runs = sorted({ref.run for _, ref in missing})
            tags = sorted({ref.tag for _, ref in missing})
            got = self._provider.read_scalars(
                ctx,
                experiment_id=eid,
                plugin_name=SCALARS_PLUGIN,
                downsample=PROVIDER_DOWNSAMPLE,
                run_tag_filter=tb_provider.RunTagFilter(runs=runs, tags=tags),
            )
            for dim, ref in missing:
                points = (got.get(ref.run) or {}).get(ref.tag)
                if points is None:
                    continue
                data[dim] = Series.from_arrays(
                    [p.step for p in points],
                    [p.value for p in points],
                    [p.wall_time for p in points],
                )
                # A reservoir that is not full holds every point logged.
                if self._capacity and len(points) >= self._capacity:
                    sampled = True
                meta = (listing.get(ref.run) or {}).get(ref.tag)
                key.append(
                    ("tb", ref.run, ref.tag, len(points),
                     getattr(meta, "max_step", None), getattr(meta, "max_wall_time", None))
                )
        return data, sampled, problems, tuple(key), lineage

    # -- analysis ----------------------------------------------------------

    @staticmethod
    def _logical_key(logical):
        return (
            logical.name,
            logical.members,
            tuple((k, (v.run, v.tag) if v else None) for k, v in sorted(logical.signals.items())),
            tuple((m, tuple(t)) for m, t in sorted(logical.tags.items())),
        )

    def _ensure(self, logical, listing, cfg, ctx, eid, want_payload, cheap=False):
        """The run's summary entry (and analysis payload text if wanted), cached.

        With `cheap` (big logdirs, see `lazy_runs`; summaries only), nothing is
        read or analysed: the result is the run's current summary, or (None,
        key) when it has none (see `_ensure_cheap`).

        Returns (entry, payload_text or None).
        """
        config, config_error, cfg_key = cfg
        refs = {dim: ref for dim, ref in logical.signals.items() if ref is not None}
        members = sorted({ref.run for ref in refs.values()})
        with self._run_lock(logical.name):
            dirs = {m: self._locator.directory(m) for m in members}
            lkey = self._logical_key(logical)
            tb_stats = tuple(
                (m, t, getattr(ts, "max_step", None), getattr(ts, "max_wall_time", None))
                for m in members
                if dirs[m] is None
                for t, ts in sorted((listing.get(m) or {}).items())
            )
            fast_key = (cfg_key, lkey, tb_stats, tuple((m, file_signature(dirs[m])) for m in members))
            if cheap:
                return self._ensure_cheap(logical, listing, cfg, ctx, eid, refs, members, fast_key)
            with self._lock:
                entry = self._summaries.get(logical.name)
            if entry is not None and entry.fast_key == fast_key:
                hit = self._cached_payload(logical.name, entry, want_payload)
                if hit is not False:
                    self._count("cache_hits")
                    return entry, hit

            data, sampled, problems, dkey, lineage = self._load(logical, refs, dirs, listing, ctx, eid)
            data_key = (cfg_key, lkey, dkey)
            if entry is not None and entry.data_key == data_key:
                entry.fast_key = fast_key
                hit = self._cached_payload(logical.name, entry, want_payload)
                if hit is not False:
                    self._count("cache_hits")
                    return entry, hit

            self._count("analyses")
            resume_key = None if lineage is None else (cfg_key, lkey, lineage)
            resume = self._resumable(logical.name, resume_key)
            result = analyze_run(logical, data, config, sampled, resume=resume.checkpoint)
            if result.checkpoint.since is not None:
                self._count("incremental_analyses")
            report = run_to_json(result)
            entry = _Entry(logical.name, fast_key, data_key, _runs_item(report, result), problems)
            text = _payload_text(
                self._analysis_payload(report, result, config, config_error, problems, resume.charts)
            )
            with self._lock:
                self._summaries[logical.name] = entry
                self._analyses.put(logical.name, (data_key, text))
                if resume_key is not None:
                    kept = _Resume(resume_key, result.checkpoint, resume.charts)
                    self._resume.put(logical.name, kept)
            return entry, (text if want_payload else None)

    def _resumable(self, name, key) -> "_Resume":
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

    def _ensure_cheap(self, logical, listing, cfg, ctx, eid, refs, members, fast_key):
        """The run's current summary (or its failure, see `_failures`) or (None, fast_key).

        Called with the run's lock held; reads no data.
        """
        with self._lock:
            entry = self._summaries.get(logical.name)
            failed = self._failures.get(logical.name)
        if entry is not None and entry.fast_key == fast_key:
            self._count("cache_hits")
            return entry, None
        if failed is not None and failed.fast_key == fast_key:
            return failed, None
        return None, fast_key

    def _analyse_listed(self, logical, listing, cfg, ctx, eid, key):
        """Full analysis of a pending run (a `runs` request or the worker): its entry.

        A failure is remembered under the run's data key (`key`), so the run is
        not retried, and not listed as pending, until its data change.
        """
        try:
            entry, _ = self._ensure(logical, listing, cfg, ctx, eid, want_payload=False)
            return entry
        except Exception as e:
            logger.exception("crash_signals: analysing run %r failed", logical.name)
            entry = self._failed_entry(logical, f"{type(e).__name__}: {e}")
            entry.fast_key = key
            with self._lock:
                self._failures[logical.name] = entry
            return entry

    def _pending_entry(self, logical, key) -> _Entry:
        """The `runs` line of a run whose analysis is not finished.

        `"health": "pending"`, unless the run's last full analysis (same config
        and tag mapping, older data) found it sick: the rules are causal, so
        those findings stand; that line is listed with `"pending": true`.
        """
        with self._lock:
            prev = self._summaries.get(logical.name)
        if (
            prev is not None
            and prev.health in ("critical", "warning")
            and _same_setup(prev.fast_key, key)
        ):
            return _Entry(logical.name, None, None, dict(prev.summary, pending=True), prev.problems)
        summary = _unanalysed_item(
            logical, PENDING, "analysing: queued for a full-resolution analysis", pending=True
        )
        return _Entry(logical.name, None, None, summary, [])

    def _start_background(self):
        """Starts the worker for the queued full-resolution analyses, if needed."""
        with self._lock:
            if not self._background:
                return
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(
                    target=self._work, name="crash_signals-analyses", daemon=True
                )
                self._worker.start()

    def _foreground(self, impl):
        """`impl`, with the background worker paused while it runs.

        Both share one interpreter lock: while the worker analyses, every
        system call of a request (each run's directory listing in `runs`) would
        wait for the worker's next switch interval (~5 ms each; seconds over
        1000 runs). The worker therefore starts no analysis while a request is
        being served; a request waits for at most the analysis in progress.
        """

        def run(request):
            with self._idle:
                self._active += 1
            try:
                return impl(request)
            finally:
                with self._idle:
                    self._active -= 1
                    if not self._active:
                        self._idle.notify_all()

        return run

    def _work(self):
        """Analyses the queued runs, first queued first, until the queue is empty."""
        while True:
            with self._idle:
                # Requests first (see `_foreground`); bounded, should one hang.
                waited = 0.0
                while self._active and waited < self.worker_patience:
                    self._idle.wait(0.5)
                    waited += 0.5
                if not self._background:
                    self._worker = None
                    return
                name = next(iter(self._background))
                args = self._background.pop(name)
            try:
                self._analyse_listed(*args)
                self._count("background_analyses")
            except Exception:
                logger.exception("crash_signals: background analysis of run %r failed", name)

    def _cached_payload(self, name, entry, want_payload):
        """None if no payload is wanted, the cached text, or False if it must be rebuilt."""
        if not want_payload:
            return None
        with self._lock:
            cached = self._analyses.get(name)
        if cached is not None and cached[0] == entry.data_key:
            return cached[1]
        return False

    def _analysis_payload(self, report, result, config, config_error, problems, charts=None):
        """The `analysis` payload, its "series" columns as JSON text (see `_payload_text`).

        `charts`: signal -> Decimator of its series, kept between analyses of
        a series that only grows (filled in here).
        """
        charts = {} if charts is None else charts
        payload = dict(report)
        series, nonfinite = {}, {}
        for dim in SIGNALS:
            s = result.data.get(dim)
            if s is None:
                continue
            chart = charts.setdefault(dim, decimate.Decimator())
            keep = decimate.episode_steps(report["episodes"], dim)
            series[dim] = chart.columns_json(s, self.max_points, keep)
            nonfinite[dim] = chart.nonfinite_points(s, self.nonfinite_cap)
        payload["series"] = series
        payload["nonfinite"] = nonfinite
        payload["gap_band"] = decimate.gap_band(
            result.data.get("train_loss"), result.data.get("val_loss"), self.max_points,
            val_decimator=charts.get("val_loss"),
        )
        payload["thresholds"], payload["bands"] = chart_overlays(config)
        payload["config_error"] = config_error
        payload["problems"] = list(problems)
        return payload

    def _failed_entry(self, logical, message) -> _Entry:
        summary = _unanalysed_item(logical, "no_signals", f"analysis failed: {message}", error=message)
        return _Entry(logical.name, None, None, summary, [f"run {logical.name}: analysis failed: {message}"])

    # -- route implementations ----------------------------------------------

    def _grouped(self, listing, cfg):
        """`group_runs` of TensorBoard's listing, memoised on the config and the runs' tags.

        Matching every tag name against the signal patterns costs ~0.2 ms per
        run: most of a `runs` request that finds every summary current.
        """
        key = (cfg[2], tuple(sorted((run, tuple(sorted(tags))) for run, tags in listing.items())))
        with self._lock:
            if self._grouping is not None and self._grouping[0] == key:
                return self._grouping[1]
        logical = group_runs({run: list(tags) for run, tags in listing.items()}, cfg[0].signals)
        with self._lock:
            self._grouping = (key, logical)
        return logical

    def _runs_impl(self, request):
        started = time.monotonic()
        cfg = self._config.get()
        ctx, eid, listing = self._listing(request)
        logical = self._grouped(listing, cfg)
        lazy = len(logical) > self.lazy_runs
        entries = []
        waiting = []  # big logdirs: (run, data key) without a current summary
        for lr in logical:
            try:
                entry, key = self._ensure(lr, listing, cfg, ctx, eid, want_payload=False, cheap=lazy)
            except Exception as e:
                logger.exception("crash_signals: analysing run %r failed", lr.name)
                entry = self._failed_entry(lr, f"{type(e).__name__}: {e}")
            if entry is None:
                waiting.append((lr, key))
            else:
                entries.append(entry)
        if waiting:
            # Most recently written first: the runs being trained, then the newest.
            waiting.sort(key=lambda w: (-_last_write(w[0], listing), w[0].name))
            with self._lock:
                busy = self._worker is not None and self._worker.is_alive()
            deadline = started + self.runs_budget
            queue = []
            for lr, key in waiting:
                if busy or time.monotonic() >= deadline:
                    queue.append((lr, key))  # the worker is on it already, or no time left
                else:
                    entries.append(self._analyse_listed(lr, listing, cfg, ctx, eid, key))
            with self._lock:
                self._background = {lr.name: (lr, listing, cfg, ctx, eid, key) for lr, key in queue}
            entries.extend(self._pending_entry(lr, key) for lr, key in queue)
            self._start_background()
        self._forget({lr.name for lr in logical})
        problems = [p for e in entries for p in e.problems]
        pending = sum(1 for e in entries if e.summary.get("pending"))
        return {
            "schema": SCHEMA_VERSION,
            "config_error": cfg[1],
            "problems": problems,
            "progress": {"analysed": len(entries) - pending, "pending": pending, "total": len(entries)},
            "runs": [e.summary for e in _rank_entries(entries)],
        }

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
            for name in [n for n in self._background if n not in names]:
                del self._background[name]
            for name in [n for n, lock in self._run_locks.items() if n not in names]:
                if not self._run_locks[name].locked():
                    del self._run_locks[name]

    def _runs_fallback(self, request, message):
        cfg_error = None
        try:
            cfg_error = self._config.get()[1]
        except Exception:
            pass
        return {
            "schema": SCHEMA_VERSION,
            "config_error": cfg_error,
            "problems": [message],
            "progress": {"analysed": 0, "pending": 0, "total": 0},
            "runs": [],
        }

    def _analysis_impl(self, request):
        name = request.args.get("run")
        if name is None:
            raise errors.InvalidArgumentError("missing required parameter 'run' (a run name from ./runs)")
        cfg = self._config.get()
        ctx, eid, listing = self._listing(request)
        logical = group_runs({run: list(tags) for run, tags in listing.items()}, cfg[0].signals)
        match = [lr for lr in logical if lr.name == name]
        if not match:
            parent = [lr.name for lr in logical if name in lr.members]
            hint = f"; it is part of run {parent[0]!r}" if parent else ""
            raise errors.NotFoundError(f"no run named {_shown(name)}{hint}")
        lr = match[0]
        try:
            _, text = self._ensure(lr, listing, cfg, ctx, eid, want_payload=True)
        except Exception as e:
            logger.exception("crash_signals: analysing run %r failed", lr.name)
            return self._failed_payload(lr, f"{type(e).__name__}: {e}", cfg[1])
        return text

    def _failed_payload(self, logical, message, config_error):
        entry = self._failed_entry(logical, message)
        return {
            "run": logical.name,
            "health": "no_signals",
            "signals": entry.summary["signals"],
            "points": {},
            "sampled": False,
            "episodes": [],
            "fits": [],
            "summary": {
                "first_critical_step": None,
                "first_warning_step": None,
                "loss_trend": None,
                "grad_norm_max": None,
                "val_train_gap": None,
                "headline": entry.summary["headline"],
            },
            "tags": {m: list(t) for m, t in logical.tags.items()},
            "series": {},
            "nonfinite": {},
            "gap_band": None,
            "bands": {},
            "thresholds": {},
            "config_error": config_error,
            "problems": entry.problems,
            "error": message,
        }

    def _analysis_fallback(self, request, message):
        name = request.args.get("run")
        cfg_error = None
        try:
            cfg_error = self._config.get()[1]
        except Exception:
            pass
        lr = LogicalRun(name=name or "", members=(name or "",), signals={k: None for k in SIGNALS}, tags={})
        return self._failed_payload(lr, message, cfg_error)

    def _rules_impl(self, request):
        config, config_error, _ = self._config.get()
        payload = catalogue_json(config)
        payload["config_error"] = config_error
        return payload

    def _rules_fallback(self, request, message):
        payload = catalogue_json(Config())
        payload["config_error"] = message
        return payload


def _payload_text(payload: dict) -> str:
    """_dumps(payload) for an `analysis` payload whose "series" columns are JSON text already.

    Each column's text stands in for a unique marker string (a fresh random
    nonce: no run or tag name can hold it) in the dumped payload.
    """
    nonce = secrets.token_hex(16)
    columns = payload["series"]
    marked = dict(payload, series={dim: f"column:{nonce}:{dim}" for dim in columns})
    text = _dumps(marked)
    for dim, column in columns.items():
        text = text.replace(f'"column:{nonce}:{dim}"', column, 1)
    return text


class _Resume:
    """A run's last analysis, to resume from: its key (see `_resumable`), the engine's
    checkpoint and the chart caches (signal -> decimate.Decimator)."""

    __slots__ = ("key", "checkpoint", "charts")

    def __init__(self, key, checkpoint, charts):
        self.key, self.checkpoint, self.charts = key, checkpoint, charts


def _unanalysed_item(logical, health: str, headline: str, **extra) -> dict:
    """The `runs` line of a run without findings to list (pending or failed)."""
    return {
        "run": logical.name,
        "health": health,
        "counts": {"warning": 0, "critical": 0},
        "first_critical_step": None,
        "signals": {
            k: (logical.signals[k].to_json() if logical.signals.get(k) else None)
            for k in SIGNALS
        },
        "sampled": False,
        "headline": headline,
        **extra,
    }


def _runs_item(report: dict, result) -> dict:
    """One run's line in the `runs` listing, from its report entry."""
    return {
        "run": report["run"],
        "health": report["health"],
        "counts": result.counts(),
        "first_critical_step": report["summary"].get("first_critical_step"),
        "signals": report["signals"],
        "sampled": report["sampled"],
        "headline": report["summary"].get("headline"),
    }


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
    """Whether two data keys of `_ensure` share config and tag mapping (only the data differ).

    Relies on `_ensure`'s fast key layout: (config key, logical key, ...).
    """
    return (
        isinstance(old_key, tuple)
        and isinstance(new_key, tuple)
        and len(old_key) >= 2
        and old_key[:2] == new_key[:2]
    )


def _shown(name: str) -> str:
    """A run name for an error message: quoted, escaped, bounded."""
    text = repr(name)
    return text if len(text) <= 200 else text[:197] + "..."
