"""A real GAN's losses are not an objective: its healthy run raises nothing, its NaN is critical.

A small GAN (`support.torch_training.train_gan`) learns a ring of 8 Gaussians, its discriminator's
and generator's losses logged every step with torch's SummaryWriter under the PyTorch DCGAN
tutorial's names. The discriminator's loss climbs from its first steps' low to its equilibrium
(log 4) as the generator learns: read as an objective, that is a divergence. The run is told apart
by its tags (a generator's and a discriminator's loss) and watched for NaN/Inf, blow-ups and
gradients only; a train loss the config names is judged as an objective, as before.
"""

from __future__ import annotations

import pytest
from tensorboard.backend.event_processing import event_accumulator

from support.torch_training import train_gan
from tb_crash_signals import Monitor, scan_logdir
from tb_crash_signals.analysis.config import Config
from tb_crash_signals.report.text import format_text

torch = pytest.importorskip("torch")  # installed by scripts/test_all.sh; never skipped in CI

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def healthy_gan(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("gan")
    assert train_gan(logdir / "gan", seed=0, steps=800, lr=2e-3) is None
    return logdir


def test_a_healthy_gan_raises_nothing_and_says_what_it_watches(healthy_gan):
    report = scan_logdir(str(healthy_gan))
    (run,) = report["runs"]
    assert run["loss_kind"] == "adversarial"
    assert run["signals"]["train_loss"]["tag"] in ("Loss/D", "Loss/G")
    assert run["health"] == "ok" and run["incidents"] == [], run["incidents"]
    assert "GAN" in run["summary"]["headline"] and "NaN/Inf" in run["summary"]["headline"]
    assert "ok         gan  [GAN losses: watched for NaN/Inf" in format_text(report)


def test_the_same_gan_judged_as_an_objective_is_what_cried_wolf(healthy_gan):
    # What the classification silences: its discriminator's climb to equilibrium read as a divergence.
    config = Config(signals={"train_loss": ("Loss/D",)})
    (run,) = scan_logdir(str(healthy_gan), config=config)["runs"]
    assert run["loss_kind"] == "objective"
    assert run["health"] == "critical", [i["headline"] for i in run["incidents"]]


def test_a_gan_whose_losses_turn_nan_is_critical(tmp_path):
    crashed = train_gan(tmp_path / "lsgan", seed=0, steps=200, lr=0.2, least_squares=True)
    assert crashed is not None
    (run,) = scan_logdir(str(tmp_path))["runs"]
    assert run["loss_kind"] == "adversarial" and run["health"] == "critical"
    (incident,) = [i for i in run["incidents"] if i["severity"] == "critical"]
    assert incident["crash_step"] is not None and incident["crash_step"] <= crashed


def test_the_monitor_told_it_is_a_gan_finds_what_scan_finds(healthy_gan):
    (scanned,) = scan_logdir(str(healthy_gan))["runs"]
    acc = event_accumulator.EventAccumulator(str(healthy_gan / "gan"), size_guidance={"scalars": 0})
    acc.Reload()
    tag = scanned["signals"]["train_loss"]["tag"]
    for kind, expected in (("adversarial", "ok"), ("objective", "critical")):
        monitor = Monitor(loss_kind=kind)
        for event in acc.Scalars(tag):
            monitor.update(event.step, train_loss=event.value)
        assert monitor.health == expected, kind
    assert monitor.report()["loss_kind"] == "objective"
    with pytest.raises(ValueError, match="loss_kind"):
        Monitor(loss_kind="gan")
