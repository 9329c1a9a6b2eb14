"""Real runs whose loss and gradients live far from order 1: their scale is no explosion.

An MLP regressing unnormalised targets (~1000, spread ~500) with MSE starts at a loss ~1e6 and a
grad norm in the thousands; a classifier whose cross-entropy is summed over its batch of 256
starts at a loss of ~400 and a grad norm of ~70 that wanders 1-3x above it as it learns. Both
train. The absolute bounds (CS002's loss bound 1e4, CS101's grad-norm threshold 100) assume a
scale of order 1: a series that starts near or beyond them, or its first point alone, tells its
scale, and the relative rules judge it. The regression at a learning rate far too high still
blows up, and is told so.
"""

from __future__ import annotations

import pytest

from support.helpers import monitor_replaying
from support.torch_training import TAGS, noisy_classes, train_logged
from tb_crash_signals import scan_logdir

torch = pytest.importorskip("torch")  # installed by scripts/test_all.sh; never skipped in CI

pytestmark = pytest.mark.slow


def _mlp(inputs: int, outputs: int):
    return torch.nn.Sequential(torch.nn.Linear(inputs, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                               torch.nn.ReLU(), torch.nn.Linear(64, outputs))


def _regress_unscaled(logdir, seed: int, lr: float, adam: bool) -> int | None:
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    x = torch.randn(4096, 20)
    y = 1000 + 300 * x[:, :3].sum(1, keepdim=True) + 30 * torch.randn(4096, 1)
    return train_logged(logdir, _mlp(20, 1), x, y, torch.nn.functional.mse_loss, lambda step: lr, 600,
                        batch=64, adam=adam, stop_after_nonfinite=10)


def _classify_summed(logdir, seed: int) -> None:
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    x, y = noisy_classes(torch.randn(20, 5), 4096)

    def summed(out, target):
        return torch.nn.functional.cross_entropy(out, target, reduction="sum")

    train_logged(logdir, _mlp(20, 5), x, y, summed, lambda step: 1e-3, 600, batch=256, adam=True)


@pytest.fixture(scope="module")
def large(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("large")
    assert _regress_unscaled(logdir / "unscaled", 1, lr=1e-2, adam=True) is None
    _classify_summed(logdir / "summed", 2)
    return logdir


def test_runs_that_start_beyond_the_bounds_and_train_are_not_critical(large):
    runs = {run["run"]: run for run in scan_logdir(str(large))["runs"]}
    assert set(runs) == {"unscaled", "summed"}
    for name, run in runs.items():
        assert run["health"] != "critical", (name, [i["headline"] for i in run["incidents"]])
        assert not [e for e in run["episodes"] if e["code"] in ("CS002", "CS101")], (name, run["episodes"])
    # What the plain bounds (the article's threshold) said of them: exploded, from the first point
    # of the one that starts beyond them, and once the other's grad norm wandered over 100.
    from tb_crash_signals.analysis.config import from_dict

    plain = from_dict({"rules": {"CS002": {"min_rise": 0.0}, "CS101": {"min_rise": 0.0}}})
    told = {run["run"]: [e for e in run["episodes"] if e["code"] in ("CS002", "CS101")]
            for run in scan_logdir(str(large), config=plain)["runs"]}
    assert min(e["start_step"] for e in told["unscaled"]) == 0
    assert told["summed"] and all(e["severity"] == "critical" for e in told["summed"])


def test_the_monitor_fed_step_by_step_never_asks_to_stop(large):
    for name in ("unscaled", "summed"):
        monitor = monitor_replaying(large / name, TAGS)
        assert not monitor.should_stop, (name, [i.headline for i in monitor.incidents()])


def test_the_same_regression_at_a_learning_rate_far_too_high_is_told(tmp_path):
    first_nonfinite = _regress_unscaled(tmp_path / "hot", 1, lr=1e-3, adam=False)
    (run,) = scan_logdir(str(tmp_path))["runs"]
    critical = [i for i in run["incidents"] if i["severity"] == "critical"]
    assert critical and critical[0]["kind"] == "divergence", [i["headline"] for i in run["incidents"]]
    if first_nonfinite is not None:
        assert critical[0]["first_alarm_step"] <= first_nonfinite, (critical[0], first_nonfinite)
