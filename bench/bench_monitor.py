"""Online monitor: per-step cost next to the article's check(), and memory over 1M steps.

    python bench/bench_monitor.py [--steps 1000000]

Feeds the same synthetic run (fixed seed: train loss, grad norm and learning
rate every step, update ratio every 10, validation every 100) to our Monitor
with the full catalogue and to the article's TrainingMonitor (its four
rules, keeping every state). Prints per-step cost (median over blocks of
10k steps, robust to a noisy machine), the ratio, and memory as the run grows.
"""

from __future__ import annotations

import argparse
import gc
import os
import pickle
import platform
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from tb_crash_signals import Monitor  # noqa: E402
from tb_crash_signals.compat import TrainingState  # noqa: E402  (the article's dataclass)


class ArticleMonitor:
    """The source article's TrainingMonitor: four lambdas and the full history."""

    def __init__(self):
        self._history = []
        self._rules = [
            lambda s, h: s.grad_norm > 100.0,
            lambda s, h: len(h) >= 2 and s.train_loss > h[-1].train_loss * 3,
            lambda s, h: len(h) >= 10
            and all(
                (h[-i].val_loss is not None) and abs(h[-i].val_loss - (s.val_loss or 0)) < 0.001
                for i in range(1, 11)
            ),
            lambda s, h: s.val_loss is not None and s.train_loss < 0.1 and s.val_loss > s.train_loss * 5,
        ]

    def check(self, state):
        triggered = [r for r in self._rules if r(state, self._history)]
        self._history.append(state)
        return triggered


def make_run(n, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    loss = (2.0 * np.exp(-t / (n / 5)) + 0.3) * (1 + 0.02 * rng.standard_normal(n))
    grad = np.exp(0.1 * rng.standard_normal(n))
    lr = np.minimum(1e-3, 1e-3 * (t + 1) / 1000)
    return loss.tolist(), grad.tolist(), lr.tolist()


def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def bench_ours(n, loss, grad, lr):
    m = Monitor()
    block, per_step, memory = 10_000, [], []
    gc.collect()
    for start in range(0, n, block):
        t0 = time.perf_counter()
        for i in range(start, min(n, start + block)):
            if i % 100 == 0:
                m.update(i, train_loss=loss[i], grad_norm=grad[i], lr=lr[i], update_ratio=1e-3, val_loss=loss[i] * 1.1)
            elif i % 10 == 0:
                m.update(i, train_loss=loss[i], grad_norm=grad[i], lr=lr[i], update_ratio=1e-3)
            else:
                m.update(i, train_loss=loss[i], grad_norm=grad[i], lr=lr[i])
        per_step.append((time.perf_counter() - t0) / block)
        if (start + block) % (n // 10) == 0:
            memory.append((start + block, len(pickle.dumps(m._state)) / 1024, rss_mb()))
    return statistics.median(per_step), memory, m


def bench_article(n, loss, grad):
    m = ArticleMonitor()
    block, per_step, memory = 10_000, [], []
    for start in range(0, n, block):
        t0 = time.perf_counter()
        for i in range(start, min(n, start + block)):
            val = loss[i] * 1.1 if i % 100 == 0 else None
            m.check(TrainingState(0, i, loss[i], val, grad[i]))
        per_step.append((time.perf_counter() - t0) / block)
        if (start + block) % (n // 10) == 0:
            memory.append((start + block, rss_mb()))
    return statistics.median(per_step), memory


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    args = ap.parse_args(argv)
    n = args.steps
    loss, grad, lr = make_run(n)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, numpy {np.__version__}")
    print(f"run: {n} steps (train loss, grad norm, lr every step; update ratio every 10; val every 100)")

    ours, memory, m = bench_ours(n, loss, grad, lr)
    print(f"\nours (Monitor, {len(m.config.enabled_codes())} rules): {ours * 1e6:.1f} us/step (median of 10k-step blocks)")
    print("  step        state (pickled KiB)   process RSS (MiB)")
    for step, kib, rss in memory:
        print(f"  {step:>9}   {kib:>10.1f}            {rss:>8.1f}")
    print(f"  episodes found: {len(m.episodes())}, health: {m.health}")

    art, amem = bench_article(n, loss, grad)
    print(f"\narticle (TrainingMonitor.check, 4 rules, full history): {art * 1e6:.1f} us/step")
    print("  step        process RSS (MiB)")
    for step, rss in amem:
        print(f"  {step:>9}   {rss:>8.1f}")
    print(f"\nratio ours/article per step: {ours / art:.1f}x "
          f"(ours runs {len(m.config.enabled_codes())} rules on 5 signals; the article 4 rules)")


if __name__ == "__main__":
    main()
