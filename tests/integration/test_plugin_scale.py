"""Big logdirs: the `runs` listing's time budget, pending runs, background analyses.

Deterministic: `runs_budget = 0` lists every run without a current summary as
pending in the response, and the background worker starts only after the
response's entries are built.
"""

from __future__ import annotations

import math
import threading
import time

import pytest

from support.plugin_harness import Served, backend, make_plugin, simple_events, tb_flags, write_records
from tb_crash_signals.scan import scan_logdir
from tb_crash_signals.tb_plugin import service as service_mod
from tb_crash_signals.tb_plugin.plugin import CrashSignalsPlugin
from tb_crash_signals.tb_plugin.service import Limits


class _Lazy(CrashSignalsPlugin):
    # Every logdir with 2+ runs is "big"; no full-resolution analysis inside the request.
    limits = Limits(lazy_runs=1, runs_budget=0.0)


class _Threaded(CrashSignalsPlugin):
    # The background pass in a thread of this process (no worker processes).
    limits = Limits(lazy_runs=1, runs_budget=0.0, pool_processes=0)


class _Paused(_Threaded):
    """Queues the pending runs but starts no worker (the test starts it: `start_worker`)."""

    def __init__(self, context):
        super().__init__(context)
        self.start_worker = self.service.worker.start
        self.service.worker.start = lambda: None


def _wait_idle(plugin, timeout=30.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if plugin.service.worker.idle():
            return
        time.sleep(0.02)
    raise TimeoutError("background analyses did not finish")


def _by_run(payload):
    return {e["run"]: e for e in payload["runs"]}


def _spiky(n=1500):
    values = [1.0] * n
    values[700] = 50.0  # one step: TensorBoard's 1000-point reservoir almost surely drops it
    return values


@pytest.mark.parametrize("kind", ["python", "rust"])
def test_runs_over_budget_are_pending_then_analysed_at_full_resolution(tmp_path, kind):
    write_records(str(tmp_path / "a"), simple_events({"train/loss": _spiky()}))
    write_records(str(tmp_path / "b"), simple_events({"train/loss": [1.0 / (i + 1) for i in range(300)]}))
    ref = {e["run"]: e for e in scan_logdir(str(tmp_path))["runs"]}
    flags = tb_flags(logdir=str(tmp_path))
    with backend(kind, flags, expect_runs={"a": 1499, "b": 299}, plugin_cls=_Lazy) as served:
        first = served.get("runs").get_json()
        assert first["progress"] == {"analysed": 0, "pending": 2, "total": 2}
        for name, entry in _by_run(first).items():
            assert entry["health"] == "pending" and entry["pending"] is True
            assert entry["counts"] == {"warning": 0, "critical": 0}
            assert entry["first_critical_step"] is None and entry["sampled"] is False
            assert entry["signals"]["train_loss"] == {"run": name, "tag": "train/loss"}
        assert [e["run"] for e in first["runs"]] == ["a", "b"]  # pending: by name
        _wait_idle(served.plugin)
        assert served.plugin.service.stats["background_analyses"] == 2
        second = served.get("runs").get_json()
        assert second["progress"] == {"analysed": 2, "pending": 0, "total": 2}
        for name, entry in _by_run(second).items():
            assert "pending" not in entry
            assert entry["health"] == ref[name]["health"] and entry["sampled"] is False
        assert _by_run(second)["a"]["counts"]["warning"] >= 1  # the spike, seen at full resolution
        a = served.get("analysis", run="a").get_json()
        assert a["sampled"] is False and a["health"] == ref["a"]["health"]
        stats = served.plugin.service.stats  # the background pass's analyses serve both routes
        assert stats["analyses"] + stats["pool_analyses"] == 2


def test_analysis_of_a_pending_run_is_done_on_demand(tmp_path):
    for name in ("a", "b"):
        write_records(str(tmp_path / name), simple_events({"train/loss": [1.0] * 50 + [math.nan] * 3}))
    with backend("python", tb_flags(logdir=str(tmp_path)), plugin_cls=_Paused) as served:
        assert served.get("runs").get_json()["progress"]["pending"] == 2
        a = served.get("analysis", run="a").get_json()
        assert a["health"] == "critical" and a["sampled"] is False
        body = served.get("runs").get_json()
        assert body["progress"] == {"analysed": 1, "pending": 1, "total": 2}
        assert _by_run(body)["a"]["health"] == "critical" and "pending" not in _by_run(body)["a"]
        assert served.plugin.service.stats["analyses"] == 1


def test_pending_runs_are_queued_most_recently_written_first(tmp_path):
    # simple_events writes wall_time = 1.7e9 + step: a later start is a later write.
    for name, start in (("old", 0), ("newest", 5000), ("middle", 2000)):
        write_records(str(tmp_path / name), simple_events({"train/loss": [1.0] * 20}, start=start))
    with backend("python", tb_flags(logdir=str(tmp_path)), plugin_cls=_Paused) as served:
        body = served.get("runs").get_json()
        assert [e["run"] for e in body["runs"]] == ["middle", "newest", "old"]  # listed by name
        assert list(served.plugin.service.worker.queue) == ["newest", "middle", "old"]  # analysed newest first
        served.plugin.start_worker()
        _wait_idle(served.plugin)
        assert served.get("runs").get_json()["progress"]["pending"] == 0


def test_within_budget_runs_are_analysed_in_the_request_unless_the_worker_is_busy(tmp_path):
    for name in ("a", "b", "c"):
        write_records(str(tmp_path / name), simple_events({"train/loss": [1.0] * 30}))

    class Roomy(_Lazy):
        limits = Limits(lazy_runs=1, runs_budget=600.0)

    with backend("python", tb_flags(logdir=str(tmp_path)), plugin_cls=Roomy) as served:
        plugin = served.plugin
        release = threading.Event()
        busy = threading.Thread(target=release.wait, daemon=True)
        busy.start()
        plugin.service.worker.thread = busy  # as if the worker were analysing: the request only lists
        try:
            body = served.get("runs").get_json()
            assert body["progress"] == {"analysed": 0, "pending": 3, "total": 3}
            assert plugin.service.stats["analyses"] == 0
            assert sorted(plugin.service.worker.queue) == ["a", "b", "c"]
        finally:
            release.set()
            busy.join()
        with plugin.service.worker.lock:
            plugin.service.worker.thread = None
            plugin.service.worker.queue.clear()
        body = served.get("runs").get_json()  # worker idle, time left: analysed in the request
        assert body["progress"] == {"analysed": 3, "pending": 0, "total": 3}
        assert plugin.service.stats["analyses"] == 3 and plugin.service.worker.thread is None


def test_changed_sick_run_keeps_its_findings_while_pending(tmp_path):
    root = tmp_path
    write_records(str(root / "sick"), simple_events({"train/loss": [1.0] * 50 + [math.nan] * 5}))
    write_records(str(root / "fine"), simple_events({"train/loss": [1.0 / (i + 1) for i in range(60)]}))
    write_records(str(root / "still"), simple_events({"train/loss": [1.0 / (i + 1) for i in range(60)]}))
    with backend("python", tb_flags(logdir=str(root)), plugin_cls=_Paused) as served:
        plugin = served.plugin
        served.get("runs")
        plugin.start_worker()
        _wait_idle(plugin)
        before = _by_run(served.get("runs").get_json())
        assert before["sick"]["health"] == "critical"
        # Both runs get more data (a second event file); "still" does not change.
        for name, start in (("sick", 55), ("fine", 60)):
            write_records(
                str(root / name), simple_events({"train/loss": [0.5] * 10}, start=start),
                name="events.out.tfevents.1700000001.more",
            )
        body = served.get("runs").get_json()
        assert body["progress"] == {"analysed": 1, "pending": 2, "total": 3}
        runs = _by_run(body)
        # Causal rules: the findings on the older data stand; the entry says it is being updated.
        assert runs["sick"]["health"] == "critical" and runs["sick"]["pending"] is True
        assert runs["sick"]["counts"] == before["sick"]["counts"]
        # A run that was fine is not shown as fine until its new data are analysed.
        assert runs["fine"]["health"] == "pending" and runs["fine"]["pending"] is True
        assert "pending" not in runs["still"] and runs["still"]["health"] == "ok"
        assert [e["run"] for e in body["runs"]] == ["sick", "fine", "still"]  # sick, pending, ok
        # Another config: earlier findings no longer stand.
        (root / "crash_signals.toml").write_text('ignore = ["CS001"]\n')
        runs = _by_run(served.get("runs").get_json())
        assert runs["sick"]["health"] == "pending"
        plugin.start_worker()
        _wait_idle(plugin)
        body = served.get("runs").get_json()
        assert body["progress"]["pending"] == 0
        assert all("pending" not in e for e in body["runs"])


def test_failed_background_analysis_is_listed_and_not_retried(tmp_path, monkeypatch):
    for name in ("a", "b"):
        write_records(str(tmp_path / name), simple_events({"train/loss": [1.0] * 30}))
    real = service_mod.analyze_run
    failures = []

    def flaky(logical, *args, **kwargs):
        if logical.name == "b":
            failures.append(logical.name)
            raise RuntimeError("boom")
        return real(logical, *args, **kwargs)

    monkeypatch.setattr(service_mod, "analyze_run", flaky)
    with backend("python", tb_flags(logdir=str(tmp_path)), plugin_cls=_Threaded) as served:
        served.get("runs")
        _wait_idle(served.plugin)
        for _ in range(2):
            body = served.get("runs").get_json()
            assert body["progress"] == {"analysed": 2, "pending": 0, "total": 2}
            b = _by_run(body)["b"]
            assert b["health"] == "no_signals" and "boom" in b["error"]
            assert any("boom" in p for p in body["problems"])
        assert failures == ["b"]  # tried once, not retried while its data are the same
        assert served.plugin.service.worker.thread is None


@pytest.mark.parametrize("kind", ["python", "rust"])
def test_remote_runs_are_pending_too(tmp_path, kind):
    write_records(str(tmp_path / "a"), simple_events({"train/loss": _spiky()}))
    write_records(str(tmp_path / "b"), simple_events({"train/loss": [1.0 / (i + 1) for i in range(300)]}))
    with backend(kind, tb_flags(logdir=str(tmp_path)), expect_runs={"a": 1499, "b": 299}) as s:
        # The same provider, but the plugin believes the logdir is remote (and cannot read it).
        remote = make_plugin(tb_flags(logdir="nosuchproto://bucket/logs"), s.provider, plugin_cls=_Lazy)
        served = Served(remote, s.provider)
        first = served.get("runs").get_json()
        assert first["progress"] == {"analysed": 0, "pending": 2, "total": 2}
        _wait_idle(remote)
        runs = _by_run(served.get("runs").get_json())
        assert runs["a"]["sampled"] is True  # analysed from TensorBoard's full reservoir
        assert runs["b"]["sampled"] is False and runs["b"]["health"] == "ok"
        assert remote.service.data.readers.keys() == []


def test_small_logdirs_are_analysed_in_the_request(tmp_path):
    for name in ("a", "b"):
        write_records(str(tmp_path / name), simple_events({"train/loss": [1.0] * 50}))
    flags = tb_flags(logdir=str(tmp_path))
    with backend("python", flags) as served:
        body = served.get("runs").get_json()
        assert [e["sampled"] for e in body["runs"]] == [False, False]
        assert all("pending" not in e for e in body["runs"])
        assert body["progress"] == {"analysed": 2, "pending": 0, "total": 2}
        assert served.plugin.service.worker.thread is None and not served.plugin.service.worker.queue


def test_worker_waits_while_a_request_is_served(tmp_path):
    for name in ("a", "b"):
        write_records(str(tmp_path / name), simple_events({"train/loss": [1.0] * 30}))
    with backend("python", tb_flags(logdir=str(tmp_path)), plugin_cls=_Paused) as served:
        plugin = served.plugin
        served.get("runs")
        gate = threading.Event()
        def held():
            with plugin.service.worker.foreground():
                gate.wait(30)

        request = threading.Thread(target=held)
        request.start()  # a request in progress
        while not plugin.service.worker.active:
            time.sleep(0.01)
        plugin.start_worker()
        time.sleep(0.3)
        assert plugin.service.stats["background_analyses"] == 0 and len(plugin.service.worker.queue) == 2
        gate.set()
        request.join()
        _wait_idle(plugin)
        assert plugin.service.stats["background_analyses"] == 2
