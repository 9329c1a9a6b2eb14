"""A validation loss logged per epoch next to a train loss logged per step, read on the train loss's steps.

`writer.add_scalar("val/loss", v, epoch)` beside `writer.add_scalar("train/loss", l, global_step)` is
a common slip: the validation points sit at steps 0..E, among the train loss's first points, and the
rules that read the two together (overfitting, the gap between them, a validation stall during a
train plateau) compare the end of training with its start. TensorBoard draws them so too. When the
validation loss's last point was written, by its wall time, long after the train loss logged the
step it is numbered with, each validation point is read at the last train step logged at or before
it: where training was when it was written, from what was logged by then.
"""

from __future__ import annotations

import numpy as np

from tb_crash_signals.ingest.series import Series

# The validation loss counts as numbered by epoch when the train step logged by the wall time of its
# last point is at least this multiple of that point's own step (+1: epochs count from 0). Numbered by
# the same step, the two are within one logging interval of each other.
BEHIND = 4
# ... and it has at least this many points (two evaluations could be the first two steps of anything).
MIN_POINTS = 3
# What the text report says of such a run.
NOTE = "validation loss numbered by epoch: read at the train loss's steps by wall time"


def by_epoch(train: Series | None, val: Series | None) -> bool:
    """Whether `val` is numbered by epoch while `train` is numbered by step (see BEHIND). Both
    need wall times, the train loss's in order of its steps (one writer's log)."""
    if train is None or val is None or len(val) < MIN_POINTS or len(train) < MIN_POINTS:
        return False
    if int(train.steps[-1]) < BEHIND * (int(val.steps[-1]) + 1):
        return False  # not even the train loss's last step is that far ahead: no pass over the walls
    walls, val_walls = train.wall_times, val.wall_times
    if not (np.isfinite(walls).all() and np.isfinite(val_walls).all() and walls[0] > 0 and val_walls[0] > 0):
        return False
    if not np.all(walls[1:] >= walls[:-1]):
        return False
    at = _train_steps_at(train, val_walls[-1:])
    return int(at[0]) >= BEHIND * (int(val.steps[-1]) + 1)


def on_train_steps(train: Series, val: Series) -> Series:
    """`val` with each point at the last step of `train` logged at or before its wall time (the
    first train step for a point written before any), kept strictly increasing: two evaluations
    between the same two train points are one step apart."""
    steps = _train_steps_at(train, val.wall_times)
    order = np.arange(steps.shape[0], dtype=np.int64)
    steps = np.maximum.accumulate(steps - order) + order
    return Series(steps, val.values, val.wall_times)


def _train_steps_at(train: Series, walls: np.ndarray) -> np.ndarray:
    at = np.searchsorted(train.wall_times, walls, side="right") - 1
    return train.steps[np.maximum(at, 0)]


def aligned(data: dict) -> tuple[dict, bool]:
    """`data` (signal -> Series) with its validation loss read on the train loss's steps if it is
    numbered by epoch (by_epoch), and whether it was."""
    train, val = data.get("train_loss"), data.get("val_loss")
    if not by_epoch(train, val):
        return data, False
    return {**data, "val_loss": on_train_steps(train, val)}, True
