"""Compacting a whole logdir: every run read, planned, written, and the result scanned again."""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Callable

import numpy as np

from tb_crash_signals.analysis.config import CONFIG_FILENAME, Config
from tb_crash_signals.analysis.signals import families, group_runs
from tb_crash_signals.compact.plan import FIRST_ONLY, evidence, evidence_differences, plan_run
from tb_crash_signals.compact.write import WriteStats, write_run
from tb_crash_signals.ingest.reader import discover_runs
from tb_crash_signals.ingest.recordmap import map_run
from tb_crash_signals.ingest.writer import AtomicFile

__all__ = ["CompactError", "CompactReport", "check_paths", "compact_logdir"]


class CompactError(Exception):
    """A bad source or destination (the message is one line for the user)."""


@dataclasses.dataclass
class CompactReport:
    """What a compaction did.

    Attributes:
        runs, files: runs and event files written (one per source file).
        bytes_in, bytes_out: event-file bytes read and written.
        points_in, points_out: scalar points TensorBoard shows, before and after.
        records_in, records_out: good records read; records written.
        rebuilt: events rebuilt with part of their values.
        problems: what was wrong with the source (corrupt records, truncated tails).
        repaired: (run, rounds) for runs whose findings needed stretches kept in full.
        kept_in_full: runs kept in full (their findings kept moving otherwise).
        first_only: (run, code, episodes before, after) where the episodes of a
            family compared by their first start (plan.FIRST_ONLY) differ in number.
        differences: how `scan DST` differs from `scan SRC` (empty when verified).
        verified: `scan DST` was run and compared.
        seconds: wall time.
    """

    runs: int = 0
    files: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    points_in: int = 0
    points_out: int = 0
    records_in: int = 0
    records_out: int = 0
    rebuilt: int = 0
    problems: list = dataclasses.field(default_factory=list)
    repaired: list = dataclasses.field(default_factory=list)
    kept_in_full: list = dataclasses.field(default_factory=list)
    first_only: list = dataclasses.field(default_factory=list)
    differences: list = dataclasses.field(default_factory=list)
    verified: bool = False
    seconds: float = 0.0

    def add(self, w: WriteStats) -> None:
        self.files += w.files
        self.bytes_in += w.bytes_in
        self.bytes_out += w.bytes_out
        self.records_in += w.records_in
        self.records_out += w.records_out
        self.rebuilt += w.rebuilt


def _real(path: str) -> str:
    return os.path.normcase(os.path.realpath(os.path.abspath(path)))


def check_paths(src: str, dst: str) -> None:
    """Raises CompactError unless SRC is a directory and DST is absent or empty and outside SRC."""
    if not os.path.isdir(src):
        raise CompactError(f"{src}: not a directory")
    s, d = _real(src), _real(dst)
    if d == s or d.startswith(s.rstrip(os.sep) + os.sep):
        raise CompactError(f"{dst}: lies inside the source logdir {src}")
    if os.path.lexists(dst):
        if not os.path.isdir(dst) or os.path.islink(dst):
            raise CompactError(f"{dst}: exists and is not a directory")
        try:
            if os.listdir(dst):
                raise CompactError(f"{dst}: exists and is not empty")
        except OSError as e:
            raise CompactError(f"{dst}: {e.strerror or e}") from None


def _run_dir(logdir: str, run: str) -> str:
    return logdir if run == "." else os.path.join(logdir, *run.split("/"))


def compact_logdir(
    src: str,
    dst: str,
    *,
    keep_last: int = 1000,
    every: int = 100,
    scalars_only: bool = False,
    config: Config | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    verify: bool = True,
) -> CompactReport:
    """Writes a compacted copy of the logdir `src` into `dst` (see the package docstring).

    Args:
        src: the logdir to read (never written).
        dst: the new logdir: absent or empty, not inside `src`.
        keep_last, every: recent steps kept in full; bucket width before them.
        scalars_only: leave out the non-scalar data (histograms, images, ...).
        config: the analysis config (as `scan` would use on `src`).
        progress: called as progress(done, total, run) per run.
        verify: scan `dst` afterwards and compare with the source's findings.
    """
    if keep_last < 0 or every < 1:
        raise CompactError("--keep-last must be >= 0 and --every >= 1")
    check_paths(src, dst)
    config = config or Config()
    t0 = time.perf_counter()
    report = CompactReport()
    runs = discover_runs(src)
    os.makedirs(dst, exist_ok=True)
    before: dict[str, dict] = {}
    done = 0
    for component in families(runs):
        maps = {}
        try:
            for run in component:
                if progress is not None:
                    progress(done, len(runs), run)
                maps[run] = map_run(run, _run_dir(src, run))
                done += 1
            tags = {(run, t): m.series(t) for run, m in maps.items() for t in m.scalar_tags()}
            keeps = {run: np.zeros(m.step.shape[0], dtype=bool) for run, m in maps.items()}
            for lr in group_runs({run: m.scalar_tags() for run, m in maps.items()}, config.signals):
                mine = {key: s for key, s in tags.items() if key[0] in lr.members}
                plan = plan_run(lr, mine, config, keep_last=keep_last, every=every)
                before[lr.name] = plan.before
                if plan.kept_in_full:
                    report.kept_in_full.append(lr.name)
                elif plan.rounds:
                    report.repaired.append((lr.name, plan.rounds))
                report.first_only.extend((lr.name, *c) for c in _first_only_counts(plan.before, plan.after))
                for (run, tag), mask in plan.masks.items():
                    idx = maps[run].points(tag)
                    keeps[run][idx[mask]] = True
            for run, m in maps.items():
                report.problems.extend(f"run {run}: {p}" for p in m.problems())
                report.points_in += int(m.visible.sum())
                report.points_out += int(keeps[run].sum())
                report.add(write_run(m, keeps[run], _run_dir(dst, run), scalars_only))
                report.runs += 1
        finally:
            for m in maps.values():
                m.close()
    if progress is not None:
        progress(len(runs), len(runs), "")
    config_file = os.path.join(src, CONFIG_FILENAME)
    if os.path.isfile(config_file):  # `scan DST` must use the config `scan SRC` uses
        _copy_small(config_file, os.path.join(dst, CONFIG_FILENAME))
    if verify:
        report.differences = _verify(dst, config, before)
        report.verified = True
    report.seconds = time.perf_counter() - t0
    return report


def _first_only_counts(before: dict, after: dict) -> list:
    def counts(run):
        out: dict = {}
        for e in run["episodes"]:
            if e["family"] in FIRST_ONLY:
                out[e["code"]] = out.get(e["code"], 0) + 1
        return out

    a, b = counts(before), counts(after)
    return [(code, a.get(code, 0), b.get(code, 0)) for code in sorted(set(a) | set(b)) if a.get(code) != b.get(code)]


def _copy_small(path: str, to: str) -> None:
    with open(path, "rb") as f:
        data = f.read()
    with AtomicFile(to) as out:
        out.write([data])
        out.commit()


def _verify(dst: str, config: Config, before: dict) -> list[str]:
    from tb_crash_signals.scan import scan_logdir

    after = scan_logdir(dst, config)
    out = [f"scan of the compacted logdir: {p}" for p in after["problems"]]
    runs = {r["run"]: r for r in after["runs"]}
    for name in sorted(set(before) | set(runs)):
        if name not in runs or name not in before:
            out.append(f"run {name}: {'missing after' if name not in runs else 'new after'} compaction")
            continue
        out.extend(f"run {name}: {d}" for d in evidence_differences(evidence(before[name]), evidence(runs[name])))
    return out

