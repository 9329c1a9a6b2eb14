"""Engine benchmark: the full catalogue over a 1M-step run vs the article's per-step loop.

    python bench/bench_engine.py [--steps 1000000] [--repeat 5] [--rules]

Data (fixed seed, bench/_synth.py): train loss, grad norm, learning rate every
step, update ratio every 10, validation loss every 100 (3.11M points), realistic
noise, one loss spike and one exponential grad-norm growth episode.

* ours: ``engine.analyze_run`` with the default ``Config`` (every rule,
  episodes, fits, summary) over the five series;
* article: the source article's ``TrainingMonitor.check`` called once per step
  over the same data (its four rules, full history; the ``TrainingState``
  objects are built beforehand and not timed, which favours the article).

The two are timed alternately, ``--repeat`` times each; the medians and their
ratio are printed (the machine is shared: medians of interleaved runs).
``--rules`` also prints the median time of each rule. ``--diverge F`` multiplies the train loss
by F from a tenth of the run on (a run that diverged and stays there: F=5, past every rule's
bar; F=2, between them), the case where the rules judge most points.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))

import _synth
import numpy as np
from bench_monitor import ArticleMonitor, TrainingState

from tb_crash_signals.analysis.config import Config
from tb_crash_signals.analysis.engine import analyze_run
from tb_crash_signals.analysis.rules import RULES
from tb_crash_signals.analysis.signals import group_runs
from tb_crash_signals.ingest.series import Series


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rules", action="store_true", help="also time each rule")
    ap.add_argument("--diverge", type=float, default=None, metavar="F",
                    help="multiply the train loss by F from a tenth of the run on")
    ap.add_argument("--malloc-tuned", action="store_true",
                    help="keep freed memory in the heap, as `tb-crash-signals scan` does")
    args = ap.parse_args(argv)
    if args.malloc_tuned:
        from tb_crash_signals.cli.scan import keep_freed_memory

        keep_freed_memory()

    print(f"machine: {_synth.machine()}")
    run = _synth.make_run(args.steps, args.seed)
    if args.diverge is not None:
        steps, loss = run["train_loss"]
        run["train_loss"] = (steps, loss * np.where(steps >= args.steps // 10, args.diverge, 1.0))
    data = {sig: Series.from_arrays(s, v) for sig, (s, v) in run.items()}
    npts = sum(len(s) for s in data.values())
    logical = group_runs({"run": list(_synth.TAGS.values())})[0]
    config = Config()
    print(f"run: {args.steps} steps, {npts} points in 5 signals"
          + (f", train loss x{args.diverge:g} from step {args.steps // 10}" if args.diverge is not None else "")
          + (" (malloc tuned as by `scan`)" if args.malloc_tuned else ""))

    loss = run["train_loss"][1].tolist()
    grad = run["grad_norm"][1].tolist()
    val = dict(zip(run["val_loss"][0].tolist(), run["val_loss"][1].tolist()))
    ratio = dict(zip(run["update_ratio"][0].tolist(), run["update_ratio"][1].tolist()))
    states = [TrainingState(0, i, loss[i], val.get(i), grad[i], ratio.get(i, 0.0)) for i in range(args.steps)]

    ours, article = [], []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        result = analyze_run(logical, data, config)
        ours.append(time.perf_counter() - t0)
        m = ArticleMonitor()
        check = m.check
        t0 = time.perf_counter()
        fired = 0
        for s in states:
            if check(s):
                fired += 1
        article.append(time.perf_counter() - t0)
        del m
    o, a = statistics.median(ours), statistics.median(article)
    counts = {}
    for e in result.episodes:
        counts[e.code] = counts.get(e.code, 0) + 1
    print(f"ours    : {o:.3f} s  analyze_run, {len(config.enabled_codes())} rules "
          f"(median of {args.repeat}; all: {', '.join(f'{t:.3f}' for t in ours)})")
    print(f"          episodes by rule: {dict(sorted(counts.items()))}")
    print(f"article : {a:.3f} s  TrainingMonitor.check x {args.steps} "
          f"(median of {args.repeat}; all: {', '.join(f'{t:.3f}' for t in article)}); fired on {fired} steps")
    print(f"speed-up: {a / o:.1f}x  (target >= 10x)")

    if args.rules:
        print("\nper rule (median of", args.repeat, "):")
        for code in config.enabled_codes():
            rule, params = RULES[code], config.params_for(code)
            ts = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                list(rule.func(data, params))
                ts.append(time.perf_counter() - t0)
            print(f"  {code} {rule.symbol:22s} {statistics.median(ts) * 1e3:7.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
