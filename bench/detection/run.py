"""Regenerates docs/detection.md in one command: corpus (cached), every detector, the tables.

    python bench/detection/run.py --real-logs ../shared/real_logs --fresh 6 --sparse 6 --out docs/detection.md
    python bench/detection/run.py --config after=tuned.toml --out /dev/stdout

The corpus is generated into --corpus (default: corpus.default_dir(), under
the temp dir) unless a complete one of the same version is there. `--fresh N`
also generates N fresh-seed replicates of every scenario (`corpus.py --fresh`)
and scores every detector but `before` on them, dev and test cells apart; `--sparse N`
does the same with N more, every run logged every 50 steps (`corpus.py --log-every 50`). Detectors:
the defaults (`ours`), `before` (the package as of BEFORE_REVISION, the last
commit before the corpus-v5 retuning, run from a `git archive` of it), the article's four rules, the four
anchors, plus any `--config NAME=TOML`. The prose around the tables is
bench/detection/detection_template.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import corpus
import growth_fit
import score

# The last commit before the corpus-v5 retuning (rules, incidents): the "before" column.
BEFORE_REVISION = "6bd7b01"
REPO = os.path.dirname(os.path.dirname(HERE))
NAMES = {
    "ours": "defaults",
    "before": f"before ({BEFORE_REVISION})",
    "article": "article's 4 rules",
    "olmo": "OLMo \\|z\\|>6 /128",
    "megatron": "Megatron 10× first 100",
    "foundry": "Foundry 2× mean > 4 steps",
    "wandb": "W&B z>3 /30",
}
NA = "n/a"


def _pct(x):
    return "–" if x is None else f"{100 * x:.0f} %"


def _q(q, fmt="{:.0f}"):
    if not q:
        return "–"
    return f"{fmt.format(q['median'])} ({fmt.format(q['min'])}–{fmt.format(q['max'])})"


def measure_rows(r: dict, anchor: bool) -> list[tuple[str, str, str]]:
    """(measure, target, cell) for one detector on one split."""
    h, ov, d, p, g = r["healthy"], r["overflow"], r["divergence"], r["precursor"], r["growth"]
    sp, of, pl, st, mi, sk = (r["spikes"], r["overfit"], r["plateau"], r["stagnation"],
                              r["misconfig"], r["sick"])
    rows = [
        ("healthy runs: critical episodes (incidents), runs", "0",
         f"{h['critical']} ({h['critical_incidents']}), {len(h['runs_with_critical'])}/{h['runs']} runs"),
        ("healthy runs a callback stops (an episode critical while it lasted, a warning once the run came back)", "",
         NA if anchor else f"{len(h['runs_stopped'])}/{h['runs']}"),
        ("healthy runs: warnings / 10k steps, per episode (per incident)", "≤ 1",
         f"{h['warnings_per_10k']:.1f} ({h['warning_incidents_per_10k']:.1f})"),
        ("fp16 overflow runs with a critical", "0",
         f"{len(ov['runs_with_critical'])}/{ov['runs']}"),
        ("divergences critical at or before the crash", "all", f"{d['flagged']}/{d['n']}"),
        ("... at or before the plain crash (NaN/Inf, or 10× its lowest 5-point median); never there: with a critical",
         "all", f"{d['plain_flagged']}/{d['plain_n']}; {d['never_plain_critical']}/{d['never_plain']}"),
        ("lead, median (min–max) steps", "", _q(d["lead"])),
        ("with precursor: lead median (min–max); < 10 or missed", "≥ 30; 0",
         f"{_q(p['lead'])}; {p['under10']}/{p['n']}"),
        ("... to the plain crash, of those that reach one", "≥ 30; 0",
         f"{_q(p['plain_lead'])}; {p['plain_under10']}/{p['plain_n']}"),
    ]
    if anchor:
        rows += [(m, t, NA) for m, t in (
            ("growth fit: first projection within ±20 %", "all"),
            ("growth fit: fit shown is the episode's latest", "all"),
            ("spikes: recall", "≥ 0.8"), ("spikes: precision", "≥ 0.8"),
            ("overfit: flagged within 3 evaluations", "all"),
            ("plateau flagged", "≥ 90 %"), ("stagnation flagged", "≥ 90 %"),
            ("update-ratio / LR misconfiguration flagged", "≥ 90 %"))]
    else:
        rows += [
            ("growth fit: first projection within ±20 %", "all",
             (f"{g['within20']}/{g['n_fit']} fitted of {g['n_crossing']} crossing 100; "
              f"median \\|err\\| {_pct(g['abs_error']['median']) if g['abs_error'] else '–'}")),
            ("growth fit: fit shown is the episode's latest", "all",
             f"{g['latest_shown']}/{g['episodes']}"),
            ("spikes: recall", "≥ 0.8", f"{sp['found']}/{sp['labelled']} ({_pct(sp['recall'])})"),
            ("spikes: precision", "≥ 0.8",
             f"{sp['matched']}/{sp['episodes']} ({_pct(sp['precision'])})"),
            ("overfit: flagged within 3 evaluations", "all",
             f"{of['within3']}/{of['n']} (flagged {of['flagged']})"),
            ("plateau flagged", "≥ 90 %", f"{pl['flagged']}/{pl['n']}"),
            ("stagnation flagged", "≥ 90 %", f"{st['flagged']}/{st['n']}"),
            ("update-ratio / LR misconfiguration flagged", "≥ 90 %", f"{mi['flagged']}/{mi['n']}"),
        ]
    rows += [
        ("sick runs with ≤ 3 incidents", "all", f"{sk['within3']}/{sk['runs']}"),
        ("sick runs: incidents, episodes per run, median (max)", "",
         (f"{sk['incidents']['median']:.0f} ({sk['incidents']['max']}), "
          f"{sk['episodes']['median']:.0f} ({sk['episodes']['max']})") if sk["incidents"] else "–"),
        ("faulty non-diverged runs with a critical", "", f"{len(r['faulty_with_critical'])}"),
    ]
    return rows


def split_table(results: dict, split: str) -> list[str]:
    dets = [d for d in results if split in results[d]]
    head = "| measure | target | " + " | ".join(NAMES.get(d, d) for d in dets) + " |"
    out = [head, "|" + "---|" * (2 + len(dets))]
    cols = [measure_rows(results[d][split], d in score.ANCHORS) for d in dets]
    for i, (m, t, _) in enumerate(cols[0]):
        out.append(f"| {m} | {t} | " + " | ".join(c[i][2] for c in cols) + " |")
    return out


def real_table(results: dict) -> list[str]:
    cats = ["diverged", "healthy", "overfit", "plateau/no-learning",
            "no-signal (empty/too short/degenerate)", "spikes/instability"]
    short = {"no-signal (empty/too short/degenerate)": "no-signal", "plateau/no-learning": "plateau"}
    dets = [d for d in results if "real" in results[d]]
    if not dets:
        return ["(not scored: run with --real-logs)"]
    first = results[dets[0]]["real"]
    cats = [c for c in cats if c in first]
    out = ["| verdict (runs) | target | " + " | ".join(NAMES.get(d, d) for d in dets) + " |",
           "|" + "---|" * (2 + len(dets))]
    for c in cats:
        cells = []
        for d in dets:
            row = results[d]["real"][c]
            na = d in score.ANCHORS and c in ("overfit", "plateau/no-learning", "spikes/instability")
            cells.append(NA if na else f"{row['ok']}/{row['n']}")
        out.append(f"| {short.get(c, c)} ({first[c]['n']}) | {first[c]['target']} | "
                   + " | ".join(cells) + " |")
    h = [results[d]["real"]["healthy"] for d in dets]
    out.append("| healthy: warnings / 10k steps, per episode (per incident) | ≤ 1 | "
               + " | ".join(f"{x['warnings_per_10k']:.1f} ({x['warning_incidents_per_10k']:.1f})"
                            for x in h) + " |")
    return out


def offenders(results: dict, det: str = "ours") -> list[str]:
    """The worst offenders of one detector, per split and on the real logs."""
    lines = []
    r = results.get(det, {})
    for split in ("dev", "test", "fresh-dev", "fresh-test", "sparse-dev", "sparse-test"):
        if split not in r:
            continue
        m = r[split]
        by = m["healthy"]["by_code"]
        lines.append(f"- **{split}**, episodes on healthy runs by rule: "
                     + (", ".join(f"{k} × {v}" for k, v in sorted(by.items(), key=lambda x: -x[1]))
                        or "none"))
        for title, items in (
                ("healthy runs with a critical", m["healthy"]["runs_with_critical"]),
                ("healthy runs a callback stops", m["healthy"]["runs_stopped"]),
                ("fp16 overflow runs with a critical", m["overflow"]["runs_with_critical"]),
                ("divergences not flagged critical in time", m["divergence"]["missed"]),
                ("divergences not flagged critical by their plain crash", m["divergence"]["plain_missed"]),
                ("precursor runs with a lead < 30", m["precursor"]["late"]),
                ("growth fits (first CS201 fit vs the true crossing)", m["growth"]["runs"]),
                ("overfit runs missed or late", m["overfit"]["missed"]),
                ("plateaus not flagged", m["plateau"]["missed"]),
                ("stagnations not flagged", m["stagnation"]["missed"]),
                ("misconfigurations not flagged", m["misconfig"]["missed"]),
                ("sick runs with > 3 incidents", m["sick"]["over3"]),
                ("faulty non-diverged runs with a critical", m["faulty_with_critical"]),
                ("signal mapping differs from the labelled series", m["mapping_mismatch"])):
            if items:
                lines.append(f"- {split}, {title} ({len(items)}): " + "; ".join(f"`{x}`" for x in items))
        worst = sorted(((n, x) for n, x in m["spikes"]["runs"].items()
                        if x["episodes"] - x["matched"] or x["labelled"] - x["found"]),
                       key=lambda t: -(t[1]["episodes"] - t[1]["matched"] + t[1]["labelled"] - t[1]["found"]))
        if worst:
            lines.append(f"- {split}, spike mismatches (labelled/found, episodes/matched): " + "; ".join(
                f"`{n}` {x['labelled']}/{x['found']}, {x['episodes']}/{x['matched']} "
                f"{'+'.join(x['codes'])}" for n, x in worst[:12]))
    if "real" in r:
        for cat, row in r["real"].items():
            if row["failed"]:
                lines.append(f"- real logs, {cat} → {row['target']} not met ({len(row['failed'])}): "
                             + "; ".join(f"`{x}`" for x in row["failed"]))
        by = r["real"].get("healthy", {}).get("by_code", {})
        lines.append("- real logs, episodes on healthy runs by rule: "
                     + (", ".join(f"{k} × {v}" for k, v in sorted(by.items(), key=lambda x: -x[1]))
                        or "none"))
    return lines


def fresh_section(results: dict, fresh_meta: dict | None) -> str:
    """The fresh-seed corpus: what it holds and the measures on its dev and test cells."""
    if fresh_meta is None:
        return "(not generated here: `run.py --fresh N` generates and scores it)"
    parts = [f"{len(fresh_meta['runs'])} runs ({fresh_meta['fresh']} replicates of every scenario), "
             f"generated in {fresh_meta.get('seconds')} s:", "", *corpus.summary_rows(fresh_meta), ""]
    for split in ("dev", "test"):
        parts += [f"### Fresh seeds, {split} cells", "", *split_table(results, f"fresh-{split}"), ""]
    return "\n".join(parts).rstrip()


# The sparse-logging set: replicates from this number (fresh seeds no other set has), every run logged
# every SPARSE_EVERY steps, as Lightning logs by default.
SPARSE_FROM, SPARSE_EVERY = 64, 50


def sparse_section(results: dict, sparse_meta: dict | None) -> str:
    """The sparse-logging set: what it holds and the measures on its dev and test cells."""
    if sparse_meta is None:
        return "(not generated here: `run.py --sparse N` generates and scores it)"
    parts = [f"{len(sparse_meta['runs'])} runs ({sparse_meta['fresh']} replicates of every scenario, "
             f"replicates {SPARSE_FROM}-{SPARSE_FROM + sparse_meta['fresh'] - 1}, every one logged every "
             f"{SPARSE_EVERY} steps), generated in {sparse_meta.get('seconds')} s:", "",
             *corpus.summary_rows(sparse_meta), ""]
    for split in ("dev", "test"):
        parts += [f"### Logged every {SPARSE_EVERY} steps, {split} cells", "",
                  *split_table(results, f"sparse-{split}"), ""]
    return "\n".join(parts).rstrip()


def render(results: dict, meta: dict, fresh_meta: dict | None = None, sparse_meta: dict | None = None) -> str:
    with open(os.path.join(HERE, "detection_template.md")) as f:
        template = f.read()
    subs = {
        "{{CORPUS}}": "\n".join(corpus.summary_rows(meta)),
        "{{SCENARIOS}}": "\n".join(corpus.scenario_rows(meta)),
        "{{SECONDS}}": str(meta.get("seconds")),
        "{{RUNS}}": str(len(meta["runs"])),
        "{{DEV}}": "\n".join(split_table(results, "dev")),
        "{{TEST}}": "\n".join(split_table(results, "test")),
        "{{REAL}}": "\n".join(real_table(results)),
        "{{FRESH}}": fresh_section(results, fresh_meta),
        "{{SPARSE}}": sparse_section(results, sparse_meta),
        "{{MISSES}}": "\n".join(offenders(results)) or "- none",
        "{{GROWTH_FIT}}": "\n".join(growth_fit.table()),
    }
    for k, v in subs.items():
        template = template.replace(k, v)
    return template


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default=corpus.default_dir())
    ap.add_argument("--real-logs", default=None)
    ap.add_argument("--out", default=None, help="write the Markdown report here (default: stdout)")
    ap.add_argument("--json", default=None, help="also write the raw measures here")
    ap.add_argument("--jobs", type=int, default=1, help="corpus generation workers")
    ap.add_argument("--force", action="store_true", help="regenerate the corpus")
    ap.add_argument("--fresh", type=int, default=0, metavar="N",
                    help="also generate N fresh-seed replicates of every scenario and score them")
    ap.add_argument("--sparse", type=int, default=0, metavar="N",
                    help=f"also generate N replicates of every scenario logged every {SPARSE_EVERY} steps "
                         f"(from replicate {SPARSE_FROM}) and score them")
    ap.add_argument("--config", action="append", metavar="NAME=TOML",
                    help="also score a TOML config as detector NAME (repeatable)")
    ap.add_argument("--detectors", default="ours,before,article,olmo,megatron,foundry,wandb",
                    help=f"comma-separated built-in detectors (before = the package at {BEFORE_REVISION})")
    a = ap.parse_args(argv)
    t0 = time.time()
    meta = corpus.generate(a.corpus, a.jobs, a.force)
    names = [d for d in a.detectors.split(",") if d]
    configs = score.parse_configs(a.config)
    builtin = [d for d in names if d != "before"]
    detectors = score.make_detectors(builtin, configs)
    if "before" in names:
        detectors["before"] = score.revision_detector(BEFORE_REVISION, REPO)
    order = [d for d in names if d in detectors] + [d for d in detectors if d not in names]
    detectors = {d: detectors[d] for d in order}
    results = score.evaluate(a.corpus, a.real_logs, detectors)
    fresh_meta = None
    if a.fresh:
        fresh_dir = corpus.default_dir(a.fresh)
        fresh_meta = corpus.generate(fresh_dir, a.jobs, a.force, fresh=a.fresh)
        fresh = score.evaluate(fresh_dir, None, {d: f for d, f in detectors.items() if d != "before"})
        for d, by_split in fresh.items():
            results[d].update({f"fresh-{split}": m for split, m in by_split.items()})
    sparse_meta = None
    if a.sparse:
        sparse_dir = corpus.default_dir(a.sparse, SPARSE_FROM, None, SPARSE_EVERY)
        sparse_meta = corpus.generate(sparse_dir, a.jobs, a.force, fresh=a.sparse, start=SPARSE_FROM,
                                      log_every=SPARSE_EVERY)
        sparse = score.evaluate(sparse_dir, None, {d: f for d, f in detectors.items() if d != "before"})
        for d, by_split in sparse.items():
            results[d].update({f"sparse-{split}": m for split, m in by_split.items()})
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    md = render(results, meta, fresh_meta, sparse_meta)
    if a.out:
        with open(a.out, "w") as f:
            f.write(md)
    else:
        print(md)
    print(f"done in {time.time() - t0:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
