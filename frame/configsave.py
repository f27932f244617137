"""Saving the config file the web app edits: by the daemon itself, or by the root step that alone may write the card.

The config usually lives on the SD card's FAT boot partition, beside cmdline.txt, config.txt and the
kernel. The daemon parses untrusted pictures, model files and YAML, so it must not be able to write
that partition: a compromised daemon would own the Pi at the next boot. Instead it leaves the
checked text as the file ``config-request`` in its runtime folder (/run/slowframe, which only its
user may write); systemd/slowframe-config.path sees it and starts slowframe-config.service, which
runs ``commit`` here as root in a sandbox where only /boot/firmware and /run/slowframe are writable:
it takes the request (a plain file of the daemon's, nothing else), checks the text again with the
checker of ``slowframe config check``, keeps the old file as ``slowframe.yaml.bak``, writes the new one
atomically and durably, and answers in ``config-result``. So no process of ours can write the boot
files, and the root step writes only slowframe.yaml, only with text that passes the checker.

Where the daemon may write the config's folder itself (a PC, tests, /etc/slowframe), it does.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import time
from collections.abc import Callable
from pathlib import Path

from engine.atomic import write_bytes
from frame.config import Problem, check_text
from frame.paths import CONFIG_COMMIT_UNIT, SEARCH_PATH
from frame.userfiles import MAX_FILE_BYTES, UserFileError, read_json_object

REQUEST_NAME = "config-request"
RESULT_NAME = "config-result"
# the daemon's wait for the root step, which starts a Python that imports the config checker (~0.9 s on a PC,
# several times that on a Pi Zero 2 W); the web app waits longer for the answer (frame.web.configfile.SAVE_SECONDS)
COMMIT_SECONDS = 30.0
POLL_SECONDS = 0.05
MAX_RESULT_BYTES = 1024 * 1024   # every problem of a 1 MB config, each with its message


class SaveError(Exception):
    """The config was not saved: ``message`` says why and what to do, ``problems`` are the checker's."""

    def __init__(self, message: str, problems: list[dict] | None = None):
        super().__init__(message)
        self.message = message
        self.problems = problems or []


class RequestRefused(Exception):
    """The staged request is not a plain file of the daemon's: the root step does not read it."""


def backup_path(path: Path) -> Path:
    return path.with_name(path.name + ".bak")


def problem_json(problem: Problem) -> dict:
    return {"file": problem.file, "line": problem.line, "column": problem.column, "message": problem.message,
            "severity": problem.severity}


def request_id(data: bytes) -> str:
    """Names a request in its result, so an answer that comes too late is never taken for the next one's."""
    return hashlib.sha256(data).hexdigest()[:16]


def replace_file(path: Path, data: bytes) -> None:
    """The file kept as NAME.bak, then ``data`` written in its place: each written under a temporary name in the
    same folder, fsynced, renamed and the folder fsynced, so a power cut at any moment leaves a whole old or
    new file (FAT has no journal). OSError when either cannot be written."""
    try:
        old = path.read_bytes()
    except FileNotFoundError:
        old = None
    if old is not None:
        write_bytes(backup_path(path), old, durable=True)
    write_bytes(path, data, durable=True)


def can_write(folder: Path) -> bool:
    """Whether this process may make and rename files in ``folder`` (False on a read-only mount too)."""
    return os.access(folder, os.W_OK | os.X_OK)


class ConfigWriter:
    """``save(path, data)``: the daemon's way to write the config, itself when it may write the folder, else
    through the root step when ``path`` is the file that step saves (``target``) and its path unit
    (``unit``) is installed, else SaveError saying what to do. ``seconds`` bounds the wait for the step."""

    def __init__(self, runtime_dir: Path | None, *, unit: Path = CONFIG_COMMIT_UNIT, target: Path = SEARCH_PATH[0],
                 seconds: float = COMMIT_SECONDS):
        self.runtime_dir = Path(runtime_dir) if runtime_dir is not None else None
        self.unit = Path(unit)
        self.target = Path(target)
        self.seconds = seconds

    def save(self, path: Path, data: bytes) -> None:
        """Write ``data`` (already checked) as ``path``, the old file kept as NAME.bak; SaveError when nothing was
        saved (with the root step's problems when it refused the text), or when that is not known."""
        if can_write(path.parent):
            try:
                replace_file(path, data)
            except OSError as exc:
                raise SaveError(f"cannot write {path}: {exc.strerror or exc}; nothing was changed") from None
            return
        if path != self.target:
            raise SaveError(f"cannot save {path}: the frame's user may not write {path.parent}, and the root step "
                            f"saves only {self.target}; let the user write that folder, or keep the config at "
                            f"{self.target} or /etc/slowframe/config.yaml; nothing was saved")
        if self.runtime_dir is None or not self.unit.exists():
            raise SaveError(f"cannot save {path}: the frame's user may not write {path.parent} (the boot partition "
                            f"is root's alone) and the root step that saves it, {self.unit.name}, is not installed "
                            f"at {self.unit}; install systemd/{self.unit.name} and {self.unit.stem}.service as "
                            f"image/build does and `systemctl enable --now {self.unit.name}`, or edit the file "
                            "on the card from a PC; nothing was saved")
        self._commit(data)

    def _commit(self, data: bytes) -> None:
        request, result = self.runtime_dir / REQUEST_NAME, self.runtime_dir / RESULT_NAME
        wanted = request_id(data)
        result.unlink(missing_ok=True)      # the answer to an earlier request nobody waited for
        try:
            write_bytes(request, data)      # whole when the path unit sees the name
        except OSError as exc:
            raise SaveError(f"cannot make {request} for {self.unit.stem}.service: {exc.strerror or exc}; "
                            "nothing was saved") from None
        deadline = time.monotonic() + self.seconds
        while True:
            answer = self._answer(result)
            if answer is not None and answer.get("request") == wanted:
                break
            if time.monotonic() >= deadline:
                raise SaveError(self._late(request))
            time.sleep(POLL_SECONDS)
        if answer.get("ok") is not True:
            problems = answer.get("problems")
            raise SaveError(str(answer.get("message") or f"{self.unit.stem}.service refused it; nothing was saved"),
                            [p for p in problems if isinstance(p, dict)] if isinstance(problems, list) else [])

    def _answer(self, result: Path) -> dict | None:
        """The root step's result, taken (the file removed); None when there is none yet."""
        try:
            answer = read_json_object(result, MAX_RESULT_BYTES, depth=6)
        except FileNotFoundError:
            return None
        except UserFileError as exc:
            answer = {"request": None, "ok": False, "message": f"{result}: {exc.message}"}
        result.unlink(missing_ok=True)
        return answer

    def _late(self, request: Path) -> str:
        service = f"{self.unit.stem}.service"
        try:
            request.unlink()            # withdrawn: the step, if it starts now, finds nothing to save
        except FileNotFoundError:
            return (f"{service} took the edit but did not answer within {self.seconds:g} s; load the page again "
                    f"to see whether it was saved, and see `journalctl -u {service}`")
        return (f"{self.unit.name} did not take the edit within {self.seconds:g} s; nothing was saved; check that "
                f"it is enabled (`systemctl enable --now {self.unit.name}`) and see `journalctl -u {service}`")


def commit(folder: Path, target: Path, report: Callable[[str], None] = print) -> dict | None:
    """The root step (``slowframe config commit``, run by slowframe-config.service): the request the daemon left
    in ``folder`` taken (removed first, so the path unit does not start the step again), checked, saved as
    ``target`` with the old file kept as NAME.bak, and the result left in ``folder`` for the daemon. The result;
    None when there was no request (the daemon withdrew it). OSError when the result cannot be written.

    The result holds only the problems in the text itself: the checker reads the files a config names
    (wildcard lists), and as root it could read files the daemon may not, so what it found in them goes
    to ``report`` (the journal) alone."""
    request = folder / REQUEST_NAME
    try:
        data = _take(request)
    except FileNotFoundError:
        return None
    except RequestRefused as exc:
        result = {"request": None, "ok": False, "message": f"{exc}; nothing was saved"}
    else:
        result = {"request": request_id(data), **_save(data, target, report)}
    write_bytes(folder / RESULT_NAME, json.dumps(result).encode())
    return result


def _take(request: Path) -> bytes:
    """The bytes of ``request``, a regular file of the folder's owner with no other name, at most MAX_FILE_BYTES;
    RequestRefused for anything else (a symbolic link, a folder, a FIFO, a hard link to another file, a huge
    file), and FileNotFoundError when it is gone. The name is removed whatever it is."""
    try:
        fd = os.open(request, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        _remove(request)
        raise RequestRefused(f"{request} is not a plain file ({exc.strerror}); it was removed unread") from None
    try:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            _remove(request)
            raise RequestRefused(f"{request} is a folder, not a file; it was removed")
        os.unlink(request)      # FileNotFoundError: the daemon withdrew it meanwhile
        info = os.fstat(fd)     # what was opened, whatever the name holds now
        if not stat.S_ISREG(info.st_mode):
            raise RequestRefused(f"{request} is not a regular file")
        if info.st_uid != os.stat(request.parent).st_uid:
            raise RequestRefused(f"{request} does not belong to the owner of {request.parent}")
        if info.st_nlink != 0:
            raise RequestRefused(f"{request} has another name (a hard link): only a file of its own is taken")
        chunks, size = [], 0
        while size <= MAX_FILE_BYTES and (chunk := os.read(fd, MAX_FILE_BYTES + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > MAX_FILE_BYTES:
        raise RequestRefused(f"the config sent is over {MAX_FILE_BYTES:,} bytes, the most a config may be")
    return b"".join(chunks)


def _remove(path: Path) -> None:
    """Remove a name of any kind: a symbolic link itself (never what it points at), a folder with what it holds."""
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass


def _save(data: bytes, target: Path, report: Callable[[str], None]) -> dict:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        return {"ok": False, "message": f"the config sent is not UTF-8 text (line {line}); nothing was saved"}
    problems = check_text(text, target)
    for problem in problems:
        report(str(problem))
    listed = [problem_json(p) for p in problems if p.file == str(target)]
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        elsewhere = len(problems) - len(listed)
        where = f" ({elsewhere} problem(s) in the files it names are in the root step's journal)" if elsewhere else ""
        return {"ok": False, "message": f"the config has {len(errors)} error(s){where}; nothing was saved",
                "problems": listed}
    try:
        replace_file(target, data)
    except OSError as exc:
        return {"ok": False, "message": f"cannot write {target}: {exc.strerror or exc}; nothing was changed"}
    return {"ok": True, "message": f"saved {target}", "problems": listed}
