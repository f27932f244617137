"""Talking to the running daemon: a UNIX socket in its runtime directory (mode 0660).

One request per connection: a JSON object on one line (``{"command": "status"}``), answered
by one JSON object on one line. Commands: ``status``; ``skip``, ``regenerate``; ``show``
with ``"which": "next" | "previous" | "latest"`` or ``"image": PATH``; ``reload``; and the
commands of frame.commands (the config text, the history, uploads, power). Actions are queued
for the daemon's main loop and answered at once with ``{"ok": true, "message": ...}``; a
refresh under way finishes first.

A file travels as an open descriptor beside the JSON line (SCM_RIGHTS), never as a path or
as bytes in the JSON: a request may carry one (an upload), and a reply may carry one
(``WithFile``: a history picture), so a client reaches exactly the file the daemon opened.

Nothing a client sends can stop the server: each connection has its own thread and a
deadline for its whole request (a client trickling bytes holds only its own slot), at
most MAX_CLIENTS are served at once, and requests are bounded in size and nesting.
"""

from __future__ import annotations

import array
import json
import logging
import os
import socket
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from engine import json_limits
from frame.paths import default_runtime_dir

SOCKET_NAME = "control.sock"
MAX_REQUEST = 2 * 1024 * 1024    # a whole config (frame.userfiles.MAX_FILE_BYTES) with its JSON escapes
MAX_REPLY = 4 * 1024 * 1024      # a config's text, or the history's records (~2 KB each)
MAX_DEPTH = 16            # a request is one flat object; a little room for a future nested field
MAX_CLIENTS = 8
CLIENT_SECONDS = 5.0      # for a client's whole request, however slowly it arrives

log = logging.getLogger("slowframe.control")


class ControlError(Exception):
    """The daemon cannot be reached or refused the request (the message says why and what to do)."""


@dataclass
class WithFile:
    """A reply and a file the server sends with it as a descriptor (then closes its own copy)."""

    reply: dict
    file: BinaryIO


class ControlServer:
    """Accepts requests on ``path`` in a thread; ``handle(request) -> reply`` must be quick and thread-safe.

    A descriptor the client sent comes to the handler as ``request["_fd"]`` (an int the handler owns and
    must close); the reply may be a WithFile."""

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
        fds: list[int] = []
        try:
            with conn:
                raw = _read_line(conn, time.monotonic() + CLIENT_SECONDS, MAX_REQUEST, fds)
                reply = self._answer(raw, fds) if raw is not None else \
                    {"ok": False, "message": f"bad request: longer than {MAX_REQUEST} bytes"}
                conn.settimeout(CLIENT_SECONDS)
                if isinstance(reply, WithFile):
                    with reply.file:
                        line = (json.dumps(reply.reply) + "\n").encode()
                        socket.send_fds(conn, [line[:1]], [reply.file.fileno()])
                        conn.sendall(line[1:])
                else:
                    conn.sendall((json.dumps(reply) + "\n").encode())
        except (OSError, TimeoutError) as exc:
            log.debug("control: %s", exc)
        except Exception:   # a bug must not leak the slot or take the server down
            log.exception("control: a connection failed")
        finally:
            for fd in fds:   # sent with a request that never reached its handler
                os.close(fd)
            self._slots.release()

    def _answer(self, raw: bytes, fds: list[int]) -> dict | WithFile:
        try:
            request = json_limits.loads(raw, MAX_DEPTH)
            if not isinstance(request, dict) or not isinstance(request.get("command"), str):
                raise ValueError("expected {\"command\": ...}")
        except ValueError as exc:
            return {"ok": False, "message": f"bad request: {exc}"}
        request.pop("_fd", None)   # only the server puts a descriptor there
        if fds:
            request["_fd"] = fds.pop()   # the handler owns it from here
        try:
            reply = self.handle(request)
            json.dumps(reply.reply if isinstance(reply, WithFile) else reply)   # an unserialisable reply is
            return reply                                                       # the handler's bug: report it
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


def _read_line(conn: socket.socket, deadline: float, limit: int, fds: list[int]) -> bytes | None:
    """The first line a peer sends before `deadline`, None when it exceeds `limit` bytes; a descriptor sent
    with it is appended to `fds` (at most one: the kernel closes any more for lack of room)."""
    data = bytearray()
    room = socket.CMSG_SPACE(array.array("i").itemsize)
    while b"\n" not in data:
        if len(data) > limit:
            return None
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out waiting for a complete line")
        conn.settimeout(left)
        chunk, ancillary, _flags, _addr = conn.recvmsg(65536, room)
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.extend(array.array("i", payload[:len(payload) - len(payload) % 4]))
        if not chunk:
            break
        data += chunk
    line = bytes(data.split(b"\n", 1)[0])
    return None if len(line) > limit else line


def request(command: str, socket_path: Path | None = None, timeout: float = 10.0, **fields) -> dict:
    """Send one command to the daemon and return its reply; ControlError when it cannot be reached."""
    reply, file = exchange(command, socket_path, timeout, **fields)
    if file is not None:
        file.close()
    return reply


def exchange(command: str, socket_path: Path | None = None, timeout: float = 10.0, send: int | None = None,
             **fields) -> tuple[dict, BinaryIO | None]:
    """Send one command (with the descriptor `send`, when given) and return the reply and the file sent with
    it (the caller closes it); ControlError when the daemon cannot be reached."""
    path = Path(socket_path) if socket_path else default_runtime_dir() / SOCKET_NAME
    fds: list[int] = []
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(path))
            line = (json.dumps({"command": command, **fields}) + "\n").encode()
            if send is not None:
                socket.send_fds(sock, [line[:1]], [send])
                line = line[1:]
            sock.sendall(line)
            reply = _read_line(sock, time.monotonic() + timeout, MAX_REPLY, fds)
    except (FileNotFoundError, ConnectionRefusedError):
        raise ControlError(f"the slowframe daemon is not running (no socket at {path}); start it with "
                           "`systemctl start slowframe` or `slowframe run`") from None
    except PermissionError:
        raise ControlError(f"no permission to use {path}; run as root or as a member of the daemon's group "
                           "(e.g. `sudo usermod -aG slowframe $USER`, then log in again)") from None
    except OSError as exc:
        _close_all(fds)
        raise ControlError(f"cannot talk to the daemon at {path}: {exc}") from None
    try:
        if reply is None:
            raise ValueError("reply too long")
        answer = json_limits.loads(reply, MAX_DEPTH)
        if not isinstance(answer, dict):
            raise ValueError("not an object")
    except ValueError:
        _close_all(fds)
        raise ControlError(f"the daemon at {path} sent an unreadable reply") from None
    file = os.fdopen(fds.pop(), "rb") if fds else None
    _close_all(fds)
    return answer, file


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)
