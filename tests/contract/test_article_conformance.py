"""The article's four rules fire on the same steps as its TrainingMonitor.

The monitor below is the source article's logic (DESIGN §1), re-implemented
here as the reference: grad_norm > 100; train_loss > 3x the previous state's
once the history holds 2 states; the last 10 validation losses all within
0.001 of the current; train_loss < 0.1 and val_loss > 5x train_loss.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from support.helpers import series
from tb_crash_signals.analysis.rules import RULES


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


def article_hits(train, val, grad):
    monitor = ArticleMonitor()
    hits = {code: [] for code in monitor.rules}
    for step, (t, v, g) in enumerate(zip(train, val, grad)):
        for code in monitor.check(TrainingState(0, step, float(t), float(v), float(g))):
            hits[code].append(step)
    return hits


def our_hits(train, val, grad):
    data = {"train_loss": series(train), "val_loss": series(val), "grad_norm": series(grad)}
    hits = {}
    for code in ("CS101", "CS111", "CS302", "CS401"):
        rule = RULES[code]
        found = []
        for h in rule.func(data, rule.default_params()):
            found.extend(data[h.signal].steps[h.index].tolist())
        hits[code] = sorted(found)
    return hits


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


def test_same_steps_on_a_scenario_with_every_article_rule_firing():
    train, val, grad = scenario(0)
    ours, theirs = our_hits(train, val, grad), article_hits(train, val, grad)
    assert ours == theirs
    assert all(theirs[code] for code in ("CS101", "CS111", "CS302", "CS401")), theirs


finite = st.floats(min_value=-5, max_value=500, allow_nan=False, width=32)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(finite, st.sampled_from([0.5, 0.5005, 1.0, 0.0]), finite), min_size=1, max_size=60)
)
def test_same_steps_on_random_aligned_series(rows):
    train, val, grad = (np.array(col, dtype=np.float64) for col in zip(*rows))
    assert our_hits(train, val, grad) == article_hits(train, val, grad)
