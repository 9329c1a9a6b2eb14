"""A real TensorBoard (its Rust data server, the default loader) serves a compacted logdir without a warning.

The data server checksums every record and logs verbosely (`--checksum -v`): on the source it warns
about the corrupt record of a run still being written; on the compacted logdir it says nothing.

    python -m pytest tests/e2e/test_compact_tensorboard.py -q
"""

from __future__ import annotations

import json
import re
import time
import urllib.parse

import pytest

from support import eventwriters as ew
from support import retention as rt
from support.tbserver import get, running_tensorboard, runs_listed
from tb_crash_signals import cli
from tb_crash_signals.ingest.reader import RunReader

COMPLAINTS = re.compile(r"\b(WARN|WARNING|ERROR)\b|Traceback|DataLoss|checksum|crc|corrupt|truncated", re.I)
STRICT = "--extra_data_server_flags=--checksum -v"


def _complaints(log) -> list[str]:
    return [line for line in log.read_text(errors="replace").splitlines() if COMPLAINTS.search(line)]


def _live_run(run_dir):
    path = ew.write_scalars(run_dir, {"Loss/train": [(s, 1.0 + 0.001 * s) for s in range(300)]})
    spans = ew.record_spans(path)
    data = bytearray(open(path, "rb").read())
    data[spans[100][1] - 6] ^= 0xFF
    data += data[spans[5][0] : spans[5][1] - 7]
    open(path, "wb").write(bytes(data))


def _json(base, path, **query):
    status, body = get(f"{base}{path}?{urllib.parse.urlencode(query)}" if query else f"{base}{path}")
    assert status == 200
    return json.loads(body)


@pytest.mark.slow
def test_tensorboard_serves_the_compacted_logdir_without_warnings(tmp_path):
    src, dst, log = tmp_path / "src", tmp_path / "dst", tmp_path / "tensorboard.log"
    rt.write_sick_run(src / "sick")
    _live_run(src / "live")
    with running_tensorboard(src, STRICT, ready=runs_listed(2), log_path=str(tmp_path / "source.log")):
        time.sleep(2)
    assert any("Read error" in line for line in _complaints(tmp_path / "source.log"))  # the check can fail
    assert cli.main(["compact", str(src), str(dst), "--keep-last", "50", "--every", "10"]) == 0
    with running_tensorboard(dst, STRICT, ready=runs_listed(2), log_path=str(log)) as base:
        deadline = time.time() + 60
        while True:  # the data server loads in the background
            tags = _json(base, "/data/plugin/scalars/tags").get("sick", {})
            if len(tags) == 4 or time.time() > deadline:
                break
            time.sleep(0.5)
        assert sorted(tags) == ["train/grad_norm", "train/learning_rate", "train/loss", "val/loss"]
        loss = _json(base, "/data/plugin/scalars/scalars", run="sick", tag="train/loss")
        steps = [row[1] for row in loss]
        assert steps == sorted(set(steps)) and steps[-1] == rt.STEPS - 1  # no step twice: the purge is applied
        hist = _json(base, "/data/plugin/histograms/histograms", run="sick", tag="weights/layer1")
        assert [h[1] for h in hist] == [0, 500, 1000, 1500, 2000, 2500, 3000, 3500]
        live = _json(base, "/data/plugin/scalars/scalars", run="live", tag="Loss/train")
        kept = RunReader(str(dst / "live"))
        kept.reload()
        assert [row[1] for row in live] == kept.series("Loss/train").steps.tolist()  # read to the end
        ours = _json(base, "/data/plugin/crash_signals/runs")
        assert {r["run"]: r["health"] for r in ours["runs"]}["sick"] == "critical"
        time.sleep(1)
    assert "Finished load cycle" in log.read_text()  # the verbose data server's log
    assert _complaints(log) == []
