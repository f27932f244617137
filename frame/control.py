"""Talking to the running daemon: a UNIX socket in its runtime directory (mode 0660).

One request per connection: a JSON object on one line (``{"command": "status"}``), answered
by one JSON object on one line. Commands: ``status``; ``skip``, ``regenerate``; ``show``
with ``"which": "next" | "previous" | "latest"`` or ``"image": PATH``; ``reload``.
Actions are queued for the daemon's main loop and answered at once with ``{"ok": true,
"message": ...}``; a refresh under way finishes first.

Nothing a client sends can stop the server: each connection has its own thread and a
deadline for its whole request (a client trickling bytes holds only its own slot), at
most MAX_CLIENTS are served at once, and requests are bounded in size and nesting.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path

from engine import json_limits
from frame.paths import default_runtime_dir

SOCKET_NAME = "control.sock"
MAX_REQUEST = 64 * 1024
MAX_DEPTH = 16            # a request is one flat object; a little room for a future nested field
MAX_CLIENTS = 8
CLIENT_SECONDS = 5.0      # for a client's whole request, however slowly it arrives

log = logging.getLogger("slowframe.control")


class ControlError(Exception):
    """The daemon cannot be reached or refused the request (the message says why and what to do)."""


class ControlServer:
    """Accepts requests on ``path`` in a thread; ``handle(request) -> reply`` must be quick and thread-safe."""

    def __init__(self, path: Path, handle: Callable[[dict], dict]):
        self.path = Path(path)
        self.handle = handle
        private_folder(self.path.parent)
        self.path.unlink(missing_ok=True)   # left by a daemon that was killed
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self._sock.bind(str(self.path))
        os.chmod(self.path, 0o660)
        self._sock.listen(MAX_CLIENTS)
        self._sock.settimeout(0.5)
        self._closed = threading.Event()
        self._slots = threading.BoundedSemaphore(MAX_CLIENTS)
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
            except OSError as exc:
                if self._closed.is_set():
                    return
                log.warning("control: accept failed (%s); trying again", exc)   # e.g. EMFILE: wait, not die
                time.sleep(0.5)
                continue
            if not self._slots.acquire(blocking=False):
                self._refuse(conn)
                continue
            threading.Thread(target=self._converse, args=(conn,), name="slowframe-control-client",
                             daemon=True).start()

    def _refuse(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(0.5)
                conn.sendall(b'{"ok": false, "message": "the daemon is busy with other clients; try again"}\n')
            except OSError:
                pass

    def _converse(self, conn: socket.socket) -> None:
        try:
            with conn:
                raw = _read_line(conn, time.monotonic() + CLIENT_SECONDS)
                reply = self._answer(raw) if raw is not None else \
                    {"ok": False, "message": f"bad request: longer than {MAX_REQUEST} bytes"}
                conn.settimeout(CLIENT_SECONDS)
                conn.sendall((json.dumps(reply) + "\n").encode())
        except (OSError, TimeoutError) as exc:
            log.debug("control: %s", exc)
        except Exception:   # a bug must not leak the slot or take the server down
            log.exception("control: a connection failed")
        finally:
            self._slots.release()

    def _answer(self, raw: bytes) -> dict:
        try:
            request = json_limits.loads(raw, MAX_DEPTH)
            if not isinstance(request, dict) or not isinstance(request.get("command"), str):
                raise ValueError("expected {\"command\": ...}")
        except ValueError as exc:
            return {"ok": False, "message": f"bad request: {exc}"}
        try:
            reply = self.handle(request)
            json.dumps(reply)   # an unserialisable reply is the handler's bug: report it, keep serving
            return reply
        except Exception as exc:   # a bug must not take the control thread down
            log.exception("control: %s failed", request.get("command"))
            return {"ok": False, "message": f"internal error: {exc}"}

    def close(self) -> None:
        self._closed.set()
        self._sock.close()
        if self._thread.ident is not None:
            self._thread.join(timeout=2)
        self.path.unlink(missing_ok=True)


def private_folder(folder: Path) -> None:
    """Make `folder` (mode 0700) if missing; refuse one another user owns or may write into, since
    whoever can write there can put their own socket in place of the daemon's."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode):
        raise PermissionError(f"{folder} is not a folder (a link or a file); remove it or give --runtime-dir")
    if info.st_uid != os.geteuid():
        raise PermissionError(f"{folder} belongs to user id {info.st_uid}, not to this process "
                              f"({os.geteuid()}); remove it or give --runtime-dir a folder of your own")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise PermissionError(f"{folder} is writable by other users (mode {stat.S_IMODE(info.st_mode):o}); "
                              f"`chmod 700 {folder}` or give --runtime-dir a private folder")


def _read_line(conn: socket.socket, deadline: float) -> bytes | None:
    """The first line a peer sends before `deadline`; None when it exceeds MAX_REQUEST."""
    data = b""
    while b"\n" not in data:
        if len(data) > MAX_REQUEST:
            return None
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out waiting for a complete line")
        conn.settimeout(left)
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    line = data.split(b"\n", 1)[0]
    return None if len(line) > MAX_REQUEST else line


def request(command: str, socket_path: Path | None = None, timeout: float = 10.0, **fields) -> dict:
    """Send one command to the daemon and return its reply; ControlError when it cannot be reached."""
    path = Path(socket_path) if socket_path else default_runtime_dir() / SOCKET_NAME
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(path))
            sock.sendall((json.dumps({"command": command, **fields}) + "\n").encode())
            reply = _read_line(sock, time.monotonic() + timeout)
    except (FileNotFoundError, ConnectionRefusedError):
        raise ControlError(f"the slowframe daemon is not running (no socket at {path}); start it with "
                           "`systemctl start slowframe` or `slowframe run`") from None
    except PermissionError:
        raise ControlError(f"no permission to use {path}; run as root or as a member of the daemon's group "
                           "(e.g. `sudo usermod -aG slowframe $USER`, then log in again)") from None
    except OSError as exc:
        raise ControlError(f"cannot talk to the daemon at {path}: {exc}") from None
    try:
        if reply is None:
            raise ValueError("reply too long")
        answer = json_limits.loads(reply, MAX_DEPTH)
        if not isinstance(answer, dict):
            raise ValueError("not an object")
        return answer
    except ValueError:
        raise ControlError(f"the daemon at {path} sent an unreadable reply") from None
