"""Real runs logged by epoch whose learning-rate ramp takes them back to chance, where they stay.

A classifier (`support.torch_training.train_by_epoch`) under SGD + momentum whose rate ramps linearly
from 0.01 by 0.05 an epoch learns (2.3 -> ~0.6 in three epochs), then the ramp drives its loss back to
chance (~2.4), where it stays for the rest of its 40 epochs. The rate rises at every point, and a
run of 40 points never leaves the first 100 that may be a warm-up, which holds off a plateau; but
this loss had its chance and lost it (CS301's `lost_what_it_learnt` and `learnt_clearly`): its stall
back near its start is told, inside the divergence's incident (one story). A gentler ramp that keeps
learning is told nothing of the kind.
"""

from __future__ import annotations

import pytest

from support.helpers import incidents_scanned, incidents_told, monitor_replaying, trained_seeds
from support.torch_training import train_by_epoch
from tb_crash_signals import scan_logdir

torch = pytest.importorskip("torch")  # installed by scripts/test_all.sh; never skipped in CI

pytestmark = pytest.mark.slow

SEEDS = (1, 2)
TAGS = {"epoch_loss": "train_loss", "epoch_learning_rate": "lr"}


@pytest.fixture(scope="module")
def back_to_chance(tmp_path_factory):
    return trained_seeds(tmp_path_factory, "ramped", train_by_epoch, SEEDS, epochs=40, lr=0.01, ramp=0.05)


@pytest.fixture(scope="module")
def gentle(tmp_path_factory):
    return trained_seeds(tmp_path_factory, "gentle", train_by_epoch, SEEDS, epochs=40, lr=0.001, ramp=0.0005)


def test_a_ramp_that_took_the_loss_back_to_chance_tells_its_stall_inside_the_divergence(back_to_chance):
    runs = scan_logdir(str(back_to_chance))["runs"]
    assert len(runs) == len(SEEDS)
    for run in runs:
        stalls = [e for e in run["episodes"] if e["code"] == "CS301"]
        assert stalls and stalls[0]["severity"] == "warning", run["episodes"]
        head = run["incidents"][0]
        assert head["kind"] == "divergence" and head["severity"] == "critical", run["incidents"]
        # The plateau is a consequence: folded into the divergence's incident, not a story of its own.
        assert not any(i["kind"] == "plateau" for i in run["incidents"]), run["incidents"]
        assert run["episodes"].index(stalls[0]) in head["episodes"], head  # (indices into the run's)
        monitor = monitor_replaying(back_to_chance / run["run"], TAGS)
        assert incidents_told(monitor) == incidents_scanned(run)


def test_a_gentle_ramp_that_keeps_learning_has_no_plateau(gentle):
    for run in scan_logdir(str(gentle))["runs"]:
        assert not [e for e in run["episodes"] if e["code"] == "CS301"], run["episodes"]
        assert run["health"] != "critical", run["incidents"]
