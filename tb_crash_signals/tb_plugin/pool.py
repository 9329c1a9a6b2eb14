"""The background pass on every core: pending runs analysed in worker processes.

Each task reads one logical run's event files itself (its members' directories, local
or remote), analyses it and builds its `runs` line and `analysis` payload there; only
those come back (a summary dict, the payload's JSON text, the problems), never series.
The readers therefore live in the workers and die with the task: the worker processes
hold no state between tasks, TensorBoard's process holds no reader for a run analysed
this way, and a request for such a run after it grew reads it afresh (a cold analysis,
as for any run not cached). Keeping the readers here and shipping series out would
have put the reading -- half of a run's cost -- back under this process's interpreter
lock, next to the requests.

The workers run at a lower CPU priority (``nice``), so on a machine whose cores they
fill the request threads of TensorBoard still get the processor first.
"""

from __future__ import annotations

import dataclasses
import os

from tb_crash_signals.analysis.config import Config
from tb_crash_signals.analysis.engine import analyze_run
from tb_crash_signals.analysis.signals import LogicalRun
from tb_crash_signals.executors import ProcessExecutor
from tb_crash_signals.ingest.reader import RunReader
from tb_crash_signals.report.document import run_to_json
from tb_crash_signals.tb_plugin import payloads


@dataclasses.dataclass(frozen=True)
class RunTask:
    """One logical run to analyse: its members' (directory, storage), the config in force."""

    logical: LogicalRun
    dirs: dict
    config: Config
    config_error: str | None


@dataclasses.dataclass
class RunOutcome:
    """A task's answer: the `runs` line and `analysis` text, or None for both when a
    mapped tag is not in the files (TensorBoard holds it: the plugin's own path reads it)."""

    summary: dict | None
    text: str | None
    problems: list


def analyse_run_task(task: RunTask) -> RunOutcome:
    problems = []
    readers = {}
    for member, (directory, storage) in sorted(task.dirs.items()):
        reader = RunReader(directory, storage=storage)
        reader.reload()
        readers[member] = reader
        problems.extend(f"run {member}: {p}" for p in reader.problems())
    data = {}
    for dim, ref in task.logical.signals.items():
        if ref is None:
            continue
        reader = readers.get(ref.run)
        if reader is None or ref.tag not in reader.tags():
            return RunOutcome(None, None, problems)
        data[dim] = reader.series(ref.tag)
    result = analyze_run(task.logical, data, task.config, sampled=False)
    report = run_to_json(result)
    text = payloads.analysis_payload(report, result, task.config, task.config_error, problems, {})
    return RunOutcome(payloads.runs_item(report, result), text, problems)


def _lower_priority(niceness: int) -> None:
    try:
        os.nice(niceness)
    except (AttributeError, OSError):
        pass


class AnalysisPool:
    """Worker processes for `analyse_run_task`, started on first use.

    Args:
        processes: how many.
        niceness: added to each worker's nice value (lower CPU priority).
    """

    def __init__(self, processes: int, niceness: int = 10):
        self.processes = processes
        self.niceness = niceness
        self._executor = None

    def submit(self, task: RunTask):
        if self._executor is None:
            self._executor = ProcessExecutor(self.processes, _lower_priority, (self.niceness,))
        return self._executor.submit(analyse_run_task, task)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.close()
            self._executor = None
