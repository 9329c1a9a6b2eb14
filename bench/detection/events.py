"""Raw scalar series read with TensorBoard's own EventAccumulator, for the baselines.

The baselines must see the same series as the package's report: the report's
`signals` field names the run and tag behind each signal (for Keras sibling
runs `X/train` and `X/validation`), and `series_for(logdir, report_run)`
reads exactly those, at full resolution (`size_guidance` 0), with
TensorBoard's purge of a resumed run (SessionLog START) applied. Scalars
written as rank-0 tensors (Keras, `tf.summary`) are read from `Tensors`.
"""

from __future__ import annotations

import os

import numpy as np

SIGNALS = ("train_loss", "val_loss", "grad_norm", "update_ratio", "lr")


class RawReader:
    """Caches one EventAccumulator per run directory of a logdir."""

    def __init__(self, logdir: str):
        import logging

        # TensorBoard logs every resume purge as a warning; they are expected here
        logging.getLogger("tensorboard").setLevel(logging.ERROR)
        self.logdir = logdir
        self._acc: dict[str, object] = {}

    def _accumulator(self, run: str):
        if run not in self._acc:
            from tensorboard.backend.event_processing.event_accumulator import (
                EventAccumulator,
            )

            path = self.logdir if run in (".", "") else os.path.join(self.logdir, run)
            acc = EventAccumulator(path, size_guidance={"scalars": 0, "tensors": 0})
            acc.Reload()
            self._acc[run] = acc
        return self._acc[run]

    def series(self, run: str, tag: str) -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) of one tag of one run, in file order after TensorBoard's purge."""
        from tensorboard.util import tensor_util

        acc = self._accumulator(run)
        tags = acc.Tags()
        if tag in tags.get("scalars", []):
            evs = acc.Scalars(tag)
            steps = [e.step for e in evs]
            values = [e.value for e in evs]
        elif tag in tags.get("tensors", []):
            evs = acc.Tensors(tag)
            steps = [e.step for e in evs]
            values = [float(np.asarray(tensor_util.make_ndarray(e.tensor_proto)).reshape(-1)[0])
                      for e in evs]
        else:
            steps, values = [], []
        return np.asarray(steps, np.int64), np.asarray(values, np.float64)

    def series_for(self, report_run: dict) -> dict:
        """{signal: (steps, values)} for the signals the report mapped for this logical run."""
        out = {}
        for sig, ref in (report_run.get("signals") or {}).items():
            if ref is not None and sig in SIGNALS:
                out[sig] = self.series(ref["run"], ref["tag"])
        return out
