"""A tiny numpy neural network: MLP and Wide & Deep, losses, SGD/Adam, gradient clipping."""

from __future__ import annotations

from typing import List, Sequence

import numpy as np

F32 = np.float32


# Model, losses, optimisers


class MLP:
    """Fully connected network (ReLU or tanh), float32, He / Xavier init."""

    def __init__(self, sizes: Sequence[int], rng, init_gain: float = 1.0, act: str = "relu"):
        self.act = act
        gain = 2.0 if act == "relu" else 1.0
        self.params: List[np.ndarray] = []
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            w = rng.standard_normal((fan_in, fan_out)) * (init_gain * np.sqrt(gain / fan_in))
            self.params += [w.astype(F32), np.zeros(fan_out, F32)]

    @property
    def n_layers(self) -> int:
        return len(self.params) // 2

    def forward(self, x: np.ndarray):
        acts = [x]
        h = x
        with np.errstate(invalid="ignore", over="ignore"):
            for i in range(self.n_layers):
                w, b = self.params[2 * i], self.params[2 * i + 1]
                z = h @ w + b
                if i == self.n_layers - 1:
                    h = z
                elif self.act == "relu":
                    h = np.maximum(z, 0)
                else:
                    h = np.tanh(z)
                acts.append(h)
        return h, acts

    def backward(self, acts, dout: np.ndarray) -> List[np.ndarray]:
        grads: List[np.ndarray] = [None] * len(self.params)  # type: ignore
        d = dout
        with np.errstate(invalid="ignore", over="ignore"):
            for i in reversed(range(self.n_layers)):
                h_in = acts[i]
                grads[2 * i] = h_in.T @ d
                grads[2 * i + 1] = d.sum(axis=0)
                if i > 0:
                    d = d @ self.params[2 * i].T
                    if self.act == "relu":
                        d = d * (acts[i] > 0)
                    else:
                        d = d * (1 - acts[i] * acts[i])
        return grads


class WideDeep:
    """Wide & Deep regressor: an MLP on the dense features plus a linear
    ("wide") part on raw, unstandardised features.

    The input is ``[dense | wide]`` column-wise; ``n_wide`` trailing columns
    feed the linear part. Its curvature is fixed by the raw feature scale
    (lambda_max ~ 2 * n_wide * mean^2), so once the learning rate passes the
    stability limit (2 / lambda_max for plain SGD) the error along that
    direction flips sign and grows by a factor |1 - lr * lambda| every step:
    the textbook exponential gradient-norm growth before an explosion.
    ``deep_scale`` multiplies the deep part's output (an output multiplier):
    it keeps the deep ReLU stack out of that sharp direction, so it cannot
    self-stabilise the oscillation (the "catapult"), while its gradients
    still blow it up once the residuals are huge -- then the loss overflows.
    """

    def __init__(self, sizes: Sequence[int], n_wide: int, rng, act: str = "relu",
                 deep_scale: float = 1.0):
        self.deep = MLP(sizes, rng, act=act)
        self.n_wide = n_wide
        self.deep_scale = F32(deep_scale)
        self.params = self.deep.params + [np.zeros((n_wide, sizes[-1]), F32)]

    def forward(self, x: np.ndarray):
        xd, xw = x[:, : -self.n_wide], x[:, -self.n_wide :]
        with np.errstate(invalid="ignore", over="ignore"):
            out, acts = self.deep.forward(xd)
            return self.deep_scale * out + xw @ self.params[-1], (acts, xw)

    def backward(self, cache, dout: np.ndarray) -> List[np.ndarray]:
        acts, xw = cache
        with np.errstate(invalid="ignore", over="ignore"):
            return self.deep.backward(acts, self.deep_scale * dout) + [xw.T @ dout]


def softmax_xent(logits: np.ndarray, y: np.ndarray):
    """Mean cross-entropy (log-softmax, numerically stable) and d/dlogits."""
    with np.errstate(invalid="ignore", over="ignore"):
        z = logits - logits.max(axis=1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        n = logits.shape[0]
        loss = -logp[np.arange(n), y].mean()
        d = np.exp(logp)
        d[np.arange(n), y] -= 1.0
    return float(loss), (d / n).astype(F32)


def mse(pred: np.ndarray, y: np.ndarray):
    with np.errstate(invalid="ignore", over="ignore"):
        diff = pred - y
        loss = float(np.mean(diff * diff))
        d = (2.0 / diff.size) * diff
    return loss, d.astype(F32)


def global_norm(arrs: Sequence[np.ndarray]) -> float:
    with np.errstate(invalid="ignore", over="ignore"):
        return float(np.sqrt(sum(float(np.sum(a.astype(np.float64) ** 2)) for a in arrs)))


def clip_by_global_norm(grads, max_norm: float, norm: float):
    """As ``torch.nn.utils.clip_grad_norm_``: rescale to ``max_norm`` when the
    global norm exceeds it; a non-finite norm makes every gradient NaN."""
    if not np.isfinite(norm):
        return [g * F32(np.nan) for g in grads]
    if norm > max_norm:
        scale = F32(max_norm / (norm + 1e-6))
        return [g * scale for g in grads]
    return grads


class SGD:
    def __init__(self, params, momentum=0.0, weight_decay=0.0, nesterov=False):
        self.momentum, self.wd, self.nesterov = momentum, weight_decay, nesterov
        self.buf = [np.zeros_like(p) for p in params]

    def step(self, params, grads, lr: float) -> None:
        lr = F32(lr)
        with np.errstate(invalid="ignore", over="ignore"):
            for p, g, b in zip(params, grads, self.buf):
                if self.wd:
                    g = g + F32(self.wd) * p
                if self.momentum:
                    b *= F32(self.momentum)
                    b += g
                    g = g + F32(self.momentum) * b if self.nesterov else b
                p -= lr * g


class Adam:
    """Adam; ``decoupled=True`` makes it AdamW."""

    def __init__(self, params, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled=False):
        self.b1, self.b2 = betas
        self.eps, self.wd, self.decoupled = eps, weight_decay, decoupled
        self.m = [np.zeros_like(p) for p in params]
        self.v = [np.zeros_like(p) for p in params]
        self.t = 0

    def step(self, params, grads, lr: float) -> None:
        self.t += 1
        b1, b2 = F32(self.b1), F32(self.b2)
        c1 = 1.0 - self.b1 ** self.t
        c2 = 1.0 - self.b2 ** self.t
        with np.errstate(invalid="ignore", over="ignore"):
            for p, g, m, v in zip(params, grads, self.m, self.v):
                if self.wd and not self.decoupled:
                    g = g + F32(self.wd) * p
                if self.wd and self.decoupled:
                    p *= F32(1.0 - lr * self.wd)
                m *= b1
                m += (1 - b1) * g
                v *= b2
                v += (1 - b2) * (g * g)
                p -= F32(lr / c1) * m / (np.sqrt(v / F32(c2)) + F32(self.eps))


def update_ratio(before: Sequence[np.ndarray], after: Sequence[np.ndarray]) -> float:
    """||theta_after - theta_before|| / ||theta_before|| over all parameters."""
    delta = global_norm([a - b for a, b in zip(after, before)])
    return delta / max(global_norm(before), 1e-12)


def evaluate(model, x, y, kind: str = "ce", batch: int = 1000):
    """Mean loss and accuracy over a whole split (accuracy 0 for regression)."""
    losses, correct, n = [], 0, 0
    for i in range(0, len(x), batch):
        out, _ = model.forward(x[i : i + batch])
        if kind == "ce":
            loss, _ = softmax_xent(out, y[i : i + batch])
            with np.errstate(invalid="ignore"):
                correct += int((np.argmax(out, axis=1) == y[i : i + batch]).sum())
        else:
            loss, _ = mse(out, y[i : i + batch])
        losses.append(loss * len(out))
        n += len(out)
    return float(np.sum(losses) / n), correct / n
