"""A digest of everything the Monitor says on replayed runs, to prove a change leaves it as it was.

    python bench/monitor_digest.py [--real-logs DIR] [--corpus DIR] [--every N] [--verbose]

Replays every logical run of the three sets of bench_monitor_replay.py (demo logs,
third-party logs, the detection corpus' dev half) step by step through a fresh
Monitor and hashes, per run, every step's returned episodes and `last_hits`, then
the final `report()`. Prints one SHA-256 per set and one over all: equal digests
before and after a change mean byte-identical outputs on those runs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
from bench_monitor_replay import default_corpus, default_real_logs, replay_of

from tb_crash_signals import Monitor


def _episode_json(ep) -> dict:
    out = ep.to_json()
    out["peak_value"] = ep.peak_value
    return out


def run_digest(steps) -> str:
    h = hashlib.sha256()
    m = Monitor()
    for step, values in steps:
        opened = m.update(step, **values)
        h.update(repr(step).encode())
        h.update(json.dumps([_episode_json(e) for e in opened], sort_keys=True, default=repr).encode())
        h.update(repr(m.last_hits).encode())
        h.update(repr(m.should_stop).encode())
    h.update(json.dumps(m.report(), sort_keys=True, default=repr).encode())
    return h.hexdigest()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--real-logs", default=None)
    ap.add_argument("--corpus", default=None)
    ap.add_argument("--every", type=int, default=1, help="only every Nth run of each set")
    ap.add_argument("--verbose", action="store_true", help="print each run's digest")
    args = ap.parse_args(argv)
    sets = [("demo logs", os.path.join(HERE, "..", "demo_logs")),
            ("real logs", args.real_logs or default_real_logs()),
            ("dev corpus", args.corpus or default_corpus())]
    total = hashlib.sha256()
    for label, path in sets:
        if not os.path.isdir(path):
            print(f"{label}: {path} not found, skipped")
            continue
        runs = replay_of(path)[:: args.every]
        h = hashlib.sha256()
        for name, steps in runs:
            d = run_digest(steps)
            if args.verbose:
                print(f"  {d[:16]} {label} {name}")
            h.update(name.encode() + b"\0" + d.encode())
        total.update(h.digest())
        print(f"{label}: {len(runs)} runs, {sum(len(s) for _, s in runs)} steps: {h.hexdigest()}")
    print(f"all: {total.hexdigest()}")


if __name__ == "__main__":
    main()
