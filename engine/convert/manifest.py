"""The manifest an import writes last into a model folder: where the model came from, how
it was converted, and the size and sha256 of every file, so `models verify` can tell a
complete, unchanged model from a damaged one.

    {"format": "slowframe-model", "version": 1, "created": "2025-...Z",
     "source": {"path": ..., "kind": "sgm" | "diffusers", "files": [{"path", "bytes", "sha256"}]},
     "vae": null | {...same as source...}, "precision": "fp16" | "uint8",
     "loras": [{"path", "sha256", "weight", "format", "modules"}],
     "supplied": ["tokenizer", "tokenizer_2", "scheduler"],   # written by slowframe, not from the source
     "files": {"unet/diffusion_pytorch_model.safetensors": {"bytes", "sha256"}, ...}}
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from engine.errors import ModelFileError

MANIFEST = "slowframe-model.json"
FORMAT = "slowframe-model"
VERSION = 1
HASH_CHUNK = 4 << 20


def sha256_file(path: Path, on_bytes=None) -> str:
    """sha256 of a file read front to back in 4 MB pieces (its pages dropped from the page
    cache behind the read); `on_bytes(n)` is told of each piece."""
    h = hashlib.sha256()
    buf = bytearray(HASH_CHUNK)
    view = memoryview(buf)
    fd = os.open(path, os.O_RDONLY)
    try:
        done = 0
        while True:
            n = os.readv(fd, [view])
            if n == 0:
                break
            h.update(view[:n])
            os.posix_fadvise(fd, done, n, os.POSIX_FADV_DONTNEED)
            done += n
            if on_bytes:
                on_bytes(n)
    finally:
        os.close(fd)
    return h.hexdigest()


def file_record(path: Path) -> dict:
    return {"bytes": path.stat().st_size, "sha256": sha256_file(path)}


def write_manifest(root: Path, manifest: dict) -> None:
    path = root / MANIFEST
    with open(path, "w") as f:
        f.write(json.dumps(manifest, indent=2) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_manifest(root: Path) -> dict:
    """The manifest of a model folder; a clear error when there is none (an unfinished
    import, or a folder slowframe did not write)."""
    root = Path(root)
    path = root / MANIFEST
    if not root.is_dir():
        raise ModelFileError(f"{root}: no such model folder")
    if not path.is_file():
        hint = (" It looks like an unfinished import: run the same `slowframe models import` command again to "
                "finish it." if root.name.endswith(".partial") else
                " `slowframe models import` makes one (it also accepts diffusers folders).")
        raise ModelFileError(f"{root}: not a slowframe model folder (no {MANIFEST}).{hint}")
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ModelFileError(f"{path}: unreadable ({e}); import the model again") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or \
            not isinstance(manifest.get("files"), dict):
        raise ModelFileError(f"{path}: not a slowframe model manifest; import the model again")
    if manifest.get("version", 0) > VERSION:
        raise ModelFileError(f"{path}: written by a newer slowframe (manifest version {manifest['version']}); "
                             "update slowframe")
    return manifest
