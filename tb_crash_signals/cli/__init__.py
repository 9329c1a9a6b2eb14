"""`tb-crash-signals`: scan a logdir headless, list the rules, write demo logs.

Exit codes (like ruff): 0 nothing at or above --fail-on, 1 found, 2 usage,
configuration or I/O error (one line on stderr, never a traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

from tb_crash_signals import __version__

EXIT_OK, EXIT_FOUND, EXIT_ERROR = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # usage errors exit 2 with one line, as argparse does
        self.print_usage(sys.stderr)
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="tb-crash-signals",
        description="Find the signals of a training crash in TensorBoard logs: loss spikes, "
        "exploding or exponentially growing gradient norms, NaN, plateaus, overfitting, "
        "learning rates and update sizes out of band.",
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    scan = sub.add_parser(
        "scan",
        help="analyse every run under a logdir",
        description="Analyse every run under LOGDIR at full resolution (every logged step) "
        "and report warning/critical episodes per run, sick runs first.",
        epilog="exit codes: 0 nothing at or above --fail-on; 1 found; "
        "2 usage, config or I/O error",
    )
    scan.add_argument("logdir", metavar="LOGDIR", help="directory of event files (as for tensorboard --logdir)")
    scan.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")
    scan.add_argument(
        "--fail-on", choices=("critical", "warning", "never"), default="critical",
        help="exit 1 when an episode of this severity or worse is found (default: critical)",
    )
    scan.add_argument("--config", metavar="FILE", help="TOML config (default: LOGDIR/crash_signals.toml if present)")
    scan.add_argument("--select", metavar="CODES", help="comma-separated rule codes or prefixes to run (e.g. CS1,CS201)")
    scan.add_argument("--ignore", metavar="CODES", help="comma-separated rule codes or prefixes to skip")
    scan.add_argument("--run", metavar="REGEX", help="only runs whose name matches this regex")

    rules = sub.add_parser(
        "rules", help="list the rule catalogue with its defaults",
        description="Print the rule catalogue with the parameters in force.",
    )
    rules.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    rules.add_argument("--config", metavar="FILE", help="TOML config whose parameters to show")

    demo = sub.add_parser(
        "demo", help="train small numpy models and write demo logs",
        description="Train small numpy models for real and write their TensorBoard logs.",
    )
    demo.add_argument("outdir", metavar="OUTDIR", help="directory to write the demo runs into")
    return p


def _fail(message: str) -> int:
    from tb_crash_signals.report.document import safe  # messages quote config keys and paths: escape them

    sys.stderr.write(f"tb-crash-signals: error: {safe(message)}\n")
    return EXIT_ERROR


def _progress_printer():
    if not sys.stderr.isatty():
        return None

    def show(done, total, name):
        if total < 20:
            return
        end = "\n" if done == total else ""
        sys.stderr.write(f"\r\x1b[Kscanning {done}/{total} runs" + end)
        sys.stderr.flush()

    return show


def _exit_code(report: dict, fail_on: str) -> int:
    if fail_on == "never":
        return EXIT_OK
    levels = ("critical",) if fail_on == "critical" else ("critical", "warning")
    found = any(e["severity"] in levels for r in report["runs"] for e in r["episodes"])
    return EXIT_FOUND if found else EXIT_OK


def _keep_freed_memory() -> None:
    """Lets glibc reuse freed big blocks instead of returning them to the OS.

    The rules make many short-lived arrays of 8 MB per million points; by
    default each comes from a fresh mmap whose pages are faulted in (zeroed)
    again, which costs about as much as the arithmetic. A short-lived `scan`
    process can keep them (bench/bench_engine.py --malloc-tuned: ~1.5x faster
    analyses). Not done in TensorBoard's long-lived process. No-op elsewhere.
    """
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 30)  # M_MMAP_THRESHOLD: blocks up to 1 GiB from the heap
        libc.mallopt(-1, 1 << 31)  # M_TRIM_THRESHOLD: keep up to 2 GiB of free heap
    except (OSError, AttributeError):
        pass


def _scan(args) -> int:
    from tb_crash_signals.analysis.config import ConfigError, config_for_logdir
    from tb_crash_signals.report.document import format_text
    from tb_crash_signals.scan import scan_logdir

    _keep_freed_memory()
    if not os.path.isdir(args.logdir):
        return _fail(f"{args.logdir}: not a directory")
    try:
        config = config_for_logdir(args.logdir, args.config)
        config = config.with_selection(select=args.select, ignore=args.ignore)
    except ConfigError as e:
        return _fail(str(e))
    run_filter = None
    if args.run is not None:
        try:
            run_filter = re.compile(args.run)
        except re.error as e:
            return _fail(f"--run: invalid regex {args.run!r}: {e}")
    try:
        report = scan_logdir(args.logdir, config, run_filter, progress=_progress_printer())
    except OSError as e:
        return _fail(f"{args.logdir}: {e.strerror or e}")
    if args.format == "json":
        json.dump(report, sys.stdout, indent=1, allow_nan=False)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_text(report))
    return _exit_code(report, args.fail_on)


def _rules(args) -> int:
    from tb_crash_signals.analysis.catalogue import catalogue_json, catalogue_markdown, catalogue_text
    from tb_crash_signals.analysis.config import Config, ConfigError, load_config

    try:
        config = load_config(args.config) if args.config else Config()
    except ConfigError as e:
        return _fail(str(e))
    if args.format == "json":
        json.dump(catalogue_json(config), sys.stdout, indent=1)
        sys.stdout.write("\n")
    elif args.format == "markdown":
        sys.stdout.write(catalogue_markdown(config))
    else:
        sys.stdout.write(catalogue_text(config))
    return EXIT_OK


def _demo(args) -> int:
    from tb_crash_signals import demo

    try:
        runs = demo.generate(args.outdir)
    except OSError as e:
        return _fail(f"{args.outdir}: {e.strerror or e}")
    sys.stdout.write(f"wrote {len(runs)} runs to {args.outdir}\n")
    return EXIT_OK


def main(argv=None) -> int:
    """Runs the command line; returns the exit code (argparse's exits included)."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:  # --help, --version, usage errors
        return e.code if isinstance(e.code, int) else EXIT_OK
    if args.command is None:
        _parser().print_help(sys.stderr)
        return EXIT_ERROR
    handler = {"scan": _scan, "rules": _rules, "demo": _demo}[args.command]
    try:
        return handler(args)
    except KeyboardInterrupt:
        return _fail("interrupted")
    except BrokenPipeError:
        # `tb-crash-signals scan . | head`: the reader left; not an error of ours.
        sys.stderr.close()
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
