"""What the three callbacks share: a Monitor, the incidents it reported, the stop decision."""

from __future__ import annotations

import importlib
from typing import Callable, Iterable

from tb_crash_signals.analysis.incidents import Incident
from tb_crash_signals.analysis.rules import RULES
from tb_crash_signals.online.monitor import Monitor


def require(module: str, extra: str, what: str):
    """Imports a framework, or raises an ImportError that names the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(
            f"tb_crash_signals.integrations.{extra} needs {what}: pip install \"tb-crash-signals[{extra}]\" ({e})"
        ) from e


def describe(incident: Incident, stopping_at: int | None = None) -> str:
    """One line per incident: what, where, and what to do (and the stop, if any)."""
    where = f"step {incident.first_alarm_step}"
    if incident.crash_step is not None and incident.crash_step != incident.first_alarm_step:
        where += f", crash at step {incident.crash_step}"
    line = f"crash signals: {incident.severity} {incident.kind} ({where}): {incident.headline} — {incident.advice}"
    if stopping_at is not None:
        line += f". Training stopped at step {stopping_at}."
    return line


class Watch:
    """A Monitor fed by a callback, with the stop decision and the reporting.

    Args:
        config: a Config, a TOML path or None (the Monitor's).
        stop_on: rule codes whose critical episodes stop training (default: every critical).
        stop: False only reports, never stops.
        report: called with (severity, line) for each incident, once, when it opens.
    """

    def __init__(self, config=None, stop_on: Iterable[str] | None = None, stop: bool = True,
                 report: Callable[[str, str], None] | None = None):
        if stop_on is not None:
            stop_on = [str(code).upper() for code in stop_on]
            unknown = [code for code in stop_on if code not in RULES]
            if unknown:
                raise ValueError(f"stop_on: unknown rule code(s) {', '.join(unknown)} "
                                 "(`tb-crash-signals rules` lists them)")
        self.monitor = Monitor(config, on_incident=self._on_incident, stop_on=stop_on)
        self.stop = stop
        self.stopped_step: int | None = None
        self.reported: list[Incident] = []
        self._report = report
        self._step: int | None = None
        self._stop_told = False

    def _on_incident(self, incident: Incident):
        self.reported.append(incident)
        # The stop is told once, with the first critical incident of the step that stops training.
        stopping = self.stop and not self._stop_told and self.monitor.should_stop and incident.severity == "critical"
        self._stop_told = self._stop_told or stopping
        if self._report is not None:
            self._report(incident.severity, describe(incident, self._step if stopping else None))

    def update(self, step: int, **values) -> bool:
        """Feeds one step; True when training should stop now (the first time only)."""
        values = {k: v for k, v in values.items() if v is not None}
        if not values:
            return False
        self._step = step
        self.monitor.update(step, **values)
        if self.stop and self.stopped_step is None and self.monitor.should_stop:
            self.stopped_step = step
            return True
        return False

    @property
    def stopping(self) -> bool:
        return self.stopped_step is not None


class Watching:
    """What every callback exposes, read from its `_watch` (a `Watch`)."""

    _watch: Watch

    @property
    def monitor(self) -> Monitor:
        """The Monitor the callback feeds."""
        return self._watch.monitor

    @property
    def stopped_step(self) -> int | None:
        """The step it stopped training at, else None."""
        return self._watch.stopped_step

    @property
    def incidents(self) -> list[Incident]:
        """The incidents it reported, in the order they opened."""
        return self._watch.reported
