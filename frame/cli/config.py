"""`slowframe config check`: every problem of a config file, without running anything; `slowframe config commit`:
the root step that saves the web app's edit on the card (frame.configsave)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from frame.paths import SEARCH_PATH, SYSTEM_RUNTIME_DIR


def add_commands(sub: argparse._SubParsersAction) -> None:
    config = sub.add_parser("config", help="check the config file")
    config_sub = config.add_subparsers(dest="config_command", required=True)
    check = config_sub.add_parser("check", help="report every problem as FILE:LINE:COLUMN: message",
                                  description="Check a config file without running anything. Exit status 1 "
                                              "when it has errors (warnings alone: 0).")
    check.add_argument("file", nargs="?", help="the file (default: where `slowframe run` would look)")
    check.set_defaults(func=cmd_config_check)
    commit = config_sub.add_parser(
        "commit", help="save the edit the daemon left in its runtime folder (slowframe-config.service, as root)",
        description="Take the config the daemon left as config-request in its runtime folder, check it as "
                    "`config check` does, keep the old file as NAME.bak, write the new one and leave the result "
                    "as config-result for the daemon. Refused: anything but a plain file of the daemon's, over "
                    "1 MB, not UTF-8, or with errors. Run by slowframe-config.service; exit status 1 only when "
                    "the result cannot be written.")
    commit.add_argument("--folder", type=Path, default=SYSTEM_RUNTIME_DIR, help="the daemon's runtime folder "
                        "(default: %(default)s)")
    commit.add_argument("--file", type=Path, default=SEARCH_PATH[0], help="the config file to save "
                        "(default: %(default)s)")
    commit.set_defaults(func=cmd_config_commit)


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


def cmd_config_commit(args: argparse.Namespace) -> int:
    from frame.configsave import commit

    try:
        result = commit(args.folder, args.file)
    except OSError as exc:
        print(f"cannot leave the result in {args.folder}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    if result is None:
        print(f"no request in {args.folder}: the daemon withdrew it (it waits a few seconds at most)")
    else:
        print(result["message"], file=sys.stdout if result["ok"] else sys.stderr)
    return 0
