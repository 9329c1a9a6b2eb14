"""Beyond one core and one disk: `scan --jobs`, a local S3 server, a 2-worker Dask cluster.

    python bench/bench_remote.py [--runs 1000 --steps 10000 --dir /tmp --jobs 1,2,1,2 --skip dask,tasks]
    python bench/bench_remote.py --runs 200 --skip jobs,s3,dask,append --compare 3 [--before DIR]

On one logdir of ``--runs`` runs x ``--steps`` steps (bench/_synth.py, fixed seeds):

* ``scan --jobs 1`` and ``--jobs 2`` (the CLI, as users run it; JSON reports compared);
* the same runs uploaded to moto's S3 server on 127.0.0.1 (``s3://…``), scanned with
  ``--jobs 1`` and ``--jobs 2`` (reports compared with the local ones);
* ``--executor dask://…``: a `distributed.LocalCluster` of 2 single-threaded worker
  processes reading the local logdir (report compared);
* a reload after appends over S3: a run read through `RunReader` on the S3 URL, 1 % more
  steps appended (the object rewritten longer, as a sync tool does), reloaded: the bytes
  requested (the storage's ranged reads) against the bytes appended;
* with ``--compare ROUNDS``: local and S3 ``--jobs 1`` scans alternated, each with the CPU
  seconds of the scan and of the S3 server (a shared machine's load moves wall times by 2x
  between minutes; alternating keeps each ratio's two figures in the same minutes);
* what the cluster path costs per task: many tiny runs through Dask (tasks per second),
  and the size of a report entry (what each run sends back).

Every figure is printed with the 1-minute load average at its start and end (the machine
is shared). Needs the [s3] and [dask] extras and moto[server].
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import _synth

from support.objectstores import s3_server

EVENTS = "events.out.tfevents.1700000000.bench"


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def cpu_seconds(pid) -> float:
    """User + system CPU time of process `pid` so far (Linux /proc; 0 elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def scan(target, *args, env=None, with_cpu=False):
    """(seconds, stdout, load note) of `tb-crash-signals scan TARGET --format json` in a fresh
    process; with `with_cpu`, the note also gives the CPU seconds the scan (and its workers) used."""
    cmd = [sys.executable, "-m", "tb_crash_signals", "scan", target, "--format", "json", "--fail-on", "never", *args]
    l0 = load()
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    dt = time.perf_counter() - t0
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise RuntimeError(f"{cmd}: exit {r.returncode}: {r.stderr[-2000:]}")
    note = f"load {l0}->{load()}"
    if with_cpu:
        note += f", scan CPU {c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime:.1f} s"
    return dt, r.stdout, note


def compare(root, url, env, server, rounds, before):
    """`rounds` rounds of local, S3 (and S3 with the code in `before`) ``--jobs 1`` scans,
    alternated so that each round's figures share the machine's load."""
    legs = [("local", root, None), ("s3", url, env)]
    if before:
        legs.append(("s3 before", url, dict(env, PYTHONPATH=before)))
    best, ratios, reference = {}, [], None
    for i in range(rounds):
        walls = {}
        for name, target, leg_env in legs:
            s0 = cpu_seconds(server.process.pid)
            dt, out, note = scan(target, "--jobs", "1", env=leg_env, with_cpu=True)
            if name != "local":
                note += f", S3 server CPU {cpu_seconds(server.process.pid) - s0:.1f} s"
            reference = reference or out
            assert out == reference, f"{name} report differs from the local one"
            walls[name] = dt
            best[name] = min(best.get(name, dt), dt)
            print(f"  round {i + 1}: scan --jobs 1 {name}: {dt:.1f} s ({note})")
        ratios.append(walls["s3"] / walls["local"])
        print(f"  round {i + 1}: s3 / local = {ratios[-1]:.2f}")
    ratios.sort()
    print(f"compare: best local {best['local']:.1f} s, best s3 {best['s3']:.1f} s "
          f"(best/best {best['s3'] / best['local']:.2f}); median per-round s3/local {ratios[len(ratios) // 2]:.2f}"
          + (f"; best s3 before {best['s3 before']:.1f} s" if before else "") + "; reports identical")


def write_logdir(root, runs, steps, seed):
    total = 0
    for i in range(runs):
        run = _synth.make_run(steps, seed + i)
        total += _synth.write_events(os.path.join(root, f"exp{i:04d}", EVENTS), _synth.run_columns(run))
    return total


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dir", default="/tmp", help="where the temporary logdir goes")
    ap.add_argument("--skip", default="", help="comma-separated parts to skip: jobs,s3,dask,append,tasks")
    ap.add_argument("--jobs", default="1,2,1,2", help="the --jobs values scanned, in order, locally and over S3")
    ap.add_argument("--compare", type=int, default=0, metavar="ROUNDS",
                    help="also alternate local and S3 --jobs 1 scans ROUNDS times (with CPU seconds)")
    ap.add_argument("--before", default="", metavar="DIR",
                    help="with --compare: also scan S3 with the tb_crash_signals in DIR (a checkout of another "
                         "version, put first on PYTHONPATH)")
    args = ap.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    jobs_list = [int(j) for j in args.jobs.split(",") if j]
    print(f"machine: {_synth.machine()}; load average {load()}")
    tmp = tempfile.mkdtemp(prefix="bench_remote_", dir=args.dir)
    root = os.path.join(tmp, "logs")
    try:
        t0 = time.perf_counter()
        total = write_logdir(root, args.runs, args.steps, args.seed)
        size = sum(os.path.getsize(os.path.join(root, d, EVENTS)) for d in os.listdir(root))
        print(f"logdir: {args.runs} runs x {args.steps} steps, {total} scalar events, {size / 1e9:.2f} GB, "
              f"written in {time.perf_counter() - t0:.0f} s")
        reports = {}
        if "jobs" not in skip:
            for jobs in jobs_list:
                dt, out, ld = scan(root, "--jobs", str(jobs))
                reports.setdefault(("local", jobs), out)
                assert out == reports[("local", jobs)]
                print(f"scan --jobs {jobs} (local): {dt:.1f} s ({ld})")
            if ("local", 2) in reports and ("local", 1) in reports:
                print(f"  --jobs 2 report == --jobs 1 report: {reports[('local', 1)] == reports[('local', 2)]}")
        if "dask" not in skip:
            import distributed

            with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                          dashboard_address=None) as cluster:
                address = cluster.scheduler_address.replace("tcp://", "dask://")
                for _ in range(2):
                    dt, out, ld = scan(root, "--executor", address)
                    print(f"scan --executor dask (LocalCluster, 2 workers x 1 thread): {dt:.1f} s ({ld})")
                ref = reports.get(("local", 1)) or scan(root, "--jobs", "1")[1]
                print(f"  Dask report == --jobs 1 report: {out == ref}")
                entry = max(len(json.dumps(r)) for r in json.loads(out)["runs"])
                print(f"  largest report entry: {entry} bytes")
                if "tasks" not in skip:
                    tiny = os.path.join(tmp, "tiny")
                    write_logdir(tiny, 2000, 500, args.seed)
                    dt, out, ld = scan(tiny, "--executor", address)
                    dt1, _, ld1 = scan(tiny, "--jobs", "1")
                    print(f"  2000 runs x 500 steps: Dask {dt:.1f} s ({ld}), --jobs 1 {dt1:.1f} s ({ld1})")
        if "s3" not in skip or "append" not in skip or args.compare:
            with s3_server() as server:
                server.create_bucket("bench")
                t0 = time.perf_counter()
                n = server.upload_tree(root, "bench", "logs")
                print(f"uploaded {n} objects to the local S3 server in {time.perf_counter() - t0:.0f} s "
                      f"(load {load()})")
                env = server.env()
                url = "s3://bench/logs"
                if "s3" not in skip:
                    for jobs in jobs_list:
                        dt, out, ld = scan(url, "--jobs", str(jobs), env=env)
                        print(f"scan --jobs {jobs} s3://: {dt:.1f} s ({ld})")
                        if ("local", jobs) in reports:
                            assert out == reports[("local", jobs)], "S3 report differs from the local one"
                    print("  s3:// reports == local reports: True")
                if args.compare:
                    compare(root, url, env, server, args.compare, args.before)
                if "append" not in skip:
                    bench_append(server, env, args.steps)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def bench_append(server, env, steps):
    """A run read from S3, 1 % appended, reloaded: bytes requested vs appended."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        from tb_crash_signals.ingest.reader import RunReader
        from tb_crash_signals.ingest.storage import storage_for

        run = _synth.run_columns(_synth.make_run(steps + steps // 100, 123))
        full = _synth.encode_events(run)
        # The first `steps` steps: cut at a record boundary (re-encode the prefix).
        head = _synth.encode_events({t: (s[s < steps], v[s < steps]) for t, (s, v) in run.items()})
        assert full.startswith(head)
        server.put("bench", "grow/r/" + EVENTS, head)
        storage = storage_for("s3://bench/grow", listing_interval=0.001)
        reader = RunReader("s3://bench/grow/r", storage=storage)
        l0 = load()
        t0 = time.perf_counter()
        reader.reload()
        cold = time.perf_counter() - t0
        before = dict(storage.counters)
        server.put("bench", "grow/r/" + EVENTS, full)
        time.sleep(0.01)
        t0 = time.perf_counter()
        reader.reload()
        warm = time.perf_counter() - t0
        got = storage.counters["bytes_requested"] - before["bytes_requested"]
        reads = storage.counters["reads"] - before["reads"]
        print(f"reload after +1 % over S3: {got} bytes requested in {reads} ranged read(s) for "
              f"{len(full) - len(head)} bytes appended (cold read {len(head)} bytes); reload {warm * 1e3:.0f} ms, "
              f"cold {cold * 1e3:.0f} ms (load {l0}->{load()})")
    finally:
        os.environ.clear()
        os.environ.update(saved)


if __name__ == "__main__":
    sys.exit(main())
