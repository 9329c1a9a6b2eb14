"""The demo's synthetic data: teacher networks, classification and regression sets, batches."""

from __future__ import annotations

import dataclasses

import numpy as np

F32 = np.float32


# Data


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
