"""A real noise-free function fit under full-batch Adam: bursts of its grad norm deep into convergence.

A Tanh MLP fits a damped sine on 256 points with full-batch Adam (as a physics-informed network or
a function approximator trains). The MSE falls from 0.3 to ~1e-6; from a few hundred steps on, its
grad norm, ~100x under where it started, bursts 20-50x over ten or twenty steps and comes back,
again and again (Adam at the edge of stability). Read alone, each burst "doubles every 3-8 steps"
toward 100: a critical, dozens of times, on a healthy run that a callback would have stopped. The
bursts reach about the grad norm's initial level; an explosion passes twice that on its way to the
threshold (CS201's `under_start`).
"""

from __future__ import annotations

import pytest

from support.helpers import logged_scalars, monitor_replaying
from support.torch_training import train_logged
from tb_crash_signals import scan_logdir
from tb_crash_signals.analysis.config import from_dict

torch = pytest.importorskip("torch")  # installed by scripts/test_all.sh; never skipped in CI

pytestmark = pytest.mark.slow

TAGS = {"train/loss": "train_loss", "train/grad_norm": "grad_norm", "train/lr": "lr"}


def _fit(logdir, seed: int, lr: float, steps: int) -> list[float]:
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    x = torch.linspace(-3, 3, 256)[:, None]
    y = torch.sin(2 * x) * torch.exp(-0.1 * x**2)
    net = torch.nn.Sequential(torch.nn.Linear(1, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                              torch.nn.Linear(64, 1))
    train_logged(logdir, net, x, y, lambda out, target: ((out - target) ** 2).mean(), lambda step: lr, steps,
                 batch=None, tags=tuple(TAGS), adam=True)
    logged = logged_scalars(logdir, ["train/loss"])
    return [logged[step]["train/loss"] for step in sorted(logged)]


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("fit")
    for seed, lr in ((1, 1e-3), (2, 3e-3)):
        losses = _fit(logdir / f"seed{seed}", seed, lr, steps=2500)
        assert min(losses[-100:]) < 1e-4 * losses[0]  # it converged
    return logdir


def test_bursts_deep_into_convergence_are_not_an_explosion(fitted):
    runs = scan_logdir(str(fitted))["runs"]
    assert len(runs) == 2
    for run in runs:
        assert run["health"] != "critical", (run["run"], [i["headline"] for i in run["incidents"]])
        assert not [e for e in run["episodes"] if e["code"] == "CS201"], run["episodes"][:3]


def test_read_from_any_level_the_bursts_were_critical_again_and_again(fitted):
    config = from_dict({"rules": {"CS201": {"under_start": 0.0}}})
    for run in scan_logdir(str(fitted), config=config)["runs"]:
        growth = [e for e in run["episodes"] if e["code"] == "CS201"]
        assert len(growth) >= 3 and all(e["severity"] == "critical" for e in growth), run["run"]


def test_the_monitor_fed_step_by_step_never_asks_to_stop(fitted):
    for seed in (1, 2):
        monitor = monitor_replaying(fitted / f"seed{seed}", TAGS)
        assert not monitor.should_stop, [i.headline for i in monitor.incidents()]
