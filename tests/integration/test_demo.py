"""The demo logs: real numpy training runs, one crash story each.

Generates every run once into a temp dir (~15 s), then checks each story on
the RAW scalars read back from the event files (no engine involved), the tag
styles, determinism and size.
"""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest
from tensorboard.compat.proto import event_pb2

from tb_crash_signals import demo
from tb_crash_signals.demo import runs as demo_runs

RUNS = [
    "hf/healthy",
    "custom/healthy",
    "lightning/grad-explosion",
    "pytorch/abrupt-nan",
    "pytorch/loss-spikes",
    "lightning/plateau",
    "custom/lr-too-high",
    "keras/overfit/train",
    "keras/overfit/validation",
]

# ---------------------------------------------------------------------------
# What the analysis must find in each (logical) run: families from DESIGN §5.
# Healthy runs: no critical episode at all (warnings at most rare).
# ---------------------------------------------------------------------------
EXPECTED = {
    "hf/healthy": set(),
    "custom/healthy": set(),
    "lightning/grad-explosion": {"growth", "explosion", "nonfinite", "divergence"},
    "pytorch/abrupt-nan": {"nonfinite"},
    "pytorch/loss-spikes": {"spike"},
    "keras/overfit": {"overfit"},
    "lightning/plateau": {"plateau", "stagnation"},
    "custom/lr-too-high": {"optimizer"},
}
HEALTHY = {"hf/healthy", "custom/healthy"}


# ---------------------------------------------------------------------------
# Reading event files (TFRecord framing + Event protos; CRCs not checked)
# ---------------------------------------------------------------------------


def _events(path):
    with open(path, "rb") as f:
        data = f.read()
    off = 0
    while off + 12 <= len(data):
        (n,) = struct.unpack("<Q", data[off : off + 8])
        yield event_pb2.Event.FromString(data[off + 12 : off + 12 + n])
        off += 12 + n + 4
    assert off == len(data), f"{path}: trailing bytes"


def read_run(run_dir):
    """{tag: (steps int64[], values float64[], kinds set)} for one run directory."""
    files = [f for f in os.listdir(run_dir) if "tfevents" in f]
    assert len(files) == 1, f"{run_dir}: {files}"
    out = {}
    for ev in _events(os.path.join(run_dir, files[0])):
        for v in ev.summary.value:
            if v.HasField("simple_value"):
                val, kind = v.simple_value, "simple"
            else:
                assert v.tensor.dtype == 1 and len(v.tensor.float_val) == 1  # DT_FLOAT
                assert v.metadata.plugin_data.plugin_name == "scalars"
                val, kind = v.tensor.float_val[0], "tensor"
            steps, vals, kinds = out.setdefault(v.tag, ([], [], set()))
            steps.append(ev.step)
            vals.append(val)
            kinds.add(kind)
    return {
        t: (np.asarray(s, np.int64), np.asarray(v, np.float64), k)
        for t, (s, v, k) in out.items()
    }


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("demo"))
    names = demo.generate(root)
    assert names == RUNS
    return root


@pytest.fixture(scope="module")
def scalars(logdir):
    return {r: read_run(os.path.join(logdir, *r.split("/"))) for r in RUNS}


def series(scalars, run, tag):
    steps, values, _ = scalars[run][tag]
    assert np.all(np.diff(steps) > 0), f"{run}/{tag}: steps not increasing"
    return steps, values


# ---------------------------------------------------------------------------
# Layout, styles, determinism, size
# ---------------------------------------------------------------------------

STYLE_TAGS = {
    "hf/healthy": {"train/loss", "train/grad_norm", "train/learning_rate", "eval/loss"},
    "custom/healthy": {"loss/train", "loss/val", "optim/grad_global_norm",
                       "optim/update_ratio", "optim/lr"},
    "custom/lr-too-high": {"loss/train", "loss/val", "optim/grad_global_norm",
                           "optim/update_ratio", "optim/lr"},
    "lightning/grad-explosion": {"train_loss", "val_loss", "lr-SGD", "grad_2.0_norm_total"},
    "lightning/plateau": {"train_loss", "val_loss", "lr-Adam", "grad_norm"},
    "pytorch/abrupt-nan": {"Loss/train", "Loss/val", "Grad/norm", "LR"},
    "pytorch/loss-spikes": {"Loss/train", "Loss/val", "Grad/norm", "LR"},
    "keras/overfit/train": {"batch_loss", "epoch_loss", "epoch_learning_rate"},
    "keras/overfit/validation": {"epoch_loss"},
}


def test_every_run_has_its_style_tags(scalars):
    for run, tags in STYLE_TAGS.items():
        assert tags <= set(scalars[run]), (run, sorted(scalars[run]))
        kinds = set().union(*(k for _, _, k in scalars[run].values()))
        assert kinds == ({"tensor"} if run.startswith("keras/") else {"simple"}), run


def test_logging_cadence(scalars):
    # loss and grad norm every step, update ratio every 10, val every N steps
    s, _ = series(scalars, "custom/healthy", "loss/train")
    assert np.array_equal(s, np.arange(1500))
    s, _ = series(scalars, "custom/healthy", "optim/update_ratio")
    assert np.array_equal(s, np.arange(0, 1500, 10))
    s, _ = series(scalars, "hf/healthy", "train/loss")
    assert s[0] == 1  # HF logs global_step after the update
    s, _ = series(scalars, "hf/healthy", "eval/loss")
    assert np.array_equal(s, np.arange(100, 1501, 100))
    # Keras: epoch summaries at the 0-based epoch, batch ones at the global batch
    s, _ = series(scalars, "keras/overfit/train", "epoch_loss")
    assert np.array_equal(s, np.arange(100))
    s2, _ = series(scalars, "keras/overfit/validation", "epoch_loss")
    assert np.array_equal(s2, s)
    s, _ = series(scalars, "keras/overfit/train", "batch_loss")
    assert np.array_equal(s, np.arange(1, 801))


def test_deterministic_and_regeneration_replaces_files(logdir, scalars, tmp_path):
    # A second generation of one run (cheap) gives the same scalars, bit for bit.
    assert demo.main([str(tmp_path), "--run", "pytorch/abrupt-nan"]) == 0
    again = read_run(os.path.join(tmp_path, "pytorch", "abrupt-nan"))
    first = scalars["pytorch/abrupt-nan"]
    assert set(again) == set(first)
    for tag in first:
        assert np.array_equal(again[tag][0], first[tag][0]), tag
        assert np.array_equal(again[tag][1], first[tag][1], equal_nan=True), tag
    # Regenerating into the same directory leaves one event file per run.
    assert demo.main([str(tmp_path), "--run", "pytorch/abrupt-nan"]) == 0
    read_run(os.path.join(tmp_path, "pytorch", "abrupt-nan"))  # asserts a single file


def test_size(logdir):
    total = sum(
        os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(logdir) for f in files
    )
    assert total <= 5 * 1024 * 1024


# ---------------------------------------------------------------------------
# The stories, on raw scalars
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "run,loss_tag,val_tag,grad_tag",
    [
        ("hf/healthy", "train/loss", "eval/loss", "train/grad_norm"),
        ("custom/healthy", "loss/train", "loss/val", "optim/grad_global_norm"),
    ],
)
def test_healthy(scalars, run, loss_tag, val_tag, grad_tag):
    for tag, (_, values, _) in scalars[run].items():
        assert np.all(np.isfinite(values)), (run, tag)
    _, loss = series(scalars, run, loss_tag)
    _, val = series(scalars, run, val_tag)
    _, grad = series(scalars, run, grad_tag)
    assert loss[-200:].mean() < 0.6 * loss[:50].mean()
    assert loss[-200:].mean() < loss[200:400].mean()  # still improving late
    assert val[-1] < val[0] and val[-1] <= val.min() * 1.02
    assert grad.max() < 10
    if run == "custom/healthy":
        _, ratio = series(scalars, run, "optim/update_ratio")
        assert ratio.max() < 1e-2


def test_grad_explosion(scalars):
    run = "lightning/grad-explosion"
    steps, grad = series(scalars, run, "grad_2.0_norm_total")
    lsteps, loss = series(scalars, run, "train_loss")
    _, lr = series(scalars, run, "lr-SGD")
    assert np.all(np.diff(lr) > 0)  # still warming up
    cross = int(np.argmax(grad > 100))
    assert grad[cross] > 100 and np.all(np.isfinite(grad[:cross]))
    nan_at = int(np.argmax(np.isnan(loss)))
    assert np.isnan(loss[nan_at]) and lsteps[nan_at] > steps[cross] + 50
    assert np.all(np.isfinite(loss[:cross]))
    # Visible exponential growth for >= 50 steps before the crossing: a
    # log-linear fit over the 60 steps before it grows with a good fit, from
    # well below the threshold.
    window = slice(cross - 60, cross)
    assert grad[window][:5].max() < 20
    x, y = steps[window].astype(float), np.log(grad[window])
    slope, icpt = np.polyfit(x, y, 1)
    r2 = 1 - np.sum((y - (slope * x + icpt)) ** 2) / np.sum((y - y.mean()) ** 2)
    assert 0.02 < slope < 0.1 and r2 > 0.8, (slope, r2)
    # before the trouble the run looked healthy
    assert loss[cross - 100] < 0.3 * loss[:50].mean()


def test_abrupt_nan(scalars):
    run = "pytorch/abrupt-nan"
    steps, loss = series(scalars, run, "Loss/train")
    _, grad = series(scalars, run, "Grad/norm")
    _, val = series(scalars, run, "Loss/val")
    bad = int(np.argmax(~np.isfinite(loss)))
    assert steps[bad] == 1137
    assert np.all(np.isnan(loss[bad:])) and np.all(np.isnan(grad[bad:]))
    before = grad[bad - 100 : bad]
    assert np.all(np.isfinite(before)) and before.max() < 3 * np.median(before) < 10
    assert before[-10:].max() < 3 * np.median(before)  # no precursor
    assert np.isnan(val[-1]) and np.all(np.isfinite(val[:-1]))


def test_loss_spikes(scalars):
    run = "pytorch/loss-spikes"
    steps, loss = series(scalars, run, "Loss/train")
    assert np.all(np.isfinite(loss))
    ratio = np.ones_like(loss)
    for i in range(50, len(loss)):
        ratio[i] = loss[i] / np.median(loss[i - 50 : i])
    spikes = sorted(demo_runs.LOSS_SPIKE_STEPS)
    assert sorted(steps[np.argsort(ratio)[-4:]].tolist()) == spikes
    for s in spikes:
        i = int(np.searchsorted(steps, s))
        base = np.median(loss[i - 50 : i])
        assert ratio[i] > 2.5
        assert np.median(loss[i + 20 : i + 60]) < 1.4 * base  # recovered
    _, val = series(scalars, run, "Loss/val")
    assert val[-1] == val.min()


def test_overfit(scalars):
    _, train = series(scalars, "keras/overfit/train", "epoch_loss")
    _, val = series(scalars, "keras/overfit/validation", "epoch_loss")
    best = int(np.argmin(val))
    assert best < len(val) // 2
    assert val[-1] >= 1.1 * val[best]
    assert train[-1] < 0.1 and train[-1] < train[best] / 5
    assert np.all(np.diff(train[best:][::10]) < 0)  # train keeps falling
    _, batch = series(scalars, "keras/overfit/train", "batch_loss")
    assert batch[-1] == pytest.approx(train[-1], rel=1e-6)  # running mean of the epoch


def test_plateau(scalars):
    run = "lightning/plateau"
    _, lr = series(scalars, run, "lr-Adam")
    _, loss = series(scalars, run, "train_loss")
    _, val = series(scalars, run, "val_loss")
    assert lr[300] < 1e-3 * lr[0] and lr[-1] < 1e-12  # ~0 after a few hundred steps
    assert np.ptp(val[-10:]) < 1e-3
    late, earlier = loss[-500:].mean(), loss[-1000:-500].mean()
    assert abs(late - earlier) < 0.05 * earlier
    assert loss[-500:].mean() > 0.5  # stuck well above what the model can reach


def test_lr_too_high(scalars):
    run = "custom/lr-too-high"
    _, ratio = series(scalars, run, "optim/update_ratio")
    _, loss = series(scalars, run, "loss/train")
    _, val = series(scalars, run, "loss/val")
    assert np.all(ratio[5:] > 0.1) and np.median(ratio) > 0.15
    assert np.all(np.isfinite(loss))
    assert val.min() > 1.0  # healthy runs on this task reach ~0.6
    flips = np.sum(np.diff(np.sign(np.diff(val))) != 0)
    assert flips >= 5  # bouncing, not converging


# ---------------------------------------------------------------------------
# The analysis on the regenerated logs
# ---------------------------------------------------------------------------


def test_analysis_finds_each_story(logdir):
    from tb_crash_signals.scan import scan_logdir

    report = {r["run"]: r for r in scan_logdir(str(logdir))["runs"]}
    assert set(report) == set(EXPECTED)
    for run, families in EXPECTED.items():
        found = {e["family"] for e in report[run]["episodes"]}
        assert families <= found, (run, found)
    for run in HEALTHY:
        assert report[run]["health"] != "critical", report[run]["episodes"]
    explosion = report["lightning/grad-explosion"]
    growth = min(e["start_step"] for e in explosion["episodes"] if e["family"] == "growth")
    crossing = min(e["start_step"] for e in explosion["episodes"] if e["code"] == "CS101")
    assert crossing - growth >= 20, "the growth fit must predict the explosion well before it"
    assert explosion["fits"] and explosion["fits"][0]["projected_step"] > growth


def test_monitor_fed_step_by_step_agrees_with_scan(logdir):
    """The online Monitor, fed each demo run in step order, finds what scan finds."""
    from tb_crash_signals import Monitor
    from tb_crash_signals.analysis.signals import group_runs
    from tb_crash_signals.ingest.reader import LogdirSource
    from tb_crash_signals.scan import scan_logdir

    source = LogdirSource(str(logdir))
    report = {r["run"]: r for r in scan_logdir(str(logdir), source=source)["runs"]}
    for run in group_runs(source.run_tags()):
        data = {k: source.series(ref.run, ref.tag) for k, ref in run.signals.items() if ref}
        steps = sorted({int(s) for series in data.values() for s in series.steps})
        lookup = {k: dict(zip(s.steps.tolist(), s.values.tolist())) for k, s in data.items()}
        monitor = Monitor()
        for step in steps:
            monitor.update(step, **{k: d[step] for k, d in lookup.items() if step in d})
        ours = sorted((e.code, e.signal, e.start_step, e.severity) for e in monitor.episodes())
        theirs = sorted(
            (e["code"], e["signal"], e["start_step"], e["severity"]) for e in report[run.name]["episodes"]
        )
        assert ours == theirs, run.name
