"""One scalar time series: steps, values and wall times as numpy arrays.

The analysis relies on one invariant: steps are strictly increasing. Every
producer (event-file source, data provider, online monitor) builds its series
through :func:`Series.from_arrays`, which enforces it.
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True, eq=False)
class Series:
    """A scalar series with strictly increasing int64 steps.

    Attributes:
        steps: int64 array, strictly increasing.
        values: float64 array; NaN and +/-Inf are kept as logged.
        wall_times: float64 array of UNIX seconds (zeros when unknown).
    """

    steps: np.ndarray
    values: np.ndarray
    wall_times: np.ndarray

    def __len__(self) -> int:
        return int(self.steps.shape[0])

    @classmethod
    def empty(cls) -> "Series":
        return cls(
            np.zeros(0, np.int64), np.zeros(0, np.float64), np.zeros(0, np.float64)
        )

    @classmethod
    def from_arrays(cls, steps, values, wall_times=None) -> "Series":
        """Builds a series, sorting by step and keeping the last value per step.

        "Last" means last in the given order, which is write order for the
        event-file source: a value logged again for the same step replaces
        the earlier one, as TensorBoard shows it.
        """
        steps = np.asarray(steps, dtype=np.int64).reshape(-1)
        values = np.asarray(values, dtype=np.float64).reshape(-1)
        if wall_times is None:
            wall_times = np.zeros(steps.shape[0], np.float64)
        wall_times = np.asarray(wall_times, dtype=np.float64).reshape(-1)
        if not (steps.shape == values.shape == wall_times.shape):
            raise ValueError("steps, values and wall_times differ in length")
        n = steps.shape[0]
        if n > 1 and not np.all(steps[1:] > steps[:-1]):
            # Stable sort, then keep the last occurrence of each step.
            order = np.argsort(steps, kind="stable")
            steps, values, wall_times = steps[order], values[order], wall_times[order]
            keep = np.ones(n, dtype=bool)
            keep[:-1] = steps[1:] != steps[:-1]
            steps, values, wall_times = steps[keep], values[keep], wall_times[keep]
        return cls(steps, values, wall_times)

    def until(self, step: int) -> "Series":
        """The prefix of points at steps <= `step`."""
        end = int(np.searchsorted(self.steps, step, side="right"))
        return Series(self.steps[:end], self.values[:end], self.wall_times[:end])
