"""Which points of a logical run to keep so that its analysis tells the same story.

The plan starts from :func:`~.select.keep_mask` (recent steps in full, bucket
extremes before them) plus the steps where the source's findings start, peak
and end, and the growth fits' stretches in full. It then analyses the points it
would keep and compares the evidence (:func:`evidence`) with the source's. The
rules read windows of *points* (a baseline of 100 points, 3 consecutive
points), so thinning the history can move, merge or split a finding; where it
does, the stretch before each differing step is kept in full, doubling the
stretch each round until the evidence is the same. A run whose evidence still
differs after :data:`MAX_ROUNDS` rounds is kept in full.

The evidence is every episode's rule, signal, severity and start step, the
incidents' kind, severity and start step when the report has them, the health,
and the summary's grad-norm maximum and loss trend. One exception: the
episodes of the plateau family count by their first start only. The plateau's
patience is a share of the points logged so far (up to 2000 points), so on a
long, slowly improving run it turns on and off every few thousand steps, and
a thinned history cannot turn on and off at the same steps: repeating each of
those flickers exactly would keep nearly all of such a run (98 % of the
benchmark's 1 M-step run, against 5 % this way).
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

import numpy as np

from tb_crash_signals.analysis.config import Config
from tb_crash_signals.analysis.engine import analyze_run
from tb_crash_signals.analysis.signals import LogicalRun
from tb_crash_signals.compact.select import in_ranges, keep_mask
from tb_crash_signals.ingest.series import Series
from tb_crash_signals.report.document import run_to_json

__all__ = ["FIRST_ONLY", "MAX_ROUNDS", "RunPlan", "evidence", "evidence_differences", "finding_steps", "plan_run"]

MAX_ROUNDS = 24
#: Families whose episodes are compared by their first start only (see module docstring).
FIRST_ONLY = ("plateau",)


def evidence(run: Mapping) -> dict:
    """What must survive compaction, from one run entry of the report."""
    episodes = set()
    firsts: dict = {}
    for e in run["episodes"]:
        key = (e["code"], e["signal"], e["severity"])
        if e["family"] in FIRST_ONLY:
            firsts[key] = min(firsts.get(key, e["start_step"]), e["start_step"])
        else:
            episodes.add((*key, int(e["start_step"])))
    episodes.update((*key, int(step)) for key, step in firsts.items())
    out = {
        "health": run["health"],
        "episodes": sorted(episodes),
        "grad_norm_max": run["summary"].get("grad_norm_max"),
        "loss_trend": run["summary"].get("loss_trend"),
    }
    if "incidents" in run:
        out["incidents"] = sorted(
            (i["kind"], i["severity"], int(i.get("start_step") or 0)) for i in run["incidents"]
        )
    return out


def evidence_differences(a: Mapping, b: Mapping) -> list[str]:
    """Human-readable differences between two evidence dicts (empty: the same story)."""
    out = []
    for key in ("episodes", "incidents"):
        x, y = set(a.get(key, ())), set(b.get(key, ()))
        out += [f"{key[:-1]} {' '.join(map(str, e))} only before" for e in sorted(x - y)]
        out += [f"{key[:-1]} {' '.join(map(str, e))} only after" for e in sorted(y - x)]
    for key in ("health", "grad_norm_max", "loss_trend"):
        if a.get(key) != b.get(key):
            out.append(f"{key} {a.get(key)} before, {b.get(key)} after")
    return out


def _differing_steps(a: Mapping, b: Mapping, last_step: int) -> list[int]:
    steps = set()
    for key in ("episodes", "incidents"):
        for e in set(a.get(key, ())) ^ set(b.get(key, ())):
            steps.add(int(e[-1]))
    if any(a.get(k) != b.get(k) for k in ("grad_norm_max", "loss_trend")):
        steps.add(last_step)  # a summary of the whole run: the tail first, then further back
    if not steps and a.get("health") != b.get("health"):
        steps.add(last_step)
    return sorted(steps)


def finding_steps(run: Mapping) -> tuple[list[int], list[tuple[int, int]]]:
    """(steps to keep, step ranges to keep in full) from one run entry of the report.

    Episodes keep their start, peak and end steps; growth fits the whole
    fitted stretch; incidents every step they name.
    """
    steps: set[int] = set()
    for e in run["episodes"]:
        steps.update(int(e[k]) for k in ("start_step", "peak_step", "end_step") if e.get(k) is not None)
    for inc in run.get("incidents", ()):
        steps.update(int(v) for k, v in inc.items() if k.endswith("_step") and isinstance(v, int))
    ranges = [(int(f["start_step"]), int(f["end_step"])) for f in run["fits"]]
    return sorted(steps), ranges


@dataclasses.dataclass
class RunPlan:
    """The points of one logical run to keep.

    Attributes:
        masks: (member run, tag) -> bool per visible point of that tag.
        before, after: the run's report entry on the source / on the kept points.
        full_ranges: step ranges kept in full (findings' fits and repairs).
        rounds: repair rounds needed (0: the first selection told the same story).
        kept_in_full: the evidence kept differing; every point is kept.
    """

    masks: dict
    before: dict
    after: dict
    full_ranges: list
    rounds: int
    kept_in_full: bool


def _series(s: Series, mask: np.ndarray) -> Series:
    return Series(s.steps[mask], s.values[mask], s.wall_times[mask])


def plan_run(
    run: LogicalRun,
    tags: Mapping[tuple[str, str], Series],
    config: Config,
    *,
    keep_last: int,
    every: int,
) -> RunPlan:
    """Plans the compaction of `run` (see module docstring).

    Args:
        run: the logical run and its signal mapping.
        tags: (member run, tag) -> the series the reader shows, for every
            scalar tag of the run's members.
        config: the analysis config `scan` would use.
        keep_last, every: as :func:`~.select.keep_mask`.
    """
    refs = {dim: (ref.run, ref.tag) for dim, ref in run.signals.items() if ref is not None}
    refs = {dim: key for dim, key in refs.items() if key in tags}
    source = {dim: tags[key] for dim, key in refs.items()}
    before = run_to_json(analyze_run(run, source, config))
    steps, ranges = finding_steps(before)
    keep_steps = np.array(steps, dtype=np.int64)
    last_step = max((int(s.steps[-1]) for s in tags.values() if len(s)), default=0)
    want = evidence(before)
    full: list[tuple[int, int]] = list(ranges)
    repairs: list[tuple[int, int]] = []  # (differing step, stretch kept in full before it)

    base = {
        key: keep_mask(s.steps, s.values, keep_last=keep_last, every=every, keep_steps=keep_steps)
        for key, s in tags.items()
    }

    def masks_for(keys):
        return {key: base[key] | in_ranges(tags[key].steps, full) for key in keys}

    signal_keys = set(refs.values())
    for rounds in range(MAX_ROUNDS + 1):
        masks = masks_for(signal_keys)
        kept = {dim: _series(tags[key], masks[key]) for dim, key in refs.items()}
        after = run_to_json(analyze_run(run, kept, config))
        differing = _differing_steps(want, evidence(after), last_step)
        if not differing:
            masks.update(masks_for(set(tags) - signal_keys))
            return RunPlan(masks, before, after, full, rounds, False)
        for step in differing:
            # A difference near an earlier repair is the same finding still moving: widen that stretch.
            near = [r for at, r in repairs if at - r - every <= step <= at + every]
            radius = 2 * max(near) if near else every
            repairs.append((step, radius))
            full.append((step - radius, step + every))
    masks = {key: np.ones(len(s), dtype=bool) for key, s in tags.items()}
    return RunPlan(masks, before, before, [], MAX_ROUNDS, True)
