"""Ranking hyperparameters against health on synthetic sweeps with a known cause."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tb_crash_signals.analysis import sweep as S
from tb_crash_signals.analysis.hparams import assign

RATES = (0.001, 0.01, 0.1, 1.0)
OPTS = ("Adadelta", "Adagrad", "Adam", "Adamax", "Ftrl", "Nadam", "RMSprop", "SGD")
ADAPTIVE = {"Adam", "Adamax", "Nadam", "RMSprop"}


def row(name, sick, hparams, step=0, kind="divergence"):
    kinds = {kind: {"severity": "critical", "first_step": step, "crash_step": step}} if sick else {}
    return {"run": name, "health": "critical" if sick else "ok", "kinds": kinds, "hparams": hparams}


def grid(cause):
    return [
        row(f"g/lr={lr}_opt={o}", cause(lr, o), {"learning_rate": lr, "optimizer": o, "batch_size": 128})
        for lr, o in itertools.product(RATES, OPTS)
    ]


def test_rate_and_optimizer_together():
    (sweep,) = S.analyse_sweeps(grid(lambda lr, o: lr == 1.0 and o in ADAPTIVE))
    first = sweep["statements"][0]
    assert first["text"] == (
        "learning_rate=1.0 with optimizer in {Adam, Adamax, Nadam, RMSprop}: 4/4 exploded at step 0; "
        "every other run: 0/28 (learning_rate=1.0 alone: 4/8; optimizer in {Adam, Adamax, Nadam, RMSprop} alone: 4/16)"
    )
    assert first["hparams"] == ["learning_rate", "optimizer"]
    assert first["gain_over_single"] > 0.2
    assert sorted(first["runs"]) == sorted(f"g/lr=1.0_opt={o}" for o in ADAPTIVE)
    assert first["p_value"] <= 0.05
    assert sweep["constant"] == {"batch_size": 128}
    assert [h["hparam"] for h in sweep["hparams"]] == ["learning_rate", "optimizer"]
    lr = sweep["hparams"][0]
    assert [b["label"] for b in lr["buckets"]] == ["0.001", "0.01", "0.1", "1.0"]
    assert lr["buckets"][3]["health"] == {"critical": 4, "warning": 0, "ok": 4}


def test_one_cause_gives_a_single_hyperparameter_not_a_pair():
    (sweep,) = S.analyse_sweeps(grid(lambda lr, o: lr == 1.0))
    assert sweep["statements"][0]["text"] == "learning_rate=1.0: 8/8 exploded at step 0; every other run: 0/24"
    (sweep,) = S.analyse_sweeps(grid(lambda lr, o: o == "Ftrl"))
    assert sweep["statements"][0]["condition"] == "optimizer=Ftrl"


def test_ranges_and_crash_step_span():
    rows = grid(lambda lr, o: lr >= 0.1)
    for i, r in enumerate(rows):
        if r["kinds"]:
            r["kinds"]["divergence"]["crash_step"] = 10 + i
    (sweep,) = S.analyse_sweeps(rows)
    text = sweep["statements"][0]["text"]
    assert text.startswith("learning_rate ≥ 0.1: 16/16 exploded at steps 26–41; every other run: 0/16")


def test_log_buckets_for_continuous_learning_rates():
    rng = np.random.default_rng(0)
    rates = 10 ** rng.uniform(-5, 0, 40)
    rows = [row(f"r{i}", lr > 0.05, {"lr": float(lr), "seed": i}) for i, lr in enumerate(rates)]
    (sweep,) = S.analyse_sweeps(rows)
    lr = next(h for h in sweep["hparams"] if h["hparam"] == "lr")
    assert lr["scale"] == "log"
    assert [b["label"] for b in lr["buckets"]][-2:] == ["[0.01, 0.1)", "[0.1, 1)"]
    assert sweep["statements"][0]["condition"].startswith("lr ≥ 0.1")
    assert {"hparam": "seed", "reason": "a different value in most runs (an identifier?)"} not in sweep["ignored"]
    assert all("seed" not in s["hparams"] for s in sweep["statements"])


def test_identifiers_are_ignored():
    rows = [row(f"r{i}", i % 3 == 0, {"run_id": f"id{i}", "lr": 0.1 * (i % 4)}) for i in range(12)]
    (sweep,) = S.analyse_sweeps(rows)
    assert {"hparam": "run_id", "reason": "a different value in most runs (an identifier?)"} in sweep["ignored"]


def test_small_sweeps_stay_quiet():
    rows = [row(f"r{i}", i < 2, {"lr": [1.0, 1.0, 0.1, 0.01, 0.001][i]}) for i in range(5)]
    (sweep,) = S.analyse_sweeps(rows)
    assert sweep["statements"] == [] and sweep["tentative"] == []
    assert sweep["note"] == "5 analysed runs: fewer than 6, too few for statements"


def test_noise_rarely_makes_statements():
    """Outcomes drawn independently of the hyperparameters: the permutation test keeps statements rare."""
    made = 0
    for seed in range(30):
        rng = np.random.default_rng(seed)
        rows = [
            row(f"r{i}", bool(rng.random() < 0.3),
                {"lr": [1e-3, 1e-2, 1e-1][i % 3], "bs": [16, 32, 64, 128][i // 3 % 4], "opt": ["adam", "sgd"][i // 12]})
            for i in range(24)
        ]
        (sweep,) = S.analyse_sweeps(rows)
        made += bool(sweep["statements"])
    assert made <= 4, made  # alpha = 0.05 per outcome, a few outcomes per sweep


def test_uniform_outcome_is_a_note():
    rows = [row(f"r{i}", True, {"lr": [0.1, 1.0][i % 2]}) for i in range(8)]
    (sweep,) = S.analyse_sweeps(rows)
    assert sweep["statements"] == []
    assert sweep["note"] == "all 8 runs exploded at step 0: no hyperparameter separates them"


def test_unanalysed_runs_are_left_out():
    rows = grid(lambda lr, o: lr == 1.0)
    rows[0]["health"] = "pending"
    rows[1]["health"] = "no_signals"
    (sweep,) = S.analyse_sweeps(rows)
    assert sweep["analysed"] == 30
    assert [e["reason"] for e in sweep["excluded"]] == ["pending", "no_signals"]
    assert sweep["statements"][0]["text"].endswith("every other run: 0/22")


@pytest.mark.parametrize(
    "names, folders",
    [
        (["a/x", "a/y", "b/z", "b/w"], {"a/x": "a", "a/y": "a", "b/z": "b", "b/w": "b"}),
        (["s/lr=0.1/seed=1", "s/lr=1/seed=1"], {"s/lr=0.1/seed=1": "s", "s/lr=1/seed=1": "s"}),
        (["logs/n1/version_0", "logs/n2/version_0"], {"logs/n1/version_0": "logs", "logs/n2/version_0": "logs"}),
        (["x", "y"], {"x": ".", "y": "."}),
    ],
)
def test_sweep_folders(names, folders):
    assert S.sweep_folders(names) == folders


def test_outcome_from_episodes_folds_what_follows_a_divergence():
    entry = {"health": "critical", "episodes": [
        {"family": "growth", "severity": "warning", "start_step": 4},
        {"family": "overfit", "severity": "warning", "start_step": 5},
        {"family": "explosion", "severity": "critical", "start_step": 10},
        {"family": "plateau", "severity": "warning", "start_step": 12},
        {"family": "spike", "severity": "warning", "start_step": 20},
    ]}
    assert S.run_outcome(entry)["kinds"] == {
        "divergence": {"severity": "critical", "first_step": 4, "crash_step": 10},
        "overfit": {"severity": "warning", "first_step": 5, "crash_step": None},
    }


def test_outcome_from_incidents():
    entry = {"health": "critical", "episodes": [{"family": "plateau", "severity": "warning", "start_step": 1}],
             "incidents": [{"kind": "divergence", "severity": "critical", "first_alarm_step": 90, "crash_step": 120}]}
    want = {"divergence": {"severity": "critical", "first_step": 90, "crash_step": 120}}
    assert S.run_outcome(entry)["kinds"] == want


class _Dir:
    def __init__(self, tensorboard=None, yaml=None, text_args=None):
        self.tensorboard, self.yaml, self.text_args, self.skipped, self.problems = tensorboard, yaml, text_args, [], []


class _Run:
    def __init__(self, name, members=None, has_signals=True):
        self.name, self.members, self.has_signals = name, tuple(members or (name,)), has_signals


def test_assign_sources_in_order_of_trust():
    runs = [_Run("k/lr=0.5_opt=sgd", members=("k/lr=0.5_opt=sgd/train", "k/lr=0.5_opt=sgd/validation")),
            _Run("pt"), _Run("pt/1712345678.123"), _Run("light/version_0")]
    found = {
        "k/lr=0.5_opt=sgd": _Dir(tensorboard={"lr": 0.25}),  # Keras: the parent of train/ and validation/
        "pt/1712345678.123": _Dir(tensorboard={"lr": 0.1, "bs": 8.0}),  # add_hparams' child run
        "light/version_0": _Dir(tensorboard={"lr": 0.3}, yaml={"lr": 0.4, "net/depth": 3}),
    }
    got = assign(runs, found)
    assert got["k/lr=0.5_opt=sgd"].values == {"lr": 0.25, "opt": "sgd"}
    assert got["k/lr=0.5_opt=sgd"].sources == {"lr": "tensorboard", "opt": "run name"}
    assert got["pt"].values == {"lr": 0.1, "bs": 8.0} and got["pt/1712345678.123"].carrier_of == "pt"
    assert got["light/version_0"].values == {"lr": 0.3, "net/depth": 3}
    assert got["light/version_0"].sources == {"lr": "tensorboard", "net/depth": "hparams.yaml"}
    (sweep,) = S.analyse_sweeps([{**row(n, False, dict(h.values)), "carrier_of": h.carrier_of} for n, h in got.items()])
    assert "pt/1712345678.123" not in sweep["runs"]
