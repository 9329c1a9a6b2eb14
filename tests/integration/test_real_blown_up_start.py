"""A real classifier at a learning rate far too high: it blows up in its first steps, then sits at chance.

A 10-class MLP under Adam at 0.1, per-step losses of batches of 32: 2.3 (ln 10) at its first step,
3-10 over the next few, then ~2.2 (the labels' prior) for good while its grad norm collapses. The
median of its first 10 points made 2.2 read as learnt ("levelled off after it learnt", a note,
"lower the learning rate to go further"); its start was its first point. It is told as a loss
stuck near where it started, advised both ways (too low, or too high to settle).
"""

from __future__ import annotations

import pytest

from support.helpers import logged_scalars, monitor_replaying
from support.torch_training import train_logged
from tb_crash_signals import scan_logdir
from tb_crash_signals.analysis.incidents import STUCK_ADVICE

torch = pytest.importorskip("torch")  # installed by scripts/test_all.sh; never skipped in CI

pytestmark = pytest.mark.slow

TAGS = {"train/loss": "train_loss", "train/grad_norm": "grad_norm", "train/lr": "lr"}


def _train(logdir, lr: float, steps: int = 800) -> list[float]:
    torch.manual_seed(1)
    torch.set_num_threads(1)
    w = torch.randn(20, 10)
    x = torch.randn(10000, 20)
    y = (x @ w + 0.5 * torch.randn(10000, 10)).argmax(1)
    net = torch.nn.Sequential(torch.nn.Linear(20, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128), torch.nn.ReLU(),
                              torch.nn.Linear(128, 10))
    train_logged(logdir, net, x, y, torch.nn.functional.cross_entropy, lambda step: lr, steps, batch=32,
                 tags=tuple(TAGS), adam=True)
    logged = logged_scalars(logdir, ["train/loss"])
    return [logged[step]["train/loss"] for step in sorted(logged)]


def test_a_run_that_blew_up_and_sat_at_chance_is_stuck_near_its_start(tmp_path):
    losses = _train(tmp_path / "hot", lr=0.1)
    later = sorted(losses[100:])[len(losses[100:]) // 2]
    assert max(losses[:10]) > 2 * losses[0] and later > 0.9 * losses[0]  # blew up, never learnt
    (run,) = scan_logdir(str(tmp_path))["runs"]
    plateaus = [i for i in run["incidents"] if i["kind"] == "plateau"]
    assert plateaus and plateaus[0]["severity"] == "warning", [i["headline"] for i in run["incidents"]]
    assert "near where it started" in plateaus[0]["headline"] and plateaus[0]["advice"] == STUCK_ADVICE
    assert not [i for i in run["incidents"] if "after it learnt" in i["headline"]]
    monitor = monitor_replaying(tmp_path / "hot", TAGS)
    assert [(i.kind, i.severity, i.headline) for i in monitor.incidents()][:1] == [
        ("plateau", "warning", plateaus[0]["headline"])
    ]


def test_the_same_model_at_a_sane_rate_learns_and_is_not_stuck(tmp_path):
    losses = _train(tmp_path / "sane", lr=1e-3)
    assert min(losses[-100:]) < 0.5 * losses[0]
    (run,) = scan_logdir(str(tmp_path))["runs"]
    stuck = [i for i in run["incidents"] if i["kind"] == "plateau" and i["severity"] != "info"]
    assert not stuck, [i["headline"] for i in run["incidents"]]
