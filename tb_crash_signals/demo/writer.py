"""Writing the demo runs: TensorBoard's own writer and protos, in the common tag styles."""

from __future__ import annotations

import os
import time
from typing import Dict

import numpy as np

F32 = np.float32


# Tag styles

# signal -> tag, per writer style. Keras is handled separately (sibling runs).
HF_TAGS = {
    "train_loss": "train/loss",
    "grad_norm": "train/grad_norm",
    "lr": "train/learning_rate",
    "val_loss": "eval/loss",
    "epoch_frac": "train/epoch",  # fractional epoch, with every log
    "val_acc": "eval/accuracy",
}
LIGHTNING_TAGS = {
    "train_loss": "train_loss",
    "val_loss": "val_loss",
    "lr": "lr-Adam",
    "grad_norm": "grad_norm",
    "epoch_int": "epoch",  # Lightning adds the epoch to every logged step
    "val_acc": "val_acc",
}
PYTORCH_TAGS = {
    "train_loss": "Loss/train",
    "val_loss": "Loss/val",
    "grad_norm": "Grad/norm",
    "lr": "LR",
    "val_acc": "Accuracy/val",
}
CUSTOM_TAGS = {
    "train_loss": "loss/train",
    "val_loss": "loss/val",
    "grad_norm": "optim/grad_global_norm",
    "update_ratio": "optim/update_ratio",
    "lr": "optim/lr",
}


# Event writing (TensorBoard's own writer and protos)


def _clear_event_files(logdir: str) -> None:
    """Removes event files an earlier generation left in ``logdir``."""
    if os.path.isdir(logdir):
        for name in os.listdir(logdir):
            path = os.path.join(logdir, name)
            if "tfevents" in name and os.path.isfile(path):
                os.remove(path)


class ScalarWriter:
    """One event file in one run directory.

    ``tensor=False`` writes ``simple_value`` scalars as PyTorch's
    ``SummaryWriter`` (and HF / Lightning through it) does; ``tensor=True``
    writes TF2-style rank-0 DT_FLOAT tensors with ``scalars`` plugin metadata,
    as ``tf.summary.scalar`` (Keras' TensorBoard callback) does.
    """

    def __init__(self, logdir: str, tensor: bool = False):
        # TensorBoard is imported here, not at module level: importing this
        # module (e.g. for the CLI's argument parser) stays cheap.
        from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._event_pb2, self._summary_pb2 = event_pb2, summary_pb2
        self._tensor_pb2, self._shape_pb2, self._types_pb2 = (
            tensor_pb2, tensor_shape_pb2, types_pb2,
        )
        self._metadata = summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"),
            data_class=summary_pb2.DATA_CLASS_SCALAR,
        )
        self._tensor = tensor
        _clear_event_files(logdir)
        self._writer = EventFileWriter(logdir, max_queue_size=1000, flush_secs=30)
        self.n_events = 0

    def scalar(self, tag: str, value: float, step: int) -> None:
        spb = self._summary_pb2
        if self._tensor:
            val = spb.Summary.Value(
                tag=tag,
                tensor=self._tensor_pb2.TensorProto(
                    dtype=self._types_pb2.DT_FLOAT,
                    tensor_shape=self._shape_pb2.TensorShapeProto(),
                    float_val=[float(value)],
                ),
                metadata=self._metadata,
            )
        else:
            val = spb.Summary.Value(tag=tag, simple_value=float(value))
        self._writer.add_event(
            self._event_pb2.Event(
                wall_time=time.time(), step=int(step), summary=spb.Summary(value=[val])
            )
        )
        self.n_events += 1

    def close(self) -> None:
        self._writer.close()


class StyledLogger:
    """Logs signals under one style's tag names (signals without a tag are dropped)."""

    def __init__(self, logdir: str, tags: Dict[str, str]):
        self.tags = dict(tags)
        self.w = ScalarWriter(logdir)

    def log(self, signal: str, value: float, step: int) -> None:
        tag = self.tags.get(signal)
        if tag is not None:
            self.w.scalar(tag, value, step)

    def close(self) -> None:
        self.w.close()
