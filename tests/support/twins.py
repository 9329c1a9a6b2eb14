"""The batch rules and their streaming twins side by side: what each says of the same series."""

from __future__ import annotations

import dataclasses

from tb_crash_signals.analysis.rules import RULES
from tb_crash_signals.analysis.rules.base import param_bounds
from tb_crash_signals.online.monitor import Monitor


def _close(fit):
    """A fit's fields, floats to 12 significant digits: the batch and streaming least squares sum in
    different orders, so their last bits may differ."""
    if fit is None:
        return None
    return {k: float(f"{v:.12g}") if isinstance(v, float) else v for k, v in dataclasses.asdict(fit).items()}


def whole(episodes):
    """Everything an episode says, fit included."""
    return [(e.to_json(), _close(e.fit)) for e in episodes]


def updates_of(data):
    """The series as a training loop logs them: step by step, every signal of a step at once."""
    by_step: dict[int, dict] = {}
    for sig, s in data.items():
        for step, v in zip(s.steps.tolist(), s.values.tolist()):
            by_step.setdefault(step, {})[sig] = v
    return sorted(by_step.items())


def monitored(data, config):
    """A Monitor fed the series step by step (`updates_of`)."""
    m = Monitor(config)
    for step, values in updates_of(data):
        m.update(step, **values)
    return m


def small_params(code, pick):
    """The rule's parameters with its integer ones (windows, counts) small, within their declared
    range: `pick(low, high)` draws each (hypothesis' integers, random's randint)."""
    p = RULES[code].default_params()
    changes = {}
    for f in dataclasses.fields(p):
        value = getattr(p, f.name)
        if not isinstance(value, int) or isinstance(value, bool):
            continue
        bounds = param_bounds(type(p), f.name)
        low = int(bounds.low) if bounds is not None and bounds.low is not None else 0
        low = max(low, 1 if f.name == "cooldown" else 0)
        high = max(low, 1) + 30
        if bounds is not None and bounds.high is not None:
            high = min(high, int(bounds.high))
        changes[f.name] = pick(low, max(high, low))
    return dataclasses.replace(p, **changes)
