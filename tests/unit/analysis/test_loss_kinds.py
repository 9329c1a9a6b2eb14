"""Runs whose losses are not an objective (a GAN's, a reinforcement learner's): the rules that read
a loss as one stay off them, the others watch them as any run."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from support.helpers import logical, series
from tb_crash_signals.analysis.engine import analyze_run
from tb_crash_signals.analysis.rules import RULES
from tb_crash_signals.analysis.signals import LOSS_KINDS
from tb_crash_signals.online.monitor import Monitor


def _td_loss(n=2000, seed=0):
    """A DQN's TD loss as the values it learns grow: 0.02 to ~0.7 over the run, noisy."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return 0.02 + 0.7 * (1 - np.exp(-t / 600)) * np.exp(0.3 * rng.standard_normal(n))


def _analysed(kind, **values):
    data = {k: series(v) for k, v in values.items()}
    run = dataclasses.replace(logical(**data), loss_kind=kind)
    return analyze_run(run, data)


def test_a_growing_loss_is_a_divergence_of_an_objective_only():
    assert _analysed("objective", train_loss=_td_loss()).health == "critical"
    for kind in ("adversarial", "reinforcement"):
        result = _analysed(kind, train_loss=_td_loss())
        assert result.health == "ok" and not result.episodes, kind
        assert "NaN/Inf" in result.summary["headline"]


def test_nan_blowups_and_gradients_are_watched_on_every_kind():
    loss = _td_loss()
    loss[1500:] = math.nan
    grad = np.ones(2000)
    grad[1200:1210] = 500.0  # over the article's threshold of 100
    for kind in LOSS_KINDS:
        codes = {e.code for e in _analysed(kind, train_loss=loss, grad_norm=grad).episodes}
        assert {"CS001", "CS101"} <= codes, (kind, codes)
    big = _td_loss()
    big[1800] = 1e6  # over CS002's bound
    assert "CS002" in {e.code for e in _analysed("reinforcement", train_loss=big).episodes}


def test_the_objective_rules_are_those_that_read_a_loss_as_one():
    objective = {code for code, rule in RULES.items() if rule.objective}
    # every rule on the validation loss, and every divergence, plateau and overfit rule, reads it so
    assert {code for code, rule in RULES.items() if rule.family in ("divergence", "plateau", "overfit")} <= objective
    assert not objective & {"CS001", "CS002", "CS003", "CS004", "CS101", "CS102", "CS201"}


@pytest.mark.parametrize("kind", LOSS_KINDS)
def test_the_monitor_finds_what_the_batch_analysis_finds_on_each_kind(kind):
    loss = _td_loss(seed=1)
    loss[1700:] = math.nan
    batch = _analysed(kind, train_loss=loss)
    monitor = Monitor(loss_kind=kind)
    for step, value in enumerate(loss):
        monitor.update(step, train_loss=float(value))
    assert [(e.code, e.start_step, e.end_step) for e in monitor.episodes()] == \
           [(e.code, e.start_step, e.end_step) for e in batch.episodes]
    assert monitor.report()["loss_kind"] == kind


def test_a_monitor_state_resumes_only_into_the_same_kind():
    monitor = Monitor(loss_kind="adversarial")
    for step, value in enumerate(_td_loss(200)):
        monitor.update(step, train_loss=float(value))
    Monitor(loss_kind="adversarial").load_state_dict(monitor.state_dict())
    with pytest.raises(ValueError, match="loss_kind"):
        Monitor().load_state_dict(monitor.state_dict())
