"""The report's output formats behind one interface (`scan --format`)."""

from __future__ import annotations

import abc
import json

from tb_crash_signals.report.text import format_text


class ReportFormat(abc.ABC):
    """Turns a report document (report.document.report_to_json) into output text."""

    name: str

    @abc.abstractmethod
    def format(self, report: dict, *, verbose: bool = False) -> str:
        """`verbose`: every episode too, where the format has a shorter view."""


class TextFormat(ReportFormat):
    name = "text"

    def format(self, report: dict, *, verbose: bool = False) -> str:
        return format_text(report, verbose=verbose)


class JsonFormat(ReportFormat):
    name = "json"

    def format(self, report: dict, *, verbose: bool = False) -> str:
        return json.dumps(report, indent=1, allow_nan=False) + "\n"


class GithubFormat(ReportFormat):
    """GitHub Actions workflow commands: one annotation per incident (``::error`` critical,
    ``::warning`` warning, ``::notice`` info), then the text summary line for the log."""

    name = "github"

    def format(self, report: dict, *, verbose: bool = False) -> str:
        from tb_crash_signals.report.text import plural

        lines = []
        for entry in report["runs"]:
            for inc in entry.get("incidents") or []:
                command = _GITHUB_COMMAND.get(inc["severity"], "notice")
                title = f"Crash Signals: {inc['kind']} in {entry['run']}"
                message = f"run {entry['run']}, {_steps(inc)}: {inc['headline']}"
                if inc.get("advice"):
                    message += f"\n{inc['advice']}"
                lines.append(f"::{command} title={github_property(title)}::{github_data(message)}")
        runs = report["runs"]
        sick = {h: sum(1 for r in runs if r["health"] == h) for h in ("critical", "warning")}
        lines.append(f"{plural(len(runs), 'run')}: {sick['critical']} critical, {plural(sick['warning'], 'warning')}")
        lines.extend(f"note: {github_data(p)}" for p in report.get("problems", []))
        return "\n".join(lines) + "\n"


def _steps(inc) -> str:
    if inc["open"]:
        return f"from step {inc['start_step']}, ongoing"
    if inc["end_step"] == inc["start_step"]:
        return f"step {inc['start_step']}"
    return f"steps {inc['start_step']}-{inc['end_step']}"


_GITHUB_COMMAND = {"critical": "error", "warning": "warning", "info": "notice"}


def github_data(text: str) -> str:
    """A workflow command's message, escaped as GitHub's runner unescapes it (``%``, CR, LF), and with
    other control characters shown (report.text.safe) so a run name cannot forge a second command."""
    from tb_crash_signals.report.text import safe

    out = str(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return safe(out)


def github_property(text: str) -> str:
    """A workflow command's property value: as `github_data`, and ``:`` and ``,`` too."""
    return github_data(text).replace(":", "%3A").replace(",", "%2C")


class SweepTextFormat(ReportFormat):
    """`scan --by-hparams`: the sweeps' statements, hyperparameters and runs."""

    name = "text"

    def format(self, report: dict, *, verbose: bool = False) -> str:
        from tb_crash_signals.report.sweep import format_sweeps_text

        return format_sweeps_text(report)


FORMATS: dict[str, ReportFormat] = {f.name: f for f in (TextFormat(), JsonFormat(), GithubFormat())}
SWEEP_FORMATS: dict[str, ReportFormat] = {f.name: f for f in (SweepTextFormat(), JsonFormat(), GithubFormat())}
