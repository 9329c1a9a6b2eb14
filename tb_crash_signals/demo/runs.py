"""The demo runs, one crash story each, and their generation."""

from __future__ import annotations

import contextlib
import glob
import os
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from tb_crash_signals.demo.data import Batches, make_classification, make_regression
from tb_crash_signals.demo.nn import MLP, SGD, Adam, WideDeep, evaluate, softmax_xent
from tb_crash_signals.demo.training import LoopConfig, train, warmup_cosine, warmup_linear
from tb_crash_signals.demo.writer import CUSTOM_TAGS, HF_TAGS, LIGHTNING_TAGS, PYTORCH_TAGS, ScalarWriter, StyledLogger

F32 = np.float32


RunFn = Callable[[str], dict]
RUNS: Dict[str, RunFn] = {}


def _run(name: str):
    def deco(fn):
        RUNS[name] = fn
        return fn

    return deco


def _train_logged(model, opt, data, cfg, rng, outdir: str, run: str, tags: Dict[str, str],
                  **overrides):
    """Trains with `train`, logging in a tag style (overrides rename single tags)."""
    lg = StyledLogger(os.path.join(outdir, *run.split("/")), {**tags, **overrides})
    try:
        return train(model, opt, data, cfg, lg.log, rng)
    finally:
        lg.close()


@_run("hf/healthy")
def run_hf_healthy(outdir: str) -> dict:
    """HF Trainer defaults: AdamW, linear warm-up then decay, max_grad_norm=1."""
    rng = np.random.default_rng(101)
    data = make_classification(1, 20000, 1000, d=10, label_noise=0.05)
    model = MLP([10, 128, 128, 5], rng)
    opt = Adam(model.params, weight_decay=0.01, decoupled=True)
    steps = 1500
    cfg = LoopConfig(
        steps=steps, batch_size=64, lr=warmup_linear(2e-3, 100, steps), clip=1.0,
        eval_every=100, first_step=1,
    )
    return _train_logged(model, opt, data, cfg, rng, outdir, "hf/healthy", HF_TAGS)


@_run("custom/healthy")
def run_custom_healthy(outdir: str) -> dict:
    """Hand-written loop: SGD + Nesterov momentum, cosine decay, weight decay."""
    rng = np.random.default_rng(202)
    data = make_classification(2, 20000, 1000, d=10, label_noise=0.05)
    model = MLP([10, 128, 128, 5], rng)
    opt = SGD(model.params, momentum=0.9, weight_decay=5e-4, nesterov=True)
    steps = 1500
    cfg = LoopConfig(
        steps=steps, batch_size=64, lr=warmup_cosine(0.05, 50, steps, floor=5e-4),
        clip=5.0, eval_every=100,
    )
    return _train_logged(model, opt, data, cfg, rng, outdir, "custom/healthy", CUSTOM_TAGS)


@_run("lightning/grad-explosion")
def run_lightning_grad_explosion(outdir: str) -> dict:
    """Wide & Deep regressor, plain SGD, LR warm-up over 2500 steps to 0.01.

    The wide part sees unstandardised features (mean 5), so the loss has one
    sharp direction with curvature ~400: plain SGD is stable only for
    lr < ~2/400 = 0.005, which the warm-up reaches around steps 1150-1250.
    From there the error along that direction flips sign and grows every
    step (the growth rate rising with the LR): the grad norm grows
    exponentially from ~3 at step ~1140 to 100 at step 1225 while the loss
    barely moves until ~1190; then the deep ReLU part blows up, the loss
    overflows to inf (step 1350) and turns NaN (1351); the job is killed 30
    steps later (no early stopping configured).
    Lightning: ``grad_2.0_norm_total`` from ``grad_norm(self, 2)``,
    ``lr-SGD`` from ``LearningRateMonitor``, validation every epoch.
    """
    rng = np.random.default_rng(9)
    data = make_regression(3, 8000, 1000, n_wide=8, wide_mean=5.0)
    model = WideDeep([16, 64, 64, 64, 1], 8, rng, act="relu", deep_scale=0.2)
    opt = SGD(model.params)
    cfg = LoopConfig(
        steps=2500, batch_size=512, kind="mse",
        lr=lambda it: 0.01 * min(1.0, (it + 1) / 2500),
        stop_on_nonfinite_val=False, nan_patience=30,
    )
    return _train_logged(
        model, opt, data, cfg, rng, outdir, "lightning/grad-explosion", LIGHTNING_TAGS,
        lr="lr-SGD", grad_norm="grad_2.0_norm_total", val_acc=None,
    )


def _inf_record_at(step_bad: int, row: int = 17):
    """A corrupted record: one feature is -inf (log of a zero count)."""

    def corrupt(step, xb, yb, rng):
        if step == step_bad:
            xb = xb.copy()
            xb[row, 3] = -np.inf
        return xb, yb

    return corrupt


@_run("pytorch/abrupt-nan")
def run_pytorch_abrupt_nan(outdir: str) -> dict:
    """Adam classifier; at step 1137 one record carries -inf -> NaN at once."""
    rng = np.random.default_rng(303)
    data = make_classification(4, 20000, 1000, d=10, label_noise=0.05)
    model = MLP([10, 128, 128, 5], rng)
    opt = Adam(model.params)
    cfg = LoopConfig(
        steps=2000, batch_size=64, lr=lambda it: 1e-3, eval_every=200,
        corrupt=_inf_record_at(1137),
    )
    return _train_logged(model, opt, data, cfg, rng, outdir, "pytorch/abrupt-nan", PYTORCH_TAGS)


SCALE = 16.0
LOSS_SPIKE_STEPS = {420: "shuffled labels", 780: "unnormalised inputs (x16)",
                    1130: "shuffled labels", 1390: "unnormalised inputs (x16)"}


def _bad_batches(spec: Dict[int, str]):
    def corrupt(step, xb, yb, rng):
        what = spec.get(step)
        if what is None:
            return xb, yb
        if what.startswith("shuffled"):
            return xb, rng.permutation(yb)
        return xb * F32(SCALE), yb

    return corrupt


@_run("pytorch/loss-spikes")
def run_pytorch_loss_spikes(outdir: str) -> dict:
    """SGD + momentum, no clipping; four corrupted batches spike the loss."""
    rng = np.random.default_rng(404)
    data = make_classification(5, 20000, 1000, d=10, label_noise=0.05)
    model = MLP([10, 128, 128, 5], rng)
    opt = SGD(model.params, momentum=0.9)
    cfg = LoopConfig(
        steps=1600, batch_size=64, lr=lambda it: 0.02, eval_every=200,
        corrupt=_bad_batches(LOSS_SPIKE_STEPS),
    )
    return _train_logged(model, opt, data, cfg, rng, outdir, "pytorch/loss-spikes", PYTORCH_TAGS)


@_run("lightning/plateau")
def run_lightning_plateau(outdir: str) -> dict:
    """Adam + StepLR(step_size=30, gamma=0.5) stepped every batch, not every epoch.

    The LR halves every 30 steps: ~1e-6 by step 300, ~1e-9 by step 600. The
    model stops learning early; train and validation loss go flat.
    """
    rng = np.random.default_rng(505)
    data = make_classification(6, 4000, 1000, d=10, label_noise=0.05)
    model = MLP([10, 128, 128, 5], rng)
    opt = Adam(model.params)
    cfg = LoopConfig(
        steps=1500, batch_size=64, lr=lambda it: 1e-3 * 0.5 ** (it // 30),
    )
    return _train_logged(model, opt, data, cfg, rng, outdir, "lightning/plateau", LIGHTNING_TAGS)


@_run("custom/lr-too-high")
def run_custom_lr_too_high(outdir: str) -> dict:
    """SGD + momentum 0.9 with lr=1.0 (meant 0.01), weight decay 0.05, clip 1.

    Clipping keeps it from blowing up, but every step moves the weights by
    ~20 % of their norm (weight decay holds the norm down while the huge steps
    push it up): the loss bounces around 1.3-1.5 (chance is ln 5 = 1.61; the
    healthy runs reach ~0.4) and never settles.
    """
    rng = np.random.default_rng(606)
    data = make_classification(7, 20000, 1000, d=10, label_noise=0.05)
    model = MLP([10, 128, 128, 5], rng)
    opt = SGD(model.params, momentum=0.9, weight_decay=0.05)
    cfg = LoopConfig(
        steps=1500, batch_size=64, lr=lambda it: 1.0, clip=1.0, eval_every=100,
    )
    return _train_logged(model, opt, data, cfg, rng, outdir, "custom/lr-too-high", CUSTOM_TAGS)


@_run("keras/overfit")
def run_keras_overfit(outdir: str) -> dict:
    """model.fit on 256 noisy samples with a 2x512 MLP, Adam, 100 epochs.

    Keras' TensorBoard callback (update_freq="batch") writes sibling runs
    ``keras/overfit/train`` (``batch_loss`` per batch: the running mean of
    the epoch so far, as Keras reports it; ``epoch_loss``,
    ``epoch_accuracy``, ``epoch_learning_rate`` per epoch) and
    ``keras/overfit/validation`` (``epoch_loss``, ``epoch_accuracy``), as
    TF2 tensor summaries. Epoch summaries use the 0-based epoch as step,
    batch summaries the 1-based global batch count.
    """
    rng = np.random.default_rng(707)
    data = make_classification(8, 256, 1000, d=4, label_noise=0.15, teacher_hidden=16)
    model = MLP([4, 512, 512, 5], rng)
    opt = Adam(model.params)
    lr = 1e-3
    base = os.path.join(outdir, "keras", "overfit")
    wt = ScalarWriter(os.path.join(base, "train"), tensor=True)
    wv = ScalarWriter(os.path.join(base, "validation"), tensor=True)
    batches = Batches(len(data.x_train), 32, rng)
    gstep = 0
    try:
        for epoch in range(100):
            tot, n_ok, n = 0.0, 0, 0
            for _ in range(batches.per_epoch):
                idx = batches.next()
                xb, yb = data.x_train[idx], data.y_train[idx]
                out, acts = model.forward(xb)
                loss, dout = softmax_xent(out, yb)
                opt.step(model.params, model.backward(acts, dout), lr)
                gstep += 1
                tot += loss * len(idx)
                n_ok += int((np.argmax(out, axis=1) == yb).sum())
                n += len(idx)
                wt.scalar("batch_loss", tot / n, gstep)
            vloss, vacc = evaluate(model, data.x_val, data.y_val)
            wt.scalar("epoch_loss", tot / n, epoch)
            wt.scalar("epoch_accuracy", n_ok / n, epoch)
            wt.scalar("epoch_learning_rate", lr, epoch)
            wv.scalar("epoch_loss", vloss, epoch)
            wv.scalar("epoch_accuracy", vacc, epoch)
    finally:
        wt.close()
        wv.close()
    return {"run_names": ["keras/overfit/train", "keras/overfit/validation"]}


@contextlib.contextmanager
def _blas_single_thread():
    """Runs the block with OpenBLAS limited to one thread.

    The matrices here are tiny (a batch of 64 through 128 units): OpenBLAS'
    threads cost far more than they give (48 s instead of 16 s for the whole
    demo on two busy cores). numpy bundles OpenBLAS under a prefixed name; we
    find it next to numpy and call its setter through ctypes, as threadpoolctl
    does. Any failure leaves the thread count alone: slower, and the last
    bits of the logged values may differ from a single-threaded generation.
    """
    setter = prev = None
    try:
        import ctypes

        base = os.path.dirname(np.__file__)
        paths = glob.glob(os.path.join(base, os.pardir, "numpy.libs", "*openblas*"))
        paths += glob.glob(os.path.join(base, ".dylibs", "*openblas*"))
        for path in paths:
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                continue
            for prefix in ("scipy_openblas", "openblas"):
                for suffix in ("64_", "_64_", ""):
                    get = getattr(lib, f"{prefix}_get_num_threads{suffix}", None)
                    put = getattr(lib, f"{prefix}_set_num_threads{suffix}", None)
                    if get is not None and put is not None:
                        get.restype = ctypes.c_int
                        prev, setter = int(get()), put
                        break
                if setter is not None:
                    break
            if setter is not None:
                break
        if setter is not None:
            setter(1)
    except Exception:
        setter = None
    try:
        yield
    finally:
        if setter is not None and prev:
            setter(prev)


def generate(outdir: str, runs: Optional[Sequence[str]] = None) -> List[str]:
    """Trains every demo run (or only ``runs``) and writes its logs under ``outdir``.

    Returns the TensorBoard run names written, in order (Keras runs give two:
    ``X/train`` and ``X/validation``). Raises ``KeyError`` for an unknown run
    and ``OSError`` if ``outdir`` cannot be written.
    """
    names: List[str] = []
    with _blas_single_thread():
        for name in runs if runs is not None else list(RUNS):
            facts = RUNS[name](outdir)
            names.extend(facts.get("run_names", [name]))
    return names
