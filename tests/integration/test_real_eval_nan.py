"""A real evaluation that gives NaN while training goes on: a warning about the evaluation, not a crash.

A classifier (`support.torch_training.train_with_an_empty_evaluation`) logs its validation loss as
the mean of its batches' losses; one evaluation gets no batch (an exhausted iterator reused), and
the mean of nothing is NaN. The train loss, computed with the same weights, stays finite and the
run trains on: the report says the evaluation went wrong, with advice about it, and raises no
critical (a callback would not stop the run). A run whose train loss turns NaN is critical as before.
"""

from __future__ import annotations

import pytest

from support.helpers import incidents_scanned, incidents_told, monitor_replaying
from support.torch_training import train_with_an_empty_evaluation
from tb_crash_signals import scan_logdir
from tb_crash_signals.analysis.rules import RULES

torch = pytest.importorskip("torch")  # installed by scripts/test_all.sh; never skipped in CI

pytestmark = pytest.mark.slow

EMPTY_AT = 400


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("evalnan")
    train_with_an_empty_evaluation(root / "run", 0, empty_at=EMPTY_AT, steps=800)
    return root


def test_the_nan_evaluation_is_a_warning_about_the_evaluation(logdir):
    (run,) = scan_logdir(str(logdir))["runs"]
    assert run["health"] == "warning", [i["headline"] for i in run["incidents"]]
    (nan,) = [i for i in run["incidents"] if i["kind"] == "nonfinite"]
    assert nan["severity"] == "warning" and nan["start_step"] == EMPTY_AT
    assert "validation loss is NaN" in nan["headline"] and nan["advice"] == RULES["CS005"].advice
    assert not [e for e in run["episodes"] if e["code"] == "CS001"]


def test_the_monitor_fed_step_by_step_does_not_stop_the_run(logdir):
    (run,) = scan_logdir(str(logdir))["runs"]
    monitor = monitor_replaying(logdir / "run", {"Loss/train": "train_loss", "Loss/val": "val_loss"})
    assert not monitor.should_stop  # once set, it stays
    assert incidents_told(monitor) == incidents_scanned(run)
