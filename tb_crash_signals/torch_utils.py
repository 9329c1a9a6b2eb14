"""Optional PyTorch helpers: the two signals a training loop does not log by itself.

torch is imported lazily and is not a dependency of the package.

    gnorm = global_grad_norm(model)            # after loss.backward()
    with update_ratio(model) as ratio:         # around optimizer.step()
        optimizer.step()
    monitor.update(step, train_loss=loss, grad_norm=gnorm, update_ratio=ratio.value)
"""

from __future__ import annotations

import math

# Up to this many gradient elements, global_grad_norm copies them into one tensor (4 MiB in
# float32): cheaper than a norm per tensor on a small model, a waste of memory on a big one.
_FLAT_NORM_MAX = 1 << 20


def _flat(tensors):
    """The tensors' elements in one flat tensor: torch.cat of their flattened views, in one call
    into torch rather than one per tensor (DDP's bucketing helper; cat where it is missing). Of
    a single tensor, its flat view, not a copy."""
    import torch

    flatten = getattr(torch._utils, "_flatten_dense_tensors", None)
    return flatten(tensors) if flatten is not None else torch.cat([t.reshape(-1) for t in tensors])


def _parameters(model_or_params):
    params = model_or_params.parameters() if hasattr(model_or_params, "parameters") else model_or_params
    return [p for p in params if p is not None]


def global_grad_norm(model_or_params, norm_type: float = 2.0) -> float:
    """The norm of all gradients taken together (what clip_grad_norm_ measures).

    Parameters without a gradient are skipped; returns 0.0 if none has one.
    """
    # The 0-dim results are read by tolist(), which reads the number as it is: item() and float()
    # go through torch's operator dispatch, a path a training step leaves cold (~4 us a read in a
    # tiny model's loop). The same float.
    import torch

    # No detach(): a gradient needs none unless built with create_graph=True, and the tolist()
    # below drops the graph then; per tensor it costs more than the norm of a small one.
    grads = [p.grad for p in _parameters(model_or_params) if p.grad is not None]
    if not grads:
        return 0.0
    if math.isinf(norm_type):
        return float(max(g.abs().max() for g in grads))
    if len(grads) == 1:
        return torch.linalg.vector_norm(grads[0], norm_type).tolist()
    same_kind = len({(g.dtype, g.device) for g in grads}) == 1
    if same_kind and norm_type == 2.0 and sum(g.numel() for g in grads) <= _FLAT_NORM_MAX:
        # A small model's gradients, copied into one flat tensor: three tensor operations, where
        # the per-tensor norms cost one more and a stack, ~3x the time on a tiny model.
        return torch.linalg.vector_norm(_flat(grads)).tolist()
    foreach_norm = getattr(torch, "_foreach_norm", None)
    # One call for every tensor's norm (what clip_grad_norm_ uses), not one per tensor.
    if foreach_norm is not None and same_kind:
        norms = foreach_norm(grads, norm_type)
    else:
        norms = [torch.linalg.vector_norm(g, norm_type) for g in grads]
    return torch.linalg.vector_norm(torch.stack(norms), norm_type).tolist()


class update_ratio:
    """Context manager measuring ||theta_after - theta_before|| / ||theta_before||.

    Copies the parameters on entry, so use it every ~10 steps on big models
    (the source article's advice): it costs one copy of the weights.
    """

    def __init__(self, model_or_params):
        self.params = [p for p in _parameters(model_or_params) if p.requires_grad]
        self.value: float | None = None

    def __enter__(self):
        # One flat copy when the parameters share a dtype and a device (the usual case): three
        # tensor operations then, where one per parameter costs more on a small model.
        import torch

        kinds = {(p.dtype, p.device) for p in self.params}
        with torch.no_grad():  # (a copy, no graph: cheaper than a detach() per parameter)
            if len(kinds) == 1:
                flat = _flat(self.params)
                self.before = flat.clone() if len(self.params) == 1 else flat  # (one: a view of it)
            else:
                self.before = [p.detach().clone() for p in self.params]
        return self

    def __exit__(self, *exc):
        import torch

        if exc[0] is None:
            with torch.no_grad():
                if isinstance(self.before, torch.Tensor):
                    after = _flat(self.params)
                    delta = torch.linalg.vector_norm(after - self.before).tolist()
                    base = torch.linalg.vector_norm(self.before).tolist()
                else:
                    delta = math.sqrt(sum(float((p - b).pow(2).sum()) for p, b in zip(self.params, self.before)))
                    base = math.sqrt(sum(float(b.pow(2).sum()) for b in self.before))
            self.value = delta / base if base > 0 else math.inf
        del self.before
        return False
