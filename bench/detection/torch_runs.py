"""Real PyTorch trainings outside the corpus's scenarios, logged as most loops log them.

    python bench/detection/torch_runs.py generate OUT --family FAMILY [--seed0 N]
        (FAMILY: schedules, overshoots, practices, amp, warmups or epochs)
    python bench/detection/torch_runs.py score OUT [OUT ...]

Small MLPs (a 3-class classifier and a regressor, two hidden layers of 64; `warmups` the corpus's
own models) trained on CPU with torch's own optimisers and schedulers, logged with
`torch.utils.tensorboard.SummaryWriter`:

- **schedules**: SGD + momentum 0.9 (0.05) or Adam (1e-3) under a constant rate, warm-up +
  cosine, step decay (÷10 every 1000 steps) or one-cycle (4x the base at its peak), logged every
  1, 10 or 50 steps, batches of 8 or 64; 3000 steps, a validation loss every 250. Meant healthy;
  the larger SGD rates on batches of 8 are not, and the labels say so.
- **overshoots**: a linear or quadratic warm-up over 700 of 800 steps to a rate far past the
  stable one (SGD 3.0 / 0.5, Adam 0.3), logged every step or every 10.
- **practices**: what training loops do besides a schedule, at sane rates: dropout 0.3;
  AdamW with weight decay 0.05 and clipping at norm 1; label smoothing 0.1; bf16 autocast;
  a run resumed at step 1500 from its checkpoint at 1200, writing steps 1200-1500 again
  (with and without `purge_step`); 4-way gradient accumulation; `ReduceLROnPlateau` on the
  validation loss; `CosineAnnealingWarmRestarts`; 512 training examples (it overfits, and
  its validation loss is of held-out examples); logged every step or every 10, batches of 32;
  3000 steps, a validation loss every 250. Meant healthy but for the small data set.
- **warmups**: the corpus's char transformer, CNN and char GRU (`train.py`) under AdamW (weight
  decay 0.01), a linear warm-up over 400 or 1000 steps to a peak of 1e-2, 3e-2 or 1e-1, then a
  cosine to 0 at step 1500, clipped at norm 1 or not, logged every step (batches of 32, a
  validation loss every 100). The larger peaks overshoot: the loss climbs back toward where it
  started during the warm-up, and comes back or not as the rate decays.
- **epochs**: logged as Keras logs a run, each epoch's mean train loss and its learning rate at step =
  epoch and the held-out validation loss after it (2 048 training examples, 40 epochs, batches of 16
  or 128), SGD + momentum (0.02) or Adam (1e-3) under a constant rate, a step decay (/10 every 15
  epochs) or a cosine, or made to diverge: a rate growing 1.25x an epoch, a linear ramp to 40x, or a
  weight decay of the wrong sign (the weights grow).
- **amp**: fp16 autocast with torch's dynamic loss scaling (`torch.amp.GradScaler`), its scale
  grown every 50 or 500 steps from 2^16 or 2^24, the gradient norm logged after unscaling (Inf or
  NaN at the steps the scaler skips), as `practices` otherwise. Meant healthy: a skipped step is
  the scaler at work.

Each run is labelled from its recorded scalars by `labels.compute_labels`, as the corpus's runs
are (`labels.json` in OUT). `score` scans OUT with the defaults and prints, per family: the
non-diverged runs' warnings per 10k steps (episodes, and incidents) and criticals, and the
diverged runs critical at or before the labels' crash with their lead, by logging interval.
"""

from __future__ import annotations

import argparse
import collections
import copy
import itertools
import json
import math
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

import labels

STEPS = {"schedules": 3000, "overshoots": 800, "practices": 3000, "amp": 3000, "warmups": 1500, "epochs": 40}
# The epochs family's learning-rate courses: healthy ones, and ones that make it diverge.
EPOCH_COURSES = ("const", "step", "cosine", "exp", "ramp", "negwd")
PRACTICES = ("dropout", "adamw-clip", "label-smoothing", "bf16", "resume", "resume-purge", "accumulation",
             "plateau-sched", "warm-restarts", "small-data")
# The loss scaler's growth interval and initial scale (log2) of the amp family's runs.
SCALERS = {"fp16-g50": (50, 16), "fp16-g500": (500, 16), "fp16-g50-s24": (50, 24), "fp16-g500-s24": (500, 24)}
_TAGS = {"train_loss": "train/loss", "grad_norm": "train/grad_norm", "lr": "train/lr", "val_loss": "val/loss"}


def _data(torch, kind: str, seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4096, 16, generator=g)
    if kind == "reg":
        return x, x[:, :4].sum(1, keepdim=True) * 0.5 + 0.1 * torch.randn(4096, 1, generator=g)
    return x, (x[:, :4].sum(1) > 0).long() + (x[:, 4] > 0.5).long()


def _model(torch, kind: str, dropout: float = 0.0):
    act = torch.nn.Tanh if kind == "reg" else torch.nn.ReLU
    drop = [torch.nn.Dropout(dropout)] if dropout else []
    return torch.nn.Sequential(torch.nn.Linear(16, 64), act(), *drop, torch.nn.Linear(64, 64), act(), *drop,
                               torch.nn.Linear(64, 1 if kind == "reg" else 3))


def _loss_fn(torch, kind: str):
    return torch.nn.functional.mse_loss if kind == "reg" else torch.nn.functional.cross_entropy


def _optimizer(torch, model, opt_name: str, lr: float):
    """SGD + momentum 0.9 ("sgd") or Adam at `lr`."""
    if opt_name == "sgd":
        return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    return torch.optim.Adam(model.parameters(), lr=lr)


def _plans(family: str):
    if family == "schedules":
        for kind, opt, sched, every, batch in itertools.product(
                ("cls", "reg"), ("sgd", "adam"), ("const", "cosine", "step", "onecycle"), (1, 10, 50), (8, 64)):
            yield f"{kind}_{opt}_{sched}_e{every}_b{batch}", kind, opt, sched, every, batch
    elif family in ("practices", "amp"):
        for kind, practice, every in itertools.product(("cls", "reg"), PRACTICES if family == "practices" else SCALERS,
                                                       (1, 10)):
            yield f"{kind}_{practice}_e{every}", kind, practice, every
    elif family == "warmups":
        for kind, peak, warm, clip in itertools.product(("tfm", "cnn", "gru"), (1e-2, 3e-2, 1e-1), (400, 1000),
                                                        (0.0, 1.0)):
            yield f"{kind}_p{peak:g}_w{warm}_c{clip:g}", kind, peak, warm, clip
    elif family == "epochs":
        for kind, opt, course, batch in itertools.product(("cls", "reg"), ("sgd", "adam"), EPOCH_COURSES, (16, 128)):
            yield f"{kind}_{opt}_{course}_b{batch}", kind, opt, course, batch
    else:
        for kind, opt, sched, every in itertools.product(("cls", "reg"), ("sgd", "adam"), ("lin", "quad"), (1, 10)):
            yield f"{kind}_{opt}_{sched}_e{every}", kind, opt, sched, every, 32


def _train(torch, path: str, family: str, kind: str, opt_name: str, sched: str, every: int, batch: int, seed: int):
    from torch.utils.tensorboard import SummaryWriter

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    x, y = _data(torch, kind, seed)
    model = _model(torch, kind)
    loss_fn = _loss_fn(torch, kind)
    steps = STEPS[family]
    if family == "schedules":
        base = 0.05 if opt_name == "sgd" else 1e-3
    else:
        base = {("cls", "sgd"): 3.0, ("reg", "sgd"): 0.5}.get((kind, opt_name), 0.3)
    opt = _optimizer(torch, model, opt_name, base)
    if sched == "cosine":
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: min(1.0, (s + 1) / 200) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps))))
    elif sched == "step":
        scheduler = torch.optim.lr_scheduler.StepLR(opt, 1000, 0.1)
    elif sched == "onecycle":
        scheduler = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=4 * base, total_steps=steps)
    elif sched in ("lin", "quad"):
        power = 1 if sched == "lin" else 2
        scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 700) ** power)
    else:
        scheduler = None
    bad_since = None
    with SummaryWriter(path) as w:
        for step in range(steps):
            idx = torch.randint(0, x.shape[0], (batch,))
            loss = loss_fn(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), math.inf)
            lr = opt.param_groups[0]["lr"]
            opt.step()
            if scheduler is not None:
                scheduler.step()
            value = loss.item()
            if step % every == 0:
                w.add_scalar(_TAGS["train_loss"], value, step)
                w.add_scalar(_TAGS["grad_norm"], norm.item(), step)
                w.add_scalar(_TAGS["lr"], lr, step)
            if family == "schedules" and step % 250 == 249:
                with torch.no_grad():
                    w.add_scalar(_TAGS["val_loss"], loss_fn(model(x[:512]), y[:512]).item(), step)
            if not math.isfinite(value):
                bad_since = step if bad_since is None else bad_since
                if step > bad_since + 20 * every:  # 20 logged points of the crash, then stop
                    break


def _train_practice(torch, path: str, family: str, kind: str, practice: str, every: int, seed: int):
    from torch.utils.tensorboard import SummaryWriter

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    x, y = _data(torch, kind, seed)
    # The validation examples are held out: the first 512 (as `schedules` logs them, they are trained on).
    xv, yv, x, y = x[:512], y[:512], x[512:], y[512:]
    if practice == "small-data":
        x, y = x[:512], y[:512]
    model = _model(torch, kind, dropout=0.3 if practice == "dropout" else 0.0)
    smoothing = 0.1 if practice == "label-smoothing" else 0.0
    if kind == "reg":
        loss_fn = torch.nn.functional.mse_loss
    else:
        def loss_fn(out, target):
            return torch.nn.functional.cross_entropy(out, target, label_smoothing=smoothing)
    steps, batch, micro = STEPS[family], 32, 4 if practice == "accumulation" else 1
    sgd = kind == "reg"  # (Adam on the classifier, SGD + momentum on the regressor)
    if practice == "adamw-clip":
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.05)
    elif sgd:
        opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    scheduler = plateau = None
    if practice == "warm-restarts":
        scheduler = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=500, T_mult=2)
    elif practice == "plateau-sched":
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.3, patience=1)
    growth, log2_scale = SCALERS.get(practice, (0, 0))
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** log2_scale, growth_interval=growth) if growth else None
    resume_at, saved_at = (1500, 1200) if practice.startswith("resume") else (None, None)
    saved = None
    w = SummaryWriter(path)
    step = 0
    while step < steps:
        if step == resume_at:  # the job died; a new one loads the last checkpoint and logs again
            w.close()
            model.load_state_dict(saved[0])
            opt.load_state_dict(saved[1])
            step = saved_at
            w = SummaryWriter(path, purge_step=step if practice == "resume-purge" else None)
            resume_at = None
        if step == saved_at and resume_at is not None:
            saved = ({k: v.clone() for k, v in model.state_dict().items()}, copy.deepcopy(opt.state_dict()))
        model.train()
        opt.zero_grad()
        value = 0.0
        for _ in range(micro):
            idx = torch.randint(0, x.shape[0], (batch,))
            half = torch.float16 if scaler is not None else torch.bfloat16
            with torch.autocast("cpu", dtype=half, enabled=practice == "bf16" or scaler is not None):
                out = model(x[idx])
            loss = loss_fn(out.float(), y[idx]) / micro
            (loss if scaler is None else scaler.scale(loss)).backward()
            value += loss.item()
        if scaler is not None:
            scaler.unscale_(opt)  # (the norm of the true gradients: Inf/NaN when this step overflowed)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0 if practice == "adamw-clip" else math.inf)
        lr = opt.param_groups[0]["lr"]
        if scaler is None:
            opt.step()
        else:
            scaler.step(opt)
            scaler.update()
        if scheduler is not None:
            scheduler.step()
        if step % every == 0:
            w.add_scalar(_TAGS["train_loss"], value, step)
            w.add_scalar(_TAGS["grad_norm"], norm.item(), step)
            w.add_scalar(_TAGS["lr"], lr, step)
        if step % 250 == 249:
            model.eval()
            with torch.no_grad():
                val = loss_fn(model(xv), yv).item()
            w.add_scalar(_TAGS["val_loss"], val, step)
            if plateau is not None:
                plateau.step(val)
        step += 1
    w.close()


def _train_warmup(torch, path: str, family: str, kind: str, peak: float, warm: int, clip: float, seed: int):
    import train
    from torch.utils.tensorboard import SummaryWriter

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    task = train.make_task(kind, seed, 4000, 0.0)
    model = train.make_model(kind, {"tfm": 32, "cnn": 64, "gru": 48}[kind])
    loss_fn = train.loss_fn(task)
    opt = torch.optim.AdamW(model.parameters(), lr=peak, weight_decay=0.01)
    steps = STEPS[family]
    g = torch.Generator().manual_seed(seed)
    with SummaryWriter(path) as w:
        for step in range(steps):
            ramp = min(1.0, (step + 1) / warm)
            decay = 0.5 * (1 + math.cos(math.pi * max(0, step - warm) / (steps - warm)))
            lr = opt.param_groups[0]["lr"] = peak * (ramp if step < warm else decay)
            idx = torch.randint(0, task.x_train.shape[0], (32,), generator=g)
            loss = loss_fn(model(task.x_train[idx]), task.y_train[idx])
            opt.zero_grad()
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip or math.inf)
            opt.step()
            w.add_scalar(_TAGS["train_loss"], loss.item(), step)
            w.add_scalar(_TAGS["grad_norm"], norm.item(), step)
            w.add_scalar(_TAGS["lr"], lr, step)
            if step % 100 == 99:
                with torch.no_grad():
                    w.add_scalar(_TAGS["val_loss"], loss_fn(model(task.x_val[:256]), task.y_val[:256]).item(), step)


def _train_by_epoch(torch, path: str, family: str, kind: str, opt_name: str, course: str, batch: int, seed: int):
    """Keras' way of logging: each epoch's mean train loss and its learning rate at step = epoch,
    the held-out validation loss after it."""
    from torch.utils.tensorboard import SummaryWriter

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    x, y = _data(torch, kind, seed)
    xv, yv, x, y = x[:512], y[:512], x[512:2560], y[512:2560]
    model = _model(torch, kind)
    loss_fn = _loss_fn(torch, kind)
    base = 0.02 if opt_name == "sgd" else 1e-3
    opt = _optimizer(torch, model, opt_name, base)
    epochs = STEPS[family]
    g = torch.Generator().manual_seed(seed)
    with SummaryWriter(path) as w:
        for epoch in range(epochs):
            rate = base * {"const": 1.0, "step": 0.1 ** (epoch // 15),
                           "cosine": 0.5 * (1 + math.cos(math.pi * epoch / epochs)),
                           "exp": 1.25 ** epoch, "ramp": 1 + epoch, "negwd": 1.0}[course]
            for group in opt.param_groups:
                group["lr"] = rate
            order = torch.randperm(x.shape[0], generator=g)
            total, batches = 0.0, 0
            for start in range(0, x.shape[0], batch):
                idx = order[start:start + batch]
                loss = loss_fn(model(x[idx]), y[idx])
                opt.zero_grad()
                loss.backward()
                if course == "negwd":  # a weight decay of the wrong sign: the weights grow
                    for param in model.parameters():
                        param.grad.add_(param.detach(), alpha=-0.05 if opt_name == "sgd" else -0.5)
                opt.step()
                total, batches = total + loss.item(), batches + 1
            mean = total / batches
            w.add_scalar(_TAGS["train_loss"], mean, epoch)
            w.add_scalar(_TAGS["lr"], rate, epoch)
            with torch.no_grad():
                w.add_scalar(_TAGS["val_loss"], loss_fn(model(xv), yv).item(), epoch)
            if not math.isfinite(mean):
                break


def _recorded(path: str) -> dict:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(path, size_guidance={"scalars": 0})
    acc.Reload()
    have = set(acc.Tags()["scalars"])
    return {sig: [(e.step, e.value) for e in acc.Scalars(tag)] for sig, tag in _TAGS.items() if tag in have}


def generate(out: str, family: str, seed0: int) -> None:
    import torch

    os.makedirs(out, exist_ok=True)
    found = {}
    for i, (name, *plan) in enumerate(_plans(family)):
        path = os.path.join(out, name)
        trainer = {"practices": _train_practice, "amp": _train_practice, "warmups": _train_warmup,
                   "epochs": _train_by_epoch}.get(family, _train)
        trainer(torch, path, family, *plan, seed=seed0 + i)
        lab = labels.compute_labels(_recorded(path))
        every = 1 if family in ("warmups", "epochs") else plan[-1] if family in ("practices", "amp") else plan[3]
        found[name] = {"family": family, "every": every, **{k: lab[k] for k in (
            "category", "crash_step", "precursor", "spike_steps", "overfit_onset", "plateau_start",
            "stagnation_start")}}
        print(f"{name}: {lab['category']}", flush=True)
    with open(os.path.join(out, "labels.json"), "w") as f:
        json.dump(found, f, indent=1)


def score(dirs: list[str], config_path: str | None = None) -> None:
    from tb_crash_signals import scan_logdir
    from tb_crash_signals.analysis.config import load_config

    config = load_config(config_path) if config_path else None

    quiet = collections.Counter()
    codes = collections.Counter()
    criticals, diverged = [], collections.defaultdict(list)
    for d in dirs:
        with open(os.path.join(d, "labels.json")) as f:
            labs = json.load(f)
        for run in scan_logdir(d, config=config)["runs"]:
            lab = labs.get(run["run"])
            if lab is None:
                continue
            fam = lab["family"]
            if lab["category"] != "diverged":
                quiet[fam, "runs"] += 1
                quiet[fam, "steps"] += STEPS[fam]
                for e in run["episodes"]:
                    if e["severity"] == "warning":
                        quiet[fam, "warnings"] += 1
                        codes[e["code"]] += 1
                    elif e["severity"] == "critical":
                        criticals.append(f"{os.path.basename(d)}/{run['run']}: {e['code']} at {e['start_step']}")
                quiet[fam, "incidents"] += sum(i["severity"] == "warning" for i in run["incidents"])
                continue
            crash = lab["crash_step"]
            told = [i for i in run["incidents"]
                    if i["severity"] == "critical" and i.get("first_alarm_step") is not None]
            first = min((i["first_alarm_step"] for i in told), default=None)
            claimed = max((i["lead_steps"] or 0 for i in told), default=None)
            diverged[fam, lab["every"]].append((crash, first, claimed))
    for fam in STEPS:
        if quiet[fam, "runs"]:
            per = 1e4 / quiet[fam, "steps"]
            print(f"{fam}: {quiet[fam, 'runs']} runs not diverged, warnings per 10k steps "
                  f"{quiet[fam, 'warnings'] * per:.2f} (incidents {quiet[fam, 'incidents'] * per:.2f})")
    print("  warnings by rule:", dict(codes.most_common()))
    print("  criticals on runs not diverged:", criticals or "none")
    for (fam, every), runs in sorted(diverged.items()):
        leads = [c - f for c, f, _ in runs if f is not None and f <= c]
        late = [f - c for c, f, _ in runs if f is not None and f > c]
        claimed = [x for _, _, x in runs if x is not None]
        print(f"{fam}, logged every {every}: {len(leads)}/{len(runs)} diverged runs critical at or before the "
              f"labels' crash (lead median {_median(leads)}, under 10: {sum(x < 10 for x in leads)}); the others "
              f"{_median(late)} steps after it (median), {sum(f is None for _, f, _ in runs)} never; the "
              f"reports' own lead (first alarm to their crash step) median {_median(claimed)}")


def _median(xs):
    return statistics.median(xs) if xs else "-"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="train and label one family of runs into OUT")
    g.add_argument("out")
    g.add_argument("--family", choices=sorted(STEPS), required=True)
    g.add_argument("--seed0", type=int, default=0, help="the first run's seed (the runs take seed0, seed0 + 1, ...)")
    s = sub.add_parser("score", help="scan folders made by `generate` with the defaults (or --config) and score them")
    s.add_argument("dirs", nargs="+")
    s.add_argument("--config", help="a crash_signals.toml to scan with instead of the defaults")
    a = ap.parse_args(argv)
    if a.cmd == "generate":
        generate(a.out, a.family, a.seed0)
    else:
        score(a.dirs, a.config)


if __name__ == "__main__":
    main()
