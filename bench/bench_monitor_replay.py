"""Online monitor on real series: Monitor.update next to the article's check(), step by step.

    python bench/bench_monitor_replay.py [--real-logs DIR] [--corpus DIR] [--passes 7] [--profile]
                                         [--thrash MB] [--per-check]

Replays every logical run of three sets, each step's values in one call, as a
training loop would: the demo logs, the third-party logs (`--real-logs`, else
$TBCS_REAL_LOGS, else ../shared/real_logs beside the checkout) and the dev half of
the detection corpus (`--corpus`, else its cache, bench/detection/corpus.py). The
article's TrainingMonitor (bench_monitor.py) checks the same steps: its state is
the step's train loss (the last one logged if the step has none), validation loss
and grad norm (the last one, else 0). Its states are built beforehand, and a
fresh Monitor per run is built outside the clock: only update() / check() are
timed. Both are fed in alternating passes over a whole set, so both see the same
machine load; per-step time is a pass's total time over its total steps, and
the best and median pass are printed with their ratios. With `--thrash MB`, that
many MB are written between steps, off the clock, as a training step does: the
Monitor then reads its state from cold caches, as it does inside a training loop
(each step timed on its own, ~0.1 us of clock overhead in both). With
`--per-check`, one more pass over each set times every rule's check inside the
Monitor (a timer around each call, its own cost measured on an empty check and
taken off): where a step's microseconds go, rule by rule; the untimed pass's
time less all checks' is the Monitor's own work a point (approximately: the
timers disturb the caches too).
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import gc
import os
import platform
import pstats
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
from bench_monitor import ArticleMonitor

from tb_crash_signals import Monitor
from tb_crash_signals.analysis.config import Config
from tb_crash_signals.analysis.signals import group_runs
from tb_crash_signals.compat import TrainingState
from tb_crash_signals.ingest.reader import LogdirSource


def replay_of(logdir: str) -> list[tuple[str, list[tuple[int, dict]]]]:
    """Every logical run of a logdir as [(step, {signal: value})] in step order."""
    source = LogdirSource(logdir)
    source.reload()
    runs = []
    for run in group_runs(source.run_tags(), Config().signals):
        by_step: dict[int, dict] = {}
        for dim, ref in run.signals.items():
            if ref is None:
                continue
            series = source.series(ref.run, ref.tag)
            for step, value in zip(series.steps.tolist(), series.values.tolist()):
                by_step.setdefault(step, {})[dim] = value
        if by_step:
            runs.append((run.name, sorted(by_step.items())))
    return runs


def article_states(steps):
    states, train, grad = [], float("nan"), 0.0
    for step, values in steps:
        train = values.get("train_loss", train)
        grad = values.get("grad_norm", grad)
        states.append(TrainingState(0, step, train, values.get("val_loss"), grad))
    return states


def pass_ours(runs, thrash=None) -> float:
    total = 0.0
    clock = time.perf_counter
    for _, steps in runs:
        m = Monitor()
        update = m.update
        gc.freeze()
        if thrash is None:
            t0 = clock()
            for step, values in steps:
                update(step, **values)
            total += clock() - t0
            continue
        for step, values in steps:
            thrash += 1.0  # a training step's memory traffic, off the clock
            t0 = clock()
            update(step, **values)
            total += clock() - t0
    return total


def pass_article(runs, states, thrash=None) -> float:
    total = 0.0
    clock = time.perf_counter
    for st in states:
        m = ArticleMonitor()
        check = m.check
        gc.freeze()
        if thrash is None:
            t0 = clock()
            for state in st:
                check(state)
            total += clock() - t0
            continue
        for state in st:
            thrash += 1.0
            t0 = clock()
            check(state)
            total += clock() - t0
    return total


def us(x):
    return f"{x * 1e6:.1f} us"


def default_real_logs():
    return os.environ.get("TBCS_REAL_LOGS") or os.path.join(HERE, "..", "..", "shared", "real_logs")


def default_corpus():
    sys.path.insert(0, os.path.join(HERE, "detection"))
    from corpus import default_dir

    return os.path.join(default_dir(), "dev")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--real-logs", default=None, help="the third-party logs (default: $TBCS_REAL_LOGS, "
                    "../shared/real_logs)")
    ap.add_argument("--corpus", default=None, help="the detection corpus' dev half (default: its cache)")
    ap.add_argument("--passes", type=int, default=7)
    ap.add_argument("--profile", action="store_true", help="print where Monitor.update spends its time")
    ap.add_argument("--per-check", action="store_true", help="time each rule's check (one more pass per set)")
    ap.add_argument("--thrash", type=float, default=0.0, metavar="MB",
                    help="write this many MB between steps, off the clock, as a training step evicts "
                    "the caches (each step then timed on its own)")
    args = ap.parse_args(argv)
    thrash = np.zeros(int(args.thrash * 2**20) // 8) if args.thrash > 0 else None
    sets = [("demo logs", os.path.join(HERE, "..", "demo_logs")),
            ("real logs", args.real_logs or default_real_logs()),
            ("dev corpus", args.corpus or default_corpus())]
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, numpy {np.__version__}, "
          f"load average {os.getloadavg()[0]:.1f}")
    everything = []
    for label, path in sets:
        if not os.path.isdir(path):
            print(f"\n{label}: {path} not found, skipped")
            continue
        runs = replay_of(path)
        everything += runs
        report(label, runs, args.passes, thrash)
        if args.per_check:
            per_check(runs)
    if len(everything) > 1:
        report("all", everything, args.passes, thrash)
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        pass_ours(everything)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(18)


class _Timed:
    """A check with a timer around it (pickled as nothing: the Monitor's snapshots skip it)."""

    __slots__ = ("check", "key", "spent", "calls")

    def __init__(self, check, key, spent, calls):
        self.check, self.key, self.spent, self.calls = check, key, spent, calls

    def __call__(self, i, step, v):
        t0 = time.perf_counter()
        hit = self.check(i, step, v)
        self.spent[self.key] += time.perf_counter() - t0
        self.calls[self.key] += 1
        return hit

    def __reduce__(self):
        return (str, ("",))


def _timed_monitor(spent, calls) -> Monitor:
    """A Monitor whose checks run timed, with no periodic snapshots (which would pickle them)."""
    m = Monitor()
    m._snapshot = lambda: None
    for ch in m._state.channels.values():
        wrapped = {}
        for attr in ("checks", "always", "checks_at_rest", "always_at_rest"):
            checks = getattr(ch, attr, None)
            if checks is not None:
                setattr(ch, attr, [wrapped.setdefault(c, _Timed(c, (ch.codes[c], ch.name), spent, calls))
                                   for c in checks])
        ch.codes = {w: ch.codes[w.check] for w in wrapped.values()}
    return m


def per_check(runs):
    """Each rule's check's share of a step, from one timed pass."""
    spent, calls = collections.Counter(), collections.Counter()
    n = sum(len(steps) for _, steps in runs)
    total = 0.0
    for _, steps in runs:
        update = _timed_monitor(spent, calls).update
        t0 = time.perf_counter()
        for step, values in steps:
            update(step, **values)
        total += time.perf_counter() - t0
    empty = _Timed(lambda i, step, v: None, "empty", collections.Counter(), collections.Counter())
    t0 = time.perf_counter()
    for _ in range(200_000):
        empty(0, 0, 0.0)
    cost = (time.perf_counter() - t0) / 200_000  # a timed call of a check that does nothing
    net = {k: max(spent[k] - cost * calls[k], 0.0) for k in spent}
    print(f"  per check (a timed pass: {us(total / n)} a step, {sum(calls.values()) / n:.1f} checks a step, "
          f"{us(cost)} a timed call taken off each):")
    for (code, signal), t in sorted(net.items(), key=lambda kv: -kv[1])[:12]:
        print(f"    {code} on {signal:12s} {us(t / n):>9s} a step ({calls[code, signal] / n:.2f} calls)")
    print(f"    all checks      {us(sum(net.values()) / n):>9s} (next to update()'s untimed best above: the "
          "rest is the Monitor's own work a point)")


def report(label, runs, passes, thrash=None):
    states = [article_states(steps) for _, steps in runs]
    n = sum(len(steps) for _, steps in runs)
    longest = max(len(steps) for _, steps in runs)
    ours, art = [], []
    for _ in range(passes):
        ours.append(pass_ours(runs, thrash) / n)
        art.append(pass_article(runs, states, thrash) / n)
    gc.unfreeze()
    print(f"\n{label}: {len(runs)} runs, {n} steps (longest {longest}); per step, best pass / median pass "
          f"of {passes}:")
    print(f"  ours (Monitor.update):           {us(min(ours))} / {us(statistics.median(ours))}")
    print(f"  article (TrainingMonitor.check): {us(min(art))} / {us(statistics.median(art))}")
    best, median = min(ours) / min(art), statistics.median(ours) / statistics.median(art)
    print(f"  ratio ours/article: {best:.1f}x / {median:.1f}x")


if __name__ == "__main__":
    main()
