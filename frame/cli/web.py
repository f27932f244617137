"""`slowframe web` (the web app, what slowframe-web.service runs) and `slowframe web password`."""

from __future__ import annotations

import argparse
import getpass
import os
import socket
import sys
from pathlib import Path

from frame.paths import SYSTEM_RUNTIME_DIR

WEB_STATE_DIR = Path("/var/lib/slowframe-web")
WEB_CACHE_DIR = Path("/var/cache/slowframe-web")
SD_LISTEN_FDS_START = 3   # systemd hands a socket unit's sockets over from this descriptor on


def add_commands(sub: argparse._SubParsersAction) -> None:
    web = sub.add_parser("web", help="the web app for phones (what slowframe-web.service runs)",
                         description="Serve the web app: on the socket systemd passes (slowframe-web.socket), "
                                     "else on --listen.")
    web.add_argument("--listen", default="127.0.0.1:8080", help="HOST:PORT without systemd (default: %(default)s)")
    web.add_argument("--state-dir", help=f"the password and session key (default: $STATE_DIRECTORY or {WEB_STATE_DIR})")
    web.add_argument("--cache-dir", help=f"thumbnails (default: $CACHE_DIRECTORY or {WEB_CACHE_DIR})")
    web.add_argument("--socket", help=f"the daemon's control socket (default: in {SYSTEM_RUNTIME_DIR})")
    web.add_argument("--url", default="", help="the address the pairing card shows (default: http://HOSTNAME.local/)")
    web.add_argument("--threads", type=int, default=2, help="requests served at once (default: %(default)s)")
    web.set_defaults(func=cmd_web)
    web_sub = web.add_subparsers(dest="web_command")
    password = web_sub.add_parser("password", help="set the web app's password (setup.txt's web_password)",
                                  description="Set the password (read from standard input when it is not a "
                                              "terminal); every phone signed in is signed out.")
    password.add_argument("--state-dir", dest="password_state_dir",
                          help=f"default: $STATE_DIRECTORY or {WEB_STATE_DIR}")
    password.set_defaults(func=cmd_password)


def _folder(given: str | None, env: str, default: Path) -> Path:
    if given:
        return Path(given)
    if os.environ.get(env):
        return Path(os.environ[env].split(":")[0])
    return default


def cmd_web(args: argparse.Namespace) -> int:
    import logging

    from waitress import serve

    from frame.notify import setup_logging
    from frame.web import WebSettings, create_app

    setup_logging("info")
    settings = WebSettings(state_dir=_folder(args.state_dir, "STATE_DIRECTORY", WEB_STATE_DIR),
                           cache_dir=_folder(args.cache_dir, "CACHE_DIRECTORY", WEB_CACHE_DIR),
                           socket=Path(args.socket) if args.socket else None, url=args.url)
    app = create_app(settings)
    listening = _systemd_sockets()
    where = "the socket systemd passed" if listening else args.listen
    logging.getLogger("slowframe.web").info("slowframe web: serving on %s", where)
    options = {"threads": max(1, args.threads), "ident": "slowframe", "max_request_body_size":
               app.config["MAX_CONTENT_LENGTH"], "channel_timeout": 60, "connection_limit": 20,
               "clear_untrusted_proxy_headers": True}
    if listening:
        serve(app, sockets=listening, **options)
    else:
        serve(app, listen=args.listen, **options)
    return 0


def _systemd_sockets() -> list[socket.socket]:
    """The listening sockets systemd passed (socket activation: LISTEN_PID/LISTEN_FDS), none without it."""
    if os.environ.get("LISTEN_PID") != str(os.getpid()):
        return []
    count = int(os.environ.get("LISTEN_FDS", "0") or 0)
    for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        os.environ.pop(name, None)
    return [socket.socket(fileno=fd) for fd in range(SD_LISTEN_FDS_START, SD_LISTEN_FDS_START + count)]


def cmd_password(args: argparse.Namespace) -> int:
    from frame.web.auth import Credentials, PasswordRefused, check_new_password

    folder = _folder(args.password_state_dir, "STATE_DIRECTORY", WEB_STATE_DIR)
    if sys.stdin.isatty():
        password = getpass.getpass("new password for the web app: ")
        repeated = getpass.getpass("the same again: ")
    else:
        password = sys.stdin.readline().rstrip("\r\n")
        repeated = password
    try:
        check_new_password(password, repeated)
    except PasswordRefused as exc:
        print(f"slowframe: error: {exc}", file=sys.stderr)
        return 1
    Credentials(folder).set(password)
    print(f"the web app's password is set (in {folder}); phones signed in before must sign in again")
    return 0
