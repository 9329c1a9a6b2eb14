"""Compaction benchmark: `compact` on a 1M-step run, against a plain read of the same run.

    python bench/bench_compact.py [--steps 1000000] [--repeat 3] [--tb-writer]

Data (fixed seed, bench/_synth.py): train loss, grad norm, learning rate every
step, update ratio every 10, validation loss every 100 (3.11 M points), with the
synthetic run's 8x loss spike at 40 % and exponential grad-norm growth at 70 %,
plus a 5-step NaN stretch of the loss at 85 % and a restart: a second event file
resumes at 60 % while the first had gone 2000 steps further (those are purged).
PyTorch-style events (one simple_value each), written with the vectorised
writer of bench/_synth.py.

Timed, best of --repeat, cold each time (a fresh reader, a fresh destination):

* plain read: ``RunReader(run).reload()`` plus every tag's Series (what `scan`
  and the plugin pay before any analysis);
* compact: ``compact_logdir(src, dst)`` with the defaults (--keep-last 1000
  --every 100), whole: reading with record provenance, analysing the source,
  planning (re-analysing the kept points), writing, and scanning the result
  again to verify it; and its parts: the record map alone, compact without
  the verification, the verification (``scan_logdir(dst)``).

Printed: sizes and their ratio, points kept, the times and their ratio to the
plain read, whether `scan` tells the same story on both sides, and the spike,
NaN and restart as the compacted run shows them. ``--tb-writer`` also times
TensorBoard's EventFileWriter writing the compacted run's events (what a
compactor built on TensorBoard's writer would pay for the writing alone).
``--strict-plateau`` compares the plateau's episodes one by one too, as every
other rule's (plan.FIRST_ONLY emptied): what that exactness would cost.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))

import _synth
import numpy as np

from tb_crash_signals.compact import compact_logdir, plan
from tb_crash_signals.compact.plan import evidence
from tb_crash_signals.ingest.reader import RunReader
from tb_crash_signals.ingest.recordmap import map_run
from tb_crash_signals.scan import scan_logdir

RESTART_BACK = 2000


def write_run(run_dir: str, n: int, seed: int) -> dict:
    """The bench run (see module doc) as two event files; returns the landmarks."""
    run = _synth.make_run(n, seed)
    steps, loss = run["train_loss"]
    nan_at = int(0.85 * n)
    loss[nan_at : nan_at + 5] = np.nan
    resume = int(0.6 * n)
    columns = _synth.run_columns(run)
    first = {tag: (s[s < resume + RESTART_BACK], v[s < resume + RESTART_BACK]) for tag, (s, v) in columns.items()}
    second = {tag: (s[s >= resume], (v[s >= resume] * 1.01).astype(np.float32).astype(np.float64))
              for tag, (s, v) in columns.items()}
    os.makedirs(run_dir)
    with open(os.path.join(run_dir, "events.out.tfevents.1700000000.bench.1.0"), "wb") as f:
        f.write(_synth.encode_events(first))
    with open(os.path.join(run_dir, "events.out.tfevents.1700090000.bench.2.0"), "wb") as f:
        f.write(_synth.encode_events(second, wall0=1.7e9 + 1e5))
    return {"spike": int(0.4 * n), "nan": nan_at, "resume": resume}


def best(fn, repeat):
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def plain_read(run_dir):
    r = RunReader(run_dir)
    r.reload()
    return {tag: r.series(tag) for tag in r.tags()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep-last", type=int, default=1000)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--dir", default=None, help="where the temporary logdirs go (default: the system's)")
    ap.add_argument("--tb-writer", action="store_true", help="also time TensorBoard's EventFileWriter")
    ap.add_argument("--strict-plateau", action="store_true", help="compare plateau episodes one by one")
    args = ap.parse_args()
    if args.strict_plateau:
        plan.FIRST_ONLY = ()
    print(f"machine: {_synth.machine()}; load average {os.getloadavg()[0]:.1f}")
    tmp = tempfile.mkdtemp(prefix="bench-compact-", dir=args.dir)
    try:
        src = os.path.join(tmp, "src")
        run_dir = os.path.join(src, "run")
        marks = write_run(run_dir, args.steps, args.seed)
        src_bytes = sum(os.path.getsize(os.path.join(run_dir, f)) for f in os.listdir(run_dir))
        print(f"run: {args.steps} steps, 2 event files, {src_bytes / 1e6:.1f} MB")

        t_read, series = best(lambda: plain_read(run_dir), args.repeat)
        points = sum(len(s) for s in series.values())
        print(f"plain read (RunReader + Series): {t_read:.2f} s, {points} points shown")

        def fresh(name):
            dst = os.path.join(tmp, name)
            shutil.rmtree(dst, ignore_errors=True)
            return dst

        t_map, _ = best(lambda: map_run("run", run_dir).close(), args.repeat)
        kw = dict(keep_last=args.keep_last, every=args.every)
        t_noverify, _ = best(lambda: compact_logdir(src, fresh("noverify"), verify=False, **kw), args.repeat)
        t_all, report = best(lambda: compact_logdir(src, fresh("dst"), **kw), args.repeat)
        dst = os.path.join(tmp, "dst")
        t_verify, after = best(lambda: scan_logdir(dst), args.repeat)
        before = scan_logdir(src)
        print(f"record map (read with provenance): {t_map:.2f} s ({t_map / t_read:.1f}x the plain read)")
        print(f"compact without verification: {t_noverify:.2f} s ({t_noverify / t_read:.1f}x)")
        print(f"scan of the compacted logdir (the verification): {t_verify:.2f} s")
        print(f"compact, verified (the command): {t_all:.2f} s ({t_all / t_read:.1f}x the plain read)")
        print(f"size: {report.bytes_in / 1e6:.1f} MB -> {report.bytes_out / 1e6:.2f} MB "
              f"({100 * report.bytes_out / report.bytes_in:.2f} %); points {report.points_in} -> "
              f"{report.points_out} ({100 * report.points_out / report.points_in:.2f} %); "
              f"records {report.records_in} -> {report.records_out}")
        print(f"repair rounds: {report.repaired or 'none'}; kept in full: {report.kept_in_full or 'none'}; "
              f"plateau counts: {report.first_only or 'equal'}")
        same = [evidence(r) for r in before["runs"]] == [evidence(r) for r in after["runs"]]
        print(f"scan SRC vs scan DST: {'same evidence' if same and not report.differences else report.differences}")
        eps = {(e["code"], e["start_step"]) for e in before["runs"][0]["episodes"] if e["family"] != "plateau"}
        eps_after = {(e["code"], e["start_step"]) for e in after["runs"][0]["episodes"] if e["family"] != "plateau"}
        print(f"  episodes outside the plateau family: {len(eps)} before, {len(eps_after)} after, "
              f"{'identical' if eps == eps_after else 'DIFFERENT'}")
        r = RunReader(os.path.join(dst, "run"))
        r.reload()
        loss = r.series("train/loss")
        at = loss.steps.tolist()
        print(f"  spike at {marks['spike']}: {'kept' if marks['spike'] in at else 'LOST'}; NaN at {marks['nan']}: "
              f"{'kept' if marks['nan'] in at else 'LOST'}; restart purge in the compacted run: "
              f"{r.stats.purges} purges (source: the {RESTART_BACK} steps after {marks['resume']} hidden)")
        if args.tb_writer:
            time_tb_writer(dst, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def time_tb_writer(dst, tmp):
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.compat.proto import event_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    run = os.path.join(dst, "run")
    events = [event_pb2.Event.FromString(d) for f in sorted(os.listdir(run))
              for d in RawEventFileLoader(os.path.join(run, f)).Load()]
    out = os.path.join(tmp, "tbwriter")
    os.makedirs(out)
    t0 = time.perf_counter()
    w = EventFileWriter(out, max_queue_size=1000)
    for ev in events:
        w.add_event(ev)
    w.close()
    dt = time.perf_counter() - t0
    print(f"TensorBoard's EventFileWriter, the compacted run's {len(events)} events: {dt:.1f} s "
          f"({1e6 * dt / len(events):.0f} us per event)")


if __name__ == "__main__":
    main()
