"""What engine.safetensors.read_header does not keep: the header's metadata, and whether it
names a tensor twice (a JSON object with a repeated key parses silently, last one wins)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from engine.errors import ModelFileError
from engine.safetensors import read_header


def header_pairs(path: Path) -> list[tuple[str, object]]:
    """The header's (name, entry) pairs in file order, repeats included. The file must
    have passed read_header (so its header length and JSON are sane)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        raw = f.read(n)
    return json.loads(raw.decode("utf-8"), object_pairs_hook=lambda pairs: pairs)


def check_unique_names(path: Path) -> None:
    """Raise, naming the tensor, if the header lists one name twice."""
    read_header(path)
    seen: set[str] = set()
    for name, _ in header_pairs(path):
        if name in seen:
            raise ModelFileError(f"{path}: tensor '{name}' appears twice in the file's header; the file is corrupt "
                                 "or was written by a broken tool: get it again")
        seen.add(name)


def metadata(path: Path) -> dict[str, str]:
    """The header's __metadata__ (string to string), or {}."""
    read_header(path)
    for name, entry in header_pairs(path):
        if name == "__metadata__" and isinstance(entry, list):
            return {k: v for k, v in entry if isinstance(v, str)}
    return {}
