"""`key=value` pairs from run names, hostile ones included."""

from __future__ import annotations

import pytest

from tb_crash_signals.analysis.hparams import MAX_NAME, MAX_PAIRS, parse_run_name


@pytest.mark.parametrize(
    "name, values",
    [
        ("learning_rate=0.1_optimizer=Adam", {"learning_rate": 0.1, "optimizer": "Adam"}),
        ("logs/x/learning_rate=1.0_optimizer=Adadelta", {"learning_rate": 1.0, "optimizer": "Adadelta"}),
        ("lr=3e-4,bs=64", {"lr": 3e-4, "bs": 64}),
        ("lr=3e-4;bs=64&wd=0 dropout=.5", {"lr": 3e-4, "bs": 64, "wd": 0, "dropout": 0.5}),
        ("sweep/lr=0.1/seed=1", {"lr": 0.1, "seed": 1}),
        ("learning_rate=0.1_batch_size=32", {"learning_rate": 0.1, "batch_size": 32}),
        ("optimized_scheduler=Nadam_plateau_~random=2", {"optimized_scheduler": "Nadam_plateau", "~random": 2}),
        ("train_fn_3f2a1_00003_3_lr=0.0010,batch_size=32_2024-01-01_12-00-00", {"lr": 0.001, "batch_size": 32}),
        ("amp=True_compile=false", {"amp": True, "compile": False}),
        ("x=nan,y=inf,z=-2", {"x": "nan", "y": "inf", "z": -2}),
        ("a=b=c", {"a": "b=c"}),
        ("no pairs here", {}),
        ("", {}),
        (".", {}),
    ],
)
def test_pairs(name, values):
    got, _ = parse_run_name(name)
    assert got == values
    assert all(type(got[k]) is type(values[k]) for k in values)  # 1 stays int, 1.0 float


def test_known_keys_settle_underscores():
    assert parse_run_name("opt=sgd_weight_decay=0.1")[0] == {"opt": "sgd_weight", "decay": 0.1}
    assert parse_run_name("opt=sgd_weight_decay=0.1", ["weight_decay"])[0] == {"opt": "sgd", "weight_decay": 0.1}


@pytest.mark.parametrize(
    "name, problem",
    [
        ("=5", "run name: ''='5' skipped (not a key)"),
        ("lr=", "run name: 'lr' has no value"),
        ("lr=1_lr=2", "run name: 'lr' given twice; the deepest value kept"),
        ("<img src=x onerror=alert(1)>=2", None),
        ("ctl\x1b[31m=1", "run name: 'ctl\\x1b[31m'='1' skipped (not a key)"),
    ],
)
def test_hostile_names_give_problems_not_errors(name, problem):
    values, problems = parse_run_name(name)
    if problem is not None:
        assert problem in problems
    for key in values:
        assert "<" not in key and ">" not in key and "\x1b" not in key


def test_prototype_keys_are_plain_keys():
    assert parse_run_name("__proto__=1,constructor=2")[0] == {"__proto__": 1, "constructor": 2}


def test_long_names_and_many_pairs_are_bounded():
    values, problems = parse_run_name("k=1," * 1000)
    assert len(values) == 1
    values, problems = parse_run_name(",".join(f"k{i}=1" for i in range(500)))
    assert len(values) == MAX_PAIRS and any("more than" in p for p in problems)
    values, problems = parse_run_name("a=" + "x" * (10 * MAX_NAME))
    assert len(values["a"]) <= 200 and any("longer than" in p for p in problems)
