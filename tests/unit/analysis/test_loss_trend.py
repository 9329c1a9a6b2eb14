"""engine.loss_trend: the summary's word on whether the loss is still going down."""

from __future__ import annotations

import numpy as np

from tb_crash_signals.analysis.engine import loss_trend
from tb_crash_signals.ingest.series import Series


def trend(values):
    return loss_trend(Series.from_arrays(np.arange(len(values)), np.asarray(values, dtype=float)))


def test_a_noisy_per_step_loss_at_its_level_is_flat_whatever_its_last_point():
    # Minibatch noise of +-30 % around 0.5: its last point against its 20th last says "increasing" or
    # "decreasing" nearly every time; the halves' medians, within their noise, flat nearly always.
    rng = np.random.default_rng(0)
    said = [trend(0.5 * np.exp(0.3 * rng.standard_normal(200))) for _ in range(200)]
    assert said.count("flat") >= 190


def test_a_loss_that_moves_beyond_its_noise_has_a_direction():
    rng = np.random.default_rng(1)
    noise = np.exp(0.05 * rng.standard_normal(40))
    assert trend(np.linspace(2.0, 1.0, 40) * noise) == "decreasing"
    assert trend(np.linspace(1.0, 2.0, 40) * noise) == "increasing"
    # A negative log-likelihood falling through zero, and one rising from under it.
    assert trend(np.linspace(0.5, -0.8, 40) + 0.02 * rng.standard_normal(40)) == "decreasing"
    assert trend(np.linspace(-0.8, -0.2, 40) + 0.02 * rng.standard_normal(40)) == "increasing"
    # Smooth epoch means creeping down 0.5 % a point: 5 % over the window.
    assert trend(0.3 * 0.995 ** np.arange(30)) == "decreasing"
    assert trend([0.3] * 30) == "flat"


def test_what_the_window_cannot_say():
    assert trend([]) is None
    assert trend([1.0, float("nan")]) == "nonfinite"
    assert trend([float("nan"), 1.0]) == "flat"
