"""`slowframe run` (the daemon) and the commands talking to a running frame: status, skip, regenerate, reload."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from frame.cli import version
from frame.paths import SEARCH_PATH, SYSTEM_RUNTIME_DIR, SYSTEM_STATE_DIR, default_runtime_dir, default_state_dir


def add_socket_option(parser: argparse.ArgumentParser) -> None:
    """--socket, with the default this shell would use: the one `frame.control.request` connects to."""
    from frame.control import SOCKET_NAME

    parser.add_argument("--socket", help=f"the daemon's control socket (default here: "
                                         f"{default_runtime_dir() / SOCKET_NAME}; {RUNTIME_RULE})")


# frame.paths.default_runtime_dir's rule, in words
RUNTIME_RULE = (f"$RUNTIME_DIRECTORY, else {SYSTEM_RUNTIME_DIR} when it exists, else $XDG_RUNTIME_DIR/slowframe, "
                "else /tmp/slowframe-UID")


def add_run_command(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser("run", help="run the frame (what the systemd service starts)",
                         description="Run the frame: pick themes, generate pictures in a child process, show them "
                                     "on schedule, answer the buttons and `slowframe status`. The config is "
                                     "reloaded on SIGHUP and when the file changes.")
    run.add_argument("--config", help=f"the config file (default: {', then '.join(map(str, SEARCH_PATH))}, "
                                      "else built-in defaults)")
    run.add_argument("--state-dir", help="jobs, checkpoints and history (default: $STATE_DIRECTORY, "
                                         f"{SYSTEM_STATE_DIR} for root, else ~/.local/state/slowframe)")
    run.add_argument("--runtime-dir", help=f"where the control socket goes (default here: {default_runtime_dir()}; "
                                           f"{RUNTIME_RULE})")
    run.add_argument("--generator", default="frame.worker:load_sdxl", metavar="MODULE:FUNCTION",
                     help="advanced: the factory returning the picture generator (default: %(default)s)")
    run.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    from frame.daemon import AlreadyRunning, Daemon
    from frame.notify import setup_logging

    if args.config and not Path(args.config).is_file():
        print(f"slowframe: error: --config {args.config}: no such file", file=sys.stderr)
        return 2
    state_dir = Path(args.state_dir) if args.state_dir else default_state_dir()
    sink = setup_logging("info")
    try:
        daemon = Daemon(args.config, state_dir, Path(args.runtime_dir) if args.runtime_dir else default_runtime_dir(),
                        generator=args.generator)
        logging.getLogger("slowframe").info("slowframe %s: state in %s, logging to %s", version(), state_dir, sink)
        return daemon.run()
    except AlreadyRunning as exc:
        print(f"slowframe: error: {exc}", file=sys.stderr)
        return 1
    except PermissionError as exc:
        print(f"slowframe: error: {exc.filename}: permission denied; run it as the slowframe service "
              f"(`systemctl start slowframe`) or pass --state-dir and --runtime-dir folders you can write",
              file=sys.stderr)
        return 1


def add_control_commands(sub: argparse._SubParsersAction) -> None:
    status = sub.add_parser("status", help="what the running frame is doing")
    status.add_argument("--json", action="store_true", help="the whole status as JSON")
    add_socket_option(status)
    status.set_defaults(func=cmd_status)
    for name, text in (("skip", "abandon the current picture and start the next theme"),
                       ("regenerate", "a new picture of the theme on the panel (new seed)"),
                       ("reload", "reload the config now (same as SIGHUP)")):
        action = sub.add_parser(name, help=text)
        add_socket_option(action)
        action.set_defaults(func=cmd_action)


def cmd_status(args: argparse.Namespace) -> int:
    from frame.control import request

    reply = request("status", args.socket)
    if args.json:
        print(json.dumps(reply, indent=2))
        return 0
    print(reply.get("message", "?"))
    imp = reply.get("import")
    if imp:
        size = f"{imp['bytes_done'] / 1e9:.2f} of {imp['bytes_total'] / 1e9:.2f} GB written" if imp["bytes_total"] \
            else "starting"
        print(f"  importing {imp['source']} into {imp['dest']}: {size} (since {imp['started']})")
    job = reply.get("job")
    if job:
        print(f"  job {job['id']}: {job['prompt']!r} (seed {job['seed']}, {job['steps']} steps, {job['size']}, "
              f"preset {job['preset']})")
    last = reply.get("last_picture")
    if last:
        print(f"  last picture: {last['image']} ({last['theme']}: {last['prompt']!r})")
    for error in reply.get("config_errors", []):
        print(f"  config: {error}")
    if reply.get("last_error"):
        print(f"  last error: {reply['last_error']}")
    return 0


def cmd_action(args: argparse.Namespace) -> int:
    from frame.control import request

    reply = request(args.command, args.socket)
    print(reply.get("message", "?"))
    return 0 if reply.get("ok") else 1
