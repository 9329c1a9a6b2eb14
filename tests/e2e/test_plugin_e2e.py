"""End to end: the real `tensorboard` process, our tab found through its entry point.

Needs the package installed (`pip install -e .`, as scripts/test_all.sh does) so
that TensorBoard finds the `tensorboard_plugins` entry point; fails otherwise,
never skips.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import numpy as np
import pytest

from support.plugin_harness import free_port, simple_events, write_records

SPIKE = 13457
N = 20_000


def _entry_point_installed():
    eps = importlib.metadata.entry_points(group="tensorboard_plugins")
    return any(ep.value == "tb_crash_signals.loader:CrashSignalsLoader" for ep in eps)


@pytest.fixture(autouse=True, scope="module")
def _require_entry_point():
    assert _entry_point_installed(), "tb-crash-signals is not installed: pip install -e ."


def _get(url, timeout=30):
    """(status, content type, body bytes) without raising on 4xx/5xx."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read()


def _json(url):
    status, ctype, body = _get(url)
    assert status == 200, (url, status, body[:300])
    assert ctype.startswith("application/json")
    return json.loads(body)


def _poll(fn, timeout=60.0, what="condition"):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            last = fn()
            if last:
                return last
        except (OSError, urllib.error.URLError, ValueError, KeyError) as e:
            last = e
        time.sleep(0.1)
    raise TimeoutError(f"timed out waiting for {what}; last: {last!r}")


@contextlib.contextmanager
def tensorboard(logdir, *args, path_prefix=""):
    """Runs `python -m tensorboard.main` on 127.0.0.1:<free port>; yields its base URL."""
    port = free_port()
    cmd = [
        sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir),
        "--port", str(port), "--host", "127.0.0.1", *args,
    ]
    if path_prefix:
        cmd += ["--path_prefix", path_prefix]
    log = open(os.path.join(str(logdir), "..", f"tensorboard-{port}.log"), "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}{path_prefix}"
    try:
        def ready():
            if proc.poll() is not None:
                raise RuntimeError(f"tensorboard exited with {proc.returncode}")
            return _get(base + "/data/plugins_listing", timeout=2)[0] == 200

        try:
            _poll(ready, 60, "tensorboard to serve")
        except Exception:
            log.flush()
            with open(log.name, "rb") as f:
                sys.stderr.write(f.read().decode(errors="replace")[-3000:])
            raise
        yield base, proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        log.close()


@pytest.fixture(scope="module")
def logdir20k(tmp_path_factory):
    root = tmp_path_factory.mktemp("e2e") / "logs"
    rng = np.random.default_rng(1)
    loss = 2.0 * np.exp(-np.arange(N) / 5000) + 0.1 + 0.01 * rng.standard_normal(N)
    loss[SPIKE] *= 20
    write_records(str(root / "spiky"), simple_events({"train/loss": loss}))
    return root


@pytest.mark.parametrize("load_fast", ["false", "true"])
def test_full_resolution_spike_in_both_loaders(logdir20k, load_fast, record_property):
    with tensorboard(logdir20k, f"--load_fast={load_fast}") as (base, proc):
        listing = _json(base + "/data/plugins_listing")
        tab = listing["crash_signals"]
        assert tab["tab_name"] == "Crash Signals"
        assert tab["loading_mechanism"] == {
            "type": "IFRAME", "module_path": "/data/plugin/crash_signals/index.js",
        }
        # TensorBoard finished loading: its reservoir holds the last step.
        scalars_url = base + "/data/plugin/scalars/scalars?" + urllib.parse.urlencode(
            {"run": "spiky", "tag": "train/loss"}
        )
        points = _poll(
            lambda: (lambda p: p if p and p[-1][1] == N - 1 else None)(_json(scalars_url)),
            60, "TensorBoard to load the run",
        )
        assert _json(base + "/data/plugins_listing")["crash_signals"]["enabled"] is True
        steps = [p[1] for p in points]
        assert len(steps) == 1000 and SPIKE not in steps  # TensorBoard's own view dropped it

        url = base + "/data/plugin/crash_signals/analysis?run=spiky"
        t0 = time.perf_counter()
        payload = _json(url)
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        _json(url)
        warm = time.perf_counter() - t0
        record_property("analysis_cold_s", round(cold, 4))
        record_property("analysis_warm_s", round(warm, 4))
        print(f"load_fast={load_fast}: analysis cold {cold * 1000:.1f} ms, warm {warm * 1000:.1f} ms")

        assert payload["sampled"] is False
        assert payload["points"]["train_loss"] == N
        spikes = [e for e in payload["episodes"] if e["rule"] == "loss-spike"]
        assert [e["start_step"] for e in spikes] == [SPIKE]
        assert SPIKE in payload["series"]["train_loss"]["steps"]

        runs = _json(base + "/data/plugin/crash_signals/runs")
        assert [(r["run"], r["sampled"]) for r in runs["runs"]] == [("spiky", False)]
        assert proc.poll() is None


def test_path_prefix_and_bad_config(tmp_path):
    root = tmp_path / "logs"
    write_records(str(root / "r"), simple_events({"train/loss": [1.0 / (i + 1) for i in range(200)]}))
    (root / "crash_signals.toml").write_text("[rules.no-such-rule]\nx = 1\n")
    with tensorboard(root, "--load_fast=false", path_prefix="/foo") as (base, proc):
        assert "crash_signals" in _json(base + "/data/plugins_listing")
        runs = _poll(
            lambda: (lambda p: p if p["runs"] else None)(_json(base + "/data/plugin/crash_signals/runs")),
            30, "the run to be listed",
        )
        assert "no-such-rule" in runs["config_error"]
        assert runs["runs"][0]["run"] == "r"
        assert _json(base + "/data/plugin/crash_signals/analysis?run=r")["config_error"]
        assert _json(base + "/data/plugin/crash_signals/rules")["config_error"]
        status, _, body = _get(base + "/data/plugin/crash_signals/analysis")
        assert status == 400 and b"run" in body
        status, ctype, _ = _get(base + "/data/plugin/crash_signals/index.js")
        assert status in (200, 404)  # 404 only when the bundle is not built
        if status == 200:
            assert ctype.startswith("text/javascript")
        # Without the prefix nothing is served.
        status, _, _ = _get(base.replace("/foo", "") + "/data/plugin/crash_signals/runs")
        assert status == 404
        assert proc.poll() is None
