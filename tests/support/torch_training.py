"""Small real PyTorch trainings on CPU, logged every step with torch's SummaryWriter."""

from __future__ import annotations

import math
from typing import Callable

# The tags train_logged (and the trainings here that share them) write, as the Monitor's signals.
TAGS = {"Loss/train": "train_loss", "Grad/norm": "grad_norm", "LR": "lr"}
TAGS_WITH_VAL = {**TAGS, "Loss/val": "val_loss"}


def noisy_classes(weights, n: int):
    """n standard-normal inputs (as many as `weights` has rows) and their classes: the argmax of their
    projection by `weights` plus normal noise of 0.8 (labels a classifier cannot all get right)."""
    import torch

    x = torch.randn(n, weights.shape[0])
    return x, (x @ weights + 0.8 * torch.randn(n, weights.shape[1])).argmax(1)


def train_logged(logdir, model, x, y, loss_fn, lr_at: Callable[[int], float], steps: int, batch: int | None,
                 tags=("Loss/train", "Grad/norm", "LR"), stop_after_nonfinite: int | None = None,
                 adam: bool = False, every: int = 1) -> int | None:
    """Trains `model` with SGD + momentum 0.9 (or Adam) on minibatches of (x, y) (`batch` None: all
    of it at every step) at the learning rate `lr_at(step)`, logging the loss, the global grad norm
    and the LR under `tags` every `every` steps; returns the first step whose loss was NaN/Inf (None if none), stopping
    `stop_after_nonfinite` steps later."""
    import torch
    from torch.utils.tensorboard import SummaryWriter

    if adam:
        opt = torch.optim.Adam(model.parameters(), lr=lr_at(0))
    else:
        opt = torch.optim.SGD(model.parameters(), lr=lr_at(0), momentum=0.9)
    first_nonfinite = None
    loss_tag, grad_tag, lr_tag = tags
    with SummaryWriter(str(logdir)) as w:
        for step in range(steps):
            lr = lr_at(step)
            for g in opt.param_groups:
                g["lr"] = lr
            if batch is None:
                loss = loss_fn(model(x), y)
            else:
                idx = torch.randint(0, x.shape[0], (batch,))
                loss = loss_fn(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), math.inf)
            opt.step()
            if step % every == 0:
                w.add_scalar(loss_tag, loss.item(), step)
                w.add_scalar(grad_tag, gnorm.item(), step)
                w.add_scalar(lr_tag, lr, step)
            if not math.isfinite(loss.item()):
                if first_nonfinite is None:
                    first_nonfinite = step
                elif stop_after_nonfinite is not None and step >= first_nonfinite + stop_after_nonfinite:
                    break
    return first_nonfinite


def train_regression(logdir, seed: int, features: int, samples: int, lr_at: Callable[[int], float], steps: int,
                     batch: int, stop_after_nonfinite: int | None = None, adam: bool = False,
                     every: int = 1) -> int | None:
    """train_logged of a Tanh MLP (two hidden layers of 64) regressing half the sum of a quarter of
    `features` standard-normal inputs, plus noise: its MSE falls two decades, from ~features / 16
    to ~0.01. Seeds torch with `seed` first; returns the first non-finite step, as train_logged."""
    import torch

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    x = torch.randn(samples, features)
    y = x[:, : features // 4].sum(1, keepdim=True) * 0.5 + 0.1 * torch.randn(samples, 1)
    model = torch.nn.Sequential(torch.nn.Linear(features, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64),
                                torch.nn.Tanh(), torch.nn.Linear(64, 1))
    return train_logged(logdir, model, x, y, torch.nn.functional.mse_loss, lr_at, steps, batch=batch,
                        stop_after_nonfinite=stop_after_nonfinite, adam=adam, every=every)


def train_classifier(logdir, seed: int, batch: int, lr: float, steps: int) -> None:
    """train_logged of a GELU MLP (two hidden layers of 64) classifying 32 standard-normal inputs
    into 3 classes (two thresholds on sums of a few of them) at a constant learning rate `lr`:
    with minibatches of a few samples its per-step cross-entropy is noisy, and it falls from ~1.05
    to ~0.15 over 1500 steps. Seeds torch with `seed` first."""
    import torch

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    x = torch.randn(4096, 32)
    y = (x[:, :8].sum(1) > 0).long() + (x[:, 8:12].sum(1) > 1).long()
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 64), torch.nn.GELU(),
                                torch.nn.Linear(64, 3))
    train_logged(logdir, model, x, y, torch.nn.functional.cross_entropy, lambda step: lr, steps, batch=batch)


def mostly_easy_classes(weights, n: int, hard: float = 0.02):
    """n standard-normal inputs and their classes, the argmax of their projection by `weights`:
    all but a share `hard` of them kept a margin of 1.5 from every other class, the rest drawn
    anywhere (an easy task with a few hard examples near the boundaries, as most real data has)."""
    import torch

    def drawn(count, margin):
        x = torch.randn(8 * count, weights.shape[0])
        scores = x @ weights
        top = scores.topk(2, 1).values
        keep = (top[:, 0] - top[:, 1]) > margin
        return x[keep][:count], scores[keep][:count].argmax(1)

    n_hard = round(hard * n)
    (xe, ye), (xh, yh) = drawn(n - n_hard, 1.5), drawn(n_hard, 0.0)
    return torch.cat([xe, xh]), torch.cat([ye, yh])


def train_easy_classifier(logdir, seed: int, steps: int, every_eval: int = 100) -> None:
    """A ReLU MLP (two hidden layers of 64) classifying 16 inputs into 4 classes of
    `mostly_easy_classes` (2 000 to train on, 500 held out) with Adam (3e-3) in batches of 64,
    logged every step (`Loss/train`, `Grad/norm`, `LR`) and on the held-out set every `every_eval`
    steps (`Loss/val`): its loss falls from ~1.4 to ~1e-4 and its grad norm to a hundredth of its
    early size, where one batch holding a hard example moves the gradient 10x and the loss not at
    all; its validation loss converges near zero and wanders there. A healthy run."""
    import torch

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    weights = torch.randn(16, 4)
    x, y = mostly_easy_classes(weights, 2000)
    xv, yv = mostly_easy_classes(weights, 500)
    nn = torch.nn
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))
    _train_adam(logdir, model, 3e-3, steps, *_classification_losses(model, x, y, xv, yv), every_eval)


def train_classifier_on_labels(logdir, seed: int, steps: int, shuffled: bool, every_eval: int = 100) -> None:
    """A ReLU MLP (one hidden layer of 128) classifying 32 standard-normal inputs into 6 classes (the
    argmax of a random projection plus noise, `noisy_classes`) with Adam (1e-3) in batches of 64, on
    2 000 samples whose labels are `shuffled` among them or not, logged every step (`Loss/train`,
    `Grad/norm`, `LR`) and on 1 000 held-out samples with their true labels every `every_eval` steps
    (`Loss/val`). Shuffled, the train loss slowly learns the training set by heart while the
    validation loss stays at chance (ln 6) and creeps up."""
    import torch

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    weights = torch.randn(32, 6)
    x, y = noisy_classes(weights, 2000)
    xv, yv = noisy_classes(weights, 1000)
    if shuffled:
        y = y[torch.randperm(y.shape[0])]
    nn = torch.nn
    model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 6))
    _train_adam(logdir, model, 1e-3, steps, *_classification_losses(model, x, y, xv, yv), every_eval)


def _classification_losses(model, x, y, xv, yv, batch: int = 64):
    """`_train_adam`'s batch_loss (the cross-entropy of `batch` samples of (x, y) drawn at random) and
    held_out_loss (that of all of (xv, yv)) for a classifier."""
    import torch

    def batch_loss():
        idx = torch.randint(0, x.shape[0], (batch,))
        return torch.nn.functional.cross_entropy(model(x[idx]), y[idx])

    return batch_loss, lambda: torch.nn.functional.cross_entropy(model(xv), yv)


def train_gan(logdir, seed: int, steps: int, lr: float, least_squares: bool = False,
              tags=("Loss/D", "Loss/G")) -> int | None:
    """A GAN (two-layer MLPs) learning a ring of 8 Gaussians in the plane, minibatches of 64,
    the discriminator's and the generator's loss logged every step under `tags` (the PyTorch
    DCGAN tutorial's names). Adam (betas 0.5, 0.999) on the logistic loss, or SGD on the least
    squares one (`least_squares`, LSGAN's). Its discriminator's loss climbs from its first steps'
    low toward log 4 as the generator learns; its generator's wanders. Returns the first step
    whose losses were NaN/Inf (None if none), where it stops."""
    import torch
    from torch.utils.tensorboard import SummaryWriter

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    nn = torch.nn
    generator = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2))
    discriminator = nn.Sequential(nn.Linear(2, 64), nn.LeakyReLU(0.2), nn.Linear(64, 1))
    if least_squares:
        def judge(out, target):
            return ((out - target) ** 2).mean()
        opt_g = torch.optim.SGD(generator.parameters(), lr)
        opt_d = torch.optim.SGD(discriminator.parameters(), lr)
    else:
        judge = nn.BCEWithLogitsLoss()
        opt_g = torch.optim.Adam(generator.parameters(), lr, betas=(0.5, 0.999))
        opt_d = torch.optim.Adam(discriminator.parameters(), lr, betas=(0.5, 0.999))
    ones, zeros = torch.ones(64, 1), torch.zeros(64, 1)
    with SummaryWriter(str(logdir)) as w:
        for step in range(steps):
            angle = torch.randint(0, 8, (64,)).float() * (math.pi / 4)
            real = 2 * torch.stack([angle.cos(), angle.sin()], 1) + 0.05 * torch.randn(64, 2)
            fake = generator(torch.randn(64, 8))
            loss_d = judge(discriminator(real), ones) + judge(discriminator(fake.detach()), zeros)
            opt_d.zero_grad()
            loss_d.backward()
            opt_d.step()
            loss_g = judge(discriminator(fake), ones)
            opt_g.zero_grad()
            loss_g.backward()
            opt_g.step()
            d, g = loss_d.item(), loss_g.item()
            w.add_scalar(tags[0], d, step)
            w.add_scalar(tags[1], g, step)
            if not (math.isfinite(d) and math.isfinite(g)):
                return step
    return None


def train_resumed_jobs(first_dir, second_dir, seed: int, crash_at: int, checkpoint_at: int, steps: int,
                       batch: int = 32, lr: float = 0.05) -> None:
    """A noisy classifier (an MLP over 20 inputs into 5 classes whose labels carry noise, SGD with
    momentum 0.9, minibatches of `batch`) trained by two jobs, each logging every step with its own
    SummaryWriter, as the HuggingFace Trainer writes each job to a new directory: the first logs
    from step 0 into `first_dir` and dies at `crash_at`; the second restarts from the model and
    optimizer as they were at `checkpoint_at` and logs from there to `steps` into `second_dir`."""
    import copy

    import torch
    from torch.utils.tensorboard import SummaryWriter

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    weights = torch.randn(20, 5)
    x, y = noisy_classes(weights, 6000)
    model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 5))
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    checkpoint = None
    writer = SummaryWriter(str(first_dir))
    step = 0
    while step < steps:
        if step == checkpoint_at and checkpoint is None:
            checkpoint = copy.deepcopy((model.state_dict(), opt.state_dict()))
        if step == crash_at and writer is not None and checkpoint is not None:
            writer.close()  # the job dies; another loads the checkpoint and logs anew
            model.load_state_dict(checkpoint[0])
            opt.load_state_dict(checkpoint[1])
            step = checkpoint_at
            writer = SummaryWriter(str(second_dir))
            crash_at = -1
        idx = torch.randint(0, 5000, (batch,))
        loss = loss_fn(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), math.inf)
        opt.step()
        writer.add_scalar("Loss/train", loss.item(), step)
        writer.add_scalar("Grad/norm", gnorm.item(), step)
        writer.add_scalar("LR", lr, step)
        step += 1
    writer.close()


def _step_and_log(w, step: int, model, opt, loss, lr: float, log: bool = True) -> None:
    """One optimizer step on `loss`, logged (if `log`) under the tags of train_logged: the loss, the
    global grad norm of the parameters that train, the learning rate."""
    import torch

    opt.zero_grad()
    loss.backward()
    gnorm = torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], math.inf)
    opt.step()
    if not log:
        return
    w.add_scalar("Loss/train", loss.item(), step)
    w.add_scalar("Grad/norm", gnorm.item(), step)
    w.add_scalar("LR", lr, step)


def train_unfreezing(logdir, seed: int, unfreeze_at: int, steps: int) -> None:
    """Transfer learning's gradual unfreezing: a ReLU MLP (two hidden layers of 64) classifying 20
    inputs into 5 classes whose labels carry noise trains its head alone with Adam (3e-3) until
    `unfreeze_at`, then every layer at 5e-4; minibatches of 64, logged every step under the tags of
    train_logged. The grad norm of the whole network, measured over the parameters that train, jumps
    ~10x at the unfreezing and stays there while the loss falls faster."""
    import torch
    from torch.utils.tensorboard import SummaryWriter

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    weights = torch.randn(20, 5)
    x, y = noisy_classes(weights, 5000)
    nn = torch.nn
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 5))
    body = list(model[:4].parameters())
    for p in body:
        p.requires_grad_(False)
    lr = 3e-3
    opt = torch.optim.Adam(model[4].parameters(), lr)
    with SummaryWriter(str(logdir)) as w:
        for step in range(steps):
            if step == unfreeze_at:
                for p in body:
                    p.requires_grad_(True)
                lr = 5e-4
                opt = torch.optim.Adam(model.parameters(), lr)
            idx = torch.randint(0, x.shape[0], (64,))
            _step_and_log(w, step, model, opt, nn.functional.cross_entropy(model(x[idx]), y[idx]), lr)


def train_unfreezing_layerwise(logdir, seed: int, every: int, steps: int) -> None:
    """Gradual unfreezing layer by layer (ULMFiT): a ReLU MLP (three hidden layers of 128) classifying
    32 inputs into 10 classes whose labels carry noise trains its head alone with AdamW (1e-3), then
    unfreezes its top hidden layer at `every`, the next at 2 x `every`, the first at 3 x `every`;
    minibatches of 32, logged every step under the tags of train_logged. At each unfreezing the grad
    norm over the parameters that train steps up several-fold and stays there."""
    import torch
    from torch.utils.tensorboard import SummaryWriter

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    x, y = noisy_classes(torch.randn(32, 10), 5000)
    nn = torch.nn
    body = [nn.Sequential(nn.Linear(32, 128), nn.ReLU()), nn.Sequential(nn.Linear(128, 128), nn.ReLU()),
            nn.Sequential(nn.Linear(128, 128), nn.ReLU())]
    model = nn.Sequential(*body, nn.Linear(128, 10))
    for p in model[:3].parameters():
        p.requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), 1e-3)
    with SummaryWriter(str(logdir)) as w:
        for step in range(steps):
            if step and step % every == 0 and step // every <= len(body):
                for p in body[-(step // every)].parameters():
                    p.requires_grad_(True)
            idx = torch.randint(0, x.shape[0], (32,))
            _step_and_log(w, step, model, opt, nn.functional.cross_entropy(model(x[idx]), y[idx]), 1e-3)


def train_mixup(logdir, seed: int, steps: int, alpha: float = 0.4, every: int = 1) -> None:
    """Mixup (Zhang et al., 2018): a ReLU MLP (one hidden layer of 256) classifying 32 inputs into 10
    classes whose labels carry noise trains with SGD (0.05, momentum 0.9) on minibatches of 64 whose
    inputs are mixed two by two with a weight drawn from Beta(alpha, alpha) each step, the loss mixed
    alike; logged every `every` steps (at the step ending each stretch, as Lightning's
    `log_every_n_steps`: that step's batch alone) under the tags of train_logged. Most weights fall near 0 or 1 (a clean
    batch); a batch mixed near half and half costs 3-4x a clean one, so the per-step loss falls into
    two populations."""
    import torch
    from torch.utils.tensorboard import SummaryWriter

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    weights = torch.randn(32, 10)
    x = torch.randn(5000, 32)
    y = (x @ weights + 1.5 * torch.randn(5000, 10)).argmax(1)
    nn = torch.nn
    model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), 0.05, momentum=0.9)
    beta = torch.distributions.Beta(alpha, alpha)
    with SummaryWriter(str(logdir)) as w:
        for step in range(steps):
            a, b = torch.randint(0, 5000, (64,)), torch.randint(0, 5000, (64,))
            mix = float(beta.sample())
            out = model(mix * x[a] + (1 - mix) * x[b])
            loss = mix * nn.functional.cross_entropy(out, y[a]) + (1 - mix) * nn.functional.cross_entropy(out, y[b])
            _step_and_log(w, step, model, opt, loss, 0.05, log=(step + 1) % every == 0)


def train_contrastive(logdir, seed: int, steps: int) -> None:
    """SimCLR-style contrastive learning: a ReLU MLP (32 -> 128 -> 32) embeds two noisy views of
    each of 64 inputs (Adam 1e-3); the NT-Xent loss (temperature 0.2) asks each view to find its
    pair among the other 127. It starts near 2, halves within ~30 steps as the views' pairs become
    easy, then creeps down to ~0.9; logged every step under the tags of train_logged."""
    import torch
    from torch.utils.tensorboard import SummaryWriter

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    base = torch.randn(6000, 32) @ torch.randn(32, 32)
    nn = torch.nn
    model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 32))
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    pairs = torch.cat([torch.arange(64, 128), torch.arange(0, 64)])
    itself = torch.eye(128, dtype=torch.bool)
    with SummaryWriter(str(logdir)) as w:
        for step in range(steps):
            i = torch.randint(0, 6000, (64,))
            views = torch.cat([model(base[i] + 0.5 * torch.randn(64, 32)), model(base[i] + 0.5 * torch.randn(64, 32))])
            z = nn.functional.normalize(views, dim=1)
            loss = nn.functional.cross_entropy((z @ z.T / 0.2).masked_fill(itself, -1e9), pairs)
            _step_and_log(w, step, model, opt, loss, 1e-3)


def train_with_inputs_changed(logdir, seed: int, change_at: int, steps: int, every_eval: int = 50) -> None:
    """A ReLU MLP with BatchNorm classifying 20 inputs into 5 classes whose labels carry noise (Adam 1e-3,
    minibatches of 64), its train loss logged every step and its validation loss (in eval mode, on
    held-out data) every `every_eval` steps, under `Loss/train` and `Loss/val`. From `change_at` on the
    training inputs are preprocessed otherwise (scaled 10x and shifted by 3: an unnormalised pipeline);
    the validation inputs are not. In train mode BatchNorm normalises each batch, so the train loss barely
    notices; its running statistics follow the new inputs, and the validation loss jumps."""
    import torch
    from torch.utils.tensorboard import SummaryWriter

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    weights = torch.randn(20, 5)
    x, y = noisy_classes(weights, 5000)
    xv, yv = noisy_classes(weights, 500)
    nn = torch.nn
    model = nn.Sequential(nn.Linear(20, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 64), nn.BatchNorm1d(64),
                          nn.ReLU(), nn.Linear(64, 5))
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    with SummaryWriter(str(logdir)) as w:
        for step in range(steps):
            idx = torch.randint(0, x.shape[0], (64,))
            inputs = x[idx] * 10.0 + 3.0 if step >= change_at else x[idx]
            loss = nn.functional.cross_entropy(model(inputs), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            w.add_scalar("Loss/train", loss.item(), step)
            if step % every_eval == 0:
                model.eval()
                with torch.no_grad():
                    w.add_scalar("Loss/val", nn.functional.cross_entropy(model(xv), yv).item(), step)
                model.train()


def train_with_an_empty_evaluation(logdir, seed: int, empty_at: int, steps: int, every_eval: int = 50) -> None:
    """A ReLU MLP classifying 20 inputs into 5 classes whose labels carry noise (Adam 1e-3, minibatches of
    64), its train loss logged every step and its validation loss every `every_eval` steps under
    `Loss/train` and `Loss/val`, as the mean of its batches' losses. The evaluation at `empty_at` gets no
    batch (an exhausted iterator reused): the mean of nothing is NaN, while training goes on."""
    import torch
    from torch.utils.tensorboard import SummaryWriter

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    weights = torch.randn(20, 5)
    x, y = noisy_classes(weights, 5000)
    xv, yv = x[4000:], y[4000:]
    nn = torch.nn
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    with SummaryWriter(str(logdir)) as w:
        for step in range(steps):
            idx = torch.randint(0, 4000, (64,))
            loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            w.add_scalar("Loss/train", loss.item(), step)
            if step % every_eval == 0:
                batches = [] if step == empty_at else list(zip(xv.split(250), yv.split(250)))
                with torch.no_grad():
                    losses = [nn.functional.cross_entropy(model(a), b) for a, b in batches]
                w.add_scalar("Loss/val", torch.tensor(losses).mean().item(), step)


def train_skipping_a_nan_batch(logdir, seed: int, nan_at: int, steps: int) -> None:
    """A ReLU MLP classifying 20 inputs into 5 classes whose labels carry noise (Adam 1e-3, minibatches
    of 64), its train loss and grad norm logged every step under `Loss/train` and `Grad/norm`. The batch
    at `nan_at` holds a sample with a NaN feature (a corrupt record): its loss is NaN, which is logged,
    and the loop's guard skips the update, as loops that check `torch.isfinite(loss)` do; training goes
    on."""
    import torch
    from torch.utils.tensorboard import SummaryWriter

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    weights = torch.randn(20, 5)
    x, y = noisy_classes(weights, 5000)
    nn = torch.nn
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    with SummaryWriter(str(logdir)) as w:
        for step in range(steps):
            idx = torch.randint(0, x.shape[0], (64,))
            inputs = x[idx].clone()
            if step == nan_at:
                inputs[0, 3] = float("nan")
            loss = nn.functional.cross_entropy(model(inputs), y[idx])
            opt.zero_grad()
            w.add_scalar("Loss/train", loss.item(), step)
            if not torch.isfinite(loss):
                continue  # the guard: no backward, no step
            loss.backward()
            gnorm = nn.utils.clip_grad_norm_(model.parameters(), math.inf)
            opt.step()
            w.add_scalar("Grad/norm", gnorm.item(), step)


def train_diffusion(logdir, seed: int, lr: float, steps: int, every_eval: int = 100) -> None:
    """A denoising diffusion model (DDPM, 100 noise levels) learning a 2-D swiss roll: a ReLU MLP
    (three hidden layers of 128) given the noised point and a sinusoidal embedding of its noise
    level predicts the noise, trained with Adam at a constant `lr` on batches of 128 with the
    MSE, as diffusion models train. The train loss and grad norm are logged every step and the
    loss on 1024 held-out points (at fixed noise draws) every `every_eval` steps, under
    `Loss/train`, `Grad/norm`, `LR` and `Loss/val`. The loss falls from ~1 to ~0.6 in the first
    few hundred steps, then stays there within ±20 % batch to batch while the held-out loss keeps
    improving slowly: most of the noise is unpredictable at high noise levels."""
    import torch

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    nn = torch.nn
    levels = 100
    kept = torch.cumprod(1 - torch.linspace(1e-4, 0.02, levels), 0)  # the signal's share at each level
    freqs = torch.exp(torch.linspace(0, 4, 8))

    def roll(n, generator=None):
        t = 1.5 * math.pi * (1 + 2 * torch.rand(n, generator=generator))
        x = torch.stack([t * torch.cos(t), t * torch.sin(t)], 1) / 10
        return x + 0.05 * torch.randn(x.shape, generator=generator)

    model = nn.Sequential(nn.Linear(18, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 128),
                          nn.ReLU(), nn.Linear(128, 2))

    def loss_of(x0, generator=None):
        t = torch.randint(0, levels, (x0.shape[0],), generator=generator)
        noise = torch.randn(x0.shape, generator=generator)
        noised = kept[t].sqrt()[:, None] * x0 + (1 - kept[t]).sqrt()[:, None] * noise
        angle = t[:, None].float() / levels * freqs
        return ((model(torch.cat([noised, angle.sin(), angle.cos()], 1)) - noise) ** 2).mean()

    held_out = roll(1024, torch.Generator().manual_seed(seed + 1000))
    _train_adam(logdir, model, lr, steps, lambda: loss_of(roll(128)),
                lambda: loss_of(held_out, torch.Generator().manual_seed(0)), every_eval)


def _train_adam(logdir, model, lr: float, steps: int, batch_loss, held_out_loss, every_eval: int) -> None:
    """Adam at a constant `lr` on `batch_loss()` for `steps` steps, logging the loss, the global grad
    norm and the learning rate every step, and `held_out_loss()` every `every_eval`, under
    `Loss/train`, `Grad/norm`, `LR` and `Loss/val`."""
    import torch
    from torch.utils.tensorboard import SummaryWriter

    opt = torch.optim.Adam(model.parameters(), lr)
    with SummaryWriter(str(logdir)) as w:
        for step in range(steps):
            loss = batch_loss()
            opt.zero_grad()
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), math.inf)
            opt.step()
            w.add_scalar("Loss/train", loss.item(), step)
            w.add_scalar("Grad/norm", gnorm.item(), step)
            w.add_scalar("LR", lr, step)
            if step % every_eval == every_eval - 1:
                with torch.no_grad():
                    w.add_scalar("Loss/val", held_out_loss().item(), step)


def train_rnn_that_cannot_learn(logdir, seed: int, steps: int, lr: float = 1e-2) -> None:
    """A vanilla tanh RNN (64 units) asked for the sum of the first 10 of 50 random inputs, read at
    the last step: the memory a plain RNN cannot keep over 40 steps. SGD with momentum 0.9 at `lr`,
    batches of 32, MSE; the loss, grad norm and learning rate logged every step under the tags of
    train_logged. The model never learns: its per-batch loss wanders between ~4 and ~16 around the
    targets' variance (10), and its grad norm between ~0.1 and ~3."""
    import torch
    from torch.utils.tensorboard import SummaryWriter

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    nn = torch.nn
    cell = nn.RNN(1, 64, batch_first=True)
    head = nn.Linear(64, 1)
    params = list(cell.parameters()) + list(head.parameters())
    opt = torch.optim.SGD(params, lr=lr, momentum=0.9)
    with SummaryWriter(str(logdir)) as w:
        for step in range(steps):
            x = torch.randn(32, 50, 1)
            out, _ = cell(x)
            loss = nn.functional.mse_loss(head(out[:, -1]), x[:, :10].sum(1))
            opt.zero_grad()
            loss.backward()
            gnorm = nn.utils.clip_grad_norm_(params, math.inf)
            opt.step()
            w.add_scalar("Loss/train", loss.item(), step)
            w.add_scalar("Grad/norm", gnorm.item(), step)
            w.add_scalar("LR", lr, step)


def _overfitting_classifier(seed: int, epochs: int, samples: int, on_step, on_epoch) -> int:
    """A ReLU MLP (two hidden layers of 256) classifying 20 inputs into 10 classes whose labels carry
    noise, trained with Adam (1e-3) on `samples` of them in batches of 50 for `epochs` epochs: it
    overfits. Calls on_step(step, train loss) after each update and on_epoch(epoch, last step,
    validation loss on 1000 held-out samples) after each epoch; returns the steps per epoch."""
    import torch

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    weights = torch.randn(20, 10)
    x, y = noisy_classes(weights, samples)
    xv, yv = noisy_classes(weights, 1000)
    nn = torch.nn
    model = nn.Sequential(nn.Linear(20, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    step = 0
    for epoch in range(epochs):
        for batch in torch.randperm(samples).split(50):
            loss = nn.functional.cross_entropy(model(x[batch]), y[batch])
            opt.zero_grad()
            loss.backward()
            opt.step()
            on_step(step, loss.item())
            step += 1
        with torch.no_grad():
            on_epoch(epoch, step - 1, nn.functional.cross_entropy(model(xv), yv).item())
    return step // epochs


def train_logging_val_by_epoch(by_epoch_dir, by_step_dir, seed: int, epochs: int, samples: int = 400) -> int:
    """The overfitting classifier (`_overfitting_classifier`), its train loss logged at every step,
    its validation loss at each epoch's end, into two logs at once: `by_epoch_dir` numbers the
    validation loss by epoch (`add_scalar("Loss/val", v, epoch)`, a common slip), `by_step_dir` by
    the last step of the epoch. Returns the steps per epoch."""
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(str(by_epoch_dir)) as by_epoch, SummaryWriter(str(by_step_dir)) as by_step:
        def on_step(step, loss):
            for w in (by_epoch, by_step):
                w.add_scalar("Loss/train", loss, step)

        def on_epoch(epoch, step, val):
            by_epoch.add_scalar("Loss/val", val, epoch)
            by_step.add_scalar("Loss/val", val, step)

        return _overfitting_classifier(seed, epochs, samples, on_step, on_epoch)


def train_in_estimator_layout(model_dir, seed: int, epochs: int, samples: int = 400) -> int:
    """The overfitting classifier logged as a TF Estimator lays its logs out: `loss` and
    `learning_rate` at every step in the model directory itself, the evaluation's `loss` at each
    epoch's last step in `eval/` under it. Returns the steps per epoch."""
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(str(model_dir)) as train, SummaryWriter(str(model_dir / "eval")) as evaluation:
        def on_step(step, loss):
            train.add_scalar("loss", loss, step)
            train.add_scalar("learning_rate", 1e-3, step)

        def on_epoch(epoch, step, val):
            evaluation.add_scalar("loss", val, step)

        return _overfitting_classifier(seed, epochs, samples, on_step, on_epoch)


def train_gaussian_likelihood(logdir, seed: int, lr: float, steps: int, every_eval: int = 100) -> None:
    """A heteroscedastic regression trained on its Gaussian negative log-likelihood (torch's
    gaussian_nll_loss, the variance a softplus head): the targets' noise is small where the model
    can predict them well, so the NLL falls from ~1.1 through zero to about -0.2 and wanders around
    it, sign and all. A ReLU MLP (two hidden layers of 64), Adam at a constant `lr`, batches of 64;
    `Loss/train`, `Grad/norm` and `LR` every step, the NLL of 2000 held-out points every `every_eval`."""
    import torch

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    nn = torch.nn

    def sample(n):
        x = torch.rand(n, 4) * 4 - 2
        mean = torch.sin(2 * x[:, 0]) + x[:, 1] * x[:, 2]
        return x, (mean + (0.05 + 0.5 * x[:, 3].abs()) * torch.randn(n))[:, None]

    model = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2))

    def nll(x, y):
        out = model(x)
        return nn.functional.gaussian_nll_loss(out[:, :1], y, nn.functional.softplus(out[:, 1:]) + 1e-6)

    held_out = sample(2000)
    _train_adam(logdir, model, lr, steps, lambda: nll(*sample(64)), lambda: nll(*held_out), every_eval)


def train_flow(logdir, seed: int, lr: float, steps: int, every_eval: int = 100) -> None:
    """A normalizing flow (six affine coupling layers, RealNVP-style, each a ReLU MLP of 64 with
    tanh-bounded scales) fitting a thin 2-D ring by maximum likelihood: the NLL falls from ~2 to
    about -0.9, and the grad norm, ~5 at the start, settles around 10-20 with a heavy tail: single
    batches reach 5-10x its median now and then, and the loss does not move. Adam at a constant
    `lr`, batches of 128; logged as train_gaussian_likelihood logs."""
    import torch

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    nn = torch.nn

    class Coupling(nn.Module):
        def __init__(self, flip: bool):
            super().__init__()
            self.flip = flip
            self.net = nn.Sequential(nn.Linear(1, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2))

        def forward(self, x):
            kept, moved = (x[:, 1:], x[:, :1]) if self.flip else (x[:, :1], x[:, 1:])
            out = self.net(kept)
            log_scale = torch.tanh(out[:, :1])
            moved = moved * torch.exp(log_scale) + out[:, 1:]
            y = torch.cat([moved, kept], 1) if self.flip else torch.cat([kept, moved], 1)
            return y, log_scale.sum(1)

    model = nn.Sequential(*(Coupling(i % 2 == 1) for i in range(6)))

    def nll(x):
        log_det = 0
        for layer in model:
            x, d = layer(x)
            log_det = log_det + d
        return (0.5 * (x ** 2).sum(1) + math.log(2 * math.pi) - log_det).mean()

    def ring(n):
        angle = torch.rand(n) * 2 * math.pi
        radius = 1 + 0.05 * torch.randn(n)
        return torch.stack([radius * angle.cos(), radius * angle.sin()], 1) * 0.5

    held_out = ring(2000)
    _train_adam(logdir, model, lr, steps, lambda: nll(ring(128)), lambda: nll(held_out), every_eval)


def train_char_lm_overshoot(logdir, seed: int, peak_lr: float, steps: int, warmup: int = 300, every: int = 5) -> None:
    """A character-level transformer language model (two post-norm encoder layers of width 64 under a
    causal mask, windows of 32) on made-up Zipf-distributed words (27 symbols), trained with Adam under
    a linear warm-up to `peak_lr` over `warmup` steps, then constant; the loss, grad norm and learning
    rate logged every `every` steps under the tags of train_logged. At a peak of 0.06 the model learns
    within its first ~100 steps (3.4 -> 1.9), then, as the rate climbs, gives back a fifth of what it
    learnt and stays there (~2.3); at 0.1 and more it loses more (~2.6), at 1e-3 it learns on."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    symbols, window = 27, 32
    # The text: 300 made-up words of 2-7 letters (letters and words both Zipf-distributed, as in a
    # language), the same for every seed, separated by spaces (symbol 0).
    chain = torch.Generator().manual_seed(1234)

    def zipf(n):
        return 1.0 / torch.arange(1, n + 1, dtype=torch.float64)

    words = [(torch.multinomial(zipf(26), int(torch.randint(2, 8, (1,), generator=chain)), replacement=True,
                                generator=chain) + 1).tolist() for _ in range(300)]
    text = []
    for w in torch.multinomial(zipf(300), 4000, replacement=True, generator=chain).tolist():
        text += words[w] + [0]
    data = torch.tensor(text)
    starts = torch.arange(0, data.shape[0] - window - 1)
    x = torch.stack([data[s : s + window] for s in starts.tolist()])
    y = torch.stack([data[s + 1 : s + window + 1] for s in starts.tolist()])

    class CharLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(symbols, 64)
            self.pos = nn.Parameter(torch.zeros(window, 64))
            layer = nn.TransformerEncoderLayer(64, 4, 128, 0.0, batch_first=True)
            self.blocks = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = nn.Linear(64, symbols)
            self.register_buffer("mask", torch.triu(torch.full((window, window), float("-inf")), 1))

        def forward(self, tokens):
            return self.head(self.blocks(self.emb(tokens) + self.pos, mask=self.mask))

    def loss_fn(logits, targets):
        return nn.functional.cross_entropy(logits.reshape(-1, symbols), targets.reshape(-1))

    train_logged(logdir, CharLM(), x, y, loss_fn, lambda s: peak_lr * min(1.0, (s + 1) / warmup), steps, 32,
                 adam=True, every=every)


def train_linear_classifier(logdir, seed: int, steps: int, every: int) -> None:
    """A linear classifier of 16 inputs into 4 classes of `noisy_classes` (4 096 samples: labels no
    classifier gets all right) with Adam (1e-2) in minibatches of 64, logged every `every` steps under
    the tags of train_logged: its cross-entropy falls from ~1.4 to its floor (~0.3, the labels'
    noise) within a few hundred steps, then hovers there, each point one batch's loss."""
    import torch

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    x, y = noisy_classes(torch.randn(16, 4), 4096)
    train_logged(logdir, torch.nn.Linear(16, 4), x, y, torch.nn.functional.cross_entropy, lambda step: 1e-2,
                 steps, batch=64, adam=True, every=every)


def train_classifier_from_chance(logdir, seed: int, lr: float, steps: int, every: int) -> None:
    """A ReLU MLP (a hidden layer of 64) classifying 32 inputs into the 10 classes of `noisy_classes`
    (4 096 samples), its head's weights scaled to 0.6x so that its outputs start near uniform (the
    loss at chance, ln 10, each batch's ~0.5 % apart), with Adam at `lr` in minibatches of 64, logged
    every `every` steps under the tags of train_logged. At 1e-3 it learns to ~0.35 within 600 steps;
    at 1e-7 it stays at chance."""
    import torch

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    x, y = noisy_classes(torch.randn(32, 10), 4096)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    with torch.no_grad():
        model[2].weight.mul_(0.6)
    train_logged(logdir, model, x, y, torch.nn.functional.cross_entropy, lambda step: lr, steps, batch=64,
                 adam=True, every=every)


def train_by_epoch(logdir, seed: int, epochs: int, lr: float, growth: float = 1.0, weight_decay: float = 0.0,
                   adam: bool = False, ramp: float = 0.0) -> None:
    """A ReLU MLP (a hidden layer of 64) classifying the 10 classes of `noisy_classes` (2 048 samples)
    with SGD + momentum 0.9 (or Adam) in shuffled minibatches of 64, its learning rate (`lr` + `ramp`
    x epoch) x `growth` ** epoch, `weight_decay` x the weights added to their gradients (of the wrong
    sign if negative: the weights grow), logged as Keras logs an epoch: the mean of its batches' losses
    as `epoch_loss` and the rate as `epoch_learning_rate`, at step = epoch. It stops after the first
    non-finite epoch."""
    import torch
    from torch.utils.tensorboard import SummaryWriter

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    x, y = noisy_classes(torch.randn(32, 10), 2048)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    opt = (torch.optim.Adam(model.parameters(), lr=lr) if adam
           else torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9))
    with SummaryWriter(str(logdir)) as w:
        for epoch in range(epochs):
            rate = (lr + ramp * epoch) * growth**epoch
            for group in opt.param_groups:
                group["lr"] = rate
            order = torch.randperm(x.shape[0])
            losses = []
            for start in range(0, x.shape[0], 64):
                idx = order[start : start + 64]
                loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
                opt.zero_grad()
                loss.backward()
                if weight_decay:
                    for param in model.parameters():
                        param.grad.add_(param.detach(), alpha=weight_decay)
                opt.step()
                losses.append(loss.item())
            mean = sum(losses) / len(losses)
            w.add_scalar("epoch_loss", mean, epoch)
            w.add_scalar("epoch_learning_rate", rate, epoch)
            if not math.isfinite(mean):
                break


def train_memorising_classifier(logdir, seed: int, samples: int, steps: int) -> None:
    """A ReLU MLP (two hidden layers of 256) classifying 32 standard-normal inputs into 10 classes
    whose labels carry noise (the argmax of a random projection plus unit noise), trained on only
    `samples` of them (Adam 1e-3, minibatches of 64) and evaluated on 1 000 held out every 50 steps
    (the tags of `_train_adam`): its train loss falls three decades as it learns its few samples by
    heart, and its validation loss, after learning to ~0.4x its start, climbs back past half of it."""
    import torch

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    x = torch.randn(samples + 1000, 32)
    y = (x @ torch.randn(32, 10) + torch.randn(samples + 1000, 10)).argmax(1)
    nn = torch.nn
    model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    losses = _classification_losses(model, x[:samples], y[:samples], x[samples:], y[samples:])
    _train_adam(logdir, model, 1e-3, steps, *losses, every_eval=50)


def train_continual(logdir, seed: int, tasks: int, steps_per_task: int, every: int = 1) -> None:
    """Continual learning: a ReLU MLP (two hidden layers of 256) trained on `tasks` classification tasks
    in turn, `steps_per_task` steps each (Adam 1e-3, minibatches of 64), each task new inputs labelled
    by a new projection of them into 10 classes, logged under the tags of train_logged at every step
    whose number + 1 is a multiple of `every` (as Lightning's `log_every_n_steps`): at each switch the
    loss jumps 30-60x (the net's confident answers are wrong), then learns again."""
    import torch
    from torch.utils.tensorboard import SummaryWriter

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    data = []
    for _ in range(tasks):
        x = torch.randn(5000, 32)
        data.append((x, (x @ torch.randn(32, 10) + torch.randn(5000, 10)).argmax(1)))
    nn = torch.nn
    model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    with SummaryWriter(str(logdir)) as w:
        for step in range(tasks * steps_per_task):
            x, y = data[step // steps_per_task]
            idx = torch.randint(0, 5000, (64,))
            _step_and_log(w, step, model, opt, nn.functional.cross_entropy(model(x[idx]), y[idx]), 1e-3,
                          log=(step + 1) % every == 0)


def train_tiny_batch_norm(logdir, seed: int, steps: int, batch: int = 2) -> None:
    """A ReLU MLP with batch norm (32 -> 128 -> 10) trained by plain SGD at 0.05 on minibatches of
    `batch` (2: the batch statistics of two samples), logged every step under the tags of
    train_logged: its grad norm is heavy-tailed, a median near 5 with lone points over 100 now and
    then, while its loss learns slowly and never blows up."""
    import torch
    from torch.utils.tensorboard import SummaryWriter

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    x, y = noisy_classes(torch.randn(32, 10), 5000)
    nn = torch.nn
    model = nn.Sequential(nn.Linear(32, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), 0.05)
    with SummaryWriter(str(logdir)) as w:
        for step in range(steps):
            idx = torch.randint(0, 5000, (batch,))
            _step_and_log(w, step, model, opt, nn.functional.cross_entropy(model(x[idx]), y[idx]), 0.05)


def train_with_growing_weights(logdir, seed: int, steps: int, decay: float, lr: float = 0.01) -> int | None:
    """A ReLU MLP (a hidden layer of 64) classifying the 10 classes of `noisy_classes` (4 096 samples)
    with SGD + momentum 0.9 at `lr` in minibatches of 32, `decay` x the weights added to their
    gradients after the grad norm is taken (negative: a weight decay of the wrong sign, the weights
    growing by ~lr x |decay| / (1 - 0.9) a step), logged at every step under train_logged's tags.
    Returns the first step whose grad norm passed 100 (None if none), and stops 50 steps later."""
    import torch
    from torch.utils.tensorboard import SummaryWriter

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    x, y = noisy_classes(torch.randn(32, 10), 4096)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    crossed = None
    with SummaryWriter(str(logdir)) as w:
        for step in range(steps):
            idx = torch.randint(0, x.shape[0], (32,))
            loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), math.inf).item()
            for param in model.parameters():
                param.grad.add_(param.detach(), alpha=decay)
            opt.step()
            w.add_scalar("Loss/train", loss.item(), step)
            w.add_scalar("Grad/norm", gnorm, step)
            w.add_scalar("LR", lr, step)
            if crossed is None and gnorm > 100:
                crossed = step
            if crossed is not None and step >= crossed + 50:
                break
    return crossed
