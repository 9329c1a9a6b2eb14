"""Real continual learning: each task switch is one event, a jump the run came back from.

A classifier trained on three tasks in turn (`support.torch_training.train_continual`, 500 steps each)
sees its loss jump 30-60x at each switch (a spike, CS112) and then stand far above its best for a few
dozen steps while it learns the new task (a climb, CS113, that the run came back from). Both rules
see the same switch: one incident, told from the switch's step, not a climb and a spike apart.

Logged every 50 steps (Lightning's default), the switches are the sparse loss's divergence (CS118),
which the run came back from too: the report tells it so once its loss is back near its best, under
its first point (the median of its first 10 points, 500 steps in, is a level it learnt), with CS118
quiet for its last 4 points (not the 20 a loss logged every step is given: 1 000 steps here).
"""

from __future__ import annotations

import pytest

from support.helpers import incidents_scanned, incidents_told, monitor_replaying, trained_seeds
from support.torch_training import TAGS, train_continual
from tb_crash_signals import scan_logdir

torch = pytest.importorskip("torch")  # installed by scripts/test_all.sh; never skipped in CI

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def continual(tmp_path_factory):
    return trained_seeds(tmp_path_factory, "continual", train_continual, (1, 2), tasks=3, steps_per_task=500)


def test_each_task_switch_is_one_jump_the_run_came_back_from(continual):
    runs = scan_logdir(str(continual))["runs"]
    assert len(runs) == 2
    for run in runs:
        codes = {e["code"] for e in run["episodes"]}
        assert {"CS112", "CS113"} <= codes, run["episodes"]  # both rules saw the switches
        stories = [i for i in run["incidents"] if i["severity"] != "info"]
        assert len(stories) == 1, run["incidents"]
        (story,) = stories
        assert story["kind"] == "divergence" and story["severity"] == "warning" and story["crash_step"] is None
        assert story["start_step"] == story["first_alarm_step"] == 500
        assert story["headline"] == "train loss climbed away from its best 2 times from step 500, recovering each time"
        assert run["health"] == "warning"
        monitor = monitor_replaying(continual / run["run"], TAGS)
        assert incidents_told(monitor) == incidents_scanned(run)


@pytest.fixture(scope="module")
def continual_sparse(tmp_path_factory):
    return trained_seeds(tmp_path_factory, "continual-sparse", train_continual, (1, 2), tasks=3, steps_per_task=600,
                         every=50)


def test_logged_every_50_steps_the_switches_are_jumps_the_run_came_back_from(continual_sparse):
    runs = scan_logdir(str(continual_sparse))["runs"]
    assert len(runs) == 2
    for run in runs:
        assert run["points"]["train_loss"] == 36
        climbs = [e for e in run["episodes"] if e["code"] == "CS118"]
        assert climbs and all(e["severity"] == "warning" for e in climbs), run["episodes"]
        (story,) = [i for i in run["incidents"] if i["severity"] != "info"]
        assert story["kind"] == "divergence" and story["severity"] == "warning" and story["crash_step"] is None
        assert story["first_alarm_step"] in (649, 699)  # the first switch (step 600), a point or two on
        assert "then recovered" in story["headline"] or "recovering each time" in story["headline"]
        assert run["health"] == "warning"
        monitor = monitor_replaying(continual_sparse / run["run"], TAGS)
        assert incidents_told(monitor) == incidents_scanned(run)
