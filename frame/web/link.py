"""The daemon as the web app reaches it: its control socket, and one error when it cannot be reached."""

from __future__ import annotations

from typing import BinaryIO

from flask import current_app

from frame.control import ControlError, exchange


ANSWER_SECONDS = 15.0   # the daemon answers at once; a config save on the card waits longer (frame.web.configfile)


class DaemonUnavailable(Exception):
    """The daemon is not running or not answering; the message says what to do."""


def ask(command: str, timeout: float = ANSWER_SECONDS, **fields) -> dict:
    reply, file = ask_for_file(command, timeout=timeout, **fields)
    if file is not None:
        file.close()
    return reply


def ask_for_file(command: str, send: BinaryIO | None = None, timeout: float = ANSWER_SECONDS,
                 **fields) -> tuple[dict, BinaryIO | None]:
    """The daemon's reply to ``command`` and the file it sent (the caller closes it); ``send`` goes with it."""
    try:
        return exchange(command, current_app.config["SLOWFRAME_SOCKET"], timeout=timeout,
                        send=send.fileno() if send is not None else None, **fields)
    except ControlError as exc:
        raise DaemonUnavailable(str(exc)) from None
