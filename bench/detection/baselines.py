"""Three baseline crash detectors from large training stacks, as causal critical detectors.

Each takes a run's series (`{signal: Series}`) and returns episodes (dicts
with `family`, `severity`, `start_step`, `code`, `signal`), all critical:

- `olmo`: OLMo-core's spike check -- |z| > 6, z computed against the mean and
  standard deviation of the previous 128 points (at least 20), on the train
  loss and on the grad norm.
- `megatron`: Megatron-LM's check -- train loss >= 10x the max of its first
  100 logged values (checked from the 101st value on).
- `foundry`: LLM Foundry's loss-spike check -- train loss >= 2x the mean of
  the previous 100 points for more than 4 consecutive points.

All three also flag a NaN/Inf loss or grad norm (every one of these stacks
stops or skips on it), so they are not penalised for lacking a NaN rule.
Hits within 10 points of each other merge into one episode whose start is
the first hit.
"""

from __future__ import annotations

import numpy as np


def _episodes(code, signal, steps, hit_idx, cooldown=10):
    out = []
    last = None
    for i in np.asarray(hit_idx, dtype=np.int64).tolist():
        if last is None or i - last > cooldown:
            out.append({"code": code, "family": "divergence", "severity": "critical",
                        "signal": signal, "start_step": int(steps[i])})
        last = i
    return out


def _nonfinite(data):
    eps = []
    for sig in ("train_loss", "grad_norm"):
        s = data.get(sig)
        if s is not None and len(s):
            idx = np.flatnonzero(~np.isfinite(s.values))
            eps += _episodes("NaN", sig, s.steps, idx, cooldown=10**9)
    return eps


def _trailing(values, window, min_points, fn):
    n = len(values)
    out = np.full(n, np.nan)
    for i in range(min_points, n):
        w = values[max(0, i - window):i]
        w = w[np.isfinite(w)]
        if w.size >= min_points:
            out[i] = fn(w)
    return out


def olmo(data, window=128, z=6.0, min_points=20):
    eps = _nonfinite(data)
    for sig in ("train_loss", "grad_norm"):
        s = data.get(sig)
        if s is None or len(s) <= min_points:
            continue
        v = s.values
        mean = _trailing(v, window, min_points, np.mean)
        std = _trailing(v, window, min_points, np.std)
        with np.errstate(invalid="ignore", divide="ignore"):
            hit = np.isfinite(v) & (np.abs(v - mean) > z * std) & (std > 0)
        eps += _episodes("OLMo", sig, s.steps, np.flatnonzero(hit))
    return eps


def megatron(data, first=100, factor=10.0):
    eps = _nonfinite(data)
    s = data.get("train_loss")
    if s is not None and len(s) > first:
        v = s.values
        ref = np.nanmax(np.where(np.isfinite(v[:first]), v[:first], np.nan))
        with np.errstate(invalid="ignore"):
            hit = np.isfinite(v) & (v >= factor * ref)
        hit[:first] = False
        eps += _episodes("Megatron", "train_loss", s.steps, np.flatnonzero(hit))
    return eps


def foundry(data, window=100, factor=2.0, consecutive=4, min_points=10):
    eps = _nonfinite(data)
    s = data.get("train_loss")
    if s is not None and len(s) > min_points:
        v = s.values
        mean = _trailing(v, window, min_points, np.mean)
        with np.errstate(invalid="ignore"):
            up = np.isfinite(v) & (v >= factor * mean)
        run = np.zeros(len(v), np.int64)
        c = 0
        for i, u in enumerate(up):
            c = c + 1 if u else 0
            run[i] = c
        eps += _episodes("Foundry", "train_loss", s.steps, np.flatnonzero(run > consecutive))
    return eps


BASELINES = {"olmo": olmo, "megatron": megatron, "foundry": foundry}
