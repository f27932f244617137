"""Read and write safetensors files without loading them whole.

A safetensors file is: u64 little-endian header length N, N bytes of JSON
{name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}},
then the tensor bytes (offsets are relative to byte 8 + N). We parse the header,
check it against the file's real size, and read single tensors with pread so
nothing is mapped or resident beyond what an op needs.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterable

import numpy as np

from engine import json_limits
from engine.errors import ModelFileError

DTYPES: dict[str, np.dtype] = {
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<u2"),  # raw half bits; engine.kernels converts them
    "BF16": np.dtype("<u2"),
    "U8": np.dtype("u1"),
    "I64": np.dtype("<i8"),
}
ITEMSIZE = {"F32": 4, "F16": 2, "BF16": 2, "U8": 1, "I64": 8, "F64": 8, "I32": 4, "I16": 2, "I8": 1, "BOOL": 1}
MAX_HEADER_BYTES = 100 * 1024 * 1024
MAX_HEADER_DEPTH = 64      # a real header nests 3 deep; deeper JSON is damage or an attack on the parser
MAX_DIMENSIONS = 8
PICKLE_SUFFIXES = (".ckpt", ".pt", ".pth", ".bin", ".pkl")


@dataclass(frozen=True)
class TensorInfo:
    """Where one tensor lives: file, dtype, shape and absolute byte range."""

    name: str
    path: Path
    dtype: str
    shape: tuple[int, ...]
    offset: int
    nbytes: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def refuse_pickle(path: Path) -> None:
    """Raise if `path` is a pickle-based model file; never opens it."""
    if path.suffix.lower() in PICKLE_SUFFIXES:
        raise ModelFileError(
            f"{path}: refusing to load a '{path.suffix}' file. These are Python pickles and "
            "unpickling one runs whatever code it contains. Use the .safetensors version of "
            "this model (most model pages offer one), or convert it on a machine you trust."
        )


def read_header(path: Path) -> dict[str, TensorInfo]:
    """Parse and validate a safetensors header; return its tensors by name."""
    path = Path(path)
    refuse_pickle(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise ModelFileError(f"{path}: file is {size} bytes, too short to be a safetensors file "
                                     "(truncated copy? copy it again)")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER_BYTES or 8 + n > size:
                raise ModelFileError(
                    f"{path}: not a valid safetensors file (header length {n} bytes, file {size} bytes); "
                    "the file is truncated or is not safetensors: copy or download it again")
            raw = f.read(n)
    except OSError as e:
        raise ModelFileError(f"{path}: cannot read: {e.strerror}") from None
    try:
        header = json_limits.loads(raw, MAX_HEADER_DEPTH)
        if not isinstance(header, dict):
            raise ValueError("header is not a JSON object")
    except ValueError as e:
        raise ModelFileError(f"{path}: corrupt safetensors header ({e}); copy or download the file again") from None

    data_start = 8 + n
    data_size = size - data_start
    tensors: dict[str, TensorInfo] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        dtype, shape, begin, end = _parse_entry(path, name, entry)
        expected = ITEMSIZE[dtype] * math.prod(shape)
        if end - begin != expected or begin < 0:
            raise ModelFileError(
                f"{path}: tensor '{name}' header is inconsistent: {dtype}{list(shape)} needs {expected} bytes "
                f"but its data_offsets span {end - begin}; the file is corrupt")
        if end > data_size:
            raise ModelFileError(
                f"{path}: truncated: tensor '{name}' ends at byte {data_start + end} but the file has only "
                f"{size} bytes. The copy is incomplete: copy or download it again")
        tensors[name] = TensorInfo(name, path, dtype, shape, data_start + begin, end - begin)
    _refuse_overlaps(path, tensors.values())
    return tensors


def _parse_entry(path: Path, name: str, entry: object) -> tuple[str, tuple[int, ...], int, int]:
    """One tensor's dtype, shape and data offsets, each checked for type and range."""
    def whole(v: object) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2 ** 63

    if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= entry.keys():
        raise ModelFileError(f"{path}: corrupt header entry for tensor '{name}': needs dtype, shape and "
                             f"data_offsets, got {_brief(entry)}; the file is corrupt")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype, str) or dtype not in ITEMSIZE:
        raise ModelFileError(f"{path}: tensor '{name}' has unknown dtype {_brief(dtype)} "
                             f"(safetensors knows {', '.join(ITEMSIZE)})")
    if not isinstance(shape, list) or len(shape) > MAX_DIMENSIONS or not all(whole(v) for v in shape):
        raise ModelFileError(f"{path}: tensor '{name}' has an impossible shape {_brief(shape)} (at most "
                             f"{MAX_DIMENSIONS} whole numbers 0 to 2^63); the file is corrupt")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(whole(v) for v in offsets):
        raise ModelFileError(f"{path}: tensor '{name}' has impossible data_offsets {_brief(offsets)} "
                             "(two whole numbers from 0); the file is corrupt")
    return dtype, tuple(shape), offsets[0], offsets[1]


def _refuse_overlaps(path: Path, tensors: Iterable[TensorInfo]) -> None:
    """Two tensors may not share bytes: a file that says so is corrupt or crafted."""
    previous = None
    for info in sorted((t for t in tensors if t.nbytes), key=lambda t: t.offset):
        if previous is not None and info.offset < previous.offset + previous.nbytes:
            raise ModelFileError(f"{path}: tensors '{previous.name}' and '{info.name}' overlap in the file "
                                 "(their data_offsets share bytes); the file is corrupt or was not written by "
                                 "a safetensors writer: download it again")
        previous = info


def _brief(value: object, limit: int = 80) -> str:
    """repr of a header value, cut short: a hostile header may hold megabytes in one entry."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 5] + " ...]"


def read_raw(info: TensorInfo, out: np.ndarray | None = None, fd: int | None = None) -> np.ndarray:
    """Read one tensor's bytes into `out` (or a new array of its storage dtype), with pread."""
    if out is None:
        out = np.empty(info.shape, dtype=DTYPES[info.dtype])
    buf = memoryview(out.reshape(-1).view(np.uint8))
    own = fd is None
    if own:
        fd = os.open(info.path, os.O_RDONLY)
    try:
        pread_into(fd, buf, info.offset, info.path, info.name)
    finally:
        if own:
            os.close(fd)
    return out


def pread_into(fd: int, buf: memoryview, offset: int, path: Path, name: str) -> None:
    """Fill `buf` from `fd` at `offset`, looping over short reads; a short file is a clear error."""
    done = 0
    while done < len(buf):
        try:
            n = os.preadv(fd, [buf[done:]], offset + done)
        except OSError as e:
            raise ModelFileError(f"{path}: read error in tensor '{name}': {e.strerror} "
                                 "(failing SD card or USB drive?)") from None
        if n == 0:
            raise ModelFileError(f"{path}: file ended inside tensor '{name}' (it was truncated after "
                                 "loading started?); copy it again")
        done += n


class SafetensorsWriter:
    """Write a safetensors file tensor by tensor, with the header computed up front.

    The caller declares every tensor (name, dtype, shape) first, then writes their
    bytes in the same order; nothing but the current tensor is held in memory.
    """

    def __init__(self, f: BinaryIO, entries: Iterable[tuple[str, str, tuple[int, ...]]],
                 metadata: dict[str, str] | None = None):
        self._f = f
        header: dict[str, object] = {}
        if metadata:
            header["__metadata__"] = metadata
        self._order: list[tuple[str, int]] = []
        offset = 0
        for name, dtype, shape in entries:
            nbytes = ITEMSIZE[dtype] * int(np.prod(shape, dtype=np.int64))
            header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
            self._order.append((name, nbytes))
            offset += nbytes
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)  # align tensor data to 8 bytes
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        self._next = 0

    def write(self, name: str, array: np.ndarray) -> None:
        expected, nbytes = self._order[self._next]
        if name != expected or array.nbytes != nbytes:
            raise ValueError(f"writer expected {expected} ({nbytes} bytes), got {name} ({array.nbytes} bytes)")
        self._f.write(np.ascontiguousarray(array).reshape(-1).view(np.uint8).data)
        self._next += 1

    def close(self) -> None:
        if self._next != len(self._order):
            raise ValueError(f"writer closed after {self._next} of {len(self._order)} tensors")
