"""Talking to the running daemon: a UNIX socket in its runtime directory (mode 0660).

One request per connection: a JSON object on one line (``{"command": "status"}``), answered
by one JSON object on one line. Commands: ``status``; ``skip``, ``regenerate``; ``show``
with ``"which": "next" | "previous" | "latest"`` or ``"image": PATH``; ``reload``.
Actions are queued for the daemon's main loop and answered at once with ``{"ok": true,
"message": ...}``; a refresh under way finishes first.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path

from frame.paths import default_runtime_dir

SOCKET_NAME = "control.sock"
MAX_REQUEST = 64 * 1024

log = logging.getLogger("slowframe.control")


class ControlError(Exception):
    """The daemon cannot be reached or refused the request (the message says why and what to do)."""


class ControlServer:
    """Accepts requests on ``path`` in a thread; ``handle(request) -> reply`` must be quick and thread-safe."""

    def __init__(self, path: Path, handle: Callable[[dict], dict]):
        self.path = Path(path)
        self.handle = handle
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.unlink(missing_ok=True)   # left by a daemon that was killed
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self._sock.bind(str(self.path))
        os.chmod(self.path, 0o660)
        self._sock.listen(8)
        self._sock.settimeout(0.5)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="slowframe-control", daemon=True)

    def start(self) -> ControlServer:
        self._thread.start()
        return self

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._closed.is_set():
                    return
                raise
            with conn:
                conn.settimeout(5.0)
                try:
                    reply = self._answer(_read_line(conn))
                    conn.sendall((json.dumps(reply) + "\n").encode())
                except (OSError, TimeoutError) as exc:
                    log.debug("control: %s", exc)

    def _answer(self, raw: bytes) -> dict:
        try:
            request = json.loads(raw)
            if not isinstance(request, dict) or not isinstance(request.get("command"), str):
                raise ValueError("expected {\"command\": ...}")
        except ValueError as exc:
            return {"ok": False, "message": f"bad request: {exc}"}
        try:
            return self.handle(request)
        except Exception as exc:   # a bug must not take the control thread down
            log.exception("control: %s failed", request.get("command"))
            return {"ok": False, "message": f"internal error: {exc}"}

    def close(self) -> None:
        self._closed.set()
        self._sock.close()
        self._thread.join(timeout=2)
        self.path.unlink(missing_ok=True)


def _read_line(conn: socket.socket) -> bytes:
    data = b""
    while b"\n" not in data and len(data) < MAX_REQUEST:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return data.split(b"\n", 1)[0]


def request(command: str, socket_path: Path | None = None, timeout: float = 10.0, **fields) -> dict:
    """Send one command to the daemon and return its reply; ControlError when it cannot be reached."""
    path = Path(socket_path) if socket_path else default_runtime_dir() / SOCKET_NAME
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(path))
            sock.sendall((json.dumps({"command": command, **fields}) + "\n").encode())
            reply = _read_line(sock)
    except (FileNotFoundError, ConnectionRefusedError):
        raise ControlError(f"the slowframe daemon is not running (no socket at {path}); start it with "
                           "`systemctl start slowframe` or `slowframe run`") from None
    except PermissionError:
        raise ControlError(f"no permission to use {path}; run as root or as a member of the daemon's group "
                           "(e.g. `sudo usermod -aG slowframe $USER`, then log in again)") from None
    except OSError as exc:
        raise ControlError(f"cannot talk to the daemon at {path}: {exc}") from None
    try:
        return json.loads(reply)
    except ValueError:
        raise ControlError(f"the daemon at {path} sent an unreadable reply") from None
