"""Real runs that learnt, then memorised their few samples: the validation loss learnt, then rose.

A classifier trained on 550 noisy-label samples (`support.torch_training.train_memorising_classifier`)
takes its train loss three decades down while its validation loss falls to ~0.4x the train loss's
start, then climbs back past half of it. CS403's "validation loss has learnt nothing" read the
validation loss of the moment against that half: the story was the overfitting CS402 tells, with a
sentence that was false. CS403 now holds only while the validation loss never learnt.
"""

from __future__ import annotations

import pytest

from support.helpers import (
    incidents_scanned,
    incidents_told,
    logged_scalars,
    monitor_replaying,
    trained_seeds,
)
from support.torch_training import TAGS_WITH_VAL, train_memorising_classifier
from tb_crash_signals import scan_logdir

torch = pytest.importorskip("torch")  # installed by scripts/test_all.sh; never skipped in CI

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def memorised(tmp_path_factory):
    return trained_seeds(tmp_path_factory, "memorised", train_memorising_classifier, (2, 3), samples=550,
                         steps=2500)


def test_a_validation_loss_that_learnt_then_rose_is_overfitting_not_unlearnt(memorised):
    for run in scan_logdir(str(memorised))["runs"]:
        codes = {e["code"] for e in run["episodes"]}
        assert "CS402" in codes and "CS403" not in codes, run["episodes"]
        overfit = [i for i in run["incidents"] if i["kind"] == "overfit"]
        assert len(overfit) == 1 and "learnt nothing" not in overfit[0]["headline"], run["incidents"]
        assert "rose to" in overfit[0]["headline"], overfit
        # The run is the case: its train loss fell three decades, and its validation loss learnt
        # under half the train loss's start, then rose past it (where CS403 fired before).
        logged = sorted(logged_scalars(memorised / run["run"], TAGS_WITH_VAL).items())
        train = [v["Loss/train"] for _, v in logged if "Loss/train" in v]
        val = [v["Loss/val"] for _, v in logged if "Loss/val" in v]
        assert min(train) <= 1e-3 * train[0]
        assert min(val) < 0.5 * train[0] < val[-1]
        monitor = monitor_replaying(memorised / run["run"], TAGS_WITH_VAL)
        assert incidents_told(monitor) == incidents_scanned(run)
