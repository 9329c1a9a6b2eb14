"""Load-independent cost of Monitor.update on replayed runs: Python bytecodes, or a process
to count CPU instructions of under valgrind.

    python bench/monitor_counts.py dump RUNS.pickle [--real-logs DIR] [--corpus DIR] [--every 5]
    python bench/monitor_counts.py bytecodes RUNS.pickle
    valgrind --tool=callgrind python bench/monitor_counts.py replay RUNS.pickle
    valgrind --tool=callgrind python bench/monitor_counts.py build RUNS.pickle

`dump` saves every Nth logical run of the three sets of bench_monitor_replay.py as
[(name, [(step, values)])], so the counting processes do not read event files.
`bytecodes` counts the opcodes Python executes inside update() (sys.settrace opcode
events), per step. `replay` builds a Monitor per run and feeds it the steps; `build`
only builds them: the difference of the two instruction counts, over the steps, is
update()'s cost per step on this machine's interpreter.
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

from tb_crash_signals import Monitor


def dump(path, real_logs, corpus, every):
    from bench_monitor_replay import default_corpus, default_real_logs, replay_of

    runs = []
    for d in (os.path.join(HERE, "..", "demo_logs"), real_logs or default_real_logs(), corpus or default_corpus()):
        if os.path.isdir(d):
            runs += replay_of(d)[::every]
    with open(path, "wb") as f:
        pickle.dump(runs, f)
    print(f"{len(runs)} runs, {sum(len(s) for _, s in runs)} steps")


def bytecodes(runs):
    count = 0

    def tracer(frame, event, arg):
        nonlocal count
        frame.f_trace_opcodes = True
        if event == "opcode":
            count += 1
        return tracer

    steps = 0
    for _, run in runs:
        m = Monitor()
        update = m.update
        for step, values in run:
            sys.settrace(tracer)
            update(step, **values)
            sys.settrace(None)
        steps += len(run)
    print(f"{len(runs)} runs, {steps} steps: {count / steps:.0f} bytecodes a step")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("dump", "bytecodes", "replay", "build"))
    ap.add_argument("runs")
    ap.add_argument("--real-logs", default=None)
    ap.add_argument("--corpus", default=None)
    ap.add_argument("--every", type=int, default=5)
    args = ap.parse_args(argv)
    if args.what == "dump":
        return dump(args.runs, args.real_logs, args.corpus, args.every)
    with open(args.runs, "rb") as f:
        runs = pickle.load(f)
    if args.what == "bytecodes":
        return bytecodes(runs)
    monitors = [Monitor() for _ in runs]
    if args.what == "replay":
        for m, (_, run) in zip(monitors, runs):
            update = m.update
            for step, values in run:
                update(step, **values)
    print(f"{len(runs)} runs, {sum(len(s) for _, s in runs)} steps")


if __name__ == "__main__":
    main()
