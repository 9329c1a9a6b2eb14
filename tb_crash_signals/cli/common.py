"""What the commands share: exit codes, the argument parser class, error lines."""

from __future__ import annotations

import argparse
import sys

EXIT_OK, EXIT_FOUND, EXIT_ERROR = 0, 1, 2


class Parser(argparse.ArgumentParser):
    def error(self, message):  # usage errors exit 2 with one line, as argparse does
        self.print_usage(sys.stderr)
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n")


def fail(message: str) -> int:
    """Prints one error line (escaped: messages quote config keys and paths) and returns 2."""
    from tb_crash_signals.report.text import safe

    sys.stderr.write(f"tb-crash-signals: error: {safe(message)}\n")
    return EXIT_ERROR
