"""`tb-crash-signals rules`: the rule catalogue with the parameters in force."""

from __future__ import annotations

import json
import sys

from tb_crash_signals.cli.common import EXIT_OK, fail


def add_parser(sub) -> None:
    p = sub.add_parser(
        "rules", help="list the rule catalogue with its defaults",
        description="Print the rule catalogue with the parameters in force.",
    )
    p.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    p.add_argument("--config", metavar="FILE", help="TOML config whose parameters to show")


def run(args) -> int:
    from tb_crash_signals.analysis.catalogue import catalogue_json, catalogue_markdown, catalogue_text
    from tb_crash_signals.analysis.config import Config, ConfigError, load_config

    try:
        config = load_config(args.config) if args.config else Config()
    except ConfigError as e:
        return fail(str(e))
    if args.format == "json":
        json.dump(catalogue_json(config), sys.stdout, indent=1)
        sys.stdout.write("\n")
    elif args.format == "markdown":
        sys.stdout.write(catalogue_markdown(config))
    else:
        sys.stdout.write(catalogue_text(config))
    return EXIT_OK
