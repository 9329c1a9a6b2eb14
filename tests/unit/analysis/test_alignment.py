"""A validation loss numbered by epoch, read at the train loss's steps by wall time (analysis.alignment)."""

from __future__ import annotations

import numpy as np

from support.helpers import logical
from tb_crash_signals.analysis.alignment import aligned, by_epoch, on_train_steps
from tb_crash_signals.analysis.engine import analyze_run
from tb_crash_signals.ingest.series import Series

START = 1.7e9


def _train(steps=1000, seconds_per_step=0.1):
    s = np.arange(steps)
    return Series(s, np.full(steps, 1.0), START + seconds_per_step * (s + 1))


def _val_by_epoch(epochs=10, steps_per_epoch=100, seconds_per_step=0.1):
    e = np.arange(epochs)
    # written just after each epoch's last train step
    return Series(e, np.full(epochs, 2.0), START + seconds_per_step * ((e + 1) * steps_per_epoch) + 0.01)


def test_a_validation_loss_numbered_by_epoch_is_read_at_the_epochs_last_train_step():
    train, val = _train(), _val_by_epoch()
    assert by_epoch(train, val)
    moved = on_train_steps(train, val)
    assert moved.steps.tolist() == [99 + 100 * e for e in range(10)]
    assert moved.values.tolist() == val.values.tolist()


def test_one_numbered_by_step_stays_as_logged():
    train = _train()
    s = np.arange(99, 1000, 100)
    val = Series(s, np.full(s.shape[0], 2.0), START + 0.1 * (s + 1) + 0.01)
    assert not by_epoch(train, val)
    data = {"train_loss": train, "val_loss": val}
    assert aligned(data) == (data, False)


def test_without_wall_times_or_with_too_few_points_nothing_moves():
    train, val = _train(), _val_by_epoch()
    assert not by_epoch(Series.from_arrays(train.steps, train.values), val)  # walls unknown: zeros
    assert not by_epoch(train, Series.from_arrays(val.steps, val.values))
    short = Series(val.steps[:2], val.values[:2], val.wall_times[:2])
    assert not by_epoch(train, short)
    assert not by_epoch(None, val) and not by_epoch(train, None)


def test_train_wall_times_out_of_order_are_no_clock_to_read_by():
    train = _train()
    walls = train.wall_times.copy()
    walls[500:] -= 30.0  # a second job's log with an earlier clock
    assert not by_epoch(Series(train.steps, train.values, walls), _val_by_epoch())


def test_evaluations_between_the_same_two_train_points_stay_apart():
    train = _train(steps=10, seconds_per_step=10.0)  # logged every 10 s
    e = np.arange(6)
    val = Series(e, np.ones(6), START + 40.0 + e)  # six evaluations within one second
    moved = on_train_steps(train, val)
    assert moved.steps.tolist() == [3, 4, 5, 6, 7, 8]
    assert np.all(np.diff(moved.steps) > 0)


def test_the_report_says_so_and_the_rules_read_the_moved_series():
    train, val = _train(), _val_by_epoch()
    result = analyze_run(logical(train_loss=True, val_loss=True), {"train_loss": train, "val_loss": val})
    assert result.val_by_wall_time
    assert result.data["val_loss"].steps[-1] == 999
    plain = analyze_run(logical(train_loss=True), {"train_loss": train})
    assert not plain.val_by_wall_time
