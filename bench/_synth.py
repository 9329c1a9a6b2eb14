"""Shared synthetic data for the benches: a realistic run, and a vectorised event-file writer.

``make_run(n, seed)`` is a 1M-step-style training run with the five signals of the
catalogue, at realistic logging rates and noise:

* train loss, grad norm, learning rate every step; update ratio every 10; validation
  loss every 100;
* a decaying loss with multiplicative noise, a log-normal grad norm, linear warm-up then
  cosine decay;
* one loss spike (one step, 8x) at 40 % of the run and one exponential grad-norm growth
  episode (doubling every ~15 steps over 150 steps, then back to normal) at 70 %.

``write_events(path, columns)`` frames PyTorch-style events (one ``simple_value`` per
event, the order ``SummaryWriter.add_scalar`` produces) entirely with numpy: the payload
bytes are laid out per (tag, varint width) group, and both CRC32Cs come from
``eventfile``'s vectorised CRC. ``check_file`` compares a sample with TensorBoard's own
``EventFileLoader`` so the file is known to be what TensorBoard reads.
"""

from __future__ import annotations

import os
import struct

import numpy as np

from tb_crash_signals.ingest import records as eventfile

TAGS = {
    "train_loss": "train/loss",
    "grad_norm": "train/grad_norm",
    "lr": "train/learning_rate",
    "update_ratio": "optim/update_ratio",
    "val_loss": "val/loss",
}
EVERY = {"train_loss": 1, "grad_norm": 1, "lr": 1, "update_ratio": 10, "val_loss": 100}


def make_run(n: int, seed: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{signal: (steps int64, values float64)} for an n-step run (see module doc)."""
    rng = np.random.default_rng(seed)
    t = np.arange(n, dtype=np.float64)
    trend = 2.0 * np.exp(-t / (n / 5)) + 0.3
    loss = trend * np.exp(0.03 * rng.standard_normal(n))
    spike = int(0.4 * n)
    loss[spike] *= 8.0
    grad = np.exp(0.1 * rng.standard_normal(n))
    g0 = int(0.7 * n)
    k = np.arange(150)
    grad[g0 : g0 + 150] *= np.exp(k * np.log(2) / 15)  # doubling every 15 steps
    warm = max(1, n // 100)
    lr = np.where(t < warm, 1e-3 * (t + 1) / warm, 1e-3 * 0.5 * (1 + np.cos(np.pi * (t - warm) / n)))
    ratio = lr * 1.0 * np.exp(0.2 * rng.standard_normal(n))
    val = trend * 1.05 * np.exp(0.002 * rng.standard_normal(n))  # an average: less noisy
    out = {}
    for sig, arr in (("train_loss", loss), ("grad_norm", grad), ("lr", lr),
                     ("update_ratio", ratio), ("val_loss", val)):
        steps = np.arange(0, n, EVERY[sig], dtype=np.int64)
        out[sig] = (steps, arr[steps].astype(np.float32).astype(np.float64))
    return out


def _varint_width(x: np.ndarray) -> np.ndarray:
    w = np.ones(x.shape, np.int64)
    for k in range(1, 10):
        w += x >= (1 << (7 * k))
    return w


def _varint_bytes(x: np.ndarray, width: int) -> np.ndarray:
    """(n, width) uint8: minimal varints of x, all of the given width."""
    out = np.empty((x.shape[0], width), np.uint8)
    for j in range(width):
        b = (x >> (7 * j)) & 0x7F
        if j < width - 1:
            b = b | 0x80
        out[:, j] = b
    return out


def _event_rows(tag: bytes, steps: np.ndarray, walls: np.ndarray, vals: np.ndarray, vw: int):
    """Payload rows (n, L) of Event{wall_time, step, summary{value{tag, simple_value}}}."""
    n = steps.shape[0]
    value = b"\x0a" + bytes([len(tag)]) + tag  # Value.tag
    vlen = len(value) + 5  # + Value.simple_value (0x15 + float32)
    summary_len = 2 + vlen  # Summary.value
    assert vlen < 128 and summary_len < 128
    L = 9 + 1 + vw + 2 + summary_len
    rows = np.empty((n, L), np.uint8)
    rows[:, 0] = 0x09
    rows[:, 1:9] = walls.astype("<f8").view(np.uint8).reshape(n, 8)
    rows[:, 9] = 0x10
    rows[:, 10 : 10 + vw] = _varint_bytes(steps, vw)
    p = 10 + vw
    rows[:, p] = 0x2A
    rows[:, p + 1] = summary_len
    rows[:, p + 2] = 0x0A
    rows[:, p + 3] = vlen
    rows[:, p + 4 : p + 4 + len(value)] = np.frombuffer(value, np.uint8)
    q = p + 4 + len(value)
    rows[:, q] = 0x15
    rows[:, q + 1 : q + 5] = vals.astype("<f4").view(np.uint8).reshape(n, 4)
    return rows


def _frame(rows: np.ndarray) -> np.ndarray:
    """TFRecord framing of equal-length payload rows -> (n, L + 16) uint8."""
    n, L = rows.shape
    hdr = np.empty((n, 8), np.uint8)
    hdr[:] = np.frombuffer(struct.pack("<Q", L), np.uint8)
    out = np.empty((n, L + 16), np.uint8)
    out[:, :8] = hdr
    out[:, 8:12] = eventfile.mask_crcs(eventfile.crc32c_fixed_rows(hdr)).astype("<u4").view(np.uint8).reshape(n, 4)
    out[:, 12 : 12 + L] = rows
    out[:, 12 + L :] = eventfile.mask_crcs(eventfile.crc32c_fixed_rows(rows)).astype("<u4").view(np.uint8).reshape(n, 4)
    return out


def encode_events(columns, wall0: float = 1.7e9) -> bytes:
    """Framed records for `columns` = {tag: (steps, values)}, one event per point,
    ordered by step then by the order of `columns` (as a training loop logs them)."""
    tags = list(columns)
    all_steps = np.concatenate([columns[t][0] for t in tags]).astype(np.int64)
    all_vals = np.concatenate([columns[t][1] for t in tags])
    all_tag = np.concatenate([np.full(len(columns[t][0]), i, np.int64) for i, t in enumerate(tags)])
    order = np.lexsort((all_tag, all_steps))
    steps, vals, tag_id = all_steps[order], all_vals[order], all_tag[order]
    walls = wall0 + steps * 0.05 + tag_id * 1e-3
    vw = _varint_width(steps)
    lens = np.zeros(steps.shape[0], np.int64)
    groups = []
    for ti, t in enumerate(tags):
        tb = t.encode()
        for w in np.unique(vw[tag_id == ti]).tolist():
            sel = np.flatnonzero((tag_id == ti) & (vw == w))
            groups.append((sel, tb, w))
            lens[sel] = 9 + 1 + w + 2 + 2 + 2 + len(tb) + 5 + 16
    offs = np.zeros(steps.shape[0], np.int64)
    np.cumsum(lens[:-1], out=offs[1:])
    buf = np.empty(int(lens.sum()), np.uint8)
    for sel, tb, w in groups:
        for a in range(0, sel.shape[0], 1 << 18):
            part = sel[a : a + (1 << 18)]
            framed = _frame(_event_rows(tb, steps[part], walls[part], vals[part], w))
            width = framed.shape[1]
            view = np.lib.stride_tricks.as_strided(
                buf, shape=(buf.shape[0] - width + 1, width), strides=(1, 1), writeable=True)
            view[offs[part]] = framed
    head = _frame_one(b"\x09" + struct.pack("<d", wall0) + b"\x1a\x0dbrain.Event:2")
    return head + buf.tobytes()


def _frame_one(payload: bytes) -> bytes:
    return eventfile.frame_record(payload)


def write_events(path: str, columns, wall0: float = 1.7e9) -> int:
    """Writes one event file; returns how many scalar events it holds."""
    data = encode_events(columns, wall0)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return sum(len(c[0]) for c in columns.values())


def run_columns(run: dict) -> dict:
    """{tag: (steps, values)} of a make_run() result, in logging order."""
    return {TAGS[sig]: run[sig] for sig in ("train_loss", "grad_norm", "lr", "update_ratio", "val_loss") if sig in run}


def check_file(path: str, columns, sample: int = 2000) -> None:
    """Asserts that TensorBoard's EventFileLoader reads the first `sample` points as written."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util

    got = {}
    count = 0
    for ev in EventFileLoader(path).Load():
        for v in ev.summary.value:
            got.setdefault(v.tag, []).append((ev.step, float(tensor_util.make_ndarray(v.tensor).item())))
            count += 1
        if count >= sample:
            break
    for tag, pts in got.items():
        steps, vals = columns[tag]
        k = len(pts)
        assert np.array_equal(np.array([p[0] for p in pts]), steps[:k]), tag
        want = vals[:k].astype(np.float32).astype(np.float64)
        assert np.array_equal(np.array([p[1] for p in pts]), want, equal_nan=True), tag


def machine() -> str:
    import platform

    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        mem = float("nan")
    return (f"{model}, {os.cpu_count()} cores, {mem:.0f} GiB RAM, Python {platform.python_version()}, "
            f"numpy {np.__version__}")
