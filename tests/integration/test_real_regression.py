"""A real regression on unscaled targets: gradients that start near 100 are not an explosion.

A small ReLU MLP regresses a sum of features of mean 2 and spread 3 with MSE (initial loss ~100,
initial grad norm ~80-90, crossing 100 on some batches while the loss falls), under SGD with
momentum and a linear warm-up, logged every step with `torch.utils.tensorboard.SummaryWriter`.
With a sane peak learning rate it trains; with one ten times higher the warm-up overshoots and
the loss overflows to Inf.
"""

from __future__ import annotations

import pytest

from support.torch_training import train_logged, train_regression
from tb_crash_signals import scan_logdir

torch = pytest.importorskip("torch")  # installed by scripts/test_all.sh; never skipped in CI


def _train(logdir, peak: float, seed: int = 0, steps: int = 1300, warmup: int = 1200) -> int | None:
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    x = torch.randn(4096, 16) * 3 + 2
    y = x[:, :4].sum(1, keepdim=True) + 0.5 * torch.sin(x[:, 4:5])
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                                torch.nn.ReLU(), torch.nn.Linear(64, 1))
    return train_logged(logdir, model, x, y, torch.nn.functional.mse_loss,
                        lambda step: peak * min(1.0, (step + 1) / warmup), steps, batch=64,
                        tags=("train/loss", "train/grad_norm", "train/lr"), stop_after_nonfinite=20)


@pytest.mark.slow
def test_large_starting_gradients_are_not_an_explosion(tmp_path):
    assert _train(tmp_path / "regression", peak=1e-3) is None
    (run,) = scan_logdir(str(tmp_path))["runs"]
    assert run["health"] != "critical", [i["headline"] for i in run["incidents"]]
    assert not [e for e in run["episodes"] if e["code"] == "CS101"]


@pytest.mark.slow
def test_its_warmup_overshoot_is_one_divergence(tmp_path):
    first_nonfinite = _train(tmp_path / "overshoot", peak=1e-2)
    (run,) = scan_logdir(str(tmp_path))["runs"]
    critical = [i for i in run["incidents"] if i["severity"] == "critical"]
    assert len(critical) == 1 and critical[0]["kind"] == "divergence", [i["headline"] for i in run["incidents"]]
    (incident,) = critical
    # Not the early steps, whose gradients were as large: the overshoot, hundreds of steps in.
    assert incident["first_alarm_step"] > 300, incident
    if first_nonfinite is not None:
        assert incident["first_alarm_step"] < first_nonfinite - 100, (incident, first_nonfinite)
    assert len(run["incidents"]) <= 3
    assert len(incident["episodes"]) <= 12, [run["episodes"][i]["message"] for i in incident["episodes"]]


def _train_noisy(logdir, seed: int) -> None:
    # Minibatches of 16: the per-step MSE spreads +-40 % around its level from the first step.
    train_regression(logdir, seed, features=32, samples=4096,
                     lr_at=lambda step: 0.01 * min(1.0, (step + 1) / 300), steps=400, batch=16)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_noisy_regression_in_its_warmup_is_no_divergence(tmp_path, seed):
    # Seed 0's first points happened to be low: a "best level" read from the median of one or a
    # few of them made it "climb away from its best" and "lose what it learnt" by step 40.
    _train_noisy(tmp_path / "noisy", seed)
    (run,) = scan_logdir(str(tmp_path))["runs"]
    assert run["health"] != "critical", [i["headline"] for i in run["incidents"]]
