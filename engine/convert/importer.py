"""`slowframe models import SRC DEST`: a diffusers folder or a single-file SGM model
becomes a model folder the engine runs (diffusers layout plus slowframe-model.json),
converted tensor by tensor on the Pi itself.

Memory: one band of rows of one tensor at a time (at most CHUNK_ELEMENTS as fp32), so
a 7 GB single-file model imports in well under 300 MB. Weights are written as fp16; with
precision "uint8" the UNet's matrices and kernels are stored as uint8 with a scale and
zero point per output channel (engine/quantize.py's format) and everything else as
fp16. LoRAs given at import are merged into the weights on the way.

Interruptions: everything is written into a hidden `.DEST.partial` folder next to DEST,
renamed to DEST only when complete and fsynced, so DEST never exists half-written.
Progress (bytes of each weight file written and fsynced, and the source's hashes) is
saved as it goes; running the same command again resumes where it stopped, and a
changed source, option or slowframe version starts over.

Arriving sources (`models download`, engine/convert/download.py): the weight files are
planned from the source files' headers, which arrive first, and each tensor is converted
as soon as its source bytes are on disk, written at its planned place in its weight file
(so the files fill in arrival order, not front to back); the bytes it read are then given
back. A source file that fails its check at its end voids what was converted from it,
which is converted again from the bytes fetched anew. Each weight file's sha256 is read
back from it once it is complete.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol

import numpy as np

import engine
from engine import kernels
from engine.atomic import atomic_write, publish
from engine.convert import manifest as mf
from engine.convert import project_files
from engine.convert.diffusers_source import open_diffusers, open_vae
from engine.convert.layout import COMPONENTS, expected_shapes, weight_file
from engine.convert.lora import LoraFile, LoraPatch, bind, open_loras
from engine.convert.sgm_source import open_sgm
from engine.convert.source import ModelSource, SourceTensor
from engine.errors import EngineError, InputError, ModelFileError, NetworkError, StorageError
from engine.quantize import FORMAT as UINT8_FORMAT
from engine.quantize import quantize_rows, should_quantize
from engine.safetensors import ITEMSIZE, SafetensorsWriter, pread_into, refuse_pickle
from engine.sdxl.unet_config import parse_config as parse_unet_config
from engine.weights import Q_SCALE, Q_ZERO

PRECISIONS = ("fp16", "uint8")     # uint8: the UNet's matrices and kernels; the rest stays fp16
CHUNK_ELEMENTS = 4 << 20          # rows converted at once: 16 MB as fp32
DURABLE_BYTES = 64 << 20       # progress is made durable after this much output
STATE_FILE = ".import-state.json"
STATE_VERSION = 1
FP16_MAX = 65504.0
FP16_OVERFLOW = 65520.0           # rounds to infinity from here on
LOG_EVERY_BYTES = 256 << 20


@dataclass
class ImportReport:
    dest: Path
    bytes_in: int
    bytes_out: int
    seconds: float
    resumed_bytes: int             # output already written by an interrupted run
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ImportProgress:
    """Told after every tensor written."""

    file: str
    tensor: str
    index: int          # tensors of this file done
    bytes_done: int     # all weight files, this run and earlier ones
    bytes_total: int


class Arriving(Protocol):
    """Source files that are still arriving (a download): where they grow, and their bytes
    as they become durable. Paths are those the source's tensors are read from."""

    def weights(self, folder: Path, stem: str) -> list[Path]:
        """A diffusers component's weight files, where they grow."""

    def where(self, path: Path) -> Path:
        """Where the single-file model `path` grows."""

    def identity(self, path: Path) -> list | None:
        """What the arriving file will be when whole (for the resume fingerprint); None for
        a file that is already whole."""

    def order(self, path: Path) -> int:
        """Its place in the order the files arrive."""

    def wait(self, path: Path, end: int, idle: Callable[[], None]) -> str:
        """Block until bytes 0..end are durable; returns the attempt they belong to. Calls
        idle() before blocking. Raises the download's error if it fails."""

    def attempt(self, path: Path) -> str | None:
        """The attempt whose bytes the file holds now."""

    def consumed(self, path: Path, end: int, attempt: str) -> None:
        """What was converted from bytes before `end` of `attempt` is durable: they are not
        needed any more."""

    def finished(self, idle: Callable[[], None]) -> None:
        """Block until every file arrived whole and passed its checks."""

    def settle(self, path: Path, attempt: str, idle: Callable[[], None]) -> bool:
        """Block until `attempt` of the file passed its checks (True) or was voided by a new
        attempt (False)."""

    def record(self, path: Path) -> dict | None:
        """{"path", "bytes", "sha256"} of an arrived file for the manifest; None for a file
        that was whole before."""


@dataclass
class _Output:
    """One weight file to write: its tensors in order, and which become uint8."""

    component: str
    path: str                                       # relative to the model folder
    tensors: list[tuple[str, SourceTensor, bool]]   # (name, source, quantize)
    metadata: dict[str, str]
    patch: LoraPatch | None

    def entries(self) -> list[tuple[str, str, tuple[int, ...]]]:
        out = []
        for name, src, quantize in self.tensors:
            if quantize:
                out += [(name, "U8", src.shape), (name + Q_SCALE, "F32", src.shape[:1]),
                        (name + Q_ZERO, "F32", src.shape[:1])]
            else:
                out.append((name, "F16", src.shape))
        return out

    def header(self) -> bytes:
        buf = io.BytesIO()
        SafetensorsWriter(buf, self.entries(), self.metadata)
        return buf.getvalue()

    def size(self) -> int:
        return len(self.header()) + sum(self.tensor_bytes())

    def tensor_bytes(self) -> list[int]:
        """Bytes each tensor takes in the file (a uint8 one with its scales and zeros)."""
        sizes = [ITEMSIZE[d] * int(np.prod(s, dtype=np.int64)) for _, d, s in self.entries()]
        out, at = [], 0
        for _, _, quantize in self.tensors:
            n = 3 if quantize else 1
            out.append(sum(sizes[at:at + n]))
            at += n
        return out


def import_model(src: str | Path, dest: str | Path, precision: str = "fp16",
                 loras: list[tuple[str | Path, float]] = (), vae: str | Path | None = None,
                 config_dir: str | Path | None = None, log: Callable[[str], object] = print,
                 progress: Callable[[ImportProgress], object] | None = None,
                 arriving: Arriving | None = None) -> ImportReport:
    """Convert SRC (diffusers folder or SGM .safetensors) into the model folder DEST; with
    `arriving`, while its files still arrive."""
    started = time.monotonic()
    src, dest = Path(src), Path(dest)
    if precision not in PRECISIONS:
        raise InputError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if dest.exists():
        raise ModelFileError(f"{dest}: already exists; give a new folder name (nothing was changed)")
    if not dest.parent.is_dir():
        raise ModelFileError(f"{dest.parent}: no such folder to create {dest.name} in")
    partial = partial_folder(dest)
    source = _open_source(src, Path(config_dir) if config_dir else None, arriving)
    lora_files: list[LoraFile] = []
    try:
        if vae is not None:
            source.components["vae"] = open_vae(Path(vae), source)
        lora_files = open_loras(list(loras))
        outputs = _plan(source, precision, lora_files)
        for note in source.notes:
            log(note)
        fingerprint = _fingerprint(source, precision, lora_files, vae, outputs, arriving)
        state = _State.resume_or_start(partial, fingerprint, log)
        total = sum(o.size() for o in outputs)
        _check_space(partial, total - state.bytes_written())
        try:
            report = _run(source, dest, partial, state, outputs, precision, lora_files, vae, total, log, progress,
                          arriving)
        except (NetworkError, StorageError):
            raise                                           # the download broke off: the next run resumes both
        except EngineError:
            shutil.rmtree(partial, ignore_errors=True)   # the source is bad: resuming cannot help
            raise
        except OSError as e:
            raise ModelFileError(f"{e.filename or partial}: {e.strerror}. What was converted so far is kept in "
                                 f"{partial}: fix the problem and run the same command again to resume") from None
        except KeyboardInterrupt:
            log(f"interrupted; run the same command again to resume (progress is kept in {partial})")
            raise
    finally:
        for lora in lora_files:
            lora.close()
        source.close()
    report.seconds = time.monotonic() - started
    return report


def partial_folder(dest: Path) -> Path:
    """Where the import into `dest` is written until it is complete."""
    return dest.parent / f".{dest.name}.partial"


def _open_source(src: Path, config_dir: Path | None, arriving: Arriving | None) -> ModelSource:
    if src.is_dir():
        if config_dir is not None:
            raise InputError("--config is for single-file models; a diffusers folder has its own configs")
        source = open_diffusers(src) if arriving is None else open_diffusers(src, arriving.weights)
    elif arriving is not None:
        source = open_sgm(arriving.where(src), config_dir)
        source.path = src
    elif src.is_file():
        refuse_pickle(src)
        if src.suffix.lower() != ".safetensors":
            raise ModelFileError(f"{src}: expected a single-file .safetensors model or a diffusers model folder")
        source = open_sgm(src, config_dir)
    else:
        raise ModelFileError(f"{src}: no such file or folder")
    return source


def _plan(source: ModelSource, precision: str, loras: list[LoraFile]) -> list[_Output]:
    """The four weight files: tensors in the order the engine reads them, LoRAs bound."""
    outputs = []
    for component in COMPONENTS:
        comp = source.components[component]
        order = expected_shapes(component, comp.config, comp.origin, comp.tensors)
        shapes = {name: tuple(shape) for name, shape in order.items()}
        unet = parse_unet_config(comp.config) if component == "unet" else None
        patch = bind(loras, component, shapes, unet) if component != "vae" else None
        uint8 = precision == "uint8" and component == "unet"
        tensors = [(name, comp.tensors[name], uint8 and should_quantize(shapes[name])) for name in order]
        metadata = {"format": "pt"}
        if uint8:
            metadata["slowframe_quantization"] = UINT8_FORMAT
        outputs.append(_Output(component, weight_file(component), tensors, metadata, patch))
    return outputs


def _fingerprint(source: ModelSource, precision: str, loras: list[LoraFile], vae, outputs: list[_Output],
                 arriving: Arriving | None) -> str:
    """What decides the output: the source files as they are now (or will be: arriving), the
    options, the plan."""
    def identity(path: Path) -> list:
        planned = arriving.identity(path) if arriving is not None else None
        if planned is not None:
            return planned
        st = path.stat()
        return [str(path.resolve()), st.st_size, st.st_mtime_ns]

    data = {
        "version": [STATE_VERSION, engine.__version__],
        "sources": [identity(p) for p in source.files()],
        "loras": [identity(l.path) + [l.weight] for l in loras],
        "vae": str(vae) if vae else None,
        "precision": precision,
        "configs": {c: source.components[c].config for c in COMPONENTS},
        "files": {o.path: [list(e) for e in o.entries()] for o in outputs},
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def _check_space(partial: Path, needed: int) -> None:
    free = shutil.disk_usage(partial).free
    if needed > free:
        raise ModelFileError(f"{partial.parent}: the import needs {needed / 1e9:.2f} GB more but only "
                             f"{free / 1e9:.2f} GB is free; free some space and run the command again")


class _State:
    """The resume record inside the .partial folder."""

    def __init__(self, folder: Path, fingerprint: str, data: dict):
        self.folder = folder
        self.fingerprint = fingerprint
        self.data = data

    @classmethod
    def resume_or_start(cls, folder: Path, fingerprint: str, log) -> "_State":
        path = folder / STATE_FILE
        if path.is_file():
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                data = {}
            if data.get("fingerprint") == fingerprint:
                state = cls(folder, fingerprint, data)
                log(f"resuming an interrupted import ({state.bytes_written() / 1e9:.2f} GB already converted)")
                return state
            log(f"{folder} holds an interrupted import of something else (another source or other options); "
                "starting over")
        elif folder.exists():
            log(f"{folder} holds an unfinished import without progress records; starting over")
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir()
        state = cls(folder, fingerprint, {"fingerprint": fingerprint, "files": {}, "sources": None})
        state.save()
        return state

    def bytes_written(self) -> int:
        return sum(f["bytes"] for f in self.data["files"].values())

    def file(self, path: str) -> dict | None:
        return self.data["files"].get(path)

    def set_file(self, path: str, record: dict) -> None:
        self.data["files"][path] = record
        self.save()

    def save(self) -> None:
        with atomic_write(self.folder / STATE_FILE, "w", durable=True) as f:
            f.write(json.dumps(self.data, indent=1))


def _run(source: ModelSource, dest: Path, partial: Path, state: _State, outputs: list[_Output], precision: str,
         loras: list[LoraFile], vae, total: int, log, progress, arriving: Arriving | None) -> ImportReport:
    resumed = state.bytes_written()
    if state.data["sources"] is None and arriving is None:
        model = [c for c in COMPONENTS if not (vae and c == "vae")]
        state.data["sources"] = _hashes(source.files(model), log)
        state.data["vae"] = _hashes(source.components["vae"].files, log) if vae else []
        state.data["loras"] = [dict(lora.describe(), sha256=mf.sha256_file(lora.path)) for lora in loras]
        state.save()
    counter = _Counter(total, resumed, log)
    if arriving is None:
        for out in outputs:
            _write_weights(out, partial, state, counter, progress)
    else:
        _write_arriving(outputs, partial, state, counter, progress, arriving, log)
        state.data["sources"] = _arrived_hashes(source, arriving)
        state.data["vae"], state.data["loras"] = [], []
        state.save()
    supplied = _write_other_files(source, partial, precision)
    files = {}
    for path in sorted(p for p in partial.rglob("*") if p.is_file() and p.name != STATE_FILE):
        rel = path.relative_to(partial).as_posix()
        record = state.file(rel)
        files[rel] = {"bytes": record["bytes"], "sha256": record["sha256"]} if record else mf.file_record(path)
    sources = state.data["sources"]
    manifest = {
        "format": mf.FORMAT, "version": mf.VERSION,
        "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "source": {"path": str(source.path), "kind": source.kind, "files": sources},
        "vae": {"path": str(vae), "files": state.data["vae"]} if vae else None,
        "precision": precision,
        "loras": state.data["loras"],
        "supplied": supplied,
        "files": files,
    }
    mf.write_manifest(partial, manifest)
    (partial / STATE_FILE).unlink()
    if dest.exists():
        raise ModelFileError(f"{dest}: appeared while importing; the finished import is kept in {partial}")
    publish(partial, dest, durable=True)
    bytes_in = sum(s["bytes"] for s in sources + state.data["vae"])
    return ImportReport(dest, bytes_in, sum(f["bytes"] for f in files.values()), 0.0, resumed, source.notes)


def _hashes(paths: list[Path], log) -> list[dict]:
    """Size and sha256 of each source file, with a log line per GB read (minutes on a Pi)."""
    total = sum(p.stat().st_size for p in paths)
    log(f"hashing the source ({total / 1e9:.2f} GB, sha256)")
    counter = _Counter(total, 0, log, "hashed")
    return [{"path": str(p), "bytes": p.stat().st_size, "sha256": mf.sha256_file(p, counter.add)} for p in paths]


class _Counter:
    """Bytes done, with a log line every LOG_EVERY_BYTES."""

    def __init__(self, total: int, done: int, log, verb: str = "written"):
        self.total, self.done, self.log, self.verb = total, done, log, verb
        self._next_log = done + LOG_EVERY_BYTES

    def add(self, n: int) -> None:
        self.done += n
        if self.done >= self._next_log:
            self._next_log = self.done + LOG_EVERY_BYTES
            self.log(f"  {self.done / 1e9:.2f} of {self.total / 1e9:.2f} GB {self.verb} "
                     f"({100 * self.done / self.total:.0f}%)")


def _write_weights(out: _Output, root: Path, state: _State, counter: _Counter, progress) -> None:
    record = state.file(out.path)
    if record and record.get("sha256"):
        return  # finished by an earlier run
    path = root / out.path
    path.parent.mkdir(parents=True, exist_ok=True)
    header = out.header()
    hasher = hashlib.sha256()
    start = 0
    if record and path.is_file() and path.stat().st_size >= record["bytes"] >= len(header):
        f = open(path, "r+b")
        f.truncate(record["bytes"])
        _hash_prefix(f, record["bytes"], hasher)
        f.seek(record["bytes"])
        start = record["tensors"]
    else:
        f = open(path, "wb")
        f.write(header)
        hasher.update(header)
    with f:
        since_durable = 0
        for i in range(start, len(out.tensors)):
            name, src, quantize = out.tensors[i]
            written = _write_tensor(f, hasher, name, src, quantize, out.patch)
            counter.add(written)
            since_durable += written
            if since_durable >= DURABLE_BYTES or i == len(out.tensors) - 1:
                f.flush()
                os.fsync(f.fileno())
                done = i == len(out.tensors) - 1
                state.set_file(out.path, {"bytes": f.tell(), "tensors": i + 1,
                                          "sha256": hasher.hexdigest() if done else None})
                since_durable = 0
            if progress is not None:
                progress(ImportProgress(out.path, name, i + 1, counter.done, counter.total))


def _hash_prefix(f, n: int, hasher) -> None:
    f.seek(0)
    left = n
    while left:
        block = f.read(min(left, mf.HASH_CHUNK))
        hasher.update(block)
        left -= len(block)


def _write_tensor(f, hasher, name: str, src: SourceTensor, quantize: bool, patch: LoraPatch | None) -> int:
    """Convert one tensor band by band; returns the bytes written."""
    shape = src.shape
    rows = shape[0] if shape else 1
    row_elements = int(np.prod(shape[1:], dtype=np.int64)) if shape else 1
    step = max(1, CHUNK_ELEMENTS // max(1, row_elements))
    copy = not quantize and src.info.dtype == "F16" and src.copyable and (patch is None or name not in patch)
    written = 0
    scales, zeros = (np.empty(rows, np.float32), np.empty(rows, np.float32)) if quantize else (None, None)
    fd = os.open(src.info.path, os.O_RDONLY) if copy else -1
    try:
        for r0 in range(0, rows, step):
            r1 = min(rows, r0 + step)
            if copy:
                offset, length = src.byte_range(r0, r1)
                data = np.empty(length // 2, dtype=np.uint16)
                pread_into(fd, memoryview(data.view(np.uint8)), offset, src.info.path, src.key)
                if np.any(data & 0x7C00 == 0x7C00):
                    _not_finite(src)
            else:
                data = _convert_rows(name, src, r0, r1, quantize, patch, scales, zeros)
            written += _emit(f, hasher, data)
    finally:
        if copy:
            os.close(fd)
    if quantize:
        written += _emit(f, hasher, scales) + _emit(f, hasher, zeros)
    return written


def _convert_rows(name: str, src: SourceTensor, r0: int, r1: int, quantize: bool, patch: LoraPatch | None,
                  scales: np.ndarray | None, zeros: np.ndarray | None) -> np.ndarray:
    """Rows r0:r1 as fp32, LoRA applied, then as stored: uint8 (its scales and zeros
    filled in) or fp16 bits."""
    w = src.read_rows(r0, r1)
    if patch is not None:
        patch(name, w, r0)
    if not np.isfinite(w).all():
        _not_finite(src)
    if quantize:
        q, scales[r0:r1], zeros[r0:r1] = quantize_rows(w)
        return q
    peak = float(np.abs(w).max()) if w.size else 0.0
    if peak >= FP16_OVERFLOW:
        raise ModelFileError(f"{src.info.path}: tensor '{src.key}' has values up to {peak:g}, beyond fp16's "
                             f"range ({FP16_MAX:g}); this model cannot be stored in fp16")
    return kernels.f32_to_f16(w, np.empty(w.shape, dtype=np.uint16))


def _emit(f, hasher, array: np.ndarray) -> int:
    view = memoryview(np.ascontiguousarray(array).reshape(-1).view(np.uint8))
    f.write(view)
    if hasher is not None:
        hasher.update(view)
    return len(view)


def _not_finite(src: SourceTensor) -> None:
    raise ModelFileError(f"{src.info.path}: tensor '{src.key}' contains NaN or infinite values; the model file is "
                         "damaged (or was saved from a diverged training run): get it again")


def _arrived_hashes(source: ModelSource, arriving: Arriving) -> list[dict]:
    """The source files as the manifest lists them: the arrived ones with the sha256 their
    check computed (their bytes are gone by now), the others hashed here (small files)."""
    records = []
    for path in source.files():
        record = arriving.record(path)
        records.append(record if record is not None else
                       {"path": str(path), "bytes": path.stat().st_size, "sha256": mf.sha256_file(path)})
    return records


class _Placed:
    """One weight file filled in arrival order: each tensor at its planned offset; `done`
    holds the tensors written (durable once recorded)."""

    def __init__(self, out: _Output, root: Path, state: _State):
        self.out = out
        header = out.header()
        self.sizes = out.tensor_bytes()
        self.offsets = list(np.cumsum([len(header)] + self.sizes[:-1], dtype=np.int64).tolist())
        self.path = root / out.path
        record = state.file(out.path) or {}
        ends = [self.offsets[i] + self.sizes[i] for i in record.get("done", ())]
        if self.path.is_file() and self.path.stat().st_size >= max(ends, default=0) and "done" in record:
            self.done = set(record["done"])
            self.sha256 = record.get("sha256")
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "wb") as f:
                f.write(header)
                f.truncate(len(header) + sum(self.sizes))   # sparse until written
            self.done, self.sha256 = set(), None
        self.f = open(self.path, "r+b")
        self.header_bytes = len(header)
        self.dirty = False

    def write(self, i: int) -> int:
        name, src, quantize = self.out.tensors[i]
        self.f.seek(self.offsets[i])
        written = _write_tensor(self.f, None, name, src, quantize, self.out.patch)
        self.done.add(i)
        self.dirty = True
        return written

    def forget(self, path: Path) -> list[int]:
        """Void the tensors read from source file `path`; returns them."""
        void = [i for i in self.done if self.out.tensors[i][1].info.path == path]
        self.done.difference_update(void)
        self.sha256 = None
        return void

    def record(self) -> dict:
        if self.dirty:
            self.f.flush()
            os.fsync(self.f.fileno())
            self.dirty = False
        if len(self.done) == len(self.sizes) and self.sha256 is None:
            self.sha256 = mf.sha256_file(self.path)     # read back once complete: it was written out of order
        return {"bytes": self.header_bytes + sum(self.sizes[i] for i in self.done), "done": sorted(self.done),
                "sha256": self.sha256}


def _write_arriving(outputs: list[_Output], root: Path, state: _State, counter: _Counter, progress,
                    arriving: Arriving, log) -> None:
    """Convert every tensor as soon as its source bytes are durable, in the order they arrive;
    fsync and record every DURABLE_BYTES (and before waiting for more bytes), then tell
    `arriving` which source bytes are no longer needed."""
    placed = [_Placed(out, root, state) for out in outputs]
    attempts: dict[str, str] = state.data.setdefault("attempts", {})   # source file -> attempt it was read from
    todo: list[tuple[_Placed, int]] = []

    def source_of(item: tuple[_Placed, int]):
        return item[0].out.tensors[item[1]][1].info

    def queue(items) -> None:
        todo.extend(items)
        todo.sort(key=lambda item: (-arriving.order(source_of(item).path), -source_of(item).offset))

    def flush() -> None:
        for p in placed:
            state.data["files"][p.out.path] = p.record()
        state.save()
        low: dict[Path, int] = {}
        for item in todo:
            info = source_of(item)
            low[info.path] = min(low.get(info.path, info.offset), info.offset)
        for key, attempt in attempts.items():
            path = Path(key)
            arriving.consumed(path, low.get(path, path.stat().st_size), attempt)

    def redo(path: Path) -> None:
        void = [(p, i) for p in placed for i in p.forget(path)]
        counter.done -= sum(p.sizes[i] for p, i in void)
        if void:
            log(f"  {path.name}: the download started it over; converting the {len(void)} tensors read from it again")
        queue(void)

    queue((p, i) for p in placed for i in range(len(p.sizes)) if i not in p.done)
    since = 0
    try:
        while True:
            if not todo:
                flush()
                arriving.finished(flush)
                stale = [Path(k) for k, a in attempts.items() if arriving.attempt(Path(k)) != a]
                if not stale:
                    break
                for path in stale:
                    redo(path)
                    attempts[str(path)] = arriving.attempt(path)
                continue
            p, i = todo[-1]
            info = source_of(todo[-1])
            attempt = arriving.wait(info.path, info.offset + info.nbytes, flush)
            if attempts.setdefault(str(info.path), attempt) != attempt:
                redo(info.path)
                attempts[str(info.path)] = attempt
                continue
            try:
                written = p.write(i)
            except ModelFileError:
                # bytes damaged on the way look like a damaged model (NaN, overflow): the file's own check
                # at its end decides which it is
                if arriving.settle(info.path, attempt, flush):
                    raise
                continue
            todo.pop()
            counter.add(written)
            since += written
            if since >= DURABLE_BYTES:
                flush()
                since = 0
            if progress is not None:
                progress(ImportProgress(p.out.path, p.out.tensors[i][0], len(p.done), counter.done, counter.total))
    finally:
        for p in placed:
            p.f.close()


def _write_other_files(source: ModelSource, root: Path, precision: str) -> list[str]:
    """Configs, tokenizers, scheduler, model_index.json; returns what slowframe supplied."""
    for component in COMPONENTS:
        config = dict(source.components[component].config)
        if component == "unet" and precision == "uint8":
            config["_slowframe_quantization"] = UINT8_FORMAT
        project_files.write_json(root / component / "config.json", config)
    supplied = []
    for name in ("tokenizer", "tokenizer_2", "scheduler"):
        folder = root / name
        if folder.exists():
            shutil.rmtree(folder)
        if name in source.copied:
            folder.mkdir()
            for entry in sorted(source.copied[name].iterdir()):
                if entry.is_file() and not entry.name.startswith("."):
                    shutil.copyfile(entry, folder / entry.name)
            continue
        supplied.append(name)
        if name == "scheduler":
            project_files.write_scheduler(folder)
        else:
            project_files.write_tokenizer(folder, project_files.PAD_TOKENS[name])
    project_files.write_model_index(root, source.pipeline.get("force_zeros_for_empty_prompt", True))
    return supplied
