"""`scan` fanned out: each task reads and analyses a few runs where it runs, results stream back.

The logdir is listed once, here. Its runs are cut into *families* (a run, or a parent
and its train/validation splits: `signals.family`), the unit `group_runs` never crosses,
and families into tasks. A task (`analyse_group`) opens the runs' files itself -- on a
Dask worker that is next to the data, not here -- groups them, analyses every logical
run and returns only the report entries (`run_to_json`) and each run's problems: no
series travel. The report is assembled from the entries in the order `report_to_json`
gives (`rank`), so it is the report of a serial scan, byte for byte, whatever the order
in which tasks finish.
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import time
import types
from typing import Callable

from tb_crash_signals.analysis.config import Config
from tb_crash_signals.analysis.engine import analyze_run, rank
from tb_crash_signals.analysis.signals import families, group_runs
from tb_crash_signals.executors import Executor, ExecutorError, InlineExecutor
from tb_crash_signals.ingest.reader import LogdirSource, RunReader, reload_readers
from tb_crash_signals.ingest.storage import Storage
from tb_crash_signals.report.document import report_to_json, run_to_json

__all__ = ["GroupTask", "GroupResult", "analyse_group", "plan_tasks", "scan_fanned_out"]

MAX_RUNS_PER_TASK = 64
TASKS_PER_WORKER = 4  # enough tasks that a slow one does not leave the other workers idle
# Below this much event data a local scan stays in this process: starting a spawned worker
# (an interpreter importing numpy and the engine) costs about what reading 16 MiB does.
LOCAL_POOL_MIN_BYTES = 16 << 20


@dataclasses.dataclass(frozen=True)
class GroupTask:
    """Runs to read and analyse together (whole families), and how."""

    storage: Storage
    logdir: str
    runs: tuple[str, ...]
    config: Config
    run_filter: re.Pattern | None = None
    purge: bool = True


@dataclasses.dataclass
class GroupResult:
    """What a task sends back.

    Attributes:
        entries: the report entry (`run_to_json`) of each logical run that matched.
        problems: run -> its readers' problems.
        bytes_read, points: read by the task.
        seconds: the task's time where it ran.
        where: host and process that ran it.
    """

    entries: list
    problems: dict
    bytes_read: int
    points: int
    seconds: float
    where: str


def analyse_group(task: GroupTask) -> GroupResult:
    """Reads the task's runs, groups them into logical runs and analyses those that match."""
    started = time.perf_counter()
    readers = {
        run: RunReader(task.storage.run_path(task.logdir, run), purge=task.purge, storage=task.storage)
        for run in task.runs
    }
    reload_readers(readers.values())
    logical = group_runs({run: r.tags() for run, r in readers.items()}, task.config.signals)
    if task.run_filter is not None:
        logical = [lr for lr in logical if task.run_filter.search(lr.name)]
    entries = []
    for lr in logical:
        data = {dim: readers[ref.run].series(ref.tag) for dim, ref in lr.signals.items() if ref is not None}
        entries.append(run_to_json(analyze_run(lr, data, task.config, sampled=False)))
    return GroupResult(
        entries=entries,
        problems={run: r.problems() for run, r in readers.items()},
        bytes_read=sum(r.stats.bytes_read for r in readers.values()),
        points=sum(r.stats.scalar_points for r in readers.values()),
        seconds=time.perf_counter() - started,
        where=f"{socket.gethostname()}:{os.getpid()}",
    )


def plan_tasks(runs, workers: int, max_runs: int = MAX_RUNS_PER_TASK) -> list[tuple[str, ...]]:
    """`runs` cut into tasks of whole families: about TASKS_PER_WORKER per worker, each
    of at most `max_runs` runs (unless one family is bigger)."""
    groups = families(runs)
    if not groups:
        return []
    per_task = max(1, min(max_runs, -(-len(runs) // max(1, workers * TASKS_PER_WORKER))))
    tasks, current = [], []
    for members in groups:
        if current and len(current) + len(members) > per_task:
            tasks.append(tuple(current))
            current = []
        current.extend(members)
    if current:
        tasks.append(tuple(current))
    return tasks


def _event_bytes(source: LogdirSource, runs) -> int:
    """Bytes of the runs' event files (stopping once past LOCAL_POOL_MIN_BYTES)."""
    storage, total = source.storage, 0
    for run in runs:
        directory = storage.run_path(source.logdir, run)
        try:
            for name in storage.event_files(directory):
                total += storage.size(storage.join(directory, name))
        except OSError:
            continue
        if total >= LOCAL_POOL_MIN_BYTES:
            break
    return total


def rank_entries(entries: list) -> list:
    """Report entries in `engine.rank`'s order (the order of `report_to_json`)."""
    shims = [
        types.SimpleNamespace(
            health=e["health"],
            summary={"first_critical_step": e["summary"].get("first_critical_step")},
            run=types.SimpleNamespace(name=e["run"]),
            entry=e,
        )
        for e in entries
    ]
    return [s.entry for s in rank(shims)]


def scan_fanned_out(
    logdir: str,
    config: Config,
    executor: Executor,
    run_filter: re.Pattern | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    storage: Storage | None = None,
    on_result: Callable[[GroupResult], None] | None = None,
) -> dict:
    """The report of `scan.scan_logdir`, with the reading and analyses run by `executor`.

    Args:
        progress: called as progress(runs done, runs, last run) as tasks finish.
        on_result: called with each task's GroupResult (benchmarks, statistics).
    """
    source = LogdirSource(logdir, storage=storage)
    runs = source.discover()
    storage = source.storage
    tasks = plan_tasks(runs, executor.workers)
    if getattr(executor, "local", False) and (len(tasks) < 2 or _event_bytes(source, runs) < LOCAL_POOL_MIN_BYTES):
        executor = InlineExecutor()  # starting worker processes would cost more than it saves
    # A remote task carries its runs' part of the listing: workers fetch, never list.
    futures = [
        executor.submit(analyse_group, GroupTask(
            storage=storage.portable([storage.run_path(source.logdir, run) for run in names]),
            logdir=source.logdir, runs=names, config=config, run_filter=run_filter, purge=source.purge,
        ))
        for names in tasks
    ]
    entries, problems = [], {}
    done = 0
    for future in executor.as_completed(futures):
        try:
            result = future.result()
        except (ModuleNotFoundError, ImportError) as e:
            raise ExecutorError(
                f"the workers cannot import what the task needs ({e}); install tb-crash-signals "
                "(with the extras the logdir needs, e.g. [s3]) where they run"
            ) from None
        entries.extend(result.entries)
        problems.update(result.problems)
        done += len(result.problems)
        if on_result is not None:
            on_result(result)
        if progress is not None:
            progress(done, len(runs), result.entries[-1]["run"] if result.entries else "")
    if progress is not None:
        progress(len(runs), len(runs), "")
    lines = [source.error()] if source.error() else []
    for run in sorted(problems):
        lines.extend(f"run {run}: {p}" for p in problems[run])
    report = report_to_json([], problems=lines)
    report["runs"] = rank_entries(entries)
    return report
