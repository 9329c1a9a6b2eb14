"""Event-file writing for the corpus, in the tag styles of five common writers.

Every point goes through TensorBoard's own `EventFileWriter` and protos, so
the files are what TensorBoard itself would read. Styles:

| style | train loss | val loss | grad norm | lr | update ratio |
|---|---|---|---|---|---|
| `pytorch` | `Loss/train` | `Loss/val` | `Grad/norm` | `LR` | `Optim/update_ratio` |
| `hf` | `train/loss` (mean over the logging interval) | `eval/loss` | `train/grad_norm` | `train/learning_rate` | – |
| `lightning` | `train_loss` | `val_loss` | `grad_2.0_norm_total` | `lr-<Optimizer>` | – |
| `keras` | `X/train` `epoch_loss` (tensor) | `X/validation` `epoch_loss` | – | `epoch_learning_rate` | – |
| `custom` | `loss` | `val/loss` | `optim/grad_global_norm` | `optim/lr` | `optim/update_ratio` |

`Logger.recorded` keeps what was written, per signal, as (step, float32
value) pairs in write order: the labels are computed from it, after the
restart purge (a step lower than the signal's largest so far drops its points
at that step and later). A resumed run also writes a SessionLog START at the
step it resumes from, as `SummaryWriter(purge_step=...)` does, so TensorBoard
purges the same points.
"""

from __future__ import annotations

import math
import os
import time

import numpy as np

STYLES = ("pytorch", "hf", "lightning", "keras", "custom")

_TAGS = {
    "pytorch": {"train_loss": "Loss/train", "val_loss": "Loss/val", "grad_norm": "Grad/norm",
                "lr": "LR", "update_ratio": "Optim/update_ratio"},
    "hf": {"train_loss": "train/loss", "val_loss": "eval/loss", "grad_norm": "train/grad_norm",
           "lr": "train/learning_rate"},
    "lightning": {"train_loss": "train_loss", "val_loss": "val_loss",
                  "grad_norm": "grad_2.0_norm_total", "lr": "lr-{opt}"},
    "custom": {"train_loss": "loss", "val_loss": "val/loss", "grad_norm": "optim/grad_global_norm",
               "update_ratio": "optim/update_ratio", "lr": "optim/lr"},
}


class EventWriter:
    """One event file of scalars (`simple_value`, or rank-0 tensors as Keras writes them)."""

    def __init__(self, logdir: str, tensor: bool = False, wall0: float | None = None):
        from tensorboard.compat.proto import (
            event_pb2,
            summary_pb2,
            tensor_pb2,
            tensor_shape_pb2,
            types_pb2,
        )
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._ev, self._sm = event_pb2, summary_pb2
        self._tp, self._sh, self._ty = tensor_pb2, tensor_shape_pb2, types_pb2
        self._meta = summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"),
            data_class=summary_pb2.DATA_CLASS_SCALAR,
        )
        self._tensor = tensor
        os.makedirs(logdir, exist_ok=True)
        self._w = EventFileWriter(logdir, max_queue_size=4000, flush_secs=120)
        self._wall0 = time.time() if wall0 is None else wall0

    def scalar(self, tag: str, value: float, step: int, wall: float) -> None:
        if self._tensor:
            v = self._sm.Summary.Value(
                tag=tag, metadata=self._meta,
                tensor=self._tp.TensorProto(dtype=self._ty.DT_FLOAT,
                                            tensor_shape=self._sh.TensorShapeProto(),
                                            float_val=[value]))
        else:
            v = self._sm.Summary.Value(tag=tag, simple_value=value)
        self._w.add_event(self._ev.Event(wall_time=self._wall0 + wall, step=int(step),
                                         summary=self._sm.Summary(value=[v])))

    def session_start(self, step: int) -> None:
        """A SessionLog START at `step`, as SummaryWriter(purge_step=step) writes on a resume:
        TensorBoard drops the points of this run at `step` and later."""
        from tensorboard.compat.proto import event_pb2

        self._w.add_event(self._ev.Event(
            wall_time=self._wall0, step=int(step),
            session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START)))

    def close(self) -> None:
        self._w.close()


class Logger:
    """Logs the five signals of one run under one style's tags.

    `restart()` closes the event files and opens new ones in the same
    directories, as a job resumed from a checkpoint does; the steps logged
    after it may go back.
    """

    def __init__(self, root: str, name: str, style: str, opt_name: str, batch_loss: bool = False):
        self.style = style
        self.root, self.name = root, name
        self.recorded: dict[str, list] = {}
        self.batch_loss = batch_loss and style == "keras"
        self._wall = 0.0
        self._restarts = 0
        if style == "keras":
            self.tags = {"train_loss": ("train", "epoch_loss"), "val_loss": ("validation", "epoch_loss"),
                         "lr": ("train", "epoch_learning_rate")}
            if self.batch_loss:
                self.tags["batch_loss"] = ("train", "batch_loss")
        else:
            self.tags = {k: ("", t.format(opt=opt_name)) for k, t in _TAGS[style].items()}
        self._open()

    def _open(self) -> None:
        subs = sorted({sub for sub, _ in self.tags.values()})
        wall0 = time.time() + 1000.0 * self._restarts
        self.writers = {sub: EventWriter(os.path.join(self.root, self.name, sub),
                                         tensor=self.style == "keras", wall0=wall0)
                        for sub in subs}

    def label_tags(self) -> dict:
        """{signal: {"run": run relative to the split dir, "tag": tag}} of the labelled series."""
        return {sig: {"run": "/".join(p for p in (self.name, sub) if p), "tag": tag}
                for sig, (sub, tag) in self.tags.items() if sig != "batch_loss"}

    def log(self, signal: str, value: float, step: int) -> None:
        if signal not in self.tags:
            return
        v = float(np.float32(value)) if math.isfinite(value) else float(value)
        self.recorded.setdefault(signal, []).append((int(step), v))
        sub, tag = self.tags[signal]
        self._wall += 0.05
        self.writers[sub].scalar(tag, v, step, self._wall)

    def restart(self, purge_step: int) -> None:
        """Closes the files and opens new ones that purge from `purge_step` on (a resumed job)."""
        self.close()
        self._restarts += 1
        # event file names carry the creation time in seconds: a new file must sort after the old
        time.sleep(1.05)
        self._open()
        for w in self.writers.values():
            w.session_start(purge_step)

    def close(self) -> None:
        for w in self.writers.values():
            w.close()
