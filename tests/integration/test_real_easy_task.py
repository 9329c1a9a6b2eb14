"""A real classifier on an easy task: its loss learnt down near zero is healthy, and stays told so.

A ReLU MLP learns 4 classes that all but 2 % of the samples keep well apart (the rest lie near the
boundaries, as most real data has a few hard examples), with Adam, logged every step with
`torch.utils.tensorboard.SummaryWriter` and evaluated every 100 steps on a fixed held-out set. Its
loss falls from ~1.4 to ~1e-4, its grad norm to a hundredth of its early size, where a batch holding
a hard example jumps the gradient 10x without moving the loss; its validation loss converges near
zero and wanders there by a few ten-thousandths. Nothing of it is a spike, a stagnation or
overfitting worth a warning.
"""

from __future__ import annotations

import pytest

from support.helpers import monitor_replaying
from support.torch_training import TAGS_WITH_VAL, train_easy_classifier
from tb_crash_signals import scan_logdir

torch = pytest.importorskip("torch")  # installed by scripts/test_all.sh; never skipped in CI


@pytest.mark.slow
def test_a_classifier_that_learnt_an_easy_task_near_zero_raises_no_warning(tmp_path):
    # Each of these seeds drew grad-norm spike, validation stagnation or overfitting warnings.
    for seed in (0, 3, 5):
        train_easy_classifier(tmp_path / f"seed{seed}", seed, steps=3000)
    runs = scan_logdir(str(tmp_path))["runs"]
    assert len(runs) == 3
    for run in runs:
        assert run["health"] == "ok", (run["run"], [i["headline"] for i in run["incidents"]])
        assert run["signals"]["val_loss"] is not None and run["signals"]["grad_norm"] is not None


@pytest.mark.slow
def test_the_monitor_fed_step_by_step_stays_as_quiet(tmp_path):
    train_easy_classifier(tmp_path / "run", 5, steps=3000)
    (run,) = scan_logdir(str(tmp_path))["runs"]
    monitor = monitor_replaying(tmp_path / "run", TAGS_WITH_VAL)
    assert [(e.code, e.start_step) for e in monitor.episodes()] == [
        (e["code"], e["start_step"]) for e in run["episodes"]]
    assert monitor.health == run["health"] == "ok"
