"""Single-file models on the frame: where an imported .safetensors file's model folder is, and which
files dropped onto the models drive are whole and waiting to be imported.

A user copies `juggernaut-xl.safetensors` onto the card's models drive (image/README.md), or
names such a file in the config's model.path; the daemon imports it, in its worker process,
into the folder beside it named after it (`juggernaut-xl/`) and runs that. A file still being
copied must not be imported: it counts as whole once its size and modification time have not
changed for SETTLE_SECONDS (a copy over the network or from the web app writes continuously;
a copy cut short stays short, and the import then says the file is truncated).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SETTLE_SECONDS = 60.0
SUFFIX = ".safetensors"


def is_single_file(path: Path) -> bool:
    """Whether `path` names a single-file model (it need not exist)."""
    return path.suffix.lower() == SUFFIX and not path.is_dir()


def imported_folder(file: Path) -> Path:
    """The model folder a single-file model is imported into: beside it, named after it."""
    return file.parent / file.name[:-len(SUFFIX)]


def model_folder(path: Path) -> Path:
    """The folder the engine runs for the config's model.path (a folder, or a single file)."""
    return imported_folder(path) if is_single_file(path) else path


@dataclass
class _Seen:
    size: int
    mtime_ns: int
    since: float        # monotonic seconds when this size and time were first seen


class DropIns:
    """Single-file models waiting to be imported: in `folder` (the models drive) or named by the config.

    ``look(now)`` is called now and then with monotonic seconds; ``ready(now)`` gives the files whose
    size and time have been still for SETTLE_SECONDS and whose model folder does not exist. A file
    whose import failed is not offered again until it changes (a new copy)."""

    def __init__(self, folder: Path | None):
        self.folder = folder
        self.extra: Path | None = None                  # the config's model.path when it is a single file
        self._seen: dict[Path, _Seen] = {}
        self._failed: dict[Path, tuple[int, int]] = {}

    def candidates(self) -> list[Path]:
        files = []
        if self.folder is not None:
            try:
                files = [p for p in self.folder.iterdir() if p.name.lower().endswith(SUFFIX)
                         and not p.name.startswith(".") and p.is_file()]
            except OSError:
                files = []      # no models drive (a PC, or the card's partition missing): nothing dropped in
        if self.extra is not None and self.extra.is_file() and self.extra not in files:
            files.append(self.extra)
        return sorted(f for f in files if not imported_folder(f).exists())

    def look(self, now: float) -> None:
        current = {}
        for path in self.candidates():
            try:
                st = path.stat()
            except OSError:
                continue
            seen = self._seen.get(path)
            if seen is None or (seen.size, seen.mtime_ns) != (st.st_size, st.st_mtime_ns):
                seen = _Seen(st.st_size, st.st_mtime_ns, now)
            current[path] = seen
        self._seen = current

    def ready(self, now: float) -> list[Path]:
        return [p for p, s in self._seen.items() if now - s.since >= SETTLE_SECONDS
                and self._failed.get(p) != (s.size, s.mtime_ns) and not imported_folder(p).exists()]

    def failed(self, path: Path) -> None:
        seen = self._seen.get(path)
        if seen is not None:
            self._failed[path] = (seen.size, seen.mtime_ns)
