"""Each logical run's hyperparameters, from the most trusted source that has them.

Sources, most trusted first: TensorBoard's hparams plugin data, Lightning's
`hparams.yaml`, HuggingFace's TrainingArguments text, and `key=value` pairs in
the run's name (:func:`parse_run_name`). A key takes its value from the first
source that has it; each value remembers its source.

Where the values live is writer-specific, and handled here:

* Keras writes its hparams file to the parent of `X/train` and
  `X/validation`, which is the logical run `X` itself.
* `SummaryWriter.add_hparams` writes them to a child run `X/<time.time()>`
  holding only the metric scalars; such a child's values go to `X`, and
  the child is a *carrier*, not a run of its own.

Pure: nothing here imports TensorBoard.
"""

from __future__ import annotations

import dataclasses
import math
import posixpath
import re
from typing import Iterable, Mapping, Sequence

SOURCES = ("tensorboard", "hparams.yaml", "text args", "run name")

MAX_NAME = 2000  # characters of a run name parsed
MAX_PAIRS = 64  # pairs taken from one run name
MAX_VALUE = 200  # characters of a parsed string value

_HARD_SEPARATORS = re.compile(r"[,;&|\s]+")
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_KEY = re.compile(r"[A-Za-z_~.][A-Za-z0-9_.~\-]*")
_TIMESTAMP = re.compile(r"\d{9,11}\.\d+")
# Ray Tune ends trial names with the start time: "..._lr=0.001_2024-01-01_12-00-00".
_TRAILING_DATE = re.compile(r"_\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}$")


@dataclasses.dataclass(frozen=True)
class RunHParams:
    """A run's hyperparameters.

    Attributes:
        values: name -> bool, int, float or str.
        sources: name -> where its value came from (one of SOURCES).
        skipped: "source: key (why)" for what was seen but not kept.
        problems: what could not be read or parsed.
        carrier_of: for a carrier run (see module doc), the run its values belong to.
    """

    values: Mapping[str, object] = dataclasses.field(default_factory=dict)
    sources: Mapping[str, str] = dataclasses.field(default_factory=dict)
    skipped: tuple = ()
    problems: tuple = ()
    carrier_of: str | None = None

    def to_json(self) -> dict:
        return {
            "values": dict(self.values),
            "sources": dict(self.sources),
            "skipped": list(self.skipped),
            "problems": list(self.problems),
            **({"carrier_of": self.carrier_of} if self.carrier_of is not None else {}),
        }


# -- run names ------------------------------------------------------------------------------


def parse_value(text: str):
    """A run-name value as a number (int or finite float), bool, or the string itself."""
    if _NUMBER.fullmatch(text):
        if re.fullmatch(r"[+-]?\d+", text):
            return int(text)
        v = float(text)
        return v if math.isfinite(v) else text
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    return text if len(text) <= MAX_VALUE else text[: MAX_VALUE - 1] + "…"


def _first_key(token: str, known: Sequence[str]) -> str:
    """The key ending a component's first `=`: the whole token, after any id-like prefix."""
    for k in known:
        if token.endswith("_" + k) or token == k:
            return k
    pieces = token.split("_")
    for i in range(len(pieces) - 1, -1, -1):
        if pieces[i].isdigit():  # Ray Tune's "<trainable>_<id>_00003_3_lr=...": the key follows the index
            return "_".join(pieces[i + 1 :])
    return token


def _split_middle(token: str, known: Sequence[str]):
    """(value, next key) of the text between two `=`, or None if it holds no separator."""
    for k in known:
        if token.endswith("_" + k) and len(token) > len(k) + 1:
            return token[: -len(k) - 1], k
    m = _NUMBER.match(token)
    if m and token[m.end() : m.end() + 1] == "_" and m.end() + 1 < len(token):
        return token[: m.end()], token[m.end() + 1 :]
    if "_" in token:
        at = token.rindex("_")
        if 0 < at < len(token) - 1:
            return token[:at], token[at + 1 :]
    return None


def _pairs_of(segment: str, known: Sequence[str]):
    tokens = segment.split("=")
    if len(tokens) < 2:
        return []
    pairs = []
    key = _first_key(tokens[0], known)
    value_parts = []
    for token in tokens[1:-1]:
        split = _split_middle(token, known)
        if split is None:
            value_parts.append(token)  # "a=b=c": the value is "b=c"
            continue
        value_parts.append(split[0])
        pairs.append((key, "=".join(value_parts)))
        key, value_parts = split[1], []
    value_parts.append(_TRAILING_DATE.sub("", tokens[-1]))
    pairs.append((key, "=".join(value_parts)))
    return pairs


def parse_run_name(name: str, known_keys: Iterable[str] = ()) -> tuple[dict, list]:
    """`key=value` pairs of a run name: (values, problems).

    Separators: path levels (`/`), `,` `;` `&` `|` and whitespace between
    pairs; within a level, `_` before the next key
    (`learning_rate=0.1_optimizer=Adam`). Where `_` is also part of keys or
    values, the split is: before a key known from another source, else right
    after a leading number (`0.1_batch_size`), else at the last `_`
    (`Nadam_plateau_~random`). Values are numbers (`3e-4`, `64`), booleans
    (`true`/`false`) or strings. A key given twice keeps its deepest value.
    """
    known = sorted({str(k) for k in known_keys if k}, key=len, reverse=True)
    values: dict = {}
    problems: list = []
    text = str(name)
    if len(text) > MAX_NAME:
        problems.append(f"run name longer than {MAX_NAME} characters: only its start was parsed")
        text = text[:MAX_NAME]
    count = 0
    for component in text.split("/"):
        for segment in _HARD_SEPARATORS.split(component):
            for key, raw in _pairs_of(segment, known):
                if count >= MAX_PAIRS:
                    problems.append(f"more than {MAX_PAIRS} key=value pairs in the run name: the rest ignored")
                    return values, problems
                if not key or not _KEY.fullmatch(key):
                    problems.append(f"run name: {key!r}={raw!r} skipped (not a key)")
                    continue
                if raw == "":
                    problems.append(f"run name: {key!r} has no value")
                    continue
                if key in values:
                    problems.append(f"run name: {key!r} given twice; the deepest value kept")
                values[key] = parse_value(raw)
                count += 1
    return values, problems


# -- merging and attribution ----------------------------------------------------------------


def merge(sources: Sequence[tuple[str, Mapping | None]], skipped=(), problems=()) -> RunHParams:
    """First source wins per key; `sources` is (source name, values or None), most trusted first."""
    values, origin = {}, {}
    for source, vals in sources:
        for key, value in (vals or {}).items():
            if key not in values:
                values[key] = value
                origin[key] = source
    return RunHParams(values, origin, tuple(skipped), tuple(problems))


def _looks_like_carrier(child, points: Mapping[str, int] | None) -> bool:
    last = posixpath.basename(child.name)
    if _TIMESTAMP.fullmatch(last) or not child.has_signals:
        return True
    if points is not None and child.name in points:
        return points[child.name] <= 1  # add_hparams' metric scalars: one point each
    return False


def assign(
    logical_runs: Sequence,
    found: Mapping[str, object],
    points: Mapping[str, int] | None = None,
) -> dict[str, RunHParams]:
    """Each logical run's hyperparameters.

    Args:
        logical_runs: objects with `name`, `members` and `has_signals`
            (analysis.signals.LogicalRun).
        found: TensorBoard run name -> what its directory holds, with
            attributes `tensorboard`, `yaml`, `text_args` (dicts or None),
            `skipped` and `problems` (ingest.hparams.DirHParams).
        points: logical run -> most points of any signal, when known (helps
            recognise add_hparams' carrier runs).
    """
    by_name = {lr.name: lr for lr in logical_runs}

    def own(lr):
        tb, yml, text, skipped, problems = {}, {}, {}, [], []
        has = {"tensorboard": False, "yaml": False}
        for run in dict.fromkeys((lr.name, *lr.members)):
            d = found.get(run)
            if d is None:
                continue
            if d.tensorboard is not None:
                has["tensorboard"] = True
                tb = {**d.tensorboard, **tb}
            if d.yaml is not None:
                yml = {**d.yaml, **yml}
            if d.text_args is not None:
                text = {**d.text_args, **text}
            skipped.extend(d.skipped)
            problems.extend(d.problems)
        return tb, yml, text, skipped, problems, has["tensorboard"]

    gathered = {lr.name: own(lr) for lr in logical_runs}
    carried: dict[str, list[str]] = {}
    carrier_of: dict[str, str] = {}
    for lr in logical_runs:
        parent = posixpath.dirname(lr.name)
        if not gathered[lr.name][5] or parent not in by_name or gathered[parent][5]:
            continue
        if _looks_like_carrier(lr, points):
            carried.setdefault(parent, []).append(lr.name)
            carrier_of[lr.name] = parent

    known = {k for g in gathered.values() for part in g[:3] for k in part}
    out = {}
    for lr in logical_runs:
        tb, yml, text, skipped, problems, _ = gathered[lr.name]
        for child in sorted(carried.get(lr.name, ())):
            ctb, cyml, ctext, cskipped, cproblems, _ = gathered[child]
            tb = {**ctb, **tb}  # several add_hparams calls: the first child's value stays
            skipped = skipped + cskipped
            problems = problems + cproblems
        named, name_problems = parse_run_name(lr.name, known)
        merged = merge(
            [("tensorboard", tb), ("hparams.yaml", yml), ("text args", text), ("run name", named)],
            skipped=dict.fromkeys(skipped),
            problems=dict.fromkeys(problems + name_problems),
        )
        if lr.name in carrier_of:
            merged = dataclasses.replace(merged, carrier_of=carrier_of[lr.name])
        out[lr.name] = merged
    return out
