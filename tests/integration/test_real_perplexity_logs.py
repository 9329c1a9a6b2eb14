"""A run that logs a perplexity and no loss is read as its log: the story of the loss it exponentiates.

Language-model code often logs `train/ppl` and `val/ppl` alone. Such a run had "no signals" (or, mapped
by hand as the train loss, ratios of exponentials under bars made for losses). It is now mapped with
`log`: the rules read the perplexity's natural log, the cross-entropy, and tell the same story as the
same training logging its loss. A real training (SGD at a learning rate high enough to climb, spike
and stall: tests/support/torch_training.train_classifier) is logged by TensorBoard's writer twice: as
its loss, and as the exponential of the same values.
"""

from __future__ import annotations

import math

import pytest

from support.torch_training import train_classifier
from tb_crash_signals import scan_logdir
from tb_crash_signals.report.text import format_text

torch = pytest.importorskip("torch")  # installed by scripts/test_all.sh; never skipped in CI

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    root = tmp_path_factory.mktemp("perplexity")
    train_classifier(root / "loss", seed=1, batch=4, lr=0.05, steps=800)
    acc = EventAccumulator(str(root / "loss"), size_guidance={"scalars": 0})
    acc.Reload()
    with SummaryWriter(str(root / "perplexity")) as w:
        for e in acc.Scalars("Loss/train"):
            w.add_scalar("train/ppl", math.exp(e.value), e.step)
        for tag in ("Grad/norm", "LR"):
            for e in acc.Scalars(tag):
                w.add_scalar(tag, e.value, e.step)
    return root


def _story(run):
    return ([(e["code"], e["severity"], e["start_step"], e["end_step"], e["message"]) for e in run["episodes"]],
            [(i["kind"], i["severity"], i["first_alarm_step"], i["headline"]) for i in run["incidents"]])


def test_a_perplexity_tells_the_story_of_its_loss(logdir):
    report = scan_logdir(str(logdir))
    runs = {run["run"]: run for run in report["runs"]}
    loss, perplexity = runs["loss"], runs["perplexity"]
    assert loss["signals"]["train_loss"] == {"run": "loss", "tag": "Loss/train"}
    assert perplexity["signals"]["train_loss"] == {"run": "perplexity", "tag": "train/ppl", "log": True}
    episodes, incidents = _story(loss)
    assert episodes, "the training shows nothing: this test would compare two empty stories"
    # exp then log comes back within a rounding of the float32 the writer stores: the same story.
    assert _story(perplexity)[1] == incidents
    assert [e[:4] for e in _story(perplexity)[0]] == [e[:4] for e in episodes]
    assert perplexity["health"] == loss["health"]
    assert "log of their perplexity (train/ppl)" in format_text(report)
