"""Long-running fuzz campaign: hostile event files, series, configs and requests.

    python bench/fuzz.py                      # 120 s, seed 0
    python bench/fuzz.py --budget 600 --seed 7
    python bench/fuzz.py --only eventfile,routes --budget 60

Cycles over the targets (equal time shares) until the time budget is spent; each case is generated from
(seed, target, case number), so a failure prints the exact command that replays it
(`--replay TARGET:N`). Exits 1 if any case failed.

Targets and what counts as a failure:

* eventfile: truncation at every offset of small real event files, flipped bits and bytes,
  inserted garbage, lying length fields (valid header CRC, length up to 2**64-1), splices of
  two files, pure garbage. Failure: any exception out of `scan_records`/`decode_scalars`, a
  record outside the buffer, a truncation that is not a clean prefix, more than 8 MiB traced
  for a file of a few KiB, or a case over 30 s (hang).
* reader: the same bytes appended to a run in random pieces with `RunReader.reload()` after
  each; failure: an exception, a result differing from one read of the whole file, or a
  traced peak over 8 MiB.
* engine / monitor: series with NaN, +-Inf, denormals, +-1.8e308, unsorted, repeated and
  negative steps, int64 extremes, single points; through `engine.analyze_run`,
  `report.run_to_json` (must be JSON without NaN), `decimate`, and `Monitor.update` in the
  given (unsorted: restarts) order. Failure: any exception.
* twins: plausible training series (a loss that learns, then may climb, spike, stall or turn
  NaN, Inf or 0 at a point; a grad norm, a learning rate that warms up, decays, ramps (to a peak,
  or without end, steadily or ever faster) or drops to 0, now and then NaN or Inf and logged less
  often than the loss, a validation loss; logged every 1, 5, 10 or 50 steps) under the defaults
  or one rule's parameters drawn small within their bounds, through `analyze_run` and a Monitor
  fed step by step. Failure: the episodes (fits to 12 digits) or the incidents differ.
* config: random documents (wrong types, unknown keys, huge ints, NaN, nested junk) and random
  TOML bytes; failure: anything but `ConfigError`, or an accepted config the engine or the
  monitor cannot run.
* routes: random raw query strings and sub-paths against `runs`, `analysis`, `rules`,
  `index.js`, `index.css` through TensorBoard's WSGI app; failure: a 5xx, a non-JSON 200, a
  raw `<` in JSON, an empty error message, or a file other than the bundle.

The process runs under RLIMIT_AS (4 GiB) so an allocation sized by a lying length field would
fail loudly instead of swapping.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import random
import resource
import signal
import struct
import sys
import tempfile
import time
import traceback
import tracemalloc
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # this checkout, not another installed copy
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

import numpy as np
from tensorboard.compat.proto import event_pb2
from tensorboard.summary.writer.record_writer import RecordWriter

from support import eventwriters as ew
from support.twins import monitored, small_params, whole
from tb_crash_signals.analysis.config import Config, ConfigError, from_dict, load_config
from tb_crash_signals.analysis.engine import analyze_run
from tb_crash_signals.analysis.rules import RULES
from tb_crash_signals.analysis.signals import SIGNALS, LogicalRun, TagRef
from tb_crash_signals.ingest import reader as source
from tb_crash_signals.ingest import records as eventfile
from tb_crash_signals.ingest import scalars
from tb_crash_signals.ingest.series import Series
from tb_crash_signals.online.monitor import Monitor
from tb_crash_signals.report.document import run_to_json
from tb_crash_signals.tb_plugin import decimate

MEM_LIMIT = 8 << 20
CASE_SECONDS = 30


class Hang(Exception):
    pass


def _on_alarm(signum, frame):
    raise Hang(f"case took more than {CASE_SECONDS} s")


# -- inputs ------------------------------------------------------------------------------------


def _file(events, version=True):
    buf = io.BytesIO()
    w = RecordWriter(buf)
    if version:
        w.write(event_pb2.Event(wall_time=1.7e9, file_version="brain.Event:2").SerializeToString())
    for ev in events:
        w.write(ev.SerializeToString())
    return buf.getvalue()


def _seed_files():
    files = []
    for kind in ew.KINDS:
        files.append(_file(ew.scalar_events({"loss": [(i, 1.0 / (i + 1)) for i in range(5)],
                                             "grad_norm": [(i, float(i)) for i in range(5)]}, kind=kind)))
    mixed = ew.scalar_events({"a": [(i, float(i)) for i in range(300)], "b": [(i, -1.0) for i in range(300)]})
    mixed += [ew.scalar_event("x", 10**15, math.nan), ew.scalar_event("y", -5, math.inf)]
    files.append(_file(mixed))  # long enough for the speculative walk
    ev = event_pb2.Event(step=3, wall_time=1.0)
    ev.summary.value.add(tag="img").image.encoded_image_string = b"\x89PNG" * 50
    ev.summary.value.add(tag="s", simple_value=1.0)
    files.append(_file([ev, event_pb2.Event(step=4, graph_def=b"\0" * 5000)]))
    return files


SEEDS = _seed_files()


def _spans(data):
    out, pos = [], 0
    while pos + 12 <= len(data):
        (n,) = struct.unpack_from("<Q", data, pos)
        if pos + 16 + n > len(data):
            break
        out.append((pos, pos + 16 + n))
        pos += 16 + n
    return out


def _header(length):
    h = struct.pack("<Q", length)
    return h + struct.pack("<I", eventfile.masked_crc32c(h))


def _mutate(rng: random.Random) -> bytes:
    base = bytearray(rng.choice(SEEDS))
    op = rng.randrange(7)
    if op == 0:  # bit flips
        for _ in range(rng.randint(1, 6)):
            base[rng.randrange(len(base))] ^= 1 << rng.randrange(8)
    elif op == 1:  # byte overwrites
        for _ in range(rng.randint(1, 20)):
            base[rng.randrange(len(base))] = rng.randrange(256)
    elif op == 2:  # inserted garbage
        pos = rng.randrange(len(base) + 1)
        base[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 300)))
    elif op == 3:  # a lying length field with a valid CRC
        pos = rng.randrange(len(base) + 1)
        length = rng.choice([2**64 - 1, 2**63, 2**40, eventfile.MAX_RECORD_LEN + 1,
                             eventfile.MAX_RECORD_LEN, 10**7, rng.randrange(1 << 32)])
        base[pos:pos] = _header(length)
    elif op == 4:  # splice two files at random points
        other = rng.choice(SEEDS)
        base = base[: rng.randrange(len(base) + 1)] + other[rng.randrange(len(other) + 1):]
    elif op == 5:  # pure garbage
        base = bytearray(rng.randrange(256) for _ in range(rng.randint(0, 4000)))
    else:  # zero runs
        pos = rng.randrange(len(base))
        base[pos: pos + rng.randint(1, 400)] = b"\0" * 400
    return bytes(base)


# -- targets -----------------------------------------------------------------------------------


def _scan_checked(data: bytes):
    res = eventfile.scan_records(data, 0)
    assert 0 <= res.end <= len(data)
    assert np.all(res.offsets >= 12) and np.all(res.offsets + res.lengths + 4 <= len(data))
    if res.offsets.shape[0]:
        scalars.decode_scalars(data, res.offsets, res.lengths)
    lazy = eventfile.scan_records(data, 0, verify_data=False)
    if lazy.offsets.shape[0]:
        scalars.decode_scalars(data, lazy.offsets, lazy.lengths, verify=True)
    return res


def t_eventfile(rng: random.Random, n: int):
    if n % 50 == 0:  # every offset of one seed file
        seed = SEEDS[(n // 50) % len(SEEDS)]
        if len(seed) > 2500:
            seed = seed[:2500]
        spans = _spans(seed)
        for cut in range(len(seed) + 1):
            res = _scan_checked(seed[:cut])
            complete = [s + 12 for s, e in spans if e <= cut]
            assert res.offsets.tolist() == complete and res.n_corrupt == 0, f"cut {cut}"
        return len(seed) + 1
    data = _mutate(rng)
    tracemalloc.start()
    try:
        _scan_checked(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < MEM_LIMIT, f"traced peak {peak} bytes for a {len(data)}-byte file"
    return 1


def t_reader(rng: random.Random, n: int):
    data = _mutate(rng) if rng.random() < 0.7 else rng.choice(SEEDS)
    with tempfile.TemporaryDirectory() as d:
        one, inc = os.path.join(d, "one"), os.path.join(d, "inc")
        os.makedirs(one)
        os.makedirs(inc)
        with open(os.path.join(one, "events.out.tfevents.1"), "wb") as f:
            f.write(data)
        ref = source.RunReader(one)
        ref.reload()
        r = source.RunReader(inc)
        tracemalloc.start()
        try:
            with open(os.path.join(inc, "events.out.tfevents.1"), "wb") as f:
                pos = 0
                while pos < len(data):
                    k = rng.choice([1, 3, 12, 16, 50, 500, 5000])
                    f.write(data[pos: pos + k])
                    f.flush()
                    pos += k
                    r.reload()
            r.reload()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < MEM_LIMIT, f"traced peak {peak}"
        assert r.tags() == ref.tags(), (r.tags(), ref.tags())
        for tag in ref.tags():
            a, b = r.series(tag), ref.series(tag)
            assert np.array_equal(a.steps, b.steps) and np.array_equal(a.values, b.values, equal_nan=True), tag
        r.problems()
    return 1


SPECIAL = [math.nan, math.inf, -math.inf, 0.0, -0.0, 5e-324, 2.2e-308, 1e-300, 1e300,
           1.7976931348623157e308, -1.7976931348623157e308, 1.0, -1.0, 1e-3]


def _values(rng, k):
    mode = rng.randrange(5)
    if mode == 0:
        return [rng.choice(SPECIAL) for _ in range(k)]
    if mode == 1:
        scale = 10.0 ** rng.randint(-300, 300)
        return [rng.gauss(0, 1) * scale for _ in range(k)]
    if mode == 2:
        return [math.exp(rng.gauss(0, 1)) if rng.random() > 0.05 else rng.choice(SPECIAL) for _ in range(k)]
    if mode == 3:
        return [rng.choice(SPECIAL)] * k
    return [math.exp(0.05 * i) for i in range(k)]


def _steps(rng, k):
    mode = rng.randrange(4)
    if mode == 0:
        return list(range(k))
    if mode == 1:
        return [rng.randint(-5, k) for _ in range(k)]
    if mode == 2:
        return [rng.randint(-(2**63), 2**63 - 1) for _ in range(k)]
    return sorted(rng.randint(-3, 10 * k) for _ in range(k))


def _run(rng):
    data = {}
    for sig in SIGNALS:
        if rng.random() < 0.35:
            continue
        k = rng.choice([0, 1, 2, 3, 10, 50, 300, 2000])
        data[sig] = (_steps(rng, k), _values(rng, k))
    return data


def _logical(data):
    return LogicalRun(name="fuzz", members=("fuzz",),
                      signals={k: (TagRef("fuzz", k) if k in data else None) for k in SIGNALS},
                      tags={"fuzz": tuple(data)})


def t_engine(rng: random.Random, n: int):
    raw = _run(rng)
    data = {k: Series.from_arrays(s, v) for k, (s, v) in raw.items()}
    result = analyze_run(_logical(data), data, Config())
    report = run_to_json(result)
    json.dumps(report, allow_nan=False)
    for dim, s in data.items():
        decimate.columns(s, 200, decimate.episode_steps(report["episodes"], dim))
        decimate.nonfinite_points(s, 20)
    decimate.gap_band(data.get("train_loss"), data.get("val_loss"), 200)
    return 1


def t_monitor(rng: random.Random, n: int):
    raw = _run(rng)
    feed = [(s, sig, v) for sig, (steps, values) in raw.items() for s, v in zip(steps, values)]
    if rng.random() < 0.5:
        feed.sort(key=lambda x: x[0])
    else:
        rng.shuffle(feed)
    m = Monitor()
    for s, sig, v in feed[:800]:  # repeated steps cost a snapshot replay each (~5 ms)
        m.update(s, **{sig: v})
    json.dumps(m.report(), allow_nan=False)
    return 1


_PARAMS = sorted({f for r in RULES.values() for f in r.default_params().__dataclass_fields__} | {"severity", "zz"})


def _training_run(rng: random.Random) -> dict:
    """Series a training loop could log (see the `twins` target)."""
    n = rng.choice([6, 12, 25, 40, 80, 200, 500])
    every = rng.choice([1, 5, 10, 50])
    gen = np.random.default_rng(rng.getrandbits(32))
    t = np.arange(n, dtype=np.float64)
    steps = (np.arange(n) + 1) * every - 1
    loss = (2.0 * np.exp(-t / rng.choice([3.0, 20.0, 100.0])) + rng.choice([0.01, 0.3])) * np.exp(
        rng.choice([0.01, 0.05, 0.3, 1.0]) * gen.standard_normal(n))
    if rng.random() < 0.5:  # a climb from some point on, slow or fast
        a = rng.randrange(1, n)
        loss[a:] *= np.exp(rng.choice([0.01, 0.1, 0.5]) * np.arange(n - a))
    for _ in range(rng.randrange(3)):  # spikes, or a jump that stays
        a = rng.randrange(n)
        loss[a if rng.random() < 0.7 else slice(a, None)] *= rng.choice([3.0, 8.0, 100.0])
    for _ in range(rng.randrange(3)):
        loss[rng.randrange(n)] = rng.choice([math.nan, math.inf, 0.0])
    out = {"train_loss": Series.from_arrays(steps, loss)}
    if rng.random() < 0.6:
        grad = np.exp(0.3 * gen.standard_normal(n))
        if rng.random() < 0.5:
            a = rng.randrange(n)
            grad[a:] *= np.exp(rng.choice([0.02, 0.1, 0.3]) * np.arange(n - a))
        if rng.random() < 0.2:
            grad[rng.randrange(n)] = rng.choice([math.nan, math.inf])
        out["grad_norm"] = Series.from_arrays(steps, grad)
    if rng.random() < 0.7:
        kind = rng.randrange(7)
        lr = {0: np.full(n, 0.01), 1: 0.01 * np.minimum(1.0, (t + 1) / max(n // 5, 1)),
              2: 0.01 * 0.5 * (1 + np.cos(np.pi * t / n)), 3: 1e-4 * 1.2 ** t,
              4: np.where(t < n // 2, 0.01, 0.0),
              # ramps that never stop: a steady one and an ever faster one (CS202's `lr_faster`)
              5: 1e-3 * (t + 1), 6: 1e-4 * (t + 1) ** 2}[kind]
        if rng.random() < 0.1:
            lr[rng.randrange(n)] = rng.choice([math.nan, math.inf])
        sparse = rng.choice([1, 1, 2, 5])  # the rate logged less often than the loss
        out["lr"] = Series.from_arrays(steps[::sparse], lr[::sparse])
    if rng.random() < 0.5 and n >= 12:
        k = np.arange(0, n, rng.choice([3, 5]))
        val = loss[k] * rng.choice([1.05, 1.5]) * np.exp(0.01 * t[k] * rng.random())
        out["val_loss"] = Series.from_arrays(steps[k], val)
    return out


def t_twins(rng: random.Random, n: int):
    data = _training_run(rng)
    config = Config()
    if rng.random() < 0.7:
        code = rng.choice(sorted(RULES))
        config = Config(params={code: small_params(code, rng.randint)})
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        offline = analyze_run(_logical(data), data, config)
        online = monitored(data, config)
    assert whole(online.episodes()) == whole(offline.episodes), "episodes differ"
    assert [i.to_json() for i in online.incidents()] == [i.to_json() for i in offline.incidents], "incidents differ"
    return 1


def _junk(rng, depth=0):
    choice = rng.randrange(12 if depth < 2 else 9)
    return [
        lambda: None, lambda: rng.random() < 0.5, lambda: rng.randint(-(2**70), 2**70), lambda: 10**400,
        lambda: rng.choice(SPECIAL), lambda: rng.choice(["", "CS1", "warning", "critical", "nan", "x" * 1000]),
        lambda: rng.randint(-3, 3), lambda: rng.uniform(-2, 2), lambda: b"\xff",
        lambda: [_junk(rng, depth + 1) for _ in range(rng.randint(0, 3))],
        lambda: {
            rng.choice(["a", "select", "window", "CS101"]): _junk(rng, depth + 1) for _ in range(rng.randint(0, 3))
        },
        lambda: {rng.choice(_PARAMS): _junk(rng, depth + 1)},
    ][choice]()


def _doc(rng):
    doc = {}
    for key in ("select", "ignore", "signals", "rules", "bogus"):
        if rng.random() < 0.5:
            continue
        if key == "rules" and rng.random() < 0.8:
            doc[key] = {
                rng.choice(list(RULES) + [r.symbol for r in RULES.values()] + ["nope"]): {
                    rng.choice(_PARAMS): _junk(rng) if rng.random() < 0.5 else rng.choice(
                        [0, 1, 2, 10**9, 10**9 + 1, 2**62, 0.0, 5e-324, 0.5, 1.0, 1e308, "warning", "critical"])
                    for _ in range(rng.randint(1, 3))
                }
                for _ in range(rng.randint(1, 2))
            }
        elif key == "signals" and rng.random() < 0.7:
            doc[key] = {rng.choice(list(SIGNALS) + ["bogus"]): _junk(rng) if rng.random() < 0.5 else "loss"}
        elif key in ("select", "ignore") and rng.random() < 0.5:
            doc[key] = [rng.choice(list(RULES) + ["CS", "CS1", "cs2", "x", "", "loss-spike"])]
        else:
            doc[key] = _junk(rng)
    return doc


_CFG_RUN = None


def _cfg_run():
    global _CFG_RUN
    if _CFG_RUN is None:
        n = 150
        steps = np.arange(n)
        loss = 2.0 * np.exp(-steps / 40) + 0.3
        loss[70] = 40.0
        loss[140:] = np.nan
        _CFG_RUN = {
            "train_loss": Series.from_arrays(steps, loss),
            "val_loss": Series.from_arrays(steps[::10], loss[::10] + 0.2),
            "grad_norm": Series.from_arrays(steps, np.exp(np.linspace(0, 7, n))),
            "update_ratio": Series.from_arrays(steps, np.full(n, 0.5)),
            "lr": Series.from_arrays(steps, np.where(steps < 90, 1e-3, 1.0)),
        }
    return _CFG_RUN


def t_config(rng: random.Random, n: int):
    if rng.random() < 0.3:
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "crash_signals.toml")
            pieces = ["select = ", "[rules.", "CS101", "]\n", "threshold = ", "1e999", "nan", '"x"', "[signals]\n",
                      "train_loss = ", "[", "]", "{", "}", "=", "\n", "\x00", "\xff", "window = 0", "\ufeff", "#"]
            text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 30)))
            with open(path, "wb") as f:
                raw = text.encode("utf-8", "surrogatepass")
                f.write(raw if rng.random() < 0.8 else os.urandom(rng.randint(0, 100)))
            try:
                load_config(path)
            except ConfigError:
                pass
        return 1
    try:
        cfg = from_dict(_doc(rng))
    except ConfigError:
        return 1
    data = _cfg_run()
    json.dumps(run_to_json(analyze_run(_logical(data), data, cfg)), allow_nan=False)
    m = Monitor(cfg)
    for i in range(0, 150, 2):
        m.update(i, **{k: float(s.values[np.searchsorted(s.steps, i)]) for k, s in data.items() if i in s.steps})
    m.report()
    return 1


_SERVED = None


def _served():
    global _SERVED
    if _SERVED is None:
        from support.plugin_harness import backend, tb_flags

        root = tempfile.mkdtemp(prefix="fuzz-logdir-")
        for i, name in enumerate(["ok", "<img src=x onerror=alert(1)>", "ctl\x1b[31m\x07", "\u202eevil", "x" * 200]):
            ew.write_scalars(os.path.join(root, name), {"loss": [(s, 1.0 / (s + 1 + i)) for s in range(60)]})
        cm = backend("python", tb_flags(logdir=root))
        _SERVED = (cm, cm.__enter__())
    return _SERVED[1]


_QUERY_PIECES = [
    "run", "run=", "run=ok", "=", "&", ";", "%", "%Z", "%ZZ", "%00", "%ff%fe", "%C0%AF", "%E2%80%AE", "run=..%2F..",
    "run=/etc/passwd", "run=.", "run[]=ok", "x=1", "run=ok&run=ok", "run=\x00", "+", "run=%3Cimg%3E",
    "run=" + "A" * 5000, "\u202e", "🔥", "run=ctl%1B%5B31m%07",
]


def t_routes(rng: random.Random, n: int):
    served = _served()
    from support.plugin_harness import PREFIX
    from tb_crash_signals.tb_plugin import plugin as plugin_mod

    routes = ["runs", "analysis", "rules", "index.js", "index.css"]
    if rng.random() < 0.3:
        alphabet = "./%\\\x00?#;&=<>~\u202e日" + "abcjsinde"
        tail = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        route = None
    else:
        route = rng.choice(routes)
        tail = route
    q = "&".join(rng.choice(_QUERY_PIECES) if rng.random() < 0.8 else "".join(
        chr(rng.randrange(0x20, 0x3000)) for _ in range(rng.randint(0, 10))) for _ in range(rng.randint(0, 4)))
    method = rng.choice(["GET"] * 8 + ["POST", "HEAD", "PUT", "DELETE"])
    r = served.client.open("/", method=method, environ_overrides={
        "PATH_INFO": (PREFIX + tail).encode("utf-8", "surrogatepass").decode("latin-1"),
        "QUERY_STRING": q.encode("utf-8", "surrogatepass").decode("latin-1"),
    })
    body = r.get_data()
    assert r.status_code < 500, (r.status_code, tail, q, body[:200])
    if method != "GET" or r.status_code == 405:
        return 1
    if r.status_code != 200:
        assert r.status_code in (400, 404) and body.strip(), (r.status_code, tail, q)
        return 1
    if tail in ("index.js", "index.css") or route in ("index.js", "index.css"):
        with open(os.path.join(plugin_mod.STATIC_DIR, route or tail), "rb") as f:
            assert body == f.read()
        return 1
    assert route in ("runs", "analysis", "rules") or tail.rstrip("/") in routes, (tail, q)
    assert b"<" not in body
    json.loads(body)
    return 1


TARGETS = {
    "eventfile": t_eventfile,
    "reader": t_reader,
    "engine": t_engine,
    "monitor": t_monitor,
    "twins": t_twins,
    "config": t_config,
    "routes": t_routes,
}


def _case_rng(seed, target, n):
    return random.Random(f"{seed}:{target}:{n}")


def run_case(seed, target, n):
    signal.alarm(CASE_SECONDS)
    try:
        return TARGETS[target](_case_rng(seed, target, n), n)
    finally:
        signal.alarm(0)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget", type=float, default=120.0, help="seconds to run (default 120)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", help="comma-separated targets: " + ",".join(TARGETS))
    ap.add_argument("--replay", metavar="TARGET:N", help="run one case and show its traceback")
    ap.add_argument("--max-failures", type=int, default=20)
    args = ap.parse_args(argv)

    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    signal.signal(signal.SIGALRM, _on_alarm)
    warnings.simplefilter("ignore", RuntimeWarning)  # overflow in x * factor on 1e308 inputs is expected
    import logging

    logging.getLogger("tensorboard").setLevel(logging.CRITICAL)  # the plugin logs handled failures

    if args.replay:
        target, n = args.replay.split(":")
        run_case(args.seed, target, int(n))
        print("ok")
        return 0

    targets = args.only.split(",") if args.only else list(TARGETS)
    counts = {t: 0 for t in targets}
    cases = {t: 0 for t in targets}
    spent = {t: 0.0 for t in targets}
    failures = []
    start = time.time()
    while time.time() - start < args.budget and len(failures) < args.max_failures:
        target = min(targets, key=lambda t: (spent[t], targets.index(t)))  # equal time shares
        n = cases[target]
        cases[target] += 1
        t0 = time.perf_counter()
        try:
            counts[target] += run_case(args.seed, target, n)
        except Exception as e:
            failures.append((target, n, f"{type(e).__name__}: {e}"))
            print(f"FAIL {target}:{n}: {type(e).__name__}: {e}", file=sys.stderr)
            traceback.print_exc(limit=4)
            print(f"  replay: python bench/fuzz.py --seed {args.seed} --replay {target}:{n}", file=sys.stderr)
        spent[target] += time.perf_counter() - t0
    elapsed = time.time() - start
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"fuzz: seed {args.seed}, {elapsed:.0f} s, max RSS {peak_rss / 1024:.0f} MiB")
    for t in targets:
        print(f"  {t:<10} {counts[t]:>8} inputs in {cases[t]:>6} cases, {spent[t]:6.1f} s")
    print(f"  failures: {len(failures)}")
    if _SERVED is not None:
        _SERVED[0].__exit__(None, None, None)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
