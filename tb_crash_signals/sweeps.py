"""Hyperparameters and sweep statements for a scanned logdir (`scan --by-hparams`).

Reads every run directory's hparams sources (ingest.hparams), gives each
logical run its values (analysis.hparams), and states per sweep what its sick
runs share (analysis.sweep); the report gains `runs[*].hparams` and `sweeps`.
"""

from __future__ import annotations

import os

from tb_crash_signals.analysis.hparams import assign
from tb_crash_signals.analysis.sweep import SweepParams, analyse_sweeps
from tb_crash_signals.ingest.hparams import read_dir
from tb_crash_signals.report.sweep import attach, sweep_rows


def run_directory(logdir: str, run: str) -> str:
    return logdir if run == "." else os.path.join(logdir, *run.split("/"))


def add_sweeps(report: dict, logdir: str, tb_runs, logical_runs, params: SweepParams | None = None) -> dict:
    """Attaches hyperparameters and sweeps to `report` (scan_logdir's) and returns it.

    Args:
        tb_runs: the TensorBoard runs discovered under `logdir`.
        logical_runs: the report's logical runs (analysis.signals.LogicalRun).
    """
    wanted = set()
    for lr in logical_runs:
        wanted.add(lr.name)
        wanted.update(lr.members)
    found = {run: read_dir(run_directory(logdir, run)) for run in tb_runs if run in wanted}
    points = {r["run"]: max(r["points"].values(), default=0) for r in report["runs"]}
    hparams = assign(logical_runs, found, points)
    sweeps = analyse_sweeps(sweep_rows(report["runs"], hparams), params or SweepParams())
    return attach(report, hparams, sweeps)
