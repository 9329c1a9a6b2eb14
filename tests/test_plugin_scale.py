"""Big logdirs: the `runs` listing's time budget, reservoir summaries, background analyses."""

from __future__ import annotations

import time

import pytest

from plugin_harness import backend, simple_events, tb_flags, write_records
from tb_crash_signals.plugin import CrashSignalsPlugin


class _Lazy(CrashSignalsPlugin):
    lazy_runs = 1  # every logdir with 2+ runs is "big"
    runs_budget = 0.0  # no full-resolution analysis inside the request


def _wait_idle(plugin, timeout=30.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        with plugin._lock:
            if not plugin._background and plugin._worker is None:
                return
        time.sleep(0.02)
    raise TimeoutError("background analyses did not finish")


@pytest.mark.parametrize("kind", ["python"])
def test_runs_over_budget_uses_reservoir_then_full_resolution(tmp_path, kind):
    n = 1500  # more than TensorBoard's 1000-point reservoir
    spike = [1.0] * n
    spike[700] = 50.0  # one step: the reservoir almost surely drops it
    write_records(str(tmp_path / "a"), simple_events({"train/loss": spike}))
    write_records(str(tmp_path / "b"), simple_events({"train/loss": [1.0 / (i + 1) for i in range(300)]}))
    flags = tb_flags(logdir=str(tmp_path))
    with backend(kind, flags, plugin_cls=_Lazy) as served:
        first = served.get("runs").get_json()
        by_run = {e["run"]: e for e in first["runs"]}
        assert set(by_run) == {"a", "b"}
        assert by_run["a"]["sampled"] is True  # a full reservoir
        assert by_run["b"]["sampled"] is False  # a reservoir that is not full holds every point
        assert served.plugin.stats["reservoir_summaries"] == 2
        _wait_idle(served.plugin)
        assert served.plugin.stats["background_analyses"] == 2
        second = served.get("runs").get_json()
        by_run = {e["run"]: e for e in second["runs"]}
        assert by_run["a"]["sampled"] is False
        assert by_run["a"]["counts"]["warning"] >= 1  # the spike, seen at full resolution
        # analysis never serves a reservoir summary: it equals the full entry.
        a = served.get("analysis", run="a").get_json()
        assert a["sampled"] is False and a["health"] == by_run["a"]["health"]
        assert served.plugin.stats["reservoir_summaries"] == 2


def test_small_logdirs_are_analysed_in_the_request(tmp_path):
    for name in ("a", "b"):
        write_records(str(tmp_path / name), simple_events({"train/loss": [1.0] * 50}))
    flags = tb_flags(logdir=str(tmp_path))
    with backend("python", flags) as served:
        body = served.get("runs").get_json()
        assert [e["sampled"] for e in body["runs"]] == [False, False]
        assert served.plugin.stats["reservoir_summaries"] == 0
        assert served.plugin._worker is None
