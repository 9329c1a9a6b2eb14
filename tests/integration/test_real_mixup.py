"""Real runs under mixup: a per-step loss of two populations of batches is no divergence.

Mixup mixes each batch's inputs two by two (`support.torch_training.train_mixup`); a batch mixed
near half and half costs 3-4x a clean one, and about a third of them are. The median of 9 points
flips to the mixed batches by chance and stands 2-4x the best level, the lowest median of 31, which
a lucky stretch of mostly clean batches set: read by the level alone, "the run lost what it had
learnt", critical while it lasts (a callback stops training), a handful of times a run. The level
stands among the mixed batches of the stretch that set the best, not above them (CS113's
`above_best`), as a divergence's does.

Logged every 50 steps (Lightning's default), each point is one batch: two mixed batches in a row
make a 3-point median 2-4x the lowest 5-point median, where a fifth of the run's own points since
it learnt already stood (CS118's `within`); a divergence climbs over all of them.
"""

from __future__ import annotations

import pytest

from support.helpers import monitor_replaying
from support.torch_training import train_mixup
from tb_crash_signals import scan_logdir
from tb_crash_signals.analysis.config import from_dict

torch = pytest.importorskip("torch")  # installed by scripts/test_all.sh; never skipped in CI

pytestmark = pytest.mark.slow

TAGS = {"Loss/train": "train_loss", "Grad/norm": "grad_norm", "LR": "lr"}


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("mixup")
    # Seeds 1-6 read by the level alone: 4, 5, 6, 4, 3 and 0 such climbs; with `above_best`: 1, 0, 0, 1, 0, 0.
    for seed in (2, 3):
        train_mixup(logdir / f"seed{seed}", seed, steps=3000)
    return logdir


def test_mixup_is_no_divergence(mixed):
    runs = scan_logdir(str(mixed))["runs"]
    assert len(runs) == 2
    for run in runs:
        assert not [e for e in run["episodes"] if e["code"] == "CS113"], run["episodes"]
        assert not [i for i in run["incidents"] if i["kind"] == "divergence"], run["incidents"]
        monitor = monitor_replaying(mixed / run["run"], TAGS)
        assert not monitor.should_stop, run["run"]
        assert [(i.severity, i.headline) for i in monitor.incidents()] == [
            (i["severity"], i["headline"]) for i in run["incidents"]
        ]


def test_read_by_its_level_alone_mixup_was_a_divergence(mixed):
    config = from_dict({"rules": {"CS113": {"above_best": 0}}})
    for run in scan_logdir(str(mixed), config=config)["runs"]:
        assert [e for e in run["episodes"] if e["code"] == "CS113"], run["run"]
        assert monitor_replaying(mixed / run["run"], TAGS, config=config).should_stop, run["run"]


@pytest.fixture(scope="module")
def sampled(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("mixup-every-50")
    # Seeds 1-6 logged every 50 steps, read without `within`: 1, 2, 1, 2, 1 and 1 coarse climbs,
    # critical on 1, 3, 4, 5 and 6; with it, 1, 1, 0, 2, 0 and 0, critical on 4 alone (two mixed
    # batches over the four points before them: too few to tell its populations).
    for seed in (3, 5):
        train_mixup(logdir / f"seed{seed}", seed, steps=3000, every=50)
    return logdir


def test_mixup_logged_every_50_steps_is_no_divergence(sampled):
    runs = scan_logdir(str(sampled))["runs"]
    assert len(runs) == 2
    for run in runs:
        assert run["points"]["train_loss"] == 60
        assert not [e for e in run["episodes"] if e["code"] == "CS118"], run["episodes"]
        assert not [i for i in run["incidents"] if i["kind"] == "divergence"], run["incidents"]
        monitor = monitor_replaying(sampled / run["run"], TAGS)
        assert not monitor.should_stop, run["run"]
        assert [(i.severity, i.headline) for i in monitor.incidents()] == [
            (i["severity"], i["headline"]) for i in run["incidents"]
        ]


def test_read_without_its_points_since_it_learnt_sampled_mixup_was_a_divergence(sampled):
    config = from_dict({"rules": {"CS118": {"within": 1.0}}})
    for run in scan_logdir(str(sampled), config=config)["runs"]:
        assert [e for e in run["episodes"] if e["code"] == "CS118"], run["run"]
        assert monitor_replaying(sampled / run["run"], TAGS, config=config).should_stop, run["run"]
