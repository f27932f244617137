"""A small filesystem of its own (tmpfs) at a folder, so a test can really fill the disk."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def small_disk(folder: Path, size: str) -> Iterator[bool]:
    """Mount a tmpfs of ``size`` (e.g. "256k", "48m") at ``folder`` (made if missing) for the block; yields
    False, mounting nothing, where that is not allowed (not root, no mount command, a container)."""
    folder.mkdir(parents=True, exist_ok=True)
    mounted = os.geteuid() == 0 and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True).returncode == 0
    try:
        yield mounted
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(folder)], check=False)
