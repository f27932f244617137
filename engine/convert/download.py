"""`slowframe models download REPO_OR_URL`: an SDXL model fetched from the Hugging Face hub
or a plain https:// link into a hidden folder beside the model folder it becomes (or in
--download-dir), checked file by file (engine/convert/fetch.py) and imported
(engine/convert/importer.py) as it arrives.

As it arrives: the weight files' safetensors headers are fetched first (small Range
requests), so the import plans the model before the gigabytes come. Then a thread fetches the
weight files one after another while the import converts each tensor as soon as its bytes
are on disk and fsynced; every 64 MB of output the import makes its progress durable, and
the source bytes it has taken in are given back to the filesystem (holes punched into the
download, engine/convert/holes.py). So the card holds the model being written plus the part
of the download the import has not reached (at most AHEAD_BYTES: the download waits for the
import beyond that), and the whole takes about as long as the slower of the two. A file that
fails its sha256 at its end is fetched again and what was converted from it is converted
again; nothing of the model is published before every file passed its checks.

Power cuts: the download resumes file by file and byte by byte (HTTP Range), its sha256
continued from a saved state (sha256_state.py: the bytes before are gone); the import resumes
from its own progress record, voiding what came from bytes a restarted file no longer holds.
Running the same command again picks up both.

Where the bytes cannot be given back (a filesystem without hole punching such as exFAT, no
libcrypto for the saved sha256 state) the import still follows the download, but the download
is kept whole until the end, as is a download whose sizes the server does not tell, which is
imported after it arrived. The report's peak_disk is measured: the blocks the download and the
model being written held, summed at every fsync of either (bench/RESULTS.md#model-download).
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engine.convert import holes, sha256_state
from engine.convert.fetch import PART, RETRIES, Arrival, Remote, fetch, fetch_header
from engine.convert.hub import Listing, auth_headers, list_files, model_name
from engine.convert.importer import ImportReport, import_model, partial_folder
from engine.errors import ModelFileError, StorageError

AHEAD_BYTES = 256 << 20         # downloaded bytes the import has not taken in yet, at most (when given back)
LOG_EVERY_BYTES = 256 << 20     # a download progress line this often
STOP_WAIT_SECONDS = 5.0         # how long a failed import waits for the download thread to stop


@dataclass
class DownloadReport:
    dest: Path
    files: int
    bytes: int                  # the whole download
    received: int               # bytes that came over the network in this run
    resumed: int                # bytes kept from an earlier, interrupted run
    checked: dict[str, int]     # files by what verified them: "sha256", "git sha1", "size", ...
    peak_disk: int              # the most held on one filesystem at once (measured): download and model, if together
    imported: ImportReport


def download_folder(dest: Path, download_dir: Path | None = None) -> Path:
    """Where the download for model folder `dest` is kept until it is imported: in
    `download_dir`, or beside `dest`."""
    return (dest.parent if download_dir is None else Path(download_dir)) / f".{dest.name}.download"


def download_model(spec: str, dest: str | Path | None, models_dir: str | Path, precision: str = "fp16",
                   download_dir: str | Path | None = None, log: Callable[[str], object] = print,
                   retries: int = RETRIES, sleep: Callable[[float], object] = time.sleep) -> DownloadReport:
    """Fetch REPO_OR_URL `spec` into `download_dir` (default: beside the model folder) and
    import it as `dest` (default: a folder named after the model in `models_dir`) while it arrives."""
    dest = Path(models_dir) / model_name(spec) if dest is None else Path(dest)
    if dest.exists():
        raise ModelFileError(f"{dest}: already exists; give another folder name (nothing was downloaded)")
    if not dest.parent.is_dir():
        raise ModelFileError(f"{dest.parent}: no such folder to create {dest.name} in")
    folder = download_folder(dest, Path(download_dir) if download_dir is not None else None)
    folder.mkdir(parents=True, exist_ok=True)
    listing = list_files(spec, folder, log)
    weights = [p for p in listing.files if p.endswith(".safetensors")]
    follow = all(listing.files[p].size is not None for p in weights)
    give_back = follow and sha256_state.available() and holes.supported(folder)
    together = folder.stat().st_dev == dest.parent.stat().st_dev
    _check_space(folder, [(folder / p, r.size) for p, r in listing.files.items()], together, give_back, log)
    disk = _DiskPeak(folder, [partial_folder(dest), dest], together)
    tally = _Tally()
    for path, remote in listing.files.items():
        if path not in weights or not follow:
            tally.add(path, fetch(remote, folder / path, log, auth_headers(remote.url), retries, sleep), log)
    try:
        if follow:
            arrivals = _Arrivals(folder, listing, weights, give_back, disk, tally, log, retries, sleep)
            imported = arrivals.run(lambda: import_model(folder / listing.source, dest, precision=precision, log=log,
                                                         arriving=arrivals))
        else:
            log(f"downloaded {len(listing.files)} files; importing (the server did not give every file's size, so "
                "the import could not follow the download)")
            disk.sample()
            imported = import_model(folder / listing.source, dest, precision=precision, log=log)
    except ModelFileError as e:
        raise ModelFileError(f"{e}\nThe download is kept in {folder}; delete it if you do not need it") from None
    disk.sample()
    shutil.rmtree(folder)
    return DownloadReport(dest, len(listing.files), tally.bytes, tally.received, tally.resumed, tally.checked,
                          disk.peak(), imported)


class _Tally:
    """What the files' fetches did, for the report."""

    def __init__(self) -> None:
        self.bytes = self.received = self.resumed = 0
        self.checked: dict[str, int] = {}

    def add(self, path: str, got, log) -> None:
        self.bytes += got.bytes
        self.received += got.received
        self.resumed += got.resumed_from
        self.checked[got.checked] = self.checked.get(got.checked, 0) + 1
        if got.received:
            log(f"  {path}: {got.bytes / 1e6:.1f} MB, checked: {got.checked}")


class _DiskPeak:
    """The most the download and the model being written held at once, from their files'
    allocated blocks (holes excluded), summed whenever asked (at every fsync)."""

    def __init__(self, download: Path, model: list[Path], together: bool):
        self.download, self.model, self.together = download, model, together
        self._lock = threading.Lock()
        self._peaks = [0, 0, 0]          # download, model, both

    def sample(self) -> None:
        held = [holes.disk_bytes_under([self.download]), holes.disk_bytes_under(self.model)]
        with self._lock:
            self._peaks = [max(a, b) for a, b in zip(self._peaks, held + [sum(held)])]

    def peak(self) -> int:
        return self._peaks[2] if self.together else max(self._peaks[:2])


class _Stopped(BaseException):
    """The import failed or was interrupted: the download thread stops at its next fsync."""


class _Followed(Arrival):
    """One weight file as it arrives: its bytes' progress, told by fetch in the download thread."""

    def __init__(self, arrivals: "_Arrivals", path: str, remote: Remote, order: int):
        self.arrivals, self.path, self.remote, self.order = arrivals, path, remote, order
        self.final = arrivals.folder / path
        self.part = self.final.with_name(self.final.name + PART)
        self.header_end = 0
        self.header_received = 0             # of the header, the bytes that came in this run
        self.attempt: str | None = None
        self.durable_bytes = 0
        self.sha256: str | None = None       # set once the whole file passed its checks
        self.consumed: tuple[str, int] | None = None   # (attempt, end): the import needs no byte of it before end
        self.given_back = 0                  # holes punched up to here

    def started(self, attempt: str, durable: int) -> None:
        with self.arrivals.cond:
            self.attempt, self.durable_bytes, self.sha256 = attempt, durable, None
            self.given_back = 0
            self.give_back()        # what the import, resumed, already said it is done with
            self.arrivals.cond.notify_all()

    def durable(self, n: int) -> None:
        self.arrivals.durable(self, n)

    def checked(self, sha256: str) -> None:
        with self.arrivals.cond:
            self.sha256 = sha256
            self.arrivals.cond.notify_all()

    def give_back(self) -> None:
        """Punch out the bytes the import is done with (called with the lock held)."""
        if self.consumed is None or self.consumed[0] != self.attempt:
            return
        end = min(self.consumed[1], self.durable_bytes)
        if self.arrivals.give_back and end > max(self.given_back, self.header_end):
            start = max(self.given_back, self.header_end)     # the header stays: a resumed import plans from it
            fd = os.open(self.part, os.O_WRONLY)
            try:
                holes.punch(fd, start, end - start)
            finally:
                os.close(fd)
            self.given_back = end

    def ahead(self) -> int:
        return max(0, self.durable_bytes - max(self.given_back, self.header_end)) if self.arrivals.give_back else 0


class _Arrivals:
    """The weight files of a download, fetched one after another by a thread while the import
    follows them (importer.Arriving)."""

    def __init__(self, folder: Path, listing: Listing, weights: list[str], give_back: bool, disk: _DiskPeak,
                 tally: _Tally, log, retries: int, sleep):
        self.folder, self.give_back, self.disk, self.tally, self.log = folder, give_back, disk, tally, log
        self.retries, self.sleep = retries, sleep
        self.cond = threading.Condition()
        self.files = [_Followed(self, p, listing.files[p], i) for i, p in enumerate(weights)]
        self.by_part = {f.part: f for f in self.files}
        self.total = sum(f.remote.size for f in self.files)
        self.error: BaseException | None = None
        self.stopped = self.import_waiting = False
        self._next_log = LOG_EVERY_BYTES
        self._thread = threading.Thread(target=self._download, name="download", daemon=True)

    def run(self, do_import: Callable[[], ImportReport]) -> ImportReport:
        for f in self.files:
            f.header_end, f.header_received = fetch_header(f.remote, f.final, self.log, auth_headers(f.remote.url))
        self.log(f"importing while the {self.total / 1e9:.2f} GB of weights arrive"
                 + ("; their bytes are given back to the card as the import takes them in" if self.give_back else ""))
        try:
            report = do_import()
        except BaseException:
            with self.cond:
                self.stopped = True
                self.cond.notify_all()
            if self._thread.is_alive():
                self._thread.join(STOP_WAIT_SECONDS)
            raise
        self._thread.join()
        return report

    def _start(self) -> None:
        """The download goes on once the import has planned from the headers (a file that
        starts over loses its header until it comes again)."""
        with self.cond:
            if self._thread.ident is None:
                self._thread.start()

    def _download(self) -> None:
        try:
            for f in self.files:
                got = fetch(f.remote, f.final, self.log, auth_headers(f.remote.url), self.retries, self.sleep, f)
                got.received += f.header_received       # the header came in this run too, not in an earlier one
                got.resumed_from = max(0, got.resumed_from - f.header_received)
                self.tally.add(f.path, got, self.log)
        except _Stopped:
            pass
        except BaseException as e:       # handed to the import, which raises it
            with self.cond:
                self.error = e
                self.cond.notify_all()

    def durable(self, f: _Followed, n: int) -> None:
        self.disk.sample()
        with self.cond:
            f.durable_bytes = n
            f.give_back()
            self.cond.notify_all()
            done = sum(g.durable_bytes for g in self.files)
            if done >= self._next_log:
                self._next_log = done + LOG_EVERY_BYTES
                self.log(f"  {done / 1e9:.2f} of {self.total / 1e9:.2f} GB downloaded ({100 * done / self.total:.0f}%)")
            while not self.stopped and not self.import_waiting and sum(g.ahead() for g in self.files) > AHEAD_BYTES:
                self.cond.wait()
            if self.stopped:
                raise _Stopped

    # -- importer.Arriving --------------------------------------------------------------

    def weights(self, folder: Path, stem: str) -> list[Path]:
        return sorted((f.part for f in self.files if f.final.parent == folder), key=lambda p: p.name)

    def where(self, path: Path) -> Path:
        return next(f.part for f in self.files if f.final == path)

    def identity(self, path: Path) -> list | None:
        f = self.by_part.get(path)
        return None if f is None else [str(f.final), f.remote.size, f.remote.sha256 or f.remote.url]

    def order(self, path: Path) -> int:
        return self.by_part[path].order

    def attempt(self, path: Path) -> str | None:
        with self.cond:
            return self.by_part[path].attempt

    def wait(self, path: Path, end: int, idle: Callable[[], None]) -> str:
        self._start()
        f = self.by_part[path]
        ready = lambda: f.attempt is not None and f.durable_bytes >= end  # noqa: E731
        with self.cond:
            if ready():
                return f.attempt
        idle()
        return self._wait_for(ready, lambda: f.attempt)

    def finished(self, idle: Callable[[], None]) -> None:
        self._start()
        idle()
        self._wait_for(lambda: all(f.sha256 is not None for f in self.files), lambda: None)

    def settle(self, path: Path, attempt: str, idle: Callable[[], None]) -> bool:
        self._start()
        f = self.by_part[path]
        idle()
        return self._wait_for(lambda: f.attempt != attempt or f.sha256 is not None, lambda: f.attempt == attempt)

    def _wait_for(self, ready: Callable[[], bool], value: Callable[[], object]):
        with self.cond:
            self.import_waiting = True
            self.cond.notify_all()
            try:
                while not ready() and self.error is None:
                    self.cond.wait()
            finally:
                self.import_waiting = False
            if self.error is not None:
                raise self.error
            return value()

    def consumed(self, path: Path, end: int, attempt: str) -> None:
        self.disk.sample()
        with self.cond:
            f = self.by_part[path]
            if f.consumed is None or f.consumed[0] != attempt or end > f.consumed[1]:
                f.consumed = (attempt, end)
                f.give_back()
                self.cond.notify_all()

    def record(self, path: Path) -> dict | None:
        f = self.by_part.get(path)
        return None if f is None else {"path": str(f.final), "bytes": f.remote.size, "sha256": f.sha256}


def _check_space(folder: Path, files: list[tuple[Path, int | None]], together: bool, give_back: bool, log) -> None:
    """Refuse a download that cannot fit; say what the import will need beside it."""
    def have(path: Path) -> int:
        for candidate in (path, path.with_name(path.name + PART)):
            if candidate.is_file():
                return holes.disk_bytes(candidate)
        return 0

    total = sum(size or 0 for _, size in files)
    left = sum(max(0, (size or 0) - have(path)) for path, size in files)
    needed = min(left, AHEAD_BYTES) if give_back else left
    free = shutil.disk_usage(folder).free
    if needed > free:
        raise StorageError(f"{folder.parent}: the download needs {needed / 1e9:.2f} GB more but only "
                           f"{free / 1e9:.2f} GB is free; free some space and run the same command again")
    log(f"downloading {len(files)} files ({total / 1e9:.2f} GB, {left / 1e9:.2f} GB still to fetch) into {folder}"
        + ("" if not together else "; the model needs about as much beside it (less with --precision uint8)"
           if give_back else "; the import needs about as much again beside it (less with --precision uint8)"))
