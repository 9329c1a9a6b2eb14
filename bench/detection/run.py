"""Regenerates docs/detection.md: corpus (cached), scores of every detector, the table.

    python bench/detection/run.py --real-logs ../shared/real_logs --out docs/detection.md

The corpus is generated into --corpus (default $TMPDIR/tbcs-detection-corpus)
unless a complete one of the same version is there already.
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
import score

NAMES = {
    "ours": "tb-crash-signals defaults",
    "ours-no-CS111": "defaults, `ignore = [\"CS111\"]`",
    "before": "defaults before tuning",
    "article": "article's 4 rules (CS101, CS111, CS302, CS401 critical)",
    "olmo": "OLMo-style \\|z\\| > 6, 128-step window (loss, grad norm)",
    "megatron": "Megatron-style loss >= 10x max of first 100",
    "foundry": "LLM-Foundry-style loss >= 2x window mean for > 4 steps",
}


def _fmt(x, pct=False):
    if x is None:
        return "–"
    if pct:
        return f"{100 * x:.0f} %"
    if isinstance(x, float):
        return f"{x:.2f}" if x < 10 else f"{x:.0f}"
    return str(x)


def _lead(q):
    if not q:
        return "–"
    return f"{q['median']:.0f} ({q['min']}–{q['max']})"


def corpus_rows(results):
    """One table row per (detector, split)."""
    head = (
        "| detector | split | divergence recall | lead, median (min–max) | lead with precursor | "
        "healthy: critical | healthy: warnings / 10k steps | faulty non-diverged runs with critical | "
        "spike recall | spike precision | overfit flagged | overfit delay ≤ 3 evals (median) | "
        "plateau flagged | misconfig flagged |"
    )
    out = [head, "|" + "---|" * 14]
    for det in score.DETECTORS:
        for split in ("dev", "test"):
            r = results[det][split]
            d, h, sp, of, pl, mi = (r["divergence"], r["healthy"], r["spikes"], r["overfit"],
                                    r["plateau"], r["misconfig"])
            crit_only = det in ("olmo", "megatron", "foundry")
            na = "n/a"
            out.append(
                f"| {NAMES[det] if split == 'dev' else ''} | {split} | {d['flagged']}/{d['n']} | "
                f"{_lead(d['lead'])} | {_lead(d['lead_precursor'])} | {h['critical']} "
                f"({len(h['runs_with_critical'])}/{h['runs']} runs) | {h['warnings_per_10k']:.1f} | "
                f"{len(r['faulty']['with_critical'])}/{r['faulty']['runs']} | "
                + (f"{na} | {na} | {na} | {na} | {na} | {na} |" if crit_only else
                   f"{sp['found']}/{sp['labelled']} ({_fmt(sp['recall'], True)}) | "
                   f"{sp['matched']}/{sp['episodes']} ({_fmt(sp['precision'], True)}) | "
                   f"{of['flagged']}/{of['n']} | {of['within3']}/{of['n']} "
                   f"({_fmt(of['delay']['median']) if of['delay'] else '–'}) | "
                   f"{pl['flagged']}/{pl['n']} | {mi['flagged']}/{mi['n']} |")
            )
    return out


def real_rows(results):
    cats = ["diverged", "healthy", "overfit", "plateau/no-learning",
            "no-signal (empty/too short/degenerate)", "spikes/instability"]
    short = {"no-signal (empty/too short/degenerate)": "no-signal",
             "plateau/no-learning": "plateau"}
    first = results["ours"]
    head = "| detector | " + " | ".join(
        f"{short.get(c, c)} → {first[c]['target']} ({first[c]['n']})" for c in cats if c in first
    ) + " | healthy: warnings / 10k steps |"
    out = [head, "|" + "---|" * (2 + sum(c in first for c in cats))]
    for det in score.DETECTORS:
        r = results[det]
        crit_only = det in ("olmo", "megatron", "foundry")
        cells = []
        for c in cats:
            if c not in r:
                continue
            if crit_only and c in ("overfit", "plateau/no-learning", "spikes/instability"):
                cells.append("n/a")
            else:
                cells.append(f"{r[c]['ok']}/{r[c]['n']}")
        h = r["healthy"]
        w = 1e4 * h["warnings"] / max(h.get("steps", 1), 1)
        out.append(f"| {NAMES[det]} | " + " | ".join(cells) + f" | {w:.1f} |")
    return out


def evaluate(corpus_dir, real_dir, detectors=score.DETECTORS, configs=None):
    """{detector: {"dev": metrics, "test": metrics, "real": metrics}}."""
    with open(os.path.join(corpus_dir, "labels.json")) as f:
        meta = json.load(f)
    loaded = {split: score.load_runs(os.path.join(corpus_dir, split)) for split in ("dev", "test")}
    labels = {split: {r["run"]: r["labels"] for r in meta["runs"].values() if r["split"] == split}
              for split in ("dev", "test")}
    real = score.load_real(real_dir) if real_dir else None
    out = {}
    for det in detectors:
        fn = score.make_detector(det, (configs or {}).get(det))
        out[det] = {split: score.score_corpus(loaded[split], labels[split], fn)
                    for split in ("dev", "test")}
        if real is not None:
            out[det]["real"] = score.score_real(real, fn)
    return out, meta


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default=corpus.default_dir())
    ap.add_argument("--real-logs", default=None)
    ap.add_argument("--out", default=None, help="write the Markdown report here")
    ap.add_argument("--json", default=None, help="also write the raw metrics here")
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args(argv)
    t0 = time.time()
    meta = corpus.generate(a.corpus, a.jobs)
    results, meta = evaluate(a.corpus, a.real_logs)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    md = render(results, meta, a.real_logs is not None)
    if a.out:
        with open(a.out, "w") as f:
            f.write(md)
    else:
        print(md)
    print(f"done in {time.time() - t0:.0f} s", file=sys.stderr)


def corpus_summary(meta):
    from collections import Counter

    rows = ["| split | runs | diverged (with precursor) | healthy | faulty: spikes / overfit / "
            "plateau / update ratio / learning rate |", "|---|---|---|---|---|"]
    for split in ("dev", "test"):
        rs = [r for r in meta["runs"].values() if r["split"] == split]
        c = Counter(r["labels"]["category"] for r in rs)
        pre = sum(1 for r in rs if r["labels"]["crash_step"] is not None and r["labels"]["precursor"])
        nsp = sum(len(r["labels"]["spike_steps"]) for r in rs)
        nsr = sum(1 for r in rs if r["labels"]["spike_steps"])
        of = sum(r["labels"]["overfit_onset"] is not None for r in rs)
        pl = sum(r["labels"]["plateau_start"] is not None for r in rs)
        ur = sum(bool(r["labels"]["update_ratio_misconfig"]) for r in rs)
        lr = sum(bool(r["labels"]["lr_misconfig"]) for r in rs)
        rows.append(f"| {split} | {len(rs)} | {c['diverged']} ({pre}) | {c['healthy']} | "
                    f"{nsp} spikes in {nsr} runs / {of} / {pl} / {ur} / {lr} |")
    return rows


def render(results, meta, with_real: bool) -> str:
    template = open(os.path.join(HERE, "detection_template.md")).read()
    table = "\n".join(corpus_rows(results))
    real = "\n".join(real_rows({d: results[d]["real"] for d in results})) if with_real else \
        "(not scored: run with --real-logs)"
    ours = results["ours"]
    misses = []
    for split in ("dev", "test"):
        r = ours[split]
        for what, names in (("divergence not flagged in time", r["divergence"]["missed"]),
                            ("healthy run with a critical", r["healthy"]["runs_with_critical"]),
                            ("non-diverged faulty run with a critical", r["faulty"]["with_critical"]),
                            ("overfit not flagged", r["overfit"]["missed"]),
                            ("plateau not flagged", r["plateau"]["missed"]),
                            ("misconfiguration not flagged", r["misconfig"]["missed"])):
            for n in names:
                misses.append(f"- {split}: {what}: `{n}`")
        hw = r["healthy"]["by_code"]
        if hw:
            misses.append(f"- {split}: episodes on healthy runs by rule: "
                          + ", ".join(f"{k} × {v}" for k, v in sorted(hw.items())))
    if with_real:
        for cat, row in ours["real"].items():
            for n in row["failed"]:
                misses.append(f"- real logs: {cat} → {row['target']} not met: `{n}`")
        hw = ours["real"]["healthy"]["by_code"]
        misses.append("- real logs: episodes on healthy runs by rule: "
                      + ", ".join(f"{k} × {v}" for k, v in sorted(hw.items())))
    return (template.replace("{{CORPUS}}", "\n".join(corpus_summary(meta)))
            .replace("{{SECONDS}}", str(meta.get("seconds")))
            .replace("{{TABLE}}", table).replace("{{REAL}}", real)
            .replace("{{MISSES}}", "\n".join(misses) or "- none"))


if __name__ == "__main__":
    main()
