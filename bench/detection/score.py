"""Scores crash-signal detectors against the labelled corpus and the real logs.

    python bench/detection/score.py --corpus "$TMPDIR/tbcs-detection-corpus" [--split dev]
    python bench/detection/score.py --real-logs ../shared/real_logs

Detectors: `ours` (the default catalogue), `ours-no-CS111` (the defaults
with the article's loss-jump rule switched off), `before` (the defaults before
tuning), `article` (the source article's
four rules alone, CS401 at its article severity critical) and the baselines
of `baselines.py` (`olmo`, `megatron`, `foundry`). Every detector sees the
same logical runs (Keras siblings grouped), read at full resolution by
`tb_crash_signals.source`, mapped to signals by `tb_crash_signals.signals`.

Corpus metrics (labels: see labels.py):
- divergence recall: diverged runs with a critical episode starting at or
  before the crash step.
- lead: crash step - start of the first critical episode (flagged runs);
  reported for all and for runs whose labels show a precursor.
- healthy runs: critical episodes, and warnings per 10k steps.
- non-diverged faulty runs with a critical episode (false alarms outside
  healthy runs: a recovering spike, an overfit, a plateau).
- spikes: recall = labelled spike steps with a `spike`-family episode
  starting within +-2 steps; precision = spike-family episodes (outside the
  200 steps before a crash and after it) that match a labelled spike.
- overfit: runs flagged with an `overfit` episode starting at or after the
  onset; delay in evaluations (validation points) from onset to that start.
- plateau: runs flagged with a `plateau`/`stagnation` episode going on at or
  after the plateau start; delay in steps (0 if it began before).
- misconfiguration: update-ratio runs with an `optimizer` episode on the
  update ratio; learning-rate runs with one on the learning rate.

Real-log verdicts (labels.json in the real-logs folder): diverged -> a
critical episode; healthy -> none; overfit -> an `overfit` episode;
plateau/no-learning -> a `plateau` or `stagnation` episode; no-signal -> no
critical; spikes/instability -> reported (any warning), no target.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

from baselines import BASELINES

from tb_crash_signals.config import Config
from tb_crash_signals.engine import analyze_run
from tb_crash_signals.signals import group_runs
from tb_crash_signals.source import LogdirSource

ARTICLE = ("CS101", "CS111", "CS302", "CS401")
DETECTORS = ("ours", "ours-no-CS111", "before", "article", "olmo", "megatron", "foundry")
# The defaults before they were tuned on the dev half (docs/detection.md).
BEFORE_TUNING = {
    "CS201": {"horizon": 500},
    "CS113": {"factor": 2.0},
    "CS112": {"min_ratio": 1.5},
    "CS102": {"min_ratio": 3.0},
    "CS301": {"smooth": 3, "patience_fraction": 0.3},
    "CS402": {"min_rise": 0.05},
}


def load_runs(logdir: str):
    """[(logical run, {signal: Series})] for every logical run of a logdir."""
    src = LogdirSource(logdir)
    src.reload()
    out = []
    for run in group_runs(src.run_tags()):
        data = {dim: src.series(ref.run, ref.tag) for dim, ref in run.signals.items()
                if ref is not None}
        out.append((run, data))
    return out


def make_detector(name: str, config: Config | None = None):
    """A function (logical run, data) -> list of episode dicts."""
    if name in ("ours", "ours-no-CS111", "before", "article"):
        if name == "before":
            import dataclasses

            from tb_crash_signals.rules import RULES

            config = Config(params={
                code: dataclasses.replace(RULES[code].default_params(), **kw)
                for code, kw in BEFORE_TUNING.items()})
        elif name == "article":
            config = Config(select=ARTICLE, severities={"CS401": "critical"})
        elif name == "ours-no-CS111":
            config = Config(ignore=("CS111",))
        config = config or Config()

        def detect(run, data):
            if not data:
                return []
            res = analyze_run(run, data, config)
            return [{"code": e.code, "family": e.family, "severity": e.severity,
                     "signal": e.signal, "start_step": e.start_step, "end_step": e.end_step}
                    for e in res.episodes]
        return detect
    fn = BASELINES[name]
    return lambda run, data: fn(data)


def _q(xs):
    if not xs:
        return None
    xs = sorted(xs)
    return {"n": len(xs), "min": xs[0], "median": float(np.median(xs)), "max": xs[-1]}


def score_corpus(runs, labels: dict, detect) -> dict:
    """Metrics of one detector on labelled corpus runs (labels by logical run name)."""
    div = {"n": 0, "flagged": 0, "leads": [], "leads_precursor": [], "missed": [],
           "n_precursor": 0}
    healthy = {"runs": 0, "steps": 0, "critical": 0, "warnings": 0, "runs_with_critical": [],
               "by_code": {}}
    faulty = {"runs": 0, "with_critical": []}
    spikes = {"labelled": 0, "found": 0, "episodes": 0, "matched": 0}
    over = {"n": 0, "flagged": 0, "delays": [], "missed": []}
    plat = {"n": 0, "flagged": 0, "delays": [], "missed": []}
    mis = {"n": 0, "flagged": 0, "missed": []}
    per_run = {}
    for run, data in runs:
        lab = labels.get(run.name)
        if lab is None:
            continue
        eps = detect(run, data)
        per_run[run.name] = eps
        crit = [e for e in eps if e["severity"] == "critical"]
        crash = lab["crash_step"]
        if lab["category"] == "diverged":
            div["n"] += 1
            div["n_precursor"] += bool(lab["precursor"])
            early = [e["start_step"] for e in crit if e["start_step"] <= crash]
            if early:
                div["flagged"] += 1
                lead = crash - min(early)
                div["leads"].append(lead)
                if lab["precursor"]:
                    div["leads_precursor"].append(lead)
            else:
                div["missed"].append(run.name)
        elif lab["category"] == "healthy":
            healthy["runs"] += 1
            healthy["steps"] += lab["steps"]
            healthy["critical"] += len(crit)
            healthy["warnings"] += len(eps) - len(crit)
            for e in eps:
                healthy["by_code"][e["code"]] = healthy["by_code"].get(e["code"], 0) + 1
            if crit:
                healthy["runs_with_critical"].append(run.name)
        else:
            faulty["runs"] += 1
            if crit:
                faulty["with_critical"].append(run.name)
        # spikes
        all_sp = [e for e in eps if e["family"] == "spike"]
        sp_eps = all_sp
        if crash is not None:
            sp_eps = [e for e in sp_eps if e["start_step"] < crash - 200]
        labelled = lab["spike_steps"]
        spikes["labelled"] += len(labelled)
        spikes["found"] += sum(
            any(abs(e["start_step"] - s) <= 2 for e in all_sp) for s in labelled)
        spikes["episodes"] += len(sp_eps)
        spikes["matched"] += sum(
            any(abs(e["start_step"] - s) <= 2 for s in labelled) for e in sp_eps)
        # overfit
        if lab["overfit_onset"] is not None:
            over["n"] += 1
            onset = lab["overfit_onset"]
            starts = [e["start_step"] for e in eps
                      if e["family"] == "overfit" and e["start_step"] >= onset]
            if starts and "val_loss" in data:
                vs = data["val_loss"].steps
                delay = int(np.searchsorted(vs, min(starts), "right")
                            - np.searchsorted(vs, onset, "right"))
                over["flagged"] += 1
                over["delays"].append(delay)
            else:
                over["missed"].append(run.name)
        if lab["plateau_start"] is not None:
            plat["n"] += 1
            p0 = lab["plateau_start"]
            # an episode still going at the plateau start counts (delay 0)
            starts = [max(e["start_step"], p0) for e in eps
                      if e["family"] in ("plateau", "stagnation")
                      and e.get("end_step", e["start_step"]) >= p0]
            if starts:
                plat["flagged"] += 1
                plat["delays"].append(min(starts) - p0)
            else:
                plat["missed"].append(run.name)
        for kind, sig in (("update_ratio_misconfig", "update_ratio"), ("lr_misconfig", "lr")):
            if lab[kind]:
                mis["n"] += 1
                if any(e["family"] == "optimizer" and e["signal"] == sig for e in eps):
                    mis["flagged"] += 1
                else:
                    mis["missed"].append(f"{run.name} ({sig})")
    per10k = lambda x: 1e4 * x / max(healthy["steps"], 1)
    return {
        "runs": len(per_run),
        "divergence": {
            "n": div["n"], "flagged": div["flagged"], "missed": div["missed"],
            "lead": _q(div["leads"]), "lead_precursor": _q(div["leads_precursor"]),
            "n_precursor": div["n_precursor"], "leads": sorted(div["leads"]),
        },
        "healthy": {**healthy, "critical_per_10k": per10k(healthy["critical"]),
                    "warnings_per_10k": per10k(healthy["warnings"])},
        "faulty": faulty,
        "spikes": {**spikes,
                   "recall": spikes["found"] / spikes["labelled"] if spikes["labelled"] else None,
                   "precision": spikes["matched"] / spikes["episodes"] if spikes["episodes"] else None},
        "overfit": {**over, "delay": _q(over["delays"]),
                    "within3": sum(d <= 3 for d in over["delays"])},
        "plateau": {**plat, "delay": _q(plat["delays"])},
        "misconfig": mis,
    }


REAL_TARGETS = {
    "diverged": ("critical", lambda eps: any(e["severity"] == "critical" for e in eps)),
    "healthy": ("no critical", lambda eps: not any(e["severity"] == "critical" for e in eps)),
    "overfit": ("overfit episode", lambda eps: any(e["family"] == "overfit" for e in eps)),
    "plateau/no-learning": ("plateau/stagnation episode",
                            lambda eps: any(e["family"] in ("plateau", "stagnation") for e in eps)),
    "no-signal (empty/too short/degenerate)": (
        "no critical", lambda eps: not any(e["severity"] == "critical" for e in eps)),
    "spikes/instability": ("any warning", lambda eps: bool(eps)),
}


def load_real(root: str):
    """(runs keyed like labels.json, labels) for the real-logs folder."""
    with open(os.path.join(root, "labels.json")) as f:
        labels = json.load(f)
    runs = []
    for name in sorted(os.listdir(root)):
        d = os.path.join(root, name)
        if os.path.isdir(d):
            for run, data in load_runs(d):
                runs.append((f"{name}/{run.name}", run, data))
    return runs, labels


def score_real(real, detect) -> dict:
    runs, labels = real
    seen = {}
    for key, run, data in runs:
        seen[key] = detect(run, data)
    out = {}
    for key, lab in labels.items():
        cat = lab["category"]
        what, ok = REAL_TARGETS[cat]
        eps = seen.get(key, [])
        row = out.setdefault(cat, {"target": what, "n": 0, "ok": 0, "failed": [],
                                   "warnings": 0, "runs_missing": 0, "by_code": {}})
        row["n"] += 1
        if key not in seen:
            row["runs_missing"] += 1
        if ok(eps):
            row["ok"] += 1
        else:
            row["failed"].append(key)
        row["warnings"] += sum(e["severity"] == "warning" for e in eps)
        for e in eps:
            row["by_code"][e["code"]] = row["by_code"].get(e["code"], 0) + 1
        if cat in ("healthy", "no-signal (empty/too short/degenerate)"):
            row["steps"] = row.get("steps", 0) + max(
                (int(t["step_max"]) - int(t["step_min"]) + 1 for t in lab["tags"].values()),
                default=0)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", help="corpus directory (corpus.py --out)")
    ap.add_argument("--split", default="dev", choices=("dev", "test"))
    ap.add_argument("--real-logs", help="the real-logs folder with labels.json")
    ap.add_argument("--detector", default="ours", choices=DETECTORS)
    a = ap.parse_args(argv)
    det = make_detector(a.detector)
    result = {}
    if a.corpus:
        with open(os.path.join(a.corpus, "labels.json")) as f:
            meta = json.load(f)
        labels = {r["run"]: r["labels"] for k, r in meta["runs"].items() if r["split"] == a.split}
        result["corpus"] = score_corpus(load_runs(os.path.join(a.corpus, a.split)), labels, det)
    if a.real_logs:
        result["real"] = score_real(load_real(a.real_logs), det)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
