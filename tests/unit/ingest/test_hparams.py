"""Reading hyperparameters from event files written by the real writers, and hostile hparams.yaml files."""

from __future__ import annotations

import json
import os
import sys

import pytest
import yaml
from google.protobuf.message import DecodeError
from tensorboard.plugins.hparams import metadata as hp_metadata
from tensorboard.plugins.hparams import plugin_data_pb2
from tensorboard.plugins.hparams import summary_v2 as hp_api  # api.py imports TensorFlow (for Keras)

from support.eventwriters import write_events
from support.sweeps import hparams_event
from tb_crash_signals.ingest import hparams as ih


def test_summary_writer_add_hparams_child_run(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(log_dir=str(tmp_path / "run")) as w:
        w.add_scalar("Loss/train", 1.0, 0)
        w.add_hparams({"lr": 3e-4, "bs": 64, "opt": "adamw", "nesterov": True}, {"hparam/acc": 0.9}, run_name="hp")
    got = ih.read_dir(str(tmp_path / "run" / "hp"))
    assert got.tensorboard == {"lr": 3e-4, "bs": 64.0, "opt": "adamw", "nesterov": 1.0}  # torch writes bools as numbers
    assert got.problems == [] and got.yaml is None
    assert ih.read_dir(str(tmp_path / "run")).tensorboard is None  # add_hparams writes to the child only


def test_hparams_api_summary_protos_without_tensorflow(tmp_path):
    lr = hp_api.HParam("learning_rate", hp_api.RealInterval(1e-5, 1.0))
    opt = hp_api.HParam("optimizer", hp_api.Discrete(["adam", "sgd"]))
    write_events(tmp_path, [hparams_event({lr: 0.01, opt: "sgd", "dropout": 0.5, "amp": True})])
    got = ih.read_event_hparams(str(tmp_path))
    assert got.tensorboard == {"learning_rate": 0.01, "optimizer": "sgd", "dropout": 0.5, "amp": True}


def test_later_session_start_replaces_earlier(tmp_path):
    write_events(tmp_path, [hparams_event({"lr": 0.1, "wd": 0.0})], filename="events.out.tfevents.1.a")
    write_events(tmp_path, [hparams_event({"lr": 0.2})], filename="events.out.tfevents.2.b")
    assert ih.read_event_hparams(str(tmp_path)).tensorboard == {"lr": 0.2}


def test_corrupt_hparams_record_is_a_problem_not_a_crash(tmp_path):
    path = write_events(tmp_path, [hparams_event({"lr": 0.1, "optimizer": "adam"})])
    data = bytearray(open(path, "rb").read())
    at = data.index(b"optimizer")
    data[at : at + 3] = b"XYZ"  # the record's data CRC no longer matches
    open(path, "wb").write(bytes(data))
    got = ih.read_event_hparams(str(tmp_path))
    assert got.tensorboard is None
    assert got.problems == [f"1 corrupt hparams record skipped in {os.path.basename(path)}"]


def test_truncated_and_garbage_files(tmp_path):
    path = write_events(tmp_path, [hparams_event({"lr": 0.1})])
    data = open(path, "rb").read()
    open(path, "wb").write(data[:-7])
    open(tmp_path / "events.out.tfevents.9.junk", "wb").write(b"_hparams_/session_start_info" * 50)
    got = ih.read_event_hparams(str(tmp_path))
    assert got.tensorboard is None  # the only record is cut short


def test_hf_training_arguments_text(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    args = {"learning_rate": 5e-06, "per_device_train_batch_size": 16, "lr_scheduler_kwargs": {}, "fp16": False,
            "report_to": ["tensorboard"], "hub_token": None}
    with SummaryWriter(log_dir=str(tmp_path)) as w:
        w.add_text("args", json.dumps(args, indent=2))  # what transformers' TensorBoardCallback logs
    got = ih.read_event_hparams(str(tmp_path))
    assert got.text_args == {"learning_rate": 5e-06, "per_device_train_batch_size": 16, "fp16": False,
                             "hub_token": "None"}
    assert "text args: report_to (list)" in got.skipped


def test_plugin_content_without_session_start():
    end = plugin_data_pb2.HParamsPluginData(session_end_info=plugin_data_pb2.SessionEndInfo(status=1))
    content = hp_metadata.create_summary_metadata(end).plugin_data.content
    assert ih.from_plugin_content(content) == (None, [])
    with pytest.raises(DecodeError):
        ih.from_plugin_content(b"\xff\xff\xff")


def _yaml(tmp_path, text):
    p = tmp_path / "hparams.yaml"
    p.write_text(text, encoding="utf-8")
    return ih.read_hparams_yaml(str(p))


def test_lightning_hparams_yaml_keeps_scalars_and_constructs_nothing(tmp_path):
    import collections

    import torch

    dumped = yaml.dump({
        "lr": 0.001, "batch_size": 32, "loss_fn": torch.nn.BCEWithLogitsLoss(), "betas": (0.9, 0.999),
        "net": {"hidden": 64, "act": "relu"}, "state": collections.OrderedDict(a=1), "flag": True,
    })
    assert "!!python/object:torch.nn.modules.loss.BCEWithLogitsLoss" in dumped
    values, skipped, problems = _yaml(tmp_path, dumped)
    assert values == {"lr": 0.001, "batch_size": 32, "net/hidden": 64, "net/act": "relu", "flag": True}
    assert skipped == [
        "hparams.yaml: betas (!!python/tuple)",
        "hparams.yaml: loss_fn (!!python/object:torch.nn.modules.loss.BCEWithLogitsLoss)",
        "hparams.yaml: state (!!python/object/apply:collections.OrderedDict)",
    ]
    assert problems == []


def test_yaml_never_runs_code(tmp_path):
    marker = tmp_path / "pwned"
    text = f"lr: 0.1\nx: !!python/object/apply:os.system ['touch {marker}']\ny: !!python/name:os.system\n"
    values, skipped, problems = _yaml(tmp_path, text)
    assert not marker.exists()
    assert values == {"lr": 0.1}
    assert skipped == ["hparams.yaml: x (!!python/object/apply:os.system)", "hparams.yaml: y (!!python/name:os.system)"]


@pytest.mark.parametrize(
    "text, problem",
    [
        ("[1, 2, 3]\n", "hparams.yaml skipped: not a mapping at the top"),
        ("a: [unclosed\n", "hparams.yaml skipped: not valid YAML"),
        ("\x00\x01binary", "hparams.yaml skipped: not valid YAML"),
        ("[" * 100_000, "hparams.yaml skipped: not valid YAML"),
    ],
)
def test_bad_yaml_is_one_problem(tmp_path, text, problem):
    values, skipped, problems = _yaml(tmp_path, text)
    assert values is None and len(problems) == 1 and problems[0].startswith(problem)


def test_alias_bomb_and_recursion_are_bounded(tmp_path):
    prev = ["a"] + [f"l{i}" for i in range(19)]
    bomb = "a: &a {x: 1, y: 2, z: 3, w: 4}\n" + "".join(
        f"l{i}: &l{i} {{p: *{prev[i]}, q: *{prev[i]}}}\n" for i in range(20)
    )
    values, skipped, problems = _yaml(tmp_path, bomb)
    assert len(values) <= ih.MAX_KEYS and problems == []
    values, skipped, problems = _yaml(tmp_path, "a: &x\n  b: *x\n")
    assert values == {} and skipped == ["hparams.yaml: a/b/b/b/b/b (nested too deep)"]


def test_too_large_yaml(tmp_path):
    values, skipped, problems = _yaml(tmp_path, "a: 1\n" + "#" * (ih.MAX_YAML_BYTES + 10))
    assert values is None and problems == [f"hparams.yaml skipped: larger than {ih.MAX_YAML_BYTES} bytes"]


def test_without_pyyaml_the_file_is_skipped_and_said(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "yaml", None)  # `import yaml` now raises ImportError
    values, skipped, problems = _yaml(tmp_path, "lr: 0.1\n")
    assert values is None
    assert problems == ["hparams.yaml skipped: PyYAML is not installed (pip install 'tb-crash-signals[hparams]')"]
