"""Plugin benchmarks: routes next to TensorBoard's own scalars route, incremental reload, big logdirs.

    python bench/bench_plugin.py routes [--steps 1000000]    # analysis cold/warm, reload after +1 %
    python bench/bench_plugin.py runs [--runs 1000 --steps 10000]   # the runs listing of a big logdir

Data: bench/_synth.py (fixed seeds): train loss, grad norm, lr every step,
update ratio every 10, validation every 100, written as PyTorch-style event
files with a vectorised writer, under a temporary directory deleted at the end.

Both subcommands serve TensorBoard's own WSGI app (``application.TensorBoardWSGI``
with TensorBoard's ``ScalarsPlugin`` and our ``CrashSignalsPlugin``, as
tests/plugin_harness.py does) over the Rust data server
(``SubprocessServerDataIngester``, i.e. ``--load_fast=true``, default
``--samples_per_plugin``: TensorBoard's 1000-point reservoir), and time requests
through werkzeug's test Client.

``routes``:
* TensorBoard: the time the data server takes to load the run (spawn -> its last
  step listed), then ``/data/plugin/scalars/scalars?run=R&tag=T`` for the five
  tags, first and warm (median);
* ours: ``/data/plugin/crash_signals/analysis?run=R`` cold (first request: reads
  the event file at full resolution, analyses, builds the payload) and warm
  (median of repeats, cache hit);
* reload: 1 % more steps are appended to the event file, then ``analysis`` is
  requested again (the reader parses only the appended bytes; the analysis
  resumes from the previous one: the rules compute the new points' hits, the
  episodes those change are rebuilt, the charts come from cached block
  extremes); its cost is compared with the cold request, and its payload with
  a cold request's on the same data (a fresh plugin). Medians of ``--reloads``.

``runs``: a logdir of ``--runs`` runs x ``--steps`` steps; the first ``runs``
request (cold: full-resolution analyses for ``runs_budget`` seconds, the rest
listed as pending), re-polls every ``--poll`` seconds as the tab does until no
run is pending (the background worker's time), a warm request (nothing
changed), the memory (process RSS growth, what the plugin's caches hold), and
for comparison what summarising every run from TensorBoard's reservoir costs
(one ``read_scalars`` call + the analysis; what the first response did before).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))


import _synth
from tensorboard import context as tb_context
from tensorboard.backend import application
from tensorboard.data import server_ingester
from tensorboard.plugins import base_plugin
from tensorboard.plugins.scalar import scalars_plugin
from tensorboard.util import grpc_util
from werkzeug import test as werkzeug_test
from werkzeug import wrappers

from support.plugin_harness import tb_flags
from tb_crash_signals.tb_plugin.plugin import CrashSignalsPlugin

EVENTS = "events.out.tfevents.1700000000.bench"


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class Server:
    """TensorBoard's WSGI app with the Scalars plugin and ours, over the Rust data server."""

    def __init__(self, logdir, expect_runs, final_step):
        self.logdir = logdir
        self.flags = tb_flags(logdir=logdir)
        t0 = time.perf_counter()
        self.ing = server_ingester.SubprocessServerDataIngester(
            server_binary=server_ingester.get_server_binary(),
            logdir=logdir,
            reload_interval=1,
            channel_creds_type=grpc_util.ChannelCredsType.LOCAL,
            samples_per_plugin={},  # TensorBoard's defaults (1000 scalars per tag)
        )
        self.ing.start()
        self.provider = self.ing.data_provider
        self.wait(expect_runs, final_step)
        self.load_seconds = time.perf_counter() - t0

    def wait(self, expect_runs, final_step, timeout=1800):
        ctx = tb_context.RequestContext()
        t0 = time.time()
        while time.time() - t0 < timeout:
            try:
                listing = self.provider.list_scalars(ctx, experiment_id="", plugin_name="scalars")
            except Exception:
                listing = {}
            if len(listing) >= expect_runs and all(
                max((ts.max_step for ts in tags.values()), default=-1) >= final_step
                for tags in listing.values()
            ):
                return listing
            time.sleep(0.05)
        raise TimeoutError("the data server did not load the logdir")

    def app(self):
        """A fresh TensorBoardWSGI app: new plugin instances (empty caches)."""
        ctx = base_plugin.TBContext(
            data_provider=self.provider, flags=self.flags, logdir=self.logdir,
            multiplexer=None, sampling_hints=self.flags.samples_per_plugin,
        )
        self.ours = CrashSignalsPlugin(ctx)
        scalars = scalars_plugin.ScalarsPlugin(ctx)
        app = application.TensorBoardWSGI([scalars, self.ours], "", self.provider)
        return werkzeug_test.Client(app, wrappers.Response)

    def close(self):
        handle = getattr(self.ing, "_stdin_handle", None)
        if handle is not None:
            handle.close()


def timed_get(client, url):
    t0 = time.perf_counter()
    r = client.get(url)
    dt = time.perf_counter() - t0
    assert r.status_code == 200, (url, r.status_code, r.get_data(as_text=True)[:300])
    return dt, r


def cmd_routes(args):
    print(f"machine: {_synth.machine()}; load average {os.getloadavg()[0]:.1f}")
    tmp = tempfile.mkdtemp(prefix="bench_plugin_")
    try:
        run = _synth.make_run(args.steps + args.steps // 100 * args.reloads, args.seed)
        cut = args.steps
        cols = _synth.run_columns(run)
        first = {t: (s[s < cut], v[s < cut]) for t, (s, v) in cols.items()}
        run_dir = os.path.join(tmp, "run")
        path = os.path.join(run_dir, EVENTS)
        n = _synth.write_events(path, first)
        size = os.path.getsize(path)
        print(f"run: {args.steps} steps, {n} scalar events, {size / 1e6:.0f} MB")
        tags = list(cols)
        server = Server(tmp, 1, cut - 1)
        print(f"\nTensorBoard (Rust data server, default reservoir): load {server.load_seconds:.2f} s "
              "(spawn -> last step listed)")
        client = server.app()
        tb_first = sum(timed_get(client, f"/data/plugin/scalars/scalars?run=run&tag={t}")[0] for t in tags)
        tb_warm = statistics.median(
            sum(timed_get(client, f"/data/plugin/scalars/scalars?run=run&tag={t}")[0] for t in tags)
            for _ in range(args.repeat)
        )
        print(f"  scalars route, 5 tags: first {tb_first * 1e3:.1f} ms, warm {tb_warm * 1e3:.1f} ms (median)")
        print(f"  load + scalars route: {server.load_seconds + tb_first:.2f} s")

        colds, warms = [], []
        for _ in range(args.repeat):
            client = server.app()
            gc.collect()
            dt, r = timed_get(client, "/data/plugin/crash_signals/analysis?run=run")
            colds.append(dt)
            for _ in range(3):
                warms.append(timed_get(client, "/data/plugin/crash_signals/analysis?run=run")[0])
        payload = r.get_json()
        cold, warm = statistics.median(colds), statistics.median(warms)
        print(f"\nours: analysis?run=run  cold {cold:.3f} s (median of {args.repeat}: "
              f"{', '.join(f'{t:.2f}' for t in colds)}), warm {warm * 1e3:.1f} ms (median of {len(warms)})")
        print(f"  health {payload['health']}, sampled {payload['sampled']}, points {payload['points']}, "
              f"payload {len(r.get_data()) / 1e3:.0f} kB")
        print(f"  warm target <= 50 ms: {'met' if warm <= 0.05 else 'MISSED'}; "
              f"cold vs TensorBoard load + scalars route: {(server.load_seconds + tb_first) / cold:.1f}x "
              f"({'met' if cold <= server.load_seconds + tb_first else 'MISSED'})")

        # Incremental reload: +1 % steps appended, then analysis again.
        client = server.app()
        timed_get(client, "/data/plugin/crash_signals/analysis?run=run")
        ratios = []
        for k in range(args.reloads):
            lo, hi = cut + k * (args.steps // 100), cut + (k + 1) * (args.steps // 100)
            more = {t: (s[(s >= lo) & (s < hi)], v[(s >= lo) & (s < hi)]) for t, (s, v) in cols.items()}
            blob = _synth.encode_events(more)
            head = len(_synth._frame_one(b"\x09" + b"\0" * 8 + b"\x1a\x0dbrain.Event:2"))
            with open(path, "ab") as f:
                f.write(blob[head:])  # without a second file_version record
            gc.collect()
            dt, r = timed_get(client, "/data/plugin/crash_signals/analysis?run=run")
            ratios.append(dt)
        assert r.get_json()["points"]["train_loss"] == cut + args.reloads * (args.steps // 100)
        inc = statistics.median(ratios)
        counters = dict(server.ours.service.stats)
        same = timed_get(server.app(), "/data/plugin/crash_signals/analysis?run=run")[1].data == r.data
        print(f"\nreload after +1 % steps (x{args.reloads}): {inc:.3f} s median "
              f"({', '.join(f'{t:.3f}' for t in ratios)}) = {inc / cold * 100:.1f} % of cold "
              f"(target <= 5 %: {'met' if inc <= 0.05 * cold else 'MISSED'})")
        print(f"  payload identical to a cold request's: {same}")
        print(f"  plugin counters: {counters}; load average now {os.getloadavg()[0]:.1f}")
        server.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def reservoir_cost(server, ours, listing):
    """What summarising every run from TensorBoard's reservoir would cost (the old first response).

    One ``read_scalars`` call for every run's signal tags (as the plugin did before), then
    the same analysis on those points. Returns (read seconds, analysis seconds, runs).
    """
    from tensorboard.data import provider as tb_provider

    from tb_crash_signals.analysis.engine import analyze_run
    from tb_crash_signals.analysis.signals import group_runs
    from tb_crash_signals.ingest.series import Series

    ctx = tb_context.RequestContext()
    logical = group_runs({run: list(tags) for run, tags in listing.items()})
    refs = [(lr, {d: r for d, r in lr.signals.items() if r is not None}) for lr in logical]
    runs = sorted({r.run for _, rs in refs for r in rs.values()})
    tags = sorted({r.tag for _, rs in refs for r in rs.values()})
    t0 = time.perf_counter()
    got = server.provider.read_scalars(
        ctx, experiment_id="", plugin_name="scalars", downsample=10**9,
        run_tag_filter=tb_provider.RunTagFilter(runs=runs, tags=tags),
    )
    read = time.perf_counter() - t0
    t0 = time.perf_counter()
    config = ours._config.get()[0]
    for lr, rs in refs:
        data = {}
        for dim, ref in rs.items():
            pts = got[ref.run][ref.tag]
            data[dim] = Series.from_arrays([p.step for p in pts], [p.value for p in pts],
                                           [p.wall_time for p in pts])
        analyze_run(lr, data, config, True)
    return read, time.perf_counter() - t0, len(refs)


def cmd_runs(args):
    print(f"machine: {_synth.machine()}; load average {os.getloadavg()[0]:.1f}")
    tmp = tempfile.mkdtemp(prefix="bench_runs_", dir=args.dir)
    try:
        t0 = time.perf_counter()
        total = 0
        for i in range(args.runs):
            run = _synth.make_run(args.steps, args.seed + i)
            total += _synth.write_events(os.path.join(tmp, f"exp{i:04d}", EVENTS), _synth.run_columns(run))
        du = sum(os.path.getsize(os.path.join(tmp, d, EVENTS)) for d in os.listdir(tmp))
        print(f"logdir: {args.runs} runs x {args.steps} steps, {total} scalar events, {du / 1e9:.2f} GB, "
              f"written in {time.perf_counter() - t0:.0f} s")
        server = Server(tmp, args.runs, args.steps - 1)
        print(f"TensorBoard (Rust data server) loaded it in {server.load_seconds:.1f} s")
        gc.collect()
        rss0 = rss_mb()
        client = server.app()
        ours = server.ours
        cold, r = timed_get(client, "/data/plugin/crash_signals/runs")
        body = r.get_json()
        t_first = time.perf_counter()
        rss1 = rss_mb()
        health = {}
        for e in body["runs"]:
            health[e["health"]] = health.get(e["health"], 0) + 1
        prog = body["progress"]
        print(f"runs: first response {cold:.2f} s, {len(r.get_data()) / 1e3:.0f} kB: {prog['analysed']} of "
              f"{prog['total']} runs analysed at full resolution, {prog['pending']} pending ({health}); "
              f"load average {os.getloadavg()[0]:.1f}")
        # Re-poll as the tab does until nothing is pending.
        polls = []
        while prog["pending"]:
            time.sleep(args.poll)
            dt, r = timed_get(client, "/data/plugin/crash_signals/runs")
            polls.append(dt)
            prog = r.get_json()["progress"]
        done = time.perf_counter() - t_first
        gc.collect()
        rss2 = rss_mb()
        background = ours.service.stats["background_analyses"]
        print(f"  background pass: {ours.service.limits.pool_processes or 'a thread, no'} worker processes")
        print(f"  every run analysed {done:.1f} s after the first response ({background} by the background "
              f"worker: {done / max(background, 1) * 1e3:.0f} ms per run); {len(polls)} re-polls every "
              f"{args.poll:g} s took median {statistics.median(polls or [0]) * 1e3:.0f} ms, "
              f"max {max(polls or [0]) * 1e3:.0f} ms")
        last = r.get_json()
        assert not any(e.get("pending") for e in last["runs"]) and not any(e["sampled"] for e in last["runs"])
        warm = statistics.median(timed_get(client, "/data/plugin/crash_signals/runs")[0] for _ in range(3))
        print(f"  warm (nothing changed): {warm * 1e3:.0f} ms (median of 3); load average "
              f"{os.getloadavg()[0]:.1f}")
        pts = sum(slot.reader.stats.scalar_points for slot in ours.service.data.readers._d.values())
        print(f"memory: process RSS {rss0:.0f} -> {rss1:.0f} MiB (+{rss1 - rss0:.0f} MiB) after the first "
              f"response, {rss2:.0f} MiB (+{rss2 - rss0:.0f} MiB) once every run was analysed; "
              f"plugin caches: {len(ours.service.data.readers)} readers holding {pts / 1e6:.1f} M points, "
              f"{len(ours.service._analyses)} payloads, {len(ours.service._summaries)} summaries; response "
              f"{len(r.get_data()) / 1e3:.0f} kB")
        print(f"plugin counters: {dict(ours.service.stats)}")
        if not args.no_reservoir:
            listing = server.wait(args.runs, args.steps - 1)
            read, analyse, n = reservoir_cost(server, ours, listing)
            print(f"for comparison, summarising every run from TensorBoard's reservoir (as the first "
                  f"response did before): read_scalars {read:.1f} s + analysis {analyse:.1f} s for {n} "
                  f"runs = {(read + analyse) / n * 1e3:.0f} ms per run, sampled")
        server.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("routes")
    a.add_argument("--steps", type=int, default=1_000_000)
    a.add_argument("--repeat", type=int, default=3)
    a.add_argument("--reloads", type=int, default=3)
    a.add_argument("--seed", type=int, default=0)
    b = sub.add_parser("runs")
    b.add_argument("--runs", type=int, default=1000)
    b.add_argument("--steps", type=int, default=10_000)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--dir", default="/tmp", help="where the temporary logdir goes")
    b.add_argument("--poll", type=float, default=2.0, help="seconds between re-polls (the tab's interval)")
    b.add_argument("--no-reservoir", action="store_true", help="skip the reservoir comparison")
    b.add_argument("--pool", type=int, default=None,
                   help="worker processes of the background pass (0: a thread; default: Limits' default, the cores)")
    args = ap.parse_args(argv)
    if getattr(args, "pool", None) is not None:
        CrashSignalsPlugin.limits = dataclasses.replace(CrashSignalsPlugin.limits, pool_processes=args.pool)
    return cmd_routes(args) if args.cmd == "routes" else cmd_runs(args)


if __name__ == "__main__":
    sys.exit(main())
