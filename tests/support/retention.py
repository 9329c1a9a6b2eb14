"""Logdirs for the compaction tests, written with TensorBoard's own EventFileWriter.

    write_sick_run(logdir / "sick")   # PyTorch style: spike, restart, growth, NaN, non-scalar data
    story(report)                     # what must survive compaction, per run

The sick run logs train loss, grad norm and learning rate every step and the
validation loss every 50 steps, with a one-step 8x loss spike at SPIKE_STEP, a
restart (a second writer, a second file) from RESTART_STEP while the first
file had reached RESTART_FROM, exponential grad-norm growth into NaN at the
end, and histograms, an image, text, hparams and a graph.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np
from tensorboard.compat.proto import event_pb2, graph_pb2, summary_pb2
from tensorboard.plugins.hparams import summary_v2 as hparams_summary
from tensorboard.plugins.text import summary_v2 as text_summary
from tensorboard.util import tensor_util

from support import eventwriters as ew

STEPS = 4000
SPIKE_STEP = 1234
RESTART_FROM, RESTART_STEP = 2600, 2400
GROWTH_STEP, NAN_STEP = 3850, 3950


def _sick_values(seed: int = 0):
    rng = np.random.default_rng(seed)
    t = np.arange(STEPS, dtype=np.float64)
    loss = (2.0 * np.exp(-t / 800) + 0.3) * np.exp(0.03 * rng.standard_normal(STEPS))
    loss[SPIKE_STEP] *= 8.0
    grad = np.exp(0.1 * rng.standard_normal(STEPS))
    k = np.arange(STEPS - GROWTH_STEP)
    grad[GROWTH_STEP:] *= np.exp(0.05 * k)
    loss[NAN_STEP:] = np.nan
    grad[NAN_STEP + 5 :] = np.inf
    lr = np.where(t < 100, 1e-3 * (t + 1) / 100, 1e-3 * 0.5 * (1 + np.cos(np.pi * (t - 100) / STEPS)))
    return loss, grad, lr


def non_scalar_events(step: int) -> list:
    """A histogram, an image, text, hparams and a graph, as PyTorch/TF writers store them."""
    out = []
    hist = summary_pb2.HistogramProto(min=-1.0, max=1.0, num=10, sum=0.5, sum_squares=2.0,
                                      bucket_limit=[-0.5, 0.0, 0.5, 1.0], bucket=[1, 4, 4, 1])
    ev = event_pb2.Event(step=step, wall_time=1.7e9 + step)
    ev.summary.value.add(tag="weights/layer1", histo=hist)
    out.append(ev)
    if step == 0:
        img = summary_pb2.Summary.Image(height=2, width=2, colorspace=3, encoded_image_string=b"\x89PNG" + bytes(64))
        ev = event_pb2.Event(step=0, wall_time=1.7e9)
        ev.summary.value.add(tag="samples", image=img)
        out.append(ev)
        out.append(event_pb2.Event(step=0, wall_time=1.7e9, summary=text_summary.text_pb("notes", "lr sweep 3")))
        out.append(event_pb2.Event(step=0, wall_time=1.7e9, summary=hparams_summary.hparams_pb({"lr": 1e-3})))
        graph = graph_pb2.GraphDef()
        graph.node.add(name="dense", op="MatMul")
        out.append(event_pb2.Event(step=0, wall_time=1.7e9, graph_def=graph.SerializeToString()))
    return out


def write_sick_run(run_dir) -> dict:
    """Writes the sick run (two files: the restart is a new writer); returns its arrays."""
    loss, grad, lr = _sick_values()
    first = non_scalar_events(0)
    for segment, (lo, hi, name) in enumerate(
        ((0, RESTART_FROM, "events.out.tfevents.1700000000.host.1.0"),
         (RESTART_STEP, STEPS, "events.out.tfevents.1700009999.host.2.0"))
    ):
        events = list(first) if segment == 0 else []  # PyTorch writes no session log on a restart
        shift = 0.0 if segment == 0 else 0.01  # the rerun's values differ a little
        for s in range(lo, hi):
            wall = 1.7e9 + s + (1e5 if segment else 0.0)
            events.append(ew.scalar_event("train/loss", s, float(loss[s] + shift), wall_time=wall))
            events.append(ew.scalar_event("train/grad_norm", s, float(grad[s]), wall_time=wall))
            events.append(ew.scalar_event("train/learning_rate", s, float(lr[s]), wall_time=wall))
            if s % 50 == 49:
                events.append(ew.scalar_event("val/loss", s, float(1.05 * loss[max(0, s - 5)] + shift),
                                              wall_time=wall))
            if s % 500 == 0 and s:
                events.extend(non_scalar_events(s))
        ew.write_events(run_dir, events, filename=name)
    return {"loss": loss, "grad": grad, "lr": lr}


def keras_v1_run(run_dir, n=300, nan_at=None) -> None:
    """Keras v1 style: several scalars in one event (a merged summary), with a histogram in some."""
    rng = np.random.default_rng(2)
    events = []
    for s in range(n):
        ev = event_pb2.Event(step=s, wall_time=1.7e9 + s)
        loss = (1.5 * np.exp(-s / 80) + 0.2) * np.exp(0.05 * rng.standard_normal())
        if nan_at is not None and s >= nan_at:
            loss = float("nan")
        ev.summary.value.add(tag="epoch_loss", simple_value=float(loss))
        ev.summary.value.add(tag="epoch_accuracy", simple_value=float(0.9 + 0.02 * rng.standard_normal()))
        if s % 100 == 0:
            ev.summary.value.add(tag="kernel", histo=summary_pb2.HistogramProto(min=0, max=1, num=2))
        events.append(ev)
    ew.write_events(run_dir, events)


def tf2_restart_run(run_dir, n=400, restart=150) -> None:
    """tf.summary style tensors; the metadata rides on the tag's first value only, and the
    resumed writer (from step 0, after a session-log START) did not write it again."""
    first = ew.scalar_events({"epoch_loss": [(s, 1.0 / (s + 1)) for s in range(restart)]}, kind="tensor")
    start = event_pb2.Event(step=0, wall_time=1.8e9)
    start.session_log.status = event_pb2.SessionLog.START
    again = [start] + [ew.scalar_event("epoch_loss", s, 2.0 / (s + 1), kind="tensor") for s in range(n)]
    ew.write_events(run_dir, first, filename="events.out.tfevents.1.host.v2")
    ew.write_events(run_dir, again, filename="events.out.tfevents.2.host.v2")


def tree_digest(root) -> dict:
    """{relative path: (size, mtime_ns, sha256)} of every file under root."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            st = os.stat(path)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = (st.st_size, st.st_mtime_ns, hashlib.sha256(f.read()).hexdigest())
    return out


def story(report: dict) -> dict:
    """Per run: the health, and incidents (kind, severity, start) when the report has them, else
    episodes (code, severity, start), a plateau rule's only by its first start (compaction keeps
    the plateau's first start, not each of its on/off flickers: README, "Log retention")."""
    out = {}
    for run in report["runs"]:
        if "incidents" in run:
            items = sorted((i["kind"], i["severity"], i["start_step"]) for i in run["incidents"])
        else:
            items = set()
            first = {}
            for e in run["episodes"]:
                if e["family"] == "plateau":
                    first[e["code"], e["severity"]] = min(first.get((e["code"], e["severity"]), e["start_step"]),
                                                          e["start_step"])
                else:
                    items.add((e["code"], e["severity"], e["start_step"]))
            items = sorted(items | {(*k, v) for k, v in first.items()})
        out[run["run"]] = (run["health"], items)
    return out


def scalar_values(ev: event_pb2.Event) -> list:
    """[(tag, value)] of an event's scalar values (simple_value or one-element tensor)."""
    out = []
    for v in ev.summary.value:
        if v.WhichOneof("value") == "simple_value":
            out.append((v.tag, v.simple_value))
        elif v.WhichOneof("value") == "tensor" and v.tensor.dtype in (1, 2, 19):
            arr = tensor_util.make_ndarray(v.tensor)
            if arr.size == 1:
                out.append((v.tag, float(arr.reshape(-1)[0])))
    return out
