"""Real runs logged as Lightning logs by default, every 50 steps, that learnt and levelled off.

A linear classifier on noisy labels (`support.torch_training.train_linear_classifier`) falls to its
floor within a few hundred steps, then hovers there for the rest of its 1 200 steps: 24 points,
each one batch's loss. Per-step patience (30 points, 21-point medians) never tells it, and the median
of its first 10 points is already the floor. Read coarsely (CS303's `coarse_every`: 5-point medians,
a patience of 8 points, learnt against its first points), it learnt, then levelled off: a note.
"""

from __future__ import annotations

import dataclasses

import pytest

from support.helpers import incidents_scanned, incidents_told, monitor_replaying, trained_seeds
from support.torch_training import TAGS, train_linear_classifier
from tb_crash_signals import scan_logdir
from tb_crash_signals.analysis.config import Config
from tb_crash_signals.analysis.rules import RULES

torch = pytest.importorskip("torch")  # installed by scripts/test_all.sh; never skipped in CI

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sampled(tmp_path_factory):
    return trained_seeds(tmp_path_factory, "sampled", train_linear_classifier, (1, 2), steps=1200, every=50)


def test_a_loss_logged_every_50_steps_that_levelled_off_gets_the_note(sampled):
    runs = scan_logdir(str(sampled))["runs"]
    assert len(runs) == 2
    for run in runs:
        notes = [e for e in run["episodes"] if e["code"] == "CS303"]
        assert notes and "levelled off" in notes[0]["message"], run["episodes"]
        assert notes[0]["start_step"] >= 300, notes  # once it hovered, not during its fall
        assert not [e for e in run["episodes"] if e["severity"] != "info"], run["episodes"]
        assert run["health"] == "ok", run["incidents"]
        monitor = monitor_replaying(sampled / run["run"], TAGS)
        assert incidents_told(monitor) == incidents_scanned(run)


def test_read_as_a_per_step_loss_its_few_points_tell_nothing(sampled):
    per_step = dataclasses.replace(RULES["CS303"].default_params(), coarse_every=0.0)
    for run in scan_logdir(str(sampled), config=Config(params={"CS303": per_step}))["runs"]:
        assert not [e for e in run["episodes"] if e["code"] == "CS303"], run["run"]
