"""The report as text for a terminal: ranked runs, one line per run and per episode."""

from __future__ import annotations


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


_MARK = {"critical": "CRITICAL", "warning": "WARNING", "ok": "ok", "no_signals": "no signals"}


def format_text(report: dict) -> str:
    """A readable, ranked text report: one line per run, one per episode."""
    lines = []
    runs = report["runs"]
    for entry in runs:
        health = entry["health"]
        counts = {"critical": 0, "warning": 0}
        for e in entry["episodes"]:
            counts[e["severity"]] += 1
        tally = ", ".join(f"{n} {lvl}" for lvl, n in counts.items() if n)
        head = f"{_MARK[health]:<10} {safe(entry['run'])}"
        if tally:
            head += f"  ({tally})"
        if entry.get("sampled"):
            head += "  [sampled]"
        lines.append(head)
        headline = entry["summary"].get("headline")
        if headline and health != "ok":
            lines.append(f"           {safe(headline)}")
        if health == "no_signals":
            tags = sorted({t for ts in entry["tags"].values() for t in ts})
            shown = ", ".join(safe(t) for t in tags[:8]) or "(no scalar tags)"
            more = f" and {len(tags) - 8} more" if len(tags) > 8 else ""
            lines.append(f"           tags: {shown}{more}")
            if tags:
                lines.append(
                    '           map them in crash_signals.toml: [signals] train_loss = "<tag>"'
                )
        for e in entry["episodes"]:
            span = str(e["start_step"])
            if e["end_step"] != e["start_step"]:
                span += f"-{e['end_step']}"
            sev = "C" if e["severity"] == "critical" else "W"
            lines.append(
                f"  {sev} {e['code']} {e['rule']:<20} {span:>13}  {safe(e['message'])}"
            )
    n = {h: sum(1 for r in runs if r["health"] == h) for h in _MARK}
    lines.append("")
    lines.append(
        f"{len(runs)} runs: {n['critical']} critical, {n['warning']} warning, "
        f"{n['ok']} ok, {n['no_signals']} without signals"
    )
    for p in report.get("problems", []):
        lines.append(f"note: {safe(p)}")
    return "\n".join(lines) + "\n"
