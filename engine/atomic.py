"""Atomic writes: a file or a folder appears whole under its name, or not at all.

Everything is written under a temporary name in the target's own folder and renamed
over the target when complete (a rename within one filesystem is atomic), so a reader
or a power cut sees the old version or the new one, never half of one. An exception
while writing removes the temporary file or folder and leaves the old version alone.

With durable=True the new data is fsynced before the rename and the containing folder
after it, so once the call returns the new version survives a power cut too (without,
a power cut may still lose the new version, but never tears it).
"""

from __future__ import annotations

import errno
import glob
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

TEMP_SUFFIX = ".tmp"


@contextmanager
def atomic_write(path: str | Path, mode: str = "wb", *, durable: bool = False) -> Iterator[IO]:
    """Yield a file object (opened with `mode`, "wb" or "w") whose content replaces `path`
    when the block ends without an exception."""
    path = Path(path)
    f, tmp = _open_temp(path, mode)
    try:
        with f:
            yield f
        publish(tmp, path, durable=durable)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_bytes(path: str | Path, data: bytes, *, durable: bool = False) -> None:
    """Replace `path` with `data` atomically."""
    with atomic_write(path, durable=durable) as f:
        f.write(data)


def temp_files(folder: str | Path, name_pattern: str = "*") -> list[Path]:
    """The temporary files atomic_write left in `folder` for targets whose names match
    `name_pattern` (only a crash or a power cut mid-write leaves one)."""
    return sorted(Path(folder).glob(f".{name_pattern}.*{TEMP_SUFFIX}"))


@contextmanager
def atomic_folder(dest: str | Path, *, durable: bool = False) -> Iterator[Path]:
    """Yield an empty temporary folder next to `dest`, renamed to `dest` when the block
    ends without an exception and removed when it raises. If `dest` exists by then
    (made meanwhile by someone else), it is kept, ours is removed and FileExistsError raised.

    The temporary folder is named after our process id, so writers in several processes
    never share one, and one left by a process that died (killed, power cut) is removed
    by the next atomic_folder of the same `dest`."""
    dest = Path(dest)
    _remove_leftovers(dest)
    tmp = dest.with_name(f".{dest.name}.partial-{os.getpid()}")
    tmp.mkdir(parents=True)
    try:
        yield tmp
        if dest.exists():
            raise FileExistsError(errno.EEXIST, "exists already", str(dest))
        publish(tmp, dest, durable=durable)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def publish(tmp: str | Path, dest: str | Path, *, durable: bool = False) -> None:
    """Rename the finished file or folder `tmp` to `dest` in the same folder. Durable:
    fsync `tmp` first (a folder: every file and folder in it) and the parent folder after."""
    tmp, dest = Path(tmp), Path(dest)
    if durable:
        if tmp.is_dir():
            for path in sorted(tmp.rglob("*"), reverse=True):
                _fsync(path)
        _fsync(tmp)
    os.replace(tmp, dest)
    if durable:
        _fsync(dest.parent)


def _remove_leftovers(dest: Path) -> None:
    for tmp in dest.parent.glob(f".{glob.escape(dest.name)}.partial-*"):
        pid = tmp.name.rpartition("-")[2]
        if pid.isdigit() and (int(pid) == os.getpid() or not _running(int(pid))):
            shutil.rmtree(tmp, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # someone else's process
        return True
    return True


def _open_temp(path: Path, mode: str) -> tuple[IO, Path]:
    """A new file next to `path` under a name no other writer uses; "x" mode creates it
    exclusively, with the permissions plain open() gives (0o666 less the umask)."""
    if mode not in ("wb", "w"):
        raise ValueError(f"atomic_write: mode {mode!r}, expected 'wb' or 'w'")
    while True:
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}{TEMP_SUFFIX}")
        try:
            return open(tmp, mode.replace("w", "x")), tmp
        except FileExistsError:
            continue


def _fsync(path: Path) -> None:
    """fsync a file or a folder by path (a folder: so the names in it are durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
