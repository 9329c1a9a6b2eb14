"""Test helpers: write real event files with TensorBoard's own EventFileWriter.

Reused by several test modules. Nothing here needs TensorFlow.

    write_scalars(run_dir, {"loss": [(0, 1.0), (1, 0.9)]}, kind="simple")
    write_events(run_dir, [scalar_event("loss", 3, 0.5)], filename="events.out.tfevents.2")
"""

from __future__ import annotations

import os
import struct

import numpy as np
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

KINDS = ("simple", "tensor", "double", "half", "content", "content64")


def scalar_value(tag, value, kind="simple", metadata=False, plugin="scalars"):
    """One Summary.Value holding a scalar.

    kind: "simple" (simple_value, PyTorch/tensorboardX/Keras v1), "tensor"
    (DT_FLOAT float_val, like tf.summary.scalar), "double" (DT_DOUBLE
    double_val), "half" (DT_HALF half_val), "content" (DT_FLOAT
    tensor_content), "content64" (DT_DOUBLE tensor_content).
    metadata: attach SummaryMetadata naming `plugin` (TF2 does so on the first
    value of a tag only).
    """
    if kind == "simple":
        v = summary_pb2.Summary.Value(tag=tag, simple_value=value)
    else:
        shape = tensor_shape_pb2.TensorShapeProto()
        if kind == "tensor":
            t = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_shape=shape, float_val=[value])
        elif kind == "double":
            t = tensor_pb2.TensorProto(dtype=types_pb2.DT_DOUBLE, tensor_shape=shape, double_val=[value])
        elif kind == "half":
            bits = int(np.array([value], np.float16).view(np.uint16)[0])
            t = tensor_pb2.TensorProto(dtype=types_pb2.DT_HALF, tensor_shape=shape, half_val=[bits])
        elif kind == "content":
            t = tensor_pb2.TensorProto(
                dtype=types_pb2.DT_FLOAT, tensor_shape=shape, tensor_content=struct.pack("<f", value)
            )
        elif kind == "content64":
            t = tensor_pb2.TensorProto(
                dtype=types_pb2.DT_DOUBLE, tensor_shape=shape, tensor_content=struct.pack("<d", value)
            )
        else:
            raise ValueError(f"unknown kind {kind!r}")
        v = summary_pb2.Summary.Value(tag=tag, tensor=t)
    if metadata:
        v.metadata.plugin_data.plugin_name = plugin
    return v


def scalar_event(tag, step, value, kind="simple", wall_time=None, metadata=False, plugin="scalars"):
    """An Event with one scalar value."""
    ev = event_pb2.Event(step=step, wall_time=1.7e9 + step if wall_time is None else wall_time)
    ev.summary.value.append(scalar_value(tag, value, kind, metadata, plugin))
    return ev


def write_events(run_dir, events, filename=None):
    """Writes `events` with EventFileWriter; returns the file path.

    The writer adds its file_version event first. `filename` renames the file
    (inside run_dir) after closing, to control the sorted order of files.
    """
    os.makedirs(run_dir, exist_ok=True)
    w = EventFileWriter(str(run_dir))
    for ev in events:
        w.add_event(ev)
    w.close()
    path = w._file_name
    if filename is not None:
        dest = os.path.join(run_dir, filename)
        os.replace(path, dest)
        path = dest
    return str(path)


def scalar_events(data, kind="simple", first_metadata=None):
    """Events for {tag: [(step, value), ...]}, round-robin across tags.

    The i-th point of every tag is written before the (i+1)-th of any, so tags
    sharing steps interleave as a training loop writes them, and each tag's own
    order (including restarts) is preserved. Tensor kinds attach "scalars"
    metadata to the first value of each tag, as tf.summary.scalar does
    (first_metadata overrides: True/False).
    """
    if first_metadata is None:
        first_metadata = kind != "simple"
    events = []
    items = [(tag, list(points)) for tag, points in data.items()]
    longest = max((len(p) for _, p in items), default=0)
    for i in range(longest):
        for tag, points in items:
            if i < len(points):
                step, value = points[i]
                events.append(scalar_event(tag, step, value, kind, metadata=first_metadata and i == 0))
    return events


def write_scalars(run_dir, data, kind="simple", filename=None):
    """Writes {tag: [(step, value), ...]} as one event file; returns its path."""
    return write_events(run_dir, scalar_events(data, kind), filename=filename)


def record_spans(path):
    """[(start, end)] byte spans of every TFRecord in a (well-formed) file."""
    with open(path, "rb") as f:
        data = f.read()
    spans = []
    pos = 0
    while pos + 12 <= len(data):
        (n,) = struct.unpack_from("<Q", data, pos)
        end = pos + 16 + n
        if end > len(data):
            break
        spans.append((pos, end))
        pos = end
    return spans


def frame(data: bytes) -> bytes:
    """One TFRecord around `data` (TensorBoard's RecordWriter framing)."""
    import io

    from tensorboard.summary.writer.record_writer import RecordWriter

    buf = io.BytesIO()
    RecordWriter(buf).write(data)
    return buf.getvalue()
