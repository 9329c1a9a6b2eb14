"""A real run whose validation loss is numbered by epoch while its train loss is numbered by step.

`add_scalar("Loss/val", v, epoch)` beside `add_scalar("Loss/train", l, global_step)`: the validation
points sit at steps 0..E, among the train loss's first points, and the overfitting rules compared
the end of training with its start. The same training logged both ways at once (the validation
loss numbered by epoch in one log, by the epoch's last step in the other) must tell the same story
at the same steps: each validation point is read at the last train step logged before it was
written (analysis.alignment).
"""

from __future__ import annotations

import pytest

from support.torch_training import train_logging_val_by_epoch
from tb_crash_signals import scan_logdir

torch = pytest.importorskip("torch")  # installed by scripts/test_all.sh; never skipped in CI

pytestmark = pytest.mark.slow

EPOCHS = 60


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    root = tmp_path_factory.mktemp("valbyepoch")
    per_epoch = train_logging_val_by_epoch(root / "by_epoch", root / "by_step", seed=3, epochs=EPOCHS)
    runs = {run["run"]: run for run in scan_logdir(str(root))["runs"]}
    return runs["by_epoch"], runs["by_step"], per_epoch


def test_the_validation_loss_is_read_on_the_train_loss_s_steps(reports):
    by_epoch, by_step, _ = reports
    assert by_epoch["val_by_wall_time"] is True
    assert by_step["val_by_wall_time"] is False
    assert by_epoch["points"] == by_step["points"]


def test_both_logs_tell_the_same_overfit_at_the_same_step(reports):
    by_epoch, by_step, per_epoch = reports
    told = [(i["kind"], i["severity"]) for i in by_step["incidents"]]
    assert ("overfit", "warning") in told, told  # the run overfits: what the comparison is about
    assert [(i["kind"], i["severity"]) for i in by_epoch["incidents"]] == told
    for a, b in zip(by_epoch["incidents"], by_step["incidents"]):
        assert a["first_alarm_step"] == b["first_alarm_step"], (a["headline"], b["headline"])
    onset = next(i for i in by_epoch["incidents"] if i["kind"] == "overfit")["first_alarm_step"]
    assert onset >= 3 * per_epoch  # in steps, not epochs
