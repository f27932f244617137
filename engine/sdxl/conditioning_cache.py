"""Conditionings saved on disk, so a resumed or repeated run skips the text encoders.

One .npz file per (model files, prompt, negative prompt, clip_skip, emphasis), named
by a hash of all of them; the newest `max_entries` are kept. Files are written to a
temporary name and renamed, so a power cut leaves either the old state or the new
file; an unreadable file is deleted and recomputed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from pathlib import Path

import numpy as np

from engine.atomic import atomic_write, temp_files

log = logging.getLogger(__name__)

FORMAT = 1   # bump when the conditioning computed for the same inputs changes
STALE_PARTIAL_SECONDS = 3600
FIELDS = ("prompt_embeds", "pooled", "negative_embeds", "negative_pooled")


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "slowframe" / "conditioning"


def files_fingerprint(paths: list[Path]) -> str:
    """Identity of a set of model files: name, size and modification time of each
    (cheap on a 2 GB file, and any copy or edit changes it)."""
    h = hashlib.blake2b(digest_size=16)
    for p in sorted(paths):
        st = p.stat()
        h.update(f"{p.resolve()}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


class ConditioningCache:
    def __init__(self, folder: str | Path, max_entries: int = 64):
        self.folder = Path(folder)
        self.max_entries = max_entries

    @staticmethod
    def key(model: str, prompt: str, negative_prompt: str | None, clip_skip: int, emphasis: bool) -> str:
        spec = json.dumps([FORMAT, model, prompt, negative_prompt, clip_skip, emphasis], ensure_ascii=True)
        return hashlib.blake2b(spec.encode(), digest_size=20).hexdigest()

    def load(self, key: str) -> dict[str, np.ndarray] | None:
        path = self.folder / f"{key}.npz"
        if not path.is_file():
            return None
        try:
            with np.load(path, allow_pickle=False) as data:
                arrays = {name: data[name] for name in FIELDS}
        except (OSError, ValueError, KeyError, EOFError) as e:
            log.warning("%s: unreadable cached conditioning (%s); computing it again", path, e)
            path.unlink(missing_ok=True)
            return None
        os.utime(path)    # most recently used: pruned last
        return arrays

    def save(self, key: str, arrays: dict[str, np.ndarray]) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            with atomic_write(self.folder / f"{key}.npz") as f:
                np.savez(f, **{name: arrays[name] for name in FIELDS})
            self._prune()
        except OSError as e:   # a full or read-only disk costs a recomputation later, nothing more
            log.warning("%s: cannot save the conditioning cache (%s)", self.folder, e.strerror or e)

    def _prune(self) -> None:
        """Keep the newest max_entries; drop partial files a crash left behind."""
        now = time.time()
        for partial in temp_files(self.folder):
            if now - partial.stat().st_mtime > STALE_PARTIAL_SECONDS:
                partial.unlink(missing_ok=True)
        entries = sorted((p for p in self.folder.glob("*.npz") if not p.name.startswith(".")),
                         key=lambda p: p.stat().st_mtime_ns, reverse=True)
        for old in entries[self.max_entries:]:
            old.unlink(missing_ok=True)
