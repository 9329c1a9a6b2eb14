"""The report as text for a terminal: ranked runs, each led by its incidents."""

from __future__ import annotations

import re

from tb_crash_signals.analysis import alignment
from tb_crash_signals.analysis.engine import LATE_START_NOTE
from tb_crash_signals.analysis.signals import LOSS_KIND_NOTES, PERPLEXITY_NOTE


def safe(text: str) -> str:
    """Escapes control characters so names cannot move the cursor or hide text
    (and lone surrogates, which no UTF-8 output can encode)."""
    out = []
    for ch in str(text):
        code = ord(ch)
        if code < 0x20 or code == 0x7F or 0x80 <= code < 0xA0 or ch in "\u2028\u2029":
            out.append(ch.encode("unicode_escape").decode("ascii"))
        elif 0x202A <= code <= 0x202E or 0x2066 <= code <= 0x2069:
            out.append(f"\\u{code:04x}")  # bidi overrides can reorder what is shown
        elif 0xDC80 <= code <= 0xDCFF:
            # A file-name byte that is not UTF-8 (os.walk's surrogateescape): show the byte.
            # Written raw, it would make a strict UTF-8 stdout raise.
            out.append(f"\\x{code - 0xDC00:02x}")
        elif 0xD800 <= code <= 0xDFFF:
            out.append(f"\\u{code:04x}")  # any other lone surrogate cannot be encoded
        else:
            out.append(ch)
    return "".join(out)


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 run``, ``2 runs`` (``many`` for irregular plurals)."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


_MARK = {"critical": "CRITICAL", "warning": "WARNING", "ok": "ok", "no_signals": "no signals"}
_SEV = {"critical": "C", "warning": "W", "info": "i"}
_INDENT = "           "
# A headline that says how early it was told ("predicted 49 steps early", "flagged 1 step early").
_TELLS_LEAD = re.compile(r"\b\d+ steps? early\b")


def span_text(start, end, is_open: bool) -> str:
    """``1137``, ``100-138``, or ``from 1137, ongoing`` for an episode still open at the last step."""
    if is_open:
        return f"from {start}, ongoing"
    return str(start) if end == start else f"{start}-{end}"


def tally(items) -> str:
    """``1 critical, 4 warnings`` (info items are counted apart: they are not sicknesses)."""
    counts = {"critical": 0, "warning": 0, "info": 0}
    for item in items:
        counts[item["severity"]] = counts.get(item["severity"], 0) + 1
    words = {"critical": ("critical", "critical"), "warning": ("warning", "warnings"), "info": ("note", "notes")}
    return ", ".join(plural(n, *words[lvl]) for lvl, n in counts.items() if n)


def _episode_line(e) -> str:
    span = span_text(e["start_step"], e["end_step"], e.get("open", False))
    return f"{_SEV.get(e['severity'], '?')} {e['code']} {e['rule']:<20} {span:>18}  {safe(e['message'])}"


def _incident_lines(entry, verbose: bool) -> list[str]:
    lines = []
    episodes = entry["episodes"]
    for inc in entry["incidents"]:
        span = span_text(inc["start_step"], inc["end_step"], inc["open"])
        lines.append(f"  {_SEV.get(inc['severity'], '?')} {inc['kind']:<12} {span:>18}  {safe(inc['headline'])}")
        if inc.get("lead_steps") and not _TELLS_LEAD.search(inc["headline"]):
            lines.append(f"{_INDENT}  predicted {plural(inc['lead_steps'], 'step')} early")
        if inc.get("advice"):
            lines.append(f"{_INDENT}  advice: {safe(inc['advice'])}")
        if verbose:
            lines.extend(f"{_INDENT}  {_episode_line(episodes[i])}" for i in inc["episodes"] if i < len(episodes))
        else:
            codes = list(dict.fromkeys(episodes[i]["code"] for i in inc["episodes"] if i < len(episodes)))
            count = f" ({plural(len(inc['episodes']), 'episode')})" if len(inc["episodes"]) > 1 else ""
            lines.append(f"{_INDENT}  rules: {' '.join(codes)}{count}")
    return lines


def format_text(report: dict, verbose: bool = False) -> str:
    """A readable, ranked text report: each run, its incidents (headline, advice) and, with
    `verbose`, every episode beneath its incident."""
    lines = []
    runs = report["runs"]
    for entry in runs:
        health = entry["health"]
        incidents = entry.get("incidents")
        counted = incidents if incidents is not None else entry["episodes"]
        head = f"{_MARK.get(health, health):<10} {safe(entry['run'])}"
        if counted and tally(counted):
            head += f"  ({tally(counted)})"
        if entry.get("sampled"):
            head += "  [sampled]"
        if entry.get("loss_kind") in LOSS_KIND_NOTES:
            head += f"  [{LOSS_KIND_NOTES[entry['loss_kind']]}]"
        if entry.get("late_start"):
            head += f"  [{LATE_START_NOTE}]"
        if entry.get("val_by_wall_time"):
            head += f"  [{alignment.NOTE}]"
        perplexities = [ref["tag"] for ref in (entry.get("signals") or {}).values() if ref and ref.get("log")]
        if perplexities:
            head += f"  [{PERPLEXITY_NOTE.format(tags=', '.join(safe(t) for t in perplexities))}]"
        lines.append(head)
        if health == "no_signals":
            tags = sorted({t for ts in entry["tags"].values() for t in ts})
            shown = ", ".join(safe(t) for t in tags[:8]) or "(no scalar tags)"
            more = f" and {len(tags) - 8} more" if len(tags) > 8 else ""
            lines.append(f"{_INDENT}tags: {shown}{more}")
            if tags:
                lines.append(f'{_INDENT}map them in crash_signals.toml: [signals] train_loss = "<tag>"')
        if incidents is not None:
            lines.extend(_incident_lines(entry, verbose))
        else:  # a report written before incidents existed
            lines.extend(f"  {_episode_line(e)}" for e in entry["episodes"])
    n = {h: sum(1 for r in runs if r["health"] == h) for h in _MARK}
    lines.append("")
    lines.append(
        f"{plural(len(runs), 'run')}: {n['critical']} critical, {plural(n['warning'], 'warning')}, "
        f"{n['ok']} ok, {n['no_signals']} without signals"
    )
    for p in report.get("problems", []):
        lines.append(f"note: {safe(p)}")
    return "\n".join(lines) + "\n"
