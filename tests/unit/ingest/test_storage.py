"""The storage layer: redaction, error messages, and the fsspec storage on fsspec's in-memory
filesystem (``memory://``: the same code path as S3 or GCS, without a server)."""

from __future__ import annotations

import math
import os
import uuid

import fsspec
import pytest

from support import eventwriters as ew
from tb_crash_signals.ingest.reader import LogdirSource, RunReader
from tb_crash_signals.ingest.redact import redact
from tb_crash_signals.ingest.remote import FsspecStorage, translate
from tb_crash_signals.ingest.storage import LOCAL, StorageError, is_url, storage_for


def pts(n, start=0):
    return [(start + i, float(i) * 0.5) for i in range(n)]


@pytest.fixture
def memroot():
    root = f"memory://bucket-{uuid.uuid4().hex[:8]}/logs"
    yield root
    fs = fsspec.filesystem("memory")
    if fs.exists(root):
        fs.rm(root, recursive=True)


def put(url, data: bytes):
    with fsspec.open(url, "wb") as f:
        f.write(data)


def upload(local_dir, url):
    for dirpath, _, files in os.walk(local_dir):
        for name in files:
            rel = os.path.relpath(os.path.join(dirpath, name), local_dir).replace(os.sep, "/")
            with open(os.path.join(dirpath, name), "rb") as f:
                put(f"{url}/{rel}", f.read())


# -- redaction ----------------------------------------------------------------------


@pytest.mark.parametrize("text, secret", [
    ("https://user:hunter2pass@host/x", "hunter2pass"),
    ("GET https://b.s3.amazonaws.com/k?X-Amz-Signature=abcdef0123&X-Amz-Credential=AKIA", "abcdef0123"),
    ("failed: Signature=deadbeefcafe, retry", "deadbeefcafe"),
    ("key AKIAIOSFODNN7EXAMPLE was refused", "AKIAIOSFODNN7EXAMPLE"),
    ("Authorization: Bearer ya29.a0AfH6SMBtoken", "a0AfH6SMBtoken"),
    ("az://c/p?sv=2020&sig=s3cr3tsig", "s3cr3tsig"),
])
def test_redact_removes_credentials_keeps_the_place(text, secret):
    out = redact(text)
    assert secret not in out
    assert "…" in out


def test_redact_removes_secret_variables_values(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG")
    assert redact("the server said wJalrXUtnFEMI/K7MDENG is wrong") == "the server said … is wrong"
    assert redact("s3://bucket/logs/run") == "s3://bucket/logs/run"


# -- error messages -----------------------------------------------------------------


def test_missing_backend_names_the_package_and_extra():
    err = translate(ImportError("Install s3fs to access S3"), "s3://b/logs", "s3")
    assert err.kind == "backend" and err.fatal
    assert str(err) == "s3://b/logs: reading s3:// needs the s3fs package: pip install 'tb-crash-signals[s3]'"
    err = translate(ValueError("Protocol not known: zz"), "zz://b", "zz")
    assert err.kind == "backend" and "no fsspec backend is installed for zz://" in str(err)


def test_refused_and_missing_credentials_name_the_settings():
    import botocore.exceptions

    err = translate(botocore.exceptions.NoCredentialsError(), "s3://b/x", "s3")
    assert err.kind == "credentials" and "AWS_ACCESS_KEY_ID" in str(err) and "AWS_SECRET_ACCESS_KEY" in str(err)
    client_error = botocore.exceptions.ClientError(
        {"Error": {"Code": "InvalidAccessKeyId", "Message": "key AKIAABCDEFGHIJKLMNOP unknown"}}, "ListObjectsV2")
    wrapped = PermissionError("The AWS Access Key Id AKIAABCDEFGHIJKLMNOP you provided does not exist")
    wrapped.__cause__ = client_error
    err = translate(wrapped, "s3://b/x", "s3")
    assert err.kind == "credentials" and "(InvalidAccessKeyId)" in str(err)
    assert "AKIAABCDEFGHIJKLMNOP" not in str(err)


def test_storage_errors_survive_pickling():
    import pickle

    err = pickle.loads(pickle.dumps(StorageError("s3://b: no such bucket", "not_found")))
    assert str(err) == "s3://b: no such bucket" and err.kind == "not_found" and err.strerror == str(err)


def test_urls_and_local_paths():
    assert is_url("s3://b/x") and is_url("gs://b") and not is_url("/tmp/x") and not is_url("C:\\x")
    assert storage_for("/tmp/x") is LOCAL and storage_for("file:///tmp/x") is LOCAL
    assert storage_for("s3://b/x").remote


# -- the fsspec storage over memory:// ------------------------------------------------


def test_remote_logdir_reads_like_a_local_copy(tmp_path, memroot):
    local = tmp_path / "logs"
    ew.write_scalars(local / "a", {"loss": pts(40), "lr": pts(40)})
    ew.write_scalars(local / "b" / "c", {"loss": pts(7, start=3)})
    ew.write_scalars(local, {"top": pts(2)})
    upload(local, memroot)
    want, got = LogdirSource(str(local)), LogdirSource(memroot)
    want.reload()
    got.reload()
    assert got.runs() == want.runs() == [".", "a", "b/c"]
    for run in want.runs():
        assert got.reader(run).tags() == want.reader(run).tags()
        for tag in want.reader(run).tags():
            w, g = want.series(run, tag), got.series(run, tag)
            assert g.steps.tolist() == w.steps.tolist() and g.values.tolist() == w.values.tolist()
            assert g.wall_times.tolist() == w.wall_times.tolist()
    assert got.problems() == want.problems() == []
    # One listing served every run's questions.
    assert got.storage.counters["listings"] == 1


def test_growing_remote_file_fetches_only_appended_bytes(tmp_path, memroot):
    src = ew.write_scalars(tmp_path / "src", {"loss": pts(30)})
    blob = open(src, "rb").read()
    last_start, last_end = ew.record_spans(src)[-1]
    url = f"{memroot}/run/events.out.tfevents.1"
    storage = FsspecStorage(memroot, listing_interval=1e-9)
    reader = RunReader(f"{memroot}/run", storage=storage)
    cut = last_start + 9  # inside the last record: a truncated tail
    put(url, blob[:cut])
    assert reader.reload()
    assert len(reader.series("loss")) == 29 and reader.stats.truncated_tail
    assert storage.counters["bytes_requested"] == cut
    put(url, blob)  # the object rewritten longer, as a sync tool does
    assert reader.reload()
    assert storage.counters["bytes_requested"] == len(blob)  # each byte fetched once
    assert len(reader.series("loss")) == 30 and not reader.stats.truncated_tail
    assert reader.stats.corrupt_records == 0
    assert not reader.reload()  # nothing new: nothing fetched
    assert storage.counters["bytes_requested"] == len(blob)


def test_listing_is_reused_for_its_interval(tmp_path, memroot):
    ew.write_scalars(tmp_path / "l" / "a", {"loss": pts(3)})
    upload(tmp_path / "l", memroot)
    storage = FsspecStorage(memroot, listing_interval=math.inf)
    for _ in range(3):
        assert storage.run_dirs(memroot) == ["a"]
        assert storage.event_files(f"{memroot}/a")
    assert storage.counters["listings"] == 1
    ew.write_scalars(tmp_path / "l2" / "b", {"loss": pts(3)})
    upload(tmp_path / "l2", memroot)
    assert storage.run_dirs(memroot) == ["a"]  # not listed again within the interval
    fresh = FsspecStorage(memroot, listing_interval=1e-9)
    assert fresh.run_dirs(memroot) == ["a", "b"]


def test_missing_remote_logdir_is_a_problem_not_an_exception(memroot):
    src = LogdirSource(f"{memroot}/nothing-here")
    assert src.reload() is False
    assert src.problems() == [f"logdir {memroot}/nothing-here is not a readable directory"]


def test_portable_storage_pickles_only_its_runs(tmp_path, memroot):
    import pickle

    for name in ("a", "b", "c"):
        ew.write_scalars(tmp_path / "l" / name, {"loss": pts(3)})
    upload(tmp_path / "l", memroot)
    storage = FsspecStorage(memroot)
    part = pickle.loads(pickle.dumps(storage.portable([f"{memroot}/b"])))
    assert part.run_dirs(memroot) == ["b"]
    assert part.counters["listings"] == 0
    reader = RunReader(f"{memroot}/b", storage=part)
    assert reader.reload() and reader.tags() == ["loss"]
    assert part.counters["listings"] == 0  # read from the listing it carried


class _Recording(type(LOCAL)):
    """The local filesystem, recording every read."""

    def __init__(self):
        self.reads = []

    def read(self, path, offset, length):
        self.reads.append((path, offset, length))
        return super().read(path, offset, length)


def test_planned_reads_are_the_first_reads_of_each_reload(tmp_path):
    src = ew.write_scalars(tmp_path / "src", {"loss": pts(300)}, filename="events.out.tfevents.1")
    blob, spans = open(src, "rb").read(), ew.record_spans(src)
    run = tmp_path / "run"
    run.mkdir()
    target = run / "events.out.tfevents.1"
    storage = _Recording()
    reader = RunReader(str(run), storage=storage)
    for cut in (spans[40][0] + 7, spans[200][1], len(blob), len(blob)):  # a truncated tail, then no change
        target.write_bytes(blob[:cut])
        planned = reader.planned_reads()
        storage.reads.clear()
        reader.reload()
        assert planned == storage.reads[:1]
    assert len(reader.series("loss")) == 300 and reader.stats.bytes_read == len(blob)
