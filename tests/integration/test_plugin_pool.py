"""The background pass in worker processes: the same answers as in a thread, and fallbacks."""

from __future__ import annotations

import json
import time

from support.plugin_harness import backend, simple_events, tb_flags, write_records
from tb_crash_signals.tb_plugin.plugin import CrashSignalsPlugin
from tb_crash_signals.tb_plugin.service import Limits


class _Pooled(CrashSignalsPlugin):
    limits = Limits(lazy_runs=1, runs_budget=0.0, pool_processes=2)


class _Threaded(CrashSignalsPlugin):
    limits = Limits(lazy_runs=1, runs_budget=0.0, pool_processes=0)


def _settle(served, timeout=120.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        body = served.get("runs").get_json()
        if not body["progress"]["pending"] and served.plugin.service.worker.idle():
            return body
        time.sleep(0.1)
    raise TimeoutError("background analyses did not finish")


def _logdir(root):
    spiky = [1.0] * 1500
    spiky[700] = 50.0
    write_records(str(root / "a"), simple_events({"train/loss": spiky}))
    write_records(str(root / "b"), simple_events({"train/loss": [1.0 / (i + 1) for i in range(300)]}))
    write_records(str(root / "k" / "train"), simple_events({"epoch_loss": [1.0 / (i + 1) for i in range(40)]}))
    write_records(str(root / "k" / "validation"), simple_events({"epoch_loss": [1.2 / (i + 1) for i in range(40)]}))


def test_pool_answers_equal_the_threads(tmp_path):
    _logdir(tmp_path)
    answers = {}
    for cls in (_Threaded, _Pooled):
        with backend("python", tb_flags(logdir=str(tmp_path)), plugin_cls=cls) as served:
            runs = _settle(served)
            payloads = {r["run"]: served.get("analysis", run=r["run"]).get_data(as_text=True) for r in runs["runs"]}
            answers[cls.__name__] = (runs, payloads)
            stats = served.plugin.service.stats
            if cls is _Pooled:
                # Every run went to the pool, and its payloads were served from what came back.
                assert stats["pool_analyses"] == 3 and stats["analyses"] == 0
            else:
                assert stats["pool_analyses"] == 0 and stats["analyses"] == 3
    (t_runs, t_payloads), (p_runs, p_payloads) = answers["_Threaded"], answers["_Pooled"]
    assert t_runs == p_runs
    assert {k: json.loads(v) for k, v in t_payloads.items()} == {k: json.loads(v) for k, v in p_payloads.items()}
    assert {r["run"]: r["sampled"] for r in p_runs["runs"]} == {"a": False, "b": False, "k": False}


def test_a_run_that_grew_after_the_pool_is_analysed_again(tmp_path):
    _logdir(tmp_path)
    with backend("python", tb_flags(logdir=str(tmp_path)), plugin_cls=_Pooled) as served:
        _settle(served)
        write_records(str(tmp_path / "b"), simple_events({"train/loss": [5.0] * 10}, start=300),
                      name="events.out.tfevents.1700000001.more")
        body = _settle(served)
        (b,) = [r for r in body["runs"] if r["run"] == "b"]
        assert served.get("analysis", run="b").get_json()["points"]["train_loss"] == 310
        assert b["health"] in ("ok", "warning", "critical")


def test_pool_disabled_by_a_broken_task_falls_back_to_the_thread(tmp_path, monkeypatch):
    _logdir(tmp_path)
    from tb_crash_signals.tb_plugin import pool

    class Broken(pool.AnalysisPool):
        def submit(self, task):
            import concurrent.futures

            future = concurrent.futures.Future()
            future.set_exception(RuntimeError("worker died"))
            return future

    monkeypatch.setattr("tb_crash_signals.tb_plugin.service.AnalysisPool", Broken)
    with backend("python", tb_flags(logdir=str(tmp_path)), plugin_cls=_Pooled) as served:
        body = _settle(served)
        assert {r["run"] for r in body["runs"] if r["health"] != "pending"} == {"a", "b", "k"}
        assert served.plugin.service.stats["analyses"] == 3  # each analysed here instead
