"""Real runs logged every 50 steps whose learning rate is far too low: 16 points at chance.

A classifier whose outputs start near uniform (`support.torch_training.train_classifier_from_chance`)
under Adam at 1e-7 stays at ln 10 for its 800 steps, each batch's loss ~0.5 % from the next. Its
stall begins among the 10 points that set its initial level, 350 steps after the first: too soon
for a stall against a per-step loss's noisy first medians, but this loss is smooth enough that a
1 % improvement would show (CS301's `sparse_jitter`). The same classifier at 1e-3 learns, and is
told nothing.
"""

from __future__ import annotations

import dataclasses

import pytest

from support.helpers import incidents_scanned, incidents_told, monitor_replaying, trained_seeds
from support.torch_training import TAGS, train_classifier_from_chance
from tb_crash_signals import scan_logdir
from tb_crash_signals.analysis.config import Config
from tb_crash_signals.analysis.rules import RULES

torch = pytest.importorskip("torch")  # installed by scripts/test_all.sh; never skipped in CI

pytestmark = pytest.mark.slow

SEEDS = (1, 3)


@pytest.fixture(scope="module")
def stuck(tmp_path_factory):
    return trained_seeds(tmp_path_factory, "stuck", train_classifier_from_chance, SEEDS, lr=1e-7, steps=800,
                         every=50)


@pytest.fixture(scope="module")
def learning(tmp_path_factory):
    return trained_seeds(tmp_path_factory, "learning", train_classifier_from_chance, SEEDS, lr=1e-3, steps=800,
                         every=50)


def test_a_sparse_log_held_at_chance_is_told_as_a_plateau_near_its_start(stuck):
    runs = scan_logdir(str(stuck))["runs"]
    assert len(runs) == len(SEEDS)
    for run in runs:
        assert run["points"]["train_loss"] == 16
        told = [(i["severity"], i["kind"], i["headline"]) for i in run["incidents"]]
        assert told and told[0][:2] == ("warning", "plateau") and "near where it started" in told[0][2], told
        monitor = monitor_replaying(stuck / run["run"], TAGS)
        assert incidents_told(monitor) == incidents_scanned(run)


def test_held_to_early_jitter_a_stall_goes_untold(stuck):
    # What sparse_jitter adds: the same stalls judged by the per-step bar alone.
    off = dataclasses.replace(RULES["CS301"].default_params(), sparse_jitter=0.0)
    quiet = [run["run"] for run in scan_logdir(str(stuck), config=Config(params={"CS301": off}))["runs"]
             if not [e for e in run["episodes"] if e["code"] == "CS301"]]
    assert quiet, "every run is smooth under early_jitter: the runs do not show what this file is about"


def test_the_same_classifier_learning_is_told_nothing(learning):
    for run in scan_logdir(str(learning))["runs"]:
        assert run["health"] == "ok", run["incidents"]
        assert not [e for e in run["episodes"] if e["severity"] != "info"], run["episodes"]
