"""A real run laid out as a TF Estimator writes its logs: the training events in the model
directory itself, the evaluation's in `eval/` under it. TensorBoard lists two runs, `.../model` and
`.../model/eval`; the analysis reads them as one, the evaluation's `loss` as the validation loss,
and tells the overfit the two together show."""

from __future__ import annotations

import pytest

from support.torch_training import train_in_estimator_layout, train_logging_val_by_epoch
from tb_crash_signals import scan_logdir

torch = pytest.importorskip("torch")  # installed by scripts/test_all.sh; never skipped in CI

pytestmark = pytest.mark.slow

EPOCHS = 60


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("estimator")
    per_epoch = train_in_estimator_layout(root / "model", seed=3, epochs=EPOCHS)
    # The same training in the usual layout (one directory, `Loss/train` and `Loss/val`).
    train_logging_val_by_epoch(root / "unused", root / "flat", seed=3, epochs=EPOCHS)
    return {run["run"]: run for run in scan_logdir(str(root))["runs"]}, per_epoch


def test_the_model_directory_and_its_eval_directory_are_one_run(runs):
    found, _ = runs
    assert "model/eval" not in found
    model = found["model"]
    assert model["signals"]["train_loss"] == {"run": "model", "tag": "loss"}
    assert model["signals"]["val_loss"] == {"run": "model/eval", "tag": "loss"}
    assert model["signals"]["lr"] == {"run": "model", "tag": "learning_rate"}
    assert model["points"]["val_loss"] == EPOCHS


def test_it_tells_the_overfit_as_the_usual_layout_does(runs):
    found, per_epoch = runs
    model, flat = found["model"], found["flat"]
    overfit = [i for i in model["incidents"] if i["kind"] == "overfit"]
    assert overfit and overfit[0]["severity"] == "warning", [i["headline"] for i in model["incidents"]]
    (same,) = [i for i in flat["incidents"] if i["kind"] == "overfit"]
    assert overfit[0]["first_alarm_step"] == same["first_alarm_step"]
    assert overfit[0]["first_alarm_step"] >= 3 * per_epoch
