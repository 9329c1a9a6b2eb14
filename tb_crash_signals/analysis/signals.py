"""Which logged tag feeds which of the five dimensions the rules watch.

Tags are matched by name, with a fixed precedence, so the same logdir always
maps the same way. Keras writes one run per split (`X/train`, `X/validation`)
with the same tag in each, fairseq three (`X/train_inner`, `X/train`, `X/valid`);
those sibling runs become one logical run `X`.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

import numpy as np

if TYPE_CHECKING:
    from tb_crash_signals.ingest.series import Series

SIGNALS = ("train_loss", "val_loss", "grad_norm", "update_ratio", "lr")

SIGNAL_LABELS = {
    "train_loss": "train loss",
    "val_loss": "validation loss",
    "grad_norm": "grad norm",
    "update_ratio": "update ratio",
    "lr": "learning rate",
}

# fairseq writes its per-update training metrics to `train_inner`, their epoch means to `train`:
# both are the training split, the per-update one read first.
_TRAIN_SPLITS = ("train_inner", "train", "training")
_VAL_SPLITS = ("validation", "val", "valid", "eval", "evaluation", "test", "dev")

_VAL_WORDS = frozenset(_VAL_SPLITS) | {"v"}
_TRAIN_WORDS = frozenset(_TRAIN_SPLITS) | {"tr"}

# Names written by the common writers, best first. A tag named here wins over
# any tag matched only by its words.
_KNOWN = {
    "train_loss": (
        "train/loss", "loss/train", "train_loss", "train_loss_step", "training_loss",
        "train/loss_step", "loss/total_loss", "loss", "epoch_loss", "batch_loss",
        "train/loss_epoch", "train_loss_epoch",
    ),
    "val_loss": (
        "eval/loss", "val/loss", "loss/val", "val_loss", "validation/loss",
        "loss/validation", "valid_loss", "validation_loss", "val_loss_epoch",
        "test/loss", "loss/test", "epoch_loss", "evaluation_loss", "v_loss",
    ),
    "grad_norm": (
        "train/grad_norm", "grad_norm", "optim/grad_global_norm", "grad/norm",
        "gradient_norm", "grad_2.0_norm_total", "global_grad_norm", "grad_global_norm",
        "gradients/global_norm", "gnorm",
    ),
    "update_ratio": (
        "optim/update_ratio", "update_ratio", "param_update_ratio", "train/update_ratio",
    ),
    "lr": (
        "train/learning_rate", "learning_rate", "lr", "optim/lr", "epoch_lr",
        "epoch_learning_rate", "lr-adam", "lr-sgd", "lr-adamw",
    ),
}

_NUMBERED_LR = re.compile(r"lr\d+")

# Words that name a loss without the word "loss".
_LOSS_WORDS = frozenset({"xent", "nll"})
# Words of a perplexity: the exponential of a cross-entropy, read (as its log) where no loss is logged.
_PERPLEXITY_WORDS = frozenset({"perplexity", "ppl"})
PERPLEXITY_NOTE = "no loss logged: losses read as the log of their perplexity ({tags})"
# Words that make a tag look like a loss but not the objective itself.
_NOT_A_LOSS = frozenset({"scale", "scaler", "weight", "ratio", "std", "var", "min", "max"})
# Words of a loss's regularising or auxiliary terms: a VAE's KL term climbs by design while the
# encoder learns, a mixture of experts' balancing loss is held, not minimised. The objective, or
# its main term, is read before them. (Not "l1"/"l2": an L1 or L2 loss is often the objective.)
_COMPONENT = frozenset({
    "kl", "kld", "kldiv", "reg", "regularization", "regularisation", "regularizer", "penalty", "aux",
    "auxiliary", "commitment", "codebook", "gp", "prior", "balance", "balancing", "router",
})

# What a run's losses are (`LogicalRun.loss_kind`). An objective falls as the run learns; the
# losses of a GAN's two players and a reinforcement learner's losses do not: a discriminator's
# loss climbs from near 0 to its equilibrium as the generator learns, a DQN's TD loss grows with
# the values it learns. The rules that read a loss as an objective (`Rule.objective`) stay off
# them; their NaN/Inf, absolute bounds, gradient norms and learning rates are watched as any run's.
LOSS_KINDS = ("objective", "adversarial", "reinforcement")
LOSS_KIND_NOTES = {
    "adversarial": "GAN losses: watched for NaN/Inf, blow-ups and gradients only",
    "reinforcement": "reinforcement-learning losses: watched for NaN/Inf, blow-ups and gradients only",
}
_GENERATOR = frozenset({"g", "gen", "generator"})
_DISCRIMINATOR = frozenset({"d", "disc", "discriminator", "critic"})
_REWARD = frozenset({"reward", "rewards", "rew", "return", "returns"})
# A preference optimiser's implicit rewards (DPO's `rewards/chosen`, `rewards/margins`): its loss
# is an objective.
_PREFERENCE = frozenset({"chosen", "rejected", "margin", "margins", "accuracies"})
# A word's case changing inside a tag ends it there (`lossD`, `DLoss`), for the players' letters.
_CASE_BREAK = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


@dataclasses.dataclass(frozen=True)
class TagRef:
    """A (run, tag) pair: where one dimension's data lives. `log`: the tag is a perplexity, and
    the loss is its natural logarithm (the cross-entropy it exponentiates)."""

    run: str
    tag: str
    log: bool = False

    def to_json(self) -> dict:
        return {"run": self.run, "tag": self.tag, "log": True} if self.log else {"run": self.run, "tag": self.tag}


@dataclasses.dataclass(frozen=True)
class LogicalRun:
    """One training run as the user thinks of it.

    Attributes:
        name: display name (the Keras parent for sibling runs).
        members: the TensorBoard runs it is made of.
        signals: dimension -> TagRef, or None when no tag was recognised.
        tags: member run -> its scalar tags, for reporting unmapped runs.
        loss_kind: what its losses are (`LOSS_KINDS`, see `loss_kind`).
    """

    name: str
    members: tuple[str, ...]
    signals: Mapping[str, TagRef | None]
    tags: Mapping[str, tuple[str, ...]]
    loss_kind: str = "objective"

    @property
    def has_signals(self) -> bool:
        return any(ref is not None for ref in self.signals.values())


def _words(tag: str) -> list[str]:
    return [w for w in re.split(r"[^0-9a-z]+", tag.lower()) if w]


def _split_of(run: str) -> str | None:
    last = posixpath.basename(run).lower()
    if last in _TRAIN_SPLITS:
        return "train"
    if last in _VAL_SPLITS:
        return "val"
    return None


def _score(dimension: str, tag: str, split: str | None) -> int:
    """How well `tag` (in a run of the given split) fits `dimension`; 0 = not at all."""
    lowered = tag.lower()
    words = _words(tag)
    wordset = set(words)
    joined = "".join(words)
    known = _KNOWN[dimension]
    is_val_tag = bool(wordset & _VAL_WORDS)
    is_train_tag = bool(wordset & _TRAIN_WORDS)

    if dimension in ("train_loss", "val_loss"):
        # A cross-entropy or a negative log-likelihood is a loss by another name (Composer's
        # `metrics/eval/LanguageCrossEntropy`, OpenNMT's `progress/xent` and `valid/xent`); a
        # perplexity is one exponentiated, read only where nothing else is (`is_perplexity`).
        perplexity = is_perplexity(tag)
        if ("loss" not in joined and "crossentropy" not in joined and not wordset & _LOSS_WORDS
                and not perplexity) or wordset & _NOT_A_LOSS:
            return 0
        wants_val = dimension == "val_loss"
        in_val = is_val_tag or (split == "val" and not is_train_tag)
        if in_val != wants_val:
            return 0
        if split == "train" and wants_val and not is_val_tag:
            return 0
        if perplexity:
            return 1
    elif dimension == "grad_norm":
        # fairseq's "gnorm" (under train/, train_inner/) names no "grad".
        if not ("grad" in joined and "norm" in joined) and lowered not in known and "gnorm" not in wordset:
            return 0
        if wordset & {"clip", "clipped", "max", "min"}:
            return 0
    elif dimension == "update_ratio":
        if not ("update" in joined and ("ratio" in joined or "param" in joined)):
            if lowered not in known:
                return 0
    elif dimension == "lr":
        # ESPnet's "optim0_lr0": a numbered rate is a rate too.
        if not (wordset & {"lr", "learning"} or "learningrate" in joined
                or any(_NUMBERED_LR.fullmatch(w) for w in words)):
            return 0
        if lowered.startswith("lr-") or lowered.startswith("lr_"):
            return 900
    score = 100
    if lowered in known:
        score = 1000 - known.index(lowered)
    elif dimension in ("train_loss", "val_loss"):
        # Prefer the plain or "total" loss over its components, and per-step
        # values over per-epoch aggregates when both exist.
        score += 40 if "total" in wordset else 0
        score += 20 if words and words[-1] == "loss" else 0
        score -= 10 * max(0, len(words) - 2)
        score -= 15 if "epoch" in wordset else 0
        score -= 30 if "loss" not in joined else 0  # a metric named so, where a loss is logged too
        score -= 50 if (wordset | _case_words(tag)) & _COMPONENT else 0
    return max(score, 1)


def is_perplexity(tag: str) -> bool:
    """Whether a tag names a perplexity (`train/ppl`, `val/perplexity`) and no loss."""
    joined = "".join(_words(tag))
    return bool(_case_words(tag) & _PERPLEXITY_WORDS) and "loss" not in joined and "crossentropy" not in joined


def _ref(dimension: str, run: str, tag: str) -> TagRef:
    return TagRef(run, tag, log=dimension in ("train_loss", "val_loss") and is_perplexity(tag))


def _resolve(
    members: Sequence[tuple[str, str | None, Sequence[str]]],
    overrides: Mapping[str, Sequence[str]],
) -> dict[str, TagRef | None]:
    """Chooses one tag per dimension among the members' tags."""
    signals: dict[str, TagRef | None] = {}
    for dimension in SIGNALS:
        if dimension in overrides:
            signals[dimension] = _override(dimension, members, overrides[dimension])
            continue
        best: tuple[int, int, str, str] | None = None
        for order, (run, split, tags) in enumerate(members):
            for tag in tags:
                score = _score(dimension, tag, split)
                if score <= 0:
                    continue
                # Deterministic: score, then member order, then name.
                key = (-score, order, tag, run)
                if best is None or key < best:
                    best = key
        signals[dimension] = None if best is None else _ref(dimension, best[3], best[2])
    # The same tag cannot be both train and validation loss.
    tl, vl = signals["train_loss"], signals["val_loss"]
    if tl is not None and tl == vl:
        signals["val_loss"] = None
    return signals


def _override(dimension, members, wanted: Sequence[str]) -> TagRef | None:
    # The validation member is searched first for val_loss, the train member
    # first for everything else: the same tag name lives in both.
    ordered = sorted(
        members,
        key=lambda m: (0 if (m[1] == "val") == (dimension == "val_loss") else 1),
    )
    for tag in wanted:
        for run, _, tags in ordered:
            if tag in tags:
                return _ref(dimension, run, tag)
    return None


def _case_words(tag: str) -> set[str]:
    """A tag's words, a change of case inside one ending it too (`lossD`, `AverageReturns`)."""
    return set(_words(_CASE_BREAK.sub(" ", tag)))


def _players(words: set[str]) -> set[str]:
    """The GAN players a tag's words name: "g" (generator), "d" (discriminator or critic)."""
    players = set()
    if words & _GENERATOR:
        players.add("g")
    if words & _DISCRIMINATOR:
        players.add("d")
    return players


def loss_kind(tags: Iterable[str], train_loss: str | None) -> str:
    """What a run's losses are, from all its tags and the one read as its train loss:
    "reinforcement" when it logs a reward or a return (`rollout/ep_rew_mean`,
    `charts/episodic_return`; not a preference optimiser's implicit rewards, DPO's
    `rewards/chosen`); "adversarial" when its losses name both players of a GAN (a generator's
    and a discriminator's or critic's: `loss_G` and `loss_D`, `Loss/generator` and `Loss/critic`)
    and its train loss is one of them (a total loss besides, as ELECTRA's, is an objective);
    else "objective"."""
    players: set[str] = set()
    rewarded = False
    for tag in tags:
        words = _case_words(tag)
        if any("loss" in word for word in words):
            players |= _players(words)
        elif words & _REWARD and not words & _PREFERENCE:
            rewarded = True
    if rewarded:
        return "reinforcement"
    if players == {"g", "d"} and train_loss is not None and _players(_case_words(train_loss)):
        return "adversarial"
    return "objective"


def _kind(tags: Iterable[str], signals: Mapping[str, TagRef | None], overrides: Mapping[str, Sequence[str]]) -> str:
    # A train loss the config names is an objective: the user chose to have it judged as one.
    if overrides.get("train_loss"):
        return "objective"
    train = signals.get("train_loss")
    return loss_kind(tags, train.tag if train is not None else None)


def as_losses(run: LogicalRun, data: Mapping[str, "Series"]) -> dict:
    """The series as the rules read them: a perplexity mapped to a loss (`TagRef.log`) becomes its
    natural logarithm, the cross-entropy it exponentiates (a ratio of those is what the rules' bars
    are for; one of perplexities is that of losses exponentiated). Others as they are."""
    out = dict(data)
    for dimension, series in data.items():
        ref = run.signals.get(dimension)
        if ref is not None and ref.log and series is not None:
            with np.errstate(divide="ignore", invalid="ignore"):
                out[dimension] = dataclasses.replace(series, values=np.log(series.values))
    return out


def family(run: str) -> str:
    """The logical run that `run` may belong to: its parent directory for a train or
    validation split, else itself.

    `group_runs` only groups runs of one family (a parent and its splits), so the runs
    of a logdir can be grouped family by family, apart, with the same result.
    """
    return (posixpath.dirname(run) or ".") if _split_of(run) is not None else run


def families(runs) -> list[list[str]]:
    """`runs` in the groups `group_runs` decides on together: a run, the parent it may
    join (`signals.family`), and so on transitively (a split that is itself a parent,
    ``validation`` next to ``validation/train``, ties its parent and its children)."""
    parent: dict[str, str] = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for run in runs:
        a, b = find(run), find(family(run))
        if a != b:
            parent[max(a, b)] = min(a, b)
    groups: dict[str, list[str]] = {}
    for run in sorted(runs):
        groups.setdefault(find(run), []).append(run)
    return [groups[k] for k in sorted(groups)]


def _member_order(run: str):
    """Training splits first, the finer one first (`_TRAIN_SPLITS`' order), then validation."""
    last = posixpath.basename(run).lower()
    return (_split_of(run) != "train", _TRAIN_SPLITS.index(last) if last in _TRAIN_SPLITS else 0, run)


def group_runs(
    run_tags: Mapping[str, Iterable[str]],
    overrides: Mapping[str, Sequence[str]] | None = None,
) -> list[LogicalRun]:
    """Groups TensorBoard runs into logical runs and maps their tags.

    Args:
        run_tags: TensorBoard run name -> its scalar tags.
        overrides: dimension -> tag names to use instead of the name
            patterns (first present wins; an empty list disables it).

    Returns:
        Logical runs sorted by name.
    """
    overrides = overrides or {}
    runs = {run: tuple(sorted(set(tags))) for run, tags in run_tags.items()}
    by_parent: dict[str, list[str]] = {}
    for run in runs:
        if _split_of(run) is not None:
            by_parent.setdefault(posixpath.dirname(run) or ".", []).append(run)

    grouped: set[str] = set()
    logical: list[LogicalRun] = []
    for parent, children in by_parent.items():
        splits = [_split_of(c) for c in children]
        trains, vals = splits.count("train"), splits.count("val")
        # A TF Estimator writes its training events in the model directory itself and its
        # evaluations' in eval/ under it: the parent is the training member.
        estimator = bool(runs.get(parent)) and not trains and vals == 1
        # Keras writes train/ alone when there is no validation data, and an
        # hparams-only event file (no scalars) in the parent, which we absorb.
        if not estimator and (not trains or vals > 1 or runs.get(parent)):
            continue
        if parent in runs:
            grouped.add(parent)
        ordered = sorted(children, key=_member_order)
        members = [(c, _split_of(c), runs[c]) for c in ordered]
        if estimator:
            ordered.insert(0, parent)
            members.insert(0, (parent, "train", runs[parent]))
        signals = _resolve(members, overrides)
        logical.append(
            LogicalRun(
                name=parent,
                members=tuple(ordered),
                signals=signals,
                tags={c: runs[c] for c in ordered},
                loss_kind=_kind((t for c in ordered for t in runs[c]), signals, overrides),
            )
        )
        grouped.update(children)

    for run, tags in runs.items():
        if run in grouped:
            continue
        signals = _resolve([(run, _split_of(run), tags)], overrides)
        logical.append(
            LogicalRun(
                name=run,
                members=(run,),
                signals=signals,
                tags={run: tags},
                loss_kind=_kind(tags, signals, overrides),
            )
        )
    logical.sort(key=lambda lr: lr.name)
    return logical
