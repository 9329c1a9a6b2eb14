"""The `sweep` route over both of TensorBoard's data providers: hparams read through the provider,
the same statements as `scan --by-hparams`, hparams.yaml from the run's directory, bad input."""

from __future__ import annotations

import os

import pytest

from support.plugin_harness import backend, tb_flags
from support.sweeps import write_keras_grid, write_lightning_sweep
from tb_crash_signals.scan import scan_logdir


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweeplogs")
    write_keras_grid(str(root / "grid"))
    write_lightning_sweep(str(root / "light"), repeats=2)
    with open(root / "light" / "lightning_logs" / "version_0" / "hparams.yaml", "a", encoding="utf-8") as f:
        f.write("x: !!python/object/apply:os.system ['echo no']\n")
    return str(root)


@pytest.fixture(scope="module", params=["python", "rust"])
def served(request, logdir):
    expect = {f"grid/{n}/validation": 11 for n in os.listdir(os.path.join(logdir, "grid"))}
    expect["light/lightning_logs/version_7"] = 79
    with backend(request.param, tb_flags(logdir=logdir), expect_runs=expect) as s:
        yield s


def _sweep(served):
    r = served.get("sweep")
    assert r.status_code == 200, r.data
    assert r.headers["Content-Type"].startswith("application/json")
    return r.get_json()


def test_statements_match_the_cli(served, logdir):
    payload = _sweep(served)
    scanned = scan_logdir(logdir, by_hparams=True)
    by_folder = {s["sweep"]: s for s in payload["sweeps"]}
    grid = by_folder["grid"]
    assert grid["statements"][0]["text"].startswith(
        "learning_rate=1.0 with optimizer in {Adam, Adamax, Nadam, RMSprop}: 4/4 exploded at step 1; "
        "every other run: 0/28"
    )
    cli = {s["sweep"]: s for s in scanned["sweeps"]}
    assert [s["text"] for s in grid["statements"]] == [s["text"] for s in cli["grid"]["statements"]]
    runs = {r["run"]: r for r in payload["runs"]}
    hp = runs["grid/learning_rate=1.0_optimizer=Adam"]["hparams"]
    assert hp["values"]["optimizer"] == "Adam" and hp["sources"]["learning_rate"] == "tensorboard"
    assert runs["grid/learning_rate=1.0_optimizer=Adam"]["kinds"]["divergence"]["crash_step"] == 1


def test_hparams_yaml_from_the_run_directory(served):
    runs = {r["run"]: r for r in _sweep(served)["runs"]}
    hp = runs["light/lightning_logs/version_0"]["hparams"]
    assert hp["values"]["lr"] == 1e-4 and hp["sources"]["lr"] == "hparams.yaml"
    assert "hparams.yaml: x (!!python/object/apply:os.system)" in hp["skipped"]


def test_unknown_parameter_is_400(served):
    r = served.get("sweep", run="x")
    assert r.status_code == 400
    assert b"unknown query parameter 'run'" in r.data
