"""Remote logdirs against real servers started here on 127.0.0.1: moto's S3 server and a GCS
emulator. Event files are TensorBoard's own writer's; every result is compared with the same
files read from a local copy."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from support import eventwriters as ew
from support.objectstores import gcs_server, s3_server
from tb_crash_signals.ingest.reader import LogdirSource, RunReader
from tb_crash_signals.ingest.storage import StorageError, storage_for

pytestmark = pytest.mark.slow
EVENTS = "events.out.tfevents.1700000000.host"


def pts(n, start=0, spike=None):
    return [(start + i, 50.0 if i == spike else 1.0 / (1 + start + i)) for i in range(n)]


@pytest.fixture(scope="module")
def local_logs(tmp_path_factory):
    root = tmp_path_factory.mktemp("remote") / "logs"
    ew.write_scalars(root / "spiky", {"train/loss": pts(400, spike=250)}, filename=EVENTS)
    ew.write_scalars(root / "keras" / "train", {"epoch_loss": pts(30)}, filename=EVENTS)
    ew.write_scalars(root / "keras" / "validation", {"epoch_loss": pts(30)}, filename=EVENTS)
    ew.write_scalars(root / "calm", {"train/loss": pts(300), "train/grad_norm": pts(300)}, filename=EVENTS)
    (root / "crash_signals.toml").write_text('ignore = ["CS2"]\n')
    return root


@pytest.fixture(scope="module")
def s3(local_logs):
    with s3_server() as server:
        server.create_bucket("logs-bucket")
        server.upload_tree(local_logs, "logs-bucket", "exp")
        yield server


@pytest.fixture(scope="module")
def gcs(local_logs):
    with gcs_server() as server:
        server.create_bucket("gcs-bucket")
        server.upload_tree(local_logs, "gcs-bucket", "exp")
        yield server


@pytest.fixture
def env_of(monkeypatch):
    """Makes a server's client settings this process's environment (and only those)."""

    def use(env):
        for k in list(os.environ):
            if k.startswith(("AWS_", "S3_", "GOOGLE_", "STORAGE_EMULATOR")):
                monkeypatch.delenv(k)
        for k, v in env.items():
            monkeypatch.setenv(k, v)

    return use


def cli(*args, env):
    return subprocess.run([sys.executable, "-m", "tb_crash_signals", *args], capture_output=True, text=True,
                          env=env, timeout=300)


def scan_json(target, *args, env):
    r = cli("scan", target, "--format", "json", "--fail-on", "never", *args, env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_s3_scan_equals_local_scan_byte_for_byte(s3, local_logs):
    env = s3.env()
    local = scan_json(str(local_logs), "--jobs", "1", env=env)
    assert scan_json("s3://logs-bucket/exp", "--jobs", "1", env=env) == local
    assert scan_json("s3://logs-bucket/exp/", "--jobs", "2", env=env) == local
    report = json.loads(local)
    assert {r["run"] for r in report["runs"]} == {"spiky", "keras", "calm"}  # keras: one logical run
    assert not any(e["code"].startswith("CS2") for r in report["runs"] for e in r["episodes"])


def test_s3_endpoint_from_tensorboards_variable(s3, local_logs):
    env = s3.env(S3_ENDPOINT=s3.endpoint.replace("http://", ""), S3_USE_HTTPS="0")
    del env["AWS_ENDPOINT_URL"]
    assert scan_json("s3://logs-bucket/exp", env=env) == scan_json(str(local_logs), env=env)


def test_gcs_scan_equals_local_scan(gcs, local_logs):
    env = gcs.env()
    assert scan_json("gs://gcs-bucket/exp", env=env) == scan_json(str(local_logs), env=env)


@pytest.mark.parametrize("target, message", [
    ("s3://no-such-bucket/exp", "s3://no-such-bucket/exp: no such bucket"),
    ("s3://logs-bucket/typo", "s3://logs-bucket/typo: no such directory (nothing is stored under it)"),
])
def test_s3_missing_bucket_or_prefix_is_one_line(s3, target, message):
    r = cli("scan", target, env=s3.env())
    assert r.returncode == 2
    assert r.stderr == f"tb-crash-signals: error: {message}\n"


def test_gcs_missing_bucket_is_one_line(gcs):
    r = cli("scan", "gs://no-such-bucket/exp", env=gcs.env())
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "gs://no-such-bucket/exp: no such bucket" in r.stderr


def test_missing_credentials_name_the_settings_never_the_secret(s3):
    env = s3.env()
    del env["AWS_SECRET_ACCESS_KEY"], env["AWS_ACCESS_KEY_ID"]
    r = cli("scan", "s3://logs-bucket/exp", env=env)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY" in r.stderr
    google = {k: v for k, v in env.items() if k != "AWS_ENDPOINT_URL"}
    r = cli("scan", "gs://gcs-bucket/exp", env=google)  # no ADC, no emulator, no metadata server
    assert r.returncode == 2 and "no usable Google credentials: set GOOGLE_APPLICATION_CREDENTIALS" in r.stderr


def test_wrong_credentials_are_refused_and_never_printed():
    with s3_server(auth=True) as server:
        server.create_bucket("locked-bucket")
        wrong_key = dict(server.env(), AWS_ACCESS_KEY_ID="AKIA" + "Z" * 16)
        wrong_secret = dict(server.env(), AWS_SECRET_ACCESS_KEY="not-" + server.secret)
        for env, code in ((wrong_key, "InvalidAccessKeyId"), (wrong_secret, "SignatureDoesNotMatch")):
            r = cli("scan", "s3://locked-bucket/exp", env=env)
            assert r.returncode == 2 and r.stderr.count("\n") == 1
            assert f"the credentials were refused ({code})" in r.stderr
            for secret in (env["AWS_SECRET_ACCESS_KEY"], env["AWS_ACCESS_KEY_ID"], server.secret):
                assert secret not in r.stderr + r.stdout


@pytest.mark.parametrize("store", ["s3", "gcs"])
def test_file_growing_while_read_fetches_only_appended_bytes(request, store, tmp_path, env_of):
    server = request.getfixturevalue(store)
    env_of(server.env())
    bucket = "logs-bucket" if store == "s3" else "gcs-bucket"
    scheme = "s3" if store == "s3" else "gs"
    src = ew.write_scalars(tmp_path / "src", {"train/loss": pts(200)}, filename=EVENTS)
    blob = open(src, "rb").read()
    spans = ew.record_spans(src)
    key = f"grow-{store}/run/{EVENTS}"
    storage = storage_for(f"{scheme}://{bucket}/grow-{store}", listing_interval=1e-6)
    reader = RunReader(f"{scheme}://{bucket}/grow-{store}/run", storage=storage)
    cuts = [spans[50][0] + 5, spans[120][1], spans[-1][0] + 20, len(blob)]  # two truncated tails
    seen = 0
    for cut in cuts:
        server.put(bucket, key, blob[:cut])
        reader.reload()
        assert storage.counters["bytes_requested"] == cut  # every byte fetched once
        n = len(reader.series("train/loss"))
        assert n >= seen
        seen = n
    local = RunReader(str(tmp_path / "src"))
    local.reload()
    got, want = reader.series("train/loss"), local.series("train/loss")
    assert got.steps.tolist() == want.steps.tolist() and got.values.tolist() == want.values.tolist()
    assert not reader.stats.truncated_tail and reader.stats.corrupt_records == 0 and reader.problems() == []


def test_logdir_reads_are_prefetched_and_only_appended_bytes_fetched(s3, tmp_path, env_of):
    env_of(s3.env())
    blobs = {}
    for i in range(12):  # more runs than are fetched ahead
        src = ew.write_scalars(tmp_path / f"r{i:02d}", {"train/loss": pts(150 + i, spike=i)}, filename=EVENTS)
        blobs[f"r{i:02d}"] = (open(src, "rb").read(), ew.record_spans(src))
    for run, (blob, spans) in blobs.items():
        s3.put("logs-bucket", f"ahead/{run}/{EVENTS}", blob[:spans[100][1]])
    storage = storage_for("s3://logs-bucket/ahead", listing_interval=1e-6)
    source = LogdirSource("s3://logs-bucket/ahead", storage=storage)
    source.reload()
    cold = sum(spans[100][1] for _, spans in blobs.values())
    assert storage.counters["bytes_requested"] == cold
    assert storage.counters["prefetched"] == storage.counters["reads"] == 12  # one ranged GET per run
    for run, (blob, _) in blobs.items():
        s3.put("logs-bucket", f"ahead/{run}/{EVENTS}", blob)
    source.reload()
    assert storage.counters["bytes_requested"] == sum(len(b) for b, _ in blobs.values())  # each byte once
    assert storage.counters["prefetched"] == storage.counters["reads"] == 24
    local = LogdirSource(str(tmp_path))
    local.reload()
    assert source.runs() == local.runs() and source.problems() == [] == local.problems()
    for run in local.runs():
        got, want = source.series(run, "train/loss"), local.series(run, "train/loss")
        assert got.steps.tolist() == want.steps.tolist() and got.values.tolist() == want.values.tolist()


def test_a_prefetch_of_a_file_that_grew_since_is_not_used(s3, tmp_path, env_of):
    env_of(s3.env())
    src = ew.write_scalars(tmp_path / "src", {"train/loss": pts(100)}, filename=EVENTS)
    blob = open(src, "rb").read()
    s3.put("logs-bucket", f"stale/run/{EVENTS}", blob[:100])
    storage = storage_for("s3://logs-bucket/stale")
    path = f"s3://logs-bucket/stale/run/{EVENTS}"
    storage.prefetch([(path, 0, 100)])
    s3.put("logs-bucket", f"stale/run/{EVENTS}", blob)
    assert storage.read(path, 0, len(blob)) == blob  # another range: fetched now, the old one dropped
    assert storage.read(path, 0, 100) == blob[:100]
    assert storage.counters["prefetched"] == 0 and storage.counters["reads"] == 3
    missing = f"s3://logs-bucket/stale/gone/{EVENTS}"
    storage.prefetch([(missing, 0, 10)])
    with pytest.raises(StorageError) as err:  # a failed prefetch fails the read, as a read would
        storage.read(missing, 0, 10)
    assert err.value.kind == "not_found" and s3.secret not in str(err.value)


def test_remote_source_problems_are_safe(s3, env_of):
    env_of(dict(s3.env(), AWS_ACCESS_KEY_ID="", AWS_SECRET_ACCESS_KEY=""))
    src = LogdirSource("s3://logs-bucket/exp")
    assert src.reload() is False
    (problem,) = src.problems()
    assert problem.startswith("cannot list logdir: s3://logs-bucket/exp: no AWS credentials found")


def test_dask_cluster_report_equals_local_scan(local_logs, monkeypatch):
    import distributed

    from tb_crash_signals.executors import DaskExecutor
    from tb_crash_signals.scan import scan_logdir

    want = scan_logdir(str(local_logs))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster:
        with DaskExecutor(cluster.scheduler_address) as executor:
            assert executor.workers == 2
            got = scan_logdir(str(local_logs), executor=executor)
    assert json.dumps(got) == json.dumps(want)
