"""A real PyTorch run whose learning-rate warm-up overshoots: one story with a lead, not dozens.

A tiny MLP trained on CPU with SGD + momentum under a quadratic warm-up to a learning rate far
past the stable one, logged every step with `torch.utils.tensorboard.SummaryWriter`. Its loss
improves, then climbs back to chance level and stays there.
"""

from __future__ import annotations

import pytest

from support.torch_training import train_logged
from tb_crash_signals import scan_logdir

torch = pytest.importorskip("torch")  # installed by scripts/test_all.sh; never skipped in CI


def _train(logdir, seed: int, steps: int = 700, warmup: int = 650, peak: float = 3.0) -> int | None:
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    x = torch.randn(2048, 16)
    y = (x[:, :4].sum(1) > 0).long() + (x[:, 4] > 0.5).long()
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                                torch.nn.ReLU(), torch.nn.Linear(64, 3))
    return train_logged(logdir, model, x, y, torch.nn.functional.cross_entropy,
                        lambda step: peak * min(1.0, (step + 1) / warmup) ** 2, steps, batch=32)


@pytest.mark.slow
def test_a_warmup_that_overshoots_is_one_incident_with_a_lead(tmp_path):
    _train(tmp_path / "warmup-overshoot", seed=1)
    (run,) = scan_logdir(str(tmp_path))["runs"]
    assert run["health"] == "critical"
    critical = [i for i in run["incidents"] if i["severity"] == "critical"]
    assert len(critical) == 1, [i["headline"] for i in run["incidents"]]
    (incident,) = critical
    assert incident["kind"] == "divergence"
    assert incident["crash_step"] is not None and incident["lead_steps"] >= 10, incident
    assert run["summary"]["headline"] == incident["headline"]
    assert len(run["incidents"]) <= 3
    # The divergence's episodes are told once, not re-opened at every further rise.
    assert len(incident["episodes"]) <= 12, [run["episodes"][i]["message"] for i in incident["episodes"]]
