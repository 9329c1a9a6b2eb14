"""Small real training runs on CPU: data, models, learning-rate schedules and the training loop.

Kinds of model (all trained with real backprop in PyTorch, one thread):

- `mlp`: an MLP classifier (32 inputs, 10 classes from a random teacher network);
- `cnn`: a small CNN on 12x12 shifted noisy class templates;
- `gru`: a character-level GRU language model on an order-2 Markov text;
- `tfm`: a small causal character-level transformer (2 post-LN layers) on the same text;
- `reg`: an MLP regressor on a teacher network's output (MSE).

`train_run(RunSpec, logger)` trains one run and logs train loss, grad norm,
learning rate, validation loss and update ratio at the spec's cadence. The
spec reproduces what real runs do: tiny batches, long warm-ups, dynamic fp16
loss scaling (simulated with a GradScaler's rules: a step whose scaled
gradients would overflow fp16 is skipped and logged with a non-finite grad
norm, the scale halves, and doubles after every `growth_interval` good
steps), a loss scale that is never unscaled, gradient accumulation without
`zero_grad`, negative weight decay, corrupted batches, one-step learning-rate
mishaps, and a resume from a checkpoint that logs earlier steps again.
Nothing in this module is a label.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable

import numpy as np

KINDS = ("mlp", "cnn", "gru", "tfm", "reg")
VOCAB = 12
FP16_MAX = 65504.0


# ---------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class Task:
    x_train: object
    y_train: object
    x_val: object
    y_val: object
    loss: str  # "ce" | "mse" | "seq"


def _teacher(rng, d_in, d_out, hidden=64):
    w1 = rng.standard_normal((d_in, hidden)) / math.sqrt(d_in)
    w2 = rng.standard_normal((hidden, d_out)) / math.sqrt(hidden)
    return lambda x: np.tanh(x @ w1 * 1.5) @ w2


def _markov_text(rng, n, length, concentration):
    """n sequences of an order-2 Markov chain with a few likely successors per context."""
    trans = rng.dirichlet(np.full(VOCAB, concentration), size=VOCAB * VOCAB)
    cum = np.cumsum(trans, axis=1)
    seqs = np.empty((n, length + 1), np.int64)
    seqs[:, :2] = rng.integers(0, VOCAB, (n, 2))
    for t in range(2, length + 1):
        u = rng.random(n)[:, None]
        ctx = seqs[:, t - 2] * VOCAB + seqs[:, t - 1]
        seqs[:, t] = np.minimum((u > cum[ctx]).sum(axis=1), VOCAB - 1)
    return seqs


def make_task(kind: str, seed: int, n_train: int, label_noise: float, easy: bool = False) -> Task:
    """A task of the kind; `easy` makes one a small model can fit to a loss near zero."""
    import torch

    rng = np.random.default_rng(1000 + seed)
    n_val = 500 if kind in ("gru", "tfm") else 1000
    n = n_train + n_val
    if kind == "mlp" and easy:
        # separable Gaussian blobs: per-sample losses near 0 that vary several-fold with the margin
        d, k = 32, 10
        y = rng.integers(0, k, n)
        x = rng.standard_normal((k, d))[y] + 0.6 * rng.standard_normal((n, d))
        xt, yt = torch.tensor(x, dtype=torch.float32), torch.tensor(y)
        loss = "ce"
    elif kind == "mlp":
        d, k = 32, 10
        x = rng.standard_normal((n, d))
        noise = 0.3
        y = np.argmax(_teacher(rng, d, k)(x) + noise * rng.standard_normal((n, k)), axis=1)
        flip = rng.random(n) < label_noise
        y[flip] = rng.integers(0, k, int(flip.sum()))
        xt, yt = torch.tensor(x, dtype=torch.float32), torch.tensor(y)
        loss = "ce"
    elif kind == "reg":
        d = 16
        x = rng.standard_normal((n, d))
        y = _teacher(rng, d, 1)(x) * 2 + (0.02 if easy else 0.3 + label_noise) * rng.standard_normal((n, 1))
        y = (y - y.mean()) / y.std()
        xt, yt = torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)
        loss = "mse"
    elif kind == "cnn":
        k, side = 10, 12
        templates = rng.standard_normal((k, side + 4, side + 4))
        for _ in range(2):  # smooth the templates so shifts keep them recognisable
            templates = (templates + np.roll(templates, 1, 1) + np.roll(templates, 1, 2)) / 3
        y = rng.integers(0, k, n)
        dx, dy = rng.integers(0, 5, n), rng.integers(0, 5, n)
        x = np.stack([templates[c, a:a + side, b:b + side] for c, a, b in zip(y, dx, dy)])
        x = x / x.std() + (0.2 if easy else 1.2) * rng.standard_normal(x.shape)
        flip = rng.random(n) < label_noise
        y[flip] = rng.integers(0, k, int(flip.sum()))
        xt, yt = torch.tensor(x[:, None], dtype=torch.float32), torch.tensor(y)
        loss = "ce"
    elif kind in ("gru", "tfm"):
        length = 20 if kind == "gru" else 24
        seqs = _markov_text(rng, n, length, 0.02 if easy else 0.1)
        noise = rng.random(seqs.shape) < label_noise
        seqs[noise] = rng.integers(0, VOCAB, int(noise.sum()))
        xt, yt = torch.tensor(seqs[:, :-1]), torch.tensor(seqs[:, 1:])
        loss = "seq"
    else:
        raise ValueError(kind)
    return Task(xt[:n_train], yt[:n_train], xt[n_train:], yt[n_train:], loss)


# ---------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------


def make_model(kind: str, width: int, dead: bool = False, init_scale: float = 1.0, depth: int = 2):
    import torch
    from torch import nn

    if kind in ("mlp", "reg"):
        d_in, d_out = (32, 10) if kind == "mlp" else (16, 1)
        layers, d = [], d_in
        for _ in range(depth):
            layers += [nn.Linear(d, width), nn.ReLU()]
            d = width
        m = nn.Sequential(*layers, nn.Linear(d, d_out))
    elif kind == "cnn":
        m = nn.Sequential(nn.Conv2d(1, 8, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 16, 3),
                          nn.ReLU(), nn.Flatten(), nn.Linear(16 * 3 * 3, width), nn.ReLU(),
                          nn.Linear(width, 10))
    elif kind == "gru":
        m = CharGRU(width)
    elif kind == "tfm":
        m = CharTransformer(width)
    else:
        raise ValueError(kind)
    if init_scale != 1.0:
        with torch.no_grad():
            for p in m.parameters():
                if p.dim() > 1:
                    p.mul_(init_scale)
    if dead:
        # A bad initialisation: every hidden ReLU starts (and stays) dead.
        mods = [mod for mod in m.modules() if isinstance(mod, (nn.Linear, nn.Conv2d))]
        with torch.no_grad():
            for mod in mods[:-1]:
                mod.bias.fill_(-6.0)
    return m


def _nn():
    from torch import nn
    return nn


class CharGRU(_nn().Module):
    def __init__(self, width):
        nn = _nn()
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 16)
        self.gru = nn.GRU(16, width, batch_first=True)
        self.head = nn.Linear(width, VOCAB)

    def forward(self, x):
        h, _ = self.gru(self.emb(x))
        return self.head(h)


class CharTransformer(_nn().Module):
    """Two post-LN causal self-attention layers (the layout that needs a warm-up)."""

    def __init__(self, width, layers=2, heads=2, length=24):
        import torch
        nn = _nn()
        super().__init__()
        self.emb = nn.Embedding(VOCAB, width)
        self.pos = nn.Parameter(torch.randn(length, width) * 0.1)
        layer = nn.TransformerEncoderLayer(width, heads, 2 * width, dropout=0.0, batch_first=True)
        self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, VOCAB)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(length))

    def forward(self, x):
        n = x.shape[1]
        h = self.body(self.emb(x) + self.pos[:n], mask=self.mask[:n, :n], is_causal=True)
        return self.head(h)


def loss_fn(task: Task):
    import torch.nn.functional as F

    if task.loss == "ce":
        return F.cross_entropy
    if task.loss == "mse":
        return F.mse_loss
    return lambda out, y: F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


# ---------------------------------------------------------------------------
# Learning-rate schedules (functions of the step)
# ---------------------------------------------------------------------------


def constant(lr):
    return lambda t: lr


def warmup_cosine(peak, warmup, total, floor=0.02):
    def f(t):
        if t < warmup:
            return peak * (t + 1) / warmup
        q = min(1.0, (t - warmup) / max(1, total - warmup))
        return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * q)))
    return f


def step_decay(lr, milestones, gamma):
    return lambda t: lr * gamma ** sum(t >= m for m in milestones)


def ramp(start, end, total, power=1.0):
    return lambda t: start + (end - start) * (min(t, total) / total) ** power


def exponential(start, factor_per_run, total):
    """start * factor_per_run ** (t / total): an exponential ramp (an LR range test)."""
    return lambda t: start * factor_per_run ** (t / total)


def cyclic(low, high, half_period):
    """Triangular cyclic learning rate between low and high."""
    def f(t):
        q = (t % (2 * half_period)) / half_period
        return low + (high - low) * (q if q <= 1 else 2 - q)
    return f


def warm_restarts(peak, period, floor=0.0):
    """Cosine annealing with warm restarts (SGDR; PyTorch's CosineAnnealingWarmRestarts with
    T_mult=1): peak -> floor x peak over each period, then back to the peak at once."""
    def f(t):
        q = (t % period) / period
        return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * q)))
    return f


def one_cycle(peak, total, pct_up=0.3, div=25.0, final_div=1e3):
    """PyTorch's OneCycleLR (cosine annealing): peak/div -> peak -> peak/(div*final_div)."""
    up = int(total * pct_up)

    def f(t):
        if t < up:
            q, a, b = t / up, peak / div, peak
        else:
            q, a, b = (t - up) / max(1, total - up), peak, peak / (div * final_div)
        return b + (a - b) * 0.5 * (1 + math.cos(math.pi * q))
    return f


def piecewise(*parts):
    """parts = (f0, t1, f1, t2, f2, ...): f0 before t1, f1 from t1, ..."""
    fs, ts = parts[0::2], parts[1::2]
    return lambda t: fs[sum(t >= x for x in ts)](t)


# ---------------------------------------------------------------------------
# A run
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class RunSpec:
    """How one run is trained and logged. Nothing here is used as a label."""

    kind: str
    seed: int
    steps: int = 1000
    opt: str = "adam"                    # adam | adamw | sgd
    lr: Callable[[int], float] = dataclasses.field(default_factory=lambda: constant(1e-3))
    momentum: float = 0.9
    betas: tuple = (0.9, 0.999)
    clip: float | None = 1.0
    batch: int = 64
    n_train: int = 16000
    label_noise: float = 0.05
    easy: bool = False
    width: int = 96
    depth: int = 2
    init_scale: float = 1.0
    weight_decay: float = 0.0
    neg_weight_decay: float = 0.0        # p <- p * (1 + lr * this) after each step (a sign bug)
    dead: bool = False
    corrupt: dict = dataclasses.field(default_factory=dict)    # step -> "scale" | "labels" | "huge"
    lr_mult: dict = dataclasses.field(default_factory=dict)    # step -> one-step LR multiplier
    fp16: dict | None = None             # {"init": 2**16, "growth_interval": 100, "nan": False}
    scale_bug: dict | None = None        # {"init": 1, "every": 50}: loss scale grows, never unscaled
    accumulate_bug: bool = False         # gradients never zeroed
    resume: tuple | None = None          # (stop_at, checkpoint_at): restart from a checkpoint
    log_every: int = 1
    eval_every: int = 50
    keras_epoch: int = 20                # steps per Keras "epoch"
    nan_guard: int = 30                  # the job stops this many steps after a non-finite loss


def _optimizer(spec: RunSpec, params):
    import torch

    if spec.opt == "sgd":
        return torch.optim.SGD(params, lr=1.0, momentum=spec.momentum, weight_decay=spec.weight_decay)
    if spec.opt == "adamw":
        return torch.optim.AdamW(params, lr=1.0, betas=spec.betas, weight_decay=spec.weight_decay)
    return torch.optim.Adam(params, lr=1.0, betas=spec.betas, weight_decay=spec.weight_decay)


def _corrupt(task, xb, yb, how, g):
    import torch

    if how == "scale":
        if xb.dtype.is_floating_point:
            return xb * 6.0, yb
        return torch.randint(0, VOCAB, xb.shape, generator=g), yb  # scrambled text
    if how == "labels":
        if task.loss == "mse":
            return xb, yb * 8.0
        if yb.dim() == 1:
            return xb, yb[torch.randperm(yb.shape[0], generator=g)]
        return xb, torch.randint(0, VOCAB, yb.shape, generator=g)
    if how == "repeat":  # a batch of one repeated character predicting random ones
        return torch.full_like(xb, int(xb.flatten()[0])), torch.randint(0, VOCAB, yb.shape, generator=g)
    raise ValueError(how)


class _State:
    """Everything a checkpoint restores."""

    def __init__(self, model, opt, rng_state, perm, pos, scale, good):
        self.model = copy.deepcopy(model.state_dict())
        self.opt = copy.deepcopy(opt.state_dict())
        self.rng, self.perm, self.pos, self.scale, self.good = rng_state, perm.clone(), pos, scale, good


def train_run(spec: RunSpec, logger, opt_name_out: list | None = None) -> dict:
    """Trains `spec`, logging through `logger`. Returns {"stopped_at", "resumed_at", "overflows"}."""
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(spec.seed)
    g = torch.Generator().manual_seed(spec.seed + 1)
    task = make_task(spec.kind, spec.seed % 7, spec.n_train, spec.label_noise, spec.easy)
    model = make_model(spec.kind, spec.width, spec.dead, spec.init_scale, spec.depth)
    params = list(model.parameters())
    opt = _optimizer(spec, params)
    lossf = loss_fn(task)
    n = task.x_train.shape[0]
    keras = logger.style == "keras"
    hf = logger.style == "hf"
    every = max(1, spec.log_every)
    acc_loss, acc_n = 0.0, 0
    ep_loss, ep_n = 0.0, 0
    perm, pos = torch.randperm(n, generator=g), 0
    scale = float(spec.fp16["init"]) if spec.fp16 else 1.0
    if spec.scale_bug:
        scale = float(spec.scale_bug.get("init", 1.0))
    good = 0
    bad_since = None
    checkpoint = None
    resumed_at = None
    overflows = 0
    t = 0
    while t < spec.steps:
        if spec.resume and resumed_at is None and t == spec.resume[1]:
            checkpoint = _State(model, opt, g.get_state(), perm, pos, scale, good)
        if spec.resume and resumed_at is None and t == spec.resume[0]:
            # the job dies and is restarted from the checkpoint: steps go back
            model.load_state_dict(checkpoint.model)
            opt.load_state_dict(checkpoint.opt)
            perm, pos, scale, good = checkpoint.perm, checkpoint.pos, checkpoint.scale, checkpoint.good
            g.set_state(checkpoint.rng)
            g.manual_seed(spec.seed + 2)  # the restarted job shuffles differently
            c = spec.resume[1]
            logger.restart({"hf": c + 1, "keras": c // spec.keras_epoch}.get(logger.style, c))
            resumed_at, t = t, spec.resume[1]
            acc_loss, acc_n, ep_loss, ep_n = 0.0, 0, 0.0, 0
            continue
        lr = float(spec.lr(t)) * spec.lr_mult.get(t, 1.0)
        for grp in opt.param_groups:
            grp["lr"] = lr
        if pos + spec.batch > n:
            perm, pos = torch.randperm(n, generator=g), 0
        bi = perm[pos:pos + spec.batch]
        pos += spec.batch
        xb, yb = task.x_train[bi], task.y_train[bi]
        how = spec.corrupt.get(t)
        if how is not None and how != "huge":
            xb, yb = _corrupt(task, xb, yb, how, g)
        model.train()
        loss = lossf(model(xb), yb)
        # "huge": a loss-scaling bug multiplies this batch's loss (and gradient) by 1e4
        scaled = loss * 1e4 if how == "huge" else loss
        if spec.scale_bug:
            scaled = scaled * scale   # scaled for fp16 and never unscaled before the step
        if not spec.accumulate_bug:
            opt.zero_grad(set_to_none=True)
        scaled.backward()
        skip = False
        if spec.fp16:
            gmax = max(float(p.grad.detach().abs().max()) for p in params if p.grad is not None)
            if not math.isfinite(gmax * scale) or gmax * scale > FP16_MAX:
                skip = True
        if skip:
            gn = float("nan") if spec.fp16.get("nan") else float("inf")
            scale, good = scale / 2.0, 0
            overflows += 1
            opt.zero_grad(set_to_none=True)
        else:
            gn = float(torch.nn.utils.clip_grad_norm_(params, spec.clip or float("inf")))
        # the update ratio every 10 steps, or at the logging cadence when that is sparser
        measure = t % max(10, every) == 0 and not skip
        if measure:
            before = torch.cat([p.detach().reshape(-1).clone() for p in params])
        if not skip:
            opt.step()
            if spec.neg_weight_decay:
                with torch.no_grad():
                    for p in params:
                        p.mul_(1.0 + lr * spec.neg_weight_decay)
            if spec.fp16:
                good += 1
                if good >= spec.fp16.get("growth_interval", 100):
                    scale, good = scale * 2.0, 0
        if spec.scale_bug and (t + 1) % spec.scale_bug["every"] == 0:
            scale *= 2.0
        lv = float(loss.detach())
        if measure:
            after = torch.cat([p.detach().reshape(-1) for p in params])
            logger.log("update_ratio", float((after - before).norm() / (before.norm() + 1e-12)), t)
        acc_loss += lv
        acc_n += 1
        if keras:
            ep_loss += lv
            ep_n += 1
            if (t + 1) % every == 0:
                logger.log("batch_loss", lv, t)
            if ep_n == spec.keras_epoch:
                epoch = t // spec.keras_epoch
                logger.log("train_loss", ep_loss / ep_n, epoch)
                logger.log("lr", lr, epoch)
                ep_loss, ep_n = 0.0, 0
        elif (t + 1) % every == 0:
            step = t + 1 if hf else t
            logger.log("train_loss", acc_loss / acc_n if hf else lv, step)
            logger.log("grad_norm", gn, step)
            logger.log("lr", lr, step)
            acc_loss, acc_n = 0.0, 0
        end_of_epoch = keras and ep_n == 0
        if end_of_epoch or (not keras and (t + 1) % spec.eval_every == 0):
            model.eval()
            with torch.no_grad():
                vl = float(lossf(model(task.x_val), task.y_val))
            logger.log("val_loss", vl, t // spec.keras_epoch if keras else t + 1)
        if not math.isfinite(lv):
            bad_since = t if bad_since is None else bad_since
        if bad_since is not None and t - bad_since >= spec.nan_guard:
            break  # a NaN guard / the job dies: logging stops
        t += 1
    logger.close()
    return {"stopped_at": t, "resumed_at": resumed_at, "overflows": overflows}
