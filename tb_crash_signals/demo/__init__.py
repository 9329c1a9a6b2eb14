"""Demo logs from real (small) training runs, one crash story per run.

``python -m tb_crash_signals.demo OUTDIR`` (or ``tb-crash-signals demo
OUTDIR``) trains small networks with plain numpy -- forward pass, backprop and
the optimisers (SGD, momentum, Adam, AdamW) are written out below -- on
synthetic data drawn from fixed seeds, and logs them with TensorBoard's own
``EventFileWriter`` in the tag styles of the common training stacks. No
number in the logs is made up: every value is what the training produced.

Runs (style: story):

- ``hf/healthy`` (HF Trainer): AdamW, warm-up + linear decay, max_grad_norm 1.
- ``custom/healthy`` (custom loop): SGD + Nesterov momentum, cosine decay;
  the update-ratio baseline (~5e-3 falling to ~5e-5).
- ``lightning/grad-explosion`` (Lightning): Wide & Deep regressor, plain SGD,
  linear LR warm-up over 2500 steps to a peak twice the stability limit, no
  clipping. Once the LR passes the limit the grad norm grows exponentially
  (doubling every ~17 steps for ~90 steps), crosses 100, the deep part
  blows up, the loss overflows to inf, then NaN.
- ``pytorch/abrupt-nan`` (PyTorch SummaryWriter): Adam classifier; one record
  with a -inf feature (log of a zero count) turns loss, gradients and weights
  NaN in one step, with no precursor.
- ``pytorch/loss-spikes`` (PyTorch SummaryWriter): SGD + momentum, no
  clipping; four corrupted batches (two with shuffled labels, two with
  unnormalised x16 inputs) spike the loss 3-8x; training recovers (fast after
  the label ones, over ~20 steps after the input ones).
- ``keras/overfit`` (Keras sibling runs ``train`` / ``validation``): 256 noisy
  samples, 2x512 MLP, Adam, 100 epochs: train loss -> ~0.03, validation loss
  bottoms out at epoch 5 and ends ~2.3x higher.
- ``lightning/plateau`` (Lightning): StepLR(step_size=30, gamma=0.5) stepped
  every batch instead of every epoch: the LR is ~1e-6 by step 300; train
  loss flat, validation loss frozen.
- ``custom/lr-too-high`` (custom loop): SGD + momentum with lr=1.0 (meant
  0.01), clipped: update ratio ~0.2 at every step, loss bouncing around
  1.3-1.5 (chance is ln 5 = 1.61), never converging.

Everything except wall times (and event file names) is deterministic: the
same scalar values at the same steps on every generation, bit for bit
(float32 arithmetic, fixed seeds, OpenBLAS pinned to one thread while
generating -- with more BLAS threads, or another BLAS, the last bits differ).
Each run directory gets exactly one event file; event files an earlier
generation left in the directories written here are removed first.

TensorBoard's writer computes CRC32C in pure Python, so the runs are short
(1-2.5k steps, ~33k scalar events in all, ~2 MB).
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

F32 = np.float32

# ---------------------------------------------------------------------------
# Tag styles
# ---------------------------------------------------------------------------

# signal -> tag, per writer style. Keras is handled separately (sibling runs).
HF_TAGS = {
    "train_loss": "train/loss",
    "grad_norm": "train/grad_norm",
    "lr": "train/learning_rate",
    "val_loss": "eval/loss",
    "epoch_frac": "train/epoch",  # fractional epoch, with every log
    "val_acc": "eval/accuracy",
}
LIGHTNING_TAGS = {
    "train_loss": "train_loss",
    "val_loss": "val_loss",
    "lr": "lr-Adam",
    "grad_norm": "grad_norm",
    "epoch_int": "epoch",  # Lightning adds the epoch to every logged step
    "val_acc": "val_acc",
}
PYTORCH_TAGS = {
    "train_loss": "Loss/train",
    "val_loss": "Loss/val",
    "grad_norm": "Grad/norm",
    "lr": "LR",
    "val_acc": "Accuracy/val",
}
CUSTOM_TAGS = {
    "train_loss": "loss/train",
    "val_loss": "loss/val",
    "grad_norm": "optim/grad_global_norm",
    "update_ratio": "optim/update_ratio",
    "lr": "optim/lr",
}


# ---------------------------------------------------------------------------
# Event writing (TensorBoard's own writer and protos)
# ---------------------------------------------------------------------------


def _clear_event_files(logdir: str) -> None:
    """Removes event files an earlier generation left in ``logdir``."""
    if os.path.isdir(logdir):
        for name in os.listdir(logdir):
            path = os.path.join(logdir, name)
            if "tfevents" in name and os.path.isfile(path):
                os.remove(path)


class ScalarWriter:
    """One event file in one run directory.

    ``tensor=False`` writes ``simple_value`` scalars as PyTorch's
    ``SummaryWriter`` (and HF / Lightning through it) does; ``tensor=True``
    writes TF2-style rank-0 DT_FLOAT tensors with ``scalars`` plugin metadata,
    as ``tf.summary.scalar`` (Keras' TensorBoard callback) does.
    """

    def __init__(self, logdir: str, tensor: bool = False):
        # TensorBoard is imported here, not at module level: importing this
        # module (e.g. for the CLI's argument parser) stays cheap.
        from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._event_pb2, self._summary_pb2 = event_pb2, summary_pb2
        self._tensor_pb2, self._shape_pb2, self._types_pb2 = (
            tensor_pb2, tensor_shape_pb2, types_pb2,
        )
        self._metadata = summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"),
            data_class=summary_pb2.DATA_CLASS_SCALAR,
        )
        self._tensor = tensor
        _clear_event_files(logdir)
        self._writer = EventFileWriter(logdir, max_queue_size=1000, flush_secs=30)
        self.n_events = 0

    def scalar(self, tag: str, value: float, step: int) -> None:
        spb = self._summary_pb2
        if self._tensor:
            val = spb.Summary.Value(
                tag=tag,
                tensor=self._tensor_pb2.TensorProto(
                    dtype=self._types_pb2.DT_FLOAT,
                    tensor_shape=self._shape_pb2.TensorShapeProto(),
                    float_val=[float(value)],
                ),
                metadata=self._metadata,
            )
        else:
            val = spb.Summary.Value(tag=tag, simple_value=float(value))
        self._writer.add_event(
            self._event_pb2.Event(
                wall_time=time.time(), step=int(step), summary=spb.Summary(value=[val])
            )
        )
        self.n_events += 1

    def close(self) -> None:
        self._writer.close()


class StyledLogger:
    """Logs signals under one style's tag names (signals without a tag are dropped)."""

    def __init__(self, logdir: str, tags: Dict[str, str]):
        self.tags = dict(tags)
        self.w = ScalarWriter(logdir)

    def log(self, signal: str, value: float, step: int) -> None:
        tag = self.tags.get(signal)
        if tag is not None:
            self.w.scalar(tag, value, step)

    def close(self) -> None:
        self.w.close()


# ---------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class Dataset:
    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray


def _teacher(rng, d_in, d_hidden, d_out):
    w1 = rng.standard_normal((d_in, d_hidden)) / np.sqrt(d_in)
    w2 = rng.standard_normal((d_hidden, d_out)) / np.sqrt(d_hidden)
    return lambda x: np.tanh(x @ w1 * 1.5) @ w2


def make_classification(
    seed: int, n_train: int, n_val: int, d: int = 10, k: int = 5, label_noise=0.05,
    teacher_hidden: int = 64,
) -> Dataset:
    """Gaussian inputs labelled by a random teacher MLP, with label noise."""
    rng = np.random.default_rng(seed)
    teacher = _teacher(rng, d, teacher_hidden, k)
    x = rng.standard_normal((n_train + n_val, d))
    y = np.argmax(teacher(x), axis=1)
    flip = rng.random(len(y)) < label_noise
    y[flip] = rng.integers(0, k, int(flip.sum()))
    x = x.astype(F32)
    return Dataset(x[:n_train], y[:n_train], x[n_train:], y[n_train:])


def make_regression(
    seed: int, n_train: int, n_val: int, d: int = 16, k: int = 1, n_wide: int = 0,
    wide_mean: float = 5.0,
) -> Dataset:
    """Gaussian inputs, smooth teacher targets plus noise.

    ``n_wide`` > 0 appends unstandardised features (log-counts: unit spread
    around a large mean ``wide_mean``) that contribute linearly to the target.
    """
    rng = np.random.default_rng(seed)
    teacher = _teacher(rng, d, 64, k)
    n = n_train + n_val
    x = rng.standard_normal((n, d))
    y = teacher(x) * 2.0 + 0.1 * rng.standard_normal((n, k))
    if n_wide:
        u = wide_mean + rng.standard_normal((n, n_wide))
        w_true = rng.standard_normal((n_wide, k)) * 0.5
        y = y + (u - wide_mean) @ w_true
        x = np.concatenate([x, u], axis=1)
    x = x.astype(F32)
    y = y.astype(F32)
    return Dataset(x[:n_train], y[:n_train], x[n_train:], y[n_train:])


class Batches:
    """Shuffled mini-batches, epoch after epoch (drop_last)."""

    def __init__(self, n: int, batch_size: int, rng):
        self.n, self.bs, self.rng = n, batch_size, rng
        self.per_epoch = n // batch_size
        self.epoch = 0
        self._order = rng.permutation(n)
        self._i = 0

    def next(self) -> np.ndarray:
        if self._i >= self.per_epoch:
            self.epoch += 1
            self._order = self.rng.permutation(self.n)
            self._i = 0
        idx = self._order[self._i * self.bs : (self._i + 1) * self.bs]
        self._i += 1
        return idx

    @property
    def end_of_epoch(self) -> bool:
        return self._i >= self.per_epoch


# ---------------------------------------------------------------------------
# Model, losses, optimisers
# ---------------------------------------------------------------------------


class MLP:
    """Fully connected network (ReLU or tanh), float32, He / Xavier init."""

    def __init__(self, sizes: Sequence[int], rng, init_gain: float = 1.0, act: str = "relu"):
        self.act = act
        gain = 2.0 if act == "relu" else 1.0
        self.params: List[np.ndarray] = []
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            w = rng.standard_normal((fan_in, fan_out)) * (init_gain * np.sqrt(gain / fan_in))
            self.params += [w.astype(F32), np.zeros(fan_out, F32)]

    @property
    def n_layers(self) -> int:
        return len(self.params) // 2

    def forward(self, x: np.ndarray):
        acts = [x]
        h = x
        with np.errstate(invalid="ignore", over="ignore"):
            for i in range(self.n_layers):
                w, b = self.params[2 * i], self.params[2 * i + 1]
                z = h @ w + b
                if i == self.n_layers - 1:
                    h = z
                elif self.act == "relu":
                    h = np.maximum(z, 0)
                else:
                    h = np.tanh(z)
                acts.append(h)
        return h, acts

    def backward(self, acts, dout: np.ndarray) -> List[np.ndarray]:
        grads: List[np.ndarray] = [None] * len(self.params)  # type: ignore
        d = dout
        with np.errstate(invalid="ignore", over="ignore"):
            for i in reversed(range(self.n_layers)):
                h_in = acts[i]
                grads[2 * i] = h_in.T @ d
                grads[2 * i + 1] = d.sum(axis=0)
                if i > 0:
                    d = d @ self.params[2 * i].T
                    if self.act == "relu":
                        d = d * (acts[i] > 0)
                    else:
                        d = d * (1 - acts[i] * acts[i])
        return grads


class WideDeep:
    """Wide & Deep regressor: an MLP on the dense features plus a linear
    ("wide") part on raw, unstandardised features.

    The input is ``[dense | wide]`` column-wise; ``n_wide`` trailing columns
    feed the linear part. Its curvature is fixed by the raw feature scale
    (lambda_max ~ 2 * n_wide * mean^2), so once the learning rate passes the
    stability limit (2 / lambda_max for plain SGD) the error along that
    direction flips sign and grows by a factor |1 - lr * lambda| every step:
    the textbook exponential gradient-norm growth before an explosion.
    ``deep_scale`` multiplies the deep part's output (an output multiplier):
    it keeps the deep ReLU stack out of that sharp direction, so it cannot
    self-stabilise the oscillation (the "catapult"), while its gradients
    still blow it up once the residuals are huge -- then the loss overflows.
    """

    def __init__(self, sizes: Sequence[int], n_wide: int, rng, act: str = "relu",
                 deep_scale: float = 1.0):
        self.deep = MLP(sizes, rng, act=act)
        self.n_wide = n_wide
        self.deep_scale = F32(deep_scale)
        self.params = self.deep.params + [np.zeros((n_wide, sizes[-1]), F32)]

    def forward(self, x: np.ndarray):
        xd, xw = x[:, : -self.n_wide], x[:, -self.n_wide :]
        with np.errstate(invalid="ignore", over="ignore"):
            out, acts = self.deep.forward(xd)
            return self.deep_scale * out + xw @ self.params[-1], (acts, xw)

    def backward(self, cache, dout: np.ndarray) -> List[np.ndarray]:
        acts, xw = cache
        with np.errstate(invalid="ignore", over="ignore"):
            return self.deep.backward(acts, self.deep_scale * dout) + [xw.T @ dout]


def softmax_xent(logits: np.ndarray, y: np.ndarray):
    """Mean cross-entropy (log-softmax, numerically stable) and d/dlogits."""
    with np.errstate(invalid="ignore", over="ignore"):
        z = logits - logits.max(axis=1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        n = logits.shape[0]
        loss = -logp[np.arange(n), y].mean()
        d = np.exp(logp)
        d[np.arange(n), y] -= 1.0
    return float(loss), (d / n).astype(F32)


def mse(pred: np.ndarray, y: np.ndarray):
    with np.errstate(invalid="ignore", over="ignore"):
        diff = pred - y
        loss = float(np.mean(diff * diff))
        d = (2.0 / diff.size) * diff
    return loss, d.astype(F32)


def global_norm(arrs: Sequence[np.ndarray]) -> float:
    with np.errstate(invalid="ignore", over="ignore"):
        return float(np.sqrt(sum(float(np.sum(a.astype(np.float64) ** 2)) for a in arrs)))


def clip_by_global_norm(grads, max_norm: float, norm: float):
    """As ``torch.nn.utils.clip_grad_norm_``: rescale to ``max_norm`` when the
    global norm exceeds it; a non-finite norm makes every gradient NaN."""
    if not np.isfinite(norm):
        return [g * F32(np.nan) for g in grads]
    if norm > max_norm:
        scale = F32(max_norm / (norm + 1e-6))
        return [g * scale for g in grads]
    return grads


class SGD:
    def __init__(self, params, momentum=0.0, weight_decay=0.0, nesterov=False):
        self.momentum, self.wd, self.nesterov = momentum, weight_decay, nesterov
        self.buf = [np.zeros_like(p) for p in params]

    def step(self, params, grads, lr: float) -> None:
        lr = F32(lr)
        with np.errstate(invalid="ignore", over="ignore"):
            for p, g, b in zip(params, grads, self.buf):
                if self.wd:
                    g = g + F32(self.wd) * p
                if self.momentum:
                    b *= F32(self.momentum)
                    b += g
                    g = g + F32(self.momentum) * b if self.nesterov else b
                p -= lr * g


class Adam:
    """Adam; ``decoupled=True`` makes it AdamW."""

    def __init__(self, params, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled=False):
        self.b1, self.b2 = betas
        self.eps, self.wd, self.decoupled = eps, weight_decay, decoupled
        self.m = [np.zeros_like(p) for p in params]
        self.v = [np.zeros_like(p) for p in params]
        self.t = 0

    def step(self, params, grads, lr: float) -> None:
        self.t += 1
        b1, b2 = F32(self.b1), F32(self.b2)
        c1 = 1.0 - self.b1 ** self.t
        c2 = 1.0 - self.b2 ** self.t
        with np.errstate(invalid="ignore", over="ignore"):
            for p, g, m, v in zip(params, grads, self.m, self.v):
                if self.wd and not self.decoupled:
                    g = g + F32(self.wd) * p
                if self.wd and self.decoupled:
                    p *= F32(1.0 - lr * self.wd)
                m *= b1
                m += (1 - b1) * g
                v *= b2
                v += (1 - b2) * (g * g)
                p -= F32(lr / c1) * m / (np.sqrt(v / F32(c2)) + F32(self.eps))


def update_ratio(before: Sequence[np.ndarray], after: Sequence[np.ndarray]) -> float:
    """||theta_after - theta_before|| / ||theta_before|| over all parameters."""
    delta = global_norm([a - b for a, b in zip(after, before)])
    return delta / max(global_norm(before), 1e-12)


def evaluate(model, x, y, kind: str = "ce", batch: int = 1000):
    """Mean loss and accuracy over a whole split (accuracy 0 for regression)."""
    losses, correct, n = [], 0, 0
    for i in range(0, len(x), batch):
        out, _ = model.forward(x[i : i + batch])
        if kind == "ce":
            loss, _ = softmax_xent(out, y[i : i + batch])
            with np.errstate(invalid="ignore"):
                correct += int((np.argmax(out, axis=1) == y[i : i + batch]).sum())
        else:
            loss, _ = mse(out, y[i : i + batch])
        losses.append(loss * len(out))
        n += len(out)
    return float(np.sum(losses) / n), correct / n


# ---------------------------------------------------------------------------
# Learning-rate schedules
# ---------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------
# A generic training loop
# ---------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------
# The runs
# ---------------------------------------------------------------------------

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


def main(argv: Optional[Sequence[str]] = None) -> int:
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m tb_crash_signals.demo",
        description="Train small numpy models and write demo TensorBoard logs.",
    )
    p.add_argument("outdir", help="directory to write the runs into (created if missing)")
    p.add_argument("--run", action="append", choices=sorted(RUNS), help="only this run (repeatable)")
    args = p.parse_args(argv)
    t0 = time.time()
    names = generate(args.outdir, args.run)
    for n in names:
        print(n)
    print(f"wrote {len(names)} runs to {args.outdir} in {time.time() - t0:.1f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
