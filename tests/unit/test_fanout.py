"""Fanning a scan out: families keep `group_runs` whole, tasks keep families whole, the report
assembled from task results is the in-process report, and `--jobs`/`--executor` parse."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support import eventwriters as ew
from tb_crash_signals import fanout
from tb_crash_signals.analysis.signals import family, group_runs
from tb_crash_signals.executors import ExecutorError, InlineExecutor, dask_address, executor_for
from tb_crash_signals.scan import scan_logdir

_PARTS = st.sampled_from(["a", "b", "train", "validation", "val", "eval", "x"])
_RUNS = st.lists(st.lists(_PARTS, min_size=1, max_size=3).map("/".join), unique=True, max_size=12)
_TAGS = st.sampled_from([(), ("loss",), ("epoch_loss",), ("val_loss", "loss")])


@settings(max_examples=200, deadline=None)
@given(_RUNS.flatmap(lambda runs: st.tuples(st.just(runs), st.lists(_TAGS, min_size=len(runs), max_size=len(runs)))))
def test_grouping_by_family_equals_grouping_everything(case):
    runs, tags = case
    run_tags = dict(zip(runs, tags))
    groups = fanout.families(runs)
    assert sorted(r for g in groups for r in g) == sorted(runs)
    apart = sorted((lr for g in groups for lr in group_runs({r: run_tags[r] for r in g})), key=lambda lr: lr.name)
    assert apart == group_runs(run_tags)


def test_tasks_hold_whole_families():
    runs = [f"e{i}/{s}" for i in range(10) for s in ("train", "validation")] + [f"e{i}" for i in range(10)]
    tasks = fanout.plan_tasks(runs, workers=2)
    assert sorted(r for t in tasks for r in t) == sorted(runs)
    for t in tasks:
        assert {family(r) for r in t} == {family(r) for r in runs if family(r) in {family(x) for x in t}}
    assert len(tasks) >= 4


def pts(n, spike=None):
    return [(i, 40.0 if i == spike else 1.0 / (1 + i)) for i in range(n)]


def test_fanned_out_report_equals_the_in_process_report(tmp_path):
    for i in range(6):
        ew.write_scalars(tmp_path / f"r{i}", {"train/loss": pts(300, spike=100 + 20 * i if i % 2 else None)})
    ew.write_scalars(tmp_path / "k" / "train", {"epoch_loss": pts(20)})
    ew.write_scalars(tmp_path / "k" / "validation", {"epoch_loss": pts(20)})
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "events.out.tfevents.x").write_bytes(b"\x00" * 40)
    want = json.dumps(scan_logdir(str(tmp_path)))
    with InlineExecutor() as executor:
        assert json.dumps(scan_logdir(str(tmp_path), executor=executor)) == want


def test_jobs_in_worker_processes_equal_one(tmp_path, monkeypatch):
    for i in range(4):
        ew.write_scalars(tmp_path / f"r{i}", {"train/loss": pts(200, spike=150 if i == 2 else None)})
    monkeypatch.setattr(fanout, "LOCAL_POOL_MIN_BYTES", 0)  # these logdirs would stay in-process
    seen = []
    from tb_crash_signals.executors import ProcessExecutor

    with ProcessExecutor(2) as pool:
        got = fanout.scan_fanned_out(str(tmp_path), _config(), pool,
                                     on_result=lambda r: seen.append(r.where))
    assert json.dumps(got) == json.dumps(scan_logdir(str(tmp_path)))
    assert seen and all(":" in w for w in seen)


def _config():
    from tb_crash_signals.analysis.config import Config

    return Config()


def test_executor_specs():
    assert dask_address("dask://10.0.0.5:8786") == "tcp://10.0.0.5:8786"
    assert dask_address("dask+tls://sched:8786") == "tls://sched:8786"
    with pytest.raises(ExecutorError):
        executor_for("spark://x:1", 2)
    assert isinstance(executor_for(None, 1), InlineExecutor)
