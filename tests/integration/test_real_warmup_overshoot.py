"""A real character-level language model whose warm-up overshoots without crashing: it learns in its
first ~100 steps, then, as the learning rate climbs to a peak too high, gives back a fifth of what
it learnt and stays there (train_char_lm_overshoot at a peak of 0.06).

The loss ends near where it started only by the median of its first 10 points, which a loss that
learns that fast has already halved: its first point tells what it learnt from. The story is ground
lost, not a model that never learnt (the advice for that is a learning rate 10x lower *and* 10x
higher); the same at a sane rate tells nothing, and a Monitor fed step by step tells the same."""

from __future__ import annotations

import pytest

from support.helpers import monitor_replaying
from support.torch_training import TAGS, train_char_lm_overshoot
from tb_crash_signals import scan_logdir
from tb_crash_signals.analysis.incidents import LOST_ADVICE

torch = pytest.importorskip("torch")  # installed by scripts/test_all.sh; never skipped in CI

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("overshoot")
    train_char_lm_overshoot(root / "peak-0.06", seed=0, peak_lr=0.06, steps=700)
    train_char_lm_overshoot(root / "peak-0.001", seed=0, peak_lr=1e-3, steps=700)
    return root, {run["run"]: run for run in scan_logdir(str(root))["runs"]}


def test_a_warm_up_that_undid_part_of_the_training_is_told_as_ground_lost(trained):
    _, runs = trained
    run = runs["peak-0.06"]
    told = [i for i in run["incidents"] if i["severity"] != "info"]
    # One plateau; a grad norm's spike on the way up (some hosts' float kernels draw one) is a story of its own.
    (incident,) = [i for i in told if i["kind"] != "spikes"]
    assert all(i["severity"] == "warning" for i in told), told
    assert incident["kind"] == "plateau"
    assert "back near where it started after it had learnt" in incident["headline"], incident["headline"]
    assert incident["advice"] == LOST_ADVICE
    assert runs["peak-0.001"]["health"] == "ok", runs["peak-0.001"]["incidents"]


def test_the_monitor_tells_the_same(trained):
    root, runs = trained
    monitor = monitor_replaying(root / "peak-0.06", TAGS)
    told = {(e["code"], e["start_step"], e["message"]) for e in monitor.report()["episodes"]}
    assert told == {(e["code"], e["start_step"], e["message"]) for e in runs["peak-0.06"]["episodes"]}
