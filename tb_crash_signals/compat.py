"""The source article's API (`TrainingState`, `AlertRule`, `TrainingMonitor`), on our engine.

Code written against the article keeps working:

    monitor = TrainingMonitor()
    for state in states:
        for rule in monitor.check(state):
            print(rule.severity, rule.name, rule.message)
    print(monitor.summary())

`check` returns the rules whose condition holds at this state, as the
article's does, but evaluated by `Monitor` with the whole catalogue and
bounded memory. The article's own four rules keep its names and messages.
Rules appended to `monitor._rules` with a `condition(state, history)` still
run; their history is the last `history_size` states, not every state.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Callable

from tb_crash_signals.analysis.config import article_config
from tb_crash_signals.analysis.rules import RULES
from tb_crash_signals.online.monitor import Monitor

# The article's rule names and messages, for its four rules.
_ARTICLE = {
    "CS101": ("梯度爆炸", "梯度范数超过100，参数更新将不可控"),
    "CS111": ("loss异常跳升", "loss在单步内跳升超过3倍，数据或梯度可能异常"),
    "CS302": ("验证停滞", "验证loss连续10步变化<0.001，模型可能已过拟合"),
    "CS401": ("过拟合预警", "训练loss极低但验证loss远高于训练loss，过拟合信号"),
}


@dataclasses.dataclass
class TrainingState:
    """One step's state, as in the article (0.0 means "not measured")."""

    epoch: int
    step: int
    train_loss: float
    val_loss: float | None = None
    grad_norm: float = 0.0
    param_update_ratio: float = 0.0


@dataclasses.dataclass
class AlertRule:
    """A named condition with a message and a severity ("warning" | "critical")."""

    name: str
    condition: Callable[[TrainingState, list], bool]
    message: str
    severity: str
    code: str | None = None


class TrainingMonitor:
    """The article's monitor, backed by `tb_crash_signals.Monitor`."""

    def __init__(self, config=None, history_size: int = 1000):
        # The article's four rules as it states them, beside the default catalogue.
        self.monitor = Monitor(config if config is not None else article_config(with_defaults=True))
        self._history: collections.deque = collections.deque(maxlen=history_size)
        self._rules: list[AlertRule] = self._default_rules()
        self._builtin = {r.code: r for r in self._rules}

    def _default_rules(self) -> list[AlertRule]:
        rules = []
        for code in self.monitor.config.enabled_codes():
            rule = RULES[code]
            name, message = _ARTICLE.get(code, (rule.symbol, rule.summary))
            rules.append(
                AlertRule(
                    name=name,
                    condition=lambda s, h, code=code: code in self._fired,
                    message=message,
                    severity=self.monitor.config.severity_for(code),
                    code=code,
                )
            )
        return rules

    def check(self, state: TrainingState) -> list[AlertRule]:
        """The rules that fire at this state (per step, like the article's)."""
        values = {"train_loss": state.train_loss, "val_loss": state.val_loss}
        if state.grad_norm:
            values["grad_norm"] = state.grad_norm
        if state.param_update_ratio:
            values["update_ratio"] = state.param_update_ratio
        self.monitor.update(state.step, **values)
        self._fired = {code for code, _ in self.monitor.last_hits}
        history = list(self._history)
        triggered = [r for r in self._rules if r.condition(state, history)]
        self._history.append(state)
        return triggered

    @property
    def should_stop(self) -> bool:
        return self.monitor.should_stop

    def summary(self) -> dict:
        """The article's summary over the last 20 states (its keys and values)."""
        if not self._history:
            return {}
        recent = list(self._history)[-20:]
        return {
            "loss_trend": "下降" if recent[-1].train_loss < recent[0].train_loss else "停滞或上升",
            "grad_norm_max": max(s.grad_norm for s in recent),
            "val_train_gap": (recent[-1].val_loss or 0) - recent[-1].train_loss,
        }
