"""Sweeps written by the real writers, for the hyperparameter tests.

* `write_keras_grid`: the structure of `keras-mnist-lrsweep`'s
  learning_rate x optimizer grid: one run folder per cell holding the
  hparams plugin's session_start_info (TensorBoard's own `hparams.summary_v2`
  proto, written by its EventFileWriter, as Keras' HParams callback does) and
  `train/` + `validation/` runs of `epoch_loss`. The adaptive optimizers at
  learning_rate=1.0 blow up at epoch 0 (loss ~3e4, then stuck at ln 10).
* `write_torch_sweep`: `torch.utils.tensorboard.SummaryWriter` runs, each
  with `add_hparams` (which writes a child run named by the time).
* `write_lightning_sweep`: `version_N` runs with an `hparams.yaml` dumped
  by PyYAML the way Lightning's `save_hparams_to_yaml` does (a real
  `torch.nn` loss module and an `OrderedDict` in it).
"""

from __future__ import annotations

import collections
import math
import os

import numpy as np
from tensorboard.compat.proto import event_pb2
from tensorboard.plugins.hparams import summary_v2 as hp

from support.eventwriters import write_events, write_scalars

LEARNING_RATES = (0.001, 0.01, 0.1, 1.0)
OPTIMIZERS = ("Adadelta", "Adagrad", "Adam", "Adamax", "Ftrl", "Nadam", "RMSprop", "SGD")
ADAPTIVE = ("Adam", "Adamax", "Nadam", "RMSprop")


def _curve(exploded: bool, epochs: int, seed: int):
    rng = np.random.default_rng(seed)
    if exploded:
        train = [3.0e4] + [2.35 + 0.01 * rng.standard_normal() for _ in range(epochs - 1)]
        val = [2.36 + 0.02 * rng.standard_normal() for _ in range(epochs)]
    else:
        t = np.arange(epochs)
        train = list(0.05 + 1.2 * np.exp(-t / 4) * (1 + 0.01 * rng.standard_normal(epochs)))
        val = list(0.08 + 1.2 * np.exp(-t / 4) * (1 + 0.01 * rng.standard_normal(epochs)))
    return [(i, float(v)) for i, v in enumerate(train)], [(i, float(v)) for i, v in enumerate(val)]


def hparams_event(values: dict, trial_id: str | None = None):
    """An Event holding the hparams plugin's session_start_info for `values`."""
    return event_pb2.Event(wall_time=1.7e9, summary=hp.hparams_pb(values, trial_id=trial_id, start_time_secs=1.7e9))


def write_keras_grid(root, rates=LEARNING_RATES, optimizers=OPTIMIZERS, epochs=12) -> list[str]:
    """The learning_rate x optimizer grid under `root`; returns the run names (relative)."""
    names = []
    for i, lr in enumerate(rates):
        for j, opt in enumerate(optimizers):
            name = f"learning_rate={lr}_optimizer={opt}"
            run = os.path.join(root, name)
            values = {"learning_rate": lr, "optimizer": opt, "batch_size": 128, "patience": 10}
            write_events(run, [hparams_event(values)])
            train, val = _curve(lr == 1.0 and opt in ADAPTIVE, epochs, seed=10 * i + j)
            write_scalars(os.path.join(run, "train"), {"epoch_loss": train})
            write_scalars(os.path.join(run, "validation"), {"epoch_loss": val})
            names.append(name)
    return names


def write_torch_sweep(root, rates=(1e-4, 1e-3, 1e-2, 1.0), seeds=(0, 1)) -> list[str]:
    """SummaryWriter runs `lr{i}_s{seed}` (names without the values); the lr=1.0 ones go NaN."""
    from torch.utils.tensorboard import SummaryWriter

    names = []
    for i, lr in enumerate(rates):
        for seed in seeds:
            name = f"run{i}_s{seed}"
            with SummaryWriter(log_dir=os.path.join(root, name)) as w:
                rng = np.random.default_rng(seed + 7 * i)
                for step in range(60):
                    loss = 2.0 * math.exp(-step / 15) + 0.1 + 0.01 * rng.standard_normal()
                    if lr >= 1.0 and step >= 30:
                        loss = float("nan")
                    w.add_scalar("Loss/train", loss, step)
                w.add_hparams({"lr": lr, "seed": seed, "optimizer": "adam", "amp": False}, {"hparam/final": 0.0})
            names.append(name)
    return names


def write_lightning_sweep(root, rates=(1e-4, 1e-3, 1e-2, 0.5), repeats=2) -> list[str]:
    """`lightning_logs/version_N` runs with Lightning-style hparams.yaml; lr=0.5 diverges."""
    import torch
    import yaml

    names = []
    version = 0
    for lr in rates:
        for r in range(repeats):
            run = os.path.join(root, "lightning_logs", f"version_{version}")
            rng = np.random.default_rng(version)
            loss = [(s, float(1.5 * math.exp(-s / 20) + 0.2 + 0.01 * rng.standard_normal())) for s in range(80)]
            if lr >= 0.5:
                loss = [(s, v * math.exp(0.25 * max(0, s - 20))) for s, v in loss]
            write_scalars(run, {"train_loss": loss})
            hparams = {
                "lr": lr,
                "batch_size": 32,
                "hidden": {"dim": 64, "dropout": 0.1},
                "loss_fn": torch.nn.BCEWithLogitsLoss(),
                "betas": (0.9, 0.999),
                "extra": collections.OrderedDict(a=1),
            }
            with open(os.path.join(run, "hparams.yaml"), "w", encoding="utf-8") as f:
                # Lightning's save_hparams_to_yaml: yaml.dump of every value that dumps.
                yaml.dump(hparams, f)
            names.append(f"lightning_logs/version_{version}")
            version += 1
            del r
    return names
