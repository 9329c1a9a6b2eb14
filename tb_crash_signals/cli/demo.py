"""`tb-crash-signals demo`: train the small numpy models and write the demo logs."""

from __future__ import annotations

import sys

from tb_crash_signals.cli.common import EXIT_OK, fail


def add_parser(sub) -> None:
    p = sub.add_parser(
        "demo", help="train small numpy models and write demo logs",
        description="Train small numpy models for real and write their TensorBoard logs.",
    )
    p.add_argument("outdir", metavar="OUTDIR", help="directory to write the demo runs into")


def run(args) -> int:
    from tb_crash_signals import demo

    try:
        runs = demo.generate(args.outdir)
    except OSError as e:
        return fail(f"{args.outdir}: {e.strerror or e}")
    sys.stdout.write(f"wrote {len(runs)} runs to {args.outdir}\n")
    return EXIT_OK
