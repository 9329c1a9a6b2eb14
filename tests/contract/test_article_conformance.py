"""The article's four rules, under the `article` preset, fire on the same steps as its TrainingMonitor.

The reference (support/article.py) is the source article's logic (DESIGN §1),
re-implemented: grad_norm > 100; train_loss > 3x the previous state's
once the history holds 2 states; the last 10 validation losses all within
0.001 of the current; train_loss < 0.1 and val_loss > 5x train_loss.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from support.article import ArticleMonitor, TrainingState, scenario
from support.helpers import series
from tb_crash_signals.analysis.config import article_config
from tb_crash_signals.analysis.rules import RULES


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
    article = article_config()  # the preset keeps the article's exact conditions
    for code in ("CS101", "CS111", "CS302", "CS401"):
        rule = RULES[code]
        found = []
        for h in rule.func(data, article.params_for(code)):
            found.extend(data[h.signal].steps[h.index].tolist())
        hits[code] = sorted(found)
    return hits


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
