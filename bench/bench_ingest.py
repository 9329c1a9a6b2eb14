"""Ingest benchmark: our event-file source vs TensorBoard's EventFileLoader.

    python bench/bench_ingest.py                # 1M simple_value scalar events
    python bench/bench_ingest.py --events 200000 --kind tensor
    python bench/bench_ingest.py --layout run --data-server   # 5 signals at 3 rates, + Rust server

Writes one event file (fixed seed) of N scalar events cycling over 4 tags
(train/loss, train/grad_norm, train/learning_rate, optim/update_ratio; step =
i // 4), then times:

* ours: ``RunReader(run).reload()`` plus building every tag's Series, cold
  (a fresh reader each repetition; best of --repeat);
* TensorBoard: iterating ``EventFileLoader(path).Load()`` (pure-Python record
  reader + protobuf + data_compat), once; pulling values out of its events is
  not timed, so the ratio favours TensorBoard;

checks that both read the same points (over TensorBoard's first 20000 events),
and prints the times and the ratio.

``--layout run`` writes instead a training run's layout (bench/_synth.py: train
loss, grad norm, lr every step, update ratio every 10, validation every 100;
``--events`` events in all), which is what real logdirs look like: the tags'
record lengths repeat with a long cycle. ``--data-server`` also times the Rust
data server (``--load_fast=true``): ``SubprocessServerDataIngester`` with
``--samples_per_plugin scalars=0`` (keep every point) on the same logdir, from
spawning it to every point in Python through its data provider
(``list_scalars`` polled until the last step is loaded, then
``read_scalars(downsample=10**9)``), checked to be the same points as ours.

Writer: TensorBoard's EventFileWriter needs ~14 s per 100k events here (its
CRC32C is pure Python, behind a queue thread), so by default the bench frames
the serialized Events itself with a vectorised CRC32C (``--writer fast``; it
checks a sample of its records byte-for-byte against TensorBoard's
RecordWriter). ``--writer tb`` uses EventFileWriter instead.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _synth
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.compat.proto import event_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboard.summary.writer.record_writer import RecordWriter
from tensorboard.util import tensor_util

from tb_crash_signals.ingest import records as eventfile
from tb_crash_signals.ingest.reader import RunReader

TAGS = ["train/loss", "train/grad_norm", "train/learning_rate", "optim/update_ratio"]


def make_events(n, kind, seed):
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)
    values[rng.integers(0, n, max(1, n // 100000))] = np.nan  # a few NaNs, kept as values
    values = values.astype(np.float32).tolist()
    first = event_pb2.Event(wall_time=1.7e9, file_version="brain.Event:2")
    yield first
    for i in range(n):
        ev = event_pb2.Event(step=i // 4, wall_time=1.7e9 + i * 0.01)
        tag = TAGS[i % 4]
        if kind == "simple":
            ev.summary.value.add(tag=tag, simple_value=values[i])
        else:
            v = ev.summary.value.add(tag=tag)
            v.tensor.dtype = 1  # DT_FLOAT
            v.tensor.tensor_shape.SetInParent()
            v.tensor.float_val.append(values[i])
            if i < 4:
                v.metadata.plugin_data.plugin_name = "scalars"
        yield ev


def write_fast(path, events):
    """Frames serialized events as TFRecords with a vectorised CRC32C."""
    payloads = [ev.SerializeToString() for ev in events]
    lengths = np.array([len(p) for p in payloads], dtype=np.int64)
    data = np.frombuffer(b"".join(payloads), dtype=np.uint8)
    starts = np.zeros(len(payloads), dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    data_crc = eventfile.mask_crcs(eventfile.crc32c_ranges(data, starts, lengths))
    headers = lengths.astype("<u8").view(np.uint8).reshape(-1, 8)
    head_crc = eventfile.mask_crcs(eventfile.crc32c_fixed_rows(headers))
    with open(path, "wb") as f:
        hc = head_crc.astype("<u4").tobytes()
        dc = data_crc.astype("<u4").tobytes()
        hb = headers.tobytes()
        out = []
        for i, p in enumerate(payloads):
            out.append(hb[8 * i : 8 * i + 8])
            out.append(hc[4 * i : 4 * i + 4])
            out.append(p)
            out.append(dc[4 * i : 4 * i + 4])
        f.write(b"".join(out))
    # Check a sample against TensorBoard's own framing.
    with open(path, "rb") as f:
        blob = f.read()
    pos = 0
    for i, p in enumerate(payloads[:2000]):
        buf = io.BytesIO()
        RecordWriter(buf).write(p)
        rec = buf.getvalue()
        assert blob[pos : pos + len(rec)] == rec, f"record {i} differs from RecordWriter framing"
        pos += len(rec)


def write_tb(run_dir, events):
    w = EventFileWriter(run_dir, max_queue_size=1000)
    it = iter(events)
    next(it)  # EventFileWriter writes its own file_version event
    for ev in it:
        w.add_event(ev)
    w.close()


def time_ours(run_dir, repeat):
    best = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        r = RunReader(run_dir)
        r.reload()
        series = {tag: r.series(tag) for tag in r.tags()}
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    return best, series, r.stats


CHECK_EVENTS = 20000


def time_tensorboard(path):
    """Times iterating EventFileLoader(path).Load() (nothing extracted, nothing kept
    but the first CHECK_EVENTS events, whose values are extracted afterwards, untimed)."""
    kept = []
    n = 0
    t0 = time.perf_counter()
    for ev in EventFileLoader(path).Load():
        if n < CHECK_EVENTS:
            kept.append(ev)
        n += 1
    dt = time.perf_counter() - t0
    out = {}
    for ev in kept:
        if ev.HasField("summary"):
            for v in ev.summary.value:
                if v.metadata.plugin_data.plugin_name in ("scalars", "") and v.HasField("tensor"):
                    out.setdefault(v.tag, []).append(
                        (ev.step, float(tensor_util.make_ndarray(v.tensor).item()))
                    )
    return dt, n, out


def time_data_server(logdir, want_points, final_step):
    """Seconds from spawning the Rust data server to every point read back, and the points."""
    from tensorboard import context as tb_context
    from tensorboard.data import server_ingester
    from tensorboard.util import grpc_util

    ctx = tb_context.RequestContext()
    t0 = time.perf_counter()
    ing = server_ingester.SubprocessServerDataIngester(
        server_binary=server_ingester.get_server_binary(),
        logdir=logdir,
        reload_interval=0,  # --reload=once
        channel_creds_type=grpc_util.ChannelCredsType.LOCAL,
        samples_per_plugin={"scalars": 0},  # keep every point
    )
    try:
        ing.start()
        provider = ing.data_provider
        t_spawned = time.perf_counter()
        while True:
            try:
                listing = provider.list_scalars(ctx, experiment_id="", plugin_name="scalars")
            except Exception:  # not answering yet
                listing = {}
            tags = [ts for run in listing.values() for ts in run.values()]
            if tags and max(ts.max_step for ts in tags) >= final_step:
                got = provider.read_scalars(
                    ctx, experiment_id="", plugin_name="scalars", downsample=10**9,
                )
                n = sum(len(pts) for run in got.values() for pts in run.values())
                if n >= want_points:
                    break
            if time.perf_counter() - t0 > 600:
                raise TimeoutError("data server did not load the file in 10 minutes")
            time.sleep(0.02)
        dt = time.perf_counter() - t0
        return dt, t_spawned - t0, got
    finally:
        handle = getattr(ing, "_stdin_handle", None)
        if handle is not None:
            handle.close()  # --die-after-stdin


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--kind", choices=["simple", "tensor"], default="simple")
    ap.add_argument("--writer", choices=["fast", "tb"], default="fast")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-tensorboard", action="store_true")
    ap.add_argument("--layout", choices=["cycle4", "run"], default="cycle4",
                    help="cycle4: 4 tags every step (default); run: a training run's 5 signals at 3 rates")
    ap.add_argument("--data-server", action="store_true", help="also time the Rust data server")
    args = ap.parse_args(argv)
    print(f"machine: {_synth.machine()}")

    tmp = tempfile.mkdtemp(prefix="bench_ingest_")
    try:
        run_dir = os.path.join(tmp, "run")
        os.makedirs(run_dir)
        t0 = time.perf_counter()
        if args.layout == "run":
            path = os.path.join(run_dir, "events.out.tfevents.0000000000.bench")
            steps = int(args.events / 3.11) + 1
            cols = _synth.run_columns(_synth.make_run(steps, args.seed))
            k = sum(len(c[0]) for c in cols.values()) - args.events
            if k > 0:  # trim to exactly --events points (the last ones logged)
                cols = {t: (st[st < steps - 1], v[st < steps - 1]) for t, (st, v) in cols.items()}
            _synth.write_events(path, cols)
            _synth.check_file(path, cols)
            args.events = sum(len(c[0]) for c in cols.values())
            wname = "bench/_synth.py's vectorised writer (sample checked with EventFileLoader)"
        elif args.writer == "fast":
            path = os.path.join(run_dir, "events.out.tfevents.0000000000.bench")
            write_fast(path, make_events(args.events, args.kind, args.seed))
            wname = "bench's vectorised-CRC writer (sample checked against TensorBoard's RecordWriter)"
        else:
            write_tb(run_dir, make_events(args.events, args.kind, args.seed))
            path = os.path.join(run_dir, os.listdir(run_dir)[0])
            wname = "TensorBoard EventFileWriter"
        size = os.path.getsize(path)
        print(f"wrote {args.events} {args.kind} scalar events, {size / 1e6:.1f} MB, "
              f"with {wname} in {time.perf_counter() - t0:.1f} s")

        ours, series, stats = time_ours(run_dir, args.repeat)
        npts = sum(len(s) for s in series.values())
        print(f"ours        : {ours:.3f} s  ({npts} points, {args.events / ours / 1e6:.2f} M events/s, "
              f"best of {args.repeat}; {stats})")
        if args.data_server:
            final = max(int(s.steps[-1]) for s in series.values())
            ds, spawn, got = time_data_server(tmp, npts, final)
            for tag, s in series.items():
                pts = got["run"][tag]
                assert np.array_equal(np.array([p.step for p in pts]), s.steps), tag
                assert np.array_equal(np.array([p.value for p in pts]), s.values, equal_nan=True), tag
            print(f"data server : {ds:.3f} s  (Rust, --samples_per_plugin scalars=0: spawn {spawn:.2f} s, "
                  f"load + read_scalars of all {npts} points; same points as ours)")
            print(f"ours vs data server: {ds / ours:.1f}x faster end to end")
        if args.skip_tensorboard:
            return 0
        tb, n_events, tb_points = time_tensorboard(path)
        print(f"TensorBoard : {tb:.3f} s  (iterating EventFileLoader.Load(), {n_events} events)")
        print(f"speed-up    : {tb / ours:.1f}x")
        # Same points as TensorBoard for the first CHECK_EVENTS events?
        for tag, pts in tb_points.items():
            s = series[tag]
            st = np.array([p[0] for p in pts], dtype=np.int64)
            va = np.array([p[1] for p in pts], dtype=np.float64)
            assert np.array_equal(s.steps[: len(st)], st), tag
            assert np.array_equal(s.values[: len(va)], va, equal_nan=True), tag
        print(f"check       : same steps and values as TensorBoard over its first {CHECK_EVENTS} events")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
