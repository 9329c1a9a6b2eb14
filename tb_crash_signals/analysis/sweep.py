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
one-sided Fisher exact p-value that stays at or below `alpha` after
multiplying it by the number of rules the search scored for that outcome
(Bonferroni). Value sets are searched as prefixes of the values sorted by
their rate, the optimal binary split for entropy (Breiman et al., 1984), so
a set of k values counts as k - 1 candidates.

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
_FOLDED_AFTER_DIVERGENCE = ("plateau", "stagnation")
_SEVERE = ("divergence", "nonfinite", "critical")
ANALYSED = ("critical", "warning", "ok")


def run_outcome(entry: Mapping) -> dict:
    """{"health", "kinds": {kind: {"severity", "first_step", "crash_step"}}} of a report run entry.

    From the entry's `incidents` when it has them; else from its warning and
    critical episodes' families (nonfinite, explosion, divergence, growth:
    "divergence"), folding a plateau or validation stagnation that starts
    after a divergence into it. A divergence's crash step is then the first
    critical episode of those families.
    """
    kinds: dict = {}
    incidents = entry.get("incidents")
    if isinstance(incidents, list):
        for inc in incidents:
            kind = inc.get("kind")
            if not isinstance(kind, str):
                continue
            _add_kind(kinds, kind, inc.get("severity"), inc.get("first_alarm_step"), inc.get("crash_step"))
    else:
        episodes = [e for e in entry.get("episodes") or () if e.get("severity") in ("warning", "critical")]
        div_start = min(
            (e["start_step"] for e in episodes if KIND_OF_FAMILY.get(e.get("family")) == "divergence"),
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
        alpha: the largest Bonferroni-adjusted Fisher p-value stated.
        max_values: numeric hyperparameters with at most this many values keep each value.
        min_pair_gain: bits a pair must gain over the best single rule.
        max_pair_dims: hyperparameters (best single rules first) combined into pairs.
        per_outcome: statements per outcome (a second one picks a disjoint group).
    """

    min_runs: int = 6
    min_group: int = 2
    min_positives: int = 2
    alpha: float = 0.05
    max_values: int = 8
    min_pair_gain: float = 0.05
    max_pair_dims: int = 12
    per_outcome: int = 2


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
    parts: tuple  # ((Dimension, frozenset of buckets), ...)
    mask: np.ndarray  # group, within `scope`
    scope: np.ndarray  # rows having every hyperparameter of the rule
    a: int
    n: int
    b: int
    m: int
    gain: float

    def text(self) -> str:
        return " with ".join(d.describe(bs) for d, bs in self.parts)


def _score(parts, mask, scope, y) -> _Rule:
    a = int((mask & y).sum())
    n = int(mask.sum())
    b = int((scope & ~mask & y).sum())
    m = int((scope & ~mask).sum())
    return _Rule(parts, mask, scope, a, n, b, m, info_gain(a, n, b, m))


def _conditions(dim: Dimension, within: np.ndarray, y: np.ndarray, support: np.ndarray, single_only=False):
    """Candidate bucket sets of `dim` over the rows `within` (numeric: ranges; categorical: values or
    rate-sorted prefixes whose values each appear in 2+ runs of the sweep)."""
    present = sorted(set(dim.bucket[within].tolist()) - {-1})
    if len(present) < 2:
        return
    if dim.kind == "numeric":
        for i in range(len(present)):
            for j in range(i, len(present)):
                if i == 0 and j == len(present) - 1:
                    continue
                yield frozenset(present[i : j + 1])
        return
    ok = [v for v in present if support[v] >= 2]
    if single_only:
        for v in ok:
            yield frozenset([v])
        return
    rates = []
    for v in ok:
        sel = within & (dim.bucket == v)
        rates.append((-(y[sel].sum() / max(1, sel.sum())), -int(sel.sum()), v))
    rates.sort()
    order = [v for _, _, v in rates]
    for k in range(1, len(order)):
        if k == len(present):
            break
        yield frozenset(order[:k])


def _mask(dim: Dimension, buckets: frozenset) -> np.ndarray:
    return np.isin(dim.bucket, np.fromiter(buckets, dtype=np.int64))


def _stated(rule: _Rule, tried: int, params: SweepParams) -> tuple[bool, float, float]:
    p = fisher_greater(rule.a, rule.n, rule.b, rule.m)
    adjusted = min(1.0, p * max(1, tried))
    ok = (
        rule.n >= params.min_group
        and rule.a >= params.min_positives
        and rule.m >= 1
        and rule.a * rule.m > rule.b * rule.n  # the group is worse off than the rest
        and adjusted <= params.alpha
    )
    return ok, p, adjusted


def _search(dims: list[Dimension], y: np.ndarray, params: SweepParams):
    """Every rule scored for outcome `y`: (rules best first, number scored)."""
    rows = len(y)
    tried = 0
    singles: list[_Rule] = []
    supports = {}
    for dim in dims:
        scope = dim.bucket >= 0
        supports[dim.name] = np.bincount(dim.bucket[scope], minlength=len(dim.labels))
        if scope.sum() < params.min_runs:
            continue
        for bs in _conditions(dim, scope, y, supports[dim.name]):
            tried += 1
            singles.append(_score(((dim, bs),), _mask(dim, bs) & scope, scope, y))
    singles.sort(key=_rank_key)
    best_single = singles[0].gain if singles else 0.0
    best_by_dim: dict[str, float] = {}
    for r in singles:
        best_by_dim.setdefault(r.parts[0][0].name, r.gain)
    pair_dims = sorted(dims, key=lambda d: -best_by_dim.get(d.name, 0.0))[: params.max_pair_dims]
    pairs: list[_Rule] = []
    for da in pair_dims:
        for db in pair_dims:
            if da is db:
                continue
            scope = (da.bucket >= 0) & (db.bucket >= 0)
            if scope.sum() < params.min_runs:
                continue
            for ba in _conditions(da, scope, y, supports[da.name], single_only=da.kind == "categorical"):
                in_a = _mask(da, ba) & scope
                if in_a.sum() < params.min_group:
                    continue
                for bb in _conditions(db, in_a, y, supports[db.name]):
                    tried += 1
                    mask = in_a & _mask(db, bb)
                    if not mask.any() or mask.sum() == in_a.sum():
                        continue
                    pairs.append(_score(((da, ba), (db, bb)), mask, scope, y))
    good_pairs = [r for r in pairs if r.gain >= best_single + params.min_pair_gain]
    del rows
    return sorted(singles + good_pairs, key=_rank_key), tried


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


def _steps_of(rows, mask, outcome):
    if outcome not in ("divergence", "nonfinite"):
        return []
    return [rows[i]["kinds"].get(outcome, {}).get("crash_step") for i in np.flatnonzero(mask)]


def _statement(rule: _Rule, outcome: str, rows, y, p, adjusted, singles_of) -> dict:
    pos = rule.mask & y
    phrase = _phrase(outcome, _steps_of(rows, pos, outcome))
    text = f"{rule.text()}: {rule.a}/{rule.n} {phrase}; every other run: {rule.b}/{rule.m}"
    alone = []
    if len(rule.parts) > 1:
        for dim, bs in rule.parts:
            r = singles_of(dim, bs)
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
        "p_value": p,
        "p_adjusted": adjusted,
        "alone": alone,
        "runs": [rows[i]["run"] for i in np.flatnonzero(rule.mask)],
        "positive_runs": [rows[i]["run"] for i in np.flatnonzero(pos)],
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
    out["hparams"].sort(key=lambda h: (-h["mutual_information"]["health"], -h["mutual_information"]["kind"], h["hparam"]))
    if n < params.min_runs:
        out["note"] = f"{n} analysed run{'s' if n != 1 else ''}: fewer than {params.min_runs}, too few for statements"
        return out
    statements = []
    for outcome, y in _outcome_labels(analysed):
        k = int(y.sum())
        if k == n:
            if out["note"] is None:
                steps = _steps_of(analysed, y, outcome)
                out["note"] = f"all {n} runs {_phrase(outcome, steps)}: no hyperparameter separates them"
            continue
        if k < params.min_positives:
            continue
        rules, tried = _search(dims, y, params)
        cache = {}

        def singles_of(dim, bs, y=y):
            key = (dim.name, bs)
            if key not in cache:
                scope = dim.bucket >= 0
                cache[key] = _score(((dim, bs),), _mask(dim, bs) & scope, scope, y)
            return cache[key]

        taken: list[_Rule] = []
        for rule in rules:
            if len(taken) >= params.per_outcome:
                break
            if any((rule.mask & t.mask).any() for t in taken):
                continue
            ok, p, adjusted = _stated(rule, tried, params)
            if not ok:
                continue
            taken.append(rule)
            st = _statement(rule, outcome, analysed, y, p, adjusted, singles_of)
            st["rules_scored"] = tried
            statements.append(st)
    severity = {o: (0 if o in _SEVERE else 2 if o == "sick" else 1) for o in (*KINDS, "critical", "sick")}
    statements.sort(key=lambda s: (severity.get(s["outcome"], 1), -s["information_gain"], s["text"]))
    out["statements"] = statements
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
