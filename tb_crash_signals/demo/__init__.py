"""Demo logs from real (small) training runs, one crash story per run.

``python -m tb_crash_signals.demo OUTDIR`` (or ``tb-crash-signals demo
OUTDIR``) trains small networks with plain numpy -- forward pass, backprop and
the optimisers (SGD, momentum, Adam, AdamW) are written out below -- on
synthetic data drawn from fixed seeds, and logs them with TensorBoard's own
``EventFileWriter`` in the tag styles of the common training stacks. No
number in the logs is made up: every value is what the training produced.

Runs (style: story):

- ``hf/healthy`` (HF Trainer): AdamW, warm-up + linear decay, max_grad_norm 1.
- ``custom/healthy`` (custom loop): SGD + Nesterov momentum, cosine decay;
  the update-ratio baseline (~5e-3 falling to ~5e-5).
- ``lightning/grad-explosion`` (Lightning): Wide & Deep regressor, plain SGD,
  linear LR warm-up over 2500 steps to a peak twice the stability limit, no
  clipping. Once the LR passes the limit the grad norm grows exponentially
  (doubling every ~17 steps for ~90 steps), crosses 100, the deep part
  blows up, the loss overflows to inf, then NaN.
- ``pytorch/abrupt-nan`` (PyTorch SummaryWriter): Adam classifier; one record
  with a -inf feature (log of a zero count) turns loss, gradients and weights
  NaN in one step, with no precursor.
- ``pytorch/loss-spikes`` (PyTorch SummaryWriter): SGD + momentum, no
  clipping; four corrupted batches (two with shuffled labels, two with
  unnormalised x16 inputs) spike the loss 3-8x; training recovers (fast after
  the label ones, over ~20 steps after the input ones).
- ``keras/overfit`` (Keras sibling runs ``train`` / ``validation``): 256 noisy
  samples, 2x512 MLP, Adam, 100 epochs: train loss -> ~0.03, validation loss
  bottoms out at epoch 5 and ends ~2.3x higher.
- ``lightning/plateau`` (Lightning): StepLR(step_size=30, gamma=0.5) stepped
  every batch instead of every epoch: the LR is ~1e-6 by step 300; train
  loss flat, validation loss frozen.
- ``custom/lr-too-high`` (custom loop): SGD + momentum with lr=1.0 (meant
  0.01), clipped: update ratio ~0.2 at every step, loss bouncing around
  1.3-1.5 (chance is ln 5 = 1.61), never converging.

Everything except wall times (and event file names) is deterministic: the
same scalar values at the same steps on every generation, bit for bit
(float32 arithmetic, fixed seeds, OpenBLAS pinned to one thread while
generating -- with more BLAS threads, or another BLAS, the last bits differ).
Each run directory gets exactly one event file; event files an earlier
generation left in the directories written here are removed first.

TensorBoard's writer computes CRC32C in pure Python, so the runs are short
(1-2.5k steps, ~33k scalar events in all, ~2 MB).
"""

import sys
import time
from typing import Optional, Sequence

from tb_crash_signals.demo.runs import RUNS, generate

__all__ = ["RUNS", "generate", "main"]


def main(argv: Optional[Sequence[str]] = None) -> int:
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m tb_crash_signals.demo",
        description="Train small numpy models and write demo TensorBoard logs.",
    )
    p.add_argument("outdir", help="directory to write the runs into (created if missing)")
    p.add_argument("--run", action="append", choices=sorted(RUNS), help="only this run (repeatable)")
    args = p.parse_args(argv)
    t0 = time.time()
    names = generate(args.outdir, args.run)
    for n in names:
        print(n)
    print(f"wrote {len(names)} runs to {args.outdir} in {time.time() - t0:.1f}s", file=sys.stderr)
    return 0


