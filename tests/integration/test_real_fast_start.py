"""Real runs whose loss learnt most of its fall in its first points: a stall there is convergence.

A contrastive loss (`support.torch_training.train_contrastive`) halves within ~30 steps, then
creeps down. The median of its first 10 points, CS301's initial level, is already part-way down:
read against it, the loss "has not improved by 1 % for 23-146 points, near where it started"
(a warning whose advice is a learning rate too low). Where it started is its first points' level
(CS301's `start_points`): against that, the run learnt and levelled off, CS303's note.
"""

from __future__ import annotations

import pytest

from support.helpers import incidents_scanned, incidents_told, monitor_replaying, trained_seeds
from support.torch_training import TAGS, train_contrastive
from tb_crash_signals import scan_logdir
from tb_crash_signals.analysis.config import from_dict

torch = pytest.importorskip("torch")  # installed by scripts/test_all.sh; never skipped in CI

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def contrastive(tmp_path_factory):
    # Seeds 1-4 read against the median of their first 10 points: a plateau warning on 1 and 2.
    return trained_seeds(tmp_path_factory, "contrastive", train_contrastive, (1, 2), steps=800)


def test_a_loss_that_halved_in_its_first_steps_then_levelled_off_converged(contrastive):
    runs = scan_logdir(str(contrastive))["runs"]
    assert len(runs) == 2
    for run in runs:
        assert not [e for e in run["episodes"] if e["code"] == "CS301"], run["episodes"]
        assert [e for e in run["episodes"] if e["code"] == "CS303"], run["episodes"]
        assert run["health"] == "ok", run["incidents"]
        monitor = monitor_replaying(contrastive / run["run"], TAGS)
        assert incidents_told(monitor) == incidents_scanned(run)


def test_read_against_its_first_ten_points_the_fast_start_was_a_plateau(contrastive):
    config = from_dict({"rules": {"CS301": {"start_points": 10}}})
    for run in scan_logdir(str(contrastive), config=config)["runs"]:
        stalls = [e for e in run["episodes"] if e["code"] == "CS301"]
        assert stalls and "near where it started" in stalls[0]["message"], run["run"]
        assert run["health"] == "warning", run["run"]
