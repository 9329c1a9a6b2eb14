"""A job resumed from a checkpoint into a new log directory: its log begins past its run's start.

The HuggingFace Trainer writes each job to a new `runs/<time>` directory, so a run preempted and
resumed is two TensorBoard runs; the second begins at its checkpoint's step with the loss at the
level the first had learnt. Read as a run's start, that level has been "learnt" from by nothing but
noise: a noisy classifier's per-batch loss wandering around it "lost what the run had learnt" and
stood "near where it started". The rules that read the start do not run on such a log.
"""

from __future__ import annotations

import pytest

from support.torch_training import train_resumed_jobs
from tb_crash_signals import Monitor, scan_logdir
from tb_crash_signals.analysis.engine import analyze_run
from tb_crash_signals.analysis.rules import RULES
from tb_crash_signals.analysis.signals import group_runs
from tb_crash_signals.ingest.reader import LogdirSource
from tb_crash_signals.ingest.series import Series

torch = pytest.importorskip("torch")  # installed by scripts/test_all.sh; never skipped in CI

pytestmark = pytest.mark.slow

STARTS = {code for code, rule in RULES.items() if rule.start}


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("runs")
    train_resumed_jobs(logdir / "job1", logdir / "job2", seed=1, crash_at=1600, checkpoint_at=1500, steps=4500)
    return logdir


def _data(logdir, run):
    source = LogdirSource(str(logdir))
    source.reload()
    (logical,) = [r for r in group_runs(source.run_tags()) if r.name == run]
    return logical, {sig: source.series(ref.run, ref.tag) for sig, ref in logical.signals.items() if ref}


def test_the_resumed_jobs_log_is_read_without_its_start(jobs):
    runs = {r["run"]: r for r in scan_logdir(str(jobs))["runs"]}
    first, resumed = runs["job1"], runs["job2"]
    assert not first["late_start"] and resumed["late_start"]
    assert not {e["code"] for e in resumed["episodes"]} & STARTS
    assert resumed["health"] != "critical", [i["headline"] for i in resumed["incidents"]]
    assert not [i for i in resumed["incidents"] if i["kind"] in ("divergence", "plateau")]


def test_the_same_points_read_as_a_runs_start_cried_wolf(jobs):
    # What the late start spares it: the resumed job's points, their steps moved to begin at 0.
    logical, data = _data(jobs, "job2")
    first = int(data["train_loss"].steps[0])
    moved = {sig: Series.from_arrays(s.steps - first, s.values) for sig, s in data.items()}
    result = analyze_run(logical, moved)
    assert {e.code for e in result.episodes} & STARTS
    # "climbed away from its best N times": the noise around the level the first job had learnt
    assert result.health != "ok" and "divergence" in {i.kind for i in result.incidents}, \
        [i.headline for i in result.incidents]


def test_the_monitor_fed_the_resumed_job_finds_what_scan_finds(jobs):
    logical, data = _data(jobs, "job2")
    by_step = {}
    for sig, s in data.items():
        for step, value in zip(s.steps.tolist(), s.values.tolist()):
            by_step.setdefault(step, {})[sig] = value
    monitor = Monitor()
    for step in sorted(by_step):
        monitor.update(step, **by_step[step])
    scanned = analyze_run(logical, data)
    assert monitor.report()["late_start"]
    assert [(e.code, e.start_step, e.end_step) for e in monitor.episodes()] == \
           [(e.code, e.start_step, e.end_step) for e in scanned.episodes]
