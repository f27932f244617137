"""`slowframe config check`: every problem of a config file, without running anything."""

from __future__ import annotations

import argparse
import sys

from frame.paths import SEARCH_PATH


def add_commands(sub: argparse._SubParsersAction) -> None:
    config = sub.add_parser("config", help="check the config file")
    config_sub = config.add_subparsers(dest="config_command", required=True)
    check = config_sub.add_parser("check", help="report every problem as FILE:LINE:COLUMN: message",
                                  description="Check a config file without running anything. Exit status 1 "
                                              "when it has errors (warnings alone: 0).")
    check.add_argument("file", nargs="?", help="the file (default: where `slowframe run` would look)")
    check.set_defaults(func=cmd_config_check)


def cmd_config_check(args: argparse.Namespace) -> int:
    from frame.config import check_config, find_config

    path = find_config(args.file) if args.file else find_config(None)
    if path is None:
        print(f"no config file at {' or '.join(str(p) for p in SEARCH_PATH)}; the frame would run on its "
              "built-in defaults (see config.example.yaml)")
        return 0
    problems = check_config(path)
    for problem in problems:
        print(problem)
    errors = sum(p.severity == "error" for p in problems)
    warnings = len(problems) - errors
    summary = f"{path}: {errors} error(s), {warnings} warning(s)" if problems else f"{path}: OK"
    print(summary, file=sys.stderr if errors else sys.stdout)
    return 1 if errors else 0
