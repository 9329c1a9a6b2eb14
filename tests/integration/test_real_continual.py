"""Real continual learning: each task switch is one event, a jump the run came back from.

A classifier trained on three tasks in turn (`support.torch_training.train_continual`, 500 steps each)
sees its loss jump 30-60x at each switch (a spike, CS112) and then stand far above its best for a few
dozen steps while it learns the new task (a climb, CS113, that the run came back from). Both rules
see the same switch: one incident, told from the switch's step, not a climb and a spike apart.
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
