"""A real PyTorch run whose learning-rate warm-up overshoots: one story with a lead, not dozens.

A tiny MLP trained on CPU with SGD + momentum under a quadratic warm-up to a learning rate far
past the stable one, logged every step with `torch.utils.tensorboard.SummaryWriter`. Its loss
improves, then climbs back to chance level and stays there.
"""

from __future__ import annotations

import math

import pytest

from tb_crash_signals import scan_logdir

torch = pytest.importorskip("torch")  # installed by scripts/test_all.sh; never skipped in CI


def _train(logdir, seed: int, steps: int = 700, warmup: int = 650, peak: float = 3.0) -> int | None:
    from torch.utils.tensorboard import SummaryWriter

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    x = torch.randn(2048, 16)
    y = (x[:, :4].sum(1) > 0).long() + (x[:, 4] > 0.5).long()
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                                torch.nn.ReLU(), torch.nn.Linear(64, 3))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    first_nonfinite = None
    with SummaryWriter(str(logdir)) as w:
        for step in range(steps):
            lr = peak * min(1.0, (step + 1) / warmup) ** 2
            for g in opt.param_groups:
                g["lr"] = lr
            idx = torch.randint(0, x.shape[0], (32,))
            loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), math.inf)
            opt.step()
            w.add_scalar("Loss/train", loss.item(), step)
            w.add_scalar("Grad/norm", gnorm.item(), step)
            w.add_scalar("LR", lr, step)
            if not math.isfinite(loss.item()) and first_nonfinite is None:
                first_nonfinite = step
    return first_nonfinite


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
