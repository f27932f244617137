"""An outside view of a disk peak: the blocks the files under some folders occupy, summed in a thread as
often as asked (for the download tests and bench/models_download.py)."""

from __future__ import annotations

import threading
from pathlib import Path

from engine.convert.holes import disk_bytes_under


class DiskSampler:
    def __init__(self, folders: list[Path], every: float = 0.002):
        self.folders, self.every, self.peak = folders, every, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.peak = max(self.peak, disk_bytes_under(self.folders))

    def __enter__(self) -> "DiskSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, disk_bytes_under(self.folders))
