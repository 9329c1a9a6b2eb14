"""The framework callbacks' cost next to the tiny models' training step.

    KERAS_BACKEND=torch python bench/bench_callbacks.py [--repeats 3] [--long] [--check-every 10]
        [--grad-every 10] [--background true|false]

Trains the healthy runs of tests/integration/frameworks (a tiny GPT-2 under the
HuggingFace Trainer, a tiny MLP under Lightning and under Keras 3 on torch, CPU)
with the callback (Lightning logging every 50 steps, its default), timing the
time spent inside its hooks (Monitor updates, gradient norm, update ratio,
logging) against the run's wall time per step, warm-up included ("share": of the
whole fit(), the trainer's setup and teardown included), and against the training
loop alone ("share of the loop": from the first training step's hook to the last's,
evaluations included). Each framework runs once to warm up, then --repeats times;
the medians of those are printed, with the CPU time the background Monitor's child process
spent per step (on another core: the loop does not wait for it).
--check-every is the callbacks' own option (the Monitor fed that many steps at once, or "auto",
their default);
--grad-every the Lightning and Keras callbacks' (the gradient norm measured every that
many steps, or "auto", their default); --background the callbacks' (the Monitor in a child
process: "auto", their default, or true / false).
--long trains each 10x longer (1 200 / 3 000 / 1 960 steps): a training run lasts minutes, and
what a callback costs once (the child process's start, bringing the Monitor back at the end)
weighs on a run of a second as it never does on one of minutes.
--without PART (repeatable) takes one part of the callbacks' work out, to see what it costs:
"feeds" (nothing reaches the Monitor: `Watch.give` returns at once), "sending" (the steps are
checked and held, then dropped instead of fed), "grad_norm" (never measured: Lightning's only at
the loggers' steps), "update_ratio" (never measured), "logging" (Lightning's writes of what it
measured to the trainer's loggers). A part a callback does not have is left alone. For the
measurements only: a callback without its feeds watches nothing.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import logging
import os
import platform
import resource
import statistics
import sys
import tempfile
import threading
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration", "frameworks"))
os.environ.setdefault("KERAS_BACKEND", "torch")
warnings.filterwarnings("ignore")

# Lightning's default log_every_n_steps: the callback writes its signals to the loggers then.
LIGHTNING_LOG_EVERY = 50
HOOKS = ("on_log", "on_before_optimizer_step", "on_train_batch_begin", "on_train_batch_end",
         "on_validation_end", "on_epoch_begin", "on_epoch_end", "on_train_epoch_start", "on_train_begin",
         "on_train_end", "on_fit_start", "on_fit_end")


def timed(callback, step_hook):
    """Wraps the callback's hooks with a clock. Returns the list the time goes into, and the
    (wall clock, time spent so far) taken after each call of `step_hook` (once a training step),
    from which the share of the training loop itself is read (setup and teardown left out)."""
    spent = [0.0]
    marks = []
    for name in HOOKS:
        hook = getattr(callback, name, None)
        if hook is None:
            continue

        @functools.wraps(hook)
        def wrapper(*args, _hook=hook, _mark=name == step_hook, **kwargs):
            t0 = time.perf_counter()
            try:
                return _hook(*args, **kwargs)
            finally:
                t1 = time.perf_counter()
                spent[0] += t1 - t0
                if _mark:
                    marks.append((t1, spent[0]))

        setattr(callback, name, wrapper)
    return spent, marks


def loop_share(marks) -> float:
    """The callback's share of the wall time from the first training step's hook to the last's."""
    (t0, s0), (t1, s1) = marks[0], marks[-1]
    return (s1 - s0) / (t1 - t0)


# --without: the callbacks' options that take a part out (those a callback takes).
WITHOUT_OPTIONS = {"grad_norm": {"grad_every": 10**9, "grad_norm": False}, "update_ratio": {"ratio_every": 0},
                   "logging": {"log_signals": False}}


def ablate(parts) -> None:
    """Takes the Watch's parts named in `parts` out of every callback (see --without)."""
    from tb_crash_signals.integrations import _watch

    if "feeds" in parts:
        _watch.Watch.give = lambda self, step, values: False
    if "sending" in parts:
        def drop(self, wait, urgent=False):
            self._pending = []

        _watch.Watch._send = drop


def made(cls, options):
    """cls(**options), with the options it does not take left out."""
    takes = inspect.signature(cls).parameters
    return cls(**{k: v for k, v in options.items() if k in takes})


def hf(out, scale=1, **options):  # the Trainer logs the gradient norm itself
    import test_hf

    from tb_crash_signals.integrations.hf import CrashSignalsCallback

    cb = made(CrashSignalsCallback, options)
    spent, marks = timed(cb, "on_log")  # logging_steps=1: once a step
    t0 = time.perf_counter()
    trainer = test_hf.train(out, cb, lr=0.5, steps=120 * scale, eval_steps=40 * scale)
    return time.perf_counter() - t0, spent[0], trainer.state.global_step, loop_share(marks)


def lightning(out, scale=1, **options):
    import test_lightning

    from tb_crash_signals.integrations.lightning import CrashSignals

    cb = made(CrashSignals, options)
    spent, marks = timed(cb, "on_train_batch_end")
    t0 = time.perf_counter()
    trainer = test_lightning.fit(out, cb, peak_lr=0.1, ramp=20, steps=300 * scale, log_every=LIGHTNING_LOG_EVERY)
    return time.perf_counter() - t0, spent[0], trainer.global_step, loop_share(marks)


def keras(out, scale=1, **options):
    import test_keras

    from tb_crash_signals.integrations.keras import CrashSignals

    cb = made(CrashSignals, options)
    spent, marks = timed(cb, "on_train_batch_end")
    t0 = time.perf_counter()
    model, _ = test_keras.fit(out, cb, lr=0.05, epochs=7 * scale)
    return time.perf_counter() - t0, spent[0], int(model.optimizer.iterations.value), loop_share(marks)


def children_cpu(wait: bool = False) -> float:
    """CPU seconds of this process's ended children: the background Monitor's process, once
    reaped (`wait`: after the reaper thread that waits for it has ended)."""
    deadline = time.monotonic() + 10
    while wait and time.monotonic() < deadline and any(
            t.name == "tb-crash-signals-reaper" for t in threading.enumerate()):
        time.sleep(0.01)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--check-every", default=None, help='N or "auto" (default: the callbacks\' own, "auto")')
    ap.add_argument("--grad-every", default=None, help='N or "auto" (default: each callback\'s own)')
    ap.add_argument("--background", choices=("auto", "true", "false"), default=None,
                    help='the Monitor in a child process (default: the callbacks\' own, "auto")')
    ap.add_argument("--long", action="store_true", help="train 10x longer (steady state)")
    ap.add_argument("--without", action="append", default=[], metavar="PART",
                    choices=("feeds", "sending", *WITHOUT_OPTIONS),
                    help="take a part of the callbacks' work out (repeatable; see the module)")
    args = ap.parse_args(argv)
    options = {}  # the callbacks' own
    if args.check_every is not None:
        options["check_every"] = args.check_every if args.check_every == "auto" else int(args.check_every)
    if args.grad_every is not None:
        options["grad_every"] = args.grad_every if args.grad_every == "auto" else int(args.grad_every)
    if args.background is not None:
        options["background"] = {"auto": "auto", "true": True, "false": False}[args.background]
    for part in args.without:
        options.update(WITHOUT_OPTIONS.get(part, {}))
    ablate(args.without)
    scale = 10 if args.long else 1
    logging.disable(logging.WARNING)
    import numpy as np
    import torch

    torch.set_num_threads(1)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, torch {torch.__version__} (1 thread), numpy {np.__version__}, "
          f"load average {os.getloadavg()[0]:.1f}; check_every={args.check_every or 'default'}, "
          f"grad_every={args.grad_every or 'default'}, background={args.background or 'default'}"
          f"{', 10x longer runs' if args.long else ''}"
          f"{', without ' + ', '.join(args.without) if args.without else ''}")
    print("framework   steps   step (wall)   callback per step   share of fit()   share of the loop   "
          "the child's CPU per step (background)")
    print("            (medians of the runs after a warm-up run; loop share min-max)")
    for name, run in (("HuggingFace", hf), ("Lightning", lightning), ("Keras 3", keras)):
        results = []
        # One run more, first, not counted: it pays the imports and first calls of everything
        # (its larger wall time made the smallest "share" of the runs a flattering figure).
        for _ in range(args.repeats + 1):
            before = children_cpu()
            with tempfile.TemporaryDirectory() as out:
                wall, spent, steps, loop = run(out, scale, **options)
            child = children_cpu(wait=True) - before
            results.append((spent / wall, wall / steps, spent / steps, steps, loop, child / steps))
        results = results[1:]
        med = [statistics.median(r[k] for r in results) for k in range(6)]
        loops = [r[4] for r in results]
        print(f"{name:<11} {int(med[3]):>5}   {med[1] * 1e3:8.2f} ms   {med[2] * 1e6:10.1f} us       "
              f"{med[0]:6.2%}          {med[4]:6.2%} ({min(loops):.2%}-{max(loops):.2%})   "
              f"{med[5] * 1e6:6.1f} us")

if __name__ == "__main__":
    main()
