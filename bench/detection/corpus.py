"""A labelled corpus of real (small) training runs for measuring detection quality.

Every run is real training with real backprop (PyTorch, CPU, one thread per
worker): an MLP classifier, a small CNN, a character-level GRU and an MLP
regressor, under scenarios that reproduce how runs go wrong in practice --
healthy warm-up + cosine / step decay, a learning-rate warm-up that ends too
high (slow build-up explosion), a corrupted batch that blows the weights up
(abrupt crash), a scheduler restart that multiplies the learning rate
(crash with a precursor), corrupted batches that a clipped optimiser
survives (recovering spikes), a tiny training set (overfitting), a learning
rate far too low or dead units (plateau), a schedule that decays to zero,
an Adam step size that moves the weights too much, a schedule that climbs
back above its peak.

The scenario only drives the training. **Labels are computed afterwards from
the recorded scalars** (see `labels.py`), so a "slow build-up" that happens to
recover is labelled as what it did, not what it was meant to do.

Each run is written with TensorBoard's own `EventFileWriter` in one of five
tag styles (PyTorch SummaryWriter, HuggingFace Trainer, Lightning, Keras
sibling runs with `epoch_loss` tensor scalars, custom `optim/...`), with
irregular logging (loss every step or every few steps, eval every N steps,
update ratio every 10 steps).

Runs are split by seed: seeds 0-1 are the dev half (tune on these), seeds
2-3 the test half (report only).

    python bench/detection/corpus.py --out "$TMPDIR/tbcs-detection-corpus"
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil
import sys
import time
from typing import Callable

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from labels import compute_labels  # noqa: E402

CORPUS_VERSION = 4
DEV_SEEDS = (0, 1)
TEST_SEEDS = (2, 3)
KINDS = ("mlp", "cnn", "rnn", "reg")
STYLES = ("pytorch", "hf", "lightning", "keras", "custom")


# ---------------------------------------------------------------------------
# Writing (TensorBoard's EventFileWriter and protos)
# ---------------------------------------------------------------------------


class _Writer:
    def __init__(self, logdir: str, tensor: bool = False):
        from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self.ev, self.sm = event_pb2, summary_pb2
        self.tp, self.sh, self.ty = tensor_pb2, tensor_shape_pb2, types_pb2
        self.meta = summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"),
            data_class=summary_pb2.DATA_CLASS_SCALAR,
        )
        self.tensor = tensor
        os.makedirs(logdir, exist_ok=True)
        self.w = EventFileWriter(logdir, max_queue_size=2000, flush_secs=120)
        self.t0 = time.time()

    def scalar(self, tag, value, step):
        if self.tensor:
            v = self.sm.Summary.Value(
                tag=tag,
                tensor=self.tp.TensorProto(
                    dtype=self.ty.DT_FLOAT, tensor_shape=self.sh.TensorShapeProto(),
                    float_val=[float(value)],
                ),
                metadata=self.meta,
            )
        else:
            v = self.sm.Summary.Value(tag=tag, simple_value=float(value))
        self.w.add_event(
            self.ev.Event(wall_time=self.t0 + step * 0.05, step=int(step),
                          summary=self.sm.Summary(value=[v]))
        )

    def close(self):
        self.w.close()


class Logger:
    """Logs the five signals under one style's tags, keeping what was recorded.

    `recorded[signal]` holds the (step, float32 value) pairs exactly as written:
    the labels are computed from these, never from the scenario.
    """

    def __init__(self, root: str, name: str, style: str, opt_name: str):
        self.style = style
        self.recorded: dict[str, list] = {}
        if style == "keras":
            self.writers = {"train": _Writer(os.path.join(root, name, "train"), tensor=True),
                            "val": _Writer(os.path.join(root, name, "validation"), tensor=True)}
            self.tags = {"train_loss": ("train", "epoch_loss"), "val_loss": ("val", "epoch_loss"),
                         "lr": ("train", "epoch_learning_rate")}
        else:
            w = _Writer(os.path.join(root, name))
            self.writers = {"main": w}
            names = {
                "pytorch": {"train_loss": "Loss/train", "val_loss": "Loss/val",
                            "grad_norm": "Grad/norm", "lr": "LR",
                            "update_ratio": "Optim/update_ratio"},
                "hf": {"train_loss": "train/loss", "val_loss": "eval/loss",
                       "grad_norm": "train/grad_norm", "lr": "train/learning_rate"},
                "lightning": {"train_loss": "train_loss", "val_loss": "val_loss",
                              "grad_norm": "grad_2.0_norm_total",
                              "lr": f"lr-{opt_name}"},
                "custom": {"train_loss": "loss", "val_loss": "val/loss",
                           "grad_norm": "optim/grad_global_norm",
                           "update_ratio": "optim/update_ratio", "lr": "optim/lr"},
            }[style]
            self.tags = {k: ("main", t) for k, t in names.items()}

    def log(self, signal, value, step):
        if signal not in self.tags:
            return
        v = float(np.float32(value)) if math.isfinite(value) else float(value)
        self.recorded.setdefault(signal, []).append((int(step), v))
        which, tag = self.tags[signal]
        self.writers[which].scalar(tag, v, step)

    def close(self):
        for w in self.writers.values():
            w.close()


# ---------------------------------------------------------------------------
# Data and models
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


def make_task(kind: str, seed: int, n_train: int, label_noise: float):
    import torch

    rng = np.random.default_rng(1000 + seed)
    n_val = 1000
    n = n_train + n_val
    if kind == "mlp":
        d, k = 32, 10
        x = rng.standard_normal((n, d))
        y = np.argmax(_teacher(rng, d, k)(x) + 0.3 * rng.standard_normal((n, k)), axis=1)
        flip = rng.random(n) < label_noise
        y[flip] = rng.integers(0, k, int(flip.sum()))
        xt, yt = torch.tensor(x, dtype=torch.float32), torch.tensor(y)
        loss = "ce"
    elif kind == "reg":
        d = 16
        x = rng.standard_normal((n, d))
        y = _teacher(rng, d, 1)(x) * 2 + (0.3 + label_noise) * rng.standard_normal((n, 1))
        y = (y - y.mean()) / y.std()
        xt, yt = torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)
        loss = "mse"
    elif kind == "cnn":
        k, side = 10, 12
        templates = rng.standard_normal((k, side + 4, side + 4))
        # smooth the templates so shifts keep them recognisable
        for _ in range(2):
            templates = (templates + np.roll(templates, 1, 1) + np.roll(templates, 1, 2)) / 3
        y = rng.integers(0, k, n)
        dx, dy = rng.integers(0, 5, n), rng.integers(0, 5, n)
        x = np.stack([templates[c, a:a + side, b:b + side] for c, a, b in zip(y, dx, dy)])
        x = x / x.std() + 1.2 * rng.standard_normal(x.shape)
        flip = rng.random(n) < label_noise
        y[flip] = rng.integers(0, k, int(flip.sum()))
        xt = torch.tensor(x[:, None], dtype=torch.float32)
        yt = torch.tensor(y)
        loss = "ce"
    elif kind == "rnn":
        v, length = 12, 20
        # an order-2 Markov chain with a few likely successors per context
        trans = rng.dirichlet(np.full(v, 0.1), size=v * v)
        seqs = np.empty((n, length + 1), np.int64)
        seqs[:, :2] = rng.integers(0, v, (n, 2))
        cum = np.cumsum(trans, axis=1)
        for t in range(2, length + 1):
            u = rng.random(n)[:, None]
            ctx = seqs[:, t - 2] * v + seqs[:, t - 1]
            seqs[:, t] = np.minimum((u > cum[ctx]).sum(axis=1), v - 1)
        noise = rng.random(seqs.shape) < label_noise
        seqs[noise] = rng.integers(0, v, int(noise.sum()))
        xt, yt = torch.tensor(seqs[:, :-1]), torch.tensor(seqs[:, 1:])
        loss = "seq"
    else:
        raise ValueError(kind)
    return Task(xt[:n_train], yt[:n_train], xt[n_train:], yt[n_train:], loss)


def make_model(kind: str, width: int, dead: bool = False):
    import torch
    from torch import nn

    if kind == "mlp":
        m = nn.Sequential(nn.Linear(32, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                          nn.Linear(width, 10))
    elif kind == "reg":
        m = nn.Sequential(nn.Linear(16, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                          nn.Linear(width, 1))
    elif kind == "cnn":
        m = nn.Sequential(nn.Conv2d(1, 8, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 16, 3),
                          nn.ReLU(), nn.Flatten(), nn.Linear(16 * 3 * 3, width), nn.ReLU(),
                          nn.Linear(width, 10))
    elif kind == "rnn":
        class CharGRU(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = nn.Embedding(12, 16)
                self.gru = nn.GRU(16, width, batch_first=True)
                self.head = nn.Linear(width, 12)

            def forward(self, x):
                h, _ = self.gru(self.emb(x))
                return self.head(h)

        m = CharGRU()
    else:
        raise ValueError(kind)
    if dead:
        # A bad initialisation: every hidden ReLU starts (and stays) dead.
        with torch.no_grad():
            for mod in m.modules():
                if isinstance(mod, (nn.Linear, nn.Conv2d)) and mod is not list(m.modules())[-1]:
                    mod.bias.fill_(-6.0)
    return m


def _loss_fn(task: Task):
    import torch.nn.functional as F

    if task.loss == "ce":
        return F.cross_entropy
    if task.loss == "mse":
        return F.mse_loss
    return lambda out, y: F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


# ---------------------------------------------------------------------------
# Learning-rate schedules
# ---------------------------------------------------------------------------


def warmup_cosine(peak, warmup, total, floor=0.02):
    def f(t):
        if t < warmup:
            return peak * (t + 1) / warmup
        q = min(1.0, (t - warmup) / max(1, total - warmup))
        return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * q)))
    return f


def step_decay(lr, milestones, gamma):
    def f(t):
        return lr * gamma ** sum(t >= m for m in milestones)
    return f


def ramp(start, end, total, power=1.0):
    def f(t):
        return start + (end - start) * (t / total) ** power
    return f


# ---------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class Scenario:
    """How one run is trained. Nothing here is used as a label."""

    name: str
    steps: int = 1200
    opt: str = "adam"
    lr: Callable[[int], float] | None = None
    clip: float | None = 1.0
    batch: int = 64
    n_train: int = 16000
    label_noise: float = 0.05
    width: int = 96
    weight_decay: float = 0.0
    eval_every: int = 50
    corrupt: dict = dataclasses.field(default_factory=dict)  # step -> kind
    dead: bool = False
    log_every: int = 1


def scenarios_for(seed: int, kind: str) -> list[Scenario]:
    rng = np.random.default_rng(seed * 7919 + KINDS.index(kind))
    T = {"mlp": 1000, "reg": 1000, "cnn": 700, "rnn": 500}[kind]
    base = {"mlp": 3e-3, "reg": 2e-3, "cnn": 3e-3, "rnn": 5e-3}[kind]
    sgd = {"mlp": 0.05, "reg": 0.02, "cnn": 0.05, "rnn": 0.5}[kind]
    out = []
    # Healthy runs: warm-up + cosine (Adam, clipped), step decay (SGD momentum),
    # and a noisy small-batch one.
    out.append(Scenario("healthy-cosine", T, "adam", warmup_cosine(base, T // 15, T),
                        eval_every=int(rng.choice([25, 50]))))
    out.append(Scenario("healthy-step", T, "sgd", step_decay(sgd, [T // 2, 3 * T // 4], 0.2),
                        clip=None, eval_every=50))
    out.append(Scenario("healthy-noisy", T, "adamw", warmup_cosine(base * 0.5, T // 10, T),
                        batch=8, weight_decay=0.01, eval_every=int(rng.choice([40, 100]))))
    # Slow build-up: a warm-up ramp that ends far beyond the stable step size.
    out.append(Scenario("explode-ramp", T, "sgd",
                        ramp(sgd * 0.2, sgd * float(rng.uniform(40, 80)), T, power=2.0),
                        clip=None))
    # Abrupt: one batch whose loss is scaled x1e4 (a loss-scaling bug), no clipping.
    at = int(rng.integers(T // 3, 2 * T // 3))
    out.append(Scenario("crash-abrupt", T, "sgd", step_decay(sgd, [], 1.0), clip=None,
                        corrupt={at: "huge"}))
    # A scheduler restart multiplies the learning rate mid-run (no clipping).
    at = int(rng.integers(T // 3, 2 * T // 3))
    mult = float(rng.uniform(30, 60))
    out.append(Scenario("lr-restart-crash", T, "adam",
                        lambda t, at=at, m=mult, b=base: b * (m if t >= at else 1.0), clip=None))
    # Recovering spikes: a few corrupted batches (random labels / scaled inputs).
    steps = sorted(int(s) for s in rng.choice(np.arange(T // 5, T - 50), 4, replace=False))
    kinds_ = ["scale", "labels", "scale", "labels"]
    out.append(Scenario("spikes", T, "adam", warmup_cosine(base, T // 15, T),
                        corrupt=dict(zip(steps, kinds_)), clip=float(rng.choice([1.0, 5.0]))))
    # Overfitting: a tiny, noisy training set and a wide model.
    out.append(Scenario("overfit", 3 * T // 2, "adam", warmup_cosine(base, 50, 3 * T // 2, floor=0.3),
                        n_train=192, label_noise=0.2, width=256, batch=32,
                        eval_every=int(rng.choice([50, 100]))))
    # Plateau: learning rate far too low / dead units / a schedule that hits zero.
    out.append(Scenario("plateau-lowlr", T, "adam", step_decay(base * 1e-4, [], 1.0)))
    out.append(Scenario("plateau-dead", T, "sgd", step_decay(sgd, [], 1.0), dead=True))
    out.append(Scenario("lr-to-zero", T, "sgd",
                        step_decay(sgd, [int(T * rng.uniform(0.2, 0.35))], 0.0), clip=None))
    # Optimiser misconfiguration: SGD step far too large (clipped, so it survives).
    out.append(Scenario("update-ratio-high", T, "sgd",
                        step_decay(float(rng.uniform(0.5, 1.0)), [], 1.0), clip=1.0))
    # A schedule that decays and then climbs back well above its peak.
    out.append(Scenario("lr-rising", T, "adam",
                        lambda t, b=base, T=T: b * (1 - 0.9 * t / (0.5 * T)) if t < T / 2
                        else b * (0.1 + 4.0 * (t - T / 2) / (T / 2)), clip=1.0))
    # Two more slow build-ups: a linear SGD ramp through the stability limit,
    # and an Adam step size growing exponentially (no clipping in either).
    out.append(Scenario("explode-sgd-linear", T, "sgd",
                        ramp(sgd, sgd * float(rng.uniform(15, 30)), T), clip=None))
    out.append(Scenario("explode-adam-exp", T, "adam",
                        lambda t, b=base, T=T, k=float(rng.uniform(200, 500)): b * k ** (t / T),
                        clip=None))
    return out


def corpus_plan():
    """(split, seed, kind, style, scenario index): every scenario x seed once."""
    plan = []
    n = len(scenarios_for(0, "mlp"))
    for seed in DEV_SEEDS + TEST_SEEDS:
        split = "dev" if seed in DEV_SEEDS else "test"
        for i in range(n):
            kind = KINDS[(i + seed) % len(KINDS)]
            style = STYLES[(i * 2 + seed) % len(STYLES)]
            plan.append((split, seed, kind, style, i))
    return plan


# ---------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------


def _corrupt(task, xb, yb, how, g):
    import torch

    if how == "scale":
        if xb.dtype.is_floating_point:
            return xb * 6.0, yb
        return torch.randint(0, 12, xb.shape, generator=g), yb  # scrambled text
    if how == "labels":
        if task.loss == "mse":
            return xb, yb * 8.0
        return xb, yb[torch.randperm(yb.shape[0], generator=g)] if yb.dim() == 1 else \
            torch.randint(0, 12, yb.shape, generator=g)
    raise ValueError(how)


def train_one(root: str, split: str, seed: int, kind: str, style: str, idx: int) -> dict:
    import torch

    torch.set_num_threads(1)
    sc = scenarios_for(seed, kind)[idx]
    name = f"{sc.name}_{kind}_s{seed}"
    torch.manual_seed(seed * 100 + idx)
    g = torch.Generator().manual_seed(seed * 100 + idx + 1)
    task = make_task(kind, seed, sc.n_train, sc.label_noise)
    model = make_model(kind, sc.width if kind != "rnn" else sc.width // 2, sc.dead)
    params = [p for p in model.parameters()]
    opt_name = {"adam": "Adam", "adamw": "AdamW", "sgd": "SGD"}[sc.opt]
    if sc.opt == "sgd":
        opt = torch.optim.SGD(params, lr=1.0, momentum=0.9, weight_decay=sc.weight_decay)
    elif sc.opt == "adamw":
        opt = torch.optim.AdamW(params, lr=1.0, weight_decay=sc.weight_decay)
    else:
        opt = torch.optim.Adam(params, lr=1.0)
    lossf = _loss_fn(task)
    log = Logger(os.path.join(root, split), name, style, opt_name)
    n = task.x_train.shape[0]
    # Logging cadence per style: HF averages the loss over `logging_steps`;
    # Keras logs one point per epoch (mean over the epoch).
    every = {"hf": 5, "lightning": 2}.get(style, 1)
    per_epoch = max(5, min(20, n // sc.batch))
    acc_loss, acc_n = 0.0, 0
    ep_loss, ep_n, epoch = 0.0, 0, 0
    bad_since = None
    perm = torch.randperm(n, generator=g)
    pos = 0
    for t in range(sc.steps):
        lr = float(sc.lr(t))
        for grp in opt.param_groups:
            grp["lr"] = lr
        if pos + sc.batch > n:
            perm, pos = torch.randperm(n, generator=g), 0
        bi = perm[pos:pos + sc.batch]
        pos += sc.batch
        xb, yb = task.x_train[bi], task.y_train[bi]
        if t in sc.corrupt and sc.corrupt[t] != "huge":
            xb, yb = _corrupt(task, xb, yb, sc.corrupt[t], g)
        model.train()
        out = model(xb)
        loss = lossf(out, yb)
        # "huge": a loss-scaling bug multiplies this batch's loss (and gradient) by 1e4
        scaled = loss * 1e4 if sc.corrupt.get(t) == "huge" else loss
        opt.zero_grad(set_to_none=True)
        scaled.backward()
        gn = float(torch.nn.utils.clip_grad_norm_(params, sc.clip if sc.clip else float("inf")))
        measure = t % 10 == 0
        if measure:
            before = torch.cat([p.detach().reshape(-1).clone() for p in params])
        opt.step()
        lv = float(loss.detach())
        if measure and style in ("pytorch", "custom"):
            after = torch.cat([p.detach().reshape(-1) for p in params])
            ratio = float((after - before).norm() / (before.norm() + 1e-12))
            log.log("update_ratio", ratio, t)
        # train loss / grad norm / lr at the style's cadence
        acc_loss += lv
        acc_n += 1
        if style == "keras":
            ep_loss += lv
            ep_n += 1
            if ep_n == per_epoch:
                log.log("train_loss", ep_loss / ep_n, epoch)
                log.log("lr", lr, epoch)
                ep_loss, ep_n = 0.0, 0
        elif (t + 1) % every == 0:
            step = t + 1 if style == "hf" else t
            log.log("train_loss", acc_loss / acc_n, step)
            log.log("grad_norm", gn, step)
            log.log("lr", lr, step)
            acc_loss, acc_n = 0.0, 0
        # evaluation
        do_eval = (ep_n == 0 and style == "keras") or (style != "keras" and (t + 1) % sc.eval_every == 0)
        if do_eval:
            model.eval()
            with torch.no_grad():
                vl = float(lossf(model(task.x_val), task.y_val))
            step = epoch if style == "keras" else t + 1
            log.log("val_loss", vl, step)
            if style == "keras":
                epoch += 1
        if not math.isfinite(lv) or not math.isfinite(gn):
            bad_since = t if bad_since is None else bad_since
        if bad_since is not None and t - bad_since >= 30:
            break  # a NaN guard / the job dies: logging stops
    log.close()
    rec = {k: (np.array([s for s, _ in v], np.int64), np.array([x for _, x in v], np.float64))
           for k, v in log.recorded.items()}
    return {
        "run": name, "split": split, "seed": seed, "kind": kind, "style": style,
        "scenario": sc.name,
        "labels": compute_labels(rec),
    }


def _job(args):
    return train_one(*args)


def generate(out: str, jobs: int = 2, force: bool = False, quiet: bool = False) -> dict:
    """Generates the corpus into `out` (cached: reused if complete and same version)."""
    meta_path = os.path.join(out, "labels.json")
    if not force and os.path.isfile(meta_path):
        with open(meta_path) as f:
            meta = json.load(f)
        if meta.get("version") == CORPUS_VERSION:
            return meta
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    plan = [(out,) + p for p in corpus_plan()]
    t0 = time.time()
    runs = {}
    if jobs > 1:
        import multiprocessing as mp

        with mp.get_context("spawn").Pool(jobs) as pool:
            for r in pool.imap_unordered(_job, plan):
                runs[f"{r['split']}/{r['run']}"] = r
                if not quiet:
                    print(f"  {r['split']}/{r['run']:<36} {r['labels']['category']}", flush=True)
    else:
        for p in plan:
            r = _job(p)
            runs[f"{r['split']}/{r['run']}"] = r
            if not quiet:
                print(f"  {r['split']}/{r['run']:<36} {r['labels']['category']}", flush=True)
    meta = {"version": CORPUS_VERSION, "seconds": round(time.time() - t0, 1),
            "runs": dict(sorted(runs.items()))}
    with open(meta_path, "w") as f:
        json.dump(meta, f, indent=1)
    return meta


def default_dir() -> str:
    return os.path.join(os.environ.get("TMPDIR", "/tmp"), "tbcs-detection-corpus")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=default_dir())
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--force", action="store_true")
    a = ap.parse_args(argv)
    meta = generate(a.out, a.jobs, a.force)
    print(f"{len(meta['runs'])} runs in {a.out} ({meta['seconds']} s)")


if __name__ == "__main__":
    main()
