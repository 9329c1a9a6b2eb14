"""What the sick runs of a sweep have in common: hyperparameter rules ranked by information gain.

A *sweep* is the runs under one parent folder (trailing `key=value` folder
levels such as `lr=0.1/` are part of the grid, not the folder; a folder of
one run joins its parent's sweep). For each *outcome* of its runs — an
incident kind (`divergence`, `plateau`, ...), `critical`, or `sick` (warning
or critical) — the search scores rules that pick out a group of runs:

* one hyperparameter: a value, a value set (categorical) or a range of
  buckets (numeric; grids keep each value, wider ranges are bucketed by
  decade, quartiles otherwise);
* a pair: a value or range of one hyperparameter with a value set or range
  of another within it ("learning_rate=1.0 with optimizer in {Adam, ...}"),
  kept only when it gains over the best single rule.

The score is the information gain (bits) of the outcome from knowing
whether a run is in the group. A rule is stated only with support: at least
`min_runs` runs in the sweep, `min_group` in the group, `min_positives`
positives in it, every value of a value set seen in two runs or more, and a
permutation p-value at or below `alpha`: the share of `shuffles` random
shuffles of the outcome over the same runs on which the same search finds a
rule at least as good. It counts the whole search (every hyperparameter,
range, value set and pair), so small sweeps, where some rule fits any
labelling, stay quiet. Value sets are searched as prefixes of the values
sorted by their rate, the optimal binary split for entropy (Breiman et al.,
1984).

Pure: plain dicts in, plain dicts out; nothing here imports TensorBoard.
"""

from __future__ import annotations

import dataclasses
import math
import posixpath
import re
from typing import Mapping, Sequence

import numpy as np

# -- outcomes of a run ----------------------------------------------------------------------

KINDS = ("divergence", "nonfinite", "overflow", "spikes", "optimizer", "overfit", "plateau", "stagnation")
KIND_OF_FAMILY = {
    "nonfinite": "divergence", "explosion": "divergence", "divergence": "divergence", "growth": "divergence",
    "spike": "spikes", "plateau": "plateau", "stagnation": "stagnation", "overfit": "overfit",
    "optimizer": "optimizer",
}
# What starts after a critical divergence follows from it (a stuck or wandering loss), as incidents fold it.
_FOLDED_AFTER_DIVERGENCE = ("plateau", "stagnation", "overfit", "spikes")
_SEVERE = ("divergence", "nonfinite", "critical")
ANALYSED = ("critical", "warning", "ok")


def run_outcome(entry: Mapping) -> dict:
    """{"health", "kinds": {kind: {"severity", "first_step", "crash_step"}}} of a report run entry.

    From the entry's `incidents` when it has them; else from its warning and
    critical episodes' families (nonfinite, explosion, divergence, growth:
    "divergence"), folding a plateau, stagnation, overfit or spike that
    starts after a critical divergence into it. A divergence's crash step is
    then the first critical episode of those families.
    """
    kinds: dict = {}
    incidents = entry.get("incidents")
    if isinstance(incidents, list):
        for inc in incidents:
            kind = inc.get("kind")
            if not isinstance(kind, str) or inc.get("severity") not in ("warning", "critical"):
                continue
            _add_kind(kinds, kind, inc.get("severity"), inc.get("first_alarm_step"), inc.get("crash_step"))
    else:
        episodes = [e for e in entry.get("episodes") or () if e.get("severity") in ("warning", "critical")]
        div_start = min(
            (e["start_step"] for e in episodes
             if KIND_OF_FAMILY.get(e.get("family")) == "divergence" and e["severity"] == "critical"),
            default=None,
        )
        for e in episodes:
            kind = KIND_OF_FAMILY.get(e.get("family"))
            if kind is None:
                continue
            if kind in _FOLDED_AFTER_DIVERGENCE and div_start is not None and e["start_step"] >= div_start:
                continue
            crash = e["start_step"] if kind == "divergence" and e["severity"] == "critical" else None
            _add_kind(kinds, kind, e["severity"], e["start_step"], crash)
    return {"health": entry.get("health"), "kinds": kinds}


def _add_kind(kinds, kind, severity, first, crash):
    got = kinds.setdefault(kind, {"severity": severity, "first_step": first, "crash_step": crash})
    if severity == "critical":
        got["severity"] = "critical"
    if first is not None and (got["first_step"] is None or first < got["first_step"]):
        got["first_step"] = first
    if crash is not None and (got["crash_step"] is None or crash < got["crash_step"]):
        got["crash_step"] = crash


# -- parameters -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SweepParams:
    """Support a statement needs, and how values are bucketed.

    Attributes:
        min_runs: analysed runs a sweep (and a hyperparameter) needs for statements.
        min_group: runs a rule's group needs.
        min_positives: runs of the outcome inside the group.
        alpha: the largest permutation p-value stated.
        tentative_alpha: an outcome's best rule above `alpha` but at most this is listed as
            tentative (shown as not significant, never as a statement).
        max_values: numeric hyperparameters with at most this many values keep each value.
        min_pair_gain: bits a pair must gain over the best single rule.
        max_pair_dims: hyperparameters (best single rules first) combined into pairs.
        per_outcome: statements per outcome (a second one picks a disjoint group).
        shuffles: label permutations of the significance test.
        seed: of the permutations (the same logs always give the same statements).
    """

    min_runs: int = 6
    min_group: int = 2
    min_positives: int = 2
    alpha: float = 0.05
    max_values: int = 8
    min_pair_gain: float = 0.05
    max_pair_dims: int = 12
    per_outcome: int = 2
    tentative_alpha: float = 0.25
    shuffles: int = 199
    seed: int = 0


# -- sweeps ---------------------------------------------------------------------------------


def _strip_grid(folder: str) -> str:
    parts = [] if folder in ("", ".") else folder.split("/")
    while parts and "=" in parts[-1]:
        parts.pop()
    return "/".join(parts) or "."


def sweep_folders(names: Sequence[str]) -> dict[str, str]:
    """run name -> its sweep folder (see module doc)."""
    folder = {n: _strip_grid(posixpath.dirname(n)) for n in names}
    while True:
        counts: dict[str, int] = {}
        for f in folder.values():
            counts[f] = counts.get(f, 0) + 1
        lone = {n for n, f in folder.items() if counts[f] < 2 and f != "."}
        if not lone:
            return folder
        for n in lone:
            folder[n] = _strip_grid(posixpath.dirname(folder[n]))


# -- hyperparameters as bucketed dimensions -------------------------------------------------

_LOG_NAMES = re.compile(r"(^|[_/.\-])(lr|learning_rate|wd|weight_decay|eps|epsilon|decay|l2|alpha)($|[_/.\-])", re.I)


def fmt_value(v) -> str:
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _fmt_edge(x: float) -> str:
    return f"{x:.3g}"


@dataclasses.dataclass
class Dimension:
    """One hyperparameter over the runs that have it.

    Attributes:
        name: the hyperparameter.
        kind: "numeric" (ordered buckets) or "categorical".
        scale: "values" (one bucket per value), "log" (decades), "linear"
            (quartiles) or "categories".
        labels: one per bucket, in order.
        edges: bucket i covers [edges[i], edges[i+1]) for "log"/"linear".
        bucket: per row, its bucket index, or -1 where the run lacks it.
    """

    name: str
    kind: str
    scale: str
    labels: list
    edges: list | None
    bucket: np.ndarray

    def describe(self, buckets: Sequence[int]) -> str:
        b = sorted(buckets)
        if self.kind == "categorical":
            values = [self.labels[i] for i in b]
            if len(values) == 1:
                return f"{self.name}={values[0]}"
            rest = [lab for i, lab in enumerate(self.labels) if i not in set(b)]
            if len(rest) == 1 and len(values) > 2:
                return f"{self.name}≠{rest[0]}"
            if 1 < len(rest) < len(values):
                return f"{self.name} not in {{{', '.join(rest)}}}"
            return f"{self.name} in {{{', '.join(values)}}}"
        i, j, last = b[0], b[-1], len(self.labels) - 1
        if self.scale == "values":
            if i == j:
                return f"{self.name}={self.labels[i]}"
            if j == last:
                return f"{self.name} ≥ {self.labels[i]}"
            if i == 0:
                return f"{self.name} ≤ {self.labels[j]}"
            return f"{self.name} in [{self.labels[i]}, {self.labels[j]}]"
        lo, hi = _fmt_edge(self.edges[i]), _fmt_edge(self.edges[j + 1])
        if j == last and i > 0:
            return f"{self.name} ≥ {lo}"
        if i == 0 and j < last:
            return f"{self.name} < {hi}"
        return f"{self.name} in [{lo}, {hi})"


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _dimension(name: str, values: Sequence, params: SweepParams) -> Dimension | None:
    """Buckets of one hyperparameter's values (None at a row without it); None if it cannot split."""
    present = [v for v in values if v is not None]
    bucket = np.full(len(values), -1, dtype=np.int64)
    if all(_is_number(v) for v in present):
        distinct = sorted(set(present))
        if len(distinct) <= params.max_values:
            index = {v: i for i, v in enumerate(distinct)}
            for r, v in enumerate(values):
                if v is not None:
                    bucket[r] = index[v]
            return Dimension(name, "numeric", "values", [fmt_value(v) for v in distinct], None, bucket)
        arr = np.array(present, dtype=float)
        lo, hi = float(arr.min()), float(arr.max())
        if lo > 0 and (hi / lo >= 100 or (_LOG_NAMES.search(name) and hi / lo >= 10)):
            scale = "log"
            k0, k1 = math.floor(math.log10(lo)), math.floor(math.log10(hi)) + 1
            edges = [10.0**k for k in range(k0, k1 + 1)]
            if len(edges) <= 3:  # one or two decades: split each at 3
                edges = sorted({e for k in range(k0, k1) for e in (10.0**k, 3 * 10.0**k)} | {10.0**k1})
        else:
            scale = "linear"
            qs = np.quantile(arr, [0.0, 0.25, 0.5, 0.75])
            edges = sorted({float(f"{q:.2g}") if q else 0.0 for q in qs})
            edges[0] = min(edges[0], lo)
            edges.append(math.inf)
        raw = np.searchsorted(np.array(edges), arr, side="right") - 1
        used = sorted(set(raw.tolist()))
        remap = {b: i for i, b in enumerate(used)}
        kept_edges = [edges[b] for b in used] + [edges[used[-1] + 1] if used[-1] + 1 < len(edges) else math.inf]
        labels = [f"[{_fmt_edge(kept_edges[i])}, {_fmt_edge(kept_edges[i + 1])})" for i in range(len(used))]
        it = iter(raw.tolist())
        for r, v in enumerate(values):
            if v is not None:
                bucket[r] = remap[next(it)]
        if len(used) < 2:
            return None
        return Dimension(name, "numeric", scale, labels, kept_edges, bucket)
    shown = [None if v is None else fmt_value(v) for v in values]
    distinct = sorted({s for s in shown if s is not None})
    index = {s: i for i, s in enumerate(distinct)}
    for r, s in enumerate(shown):
        if s is not None:
            bucket[r] = index[s]
    return Dimension(name, "categorical", "categories", distinct, None, bucket)


# -- scores ---------------------------------------------------------------------------------


def _h(p: float) -> float:
    if p <= 0.0 or p >= 1.0:
        return 0.0
    return -(p * math.log2(p) + (1 - p) * math.log2(1 - p))


def info_gain(a: int, n: int, b: int, m: int) -> float:
    """Bits of a binary outcome gained by knowing group membership (a/n in the group, b/m outside)."""
    total = n + m
    if not n or not m:
        return 0.0
    return max(0.0, _h((a + b) / total) - (n / total) * _h(a / n) - (m / total) * _h(b / m))


def fisher_greater(a: int, n: int, b: int, m: int) -> float:
    """One-sided Fisher exact p: chance of a or more positives in a random group of n."""
    total, pos = n + m, a + b
    denom = math.comb(total, n)
    top = sum(math.comb(pos, x) * math.comb(total - pos, n - x) for x in range(a, min(n, pos) + 1))
    return top / denom


def _mutual_information(bucket: np.ndarray, classes: Sequence[str]) -> float:
    """I(class; bucket) in bits over the rows that have a bucket."""
    keep = bucket >= 0
    if not keep.any():
        return 0.0
    b = bucket[keep]
    c = np.array(classes, dtype=object)[keep]
    total = len(b)
    h_c = _entropy([int((c == k).sum()) for k in set(c.tolist())])
    cond = 0.0
    for v in set(b.tolist()):
        sel = c[b == v]
        cond += len(sel) / total * _entropy([int((sel == k).sum()) for k in set(sel.tolist())])
    return max(0.0, h_c - cond)


def _entropy(counts) -> float:
    total = sum(counts)
    return -sum(c / total * math.log2(c / total) for c in counts if c)


# -- the search -----------------------------------------------------------------------------


@dataclasses.dataclass
class _Rule:
    """A group of runs picked by conditions; row sets are Python ints used as bitsets."""

    parts: tuple  # ((Dimension, frozenset of buckets), ...)
    mask: int  # the group, within `scope`
    scope: int  # rows having every hyperparameter of the rule
    a: int
    n: int
    b: int
    m: int
    gain: float

    def text(self) -> str:
        return " with ".join(d.describe(bs) for d, bs in self.parts)


def _bits(flags) -> int:
    out = 0
    for i, f in enumerate(flags):
        if f:
            out |= 1 << i
    return out


def _rows(bits: int) -> list[int]:
    out, i = [], 0
    while bits:
        if bits & 1:
            out.append(i)
        bits >>= 1
        i += 1
    return out


class _Space:
    """A sweep's dimensions as bitsets: each bucket's rows, each dimension's scope."""

    def __init__(self, dims: list[Dimension]):
        self.dims = dims
        self.buckets = {d.name: [_bits(d.bucket == i) for i in range(len(d.labels))] for d in dims}
        self.scope = {d.name: _bits(d.bucket >= 0) for d in dims}

    def mask(self, dim: Dimension, buckets) -> int:
        out = 0
        for i in buckets:
            out |= self.buckets[dim.name][i]
        return out


def _score(parts, mask: int, scope: int, y: int) -> _Rule:
    a = (mask & y).bit_count()
    n = mask.bit_count()
    rest = scope ^ mask
    b = (rest & y).bit_count()
    m = rest.bit_count()
    return _Rule(parts, mask, scope, a, n, b, m, info_gain(a, n, b, m))


def _eligible(r: _Rule, params: SweepParams) -> bool:
    return (
        r.n >= params.min_group
        and r.a >= params.min_positives
        and r.m >= 1
        and r.a * r.m > r.b * r.n  # the group is worse off than the rest
    )


def _conditions(space: _Space, dim: Dimension, within: int, y: int, single_only=False):
    """Candidate bucket sets of `dim` over the rows `within` (numeric: ranges; categorical: values or
    rate-sorted prefixes whose values each appear in 2+ runs of the sweep)."""
    bits = space.buckets[dim.name]
    present = [i for i, b in enumerate(bits) if b & within]
    if len(present) < 2:
        return
    if dim.kind == "numeric":
        for i in range(len(present)):
            for j in range(i, len(present)):
                if i == 0 and j == len(present) - 1:
                    continue
                yield frozenset(present[i : j + 1])
        return
    ok = [v for v in present if bits[v].bit_count() >= 2]
    if single_only:
        for v in ok:
            yield frozenset([v])
        return
    rates = []
    for v in ok:
        sel = bits[v] & within
        rates.append((-(sel & y).bit_count() / sel.bit_count(), -sel.bit_count(), v))
    rates.sort()
    order = [v for _, _, v in rates]
    for k in range(1, min(len(order), len(present) - 1) + 1):
        yield frozenset(order[:k])


def _search(space: _Space, y: int, params: SweepParams, best_only: bool = False):
    """The eligible rules for outcome `y`, best first (or, with `best_only`, the best gain).

    A pair is kept only when it gains `min_pair_gain` over the best single rule.
    """
    singles: list[_Rule] = []
    best_by_dim: dict[str, float] = {}
    for dim in space.dims:
        scope = space.scope[dim.name]
        if scope.bit_count() < params.min_runs:
            continue
        for bs in _conditions(space, dim, scope, y):
            r = _score(((dim, bs),), space.mask(dim, bs), scope, y)
            if _eligible(r, params):
                singles.append(r)
                best_by_dim[dim.name] = max(best_by_dim.get(dim.name, 0.0), r.gain)
    best_single = max((r.gain for r in singles), default=0.0)
    pair_dims = sorted(space.dims, key=lambda d: -best_by_dim.get(d.name, 0.0))[: params.max_pair_dims]
    pairs: list[_Rule] = []
    best_pair = 0.0
    for da in pair_dims:
        for db in pair_dims:
            if da is db:
                continue
            scope = space.scope[da.name] & space.scope[db.name]
            if scope.bit_count() < params.min_runs:
                continue
            for ba in _conditions(space, da, scope, y, single_only=da.kind == "categorical"):
                in_a = space.mask(da, ba) & scope
                if in_a.bit_count() < params.min_group:
                    continue
                for bb in _conditions(space, db, in_a, y):
                    mask = in_a & space.mask(db, bb)
                    if not mask or mask == in_a:
                        continue
                    r = _score(((da, ba), (db, bb)), mask, scope, y)
                    if r.gain >= best_single + params.min_pair_gain and _eligible(r, params):
                        best_pair = max(best_pair, r.gain)
                        if not best_only:
                            pairs.append(r)
    if best_only:
        return max(best_single, best_pair)
    return sorted(singles + pairs, key=_rank_key)


def _permutation_p(space: _Space, labels: np.ndarray, gains: list[float], params: SweepParams, seed: int) -> list:
    """Per observed gain: the share of label shuffles on which the same search finds a rule as good.

    (1 + k) / (1 + shuffles), the max-statistic permutation test: it counts
    the whole search (every hyperparameter, range, value set and pair), so
    it needs no multiple-testing correction.
    """
    rng = np.random.default_rng(seed)
    exceed = [0] * len(gains)
    low = min(gains)
    # More exceedances than this and no gain can be stated, even as tentative.
    stop = math.floor(max(params.alpha, params.tentative_alpha) * (params.shuffles + 1))
    for done in range(params.shuffles):
        best = _search(space, _bits(rng.permutation(labels)), params, best_only=True)
        if best >= low - 1e-12:
            for i, g in enumerate(gains):
                if best >= g - 1e-12:
                    exceed[i] += 1
        if min(exceed) > stop:
            # The remaining shuffles cannot change the verdict.
            return [min(1.0, (1 + e) / (2 + done)) for e in exceed]
    return [(1 + e) / (1 + params.shuffles) for e in exceed]


def _rank_key(r: _Rule):
    return (-round(r.gain, 9), len(r.parts), -r.n, r.text())


# -- outcomes of a sweep --------------------------------------------------------------------


def _phrase(outcome: str, steps: list) -> str:
    steps = sorted(s for s in steps if s is not None)
    at = ""
    if steps:
        at = f" at step {steps[0]}" if steps[0] == steps[-1] else f" at steps {steps[0]}–{steps[-1]}"
    return {
        "divergence": f"exploded{at}" if at else "diverged",
        "nonfinite": f"went non-finite{at}",
        "overflow": "overflowed (skipped fp16 steps)",
        "spikes": "spiked",
        "optimizer": "had learning-rate or update-size warnings",
        "overfit": "overfit",
        "plateau": "plateaued",
        "stagnation": "stalled on validation",
        "critical": "went critical",
        "sick": "were sick (warning or critical)",
    }.get(outcome, outcome)


def _outcome_labels(rows) -> list[tuple[str, np.ndarray]]:
    present = {k for r in rows for k in r["kinds"]}
    labels = [(k, np.array([k in r["kinds"] for r in rows], dtype=bool)) for k in KINDS if k in present]
    labels.append(("critical", np.array([r["health"] == "critical" for r in rows], dtype=bool)))
    labels.append(("sick", np.array([r["health"] in ("critical", "warning") for r in rows], dtype=bool)))
    out, seen = [], []
    for name, y in labels:
        if any(np.array_equal(y, s) for s in seen):
            continue  # the same runs under a more specific name already
        seen.append(y)
        out.append((name, y))
    return out


def _steps_of(rows, mask: int, outcome):
    if outcome not in ("divergence", "nonfinite"):
        return []
    return [rows[i]["kinds"].get(outcome, {}).get("crash_step") for i in _rows(mask)]


def _single(space: _Space, dim: Dimension, buckets: frozenset, y: int) -> _Rule:
    scope = space.scope[dim.name]
    return _score(((dim, buckets),), space.mask(dim, buckets), scope, y)


def _statement(rule: _Rule, outcome: str, rows, space: _Space, y: int, p: float, best_single: float) -> dict:
    pos = rule.mask & y
    phrase = _phrase(outcome, _steps_of(rows, pos, outcome))
    text = f"{rule.text()}: {rule.a}/{rule.n} {phrase}; every other run: {rule.b}/{rule.m}"
    alone = []
    if len(rule.parts) > 1:
        for dim, bs in rule.parts:
            r = _single(space, dim, bs, y)
            alone.append({"condition": dim.describe(bs), "positives": r.a, "runs": r.n})
        text += " (" + "; ".join(f"{x['condition']} alone: {x['positives']}/{x['runs']}" for x in alone) + ")"
    return {
        "outcome": outcome,
        "text": text,
        "condition": rule.text(),
        "hparams": [d.name for d, _ in rule.parts],
        "terms": [{"hparam": d.name, "values": [d.labels[i] for i in sorted(bs)], "text": d.describe(bs)}
                  for d, bs in rule.parts],
        "positives": rule.a,
        "group": rule.n,
        "rest_positives": rule.b,
        "rest": rule.m,
        "information_gain": round(rule.gain, 4),
        "gain_over_single": round(rule.gain - best_single, 4) if len(rule.parts) > 1 else None,
        "p_value": p,
        "fisher_p": fisher_greater(rule.a, rule.n, rule.b, rule.m),
        "alone": alone,
        "runs": [rows[i]["run"] for i in _rows(rule.mask)],
        "positive_runs": [rows[i]["run"] for i in _rows(pos)],
    }


def analyse_sweep(folder: str, rows: Sequence[Mapping], params: SweepParams = SweepParams()) -> dict:
    """One sweep's hyperparameter table and statements.

    Args:
        folder: the sweep's folder ("." for the logdir).
        rows: per run: {"run", "health", "kinds" (run_outcome's), "hparams"
            (name -> value)}; runs without an analysed health (pending,
            no signals) are listed as excluded.
    """
    analysed = [r for r in rows if r.get("health") in ANALYSED]
    excluded = [{"run": r["run"], "reason": str(r.get("health"))} for r in rows if r.get("health") not in ANALYSED]
    names = sorted({k for r in analysed for k in r["hparams"]})
    constant, ignored, dims = {}, [], []
    n = len(analysed)
    for name in names:
        values = [r["hparams"].get(name) for r in analysed]
        present = [v for v in values if v is not None]
        shown = {fmt_value(v) for v in present}
        if len(shown) == 1:
            if len(present) == n:
                constant[name] = present[0]
            else:
                ignored.append({"hparam": name, "reason": f"set in {len(present)} of {n} runs, to one value"})
            continue
        dim = _dimension(name, values, params)
        if dim is None:
            ignored.append({"hparam": name, "reason": "its values fall in one bucket"})
            continue
        if dim.kind == "categorical" and len(dim.labels) > max(2, len(present) // 2):
            ignored.append({"hparam": name, "reason": "a different value in most runs (an identifier?)"})
            continue
        dims.append(dim)
    out = {
        "sweep": folder,
        "runs": [r["run"] for r in rows],
        "analysed": n,
        "excluded": excluded,
        "constant": constant,
        "ignored": ignored,
        "hparams": [],
        "statements": [],
        "tentative": [],
        "note": None,
    }
    if not names:
        out["note"] = "no hyperparameters found (hparams plugin data, hparams.yaml or key=value run names)"
        return out
    health3 = [r["health"] for r in analysed]
    primary = [next((k for k in KINDS if k in r["kinds"]), "none") for r in analysed]
    for dim in dims:
        buckets = []
        for i, label in enumerate(dim.labels):
            sel = [j for j in range(n) if dim.bucket[j] == i]
            buckets.append({
                "label": label,
                "runs": len(sel),
                "health": {h: sum(1 for j in sel if health3[j] == h) for h in ANALYSED},
                "kinds": {k: c for k in KINDS if (c := sum(1 for j in sel if k in analysed[j]["kinds"]))},
            })
        out["hparams"].append({
            "hparam": dim.name,
            "kind": dim.kind,
            "scale": dim.scale,
            "runs_with": int((dim.bucket >= 0).sum()),
            "mutual_information": {
                "health": round(_mutual_information(dim.bucket, health3), 4),
                "kind": round(_mutual_information(dim.bucket, primary), 4),
            },
            "buckets": buckets,
        })
    out["hparams"].sort(
        key=lambda h: (-h["mutual_information"]["health"], -h["mutual_information"]["kind"], h["hparam"])
    )
    if n < params.min_runs:
        out["note"] = f"{n} analysed run{'s' if n != 1 else ''}: fewer than {params.min_runs}, too few for statements"
        return out
    statements, tentative = [], []
    space = _Space(dims)
    for outcome, labels in _outcome_labels(analysed):
        y = _bits(labels)
        k = int(labels.sum())
        if k == n:
            if out["note"] is None:
                steps = _steps_of(analysed, y, outcome)
                out["note"] = f"all {n} runs {_phrase(outcome, steps)}: no hyperparameter separates them"
            continue
        if k < params.min_positives:
            continue
        rules = _search(space, y, params)
        best_single = max((r.gain for r in rules if len(r.parts) == 1), default=0.0)
        taken: list[_Rule] = []
        for rule in rules:
            if len(taken) >= params.per_outcome:
                break
            if any(rule.mask & t.mask for t in taken):
                continue
            taken.append(rule)
        if not taken:
            continue
        ps = _permutation_p(space, labels, [r.gain for r in taken], params, seed=params.seed)
        for i, (rule, p) in enumerate(zip(taken, ps)):
            st = _statement(rule, outcome, analysed, space, y, p, best_single)
            st["shuffles"] = params.shuffles
            if p <= params.alpha:
                statements.append(st)
            elif i == 0 and p <= params.tentative_alpha:
                tentative.append(st)
    severity = {o: (0 if o in _SEVERE else 2 if o == "sick" else 1) for o in (*KINDS, "critical", "sick")}
    statements.sort(key=lambda s: (severity.get(s["outcome"], 1), -s["information_gain"], s["text"]))
    out["statements"] = statements
    tentative.sort(key=lambda s: (severity.get(s["outcome"], 1), s["p_value"], s["text"]))
    out["tentative"] = tentative[:3]
    return out


def analyse_sweeps(rows: Sequence[Mapping], params: SweepParams = SweepParams()) -> list[dict]:
    """Every sweep of a logdir (see module doc), largest first.

    Args:
        rows: per logical run: {"run", "health", "kinds", "hparams"}; runs
            whose `carrier_of` is set (add_hparams' child runs) are left out.
    """
    rows = [r for r in rows if not r.get("carrier_of")]
    folders = sweep_folders([r["run"] for r in rows])
    by_folder: dict[str, list] = {}
    for r in rows:
        by_folder.setdefault(folders[r["run"]], []).append(r)
    sweeps = [analyse_sweep(f, rs, params) for f, rs in by_folder.items()]
    sweeps.sort(key=lambda s: (-len(s["runs"]), s["sweep"]))
    return sweeps
