"""Durable checkpoints of a long run: small files written so a power cut never loses more
than the evaluation in progress.

A checkpoint file holds a JSON header (any metadata) and named numpy arrays, followed
by a SHA-256 of everything before it:

    b"SLOWFRAME-CKPT\\n" | u64 header length | header JSON | array bytes | sha256 (32 bytes)

Writes are atomic: a temporary file in the same folder, fsync, rename, fsync of the
folder. Checkpoints are numbered; the previous one is deleted only once the new one is
durable, so a crash in the middle of a write leaves the last good checkpoint (and a
stray temporary file, cleaned up on the next write). A write the disk refuses (full,
read-only) is a StorageError saying how much space it needed; the checkpoints before it stay.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine import json_limits
from engine.atomic import atomic_write, temp_files
from engine.errors import InputError, StorageError

MAGIC = b"SLOWFRAME-CKPT\n"
PREFIX, SUFFIX = "step-", ".ckpt"
KEEP = 2   # the newest and the one before it, for when the newest turns out corrupt


class CorruptCheckpoint(Exception):
    """A checkpoint file that cannot be trusted (truncated, bad checksum, bad header)."""


@dataclass
class Checkpoint:
    path: Path
    meta: dict
    arrays: dict[str, np.ndarray]


def write_file(path: Path, meta: dict, arrays: dict[str, np.ndarray]) -> None:
    """Write one checkpoint file atomically and durably."""
    entries, offset = {}, 0
    blobs = []
    for name, a in arrays.items():
        a = np.ascontiguousarray(a)
        entries[name] = {"dtype": a.dtype.str, "shape": list(a.shape), "offset": offset, "nbytes": a.nbytes}
        blobs.append(a)
        offset += a.nbytes
    header = json.dumps({"meta": meta, "arrays": entries}, sort_keys=True).encode()
    digest = hashlib.sha256()
    try:
        with atomic_write(path, durable=True) as f:
            for chunk in (MAGIC, struct.pack("<Q", len(header)), header,
                          *(b.reshape(-1).view(np.uint8) for b in blobs)):
                digest.update(chunk)
                f.write(chunk)
            f.write(digest.digest())
    except OSError as e:
        raise StorageError(_write_failure(path, e, len(MAGIC) + 8 + len(header) + offset + 32)) from None


def _write_failure(path: Path, error: OSError, needed: int) -> str:
    """What went wrong writing checkpoint ``path`` (``needed`` bytes), and what to do about it."""
    message = f"cannot write the checkpoint {path}: {error.strerror or error}"
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        try:
            usage = os.statvfs(path.parent)
            free = f"{usage.f_bavail * usage.f_frsize / 1e6:.1f} MB are free"
        except OSError:
            free = "the free space is unknown"
        return (f"{message}. It needs {needed / 1e6:.1f} MB and {free}; free some space and run again: "
                "the run resumes from its last checkpoint, which is intact")
    if error.errno == errno.EISDIR:
        return f"{message}. A folder has that name; remove it and run again to resume"
    return f"{message}. The last checkpoint is intact; fix the disk and run again to resume"


def read_file(path: Path) -> Checkpoint:
    """Read and verify one checkpoint file; CorruptCheckpoint says why it cannot be used."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise CorruptCheckpoint(f"cannot read it ({e.strerror})") from None
    if len(data) < len(MAGIC) + 8 + 32 or not data.startswith(MAGIC):
        raise CorruptCheckpoint("not a slowframe checkpoint, or truncated")
    if hashlib.sha256(data[:-32]).digest() != data[-32:]:
        raise CorruptCheckpoint("checksum mismatch (truncated or damaged)")
    (n,) = struct.unpack_from("<Q", data, len(MAGIC))
    start = len(MAGIC) + 8
    try:
        header = json_limits.loads(data[start:start + n], 32)
        if not isinstance(header, dict) or not isinstance(header.get("meta"), dict) \
                or not isinstance(header.get("arrays"), dict):
            raise ValueError("the header is not {meta: {...}, arrays: {...}}")
        payload = memoryview(data)[start + n:-32]
        arrays = {}
        for name, e in header["arrays"].items():
            begin, nbytes = e["offset"], e["nbytes"]
            whole = isinstance(begin, int) and isinstance(nbytes, int)
            if not (whole and 0 <= begin <= begin + nbytes <= len(payload)):
                raise ValueError(f"array {name!r} lies outside the file")
            raw = payload[begin:begin + nbytes]
            arrays[name] = np.frombuffer(raw, dtype=np.dtype(e["dtype"])).reshape(e["shape"]).copy()
        return Checkpoint(path, header["meta"], arrays)
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptCheckpoint(f"bad header ({e})") from None


class CheckpointDir:
    """The numbered checkpoints of one run in one folder."""

    def __init__(self, path: str | Path, log: Callable[[str], None] = print):
        self.path = Path(path)
        self.log = log
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise InputError(f"cannot create the checkpoint folder {self.path}: {e.strerror}") from None
        if not os.access(self.path, os.W_OK):
            raise InputError(f"the checkpoint folder {self.path} is not writable")

    def _numbered(self) -> list[tuple[int, Path]]:
        found = []
        for p in self.path.glob(f"{PREFIX}*{SUFFIX}"):
            number = p.name[len(PREFIX):-len(SUFFIX)]
            if number.isdigit():
                found.append((int(number), p))
        return sorted(found)

    def save(self, meta: dict, arrays: dict[str, np.ndarray]) -> Path:
        """Write the next checkpoint, then drop all but the newest KEEP."""
        numbered = self._numbered()
        number = numbered[-1][0] + 1 if numbered else 1
        path = self.path / f"{PREFIX}{number:08d}{SUFFIX}"
        write_file(path, meta, arrays)
        self._remove([p for _, p in numbered[:len(numbered) + 1 - KEEP]] + temp_files(self.path, f"{PREFIX}*{SUFFIX}"))
        return path

    def _remove(self, paths: list[Path]) -> None:
        for old in paths:
            try:
                old.unlink(missing_ok=True)
            except OSError as e:   # e.g. a folder of that name: not ours to delete, and no reason to stop
                self.log(f"cannot remove the old checkpoint {old}: {e.strerror}")

    def latest(self) -> Checkpoint | None:
        """The newest checkpoint that verifies; older ones are tried when the newest is damaged."""
        for _, path in reversed(self._numbered()):
            try:
                return read_file(path)
            except CorruptCheckpoint as e:
                self.log(f"checkpoint {path} is unusable: {e}; trying the one before it")
        return None

    def clear(self) -> None:
        """Delete this run's checkpoints (a deliberate restart)."""
        self._remove([p for _, p in self._numbered()] + temp_files(self.path, f"{PREFIX}*{SUFFIX}"))

