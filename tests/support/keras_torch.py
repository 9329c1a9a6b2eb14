"""Keras 3 on the torch backend (no TensorFlow), for the tests that train with it."""

from __future__ import annotations

import os

import pytest


def keras_on_torch():
    """The keras module on the torch backend; skips the calling test module otherwise (CI installs
    both, so there it never skips)."""
    os.environ.setdefault("KERAS_BACKEND", "torch")
    keras = pytest.importorskip("keras")
    if keras.backend.backend() != "torch":
        pytest.skip("these tests run Keras on the torch backend", allow_module_level=True)
    return keras


# Keras' torch backend converting its own logs under numpy 2: nothing of ours.
KERAS_WARNINGS = pytest.mark.filterwarnings(
    "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning"
)
