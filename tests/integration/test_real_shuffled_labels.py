"""A real classifier trained on labels shuffled apart from their inputs: its validation loss never learns.

A ReLU MLP learns 6 classes of 32 standard-normal inputs with Adam, logged every step with
`torch.utils.tensorboard.SummaryWriter` and evaluated every 100 steps on held-out samples with their
true labels. With the training labels shuffled among the samples (a data-pipeline bug: inputs and
labels sorted apart, a wrong label file), the train loss slowly learns the training set by heart
(1.8 -> 1.0 over 2 000 steps) while the validation loss stays at chance (ln 6) and creeps up: the
story is that nothing learnt generalises, and what to check is the data, not the regularisation.
The same run with its labels in place learns, then overfits a little: no such story.
"""

from __future__ import annotations

import pytest

from support.helpers import incidents_scanned, incidents_told, monitor_replaying
from support.torch_training import TAGS_WITH_VAL, train_classifier_on_labels
from tb_crash_signals import scan_logdir

torch = pytest.importorskip("torch")  # installed by scripts/test_all.sh; never skipped in CI

KIND = ("kind", "headline")


@pytest.mark.slow
def test_shuffled_labels_are_told_as_a_validation_loss_that_learnt_nothing(tmp_path):
    for seed in (0, 1):
        train_classifier_on_labels(tmp_path / f"shuffled{seed}", seed, steps=1000, shuffled=True)
    train_classifier_on_labels(tmp_path / "labelled", 0, steps=1000, shuffled=False)
    runs = {r["run"]: r for r in scan_logdir(str(tmp_path))["runs"]}
    for name in ("shuffled0", "shuffled1"):
        run = runs[name]
        assert run["health"] == "warning", run["incidents"]
        head = run["incidents"][0]
        assert head["kind"] == "overfit" and head["headline"].startswith("validation loss has learnt nothing"), head
        assert "labels match their inputs" in head["advice"]
        assert head["first_alarm_step"] <= 599  # by its 6th evaluation
    assert not [e for e in runs["labelled"]["episodes"] if e["code"] == "CS404"], runs["labelled"]["incidents"]


@pytest.mark.slow
def test_the_monitor_fed_step_by_step_tells_the_same_story(tmp_path):
    train_classifier_on_labels(tmp_path / "run", 1, steps=1000, shuffled=True)
    (run,) = scan_logdir(str(tmp_path))["runs"]
    monitor = monitor_replaying(tmp_path / "run", TAGS_WITH_VAL)
    assert incidents_told(monitor, KIND) == incidents_scanned(run, KIND)
    assert monitor.incidents()[0].headline.startswith("validation loss has learnt nothing")
