"""A real NaN loss the loop skipped: the run trained on after it, and the report says so.

A classifier (`support.torch_training.train_skipping_a_nan_batch`) meets one corrupt record (a NaN
feature) in its batch at one step: the loss is NaN, logged as such, and the loop's guard skips the
update; the weights stay finite and training goes on. While the NaN is the last thing seen it is a
crash (the Monitor raises the alarm then, as Keras' TerminateOnNaN would); once the loss has been
finite again for the rule's cooldown and learns on, the report tells a skipped step, a warning about
the batch, not the run's crash.
"""

from __future__ import annotations

import pytest

from support.helpers import incidents_scanned, incidents_told, monitor_replaying
from support.torch_training import train_skipping_a_nan_batch
from tb_crash_signals import scan_logdir
from tb_crash_signals.analysis.recovery import WENT_ON_ADVICE

torch = pytest.importorskip("torch")  # installed by scripts/test_all.sh; never skipped in CI

pytestmark = pytest.mark.slow

NAN_AT = 500
ADVICE = ("severity", "headline", "advice")


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("skippednan")
    train_skipping_a_nan_batch(root / "run", 0, nan_at=NAN_AT, steps=1000)
    return root


def test_the_skipped_step_is_a_warning_about_the_batch(logdir):
    (run,) = scan_logdir(str(logdir))["runs"]
    assert run["health"] == "warning", [i["headline"] for i in run["incidents"]]
    (nan,) = [i for i in run["incidents"] if i["kind"] == "nonfinite"]
    assert nan["severity"] == "warning" and nan["start_step"] == NAN_AT and nan["advice"] == WENT_ON_ADVICE
    assert "a skipped step" in nan["headline"]


def test_the_monitor_raised_the_alarm_at_the_nan_and_tells_the_same_story_after(logdir):
    (run,) = scan_logdir(str(logdir))["runs"]
    monitor = monitor_replaying(logdir / "run", {"Loss/train": "train_loss", "Grad/norm": "grad_norm"})
    assert monitor.should_stop  # at the NaN, nothing told it apart from a crash
    assert incidents_told(monitor, ADVICE) == incidents_scanned(run, ADVICE)
