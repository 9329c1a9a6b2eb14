"""Real runs logged by epoch (Keras' `epoch_loss` at step = epoch) under an exponential learning rate.

A classifier (`support.torch_training.train_by_epoch`, its rate 1.3x an epoch) learns to ~0.33
in 9 epochs, then its loss rises epoch after epoch as the rate grows 1.3x an epoch, to NaN by epoch
~28. Each point is an epoch's mean, smooth: its 3-epoch median stands an epoch behind its climb.
CS118 judges the epoch that ends three rises in a row, the rate rising over them, as the level
itself (`climb`), as it does on a loss logged every 50 steps.
"""

from __future__ import annotations

import dataclasses

import pytest

from support.helpers import monitor_replaying, trained_seeds
from support.torch_training import train_by_epoch
from tb_crash_signals import scan_logdir
from tb_crash_signals.analysis.config import Config
from tb_crash_signals.analysis.rules import RULES

torch = pytest.importorskip("torch")  # installed by scripts/test_all.sh; never skipped in CI

pytestmark = pytest.mark.slow

SEEDS = (1, 2, 3)
TAGS = {"epoch_loss": "train_loss", "epoch_learning_rate": "lr"}


@pytest.fixture(scope="module")
def climbing(tmp_path_factory):
    return trained_seeds(tmp_path_factory, "by_epoch", train_by_epoch, SEEDS, epochs=40, lr=0.01, growth=1.3)


def _coarse_start(run):
    starts = [e["start_step"] for e in run["episodes"] if e["code"] == "CS118" and e["severity"] == "critical"]
    return min(starts) if starts else None


def test_the_climb_is_told_at_the_epoch_that_ends_it(climbing):
    runs = {run["run"]: run for run in scan_logdir(str(climbing))["runs"]}
    off = Config(params={"CS118": dataclasses.replace(RULES["CS118"].default_params(), climb=0)})
    runs_off = {run["run"]: run for run in scan_logdir(str(climbing), config=off)["runs"]}
    assert len(runs) == len(SEEDS)
    earlier = 0
    for name, run in runs.items():
        assert run["health"] == "critical", run["incidents"]
        # One story: the divergence, first.
        assert run["incidents"][0]["kind"] == "divergence", run["incidents"]
        told, told_off = _coarse_start(run), _coarse_start(runs_off[name])
        if told_off is not None:  # (a run whose loss-growth alarm came first may have no CS118 of its own)
            assert told is not None and told <= told_off, (name, told, told_off)
        earlier += told is not None and (told_off is None or told < told_off)
        monitor = monitor_replaying(climbing / name, TAGS)
        assert _coarse_start(monitor.report()) == told
    assert earlier, "no run told earlier than by its median: the runs do not show what this file is about"
