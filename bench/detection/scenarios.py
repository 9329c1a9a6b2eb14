"""The corpus's scenarios, and the plan that places each run in a (kind, style) cell and a split.

A scenario is how a run is trained (a `RunSpec` builder) plus what it was
*meant* to show (`meant`, a family name, for readability only: the scores
use the labels computed from the recorded scalars).

The split is by model kind x writer style: the 25 (kind, style) cells are
dealt to dev or test like the squares of a chessboard ((kind index + style
index) even -> dev), so every kind and every style appears in both halves
but no (kind, style) combination does. Each scenario's replicates alternate
between the halves, so every scenario appears in both.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable

import numpy as np
from train import (
    KINDS,
    RunSpec,
    constant,
    cyclic,
    exponential,
    one_cycle,
    piecewise,
    ramp,
    step_decay,
    warm_restarts,
    warmup_cosine,
)
from writers import STYLES

# per-kind steps, Adam learning rate, SGD learning rate, width, batch
T = {"mlp": 1200, "reg": 1200, "cnn": 800, "gru": 600, "tfm": 600}
ADAM = {"mlp": 3e-3, "reg": 2e-3, "cnn": 3e-3, "gru": 5e-3, "tfm": 2e-3}
SGD = {"mlp": 0.05, "reg": 0.02, "cnn": 0.05, "gru": 0.5, "tfm": 0.2}
WIDTH = {"mlp": 96, "reg": 96, "cnn": 64, "gru": 48, "tfm": 32}
BATCH = {"mlp": 64, "reg": 64, "cnn": 64, "gru": 32, "tfm": 32}
TEXT = ("gru", "tfm")
NOT_TEXT = ("mlp", "reg", "cnn")


def split_of(kind: str, style: str) -> str:
    return "dev" if (KINDS.index(kind) + STYLES.index(style)) % 2 == 0 else "test"


@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str
    meant: str            # healthy | overflow | spikes | overfit | plateau | misconfig | gradual | abrupt
    about: str            # one line: what the run does
    build: Callable       # (kind, rng) -> RunSpec keyword arguments
    kinds: tuple = KINDS
    styles: tuple = STYLES
    replicates: int = 4


def _base(kind, **kw):
    out = {"steps": T[kind], "width": WIDTH[kind], "batch": BATCH[kind]}
    out.update(kw)
    return out


def _pick(rng, xs):
    return xs[int(rng.integers(len(xs)))]


def _healthy_cosine(k, rng):
    return _base(k, opt="adam", lr=warmup_cosine(ADAM[k], T[k] // 15, T[k]),
                 log_every=_pick(rng, [1, 1, 5, 10]), eval_every=_pick(rng, [25, 50]))


def _healthy_step(k, rng):
    return _base(k, opt="sgd", lr=step_decay(SGD[k], [T[k] // 2, 3 * T[k] // 4], 0.2), clip=None,
                 log_every=_pick(rng, [1, 5]), eval_every=50)


def _tiny_batch(k, rng):
    steps = {"mlp": 3000, "reg": 3000, "cnn": 2000, "gru": 1500, "tfm": 1500}[k]
    return _base(k, steps=steps, opt="adam", easy=True, label_noise=0.0,
                 lr=warmup_cosine(ADAM[k] * 0.3, steps // 20, steps, floor=0.1),
                 batch=_pick(rng, [1, 2, 4] if k == "reg" else [2, 4]), log_every=_pick(rng, [1, 1, 5]),
                 eval_every=_pick(rng, [100, 200]))


def _long_warmup(k, rng):
    steps = int(T[k] * 1.5)
    warm = int(steps * rng.uniform(0.3, 0.45))
    return _base(k, steps=steps, opt="adam", lr=warmup_cosine(ADAM[k], warm, steps),
                 init_scale=float(rng.uniform(0.15, 0.3)), depth=4,
                 log_every=_pick(rng, [1, 5, 10]), eval_every=50)


def _fp16(k, rng):
    return _base(k, opt="adam", lr=warmup_cosine(ADAM[k], T[k] // 15, T[k]),
                 fp16={"init": float(2 ** int(rng.integers(15, 19))),
                       "growth_interval": _pick(rng, [50, 100, 200]),
                       "nan": bool(rng.integers(2))},
                 log_every=_pick(rng, [1, 1, 5]), eval_every=50)


def _cyclic(k, rng):
    if rng.integers(2):
        lr = cyclic(ADAM[k] * 0.1, ADAM[k], _pick(rng, [100, 150, 200]))
        return _base(k, opt="adam", lr=lr, log_every=_pick(rng, [1, 5]), eval_every=50)
    lr = cyclic(SGD[k] * 0.1, SGD[k], _pick(rng, [100, 150, 200]))
    return _base(k, opt="sgd", lr=lr, clip=None, log_every=_pick(rng, [1, 5]), eval_every=50)


def _warm_restarts(k, rng):
    period = T[k] // int(_pick(rng, [3, 4, 5]))
    floor = float(_pick(rng, [0.0, 0.01, 0.05]))
    if rng.integers(2):
        return _base(k, opt="adam", lr=warm_restarts(ADAM[k], period, floor),
                     log_every=_pick(rng, [1, 5, 10]), eval_every=50)
    return _base(k, opt="sgd", lr=warm_restarts(SGD[k], period, floor), clip=None,
                 log_every=_pick(rng, [1, 5, 10]), eval_every=50)


def _one_cycle(k, rng):
    opt = _pick(rng, ["adam", "sgd"])
    peak = ADAM[k] * 2 if opt == "adam" else SGD[k] * 2
    return _base(k, opt=opt, lr=one_cycle(peak, T[k]), log_every=_pick(rng, [1, 5, 10]),
                 eval_every=50)


def _resumed(k, rng):
    steps = T[k]
    # a Keras epoch boundary, not an evaluation step (so both purges drop the same points)
    ckpt = int(steps * rng.uniform(0.35, 0.5)) // 20 * 20
    ckpt += 20 if ckpt % 100 == 0 else 0
    stop = ckpt + int(rng.integers(40, 160))
    return _base(k, opt="adam", lr=warmup_cosine(ADAM[k], steps // 15, steps),
                 resume=(stop, ckpt), log_every=_pick(rng, [1, 5, 10]), eval_every=50)


def _tfm_spikes(k, rng):
    steps = 900
    at = sorted(int(s) for s in rng.choice(np.arange(150, steps - 60), 4, replace=False))
    hows = [_pick(rng, ["repeat", "scale", "labels"]) for _ in at]
    return _base(k, steps=steps, opt="adam", lr=warmup_cosine(ADAM[k] * 2, 60, steps),
                 corrupt=dict(zip(at, hows)), clip=float(_pick(rng, [1.0, 5.0])),
                 log_every=1, eval_every=50)


def _spikes(k, rng):
    at = sorted(int(s) for s in rng.choice(np.arange(T[k] // 5, T[k] - 50), 4, replace=False))
    return _base(k, opt="adam", lr=warmup_cosine(ADAM[k], T[k] // 15, T[k]),
                 corrupt=dict(zip(at, ["scale", "labels", "scale", "labels"])),
                 clip=float(_pick(rng, [1.0, 5.0])), log_every=_pick(rng, [1, 1, 5]), eval_every=50)


def _overfit(k, rng):
    steps = 3 * T[k] // 2
    return _base(k, steps=steps, opt="adam", lr=warmup_cosine(ADAM[k], 50, steps, floor=0.3),
                 n_train=64 if k in TEXT else 192, label_noise=0.2, width=4 * WIDTH[k], batch=32,
                 log_every=_pick(rng, [1, 5]), eval_every=_pick(rng, [50, 100]))


def _lowlr(k, rng):
    return _base(k, opt="adam", lr=constant(ADAM[k] * 1e-4), log_every=_pick(rng, [1, 10]))


def _dead(k, rng):
    return _base(k, opt="sgd", lr=constant(SGD[k]), dead=True, log_every=_pick(rng, [1, 10]))


def _lr_to_zero(k, rng):
    return _base(k, opt="sgd", lr=step_decay(SGD[k], [int(T[k] * rng.uniform(0.2, 0.35))], 0.0),
                 clip=None, log_every=_pick(rng, [1, 5]))


def _update_ratio(k, rng):
    lr = float(rng.uniform(2.0, 4.0))
    return _base(k, opt="sgd", lr=constant(lr), clip=1.0, log_every=_pick(rng, [1, 5]))


def _lr_rising(k, rng):
    b, n = ADAM[k], T[k]
    return _base(k, opt="adam", clip=1.0, log_every=_pick(rng, [1, 5]),
                 lr=lambda t: b * (1 - 0.9 * t / (0.5 * n)) if t < n / 2
                 else b * (0.1 + 4.0 * (t - n / 2) / (n / 2)))


def _lr_jump(k, rng):
    at = int(T[k] * rng.uniform(0.4, 0.6))
    return _base(k, opt="adam", clip=1.0, log_every=_pick(rng, [1, 5]),
                 lr=piecewise(constant(ADAM[k] * 0.3), at, constant(ADAM[k] * 3)))


def _range_test(k, rng):
    return _base(k, opt="sgd", clip=None, log_every=_pick(rng, [1, 1, 10]),
                 lr=exponential(SGD[k] * 1e-3, float(rng.uniform(2e4, 1e5)), T[k]))


def _exp(opt):
    def build(k, rng):
        if opt == "sgd":
            lr = exponential(SGD[k] * 0.5, float(rng.uniform(50, 200)), T[k])
        else:
            lr = exponential(ADAM[k] * 0.3, float(rng.uniform(200, 800)), T[k])
        return _base(k, opt=opt, clip=None, lr=lr, weight_decay=0.01 if opt == "adamw" else 0.0,
                     log_every=_pick(rng, [1, 5, 10]))
    return build


def _no_warmup(k, rng):
    return _base(k, steps=800, opt="adam", clip=None, lr=constant(float(rng.uniform(0.025, 0.05))),
                 betas=(0.9, 0.98), log_every=_pick(rng, [1, 5]), eval_every=50)


def _scale_growth(k, rng):
    return _base(k, opt="sgd", clip=None, lr=constant(SGD[k] * 0.2), momentum=0.0,
                 scale_bug={"init": 1.0, "every": int(rng.integers(40, 80))},
                 log_every=_pick(rng, [1, 5]))


def _accumulate(k, rng):
    return _base(k, opt="sgd", clip=None, lr=constant(SGD[k] * float(rng.uniform(0.1, 0.3))),
                 momentum=0.0, accumulate_bug=True, log_every=_pick(rng, [1, 5]))


def _neg_wd(k, rng):
    return _base(k, opt="sgd", clip=None, lr=constant(SGD[k]), momentum=0.9,
                 neg_weight_decay=float(rng.uniform(4, 8)) / (SGD[k] * T[k]),
                 log_every=_pick(rng, [1, 5]))


def _ramp(k, rng):
    return _base(k, opt="sgd", clip=None, log_every=_pick(rng, [1, 5]),
                 lr=ramp(SGD[k] * 0.2, SGD[k] * float(rng.uniform(40, 80)), T[k], power=2.0))


def _crash_abrupt(k, rng):
    at = int(rng.integers(T[k] // 3, 2 * T[k] // 3))
    return _base(k, opt="sgd", lr=constant(SGD[k]), clip=None, corrupt={at: "huge"},
                 log_every=_pick(rng, [1, 10]))


def _lr_restart(k, rng):
    at = int(rng.integers(T[k] // 3, 2 * T[k] // 3))
    return _base(k, opt="adam", clip=None, log_every=_pick(rng, [1, 5]),
                 lr=piecewise(constant(ADAM[k]), at, constant(ADAM[k] * float(rng.uniform(30, 60)))))


def _one_point(k, rng):
    at = int(rng.integers(T[k] // 3, 2 * T[k] // 3))
    return _base(k, opt="sgd", lr=constant(SGD[k]), clip=None, log_every=_pick(rng, [1, 10]),
                 lr_mult={at: float(10 ** rng.uniform(1.5, 3.5))})


def _together(k, rng):
    at = int(rng.integers(T[k] // 3, 2 * T[k] // 3))
    return _base(k, opt="adam", lr=constant(ADAM[k]), clip=None, log_every=_pick(rng, [1, 10]),
                 corrupt={at: "scale"}, lr_mult={at: float(rng.uniform(300, 1000))})


SCENARIOS = (
    # healthy
    Scenario("healthy-cosine", "healthy", "Adam, warm-up + cosine, clipped", _healthy_cosine,
             replicates=8),
    Scenario("healthy-step", "healthy", "SGD momentum, step decay", _healthy_step, replicates=6),
    Scenario("healthy-tiny-batch", "healthy",
             "batch 1-4 on an easy task: per-step loss near zero with 3-10x single-batch jumps",
             _tiny_batch, kinds=NOT_TEXT, styles=("pytorch", "hf", "lightning", "custom"),
             replicates=8),
    Scenario("healthy-long-warmup", "healthy",
             "small init, deep, warm-up over 30-45 % of the run: the grad norm rises, then settles",
             _long_warmup, replicates=6),
    Scenario("healthy-fp16", "overflow",
             "simulated fp16 dynamic loss scaling: skipped steps with a non-finite grad norm",
             _fp16, styles=("pytorch", "hf", "lightning", "custom"), replicates=8),
    Scenario("healthy-cyclic", "healthy", "triangular cyclic learning rate", _cyclic),
    Scenario("healthy-one-cycle", "healthy", "one-cycle learning rate", _one_cycle),
    Scenario("healthy-resumed", "healthy",
             "restarted from a checkpoint: steps go back and are logged again", _resumed,
             replicates=6),
    # recovering spikes
    Scenario("tfm-spikes", "spikes", "char transformer, corrupted batches, clipped: recovering spikes",
             _tfm_spikes, kinds=("tfm",), replicates=6),
    Scenario("spikes", "spikes", "corrupted batches, clipped: recovering spikes", _spikes,
             kinds=("mlp", "reg", "cnn", "gru"), replicates=6),
    # overfit, plateaus
    Scenario("overfit", "overfit", "tiny noisy train set, wide model", _overfit, replicates=8),
    Scenario("plateau-lowlr", "plateau", "learning rate 1e4x too low", _lowlr),
    Scenario("plateau-dead", "plateau", "dead ReLUs from the start", _dead, kinds=NOT_TEXT),
    Scenario("lr-to-zero", "plateau", "a step schedule that drops to 0", _lr_to_zero),
    # optimiser misconfiguration
    Scenario("update-ratio-high", "misconfig", "SGD step far too large, clipped", _update_ratio,
             styles=("pytorch", "custom"), replicates=6),
    Scenario("lr-rising", "misconfig", "schedule decays, then climbs far above its peak", _lr_rising),
    Scenario("lr-jump", "misconfig", "learning rate jumps 10x mid-run, clipped Adam", _lr_jump),
    # divergences with a gradual precursor
    Scenario("lr-range-test", "gradual", "an LR range test left running (exponential SGD ramp)",
             _range_test, replicates=6),
    Scenario("explode-sgd-exp", "gradual", "exponential SGD learning rate", _exp("sgd")),
    Scenario("explode-adam-exp", "gradual", "exponential Adam learning rate", _exp("adam")),
    Scenario("explode-adamw-exp", "gradual", "exponential AdamW learning rate", _exp("adamw")),
    Scenario("tfm-no-warmup", "gradual", "post-LN transformer, no warm-up, high Adam LR, no clipping",
             _no_warmup, kinds=("tfm",)),
    Scenario("loss-scale-growth", "gradual", "loss scale doubles without bound and is never unscaled",
             _scale_growth),
    Scenario("grad-accumulation-bug", "gradual", "gradients accumulate without zero_grad",
             _accumulate),
    Scenario("negative-weight-decay", "gradual", "weight decay with the wrong sign", _neg_wd),
    Scenario("explode-ramp", "gradual", "quadratic SGD warm-up ramp far past the stable step",
             _ramp),
    # abrupt divergences
    Scenario("crash-abrupt", "abrupt", "one batch's loss x1e4 (loss-scaling bug), SGD",
             _crash_abrupt, replicates=6),
    Scenario("lr-restart-crash", "abrupt", "a scheduler restart multiplies the LR 30-60x",
             _lr_restart),
    Scenario("crash-one-point", "abrupt", "one step at a 30-3000x learning rate", _one_point),
    Scenario("crash-jump-together", "abrupt",
             "a corrupted batch at a 300-1000x Adam learning rate: loss and grad norm jump together",
             _together, kinds=NOT_TEXT),
    # healthy, added last: a scenario's seeds follow its place in this tuple
    Scenario("healthy-sgdr", "healthy",
             "cosine annealing with warm restarts (SGDR): the LR jumps back to its peak each period",
             _warm_restarts),
)


@dataclasses.dataclass(frozen=True)
class Planned:
    run: str
    split: str
    kind: str
    style: str
    seed: int
    scenario: Scenario


def plan(fresh: int = 0, start: int = 0) -> list[Planned]:
    """Every run of the corpus, in a fixed order.

    fresh > 0: instead, `fresh` replicates of every scenario with seeds no run of the corpus has
    (named `..._f<r>`), for a held-out look at how its measures carry over to new runs of the
    same scenarios; split by the same cells, starting from other cells than the corpus's.
    `start`: the first fresh replicate's number, so that sets generated apart (0-5, then 6-11)
    share no seed and carry on through the cells.
    """
    assert start + fresh <= 100, "replicate numbers must stay under 100 (the seeds' spacing)"
    out = []
    for si, sc in enumerate(SCENARIOS):
        cells = {"dev": [], "test": []}
        for k in sc.kinds:
            for s in sc.styles:
                cells[split_of(k, s)].append((k, s))
        assert cells["dev"] and cells["test"], sc.name
        offset = zlib.crc32(sc.name.encode()) % 97 + (1 if fresh else 0)
        for r in range(start, start + fresh) if fresh else range(sc.replicates):
            split = ("dev", "test")[r % 2]
            pool = cells[split]
            # step through the half's cells with a stride coprime to its size
            stride = next(x for x in (7, 5, 3, 2, 1) if len(pool) % x or x == 1)
            kind, style = pool[(offset + (r // 2) * stride) % len(pool)]
            seed = (_FRESH_SEEDS if fresh else 0) + 100 * si + r
            out.append(Planned(f"{sc.name}_{kind}_{style}_{'f' if fresh else 'r'}{r}", split, kind, style,
                               seed, sc))
    return out


# Seeds of the fresh replicates start here: the corpus's are 100 x scenario + replicate (< 3 100);
# replicate numbers stay under 100, so no two share a seed.
_FRESH_SEEDS = 100_000


def spec_for(p: Planned) -> RunSpec:
    rng = np.random.default_rng(p.seed)
    return RunSpec(kind=p.kind, seed=p.seed, **p.scenario.build(p.kind, rng))


def split_table() -> dict:
    return {f"{k}/{s}": split_of(k, s) for k in KINDS for s in STYLES}
