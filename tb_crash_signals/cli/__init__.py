"""`tb-crash-signals`: scan a logdir headless, compact it, list the rules, write demo logs.

Exit codes (like ruff): 0 nothing at or above --fail-on, 1 found, 2 usage,
configuration or I/O error (one line on stderr, never a traceback). Each
command is a module of this package with `add_parser(subparsers)` and
`run(args) -> int`.
"""

from __future__ import annotations

import sys

from tb_crash_signals.cli import compact, demo, rules, scan
from tb_crash_signals.cli.common import EXIT_ERROR, EXIT_OK, Parser, fail

COMMANDS = {"scan": scan, "compact": compact, "rules": rules, "demo": demo}


def parser() -> Parser:
    from tb_crash_signals import __version__

    p = Parser(
        prog="tb-crash-signals",
        description="Find the signals of a training crash in TensorBoard logs: loss spikes, "
        "exploding or exponentially growing gradient norms, NaN, plateaus, overfitting, "
        "learning rates and update sizes out of band.",
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for command in COMMANDS.values():
        command.add_parser(sub)
    return p


def main(argv=None) -> int:
    """Runs the command line; returns the exit code (argparse's exits included)."""
    try:
        args = parser().parse_args(argv)
    except SystemExit as e:  # --help, --version, usage errors
        return e.code if isinstance(e.code, int) else EXIT_OK
    if args.command is None:
        parser().print_help(sys.stderr)
        return EXIT_ERROR
    try:
        return COMMANDS[args.command].run(args)
    except KeyboardInterrupt:
        return fail("interrupted")
    except BrokenPipeError:
        # `tb-crash-signals scan . | head`: the reader left; not an error of ours.
        sys.stderr.close()
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
