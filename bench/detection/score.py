"""Scores crash-signal detectors on the labelled corpus (dev and test apart) and on real logs.

    python bench/detection/score.py --split dev [--detector ours] [--corpus DIR]
    python bench/detection/score.py --real-logs ../shared/real_logs --detector article
    python bench/detection/score.py --split test --config tuned=my.toml

Detectors:

- `ours`: the package's defaults; `article`: the source article's four rules
  (`select = ["CS101", "CS111", "CS302", "CS401"]`, CS401 critical);
- `NAME=PATH`: any TOML config (`--config`), e.g. `before=bench/detection/before.toml`,
  the defaults pinned at the time of the corpus-v5 measurement;
- the anchors of `baselines.py` (`olmo`, `megatron`, `foundry`, `wandb`):
  critical-only, on the raw series read with TensorBoard (`events.py`), for
  the signals the report maps (Keras siblings grouped as the report does).

The package is used only through `scan_logdir`, `load_config` and the report
JSON. When a report run has `incidents`, they are used where the measure
speaks of incidents (alarms on healthy runs, the first alarm of a divergence,
incidents per sick run); otherwise each episode counts as an incident.

Corpus measures (labels: `labels.py`; "alarm" = an incident, or an episode):

- healthy runs: critical episodes / incidents (target 0), warnings per 10k
  logged steps per episode and per incident (target <= 1); runs a callback
  stops: with an episode of a critical rule, told as a warning once the run
  came back from it but critical while it lasted (no target: a measure of
  what the callbacks' default stop costs).
- overflow: non-diverged runs with fp16 overflow steps: runs with any
  critical, and criticals starting at an overflow step (target: none).
- divergence: diverged runs whose earliest critical (incident
  `first_alarm_step`, else episode start) is at or before the crash step;
  lead = crash step - that step. The same against the plain crash
  (`labels.plain_crash`, no look-ahead; corpora labelled before it lack it),
  and, of the divergences that never reach one, those with a critical at all.
- precursor: the same leads on runs labelled with a precursor (target:
  median >= 30 steps, none < 10); and their leads to the plain crash.
- growth fit: runs whose grad norm crosses 100 (label) with a CS201 fit
  ending before the crossing: the first fit's projected remaining distance
  (`projected_step - end_step`) against the true one (crossing - `end_step`),
  within +-20 %; and whether the fit shown for each CS201 episode is its
  latest (a fit in `fits` ending at the episode's `end_step`, not at an
  earlier point of the episode).
- spikes: recall = labelled spike steps with a `spike`-family episode
  starting within +-2 steps; precision = spike-family episodes (outside the
  200 steps before a crash, and after it) within +-2 steps of a labelled
  spike (targets 0.8 and 0.8).
- overfit: runs with an `overfit` warning starting at or after the onset,
  within 3 evaluations of it (target all; a note that the validation loss
  came back to its best is no warning).
- plateau / stagnation: runs with a `plateau` or `stagnation` episode going on
  at or after the labelled start (targets 90 %).
- misconfiguration: update-ratio runs with an `optimizer` episode on the
  update ratio; learning-rate runs with one on the learning rate (90 %).
- sick runs (not healthy): incidents (target <= 3) and episodes per run.
- mapping: runs whose report maps a signal to another run/tag than the one
  the labels were computed on (should be 0; else the labels do not describe
  what the detector saw).

Real-log verdicts (`labels.json` of the real-logs folder): diverged -> a
critical; healthy -> no critical (and warnings per 10k steps); overfit -> an
`overfit` warning; plateau/no-learning -> a `plateau` or `stagnation` one;
no-signal -> no critical; spikes/instability -> any warning (reported).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# the package of this checkout (a clean checkout runs without installing it)
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

from baselines import BASELINES
from corpus import default_dir
from events import RawReader

ARTICLE_TOML = """preset = "article"
"""
REPORT_DETECTORS = ("ours", "article")
ANCHORS = tuple(BASELINES)
SPIKE_TOLERANCE = 2
PRECURSOR_EXCLUSION = 200


# ---------------------------------------------------------------------------
# Detectors: one callable per detector, logdir -> {run name: output}
# ---------------------------------------------------------------------------


def _config_from_text(text: str):
    from tb_crash_signals import load_config

    fd, path = tempfile.mkstemp(suffix=".toml")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        return load_config(path)
    finally:
        os.unlink(path)


def report_detector(config=None):
    """logdir -> {run: {"episodes", "incidents", "fits", "signals"}} from scan_logdir."""
    from tb_crash_signals import scan_logdir

    def detect(logdir):
        rep = scan_logdir(logdir, config=config)
        return {r["run"]: {"episodes": r.get("episodes", []), "incidents": r.get("incidents"),
                           "fits": r.get("fits", []), "signals": r.get("signals") or {}}
                for r in rep["runs"]}
    return detect


_SCAN_JSON = (
    "import json, sys\n"
    "from tb_crash_signals import scan_logdir\n"
    "json.dump(scan_logdir(sys.argv[1]), sys.stdout)\n"
)


def revision_detector(revision: str, repo: str):
    """The defaults of the package as of git `revision` (e.g. before a retuning), run in a
    subprocess on a `git archive` of that revision, scored like today's."""
    import io
    import subprocess
    import tarfile

    root = tempfile.mkdtemp(prefix=f"tbcs-{revision}-")
    archive = subprocess.run(["git", "-C", repo, "archive", revision, "tb_crash_signals"],
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(root, filter="data")

    def detect(logdir):
        env = dict(os.environ, PYTHONPATH=root)
        out = subprocess.run([sys.executable, "-c", _SCAN_JSON, os.path.abspath(logdir)], check=True,
                             capture_output=True, text=True, env=env, cwd=root).stdout
        return {r["run"]: {"episodes": r.get("episodes", []), "incidents": r.get("incidents"),
                           "fits": r.get("fits", []), "signals": r.get("signals") or {}}
                for r in json.loads(out)["runs"]}
    return detect


def anchor_detector(name, mapping_of, reader_of):
    """A baseline on the raw series of the signals `mapping_of(logdir)` maps."""
    fn = BASELINES[name]

    def detect(logdir):
        reader = reader_of(logdir)
        out = {}
        for run, ref in mapping_of(logdir).items():
            eps = fn(reader.series_for({"signals": ref}))
            out[run] = {"episodes": eps, "incidents": None, "fits": [], "signals": ref}
        return out
    return detect


def make_detectors(names, configs=None):
    """{name: detect(logdir)} for built-in names plus `configs` {name: TOML path}.

    The defaults' report of a logdir is computed once (it also gives the
    anchors their signal mapping), and so is its raw-series reader.
    """
    from tb_crash_signals import load_config

    cache: dict[str, dict] = {}
    readers: dict[str, RawReader] = {}
    scan_defaults = report_detector(None)

    def ours(logdir):
        if logdir not in cache:
            cache[logdir] = scan_defaults(logdir)
        return cache[logdir]

    def mapping_of(logdir):
        return {run: o["signals"] for run, o in ours(logdir).items()}

    def reader_of(logdir):
        if logdir not in readers:
            readers[logdir] = RawReader(logdir)
        return readers[logdir]

    out = {}
    for name in names:
        if name == "ours":
            out[name] = ours
        elif name == "article":
            out[name] = report_detector(_config_from_text(ARTICLE_TOML))
        elif name in BASELINES:
            out[name] = anchor_detector(name, mapping_of, reader_of)
        else:
            raise ValueError(f"unknown detector {name!r}")
    for name, path in (configs or {}).items():
        out[name] = report_detector(load_config(path))
    return out


# ---------------------------------------------------------------------------
# Helpers on one run's output
# ---------------------------------------------------------------------------


def alarms(out: dict) -> list[dict]:
    """Incidents when the report has them, else one pseudo-incident per episode."""
    if out.get("incidents") is not None:
        return [{"severity": i["severity"], "first_alarm_step": i["first_alarm_step"],
                 "kind": i.get("kind")} for i in out["incidents"]]
    return [{"severity": e["severity"], "first_alarm_step": e["start_step"], "kind": e["family"]}
            for e in out["episodes"]]


def first_critical(out: dict) -> int | None:
    if out.get("incidents") is not None:
        steps = [i["first_alarm_step"] for i in out["incidents"] if i["severity"] == "critical"]
    else:
        steps = [e["start_step"] for e in out["episodes"] if e["severity"] == "critical"]
    return min(steps) if steps else None


def _first_critical_code(out: dict) -> str | None:
    crit = [e for e in out["episodes"] if e["severity"] == "critical"]
    return min(crit, key=lambda e: e["start_step"])["code"] if crit else None


def _q(xs):
    if not xs:
        return None
    xs = sorted(xs)
    return {"n": len(xs), "min": xs[0], "median": float(np.median(xs)), "max": xs[-1]}


def _n_evals_between(val_steps, a, b):
    return int(np.searchsorted(val_steps, b, "right") - np.searchsorted(val_steps, a, "right"))


# ---------------------------------------------------------------------------
# Corpus scoring
# ---------------------------------------------------------------------------


def _opens_critical(code: str) -> bool:
    """Whether an episode of this rule is critical when it opens (our rules' default severity)."""
    from tb_crash_signals.analysis.rules import RULES

    return code in RULES and RULES[code].severity == "critical"


def score_corpus(outputs: dict, meta_runs: dict, val_steps: dict | None = None) -> dict:
    """Measures of one detector on one split.

    outputs: {run: detector output}; meta_runs: {run: corpus metadata with labels};
    val_steps: {run: validation steps} (for the overfit delay in evaluations).
    """
    val_steps = val_steps or {}
    healthy = {"runs": 0, "steps": 0, "critical": 0, "critical_incidents": 0, "warnings": 0,
               "warning_incidents": 0, "runs_with_critical": [], "runs_stopped": [], "by_code": {}}
    overflow = {"runs": 0, "runs_with_critical": [], "critical_at_overflow": 0}
    div = {"n": 0, "flagged": 0, "missed": [], "leads": [], "by_how": {},
           "plain_n": 0, "plain_flagged": 0, "plain_missed": [], "never_plain": 0, "never_plain_critical": 0}
    pre = {"n": 0, "leads": [], "late": [], "plain": []}  # plain: leads to the plain crash, None if late
    growth = {"n_crossing": 0, "n_fit": 0, "within20": 0, "errors": [], "runs": [],
              "episodes": 0, "latest_shown": 0}
    spikes = {"labelled": 0, "found": 0, "episodes": 0, "matched": 0, "runs": {}}
    over = {"n": 0, "flagged": 0, "within3": 0, "delays": [], "missed": []}
    plat = {"n": 0, "flagged": 0, "delays": [], "missed": []}
    stag = {"n": 0, "flagged": 0, "delays": [], "missed": []}
    mis = {"n": 0, "flagged": 0, "missed": []}
    sick = {"runs": 0, "incidents": [], "episodes": [], "over3": []}
    faulty_crit = []
    mapping = []
    missing = []
    for name, m in sorted(meta_runs.items()):
        lab = m["labels"]
        out = outputs.get(name)
        if out is None:
            missing.append(name)
            out = {"episodes": [], "incidents": None, "fits": [], "signals": {}}
        eps = out["episodes"]
        al = alarms(out)
        crit_eps = [e for e in eps if e["severity"] == "critical"]
        crash = lab["crash_step"]
        cat = lab["category"]
        if out.get("signals") and m.get("label_tags"):
            for sig, ref in m["label_tags"].items():
                got = out["signals"].get(sig)
                if got is None or got.get("run") != ref["run"] or got.get("tag") != ref["tag"]:
                    mapping.append(f"{name} ({sig})")
        # healthy runs
        if cat == "healthy":
            healthy["runs"] += 1
            healthy["steps"] += lab["steps"]
            healthy["critical"] += len(crit_eps)
            healthy["warnings"] += sum(e["severity"] == "warning" for e in eps)
            healthy["critical_incidents"] += sum(a["severity"] == "critical" for a in al)
            healthy["warning_incidents"] += sum(a["severity"] == "warning" for a in al)
            for e in eps:
                healthy["by_code"][e["code"]] = healthy["by_code"].get(e["code"], 0) + 1
            if crit_eps or any(a["severity"] == "critical" for a in al):
                healthy["runs_with_critical"].append(
                    f"{name}: " + ", ".join(sorted({e['code'] for e in crit_eps})))
            # A climb the run came back from is a warning in the report, but it was critical while
            # it lasted: a callback stopping on critical incidents stopped the run there.
            opened = [e for e in eps if e["severity"] == "critical" or _opens_critical(e["code"])]
            if opened:
                healthy["runs_stopped"].append(f"{name}: {opened[0]['code']} at step {opened[0]['start_step']}")
        else:
            sick["runs"] += 1
            sick["incidents"].append(len(al))
            sick["episodes"].append(len(eps))
            if len(al) > 3:
                sick["over3"].append(f"{name}: {len(al)}")
        if cat == "faulty" and (crit_eps or any(a["severity"] == "critical" for a in al)):
            faulty_crit.append(f"{name}: " + ", ".join(sorted({e['code'] for e in crit_eps})))
        # fp16 overflow
        if lab["overflow_steps"] and crash is None:
            overflow["runs"] += 1
            ov = set(lab["overflow_steps"])
            if crit_eps or any(a["severity"] == "critical" for a in al):
                overflow["runs_with_critical"].append(
                    f"{name}: " + ", ".join(sorted({e['code'] for e in crit_eps})))
            overflow["critical_at_overflow"] += sum(e["start_step"] in ov for e in crit_eps)
        # divergences
        if crash is not None:
            div["n"] += 1
            how = lab.get("crash_how") or "?"
            row = div["by_how"].setdefault(how, {"n": 0, "flagged": 0})
            row["n"] += 1
            fc = first_critical(out)
            # The plain crash (labels.plain_crash: NaN/Inf, or 10x with no look-ahead), where the
            # corpus's labels have it (labels of older corpora lack it).
            plain = lab.get("plain_crash_step")
            if plain is not None:
                div["plain_n"] += 1
                if fc is not None and fc <= plain:
                    div["plain_flagged"] += 1
                else:
                    div["plain_missed"].append(f"{name}: plain crash {plain}, first critical "
                                               f"{'none' if fc is None else fc}")
                if lab["precursor"]:
                    pre["plain"].append(plain - fc if fc is not None and fc <= plain else None)
            elif "plain_crash_step" in lab:
                div["never_plain"] += 1
                div["never_plain_critical"] += fc is not None
            if lab["precursor"]:
                pre["n"] += 1
            if fc is not None and fc <= crash:
                div["flagged"] += 1
                row["flagged"] += 1
                lead = crash - fc
                div["leads"].append(lead)
                if lab["precursor"]:
                    pre["leads"].append(lead)
                    if lead < 30:
                        pre["late"].append(f"{name}: lead {lead} (crash {crash}, rise from "
                                           f"{lab['precursor_start']}, first critical "
                                           f"{_first_critical_code(out)} at {fc})")
            else:
                div["missed"].append(f"{name}: crash {crash} ({how}), first critical "
                                     f"{'none' if fc is None else fc}")
                if lab["precursor"]:
                    pre["late"].append(f"{name}: missed (crash {crash}, rise from "
                                       f"{lab['precursor_start']})")
        # growth fits
        cross = lab.get("grad_crossing_step")
        if cross is not None:
            growth["n_crossing"] += 1
            fits = sorted((f for f in out.get("fits", []) if f.get("code") == "CS201"
                           and f.get("end_step") is not None and f["end_step"] < cross
                           and f.get("projected_step") is not None),
                          key=lambda f: f["end_step"])
            if fits:
                f = fits[0]
                true_d = cross - f["end_step"]
                err = (f["projected_step"] - f["end_step"]) / true_d - 1.0
                growth["n_fit"] += 1
                growth["errors"].append(err)
                growth["within20"] += abs(err) <= 0.2
                growth["runs"].append(f"{name}: fit ends {f['end_step']}, projects "
                                      f"{f['projected_step']}, crosses {cross} ({err:+.0%})")
        for e in eps:
            if e["code"] != "CS201":
                continue
            growth["episodes"] += 1
            mine = [f["end_step"] for f in out.get("fits", []) if f.get("code") == "CS201"
                    and f.get("end_step") is not None
                    and e["start_step"] <= f["end_step"] <= e["end_step"]]
            growth["latest_shown"] += bool(mine) and max(mine) == e["end_step"]
        # spikes
        sp_all = [e for e in eps if e["family"] == "spike"]
        sp_scored = [e for e in sp_all if crash is None or e["start_step"] < crash - PRECURSOR_EXCLUSION]
        labelled = lab["spike_steps"]
        found = sum(any(abs(e["start_step"] - s) <= SPIKE_TOLERANCE for e in sp_all) for s in labelled)
        matched = sum(any(abs(e["start_step"] - s) <= SPIKE_TOLERANCE for s in labelled)
                      for e in sp_scored)
        spikes["labelled"] += len(labelled)
        spikes["found"] += found
        spikes["episodes"] += len(sp_scored)
        spikes["matched"] += matched
        if labelled or sp_scored:
            spikes["runs"][name] = {"labelled": len(labelled), "found": found,
                                    "episodes": len(sp_scored), "matched": matched,
                                    "codes": sorted({e["code"] for e in sp_scored})}
        # overfit
        if lab["overfit_onset"] is not None:
            over["n"] += 1
            onset = lab["overfit_onset"]
            starts = [e["start_step"] for e in eps if e["family"] == "overfit"
                      and e["start_step"] >= onset and e["severity"] != "info"]
            if starts:
                over["flagged"] += 1
                d = _n_evals_between(np.asarray(val_steps.get(name, [])), onset, min(starts))
                over["delays"].append(d)
                over["within3"] += d <= 3
                if d > 3:
                    over["missed"].append(f"{name}: {d} evaluations late")
            else:
                over["missed"].append(f"{name}: not flagged")
        # plateau and stagnation
        for key, acc in (("plateau_start", plat), ("stagnation_start", stag)):
            p0 = lab.get(key)
            if p0 is None:
                continue
            acc["n"] += 1
            starts = [max(e["start_step"], p0) for e in eps
                      if e["family"] in ("plateau", "stagnation") and e["end_step"] >= p0]
            if starts:
                acc["flagged"] += 1
                acc["delays"].append(min(starts) - p0)
            else:
                acc["missed"].append(name)
        # misconfiguration
        for key, sig in (("update_ratio_misconfig", "update_ratio"), ("lr_misconfig", "lr")):
            if lab[key]:
                mis["n"] += 1
                if any(e["family"] == "optimizer" and e["signal"] == sig for e in eps):
                    mis["flagged"] += 1
                else:
                    mis["missed"].append(f"{name} ({sig})")

    def per10k(x):
        return 1e4 * x / max(healthy["steps"], 1)

    leads = pre["leads"]
    return {
        "runs": len(meta_runs), "missing_outputs": missing, "mapping_mismatch": mapping,
        "healthy": {**healthy, "warnings_per_10k": per10k(healthy["warnings"]),
                    "warning_incidents_per_10k": per10k(healthy["warning_incidents"])},
        "overflow": overflow,
        "divergence": {**div, "lead": _q(div["leads"])},
        "precursor": {"n": pre["n"], "flagged": len(leads), "leads": leads, "lead": _q(leads),
                      "under10": sum(x < 10 for x in leads) + (pre["n"] - len(leads)),
                      "late": pre["late"],
                      "plain_n": len(pre["plain"]), "plain_lead": _q([x for x in pre["plain"] if x is not None]),
                      "plain_under10": sum(x is None or x < 10 for x in pre["plain"])},
        "growth": {**growth, "abs_error": _q([abs(x) for x in growth["errors"]])},
        "spikes": {**spikes,
                   "recall": spikes["found"] / spikes["labelled"] if spikes["labelled"] else None,
                   "precision": spikes["matched"] / spikes["episodes"] if spikes["episodes"] else None},
        "overfit": {**over, "delay": _q(over["delays"])},
        "plateau": {**plat, "delay": _q(plat["delays"])},
        "stagnation": {**stag, "delay": _q(stag["delays"])},
        "misconfig": mis,
        "sick": {"runs": sick["runs"], "incidents": _q(sick["incidents"]),
                 "episodes": _q(sick["episodes"]),
                 "within3": sum(x <= 3 for x in sick["incidents"]), "over3": sick["over3"]},
        "faulty_with_critical": faulty_crit,
    }


def load_corpus(corpus_dir: str) -> dict:
    with open(os.path.join(corpus_dir, "labels.json")) as f:
        return json.load(f)


def split_runs(meta: dict, split: str) -> dict:
    return {r["run"]: r for r in meta["runs"].values() if r["split"] == split}


def validation_steps(corpus_dir: str, split: str, meta_runs: dict) -> dict:
    """{run: steps of the labelled validation series} read with TensorBoard."""
    reader = RawReader(os.path.join(corpus_dir, split))
    out = {}
    for name, m in meta_runs.items():
        ref = m.get("label_tags", {}).get("val_loss")
        if ref is not None and m["labels"]["overfit_onset"] is not None:
            out[name] = reader.series(ref["run"], ref["tag"])[0].tolist()
    return out


# ---------------------------------------------------------------------------
# Real logs
# ---------------------------------------------------------------------------


def _any_critical(out):
    return any(a["severity"] == "critical" for a in alarms(out))


REAL_TARGETS = {
    "diverged": ("critical", _any_critical),
    "healthy": ("no critical", lambda o: not _any_critical(o)),
    "overfit": ("overfit warning", lambda o: any(e["family"] == "overfit" and e["severity"] != "info"
                                                 for e in o["episodes"])),
    "plateau/no-learning": ("plateau/stagnation episode", lambda o: any(
        e["family"] in ("plateau", "stagnation") for e in o["episodes"])),
    "no-signal (empty/too short/degenerate)": ("no critical", lambda o: not _any_critical(o)),
    "spikes/instability": ("any warning", lambda o: bool(o["episodes"])),
}


def real_outputs(root: str, detect) -> dict:
    """{"<set>/<run>": output} over the sets (sub-folders) of the real-logs folder."""
    out = {}
    for name in sorted(os.listdir(root)):
        d = os.path.join(root, name)
        if os.path.isdir(d):
            for run, o in detect(d).items():
                out[f"{name}/{run}"] = o
    return out


def score_real(outputs: dict, labels: dict) -> dict:
    empty = {"episodes": [], "incidents": None, "fits": [], "signals": {}}
    res = {}
    for key, lab in labels.items():
        cat = lab["category"]
        what, ok = REAL_TARGETS[cat]
        o = outputs.get(key, empty)
        row = res.setdefault(cat, {"target": what, "n": 0, "ok": 0, "failed": [], "warnings": 0,
                                   "warning_incidents": 0, "steps": 0, "missing": 0, "by_code": {}})
        row["n"] += 1
        row["missing"] += key not in outputs
        if ok(o):
            row["ok"] += 1
        else:
            row["failed"].append(key)
        row["warnings"] += sum(e["severity"] == "warning" for e in o["episodes"])
        row["warning_incidents"] += sum(a["severity"] == "warning" for a in alarms(o))
        for e in o["episodes"]:
            row["by_code"][e["code"]] = row["by_code"].get(e["code"], 0) + 1
        row["steps"] += max((int(t["step_max"]) - int(t["step_min"]) + 1
                             for t in lab.get("tags", {}).values()), default=0)
    for row in res.values():
        row["warnings_per_10k"] = 1e4 * row["warnings"] / max(row["steps"], 1)
        row["warning_incidents_per_10k"] = 1e4 * row["warning_incidents"] / max(row["steps"], 1)
    return res


def load_real_labels(root: str) -> dict:
    with open(os.path.join(root, "labels.json")) as f:
        return json.load(f)


# ---------------------------------------------------------------------------
# Everything
# ---------------------------------------------------------------------------


def evaluate(corpus_dir: str | None, real_dir: str | None, detectors: dict,
             splits=("dev", "test")) -> dict:
    """{detector: {"dev": measures, "test": measures, "real": measures}}."""
    results = {name: {} for name in detectors}
    if corpus_dir:
        meta = load_corpus(corpus_dir)
        for split in splits:
            runs = split_runs(meta, split)
            vs = validation_steps(corpus_dir, split, runs)
            for name, detect in detectors.items():
                outs = detect(os.path.join(corpus_dir, split))
                results[name][split] = score_corpus(outs, runs, vs)
    if real_dir:
        labels = load_real_labels(real_dir)
        for name, detect in detectors.items():
            results[name]["real"] = score_real(real_outputs(real_dir, detect), labels)
    return results


def parse_configs(items) -> dict:
    out = {}
    for item in items or []:
        name, sep, path = item.partition("=")
        if not sep:
            name, path = os.path.splitext(os.path.basename(item))[0], item
        out[name] = path
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default=default_dir(), help="corpus directory (corpus.py --out)")
    ap.add_argument("--split", choices=("dev", "test", "both", "none"), default="dev")
    ap.add_argument("--real-logs", help="the real-logs folder with labels.json")
    ap.add_argument("--detector", action="append",
                    help=f"built-in detector(s): {', '.join(REPORT_DETECTORS + ANCHORS)} (default ours)")
    ap.add_argument("--config", action="append", metavar="NAME=TOML",
                    help="score a TOML config as detector NAME (repeatable)")
    a = ap.parse_args(argv)
    configs = parse_configs(a.config)
    names = a.detector or ([] if configs else ["ours"])
    detectors = make_detectors(names, configs)
    splits = {"dev": ("dev",), "test": ("test",), "both": ("dev", "test"), "none": ()}[a.split]
    res = evaluate(a.corpus if splits else None, a.real_logs, detectors, splits)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
