"""Routes of the Crash Signals plugin, through TensorBoard's WSGI app and both data providers."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from support.eventwriters import write_scalars
from support.plugin_harness import PREFIX, backend, simple_events, tb_flags, write_records
from tb_crash_signals.analysis.sweep import run_outcome
from tb_crash_signals.scan import scan_logdir
from tb_crash_signals.tb_plugin import plugin as plugin_mod

EXTRA_KEYS = {"series", "nonfinite", "gap_band", "bands", "thresholds", "config_error", "problems"}
HOSTILE = "<img src=x onerror=alert(1)>"
UNICODE = "ünïcode 日本 run"
SPACED = "with space/sub run"
SPIKE_STEP = 2345
N_SPIKY = 3000  # > TensorBoard's 1000-point reservoir


def _spiky_values(n=N_SPIKY, spike=SPIKE_STEP):
    rng = np.random.default_rng(7)
    loss = 2.0 * np.exp(-np.arange(n) / 800) + 0.2 + 0.005 * rng.standard_normal(n)
    loss[spike] *= 30
    grad = 1.0 + 0.05 * rng.standard_normal(n)
    grad[1500] = 500.0
    return loss, grad


def _series(n, start=1.0, rate=0.01):
    return [(i, start * math.exp(-rate * i) + 0.1) for i in range(n)]


def build_logdir(root):
    loss, grad = _spiky_values()
    write_records(
        os.path.join(root, "spiky"),
        simple_events({"train/loss": loss, "train/grad_norm": grad, "train/learning_rate": [1e-3] * N_SPIKY}),
    )
    nan = [v for _, v in _series(300)]
    for i in range(200, 250):
        nan[i] = float("nan")
    nan[260] = float("inf")
    nan[270] = float("-inf")
    write_scalars(os.path.join(root, "nan"), {"loss": list(enumerate(nan))})
    epochs = 30
    train = [(e, 1.0 / (e + 1)) for e in range(epochs)]
    val = [(e, 1.0 / (e + 1) + (0.02 * max(0, e - 10))) for e in range(epochs)]
    write_scalars(os.path.join(root, "keras", "train"), {"epoch_loss": train})
    write_scalars(os.path.join(root, "keras", "validation"), {"epoch_loss": val})
    for name in (HOSTILE, UNICODE, SPACED):
        write_scalars(os.path.join(root, *name.split("/")), {"loss": _series(100)})
    write_scalars(os.path.join(root, "metrics_only"), {"accuracy": [(i, 0.5) for i in range(50)]})
    write_scalars(os.path.join(root, "update"), {"optim/update_ratio": [(i, 0.5) for i in range(60)]})
    write_scalars(root, {"loss": _series(80)})  # a run at the logdir root: "."
    return root


EXPECTED_RUNS = {
    "spiky": N_SPIKY - 1, "nan": 299, "keras/train": 29, "keras/validation": 29, HOSTILE: 99,
    UNICODE: 99, SPACED: 99, "metrics_only": 49, "update": 59, ".": 79,
}


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    return build_logdir(str(tmp_path_factory.mktemp("logdir")))


@pytest.fixture(scope="module")
def scan_report(logdir):
    return scan_logdir(logdir)


@pytest.fixture(scope="module", params=["python", "rust"])
def served(request, logdir):
    flags = tb_flags(logdir=logdir)
    with backend(request.param, flags, expect_runs=EXPECTED_RUNS) as s:
        s.kind = request.param
        yield s


def _analysis(served, run):
    r = served.get("analysis", run=run)
    assert r.status_code == 200, r.data
    assert r.headers["Content-Type"].startswith("application/json")
    return r.get_json()


# -- runs ---------------------------------------------------------------------


def test_runs_payload_matches_scan(served, scan_report):
    r = served.get("runs")
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("application/json")
    payload = r.get_json()
    assert payload["schema"] == 1
    assert payload["config_error"] is None
    assert payload["problems"] == []
    runs = payload["runs"]
    assert payload["progress"] == {"analysed": len(runs), "pending": 0, "total": len(runs)}
    assert [e["run"] for e in runs] == [e["run"] for e in scan_report["runs"]]
    by_name = {e["run"]: e for e in scan_report["runs"]}
    for entry in runs:
        assert set(entry) == {
            "run", "health", "counts", "incident_counts", "first_critical_step", "signals", "loss_kind",
            "late_start", "sampled", "headline", "kinds",
        }
        ref = by_name[entry["run"]]
        assert entry["health"] == ref["health"]
        assert entry["signals"] == ref["signals"]
        assert entry["loss_kind"] == ref["loss_kind"] and entry["late_start"] == ref["late_start"]
        assert entry["sampled"] is False
        assert entry["headline"] == ref["summary"]["headline"]
        assert entry["first_critical_step"] == ref["summary"]["first_critical_step"]
        assert entry["kinds"] == run_outcome(ref)["kinds"]
        assert entry["counts"] == {
            sev: sum(1 for e in ref["episodes"] if e["severity"] == sev)
            for sev in ("warning", "critical")
        }
        assert entry["incident_counts"] == {
            sev: sum(1 for i in ref["incidents"] if i["severity"] == sev)
            for sev in ("info", "warning", "critical")
        }
    healths = [e["health"] for e in runs]
    order = ["critical", "warning", "ok", "no_signals"]
    assert healths == sorted(healths, key=order.index)
    assert {e["run"] for e in runs} >= {HOSTILE, UNICODE, SPACED, "keras", "."}


def test_analysis_equals_scan_entry_for_every_run(served, scan_report):
    for ref in scan_report["runs"]:
        payload = _analysis(served, ref["run"])
        assert set(payload) >= EXTRA_KEYS
        core = {k: v for k, v in payload.items() if k not in EXTRA_KEYS}
        assert core == ref, ref["run"]


# -- analysis -------------------------------------------------------------------


def test_spike_seen_although_tensorboard_sampled_it(served):
    from tensorboard import context as tb_context

    points = served.provider.read_scalars(
        tb_context.RequestContext(), experiment_id="", plugin_name="scalars", downsample=10**9,
    )["spiky"]["train/loss"]
    assert len(points) == 1000  # TensorBoard's reservoir
    payload = _analysis(served, "spiky")
    assert payload["sampled"] is False
    assert payload["points"]["train_loss"] == N_SPIKY
    starts = {(e["rule"], e["start_step"]) for e in payload["episodes"] if e["signal"] == "train_loss"}
    assert ("loss-spike", SPIKE_STEP) in starts
    col = payload["series"]["train_loss"]
    assert len(col["steps"]) <= 2000
    i = col["steps"].index(SPIKE_STEP)
    loss, _ = _spiky_values()
    assert col["values"][i] == pytest.approx(float(np.float32(loss[SPIKE_STEP])))
    assert max(v for v in col["values"] if v is not None) == col["values"][i]
    assert payload["thresholds"] == {"grad_norm": 100.0}
    assert payload["bands"] == {"update_ratio": [1e-5, 0.1]}
    assert payload["gap_band"] is None
    assert payload["series"]["grad_norm"]["steps"].count(1500) == 1


def test_nonfinite_points(served):
    payload = _analysis(served, "nan")
    col = payload["series"]["train_loss"]
    vals = dict(zip(col["steps"], col["values"]))
    assert vals[200] is None and vals[249] is None and vals[260] is None
    assert vals[199] is not None
    nf = payload["nonfinite"]["train_loss"]
    assert nf[0] == {"step": 200, "value": "NaN"}
    assert {"step": 260, "value": "Infinity"} in nf
    assert {"step": 270, "value": "-Infinity"} in nf
    assert len(nf) == 52
    assert "NaN" not in json.dumps(col)
    assert any(e["family"] == "nonfinite" for e in payload["episodes"])


def test_keras_siblings_and_gap_band(served):
    payload = _analysis(served, "keras")
    assert payload["signals"]["train_loss"] == {"run": "keras/train", "tag": "epoch_loss"}
    assert payload["signals"]["val_loss"] == {"run": "keras/validation", "tag": "epoch_loss"}
    band = payload["gap_band"]
    assert band["steps"] == list(range(30))
    assert band["train"][5] == pytest.approx(1 / 6)
    assert band["val"][20] == pytest.approx(1 / 21 + 0.2)


def test_hostile_names_round_trip(served):
    names = {e["run"] for e in served.get("runs").get_json()["runs"]}
    for name in (HOSTILE, UNICODE, SPACED, "."):
        assert name in names
        payload = _analysis(served, name)
        assert payload["run"] == name
    r = served.get("runs")
    assert b"<img" not in r.data  # JSON escapes it; served as application/json anyway


def test_no_signals_run(served):
    payload = _analysis(served, "metrics_only")
    assert payload["health"] == "no_signals"
    assert payload["tags"] == {"metrics_only": ["accuracy"]}
    assert payload["series"] == {}


# -- errors ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "route, params, status, text",
    [
        ("analysis", {}, 400, "missing required parameter 'run'"),
        ("analysis", {"run": "nope"}, 404, "no run named 'nope'"),
        ("analysis", {"run": "keras/train"}, 404, "part of run 'keras'"),
        ("analysis", {"run": "spiky", "colour": "red"}, 400, "unknown query parameter 'colour'"),
        ("runs", {"run": "spiky"}, 400, "unknown query parameter 'run'"),
        ("rules", {"x": "1"}, 400, "unknown query parameter"),
        ("analysis", {"run": "../../etc/passwd"}, 404, "no run named"),
    ],
)
def test_user_errors(served, route, params, status, text):
    r = served.get(route, **params)
    assert r.status_code == status
    assert r.headers["Content-Type"].startswith("text/plain")
    assert text in r.get_data(as_text=True)


def test_duplicate_parameter(served):
    r = served.raw(PREFIX + "analysis?run=spiky&run=nan")
    assert r.status_code == 400
    assert "more than once" in r.get_data(as_text=True)


def test_rules_route(served):
    r = served.get("rules")
    assert r.status_code == 200
    payload = r.get_json()
    assert payload["config_error"] is None
    codes = {rule["code"] for rule in payload["rules"]}
    assert {"CS001", "CS101", "CS112", "CS201"} <= codes


# -- assets ---------------------------------------------------------------------


def test_assets_and_traversal(served, tmp_path, monkeypatch):
    static = tmp_path / "static"
    static.mkdir()
    (static / "index.js").write_text("export function render() {}\n")
    (static / "index.css").write_text(".cs-root {}\n")
    monkeypatch.setattr(plugin_mod, "STATIC_DIR", str(static))
    served.plugin._assets.clear()
    r = served.get("index.js")
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/javascript")
    assert b"render" in r.data
    r = served.get("index.css")
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/css")
    (static / "secret.txt").write_text("SECRET")
    for url in [
        PREFIX + "secret.txt",
        PREFIX + "static/index.js",
        PREFIX + "index.js/../secret.txt",
        PREFIX + "..%2Fsecret.txt",
        PREFIX + "%2e%2e/%2e%2e/setup.py",
        PREFIX + "plugin.py",
        PREFIX + "index.js%00.txt",
    ]:
        r = served.raw(url)
        assert r.status_code == 404, url
        assert b"SECRET" not in r.data
    r = served.raw(PREFIX + "index.js?path=../secret.txt")
    assert r.status_code == 200 and b"SECRET" not in r.data


def test_missing_bundle_says_how_to_build(served, tmp_path, monkeypatch):
    monkeypatch.setattr(plugin_mod, "STATIC_DIR", str(tmp_path / "nothing"))
    served.plugin._assets.clear()
    for name in ("index.js", "index.css"):
        r = served.get(name)
        assert r.status_code == 404
        assert "npm run build" in r.get_data(as_text=True)
