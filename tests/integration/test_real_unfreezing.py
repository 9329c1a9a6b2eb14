"""A real fine-tune that unfreezes its body: the grad norm's jump is a new level, not a growth.

Transfer learning's gradual unfreezing (`support.torch_training.train_unfreezing`): a classifier
trains its head alone, then every layer. The grad norm over the parameters that train jumps ~10x
at the unfreezing and stays there while the loss learns faster. A line through that one step
"doubles every few steps" and projected a crossing of the explosion threshold: a critical on a
healthy run. One level shift is no exponential growth (CS201's `one_step`), and a grad-norm
spike that never came back while the loss learns on is told as a note. Layer by layer (ULMFiT) the
grad norm steps up at each unfreezing; the dozen points after a step tilt up or down by chance, and
only a tilt beyond their line's own standard error is a growth going on.
"""

from __future__ import annotations

import pytest

from support.helpers import incidents_scanned, incidents_told, monitor_replaying, trained_seeds
from support.torch_training import train_unfreezing, train_unfreezing_layerwise
from tb_crash_signals import scan_logdir
from tb_crash_signals.analysis.config import from_dict

torch = pytest.importorskip("torch")  # installed by scripts/test_all.sh; never skipped in CI

pytestmark = pytest.mark.slow

UNFREEZE_AT = 600


@pytest.fixture(scope="module")
def unfrozen(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("unfreeze")
    for seed in (1, 2):
        train_unfreezing(logdir / f"seed{seed}", seed, unfreeze_at=UNFREEZE_AT, steps=1200)
    return logdir


def test_unfreezing_is_a_level_shift_told_as_a_note(unfrozen):
    runs = scan_logdir(str(unfrozen))["runs"]
    assert len(runs) == 2
    for run in runs:
        assert run["health"] == "ok", (run["run"], [i["headline"] for i in run["incidents"]])
        assert not [e for e in run["episodes"] if e["code"] == "CS201"], run["episodes"]
        (shift,) = [i for i in run["incidents"] if "level shift" in i["headline"]]
        assert shift["severity"] == "info" and shift["start_step"] == UNFREEZE_AT, shift
        assert shift["crash_step"] is None and "nothing to do" in shift["advice"]


def test_the_same_run_read_through_the_step_was_a_critical_growth(unfrozen):
    # What `one_step` silences: the projection through the jump, critical while it lasts (a callback
    # would stop the run there); after the fact, a growth the run came back from.
    config = from_dict({"rules": {"CS201": {"one_step": False}}})
    runs = scan_logdir(str(unfrozen), config=config)["runs"]
    for run in runs:
        growth = [e for e in run["episodes"] if e["code"] == "CS201"]
        assert growth and (growth[0]["severity"] == "critical"
                           or growth[0]["message"].endswith("the run came back from it")), run["run"]
        assert UNFREEZE_AT - 40 <= growth[0]["start_step"] <= UNFREEZE_AT + 40, growth[0]
        monitor = monitor_replaying(unfrozen / run["run"], {"Loss/train": "train_loss", "Grad/norm": "grad_norm",
                                                            "LR": "lr"}, config=config)
        assert monitor.should_stop, run["run"]


def test_the_monitor_fed_step_by_step_tells_the_same_story(unfrozen):
    (run, _) = sorted(scan_logdir(str(unfrozen))["runs"], key=lambda r: r["run"])
    monitor = monitor_replaying(unfrozen / run["run"], {"Loss/train": "train_loss", "Grad/norm": "grad_norm",
                                                        "LR": "lr"})
    assert incidents_told(monitor) == incidents_scanned(run)
    assert monitor.health == "ok"


@pytest.fixture(scope="module")
def layerwise(tmp_path_factory):
    # Seeds whose grad norm, after the second unfreezing, tilted up by chance over its next points.
    return trained_seeds(tmp_path_factory, "layerwise", train_unfreezing_layerwise, (1, 5), every=600, steps=2400)


def test_layerwise_unfreezing_is_no_growth(layerwise):
    for run in scan_logdir(str(layerwise))["runs"]:
        assert run["health"] == "ok", (run["run"], [i["headline"] for i in run["incidents"]])
        assert not [e for e in run["episodes"] if e["code"] == "CS201"], run["episodes"]
        monitor = monitor_replaying(layerwise / run["run"], {"Loss/train": "train_loss", "Grad/norm": "grad_norm",
                                                             "LR": "lr"})
        assert not monitor.should_stop and monitor.health == "ok", run["run"]


def test_read_by_the_after_points_slope_alone_each_was_a_growth(layerwise, monkeypatch):
    from tb_crash_signals.analysis.rules import growth

    monkeypatch.setattr(growth, "STEP_ERRORS", 0.0)
    for run in scan_logdir(str(layerwise))["runs"]:
        growths = [e for e in run["episodes"] if e["code"] == "CS201"]
        assert growths and 1200 <= growths[0]["start_step"] <= 1230, (run["run"], growths)
