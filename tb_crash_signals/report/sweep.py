"""The sweep view of a report: per-run hyperparameters and per-sweep statements, as JSON and as text."""

from __future__ import annotations

from typing import Mapping

from tb_crash_signals.analysis.sweep import ANALYSED, fmt_value, run_outcome
from tb_crash_signals.report.text import safe

_MARK = {"critical": "CRITICAL", "warning": "WARNING", "ok": "ok", "no_signals": "no signals", "pending": "pending"}
MAX_TEXT_RUNS = 200  # runs listed per sweep in the text view


def sweep_rows(entries, hparams: Mapping) -> list[dict]:
    """The rows `analysis.sweep.analyse_sweeps` takes, from report run entries and
    `analysis.hparams.assign`'s result."""
    rows = []
    for entry in entries:
        rh = hparams.get(entry["run"])
        rows.append({
            "run": entry["run"],
            "health": entry.get("health"),
            "kinds": run_outcome(entry)["kinds"] if "kinds" not in entry else entry["kinds"],
            "hparams": dict(rh.values) if rh is not None else {},
            "carrier_of": rh.carrier_of if rh is not None else None,
        })
    return rows


def attach(report: dict, hparams: Mapping, sweeps: list) -> dict:
    """Adds each run's `hparams` ({values, sources, skipped, problems}) and the report's `sweeps`."""
    for entry in report["runs"]:
        rh = hparams.get(entry["run"])
        if rh is not None:
            entry["hparams"] = rh.to_json()
    report["sweeps"] = sweeps
    return report


def _sources_line(sweep, runs_by_name) -> str:
    counts: dict[str, int] = {}
    for name in sweep["runs"]:
        hp = (runs_by_name.get(name) or {}).get("hparams") or {}
        for source in set((hp.get("sources") or {}).values()):
            counts[source] = counts.get(source, 0) + 1
    if not counts:
        return "hyperparameters: none found"
    return "hyperparameters from: " + ", ".join(f"{s} ({n} runs)" for s, n in sorted(counts.items()))


def _bucket_text(b) -> str:
    h = b["health"]
    parts = [f"{h[k]} {k}" for k in ANALYSED if h.get(k)]
    return f"{safe(b['label'])}: " + (" ".join(parts) or "0")


def format_sweeps_text(report: dict) -> str:
    """Each sweep: its statements (numbered, best first), its hyperparameters by mutual
    information with health (with counts per bucket), and its runs with their values."""
    runs_by_name = {r["run"]: r for r in report["runs"]}
    lines = []
    for sweep in report.get("sweeps") or []:
        names = sweep["runs"]
        health = [runs_by_name.get(n, {}).get("health") for n in names]
        tally = ", ".join(f"{health.count(h)} {h}" for h in ("critical", "warning", "ok") if health.count(h))
        lines.append(f"sweep {safe(sweep['sweep'])}: {len(names)} runs ({sweep['analysed']} analysed"
                     + (f": {tally}" if tally else "") + ")")
        lines.append(f"  {_sources_line(sweep, runs_by_name)}")
        for i, st in enumerate(sweep["statements"], 1):
            lines.append(f"  {i}. {safe(st['text'])}")
            lines.append(
                f"     {st['outcome']} · {st['information_gain']:.3f} bits · p={st['p_value']:.2g}"
                f" (shuffled outcomes doing as well, of {st['shuffles']})"
            )
        for st in sweep.get("tentative") or []:
            lines.append(f"  not significant: {safe(st['text'])}")
            lines.append(f"     p={st['p_value']:.2g}: shuffled outcomes often do as well; too few runs to tell")
        if sweep.get("note"):
            lines.append(f"  {safe(sweep['note'])}")
        elif not sweep["statements"] and not sweep.get("tentative"):
            lines.append("  no hyperparameter rule has enough support")
        if sweep["hparams"]:
            lines.append("  hyperparameters by mutual information with health (bits):")
            width = max(len(safe(h["hparam"])) for h in sweep["hparams"])
            for h in sweep["hparams"]:
                buckets = " · ".join(_bucket_text(b) for b in h["buckets"][:12])
                more = f" · {len(h['buckets']) - 12} more" if len(h["buckets"]) > 12 else ""
                mi = h["mutual_information"]["health"]
                lines.append(f"    {safe(h['hparam']):<{width}}  {mi:.3f}  {buckets}{more}")
        if sweep["constant"]:
            shown = ", ".join(f"{safe(k)}={safe(fmt_value(v))}" for k, v in list(sweep["constant"].items())[:20])
            more = f" and {len(sweep['constant']) - 20} more" if len(sweep["constant"]) > 20 else ""
            lines.append(f"  constant: {shown}{more}")
        for ig in sweep["ignored"][:10]:
            lines.append(f"  ignored: {safe(ig['hparam'])} ({ig['reason']})")
        for ex in sweep["excluded"][:10]:
            lines.append(f"  left out: {safe(ex['run'])} ({_MARK.get(ex['reason'], ex['reason'])})")
        varying = [h["hparam"] for h in sweep["hparams"]]
        if varying:
            lines.append("  runs:")
            for name in names[:MAX_TEXT_RUNS]:
                entry = runs_by_name.get(name, {})
                values = (entry.get("hparams") or {}).get("values") or {}
                cells = " ".join(f"{safe(k)}={safe(fmt_value(values[k]))}" for k in varying if k in values)
                lines.append(f"    {_MARK.get(entry.get('health'), '?'):<10} {cells}  {safe(name)}")
            if len(names) > MAX_TEXT_RUNS:
                lines.append(f"    … and {len(names) - MAX_TEXT_RUNS} more runs (see --format json)")
        skipped = [s for n in names for s in ((runs_by_name.get(n, {}).get("hparams") or {}).get("skipped") or [])]
        if skipped:
            distinct = list(dict.fromkeys(skipped))
            lines.append(f"  skipped values: {len(skipped)} ({'; '.join(safe(s) for s in distinct[:5])}"
                         + (" …" if len(distinct) > 5 else "") + ")")
        lines.append("")
    if not report.get("sweeps"):
        lines.append("no runs")
    carriers = [r["run"] for r in report["runs"] if (r.get("hparams") or {}).get("carrier_of")]
    if carriers:
        lines.append(f"{len(carriers)} add_hparams child run(s) counted as their parent's hyperparameters")
    problems = {p for r in report["runs"] for p in ((r.get("hparams") or {}).get("problems") or [])}
    for p in sorted(problems)[:20]:
        lines.append(f"note: {safe(p)}")
    for p in report.get("problems", []):
        lines.append(f"note: {safe(p)}")
    return "\n".join(lines).rstrip("\n") + "\n"
