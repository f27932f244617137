"""Giving a file's disk space back without changing its size: fallocate's PUNCH_HOLE (Linux),
for the bytes of a download the import has already taken in (engine/convert/download.py).

The range then reads as zeros and uses no blocks. Filesystems without hole punching (FAT,
exFAT, some network filesystems) and systems without fallocate answer False, and the caller
keeps the bytes.
"""

from __future__ import annotations

import ctypes
import os
from functools import lru_cache
from pathlib import Path

FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02


@lru_cache(maxsize=1)
def _fallocate():
    try:
        function = ctypes.CDLL(None, use_errno=True).fallocate64
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
    function.restype = ctypes.c_int
    return function


def punch(fd: int, offset: int, length: int) -> bool:
    """Free bytes offset..offset+length of the open file `fd` (they read as zeros after);
    False where the filesystem cannot."""
    fallocate = _fallocate()
    if fallocate is None or length <= 0:
        return fallocate is not None
    return fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset, length) == 0


def supported(folder: Path) -> bool:
    """Whether files in `folder` can have holes punched (tried on a small file there)."""
    probe = Path(folder) / ".hole-probe"
    try:
        with open(probe, "wb") as f:
            f.write(b"\1" * 8192)
            f.flush()
            return punch(f.fileno(), 0, 4096)
    except OSError:
        return False
    finally:
        probe.unlink(missing_ok=True)


def disk_bytes(path: Path) -> int:
    """What a file really occupies (its allocated blocks), holes excluded."""
    return os.stat(path).st_blocks * 512


def disk_bytes_under(folders: list[Path]) -> int:
    """What the files under `folders` really occupy, each file once (a file renamed from one
    folder to another while they are walked is counted once)."""
    held: dict[tuple[int, int], int] = {}
    for folder in folders:
        for dirpath, _, files in os.walk(folder):
            for name in files:
                try:
                    st = os.stat(os.path.join(dirpath, name))
                except FileNotFoundError:
                    continue                # replaced meanwhile (an atomic write)
                held[st.st_dev, st.st_ino] = st.st_blocks * 512
    return sum(held.values())
