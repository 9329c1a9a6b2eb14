"""Headless analysis of a logdir from its event files, at full resolution."""

from __future__ import annotations

import re
from typing import Callable

from tb_crash_signals.analysis.config import Config
from tb_crash_signals.analysis.engine import analyze_run
from tb_crash_signals.analysis.signals import group_runs
from tb_crash_signals.ingest.reader import LogdirSource
from tb_crash_signals.report.document import report_to_json


def scan_logdir(
    logdir: str,
    config: Config | None = None,
    run_filter: re.Pattern | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    source: LogdirSource | None = None,
    by_hparams: bool = False,
) -> dict:
    """Analyses every run under `logdir` and returns the report (schema 1).

    Args:
        logdir: the directory TensorBoard would be pointed at.
        config: rules, parameters and tag overrides (default: built-in).
        run_filter: only logical runs whose name matches (re.search).
        progress: called as progress(done, total, run_name) per run.
        source: an already loaded source (reloaded here); for reuse.
        by_hparams: also give each run its hyperparameters and state, per
            sweep, what its sick runs share (`sweeps.add_sweeps`).
    """
    config = config or Config()
    source = source or LogdirSource(logdir)
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
