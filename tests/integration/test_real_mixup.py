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

from support.helpers import incidents_scanned, incidents_told, monitor_replaying, trained_seeds
from support.torch_training import TAGS, train_mixup
from tb_crash_signals import scan_logdir
from tb_crash_signals.analysis.config import from_dict

torch = pytest.importorskip("torch")  # installed by scripts/test_all.sh; never skipped in CI

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    # Seeds 1-6 read by the level alone: 4, 5, 6, 4, 3 and 0 such climbs; with `above_best`: 1, 0, 0, 1, 0, 0.
    return trained_seeds(tmp_path_factory, "mixup", train_mixup, (2, 3), steps=3000)


def told_no_divergence(logdir, code: str) -> list[dict]:
    """The two runs in `logdir`, scanned: no `code` episode, no divergence incident, and a Monitor
    fed their points step by step neither stops nor tells another story."""
    runs = scan_logdir(str(logdir))["runs"]
    assert len(runs) == 2
    for run in runs:
        assert not [e for e in run["episodes"] if e["code"] == code], run["episodes"]
        assert not [i for i in run["incidents"] if i["kind"] == "divergence"], run["incidents"]
        monitor = monitor_replaying(logdir / run["run"], TAGS)
        assert not monitor.should_stop, run["run"]
        assert incidents_told(monitor) == incidents_scanned(run)
    return runs


def told_divergence(logdir, code: str, config) -> None:
    """Read with `config`, every run in `logdir` has a `code` episode and stops a Monitor."""
    for run in scan_logdir(str(logdir), config=config)["runs"]:
        assert [e for e in run["episodes"] if e["code"] == code], run["run"]
        assert monitor_replaying(logdir / run["run"], TAGS, config=config).should_stop, run["run"]


def test_mixup_is_no_divergence(mixed):
    told_no_divergence(mixed, "CS113")


def test_read_by_its_level_alone_mixup_was_a_divergence(mixed):
    told_divergence(mixed, "CS113", from_dict({"rules": {"CS113": {"above_best": 0}}}))


@pytest.fixture(scope="module")
def sampled(tmp_path_factory):
    # Seeds 1-6 logged every 50 steps, read without `within`: 1, 2, 1, 2, 1 and 1 coarse climbs,
    # critical on 1, 3, 4, 5 and 6; with it, 1, 1, 0, 2, 0 and 0, critical on 4 alone (two mixed
    # batches over the four points before them: too few to tell its populations).
    return trained_seeds(tmp_path_factory, "mixup-every-50", train_mixup, (3, 5), steps=3000, every=50)


def test_mixup_logged_every_50_steps_is_no_divergence(sampled):
    runs = told_no_divergence(sampled, "CS118")
    assert [run["points"]["train_loss"] for run in runs] == [60, 60]


def test_read_without_its_points_since_it_learnt_sampled_mixup_was_a_divergence(sampled):
    told_divergence(sampled, "CS118", from_dict({"rules": {"CS118": {"within": 1.0}}}))
