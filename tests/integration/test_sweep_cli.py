"""`scan --by-hparams` on sweeps written by the real writers: Keras-style hparams data, PyTorch's
add_hparams, Lightning's hparams.yaml, key=value run names."""

from __future__ import annotations

import json
import os

import jsonschema
import pytest

from support.eventwriters import write_scalars
from support.paths import SCHEMA
from support.sweeps import ADAPTIVE, write_keras_grid, write_lightning_sweep, write_torch_sweep
from tb_crash_signals import cli

SCHEMA_DOC = json.load(open(SCHEMA, encoding="utf-8"))


def scan(capsys, *args):
    code = cli.main(["scan", *map(str, args), "--by-hparams"])
    out = capsys.readouterr()
    assert out.err == ""
    return code, out.out


@pytest.fixture(scope="module")
def keras_grid(tmp_path_factory):
    root = tmp_path_factory.mktemp("keras") / "learning_rate-optimizer"
    write_keras_grid(str(root))
    return root.parent


def test_keras_grid_names_rate_and_optimizer(keras_grid, capsys):
    code, out = scan(capsys, keras_grid)
    assert code == 1  # critical runs found, as without --by-hparams
    assert (
        "1. learning_rate=1.0 with optimizer in {Adam, Adamax, Nadam, RMSprop}: 4/4 exploded at step 1; "
        "every other run: 0/28" in out
    )
    assert "hyperparameters from: tensorboard (32 runs)" in out
    assert "constant: batch_size=128.0, patience=10.0" in out


def test_keras_grid_json(keras_grid, capsys):
    _, out = scan(capsys, keras_grid, "--format", "json")
    report = json.loads(out)
    jsonschema.validate(report, SCHEMA_DOC)
    (sweep,) = report["sweeps"]
    assert sweep["sweep"] == "learning_rate-optimizer"
    first = sweep["statements"][0]
    assert first["outcome"] == "divergence" and first["hparams"] == ["learning_rate", "optimizer"]
    assert sorted(first["positive_runs"]) == sorted(
        f"learning_rate-optimizer/learning_rate=1.0_optimizer={o}" for o in ADAPTIVE
    )
    run = next(r for r in report["runs"] if r["run"].endswith("learning_rate=0.1_optimizer=Adam"))
    want = {"batch_size": 128.0, "learning_rate": 0.1, "optimizer": "Adam", "patience": 10.0}
    assert run["hparams"]["values"] == want
    assert set(run["hparams"]["sources"].values()) == {"tensorboard"}


def test_torch_add_hparams_children_are_their_parents_hyperparameters(tmp_path, capsys):
    write_torch_sweep(str(tmp_path), rates=(1e-4, 1e-3, 1e-2, 1e-1, 1.0, 3.0), seeds=(0, 1))
    _, out = scan(capsys, tmp_path, "--format", "json")
    report = json.loads(out)
    (sweep,) = report["sweeps"]
    assert len(sweep["runs"]) == 12  # the add_hparams children are not runs of the sweep
    carriers = [r for r in report["runs"] if "carrier_of" in r.get("hparams", {})]
    assert len(carriers) == 12 and all(r["hparams"]["carrier_of"] == r["run"].rsplit("/", 1)[0] for r in carriers)
    assert sweep["statements"][0]["condition"] == "lr ≥ 1.0"
    assert sweep["statements"][0]["text"].startswith("lr ≥ 1.0: 4/4 ")


def test_lightning_hparams_yaml(tmp_path, capsys):
    write_lightning_sweep(str(tmp_path), rates=(1e-4, 1e-3, 1e-2, 0.5), repeats=3)
    _, out = scan(capsys, tmp_path)
    assert "sweep lightning_logs: 12 runs" in out
    assert "hyperparameters from: hparams.yaml (12 runs)" in out
    assert "1. lr=0.5: 3/3 exploded at step" in out
    assert "hparams.yaml: loss_fn (!!python/object:torch.nn.modules.loss.BCEWithLogitsLoss)" in out


def test_run_names_only_and_too_small(tmp_path, capsys):
    for lr in (0.1, 1.0, 0.01):
        write_scalars(tmp_path / f"lr={lr},bs=32", {"train/loss": [(s, 1.0 / (s + 1)) for s in range(50)]})
    _, out = scan(capsys, tmp_path, "--format", "json")
    report = json.loads(out)
    (sweep,) = report["sweeps"]
    assert sweep["note"] == "3 analysed runs: fewer than 6, too few for statements"
    run = next(r for r in report["runs"] if r["run"] == "lr=1.0,bs=32")
    assert run["hparams"]["values"] == {"lr": 1.0, "bs": 32}
    assert run["hparams"]["sources"] == {"lr": "run name", "bs": "run name"}


def test_hostile_names_are_escaped_in_text(tmp_path, capsys):
    names = ["x=\x1b[31mred,lr=1", "x=\u202egnp.exe,lr=2", "x=<img src=q>,lr=3"]
    for n in names:
        write_scalars(os.path.join(tmp_path, n), {"train/loss": [(s, 1.0) for s in range(5)]})
    _, out = scan(capsys, tmp_path)
    assert "\x1b" not in out and "\u202e" not in out
    assert "\\x1b[31mred" in out
