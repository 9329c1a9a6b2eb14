"""End to end on object storage: a real TensorBoard on an ``s3://`` logdir served by a local
S3-compatible server (moto, 127.0.0.1), and `scan` on the same URL.

TensorBoard reads ``s3://`` through boto3 (its Python loader; ``S3_ENDPOINT`` points it at the
server) and keeps 1000 points per tag; the tab reads every step through fsspec and finds a
one-step spike TensorBoard's sample does not hold.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.parse

import numpy as np
import pytest

from support.objectstores import s3_server
from support.plugin_harness import simple_events, write_records
from support.tbserver import get, running_tensorboard, runs_listed

SPIKE = 13337
N = 20_000
BUCKET = "tb-e2e"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def s3_logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("remote-e2e") / "logs"
    rng = np.random.default_rng(7)
    loss = 2.0 * np.exp(-np.arange(N) / 5000) + 0.1 + 0.01 * rng.standard_normal(N)
    loss[SPIKE] *= 20
    write_records(str(root / "spiky"), simple_events({"train/loss": loss}))
    write_records(str(root / "calm"), simple_events({"train/loss": 1.0 / (1 + np.arange(500))}))
    with s3_server() as server:
        server.create_bucket(BUCKET)
        server.upload_tree(root, BUCKET, "logs")
        yield server, root, f"s3://{BUCKET}/logs"


def _json(url):
    status, body = get(url, timeout=60)
    assert status == 200
    return json.loads(body)


def _scan(*args, env):
    return subprocess.run(
        [sys.executable, "-m", "tb_crash_signals", "scan", *args, "--format", "json", "--fail-on", "never"],
        capture_output=True, text=True, env=env, timeout=300,
    )


def test_tensorboard_on_s3_logdir_every_step(s3_logdir, tmp_path):
    server, root, url = s3_logdir
    # TensorBoard's own S3 setting for its boto3 loader; our fsspec reader honours it too.
    env = server.env(S3_ENDPOINT=server.endpoint)
    del env["AWS_ENDPOINT_URL"]
    log = tmp_path / "tensorboard.log"
    with running_tensorboard(url, "--load_fast=false", "--reload_interval", "2",
                             ready=runs_listed(2), env=env, log_path=log) as base:
        scalars = _json(base + "/data/plugin/scalars/scalars?" + urllib.parse.urlencode(
            {"run": "spiky", "tag": "train/loss"}))
        steps = [p[1] for p in scalars]
        assert len(steps) == 1000 and SPIKE not in steps  # TensorBoard's reservoir dropped it

        payload = _json(base + "/data/plugin/crash_signals/analysis?run=spiky")
        assert payload["sampled"] is False
        assert payload["points"]["train_loss"] == N
        spikes = [e["start_step"] for e in payload["episodes"] if e["rule"] == "loss-spike"]
        assert spikes == [SPIKE]
        runs = _json(base + "/data/plugin/crash_signals/runs")
        assert sorted((r["run"], r["sampled"]) for r in runs["runs"]) == [("calm", False), ("spiky", False)]
        assert runs["storage_error"] is None
    assert server.secret not in log.read_text(errors="replace")

    # The same URL scanned: the report of a local copy, byte for byte.
    remote = _scan(url, env=env)
    local = _scan(str(root), "--jobs", "1", env=env)
    assert remote.returncode == 0, remote.stderr
    assert remote.stdout == local.stdout
    report = json.loads(remote.stdout)
    assert [e["start_step"] for r in report["runs"] if r["run"] == "spiky"
            for e in r["episodes"] if e["rule"] == "loss-spike"] == [SPIKE]


def test_tensorboard_without_credentials_shows_why(s3_logdir, tmp_path):
    """No credentials for the plugin's reader: a banner line, TensorBoard keeps serving."""
    server, _, url = s3_logdir
    env = server.env()
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        env.pop(name)
    log = tmp_path / "tensorboard.log"
    with running_tensorboard(url, "--load_fast=false", ready=runs_listed(), env=env, log_path=log) as base:
        runs = _json(base + "/data/plugin/crash_signals/runs")
        assert "no AWS credentials found" in runs["storage_error"]
        assert "AWS_ACCESS_KEY_ID" in runs["storage_error"]
    # One warning line in TensorBoard's log, naming what to set.
    lines = [line for line in log.read_text(errors="replace").splitlines() if "crash_signals:" in line]
    assert any("no AWS credentials found" in line for line in lines), lines
