"""The report's output formats behind one interface (`scan --format`)."""

from __future__ import annotations

import abc
import json

from tb_crash_signals.report.text import format_text


class ReportFormat(abc.ABC):
    """Turns a report document (report.document.report_to_json) into output text."""

    name: str

    @abc.abstractmethod
    def format(self, report: dict) -> str: ...


class TextFormat(ReportFormat):
    name = "text"

    def format(self, report: dict) -> str:
        return format_text(report)


class JsonFormat(ReportFormat):
    name = "json"

    def format(self, report: dict) -> str:
        return json.dumps(report, indent=1, allow_nan=False) + "\n"


class SweepTextFormat(ReportFormat):
    """`scan --by-hparams`: the sweeps' statements, hyperparameters and runs."""

    name = "text"

    def format(self, report: dict) -> str:
        from tb_crash_signals.report.sweep import format_sweeps_text

        return format_sweeps_text(report)


FORMATS: dict[str, ReportFormat] = {f.name: f for f in (TextFormat(), JsonFormat())}
SWEEP_FORMATS: dict[str, ReportFormat] = {f.name: f for f in (SweepTextFormat(), JsonFormat())}
