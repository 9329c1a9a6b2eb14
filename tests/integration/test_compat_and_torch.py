"""The article's API on our engine, and the PyTorch helpers (torch is installed by scripts/test_all.sh)."""

import math

import numpy as np
import pytest
import torch

from support.article import ArticleMonitor, scenario
from tb_crash_signals.compat import AlertRule, TrainingMonitor, TrainingState
from tb_crash_signals.torch_utils import global_grad_norm, update_ratio


def test_compat_check_fires_the_articles_rules_on_the_articles_steps():
    train, val, grad = scenario(1)
    ours, ref = TrainingMonitor(), ArticleMonitor()
    names = {"梯度爆炸": "CS101", "loss异常跳升": "CS111", "验证停滞": "CS302", "过拟合预警": "CS401"}
    for step, (t, v, g) in enumerate(zip(train, val, grad)):
        state = TrainingState(0, step, float(t), float(v), float(g))
        got = {names[r.name] for r in ours.check(state) if r.name in names}
        assert got == set(ref.check(state)), step
    summary = ours.summary()
    assert set(summary) == {"loss_trend", "grad_norm_max", "val_train_gap"}


def test_compat_runs_custom_rules_and_exposes_should_stop():
    m = TrainingMonitor()
    m._rules.append(AlertRule("tiny", lambda s, h: len(h) >= 1 and s.train_loss < 0.5, "low", "warning"))
    assert [r.name for r in m.check(TrainingState(0, 0, 1.0))] == []
    assert "tiny" in [r.name for r in m.check(TrainingState(0, 1, 0.4))]
    m.check(TrainingState(0, 2, float("nan")))
    assert m.should_stop


@pytest.mark.parametrize("hidden", [16, 1100])  # a small model (one flat copy), and a large one (per-tensor norms)
def test_global_grad_norm_matches_clip_grad_norm(hidden):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1000 if hidden > 100 else 8, hidden), torch.nn.ReLU(),
                                torch.nn.Linear(hidden, 2))
    model(torch.randn(4, model[0].in_features)).pow(2).sum().backward()
    expected = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1e9))
    assert math.isclose(global_grad_norm(model), expected, rel_tol=1e-6)
    assert math.isclose(global_grad_norm(model, norm_type=1.0),
                        float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9, norm_type=1.0)), rel_tol=1e-5)
    assert global_grad_norm(torch.nn.Linear(2, 2)) == 0.0


def test_update_ratio_measures_one_optimizer_step():
    torch.manual_seed(0)
    model = torch.nn.Linear(10, 1)
    before = torch.cat([p.detach().flatten().clone() for p in model.parameters()])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(16, 10)).pow(2).mean().backward()
    with update_ratio(model) as ratio:
        opt.step()
    after = torch.cat([p.detach().flatten() for p in model.parameters()])
    expected = float((after - before).norm() / before.norm())
    assert math.isclose(ratio.value, expected, rel_tol=1e-5) and ratio.value > 0
    assert np.isfinite(ratio.value)


def test_update_ratio_of_parameters_of_several_dtypes():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(10, 4), torch.nn.Linear(4, 1).double())
    before = torch.cat([p.detach().double().flatten().clone() for p in model.parameters()])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model[1](model[0](torch.randn(16, 10)).double()).pow(2).mean().backward()
    with update_ratio(model) as ratio:
        opt.step()
    after = torch.cat([p.detach().double().flatten() for p in model.parameters()])
    expected = float((after - before).norm() / before.norm())
    assert math.isclose(ratio.value, expected, rel_tol=1e-5) and ratio.value > 0
    # All-zero weights: nothing to measure the update against.
    with update_ratio([torch.zeros(3, requires_grad=True)]) as zero:
        pass
    assert zero.value == math.inf
