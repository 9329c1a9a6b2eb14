"""Real runs logged by epoch whose loss climbs from the very first epoch.

A classifier (`support.torch_training.train_by_epoch`) under Adam at 3e-3 with a weight decay of the
wrong sign (-1: the weights grow each step) never learns: its epoch loss goes 2.4, 3.2, 5.5, 9.5,
15, ... 70 by epoch 10. What it lost of what it learnt, the other divergence rules' question, has no
answer on a run that learnt nothing, and their medians and noise estimates want a dozen epochs; the
climb from the first point (CS119) tells it at its fifth. The same classifier without the decay
learns, and is told nothing critical.
"""

from __future__ import annotations

import pytest

from support.helpers import incidents_scanned, incidents_told, monitor_replaying, trained_seeds
from support.torch_training import train_by_epoch
from tb_crash_signals import scan_logdir
from tb_crash_signals.analysis.config import Config

torch = pytest.importorskip("torch")  # installed by scripts/test_all.sh; never skipped in CI

pytestmark = pytest.mark.slow

SEEDS = (1, 2)
TAGS = {"epoch_loss": "train_loss", "epoch_learning_rate": "lr"}


@pytest.fixture(scope="module")
def growing(tmp_path_factory):
    return trained_seeds(tmp_path_factory, "growing", train_by_epoch, SEEDS, epochs=20, lr=3e-3,
                         weight_decay=-1.0, adam=True)


@pytest.fixture(scope="module")
def learning(tmp_path_factory):
    return trained_seeds(tmp_path_factory, "learning", train_by_epoch, SEEDS, epochs=20, lr=3e-3, adam=True)


def _first_critical(run, codes=None):
    return min((e["start_step"] for e in run["episodes"] if e["severity"] == "critical"
                and (codes is None or e["code"] in codes)), default=None)


def test_a_loss_climbing_from_its_first_epoch_is_critical_within_a_few_epochs(growing):
    runs = scan_logdir(str(growing))["runs"]
    without = {run["run"]: run for run in scan_logdir(str(growing), config=Config(ignore=("CS119",)))["runs"]}
    assert len(runs) == len(SEEDS)
    for run in runs:
        first = _first_critical(run)
        assert first is not None and first <= 6 and first == _first_critical(run, ("CS119",)), run["episodes"]
        head = run["incidents"][0]
        assert head["kind"] == "divergence" and "climbed from its first point" in head["headline"], head
        assert "restart with the learning rate 10x lower" in head["advice"], head  # no checkpoint to go back to
        # Without it, the first critical comes epochs later.
        later = _first_critical(without[run["run"]])
        assert later is None or later > first + 3, (first, later)
        monitor = monitor_replaying(growing / run["run"], TAGS)
        assert incidents_told(monitor) == incidents_scanned(run)


def test_the_same_classifier_learning_is_never_critical(learning):
    for run in scan_logdir(str(learning))["runs"]:
        assert _first_critical(run) is None, run["episodes"]
