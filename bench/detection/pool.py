"""The headline measures of one detector pooled over several corpora, one split: the tuning loop.

    python bench/detection/pool.py dev  "$TMPDIR"/tbcs-detection-corpus-v5 "$TMPDIR"/tbcs-detection-fresh6-from6-dev-v5
    python bench/detection/pool.py test DIR... --config tuned.toml -v

Each corpus is scored with `score.score_corpus` (the measures of docs/detection.md) and the counts are
summed, so a change is read on a few hundred runs at once rather than one corpus at a time. A corpus
without runs of the split counts nothing. `-v` lists the runs behind each shortfall.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import score


def _at(result: dict, path: tuple):
    for key in path:
        result = result[key]
    return result


def pooled(results: list[dict]) -> dict:
    """Sums the counts of several `score_corpus` results."""
    def tot(path):
        return sum(_at(r, path) for r in results)

    def cat(path):
        return [x for r in results for x in _at(r, path)]

    steps = tot(("healthy", "steps"))
    late = cat(("precursor", "late"))
    pre_leads = cat(("precursor", "leads"))
    return {
        "healthy runs": tot(("healthy", "runs")),
        "healthy criticals (runs)": len(cat(("healthy", "runs_with_critical"))),
        "healthy runs a callback stops": len(cat(("healthy", "runs_stopped"))),
        "healthy warnings / 10k (incidents)": (
            f"{1e4 * tot(('healthy', 'warnings')) / max(steps, 1):.2f} "
            f"({1e4 * tot(('healthy', 'warning_incidents')) / max(steps, 1):.2f})"),
        "overflow runs with a critical": f"{len(cat(('overflow', 'runs_with_critical')))}"
                                         f"/{tot(('overflow', 'runs'))}",
        "divergences critical in time": f"{tot(('divergence', 'flagged'))}/{tot(('divergence', 'n'))}",
        "precursor lead median; < 10 or missed": (
            f"{np.median(pre_leads) if pre_leads else float('nan'):.0f}; "
            f"{sum(r['precursor']['under10'] for r in results)}/{tot(('precursor', 'n'))}"),
        "growth fits within 20 %": f"{tot(('growth', 'within20'))}/{tot(('growth', 'n_fit'))}"
                                   f" (of {tot(('growth', 'n_crossing'))} crossings)",
        "spikes recall; precision": (
            f"{tot(('spikes', 'found'))}/{tot(('spikes', 'labelled'))}; "
            f"{tot(('spikes', 'matched'))}/{tot(('spikes', 'episodes'))}"),
        "overfit within 3 evals": f"{tot(('overfit', 'within3'))}/{tot(('overfit', 'n'))}",
        "plateaus found": f"{tot(('plateau', 'flagged'))}/{tot(('plateau', 'n'))}",
        "stagnation found": f"{tot(('stagnation', 'flagged'))}/{tot(('stagnation', 'n'))}",
        "misconfigurations found": f"{tot(('misconfig', 'flagged'))}/{tot(('misconfig', 'n'))}",
        "sick runs with > 3 incidents": f"{len(cat(('sick', 'over3')))}/{tot(('sick', 'runs'))}",
        "faulty runs with a critical": len(cat(("faulty_with_critical",))),
        "_lists": {
            "healthy criticals": cat(("healthy", "runs_with_critical")),
            "healthy runs a callback stops": cat(("healthy", "runs_stopped")),
            "overflow criticals": cat(("overflow", "runs_with_critical")),
            "divergences missed": cat(("divergence", "missed")),
            "precursors late": late,
            "growth fits": cat(("growth", "runs")),
            "overfit missed": cat(("overfit", "missed")),
            "plateaus missed": cat(("plateau", "missed")),
            "stagnation missed": cat(("stagnation", "missed")),
            "misconfigurations missed": cat(("misconfig", "missed")),
            "over 3 incidents": cat(("sick", "over3")),
            "faulty with a critical": cat(("faulty_with_critical",)),
        },
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("split", choices=("dev", "test"))
    ap.add_argument("corpora", nargs="+", help="corpus directories (corpus.py --out)")
    ap.add_argument("--config", metavar="NAME=TOML", help="score this TOML config instead of the defaults")
    ap.add_argument("--detector", default="ours", help="a built-in detector (score.py) instead")
    ap.add_argument("-v", "--verbose", action="store_true", help="list the runs behind each shortfall")
    a = ap.parse_args(argv)
    configs = score.parse_configs([a.config]) if a.config else {}
    detectors = score.make_detectors([] if configs else [a.detector], configs)
    (detect,) = detectors.values()
    results = []
    for d in a.corpora:
        runs = score.split_runs(score.load_corpus(d), a.split)
        if not runs:
            continue
        outs = detect(os.path.join(d, a.split))
        res = score.score_corpus(outs, runs, score.validation_steps(d, a.split, runs))
        results.append(res)
    summary = pooled(results)
    lists = summary.pop("_lists")
    for k, v in summary.items():
        print(f"{k:42s} {v}")
    if a.verbose:
        for k, v in lists.items():
            if v:
                print(f"\n{k}:")
                for line in v:
                    print(f"  {line}")


if __name__ == "__main__":
    main()
