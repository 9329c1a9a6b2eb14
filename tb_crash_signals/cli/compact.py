"""`tb-crash-signals compact`: a smaller copy of a logdir that keeps the evidence of a crash."""

from __future__ import annotations

import argparse
import sys

from tb_crash_signals.cli.common import EXIT_FOUND, EXIT_OK, fail


def _count(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}: {value}")
        return value

    return parse


def add_parser(sub) -> None:
    p = sub.add_parser(
        "compact",
        help="write a compacted copy of a logdir (recent steps in full, history with its spikes)",
        description="Write a new logdir DST with the same runs, event files and tags as SRC. Per scalar "
        "tag: the last N steps in full; before them, per bucket of K steps, the points where the "
        "bucket's minimum and maximum occur, its first and last NaN/Inf and its last point; plus "
        "the steps where findings start, peak and end, and stretches in full wherever thinning would "
        "change what `scan` reports. Histograms, images, text, hparams and graphs are copied as they "
        "are. SRC is only read. DST is scanned afterwards and compared with SRC.",
        epilog="exit codes: 0 written (and verified); 1 written, but scan DST differs from scan SRC; "
        "2 usage or I/O error",
    )
    p.add_argument("src", metavar="SRC", help="the logdir to compact (never modified)")
    p.add_argument("dst", metavar="DST", help="the new logdir: must not exist or be empty, and not lie inside SRC")
    p.add_argument("--keep-last", type=_count(0), default=1000, metavar="N",
                   help="recent steps kept in full, per tag (default: 1000)")
    p.add_argument("--every", type=_count(1), default=100, metavar="K",
                   help="bucket width in steps for older points (default: 100)")
    p.add_argument("--scalars-only", action="store_true",
                   help="leave out histograms, images, text, hparams and graphs")
    p.add_argument("--config", metavar="FILE",
                   help="TOML config of the analysis (default: SRC/crash_signals.toml if present, copied to DST)")
    p.add_argument("--no-verify", dest="verify", action="store_false",
                   help="do not scan DST afterwards")


def _progress_printer():
    if not sys.stderr.isatty():
        return None
    from tb_crash_signals.report.text import safe

    def show(done, total, name):
        end = "\n" if done == total else ""
        label = f": {safe(name)[:60]}" if name else ""
        sys.stderr.write(f"\r\x1b[Kcompacting run {min(done + 1, total)}/{total}{label}" + end)
        sys.stderr.flush()

    return show


def _size(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


def _pct(a: int, b: int) -> str:
    return f"{100.0 * a / b:.1f} %" if b else "-"


def summary_lines(report, src: str, dst: str) -> list[str]:
    from tb_crash_signals.report.text import safe

    r = report
    lines = [
        f"compacted {r.runs} run{'s' if r.runs != 1 else ''} ({r.files} event file{'s' if r.files != 1 else ''}) "
        f"of {safe(src)} into {safe(dst)} in {r.seconds:.1f} s",
        f"  event files: {_size(r.bytes_in)} -> {_size(r.bytes_out)} ({_pct(r.bytes_out, r.bytes_in)})",
        f"  scalar points: {r.points_in} -> {r.points_out} ({_pct(r.points_out, r.points_in)}); "
        f"records {r.records_in} -> {r.records_out}, {r.rebuilt} rebuilt",
    ]
    if r.repaired:
        lines.append("  kept in full around findings that thinning would move: "
                     + ", ".join(f"{safe(name)} ({n} round{'s' if n != 1 else ''})" for name, n in r.repaired))
    if r.first_only:
        lines.append("  plateau episodes differ in number (compared by their first start): "
                     + ", ".join(f"{safe(name)} {code} {a} -> {b}" for name, code, a, b in r.first_only))
    if r.kept_in_full:
        lines.append("  kept in full (findings kept moving): " + ", ".join(safe(n) for n in r.kept_in_full))
    for p in r.problems:
        lines.append(f"  not copied: {safe(p)}")
    if r.verified and not r.differences:
        lines.append("verified: scan DST reports the same findings as scan SRC")
    for d in r.differences:
        lines.append(f"differs: {safe(d)}")
    return lines


def run(args) -> int:
    from tb_crash_signals.analysis.config import ConfigError, config_for_logdir
    from tb_crash_signals.compact import CompactError, check_paths, compact_logdir

    try:
        check_paths(args.src, args.dst)
        config = config_for_logdir(args.src, args.config)
    except (CompactError, ConfigError) as e:
        return fail(str(e))
    try:
        report = compact_logdir(
            args.src, args.dst, keep_last=args.keep_last, every=args.every,
            scalars_only=args.scalars_only, config=config, progress=_progress_printer(),
            verify=args.verify,
        )
    except CompactError as e:
        return fail(str(e))
    except OSError as e:
        where = e.filename if getattr(e, "filename", None) else args.dst
        return fail(f"{where}: {e.strerror or e} (DST holds only the files completed so far)")
    sys.stdout.write("\n".join(summary_lines(report, args.src, args.dst)) + "\n")
    return EXIT_FOUND if report.differences else EXIT_OK
