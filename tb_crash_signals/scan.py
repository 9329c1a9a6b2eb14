"""Headless analysis of a logdir from its event files, at full resolution."""

from __future__ import annotations

import math
import re
from typing import Callable

from tb_crash_signals.analysis.config import Config
from tb_crash_signals.analysis.engine import analyze_run
from tb_crash_signals.analysis.signals import group_runs
from tb_crash_signals.ingest.reader import LogdirSource
from tb_crash_signals.ingest.storage import storage_for
from tb_crash_signals.report.document import report_to_json


def scan_logdir(
    logdir: str,
    config: Config | None = None,
    run_filter: re.Pattern | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    source: LogdirSource | None = None,
    by_hparams: bool = False,
    jobs: int = 1,
    executor=None,
    storage=None,
) -> dict:
    """Analyses every run under `logdir` and returns the report (schema 1).

    Args:
        logdir: the directory TensorBoard would be pointed at, or an fsspec URL
            (``s3://bucket/logs``; listed once per scan).
        config: rules, parameters and tag overrides (default: built-in).
        run_filter: only logical runs whose name matches (re.search).
        progress: called as progress(done, total, run_name) per run (per task's
            runs when fanned out).
        by_hparams: also give each run its hyperparameters and state, per
            sweep, what its sick runs share (`sweeps.add_sweeps`); a local
            logdir, read in this process (the sweep needs every run's tags).
        source: an already loaded source (reloaded here, in this process); for reuse.
        jobs: worker processes reading and analysing runs (1: this process).
        executor: an `executors.Executor` to run them on instead (a Dask cluster).
            Either way the report is the one this process would write alone.
        storage: where the logdir is (default: `storage.storage_for(logdir)`).
    """
    config = config or Config()
    # -- fanned out (tb_crash_signals/fanout.py) --
    if source is None and not by_hparams and (executor is not None or jobs > 1):
        from tb_crash_signals.executors import ProcessExecutor
        from tb_crash_signals.fanout import scan_fanned_out

        storage = storage or storage_for(logdir, listing_interval=math.inf)
        if executor is not None:
            return scan_fanned_out(logdir, config, executor, run_filter, progress, storage)
        with ProcessExecutor(jobs) as pool:
            return scan_fanned_out(logdir, config, pool, run_filter, progress, storage)
    # -- in this process --
    source = source or LogdirSource(logdir, storage=storage or storage_for(logdir, listing_interval=math.inf))
    source.reload()
    logical = group_runs(source.run_tags(), config.signals)
    if run_filter is not None:
        logical = [r for r in logical if run_filter.search(r.name)]
    results = []
    for done, run in enumerate(logical):
        if progress is not None:
            progress(done, len(logical), run.name)
        data = {
            dim: source.series(ref.run, ref.tag)
            for dim, ref in run.signals.items()
            if ref is not None
        }
        results.append(analyze_run(run, data, config, sampled=False))
    if progress is not None:
        progress(len(logical), len(logical), "")
    report = report_to_json(results, problems=source.problems())
    if by_hparams:
        from tb_crash_signals.sweeps import add_sweeps

        add_sweeps(report, source.logdir, source.runs(), logical)
    return report
