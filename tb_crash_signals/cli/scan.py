"""`tb-crash-signals scan`: analyse every run under a logdir at full resolution."""

from __future__ import annotations

import contextlib
import re
import sys

from tb_crash_signals.cli.common import EXIT_FOUND, EXIT_OK, fail
from tb_crash_signals.executors import default_jobs


def add_parser(sub) -> None:
    p = sub.add_parser(
        "scan",
        help="analyse every run under a logdir",
        description="Analyse every run under LOGDIR at full resolution (every logged step) "
        "and report warning/critical episodes per run, sick runs first.",
        epilog="exit codes: 0 nothing at or above --fail-on; 1 found; "
        "2 usage, config or I/O error, or no runs under LOGDIR",
    )
    p.add_argument(
        "logdir", metavar="LOGDIR",
        help="directory of event files (as for tensorboard --logdir), or a URL such as s3://bucket/logs "
        "or gs://bucket/logs (needs the [s3] or [gcs] extra; credentials as for the AWS or Google tools)",
    )
    p.add_argument(
        "--format", choices=("text", "json", "github"), default="text",
        help="output format: text (default), json (the report document), github (one GitHub Actions "
        "annotation per incident: ::error for critical, ::warning for warning)",
    )
    p.add_argument("--verbose", "-v", action="store_true", help="text: every episode beneath its incident")
    p.add_argument(
        "--fail-on", choices=("critical", "warning", "never"), default="critical",
        help="exit 1 when an episode of this severity or worse is found (default: critical)",
    )
    p.add_argument("--config", metavar="FILE", help="TOML config (default: LOGDIR/crash_signals.toml if present)")
    p.add_argument("--select", metavar="CODES", help="comma-separated rule codes or prefixes to run (e.g. CS1,CS201)")
    p.add_argument("--ignore", metavar="CODES", help="comma-separated rule codes or prefixes to skip")
    p.add_argument("--run", metavar="REGEX", help="only runs whose name matches this regex")
    p.add_argument(
        "--by-hparams", action="store_true",
        help="read each run's hyperparameters (TensorBoard hparams data, Lightning hparams.yaml, "
        "key=value run names) and state, per sweep folder, which ones the sick runs share",
    )
    # -- fanning out (tb_crash_signals/fanout.py) --
    p.add_argument(
        "--jobs", "-j", metavar="N", type=_positive_int, default=None,
        help=f"worker processes reading and analysing runs (default: this machine's cores, {default_jobs()}; "
        "small logdirs are scanned in this process); the report is the same for any N",
    )
    p.add_argument(
        "--executor", metavar="SPEC", default=None,
        help="where the runs are read and analysed: 'local' (default: --jobs processes here) or "
        "dask://HOST:PORT, the scheduler of a running Dask cluster (needs the [dask] extra here and "
        "tb-crash-signals on its workers, which read the logdir themselves)",
    )


def _positive_int(text: str) -> int:
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


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


def exit_code(report: dict, fail_on: str) -> int:
    if fail_on == "never":
        return EXIT_OK
    levels = ("critical",) if fail_on == "critical" else ("critical", "warning")
    found = any(e["severity"] in levels for r in report["runs"] for e in r["episodes"])
    return EXIT_FOUND if found else EXIT_OK


def keep_freed_memory() -> None:
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


def _no_runs_message(args, storage) -> str:
    """Why a scan found nothing: a CI job pointed at a wrong path must not pass quietly."""
    from tb_crash_signals.ingest.reader import discover_runs
    from tb_crash_signals.ingest.redact import redact

    where = redact(args.logdir)
    try:
        found = discover_runs(args.logdir, storage)
    except Exception:  # only the wording of the error line depends on it
        found = []
    if found and args.run is not None:
        return f"no run under {where} matches --run {args.run!r}"
    if found:
        return f"no scalar data in the TensorBoard event files under {where}"
    return f"no TensorBoard event files under {where}"


def run(args) -> int:
    from tb_crash_signals.analysis.config import ConfigError
    from tb_crash_signals.cli.logdirs import LogdirError, logdir_config, open_logdir
    from tb_crash_signals.executors import ExecutorError, executor_for
    from tb_crash_signals.ingest.redact import redact
    from tb_crash_signals.ingest.storage import StorageError
    from tb_crash_signals.report.formats import FORMATS
    from tb_crash_signals.scan import scan_logdir

    keep_freed_memory()
    try:
        storage = open_logdir(args.logdir)
        config = logdir_config(args.logdir, args.config, storage)
        config = config.with_selection(select=args.select, ignore=args.ignore)
    except (ConfigError, LogdirError) as e:
        return fail(str(e))
    run_filter = None
    if args.run is not None:
        try:
            run_filter = re.compile(args.run)
        except re.error as e:
            return fail(f"--run: invalid regex {args.run!r}: {e}")
    jobs = args.jobs if args.jobs is not None else default_jobs()
    try:
        # --jobs 1 alone: the plain in-process scan (the reference the others equal); --by-hparams
        # reads every run's tags here.
        in_process = args.by_hparams or (args.executor is None and jobs == 1)
        executor = None if in_process else executor_for(
            args.executor, jobs, initializer=keep_freed_memory)
    except ExecutorError as e:
        return fail(str(e))
    if args.by_hparams and "://" in args.logdir:
        return fail(f"--by-hparams reads local logdirs only (got {redact(args.logdir)})")
    try:
        with executor or contextlib.nullcontext():
            report = scan_logdir(args.logdir, config, run_filter, progress=_progress_printer(),
                                 by_hparams=args.by_hparams, executor=executor, storage=storage)
    except (ExecutorError, StorageError) as e:
        return fail(str(e))
    except OSError as e:
        return fail(f"{redact(args.logdir)}: {redact(e.strerror or e)}")
    if not report["runs"]:
        return fail(_no_runs_message(args, storage))
    out = FORMATS[args.format]
    if args.by_hparams:
        from tb_crash_signals.report.formats import SWEEP_FORMATS

        out = SWEEP_FORMATS[args.format]
    sys.stdout.write(out.format(report, verbose=args.verbose))
    return exit_code(report, args.fail_on)
