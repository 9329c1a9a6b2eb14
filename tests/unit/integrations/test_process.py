"""The Monitor in a child process (`background`): a real child, fed through real pipes."""

from __future__ import annotations

import gc
import math
import os
import signal
import time

import pytest

from tb_crash_signals.integrations import _process
from tb_crash_signals.integrations._watch import Watch

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the child process runs on POSIX only")


def loss_at(step, onset=10**9):
    """A healthy loss, then from `onset` one growing by 30% a step (as in test_watch)."""
    return 1.0 / (1 + 0.01 * step) if step < onset else 0.5 * 1.3 ** (step - onset)


def handed_over(watch):
    """Feeds the healthy start of loss_at, a step a millisecond, until the child has started and
    taken the Monitor over (at the first batch after it said it is ready). The next step."""
    deadline = time.monotonic() + 30
    step = 0
    while watch._offload is None or not watch._offload.handed_over:
        assert time.monotonic() < deadline, "the child did not take over in 30 s"
        watch.update(step, train_loss=loss_at(step), grad_norm=loss_at(step) * 2)
        step += 1
        time.sleep(0.001)
    return step


def ended(pid, timeout=10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_in_the_background_it_finds_the_same_story_and_stops_once_the_answer_came():
    lines = []
    watch = Watch(check_every=10, background=True, report=lambda severity, line: lines.append(line))
    start = handed_over(watch)
    onset = start + 50
    pid = watch._offload._process.pid
    stopped = None
    for step in range(start, onset + 100):
        if watch.update(step, train_loss=loss_at(step, onset), grad_norm=loss_at(step, onset) * 2):
            stopped = step
            break
    reference = Watch(check_every=1)
    stop = None
    for step in range(onset + 100):
        if reference.update(step, train_loss=loss_at(step, onset), grad_norm=loss_at(step, onset) * 2):
            stop = step
            break
    assert stop is not None and stop > onset
    assert stopped is not None and stop <= stopped <= stop + 2 * 10 - 1
    again = Watch(check_every=1)
    for step in range(stopped + 1):
        again.update(step, train_loss=loss_at(step, onset), grad_norm=loss_at(step, onset) * 2)
    assert watch.monitor.report()["episodes"] == again.monitor.report()["episodes"]
    assert watch._offload is None and ended(pid)  # `monitor` brought it back; the child ended
    assert sum("Training stopped at step" in line for line in lines) == 1
    assert any(line.endswith(f"Training stopped at step {stopped}.") for line in lines)
    # The same story as a watch in the loop has by that step; what was told on the way depends on when
    # the child's answers came (on a loaded machine, a spike first told on its own before it is folded).
    assert [i.kind for i in watch.monitor.incidents()] == [i.kind for i in again.monitor.incidents()]
    assert "divergence" in [i.kind for i in watch.reported]


def test_in_the_background_a_non_finite_loss_is_sent_at_once_and_stops_at_the_step_its_answer_came_by():
    watch = Watch(check_every=50, background=True)
    start = handed_over(watch)
    assert not watch.update(start, train_loss=0.5, grad_norm=1.0)
    step, stopped = start + 1, watch.update(start + 1, train_loss=math.nan, grad_norm=1.0)
    deadline = time.monotonic() + 30
    while not stopped:  # a loop's next steps, a millisecond each
        assert time.monotonic() < deadline, "no answer in 30 s"
        time.sleep(0.001)
        step += 1
        stopped = watch.update(step, train_loss=0.5, grad_norm=1.0)
    assert watch.stopped_step == step
    # What was held back with it went too (not 50 steps later), and nothing after it is held long.
    points = watch.monitor.report()["points"]["train_loss"]
    assert start + 2 <= points <= step + 1


def test_in_the_background_a_bad_value_is_an_error_where_it_is_given():
    watch = Watch(check_every=10, background=True)
    start = handed_over(watch)
    with pytest.raises(TypeError, match="train_loss must be a number"):
        watch.update(start, train_loss="1.0")


def test_a_child_that_dies_leaves_a_warning_and_a_fresh_monitor_that_goes_on():
    lines = []
    watch = Watch(check_every=10, background=True, report=lambda severity, line: lines.append((severity, line)))
    start = handed_over(watch)
    os.kill(watch._offload._process.pid, signal.SIGKILL)
    for step in range(start, start + 200):
        watch.update(step, train_loss=loss_at(step, start + 100), grad_norm=loss_at(step, start + 100) * 2)
    warnings = [line for severity, line in lines if severity == "warning" and "process ended" in line]
    assert len(warnings) == 1 and "fresh start" in warnings[0]
    assert watch._offload is None and not watch.background
    points = watch.monitor.report()["points"]["train_loss"]
    assert 0 < points < start + 200  # what the child held is lost, what came after is not
    assert any(i.kind == "divergence" for i in watch.reported)  # and it still finds the story


def test_a_child_that_dies_before_it_took_over_leaves_the_monitor_whole():
    lines = []
    watch = Watch(check_every=10, background=True, report=lambda severity, line: lines.append((severity, line)))
    for step in range(10):
        watch.update(step, train_loss=loss_at(step))
    os.kill(watch._offload._process.pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while watch._offload is not None:
        assert time.monotonic() < deadline
        time.sleep(0.01)
        step += 1
        watch.update(step, train_loss=loss_at(step))
    assert any(severity == "warning" for severity, _ in lines)
    assert not any("fresh start" in line for _, line in lines)
    assert watch.monitor.report()["points"]["train_loss"] == step + 1 - len(watch._pending)


def test_the_child_ends_with_the_watch_that_started_it():
    watch = Watch(check_every=10, background=True)
    handed_over(watch)
    pid = watch._offload._process.pid
    del watch
    gc.collect()
    assert ended(pid)


def test_background_is_checked():
    with pytest.raises(ValueError, match='background must be True, False or "auto"'):
        Watch(background="yes")


def test_auto_runs_in_the_background_only_when_fed_in_batches(monkeypatch):
    monkeypatch.setattr(_process, "available", lambda: True)
    assert Watch().background and Watch(check_every=10).background
    assert not Watch(check_every=1).background
    monkeypatch.setattr(_process, "available", lambda: False)
    assert not Watch().background


def test_a_module_in_the_working_directory_does_not_shadow_the_childs(tmp_path, monkeypatch):
    (tmp_path / "numpy.py").write_text("raise SystemExit('a numpy.py in the working directory')\n")
    monkeypatch.chdir(tmp_path)
    lines = []
    watch = Watch(check_every=10, background=True, report=lambda severity, line: lines.append(line))
    handed_over(watch)
    assert watch._offload is not None and lines == []


def test_the_tally_board_tells_of_frames_ahead_of_those_read_only():
    watch = Watch(check_every=10, background=True)
    handed_over(watch)
    process = watch._offload._process
    watch._offload.sync()
    seen = process._seen
    board = process._board
    try:
        board[0] = (seen - 1) & 255  # the child has written a frame the parent read before its tally
        assert not process.told()
        board[0] = seen
        assert not process.told()
        board[0] = (seen + 1) & 255
        assert process.told()
        process._seen, board[0] = 255, 0  # across the wrap
        assert process.told()
    finally:
        process._seen = board[0] = seen
    watch.flush()
    assert watch._offload is None


def test_a_checkpoint_copies_the_child_s_monitor_and_the_child_goes_on():
    watch = Watch(check_every=10, background=True)
    start = handed_over(watch)
    pid = watch._offload._process.pid
    for step in range(start, start + 25):
        watch.update(step, train_loss=loss_at(step), grad_norm=loss_at(step) * 2)
    state = watch.state_dict()  # the steps held back are fed first
    assert watch._offload is not None and watch._offload.handed_over and not ended(pid, timeout=0.2)
    resumed = Watch(check_every=1)
    resumed.load_state_dict(state)
    assert resumed.monitor.report()["points"]["train_loss"] == start + 25
    onset = start + 40
    for step in range(start + 25, onset + 100):  # both go on alike, the child too
        values = {"train_loss": loss_at(step, onset), "grad_norm": loss_at(step, onset) * 2}
        watch.update(step, **values)
        resumed.update(step, **values)
    watch.flush()
    assert resumed.monitor.report()["episodes"] == watch.monitor.report()["episodes"]
    kinds = [i.kind for i in watch.monitor.incidents()]
    assert [i.kind for i in resumed.monitor.incidents()] == kinds == ["divergence"]
    # What each told on the way depends on the cadence its timings chose (on a loaded machine, a spike
    # first told on its own before it is folded); each told the divergence.
    assert "divergence" in [i.kind for i in resumed.reported] and "divergence" in [i.kind for i in watch.reported]
