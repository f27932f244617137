"""`slowframe models download REPO_OR_URL`: an SDXL model fetched from the Hugging Face hub
or a plain https:// link into a hidden folder beside the model folder it becomes, checked
file by file (engine/convert/fetch.py), imported (engine/convert/importer.py) and deleted.

Power cuts: the download resumes file by file and byte by byte (HTTP Range); the import
resumes as `models import` does. Running the same command again picks up either.

Disk: the whole download is kept until the import has read it (the import plans the model from
every file's header and reads the files in the engine's order, not as they arrive), then deleted.
So the download's filesystem needs the download's size free, and the model folder's the imported
size; when both are one filesystem, their sum (bench/RESULTS.md gives SDXL's figures). On the
frame the download goes to the state folder on the root partition, which first boot grows to the
end of the card, so that the 8 GB models partition holds only the imported model.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engine.convert.fetch import RETRIES, fetch
from engine.convert.hub import auth_headers, list_files, model_name
from engine.convert.importer import ImportReport, import_model
from engine.errors import ModelFileError, StorageError


@dataclass
class DownloadReport:
    dest: Path
    files: int
    bytes: int                  # the whole download
    received: int               # bytes that came over the network in this run
    resumed: int                # bytes kept from an earlier, interrupted run
    checked: dict[str, int]     # files by what verified them: "sha256", "git sha1", "size", ...
    peak_disk: int              # the most held on one filesystem at once: the download and the model, if together
    imported: ImportReport


def download_folder(dest: Path, download_dir: Path | None = None) -> Path:
    """Where the download for model folder `dest` is kept until it is imported: in
    `download_dir`, or beside `dest`."""
    return (dest.parent if download_dir is None else Path(download_dir)) / f".{dest.name}.download"


def download_model(spec: str, dest: str | Path | None, models_dir: str | Path, precision: str = "fp16",
                   download_dir: str | Path | None = None, log: Callable[[str], object] = print,
                   retries: int = RETRIES, sleep: Callable[[float], object] = time.sleep) -> DownloadReport:
    """Fetch REPO_OR_URL `spec` into `download_dir` (default: beside the model folder) and
    import it as `dest` (default: a folder named after the model in `models_dir`)."""
    dest = Path(models_dir) / model_name(spec) if dest is None else Path(dest)
    if dest.exists():
        raise ModelFileError(f"{dest}: already exists; give another folder name (nothing was downloaded)")
    if not dest.parent.is_dir():
        raise ModelFileError(f"{dest.parent}: no such folder to create {dest.name} in")
    folder = download_folder(dest, Path(download_dir) if download_dir is not None else None)
    folder.mkdir(parents=True, exist_ok=True)
    listing = list_files(spec, folder, log)
    together = folder.stat().st_dev == dest.parent.stat().st_dev
    _check_space(folder, [(folder / p, r.size) for p, r in listing.files.items()], together, log)
    received = resumed = 0
    checked: dict[str, int] = {}
    for path, remote in listing.files.items():
        got = fetch(remote, folder / path, log, auth_headers(remote.url), retries, sleep)
        received += got.received
        resumed += got.resumed_from
        checked[got.checked] = checked.get(got.checked, 0) + 1
        if got.received:
            log(f"  {path}: {got.bytes / 1e6:.1f} MB, checked: {got.checked}")
    total = sum((folder / p).stat().st_size for p in listing.files)
    log(f"downloaded {len(listing.files)} files ({total / 1e9:.2f} GB); importing")
    try:
        imported = import_model(folder / listing.source, dest, precision=precision, log=log)
    except ModelFileError as e:
        raise ModelFileError(f"{e}\nThe download is kept in {folder}; delete it if you do not need it") from None
    shutil.rmtree(folder)
    peak = total + imported.bytes_out if together else max(total, imported.bytes_out)
    return DownloadReport(dest, len(listing.files), total, received, resumed, checked, peak, imported)


def _check_space(folder: Path, files: list[tuple[Path, int | None]], together: bool, log) -> None:
    """Refuse a download that cannot fit; say what the import will need after it."""
    def have(path: Path) -> int:
        for candidate in (path, path.with_name(path.name + ".part")):
            if candidate.is_file():
                return candidate.stat().st_size
        return 0

    total = sum(size or 0 for _, size in files)
    left = sum(max(0, (size or 0) - have(path)) for path, size in files)
    free = shutil.disk_usage(folder).free
    if left > free:
        raise StorageError(f"{folder.parent}: the download needs {left / 1e9:.2f} GB more but only "
                           f"{free / 1e9:.2f} GB is free; free some space and run the same command again")
    log(f"downloading {len(files)} files ({total / 1e9:.2f} GB, {left / 1e9:.2f} GB still to fetch) into {folder}"
        + ("; the import then needs about as much again beside it (less with --precision uint8)" if together else
           ""))
