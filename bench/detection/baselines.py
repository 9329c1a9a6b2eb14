"""Crash detectors of large training stacks, as causal critical-only detectors on the raw series.

Each takes a run's series (`{signal: (steps, values)}`, see `events.py`) and
returns episodes (dicts with `code`, `family`, `severity`, `signal`,
`start_step`, `end_step`), all critical:

- `olmo`: OLMo-core's spike check -- |z| > 6, z against the mean and
  standard deviation of the previous 128 points (at least 20), on the train
  loss and on the grad norm.
- `megatron`: Megatron-LM's check -- train loss >= 10x the max of its first
  100 logged values (from the 101st value on).
- `foundry`: LLM Foundry's loss-spike check -- train loss >= 2x the mean of
  the previous 100 points for more than 4 consecutive points.
- `wandb`: the z-score alert of W&B automations -- |z| > 3 against the mean
  and standard deviation of the previous 30 train-loss points.

Each also flags a NaN/Inf train loss (every one of these stacks stops or
skips on it; a non-finite grad norm alone is what fp16 loss scaling does, so
it is not flagged). Only finite points enter the windows. Hits within 10
points of each other merge into one episode whose start is the first hit.
"""

from __future__ import annotations

import numpy as np


def _episodes(code, signal, steps, hit_idx, cooldown=10):
    out = []
    last = None
    for i in np.asarray(hit_idx, dtype=np.int64).tolist():
        if last is None or i - last > cooldown:
            out.append({"code": code, "rule": code.lower(), "family": "divergence",
                        "severity": "critical", "signal": signal,
                        "start_step": int(steps[i]), "end_step": int(steps[i])})
        elif out:
            out[-1]["end_step"] = int(steps[i])
        last = i
    return out


def _nonfinite_loss(data):
    s = data.get("train_loss")
    if s is None or not len(s[0]):
        return []
    idx = np.flatnonzero(~np.isfinite(s[1]))
    return _episodes("NaN", "train_loss", s[0], idx, cooldown=10**9)


def _trailing(values, window, min_points, fn):
    """fn over the finite values of the previous `window` points, per point (NaN if too few)."""
    n = len(values)
    out = np.full(n, np.nan)
    for i in range(min_points, n):
        w = values[max(0, i - window):i]
        w = w[np.isfinite(w)]
        if w.size >= min_points:
            out[i] = fn(w)
    return out


def _zscore(data, signals, window, z, min_points, code):
    eps = []
    for sig in signals:
        s = data.get(sig)
        if s is None or len(s[0]) <= min_points:
            continue
        v = s[1]
        mean = _trailing(v, window, min_points, np.mean)
        std = _trailing(v, window, min_points, np.std)
        with np.errstate(invalid="ignore", divide="ignore"):
            hit = np.isfinite(v) & (std > 0) & (np.abs(v - mean) > z * std)
        eps += _episodes(code, sig, s[0], np.flatnonzero(hit))
    return eps


def olmo(data, window=128, z=6.0, min_points=20):
    return _nonfinite_loss(data) + _zscore(data, ("train_loss", "grad_norm"), window, z,
                                           min_points, "OLMo")


def wandb(data, window=30, z=3.0, min_points=10):
    return _nonfinite_loss(data) + _zscore(data, ("train_loss",), window, z, min_points, "W&B")


def megatron(data, first=100, factor=10.0):
    eps = _nonfinite_loss(data)
    s = data.get("train_loss")
    if s is not None and len(s[0]) > first:
        v = s[1]
        head = v[:first][np.isfinite(v[:first])]
        if head.size:
            with np.errstate(invalid="ignore"):
                hit = np.isfinite(v) & (v >= factor * head.max())
            hit[:first] = False
            eps += _episodes("Megatron", "train_loss", s[0], np.flatnonzero(hit))
    return eps


def foundry(data, window=100, factor=2.0, consecutive=4, min_points=10):
    eps = _nonfinite_loss(data)
    s = data.get("train_loss")
    if s is not None and len(s[0]) > min_points:
        v = s[1]
        mean = _trailing(v, window, min_points, np.mean)
        with np.errstate(invalid="ignore"):
            up = np.isfinite(v) & (v >= factor * mean)
        run = np.zeros(len(v), np.int64)
        c = 0
        for i, u in enumerate(up):
            c = c + 1 if u else 0
            run[i] = c
        eps += _episodes("Foundry", "train_loss", s[0], np.flatnonzero(run > consecutive))
    return eps


BASELINES = {"olmo": olmo, "megatron": megatron, "foundry": foundry, "wandb": wandb}
