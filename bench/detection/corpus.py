"""A labelled corpus of real small training runs for measuring detection quality.

Every run is real training with real backprop (PyTorch, CPU, one thread;
`train.py`), under the scenarios of `scenarios.py`, written with
TensorBoard's own `EventFileWriter` in one of five writer styles
(`writers.py`). **Labels are computed afterwards from the recorded scalars**
(`labels.py`): a ramp that happened not to blow up is labelled as what it
did. What the scenario meant is kept in the metadata for readability.

Layout of the corpus directory:

    labels.json   {"version", "fresh", "seconds", "runs": {"<split>/<run>": metadata + labels}}
    split.json    the (kind, style) cell -> split table and the runs per split
    dev/<run>/... test/<run>/...   event files (Keras runs: <run>/train, <run>/validation)

The corpus is cached (reused when complete and of the same version);
`--force` regenerates it. Deterministic given the seeds.

`--fresh N` generates, instead, N replicates of every scenario with seeds the
corpus does not use (a corpus of its own, in the same layout): what the
measures become on runs nobody looked at while tuning, beside the test half.
`--fresh-from R` numbers them from R (seeds and cells no earlier set has) and
`--split dev` keeps one half: more dev runs to tune on, the test cells untouched.

    python bench/detection/corpus.py [--out DIR] [--force] [--jobs 1] [--fresh N [--fresh-from R]]
                                     [--split dev|test]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

CORPUS_VERSION = 5
SPLITS = ("dev", "test")


def default_dir(fresh: int = 0, start: int = 0, split: str | None = None, log_every: int | None = None) -> str:
    if not fresh:
        name = f"tbcs-detection-corpus-v{CORPUS_VERSION}"
    else:
        name = f"tbcs-detection-fresh{fresh}" + (f"-from{start}" if start else "") + (f"-{split}" if split else "")
        name += f"-v{CORPUS_VERSION}"
    if log_every:
        name += f"-log{log_every}"
    return os.path.join(tempfile.gettempdir(), name)


def train_one(root: str, index: int, fresh: int = 0, start: int = 0, log_every: int | None = None) -> dict:
    """Trains run `index` of the plan (`scenarios.plan(fresh, start)`) into root/<split>/<run> and
    returns its metadata; `log_every` replaces the scenario's logging cadence."""
    from labels import compute_labels
    from scenarios import plan, spec_for
    from train import train_run
    from writers import Logger

    p = plan(fresh, start)[index]
    spec = spec_for(p)
    if log_every:
        spec = dataclasses.replace(spec, log_every=log_every)
    opt_name = {"adam": "Adam", "adamw": "AdamW", "sgd": "SGD"}[spec.opt]
    log = Logger(os.path.join(root, p.split), p.run, p.style, opt_name,
                 batch_loss=p.seed % 2 == 0 and spec.resume is None)
    t0 = time.time()
    info = train_run(spec, log)
    return {
        "run": p.run, "split": p.split, "kind": p.kind, "style": p.style, "seed": p.seed,
        "scenario": p.scenario.name, "meant": p.scenario.meant, "about": p.scenario.about,
        "cadence": {"log_every": spec.log_every, "eval_every": spec.eval_every,
                    "batch": spec.batch, "steps": spec.steps, "optimizer": spec.opt,
                    "clip": spec.clip},
        "training": info,
        "seconds": round(time.time() - t0, 2),
        "label_tags": log.label_tags(),
        "labels": compute_labels(log.recorded),
    }


def _job(args):
    return train_one(*args)


def _load(out: str, fresh: int = 0, start: int = 0, split: str | None = None,
          log_every: int | None = None) -> dict | None:
    path = os.path.join(out, "labels.json")
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        meta = json.load(f)
    same = (meta.get("version") == CORPUS_VERSION and meta.get("fresh", 0) == fresh
            and meta.get("fresh_from", 0) == start and meta.get("split") == split
            and meta.get("log_every") == log_every)
    return meta if same else None


def generate(out: str | None = None, jobs: int = 1, force: bool = False, quiet: bool = False,
             only: list[int] | None = None, fresh: int = 0, start: int = 0,
             split: str | None = None, log_every: int | None = None) -> dict:
    """Generates the corpus into `out` (or returns the cached one); `fresh` > 0: that many
    fresh-seed replicates of every scenario instead, numbered from `start` (see
    `scenarios.plan`); `split`: only the runs of that half; `log_every`: every run logged at
    that cadence instead of its scenario's."""
    from scenarios import plan, split_table

    out = out or default_dir(fresh, start, split, log_every)
    if not force and only is None:
        meta = _load(out, fresh, start, split, log_every)
        if meta is not None:
            return meta
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    planned = plan(fresh, start)
    todo = list(range(len(planned))) if only is None else list(only)
    todo = [i for i in todo if split is None or planned[i].split == split]
    args = [(out, i, fresh, start, log_every) for i in todo]
    t0 = time.time()
    runs = {}

    def done(r):
        runs[f"{r['split']}/{r['run']}"] = r
        if not quiet:
            lab = r["labels"]
            print(f"  {len(runs):3d}/{len(args)} {r['split']:4s} {r['run']:<48s} "
                  f"{lab['category']:8s} {r['seconds']:5.1f} s", flush=True)

    if jobs > 1:
        import multiprocessing as mp

        with mp.get_context("spawn").Pool(jobs) as pool:
            for r in pool.imap_unordered(_job, args):
                done(r)
    else:
        for a in args:
            done(_job(a))
    meta = {"version": CORPUS_VERSION, "fresh": fresh, "fresh_from": start, "split": split,
            "log_every": log_every,
            "seconds": round(time.time() - t0, 1), "jobs": jobs,
            "runs": dict(sorted(runs.items()))}
    with open(os.path.join(out, "labels.json"), "w") as f:
        json.dump(meta, f, indent=1)
    split = {"rule": "cell (kind, style) -> dev if (kind index + style index) is even, else test",
             "cells": split_table(),
             "runs": {s: sorted(r["run"] for r in runs.values() if r["split"] == s) for s in SPLITS}}
    with open(os.path.join(out, "split.json"), "w") as f:
        json.dump(split, f, indent=1)
    return meta


def relabel(out: str | None = None, fresh: int = 0, start: int = 0, split: str | None = None,
            log_every: int | None = None) -> dict:
    """Recomputes the labels of a generated corpus from its event files (after a labels.py change).

    The event files hold exactly the recorded scalars (float32, TensorBoard's
    purge of a resumed run applied), so this equals labelling at generation.
    """
    from events import RawReader
    from labels import compute_labels

    out = out or default_dir(fresh, start, split, log_every)
    meta = _load(out, fresh, start, split, log_every)
    if meta is None:
        raise SystemExit(f"no corpus of version {CORPUS_VERSION} in {out}")
    readers = {s: RawReader(os.path.join(out, s)) for s in SPLITS if os.path.isdir(os.path.join(out, s))}
    for r in meta["runs"].values():
        rd = readers[r["split"]]
        rec = {}
        for sig, ref in r["label_tags"].items():
            s, v = rd.series(ref["run"], ref["tag"])
            if len(s):
                rec[sig] = list(zip(s.tolist(), v.tolist()))
        r["labels"] = compute_labels(rec)
    with open(os.path.join(out, "labels.json"), "w") as f:
        json.dump(meta, f, indent=1)
    return meta


def summary_rows(meta: dict) -> list[str]:
    """A Markdown table: runs per split and what their labels say."""
    head = ("| split | runs | healthy (with overflow) | faulty | diverged | with precursor | "
            "grad norm crosses 100 | spikes (runs) | overfit | plateau | stagnation | "
            "update ratio | learning rate | kinds × styles |")
    rows = [head, "|" + "---|" * 14]
    for split in SPLITS:
        rs = [r for r in meta["runs"].values() if r["split"] == split]
        lab = [r["labels"] for r in rs]
        c = Counter(x["category"] for x in lab)
        ov = sum(1 for x in lab if x["category"] == "healthy" and x["overflow_steps"])
        div = [x for x in lab if x["crash_step"] is not None]
        rows.append(
            f"| {split} | {len(rs)} | {c['healthy']} ({ov}) | {c['faulty']} | {c['diverged']} | "
            f"{sum(x['precursor'] for x in div)} | "
            f"{sum(x['grad_crossing_step'] is not None for x in div)} | "
            f"{sum(len(x['spike_steps']) for x in lab)} ({sum(bool(x['spike_steps']) for x in lab)}) | "
            f"{sum(x['overfit_onset'] is not None for x in lab)} | "
            f"{sum(x['plateau_start'] is not None for x in lab)} | "
            f"{sum(x['stagnation_start'] is not None for x in lab)} | "
            f"{sum(bool(x['update_ratio_misconfig']) for x in lab)} | "
            f"{sum(bool(x['lr_misconfig']) for x in lab)} | "
            f"{len({(r['kind'], r['style']) for r in rs})} cells |")
    return rows


def scenario_rows(meta: dict) -> list[str]:
    """A Markdown table: per scenario, what it meant and the labelled categories per split."""
    rows = ["| scenario | meant | dev: healthy / faulty / diverged | test: healthy / faulty / diverged |",
            "|---|---|---|---|"]
    by = {}
    for r in meta["runs"].values():
        d = by.setdefault(r["scenario"], {"meant": r["meant"], "dev": Counter(), "test": Counter()})
        d[r["split"]][r["labels"]["category"]] += 1
    for name, d in by.items():
        cells = [" / ".join(str(d[s][c]) for c in ("healthy", "faulty", "diverged")) for s in SPLITS]
        rows.append(f"| {name} | {d['meant']} | {cells[0]} | {cells[1]} |")
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="default: under the temp dir")
    ap.add_argument("--fresh", type=int, default=0, metavar="N",
                    help="generate N fresh-seed replicates of every scenario instead (a held-out check)")
    ap.add_argument("--fresh-from", type=int, default=0, metavar="R",
                    help="number the fresh replicates from R (new seeds and cells; default 0)")
    ap.add_argument("--split", choices=SPLITS, default=None, help="generate only this half")
    ap.add_argument("--log-every", type=int, default=None, metavar="N",
                    help="log every run's train loss, grad norm and learning rate every N steps "
                         "instead of its scenario's cadence (Lightning's default is 50)")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    ap.add_argument("--force", action="store_true", help="regenerate even if cached")
    ap.add_argument("--only", type=int, nargs="*", help="plan indices only (for development)")
    ap.add_argument("--relabel", action="store_true",
                    help="recompute the labels of the corpus in --out from its event files")
    a = ap.parse_args(argv)
    if a.fresh_from and not a.fresh:
        ap.error("--fresh-from needs --fresh N")
    a.out = a.out or default_dir(a.fresh, a.fresh_from, a.split, a.log_every)
    if a.relabel:
        meta = relabel(a.out, a.fresh, a.fresh_from, a.split, a.log_every)
    else:
        meta = generate(a.out, a.jobs, a.force, only=a.only, fresh=a.fresh, start=a.fresh_from,
                        split=a.split, log_every=a.log_every)
    print(f"{len(meta['runs'])} runs in {a.out} ({meta['seconds']} s)")
    print("\n".join(summary_rows(meta)))
    print()
    print("\n".join(scenario_rows(meta)))


if __name__ == "__main__":
    main()
