"""Online monitor: per-step cost next to the article's check(), and memory over 1M steps.

    python bench/bench_monitor.py [--steps 1000000] [--timing-steps 200000]

Feeds the same synthetic run (fixed seed: train loss, grad norm and learning
rate every step, update ratio every 10, validation every 100) to our Monitor
with the full catalogue and to the article's TrainingMonitor (its four
rules, keeping every state). Per-step cost: both fed side by side in
alternating blocks of 5k steps, so both see the same machine load; the best
block (least disturbed by other jobs) and the median block are printed, and
their ratios. Memory: each alone over --steps, state size and process RSS as
the run grows.
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
from tb_crash_signals import Monitor
from tb_crash_signals.compat import TrainingState


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


def feed_ours(m, start, stop, loss, grad, lr):
    """One block of the training loop's calls: what the per-step time covers."""
    t0 = time.perf_counter()
    for i in range(start, stop):
        if i % 100 == 0:
            m.update(i, train_loss=loss[i], grad_norm=grad[i], lr=lr[i], update_ratio=1e-3, val_loss=loss[i] * 1.1)
        elif i % 10 == 0:
            m.update(i, train_loss=loss[i], grad_norm=grad[i], lr=lr[i], update_ratio=1e-3)
        else:
            m.update(i, train_loss=loss[i], grad_norm=grad[i], lr=lr[i])
    return (time.perf_counter() - t0) / (stop - start)


def feed_article(m, start, stop, loss, grad):
    # The article's states are built beforehand: only check() is timed.
    states = [
        TrainingState(0, i, loss[i], loss[i] * 1.1 if i % 100 == 0 else None, grad[i])
        for i in range(start, stop)
    ]
    t0 = time.perf_counter()
    for state in states:
        m.check(state)
    return (time.perf_counter() - t0) / (stop - start)


def timing(n, loss, grad, lr, block=5_000):
    """Both loops fed the same steps in alternating blocks, so both see the same load.

    Before each block, what exists is frozen out of Python's cyclic garbage
    collector (gc.freeze): otherwise the article's ever-growing history would be
    traversed by collections that our blocks' allocations trigger, and the
    other way round; each loop still pays for the collections of its own
    fresh objects.
    """
    ours, art = Monitor(), ArticleMonitor()
    t_ours, t_art = [], []
    for start in range(0, n, block):
        stop = min(n, start + block)
        gc.freeze()
        t_ours.append(feed_ours(ours, start, stop, loss, grad, lr))
        gc.freeze()
        t_art.append(feed_article(art, start, stop, loss, grad))
    gc.unfreeze()
    return t_ours, t_art, ours


def memory_ours(n, loss, grad, lr, block=10_000):
    m = Monitor()
    memory = []
    gc.collect()
    for start in range(0, n, block):
        feed_ours(m, start, min(n, start + block), loss, grad, lr)
        if (start + block) % (n // 10) == 0:
            memory.append((start + block, len(pickle.dumps(m._state)) / 1024, rss_mb()))
    return memory, m


def memory_article(n, loss, grad, block=10_000):
    m = ArticleMonitor()
    memory = []
    for start in range(0, n, block):
        feed_article(m, start, min(n, start + block), loss, grad)
        if (start + block) % (n // 10) == 0:
            memory.append((start + block, rss_mb()))
    return memory


def us(x):
    return f"{x * 1e6:.1f} us"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1_000_000, help="steps of the memory runs")
    ap.add_argument("--timing-steps", type=int, default=200_000, help="steps of the timing run")
    args = ap.parse_args(argv)
    n = max(args.steps, args.timing_steps)
    loss, grad, lr = make_run(n)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, numpy {np.__version__}, "
          f"load average {os.getloadavg()[0]:.1f}")
    print("run: train loss, grad norm, lr every step; update ratio every 10; val every 100")

    t_ours, t_art, m = timing(args.timing_steps, loss, grad, lr)
    rules = len(m.config.enabled_codes())
    print(f"\nper step, {args.timing_steps} steps in alternating blocks of 5k "
          f"(best block / median block):")
    print(f"  ours (Monitor.update, {rules} rules):         {us(min(t_ours))} / {us(statistics.median(t_ours))}")
    print(f"  article (TrainingMonitor.check, 4 rules): {us(min(t_art))} / {us(statistics.median(t_art))}")
    print(f"  ratio ours/article: {min(t_ours) / min(t_art):.1f}x / "
          f"{statistics.median(t_ours) / statistics.median(t_art):.1f}x")
    print(f"  episodes found: {len(m.episodes())}, health: {m.health}")

    memory, m = memory_ours(args.steps, loss, grad, lr)
    print(f"\nours over {args.steps} steps:")
    print("  step        state (pickled KiB)   process RSS (MiB)")
    for step, kib, rss in memory:
        print(f"  {step:>9}   {kib:>10.1f}            {rss:>8.1f}")

    amem = memory_article(args.steps, loss, grad)
    print(f"\narticle over {args.steps} steps (keeps every state):")
    print("  step        process RSS (MiB)")
    for step, rss in amem:
        print(f"  {step:>9}   {rss:>8.1f}")


if __name__ == "__main__":
    main()
