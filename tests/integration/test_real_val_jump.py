"""A real validation loss that jumps while the train loss falls: told as a jump, not as overfitting.

A classifier with BatchNorm (`support.torch_training.train_with_inputs_changed`) has its training
inputs preprocessed otherwise mid-run (scaled and shifted, as an unnormalised pipeline would): in
train mode BatchNorm normalises each batch and the train loss barely notices, while its running
statistics, which eval mode uses, follow the new inputs and the validation loss jumps several times
over within two evaluations. Overfitting raises the validation loss over evaluations, tens of
percent each; the report says the jump and points at the evaluation. The same run without the
change says nothing of the kind.
"""

from __future__ import annotations

import pytest

from support.helpers import incidents_scanned, incidents_told, monitor_replaying
from support.torch_training import train_with_inputs_changed
from tb_crash_signals import scan_logdir
from tb_crash_signals.analysis.incidents import VAL_JUMP_ADVICE

torch = pytest.importorskip("torch")  # installed by scripts/test_all.sh; never skipped in CI

pytestmark = pytest.mark.slow

CHANGE_AT = 600
ADVICE = ("severity", "headline", "advice")


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("valjump")
    for seed in (0, 1):
        train_with_inputs_changed(root / f"changed{seed}", seed, change_at=CHANGE_AT, steps=1100)
    train_with_inputs_changed(root / "unchanged", 0, change_at=10**9, steps=1100)
    return root


def test_the_jump_is_told_with_advice_about_the_evaluation(logdir):
    runs = {r["run"]: r for r in scan_logdir(str(logdir))["runs"]}
    for name in ("changed0", "changed1"):
        run = runs[name]
        (overfit,) = [i for i in run["incidents"] if i["kind"] == "overfit"]
        assert "after a jump of" in overfit["headline"] and overfit["advice"] == VAL_JUMP_ADVICE, overfit
        assert overfit["first_alarm_step"] > CHANGE_AT and run["health"] == "warning"
    unchanged = runs["unchanged"]
    assert not [i for i in unchanged["incidents"] if "jump" in i["headline"]], unchanged["incidents"]


def test_the_monitor_fed_step_by_step_tells_the_same_jump(logdir):
    (run,) = [r for r in scan_logdir(str(logdir))["runs"] if r["run"] == "changed0"]
    monitor = monitor_replaying(logdir / "changed0", {"Loss/train": "train_loss", "Loss/val": "val_loss"})
    assert incidents_told(monitor, ADVICE) == incidents_scanned(run, ADVICE)
