"""`scan --by-hparams` on the public logs (kept outside the repository): checks the statements a
person reading the curves would make, and times the sweep step.

    python bench/sweep_real_logs.py ../shared/real_logs
"""

from __future__ import annotations

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from tb_crash_signals.scan import scan_logdir

EXPECTED = {
    "keras-mnist-lrsweep/logs/convergence_search/learning_rate-optimizer": (
        "learning_rate ≥ 0.1 with optimizer in {Adam, Adamax, Nadam, RMSprop}: 8/8 exploded at steps 1–8; "
        "every other run: 0/24"
    ),
}
NOTES = {
    "keras-mnist-lrsweep/logs/convergence_search/optimized_scheduler-scheduler": (
        "all 19 runs went critical: no hyperparameter separates them"
    ),
}


def main(argv) -> int:
    root = argv[1] if len(argv) > 1 else os.path.join(HERE, "..", "..", "shared", "real_logs")
    t0 = time.perf_counter()
    scan_logdir(root)
    t1 = time.perf_counter()
    report = scan_logdir(root, by_hparams=True)
    t2 = time.perf_counter()
    sweeps = {s["sweep"]: s for s in report["sweeps"]}
    failures = 0
    for folder, text in EXPECTED.items():
        got = [st["text"] for st in sweeps.get(folder, {}).get("statements", [])]
        ok = bool(got) and got[0].startswith(text)
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {folder}: {got[0] if got else '(no statement)'}")
    for folder, note in NOTES.items():
        got = sweeps.get(folder, {}).get("note")
        ok = got == note
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {folder}: {got}")
    stated = {f: s for f, s in sweeps.items() if s["statements"] and f not in EXPECTED}
    for folder, s in sorted(stated.items()):
        print(f"     other statement in {folder}: {s['statements'][0]['text']}")
    print(f"{len(report['runs'])} runs, {len(sweeps)} sweeps; scan {t1 - t0:.2f} s, "
          f"scan --by-hparams {t2 - t1:.2f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
