"""The demo's learning-rate schedules and its generic training loop."""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import numpy as np

from tb_crash_signals.demo.data import Batches, Dataset
from tb_crash_signals.demo.nn import clip_by_global_norm, evaluate, global_norm, mse, softmax_xent, update_ratio

F32 = np.float32


# Learning-rate schedules


def warmup_linear(peak, warmup, total):
    def f(step):
        if step < warmup:
            return peak * (step + 1) / warmup
        return peak * max(0.0, (total - step) / max(1, total - warmup))

    return f


def warmup_cosine(peak, warmup, total, floor=0.0):
    def f(step):
        if step < warmup:
            return peak * (step + 1) / warmup
        t = min(1.0, (step - warmup) / max(1, total - warmup))
        return floor + (peak - floor) * 0.5 * (1 + np.cos(np.pi * t))

    return f


# A generic training loop


@dataclasses.dataclass
class LoopConfig:
    steps: int
    batch_size: int
    lr: Callable[[int], float]
    kind: str = "ce"  # "ce" classification, "mse" regression
    clip: Optional[float] = None
    eval_every: Optional[int] = None  # None: evaluate at the end of each epoch
    ratio_every: int = 10
    lr_every: int = 1
    nan_patience: int = 100  # stop this many steps after the first non-finite loss
    first_step: int = 0  # HF logs from step 1 (global_step after the update), others from 0
    stop_on_nonfinite_val: bool = True  # early stopping's check_finite / a NaN guard
    corrupt: Optional[Callable[[int, np.ndarray, np.ndarray, np.random.Generator], tuple]] = None


def train(model, opt, data: Dataset, cfg: LoopConfig, log: Callable, rng) -> dict:
    """Trains ``model`` and calls ``log(signal, value, step)`` like a real loop.

    Returns a small dict of facts (first non-finite step, ...) for the summary.
    """
    batches = Batches(len(data.x_train), cfg.batch_size, rng)
    first_bad = None
    for it in range(cfg.steps):
        step = it + cfg.first_step
        idx = batches.next()
        xb, yb = data.x_train[idx], data.y_train[idx]
        if cfg.corrupt is not None:
            xb, yb = cfg.corrupt(step, xb, yb, rng)
        out, acts = model.forward(xb)
        if cfg.kind == "ce":
            loss, dout = softmax_xent(out, yb)
        else:
            loss, dout = mse(out, yb)
        grads = model.backward(acts, dout)
        # the grad norm before clipping, as HF / Lightning / clip_grad_norm_ report it
        gnorm = global_norm(grads)
        if cfg.clip is not None:
            grads = clip_by_global_norm(grads, cfg.clip, gnorm)
        lr = cfg.lr(it)
        want_ratio = it % cfg.ratio_every == 0
        before = [p.copy() for p in model.params] if want_ratio else None
        opt.step(model.params, grads, lr)
        log("train_loss", loss, step)
        log("grad_norm", gnorm, step)
        if it % cfg.lr_every == 0:
            log("lr", lr, step)
        if want_ratio:
            log("update_ratio", update_ratio(before, model.params), step)
        end_epoch = batches.end_of_epoch
        do_eval = (
            (it + 1) % cfg.eval_every == 0 if cfg.eval_every else end_epoch
        ) or it == cfg.steps - 1
        log("epoch_frac", (it + 1) / batches.per_epoch, step)
        log("epoch_int", batches.epoch, step)
        vloss = 0.0
        if do_eval:
            vloss, vacc = evaluate(model, data.x_val, data.y_val, cfg.kind)
            log("val_loss", vloss, step)
            if cfg.kind == "ce":
                log("val_acc", vacc, step)
        if not np.isfinite(loss) and first_bad is None:
            first_bad = step
        if cfg.stop_on_nonfinite_val and not np.isfinite(vloss):
            break
        if first_bad is not None and step - first_bad >= cfg.nan_patience:
            break  # the engineer kills the job
    return {"first_nonfinite_step": first_bad, "last_step": step}
