"""Load while writing: a real TensorBoard (`--reload_interval 1`) serves the tab to 32 polling
clients while another process keeps appending scalar events to the runs for ~10 s.

No request fails, none answers 5xx, every payload is well-formed and consistent with the previous
one for the same run (points never decrease; an episode seen once keeps its start step), and the
TensorBoard process's resident memory stays bounded.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from support.eventwriters import write_scalars
from support.plugin_harness import free_port

PLUGIN = "crash_signals"
RUNS = ["steady", "exploding", "nan", "keras/train", "keras/validation"]
CLIENTS = 32
WRITE_SECONDS = 10.0
MAX_REQUESTS_PER_CLIENT = 400

WRITER = textwrap.dedent(
    """
    import math, os, sys, time
    from tensorboard.compat.proto import event_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    root, seconds = sys.argv[1], float(sys.argv[2])
    runs = ["steady", "exploding", "nan", "keras/train", "keras/validation"]
    writers = {r: EventFileWriter(os.path.join(root, r), filename_suffix=".live") for r in runs}
    start, step = time.time(), 20
    while time.time() - start < seconds:
        for r, w in writers.items():
            ev = event_pb2.Event(step=step, wall_time=time.time())
            loss = 2.0 * math.exp(-step / 300) + 0.3 + 0.01 * math.sin(step)
            if r == "exploding":
                ev.summary.value.add(tag="train/loss", simple_value=loss)
                ev.summary.value.add(tag="train/grad_norm", simple_value=math.exp(min(step / 100.0, 700)))
            elif r == "nan":
                ev.summary.value.add(tag="train/loss", simple_value=loss if step % 300 < 250 else float("nan"))
            elif r.startswith("keras"):
                if step % 10:
                    continue
                ev.summary.value.add(tag="epoch_loss", simple_value=loss + (0.1 if "val" in r else 0.0))
            else:
                ev.summary.value.add(tag="train/loss", simple_value=loss)
                ev.summary.value.add(tag="train/learning_rate", simple_value=1e-3)
            w.add_event(ev)
        if step % 5 == 0:
            for w in writers.values():
                w.flush()
        step += 1
        time.sleep(0.004)
    for w in writers.values():
        w.close()
    print(step)
    """
)


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def _kill_group(proc):
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)


def _get(url, timeout=30.0):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@pytest.fixture
def live_tensorboard(tmp_path):
    logdir = tmp_path / "logdir"
    for run in RUNS:
        tags = {"epoch_loss": [(s, 1.0) for s in range(0, 20, 10)]} if run.startswith("keras") else {
            "train/loss": [(s, 2.0) for s in range(20)]
        }
        write_scalars(str(logdir / run), tags)
    port = free_port()
    log = open(tmp_path / "tensorboard.log", "wb")
    tb = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1",
         "--port", str(port), "--reload_interval", "1"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}/data/plugin/{PLUGIN}/"
    try:
        deadline = time.time() + 60
        while True:
            assert tb.poll() is None, (tmp_path / "tensorboard.log").read_text(errors="replace")
            try:
                status, body = _get(base + "runs", timeout=5)
                if status == 200 and len(json.loads(body)["runs"]) == 4:  # keras/* is one run
                    break
            except (OSError, ValueError):
                pass
            assert time.time() < deadline, "tensorboard did not serve the tab in time"
            time.sleep(0.3)
        yield tb, base, str(logdir)
    finally:
        _kill_group(tb)
        log.close()


def test_many_clients_while_a_process_appends(live_tensorboard, tmp_path):
    tb, base, logdir = live_tensorboard
    for _ in range(3):  # warm caches and imports before the baseline
        _get(base + "runs")
        for run in ("steady", "exploding", "nan", "keras"):
            _get(base + "analysis?run=" + urllib.parse.quote(run, safe=""))
    rss_before = _rss_kb(tb.pid)

    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, logdir, str(WRITE_SECONDS)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )
    failures: list[str] = []
    latencies: list[float] = []
    lock = threading.Lock()
    stop = time.time() + WRITE_SECONDS + 2.0

    def client(seed):
        rng = random.Random(seed)
        last_points: dict = {}
        seen_episodes: dict = {}
        last_runs = 0
        for _ in range(MAX_REQUESTS_PER_CLIENT):
            if time.time() > stop:
                break
            route = "runs" if rng.random() < 0.4 else "analysis"
            run = rng.choice(["steady", "exploding", "nan", "keras"])
            url = base + ("runs" if route == "runs" else "analysis?run=" + run)
            t0 = time.perf_counter()
            try:
                status, body = _get(url)
            except Exception as e:  # connection reset, timeout: a failure
                with lock:
                    failures.append(f"{url}: {type(e).__name__}: {e}")
                continue
            dt = time.perf_counter() - t0
            problems = []
            if status != 200:
                problems.append(f"HTTP {status}: {body[:200]!r}")
            else:
                try:
                    payload = json.loads(body)
                except ValueError as e:
                    payload = None
                    problems.append(f"bad JSON: {e}")
                if payload is not None and route == "runs":
                    n = len(payload["runs"])
                    if n < last_runs:
                        problems.append(f"runs went from {last_runs} to {n}")
                    last_runs = n
                    if payload["problems"]:
                        problems.append(f"problems: {payload['problems']}")
                elif payload is not None:
                    if payload.get("error") or payload["problems"]:
                        problems.append(f"error: {payload.get('error')} {payload['problems']}")
                    for dim, n in payload["points"].items():
                        if n < last_points.get((run, dim), 0):
                            problems.append(f"{run}/{dim}: points went from {last_points[(run, dim)]} to {n}")
                        last_points[(run, dim)] = n
                    # Rules are causal: an episode found once keeps its start step (it may grow).
                    now = {(e["code"], e["signal"], e["start_step"]) for e in payload["episodes"]}
                    last_step = max(
                        (s for col in payload["series"].values() for s in col["steps"][-1:]), default=-1
                    )
                    before = seen_episodes.get(run, set())
                    lost = {k for k in before if k not in now}
                    if lost:
                        problems.append(f"{run}: episodes vanished or moved: {sorted(lost)[:3]}")
                    seen_episodes[run] = {k for k in now if k[2] <= last_step}
            with lock:
                latencies.append(dt)
                failures.extend(f"{url}: {p}" for p in problems)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(CLIENTS)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=WRITE_SECONDS + 60)
        assert not any(t.is_alive() for t in threads), "a client hung"
        out, err = writer.communicate(timeout=30)
        assert writer.returncode == 0, err.decode(errors="replace")
    finally:
        _kill_group(writer)
    steps_written = int(out.decode().strip() or 0)
    rss_after = _rss_kb(tb.pid)
    # After the writer stops, one more poll sees every point it wrote.
    final = json.loads(_get(base + "analysis?run=steady")[1])
    latencies.sort()
    report = (
        f"{len(latencies)} requests by {CLIENTS} clients, steps written {steps_written}, "
        f"latency p50 {latencies[len(latencies) // 2] * 1e3:.0f} ms, "
        f"p99 {latencies[int(len(latencies) * 0.99)] * 1e3:.0f} ms, "
        f"RSS {rss_before / 1024:.0f} -> {rss_after / 1024:.0f} MiB"
    )
    print(report)
    assert not failures, f"{len(failures)} failures, e.g. {failures[:5]}\n{report}"
    assert len(latencies) >= 200, report
    assert steps_written > 200, report
    assert final["points"]["train_loss"] == steps_written, (final["points"], report)
    assert tb.poll() is None
    assert rss_after - rss_before < 150 * 1024, report
