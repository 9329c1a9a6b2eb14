"""`tb-crash-signals scan/rules`: output, exit codes, and files in both scalar encodings."""

import json
import os
import subprocess
import sys

import jsonschema
import numpy as np
import pytest

from support.eventwriters import write_scalars
from support.paths import DOCS, SCHEMA
from tb_crash_signals import cli
from tb_crash_signals.report.text import format_text, safe

SCHEMA = json.load(
    open(SCHEMA, encoding="utf-8")
)


def points(values, start=0, every=1):
    return [(start + i * every, float(v)) for i, v in enumerate(values)]


def healthy(n=300, seed=0):
    rng = np.random.default_rng(seed)
    return (2 * np.exp(-np.arange(n) / 60) + 0.3) * (1 + 0.01 * rng.standard_normal(n))


@pytest.fixture
def logdir(tmp_path):
    n = 300
    g = np.exp(0.05 * np.random.default_rng(1).standard_normal(n))
    bad = g.copy()
    bad[200:] = bad[200:] * np.exp(0.06 * np.arange(100))
    loss = healthy(n)
    crash = loss.copy()
    crash[280:] = np.nan
    write_scalars(tmp_path / "good", {"train/loss": points(loss), "train/grad_norm": points(g)})
    write_scalars(
        tmp_path / "sick", {"train/loss": points(crash), "train/grad_norm": points(bad)}, kind="tensor"
    )
    write_scalars(tmp_path / "jumpy", {"Loss/train": points(np.where(np.arange(n) == 150, 9.0, loss))})
    write_scalars(tmp_path / "hparams-only", {"accuracy": points([0.5, 0.6])})
    return tmp_path


def run_cli(*args, capsys):
    code = cli.main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_json_report_is_schema_valid_and_ranked(logdir, capsys):
    code, out, err = run_cli("scan", str(logdir), "--format", "json", capsys=capsys)
    report = json.loads(out)
    jsonschema.validate(report, SCHEMA)
    assert code == 1 and err == ""
    assert [r["run"] for r in report["runs"]] == ["sick", "jumpy", "good", "hparams-only"]
    assert [r["health"] for r in report["runs"]] == ["critical", "warning", "ok", "no_signals"]
    sick = report["runs"][0]
    assert sick["signals"]["grad_norm"] == {"run": "sick", "tag": "train/grad_norm"}
    assert sick["points"] == {"train_loss": 300, "grad_norm": 300}
    assert not sick["sampled"]
    growth = [e for e in sick["episodes"] if e["code"] == "CS201"]
    nan = [e for e in sick["episodes"] if e["code"] == "CS001"]
    assert growth and nan and growth[0]["start_step"] < nan[0]["start_step"] == 280
    assert sick["fits"] and sick["fits"][0]["projected_step"] > growth[0]["start_step"]
    assert report["runs"][3]["tags"] == {"hparams-only": ["accuracy"]}


def test_exit_codes_follow_fail_on(logdir, capsys):
    assert run_cli("scan", str(logdir), capsys=capsys)[0] == 1
    assert run_cli("scan", str(logdir), "--fail-on", "never", capsys=capsys)[0] == 0
    assert run_cli("scan", str(logdir), "--run", "^good$", capsys=capsys)[0] == 0
    assert run_cli("scan", str(logdir), "--run", "jumpy", capsys=capsys)[0] == 0
    assert run_cli("scan", str(logdir), "--run", "jumpy", "--fail-on", "warning", capsys=capsys)[0] == 1
    assert run_cli("scan", str(logdir), "--ignore", "CS0,CS1,CS2", capsys=capsys)[0] == 0
    assert run_cli("scan", str(logdir), "--select", "CS001", capsys=capsys)[0] == 1


@pytest.mark.parametrize(
    "args, message",
    [
        (["scan", "/nonexistent/logdir"], "not a directory"),
        (["scan", "{logdir}", "--run", "("], "invalid regex"),
        (["scan", "{logdir}", "--select", "CS999"], "matches no rule"),
        (["scan", "{logdir}", "--config", "/nonexistent.toml"], "cannot read"),
        (["scan", "{logdir}", "--format", "xml"], "invalid choice"),
        (["scan"], "required"),
        ([], ""),
    ],
)
def test_usage_and_config_errors_exit_2_with_one_line(logdir, capsys, args, message):
    args = [a.replace("{logdir}", str(logdir)) for a in args]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_bad_logdir_config_is_exit_2_naming_the_key(logdir, capsys):
    (logdir / "crash_signals.toml").write_text("[rules.loss-spike]\nzz = 1\n")
    code, out, err = run_cli("scan", str(logdir), capsys=capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "rules.loss-spike.zz" in err


def test_text_report_is_readable_and_escapes_names(tmp_path, capsys):
    hostile = "evil\x1b[31m\nname"
    write_scalars(tmp_path / hostile, {"loss": points(np.where(np.arange(100) == 60, 50.0, 1.0))})
    code, out, _ = run_cli("scan", str(tmp_path), "--fail-on", "warning", "--verbose", capsys=capsys)
    assert code == 1
    assert "\x1b" not in out and "evil\\x1b[31m\\nname" in out
    assert "CS112 loss-spike" in out and out.rstrip().endswith("1 run: 0 critical, 1 warning, 0 ok, 0 without signals")
    assert safe("a\u202eb") == "a\\u202eb"


def test_text_leads_each_run_with_its_incidents(logdir, capsys):
    code, out, _ = run_cli("scan", str(logdir), capsys=capsys)
    report = json.loads(run_cli("scan", str(logdir), "--format", "json", capsys=capsys)[1])
    sick = report["runs"][0]
    (crash,) = [i for i in sick["incidents"] if i["severity"] == "critical"]
    lines = out.splitlines()
    head = lines.index(next(line for line in lines if line.startswith("CRITICAL   sick")))
    assert "1 critical" in lines[head] and "episode" not in lines[head]
    assert crash["headline"] in lines[head + 1] and lines[head + 1].lstrip().startswith("C ")
    assert "advice: " + crash["advice"] in lines[head + 2]
    # One line of rule codes per incident, not one per episode, unless --verbose.
    assert "CS201" in lines[head + 3] and sum("CS001" in line for line in lines) == 1
    verbose = run_cli("scan", str(logdir), "--verbose", capsys=capsys)[1]
    assert sum(" CS001 nonfinite" in line for line in verbose.splitlines()) == sum(
        e["code"] == "CS001" for e in sick["episodes"])
    assert lines[-1] == "4 runs: 1 critical, 1 warning, 1 ok, 1 without signals"


def test_open_episodes_read_as_ongoing(tmp_path, capsys):
    write_scalars(tmp_path / "r", {"loss": points(np.where(np.arange(100) >= 80, np.nan, healthy(100)))})
    out = run_cli("scan", str(tmp_path), "-v", capsys=capsys)[1]
    assert "from 80, ongoing" in out and "80-…" not in out


@pytest.mark.parametrize("make, message", [
    (lambda d: None, "no TensorBoard event files under {d}"),
    (lambda d: (d / "run1").mkdir(), "no TensorBoard event files under {d}"),
    (lambda d: write_scalars(d / "run1", {"loss": points(healthy(50))}), "no run under {d} matches --run 'zzz'"),
])
def test_no_runs_is_exit_2_not_a_silent_pass(tmp_path, capsys, make, message):
    make(tmp_path)
    args = ["scan", str(tmp_path)] + (["--run", "zzz"] if "--run" in message else [])
    for fmt in ("text", "github", "json"):
        code, out, err = run_cli(*args, "--format", fmt, capsys=capsys)
        assert (code, out) == (2, "")
        assert err == f"tb-crash-signals: error: {message.format(d=tmp_path)}\n"


def test_github_format_is_one_annotation_per_incident(logdir, capsys):
    report = json.loads(run_cli("scan", str(logdir), "--format", "json", capsys=capsys)[1])
    code, out, err = run_cli("scan", str(logdir), "--format", "github", capsys=capsys)
    assert code == 1 and err == ""
    annotations = [line for line in out.splitlines() if line.startswith("::")]
    expected = [(r["run"], i) for r in report["runs"] for i in r["incidents"]]
    assert len(annotations) == len(expected)
    for line, (run, inc) in zip(annotations, expected):
        command = {"critical": "error", "warning": "warning", "info": "notice"}[inc["severity"]]
        assert line.startswith(f"::{command} title=Crash Signals%3A {inc['kind']} in {run}::run {run}, ")
        assert f"step {inc['start_step']}" in line
    assert out.splitlines()[-1] == "4 runs: 1 critical, 1 warning"
    assert run_cli("scan", str(logdir), "--format", "github", "--fail-on", "never", capsys=capsys)[0] == 0


def test_github_annotations_escape_names_per_workflow_command_rules(tmp_path, capsys):
    name = "lr=1%,b:2\n::error::forged"
    write_scalars(tmp_path / name, {"loss": points(np.where(np.arange(100) == 60, 50.0, healthy(100)))})
    code, out, _ = run_cli("scan", str(tmp_path), "--format", "github", capsys=capsys)
    (annotation,) = [line for line in out.splitlines() if line.startswith("::")]
    title, message = annotation.split("::")[1], annotation.split("::", 2)[2]
    assert title == "warning title=Crash Signals%3A spikes in lr=1%25%2Cb%3A2%0A%3A%3Aerror%3A%3Aforged"
    assert message.startswith("run lr=1%25,b:2%0A::error::forged, step 60: ")
    assert code == 0 and out.count("\n") == 2


def test_both_scalar_encodings_give_the_same_report(tmp_path, capsys):
    values = points(np.where(np.arange(200) == 120, 80.0, healthy(200)))
    write_scalars(tmp_path / "a", {"loss": values}, kind="simple")
    write_scalars(tmp_path / "b", {"loss": values}, kind="tensor")
    report = json.loads(run_cli("scan", str(tmp_path), "--format", "json", capsys=capsys)[1])
    a, b = sorted(report["runs"], key=lambda r: r["run"])
    assert a["episodes"] and [e["start_step"] for e in a["episodes"]] == [
        e["start_step"] for e in b["episodes"]
    ]


def test_restart_purges_the_superseded_steps(tmp_path, capsys):
    run = tmp_path / "restarted"
    first = points(np.where(np.arange(100) >= 80, np.nan, healthy(100)))
    write_scalars(run, {"loss": first}, filename="events.out.tfevents.1.host")
    # The run was restarted from a checkpoint at step 70 and trained on cleanly.
    write_scalars(run, {"loss": points(healthy(100)[70:], start=70)}, filename="events.out.tfevents.2.host")
    report = json.loads(run_cli("scan", str(tmp_path), "--format", "json", capsys=capsys)[1])
    (entry,) = report["runs"]
    assert entry["points"]["train_loss"] == 100
    assert not [e for e in entry["episodes"] if e["code"] == "CS001"]


def test_truncated_and_corrupt_files_are_reported_not_fatal(tmp_path, capsys):
    run = tmp_path / "broken"
    write_scalars(run, {"loss": points(healthy(100))})
    (path,) = list(run.iterdir())
    data = path.read_bytes()
    path.write_bytes(data[:-7])  # a run still writing: last record cut short
    (run / "events.out.tfevents.9.garbage").write_bytes(b"\x00\xff" * 100)
    code, out, err = run_cli("scan", str(tmp_path), "--format", "json", capsys=capsys)
    report = json.loads(out)
    assert code == 0 and "Traceback" not in err
    assert report["runs"][0]["points"]["train_loss"] == 99
    assert any("garbage" in p for p in report["problems"])


def test_keras_siblings_in_a_real_logdir(tmp_path, capsys):
    train = points(np.linspace(1.0, 0.01, 30))
    val = points(np.concatenate([np.linspace(1.0, 0.3, 12), np.linspace(0.32, 0.8, 18)]))
    write_scalars(tmp_path / "fit1" / "train", {"epoch_loss": train}, kind="tensor")
    write_scalars(tmp_path / "fit1" / "validation", {"epoch_loss": val}, kind="tensor")
    report = json.loads(run_cli("scan", str(tmp_path), "--format", "json", capsys=capsys)[1])
    (entry,) = report["runs"]
    assert entry["run"] == "fit1"
    assert entry["signals"]["val_loss"] == {"run": "fit1/validation", "tag": "epoch_loss"}
    assert {e["family"] for e in entry["episodes"]} >= {"overfit"}


def test_rules_command_and_generated_docs_are_in_step(capsys):
    code, out, _ = run_cli("rules", capsys=capsys)
    assert code == 0 and "CS201  grad-norm-growth" in out
    code, out, _ = run_cli("rules", "--format", "markdown", capsys=capsys)
    docs = os.path.join(DOCS, "rules.md")
    with open(docs, encoding="utf-8") as f:
        assert f.read() == out, "docs/rules.md is stale: tb-crash-signals rules --format markdown > docs/rules.md"


def test_console_entry_point_runs_without_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "tb_crash_signals", "scan", str(tmp_path / "missing")],
        capture_output=True, text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"tb-crash-signals: error: {tmp_path / 'missing'}: not a directory"


@pytest.mark.parametrize("headline, lead_line", [
    ("train loss climbed from step 18; train loss diverged at step 159 (flagged 141 steps early)", False),
    ("grad norm grew exponentially from step 7; grad norm exploded at step 8 (predicted 1 step early)", False),
    ("train loss diverged at step 159", True),
])
def test_text_tells_an_incidents_lead_once(headline, lead_line):
    incident = {"severity": "critical", "kind": "divergence", "start_step": 18, "end_step": 200,
                "open": True, "headline": headline, "lead_steps": 141, "advice": "", "episodes": []}
    report = {"runs": [{"run": "sick", "health": "critical", "incidents": [incident], "episodes": []}]}
    text = format_text(report)
    assert headline in text
    assert ("predicted 141 steps early" in text) == lead_line
