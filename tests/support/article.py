"""The source article's TrainingMonitor, re-implemented as the reference for its four rules."""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass
class TrainingState:
    epoch: int
    step: int
    train_loss: float
    val_loss: float | None = None
    grad_norm: float = 0.0
    param_update_ratio: float = 0.0


class ArticleMonitor:
    def __init__(self):
        self.history = []
        self.rules = {
            "CS101": lambda s, h: s.grad_norm > 100.0,
            "CS111": lambda s, h: len(h) >= 2 and s.train_loss > h[-1].train_loss * 3,
            "CS302": lambda s, h: len(h) >= 10
            and all(
                (h[-i].val_loss is not None) and abs(h[-i].val_loss - (s.val_loss or 0)) < 0.001
                for i in range(1, 11)
            ),
            "CS401": lambda s, h: s.val_loss is not None
            and s.train_loss < 0.1
            and s.val_loss > s.train_loss * 5,
        }

    def check(self, state):
        fired = [code for code, cond in self.rules.items() if cond(state, self.history)]
        self.history.append(state)
        return fired


def scenario(seed):
    rng = np.random.default_rng(seed)
    n = 400
    train = np.exp(-np.arange(n) / 80) * 2 + 0.02 * rng.random(n)
    train[rng.integers(5, n, 4)] *= rng.uniform(2, 6, 4)
    val = np.round(train * rng.uniform(1, 8) + 0.05, 3)
    val[250:300] = val[250]  # stagnation
    grad = np.exp(rng.normal(1, 1, n))
    grad[rng.integers(0, n, 5)] = rng.uniform(90, 300, 5)
    return train, val, grad
