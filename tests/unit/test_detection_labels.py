"""The detection corpus' labels (bench/detection/labels.py): what counts as a crash and a precursor."""

import importlib.util
import math
import os

import numpy as np

# Loaded by path: bench/detection is no package, and its module names (events, train, ...) must
# not shadow anything else the tests import.
_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "detection", "labels.py")
_spec = importlib.util.spec_from_file_location("detection_labels", _PATH)
_labels = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_labels)
compute_labels = _labels.compute_labels


def points(values, every=10):
    return [(i * every, float(v)) for i, v in enumerate(values)]


def test_a_loss_back_at_its_initial_level_for_good_has_crashed():
    # Learns 2.3 -> 1.3 (it can never double: 2.6 is above where it started), then climbs back to
    # chance as an LR range test's learning rate grows, and stays there.
    learn = 2.3 - 1.0 * (1 - np.exp(-np.arange(60) / 12))
    climb = 1.3 + 1.0 * (1 - np.exp(-np.arange(40) / 6))
    chance = np.full(30, 2.31)
    labels = compute_labels({"train_loss": points(np.concatenate([learn, climb, chance]))})
    assert labels["category"] == "diverged" and labels["crash_how"] == "sustained"
    assert 60 * 10 < labels["crash_step"] < 130 * 10
    # A climb that goes half way back and stays there is not back at its initial level.
    half = np.concatenate([learn, 1.3 + 0.5 * (1 - np.exp(-np.arange(70) / 6))])
    assert compute_labels({"train_loss": points(half)})["crash_step"] is None
    # Nor is a run that never learnt (a plateau at its initial level).
    flat = 2.3 + 0.01 * np.sin(np.arange(130))
    assert compute_labels({"train_loss": points(flat)})["crash_step"] is None


def test_a_grad_norm_exploding_one_step_before_the_loss_jumps_is_no_precursor():
    # The grad norm drifts 0.18 -> 0.3 as training starts, stays flat, and jumps 70x one logged
    # point before the loss turns NaN: an abrupt crash, not a rise since the drift.
    loss = [2.3 - 0.1 * math.log1p(i) for i in range(60)] + [7.9, math.nan]
    grad = [min(0.18 + 0.01 * i, 0.3) + 0.005 * math.sin(i) for i in range(60)] + [21.7, math.nan]
    labels = compute_labels({"train_loss": points(loss), "grad_norm": points(grad)})
    assert labels["category"] == "diverged" and labels["crash_step"] == 610
    assert labels["precursor"] is False
    # A grad norm that climbs 10x over the 40 points before the crash is one.
    rising = [0.3] * 20 + [0.3 * 1.06 ** i for i in range(40)] + [30.0, math.nan]
    labels = compute_labels({"train_loss": points(loss), "grad_norm": points(rising)})
    assert labels["precursor"] is True and labels["precursor_signal"] == "grad_norm"
    assert 150 <= labels["precursor_start"] <= 400


def test_a_warm_restart_back_to_the_peak_is_no_learning_rate_misconfiguration():
    t = np.arange(120)
    sgdr = 1e-3 * 0.5 * (1 + np.cos(np.pi * (t % 30) / 30)) + 1e-6  # back to 1e-3 every 30 points
    assert _labels.lr_bad((t, sgdr)) == []
    high = sgdr.copy()
    high[60:] *= 10  # a restart 10x past the peak the run trained at
    assert "jump" in _labels.lr_bad((t, high))


def test_skipped_fp16_steps_in_a_row_are_overflow_not_a_crash():
    # A scaler calibrating from 2^24: 9 skipped steps in a row from step 7, the loss finite, then
    # training as usual. A grad norm non-finite to the end, with the loss gone NaN, is a crash.
    loss = 2.0 * np.exp(-np.arange(300) / 80) + 0.1
    grad = np.full(300, 0.5)
    grad[7:16] = np.inf
    labels = compute_labels({"train_loss": points(loss, 1), "grad_norm": points(grad, 1)})
    assert labels["overflow_steps"] == list(range(7, 16)) and labels["category"] == "healthy"
    loss[200:] = np.nan
    grad[200:] = np.nan
    labels = compute_labels({"train_loss": points(loss, 1), "grad_norm": points(grad, 1)})
    assert labels["crash_step"] == 200 and 200 not in labels["overflow_steps"]


def test_the_plain_crash_reads_no_point_ahead():
    # Learns 2.3 -> 0.2 (60 points logged every 10 steps), then the loss multiplies by 1.5 every
    # point until it is NaN at point 84. The labels' crash (a centred median at 2x the best) comes
    # first. The plain crash is the first point whose trailing median of 5 reaches 10x the lowest
    # such median (0.2, so 2.0) and half the initial level: at point 67 the last five are 1.01,
    # 1.52, 2.28, 3.42, 5.13 (median 2.28), at point 66 their median is 1.52.
    learn = 0.2 + 2.1 * np.exp(-np.arange(60) / 8)
    climb = 0.2 * 1.5 ** np.arange(1, 25)
    labels = compute_labels({"train_loss": points(np.concatenate([learn, climb, [np.nan]]))})
    assert labels["category"] == "diverged"
    assert labels["plain_crash_step"] == 670 and labels["crash_step"] < 670
    # A loss that climbs 4.5x and stays is a crash for the labels but never a plain one.
    labels = compute_labels({"train_loss": points(np.concatenate([learn, np.full(60, 0.9)]))})
    assert labels["crash_step"] is not None and labels["plain_crash_step"] is None
    # A NaN is the plain crash at once; a run that did not crash has none.
    assert compute_labels({"train_loss": points(np.r_[learn, np.nan])})["plain_crash_step"] == 600
    assert compute_labels({"train_loss": points(learn)})["plain_crash_step"] is None
