"""Where weights come from: a model component folder on disk, and the providers that
hand each op its weights as fp32 just when it runs.

TensorStore knows every tensor of a component (diffusers layout: config.json plus
diffusion_pytorch_model[.fp16].safetensors, or shards with an .index.json) and reads
one at a time, converting fp16/bf16/uint8 to fp32 in small chunks so a tensor never
exists twice. A WeightsProvider decides when reads happen:

- NoCacheProvider: read when the op asks, then drop; nothing is kept. The kernel is
  asked to start reading the next ops' bytes from disk meanwhile (page cache only).
- PrefetchProvider: a thread reads the next ops' weights (in the exact execution
  order the model announces) while the current op computes, within a byte budget.
- RamProvider: keep every weight once read (a PC with RAM to spare).
"""

from __future__ import annotations

import json
import mmap
import os
import queue
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from engine import kernels
from engine.errors import ModelFileError
from engine.options import Options
from engine.parallel import equal_step, in_parallel
from engine.safetensors import PICKLE_SUFFIXES, TensorInfo, pread_into, read_header

CHUNK_BYTES = 4 << 20
WILLNEED_PIECE = 128 << 10
"""Linux reads at most max(read_ahead_kb, the device's largest I/O) of one WILLNEED hint
and silently drops the rest: 128 KB is the default read_ahead_kb (an SD card's too), so
hints are given in pieces no larger (bench/RESULTS.md#weights-streaming)."""
MAP_POPULATE = getattr(mmap, "MAP_POPULATE", 0)
"""Map a weight's cached file pages in one call instead of a fault per 16 pages as the
conversion touches them: less system time (chosen by measurement:
bench/RESULTS.md#weights-streaming)."""
Q_SCALE = ".q_scale"
Q_ZERO = ".q_zero"


def find_weight_files(folder: Path, stem: str = "diffusion_pytorch_model") -> list[Path]:
    """The safetensors file(s) of a component folder, preferring fp16 (half the reads)."""
    for variant in (".fp16", ""):
        single = folder / f"{stem}{variant}.safetensors"
        if single.is_file():
            return [single]
        index = folder / f"{stem}.safetensors.index{variant}.json"
        if index.is_file():
            return _shards_from_index(index)
    pickles = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES) if folder.is_dir() else []
    if pickles:
        raise ModelFileError(
            f"{folder}: only pickle weights found ({', '.join(pickles)}). slowframe refuses them because "
            "unpickling runs whatever code the file contains. Get the .safetensors version of the model.")
    raise ModelFileError(
        f"{folder}: no weights found; expected {stem}.safetensors, {stem}.fp16.safetensors or a sharded "
        f"{stem}.safetensors.index.json. Is this the component folder (e.g. the model's unet/)?")


def _shards_from_index(index: Path) -> list[Path]:
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
        shards = sorted(set(weight_map.values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ModelFileError(f"{index}: unreadable shard index ({e})") from None
    missing = [s for s in shards if not (index.parent / s).is_file()]
    if missing:
        raise ModelFileError(f"{index}: shard file(s) missing: {', '.join(missing)} (copy them next to the index)")
    return [index.parent / s for s in shards]


def read_config(folder: Path) -> dict:
    path = Path(folder) / "config.json"
    if not path.is_file():
        raise ModelFileError(f"{path}: missing; a model component folder needs its config.json")
    try:
        config = json.loads(path.read_text())
    except ValueError as e:
        raise ModelFileError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(config, dict):
        raise ModelFileError(f"{path}: expected a JSON object")
    return config


class TensorStore:
    """Every tensor of one model component, read one at a time as fp32."""

    def __init__(self, files: Sequence[Path], drop_pages: bool = False):
        self.files = [Path(f) for f in files]
        self.drop_pages = drop_pages
        self.tensors: dict[str, TensorInfo] = {}
        for path in self.files:
            for name, info in read_header(path).items():
                if name in self.tensors:
                    raise ModelFileError(f"{path}: tensor '{name}' also appears in {self.tensors[name].path}")
                self.tensors[name] = info
        self._fds: dict[Path, int] = {}
        self._fd_lock = threading.Lock()
        self.convert_threads = 1
        """Threads converting each read to fp32: more where the reads are on the compute's
        own path (nocache), one where a background thread reads while the cores compute."""
        self.patch: Callable[[str, np.ndarray, int], None] | None = None
        """patch(name, rows, r0) changes every fp32 read in place (run-time LoRA, engine/convert/lora.py)."""

    @classmethod
    def open(cls, folder: Path, drop_pages: bool = False) -> "TensorStore":
        return cls(find_weight_files(Path(folder)), drop_pages)

    def close(self) -> None:
        with self._fd_lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def shape(self, name: str) -> tuple[int, ...]:
        return self._info(name).shape

    def stored_bytes(self, name: str) -> int:
        """Bytes read from disk for this tensor (with its quantisation parameters)."""
        extra = sum(self.tensors[name + s].nbytes for s in (Q_SCALE, Q_ZERO) if name + s in self.tensors)
        return self._info(name).nbytes + extra

    def will_need(self, name: str) -> None:
        """Ask the kernel to start reading this tensor's bytes into the page cache."""
        for n in (name, name + Q_SCALE, name + Q_ZERO):
            if n in self.tensors:
                info = self._info(n)
                fd = self._fd(info.path)
                for at in range(info.offset, info.offset + info.nbytes, WILLNEED_PIECE):
                    os.posix_fadvise(fd, at, min(WILLNEED_PIECE, info.offset + info.nbytes - at),
                                     os.POSIX_FADV_WILLNEED)

    def is_quantized(self, name: str) -> bool:
        return name + Q_SCALE in self.tensors

    def check(self, expected: dict[str, tuple[int, ...]]) -> None:
        """Every expected tensor is present with the expected shape (and valid quantisation)."""
        where = ", ".join(str(f) for f in self.files)
        missing = [n for n in expected if n not in self.tensors]
        if missing:
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise ModelFileError(f"{where}: tensor '{missing[0]}' is missing{more}; the file does not match "
                                 "config.json (wrong model, or an incomplete conversion)")
        for name, shape in expected.items():
            info = self.tensors[name]
            if info.shape != tuple(shape):
                raise ModelFileError(f"{info.path}: tensor '{name}' has shape {list(info.shape)} but config.json "
                                     f"implies {list(shape)}; the weights belong to a different model")
            if info.dtype not in ("F32", "F16", "BF16", "U8"):
                raise ModelFileError(f"{info.path}: tensor '{name}' is {info.dtype}; weights must be F32, F16, "
                                     "BF16 or U8")
            if info.dtype == "U8":
                rows = (shape[0],)
                for suffix in (Q_SCALE, Q_ZERO):
                    q = self.tensors.get(name + suffix)
                    if q is None or q.shape != rows or q.dtype != "F32":
                        raise ModelFileError(f"{info.path}: uint8 tensor '{name}' needs '{name}{suffix}' as F32 "
                                             f"{list(rows)}; the quantized model is incomplete: quantize it again")

    def _info(self, name: str) -> TensorInfo:
        try:
            return self.tensors[name]
        except KeyError:
            raise ModelFileError(f"{', '.join(map(str, self.files))}: tensor '{name}' is missing") from None

    def _fd(self, path: Path) -> int:
        with self._fd_lock:
            fd = self._fds.get(path)
            if fd is None:
                try:
                    fd = self._fds[path] = os.open(path, os.O_RDONLY)
                except OSError as e:
                    raise ModelFileError(f"{path}: cannot open: {e.strerror}") from None
            return fd

    def read(self, name: str) -> np.ndarray:
        """The tensor as a new fp32 array."""
        info = self._info(name)
        return self.read_rows(name, 0, info.shape[0]).reshape(info.shape) if info.shape else \
            self.read_rows(name, 0, 1).reshape(())

    def read_rows(self, name: str, r0: int, r1: int, out: np.ndarray | None = None) -> np.ndarray:
        """Rows r0:r1 (along the first axis, e.g. output channels) as fp32: into `out`
        (C-contiguous float32 of that shape) or a new array."""
        info = self._info(name)
        shape = info.shape or (1,)
        row = info.numel // shape[0] if shape[0] else 0
        if out is None:
            out = np.empty((r1 - r0,) + shape[1:], dtype=np.float32)
        flat = out.reshape(-1)
        fd = self._fd(info.path)
        item = {"F32": 4, "F16": 2, "BF16": 2, "U8": 1}.get(info.dtype)
        if item is None:
            raise ModelFileError(f"{info.path}: tensor '{name}' has dtype {info.dtype}, not a weight dtype")
        offset = info.offset + r0 * row * item
        if info.dtype == "F32":
            pread_into(fd, memoryview(flat.view(np.uint8)), offset, info.path, name)
        elif info.dtype in ("F16", "BF16"):
            convert = kernels.f16_to_f32 if info.dtype == "F16" else kernels.bf16_to_f32
            self._read_chunked(info, fd, offset, 2, flat, lambda raw, dst, _: convert(raw.view(np.uint16), dst))
        else:
            scale = self.read_rows(name + Q_SCALE, r0, r1)
            zero = self.read_rows(name + Q_ZERO, r0, r1)

            def dequant(raw: np.ndarray, dst: np.ndarray, start: int) -> None:
                a, n = start // row, raw.size // row
                kernels.dequant_u8_rows(raw.reshape(n, row), scale[a:a + n], zero[a:a + n], dst.reshape(n, row))
            self._read_chunked(info, fd, offset, 1, flat, dequant, align=row)
        if self.drop_pages:
            os.posix_fadvise(fd, offset, flat.size * item, os.POSIX_FADV_DONTNEED)
        if self.patch is not None:
            self.patch(name, out, r0)
        return out

    def _read_chunked(self, info: TensorInfo, fd: int, offset: int, itemsize: int, dst: np.ndarray, convert,
                      align: int = 1) -> None:
        """Convert dst.size stored items from `offset` into dst, a piece at a time.

        Each piece is converted straight from a read-only mapping of its file pages
        (populated when mapped), unmapped right after, so the page cache is not first
        copied into a buffer (pread's copy was a third of the reading time); mappings
        that fail fall back to pread. With drop_pages too: NoCacheProvider's read-ahead
        hints have the pages cached by the time they are mapped (chosen by measurement:
        bench/RESULTS.md#weights-streaming). A file cut short
        since it was opened is reported before it is mapped: touching a mapped page
        past the end would kill the process.
        """
        end = offset + dst.size * itemsize
        if os.fstat(fd).st_size < end:
            raise ModelFileError(f"{info.path}: file ended inside tensor '{info.name}' (it was truncated after "
                                 "loading started?); copy it again")
        step = max(align, (CHUNK_BYTES // itemsize) // align * align)
        scratch = None
        for start in range(0, dst.size, step):
            n = min(step, dst.size - start)
            at = offset + start * itemsize
            base = at - at % mmap.ALLOCATIONGRANULARITY
            try:
                window = mmap.mmap(fd, at - base + n * itemsize, offset=base, prot=mmap.PROT_READ,
                                   flags=mmap.MAP_SHARED | MAP_POPULATE)
            except (OSError, ValueError):
                window = None
            if window is not None:
                raw = np.frombuffer(window, dtype=np.uint8, count=n * itemsize, offset=at - base)
                self._convert(convert, raw, dst, start, n, itemsize, align)
                del raw
                try:
                    window.close()
                except BufferError:
                    # a pool thread may hold its finished piece (a view of the mapping) a moment
                    # after its result arrived; the mapping is unmapped with its last reference
                    pass
                del window
                continue
            if scratch is None:
                scratch = np.empty(min(step, dst.size) * itemsize, dtype=np.uint8)
            raw = scratch[:n * itemsize]
            pread_into(fd, memoryview(raw), at, info.path, info.name)
            self._convert(convert, raw, dst, start, n, itemsize, align)

    def _convert(self, convert, raw: np.ndarray, dst: np.ndarray, start: int, n: int, itemsize: int,
                 align: int) -> None:
        """convert(raw, dst[start:start + n], start), split over convert_threads in
        pieces of whole `align` items."""
        def part(b0: int, b1: int) -> None:
            i0, i1 = b0 * align, min(n, b1 * align)
            convert(raw[i0 * itemsize:i1 * itemsize], dst[start + i0:start + i1], start + i0)
        in_parallel(part, 0, -(-n // align), n, self.convert_threads)


Group = tuple[str, ...]


class WeightRows:
    """A weight too large to hold whole in fp32: ops read it a band of rows (output
    channels) at a time, so its full fp32 copy never exists."""

    def __init__(self, store: TensorStore, name: str, max_bytes: int):
        self.store = store
        self.name = name
        self.shape = store.shape(name)
        row_bytes = 4 * int(np.prod(self.shape[1:]))
        # chunks of equal size: a short last one makes a thin, slow GEMM
        # (bench/RESULTS.md#weights-streaming)
        self.rows_per_chunk = equal_step(self.shape[0], max_bytes // row_bytes)

    def buffer(self, rows: int) -> np.ndarray:
        """A float32 array for `rows` rows of this weight (to read band after band into)."""
        return np.empty((rows,) + self.shape[1:], dtype=np.float32)

    def rows(self, r0: int, r1: int, out: np.ndarray | None = None) -> np.ndarray:
        """Rows r0:r1 as fp32, into `out` (C-contiguous, that shape) if given."""
        return self.store.read_rows(self.name, r0, r1, self.buffer(r1 - r0) if out is None else out)


Weight = np.ndarray | WeightRows


def row_chunks(w: Weight):
    """(r0, r1, rows as fp32) covering a weight: one piece for an array, bands for
    WeightRows. The bands share one buffer: use each within its loop iteration."""
    if isinstance(w, np.ndarray):
        yield 0, w.shape[0], w
        return
    buf = w.buffer(min(w.shape[0], w.rows_per_chunk))
    for r0 in range(0, w.shape[0], w.rows_per_chunk):
        r1 = min(w.shape[0], r0 + w.rows_per_chunk)
        yield r0, r1, w.rows(r0, r1, buf[:r1 - r0])


class WeightsProvider:
    """Hands an op the fp32 weights it names. `begin(plan)` announces the exact order of
    requests for one model evaluation (a list of name groups)."""

    def __init__(self, store: TensorStore):
        self.store = store

    def begin(self, plan: Sequence[Group]) -> None:
        pass

    def get(self, names: Group) -> list[np.ndarray]:
        return [self.store.read(n) for n in names]

    def end(self) -> None:
        pass

    def close(self) -> None:
        self.store.close()


class NoCacheProvider(WeightsProvider):
    """Read each weight when its op runs; nothing is kept. Weights over `chunk_bytes`
    in fp32 are handed out as WeightRows and read in bands by the op.

    So that the disk is not idle while the CPU computes (on a Pi the reads are a third
    of an evaluation's compute), a thread asks the kernel (posix_fadvise WILLNEED) to read
    the next ops' stored bytes, up to `readahead_bytes` ahead in plan order. Those pages
    sit in the page cache, never in our RSS, but the kernel reclaims them under pressure:
    a window that does not fit beside the process is read twice.
    """

    def __init__(self, store: TensorStore, chunk_bytes: int = 0, readahead_bytes: int = Options.readahead_bytes):
        super().__init__(store)
        self.chunk_bytes = chunk_bytes
        self.readahead_bytes = readahead_bytes
        self._plan: list[Group] = []
        self._next_use = 0       # index of the group the model should ask for next
        self._next_hint = 0      # index of the next group to hint
        self._hinted_bytes = 0   # stored bytes hinted but not yet asked for
        self._hints: queue.SimpleQueue[Group | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def begin(self, plan: Sequence[Group]) -> None:
        self._plan = list(plan)
        self._next_use = self._next_hint = self._hinted_bytes = 0
        self._hint_ahead()

    def end(self) -> None:
        self._plan = []

    def get(self, names: Group) -> list[Weight]:
        if self._next_use < len(self._plan) and self._plan[self._next_use] == tuple(names):
            if self._next_use < self._next_hint:
                self._hinted_bytes -= self._stored_bytes(self._plan[self._next_use])
            self._next_use += 1
            self._next_hint = max(self._next_hint, self._next_use)
            self._hint_ahead()
        return [WeightRows(self.store, n, self.chunk_bytes)
                if self.chunk_bytes and 4 * int(np.prod(self.store.shape(n))) > self.chunk_bytes
                else self.store.read(n) for n in names]

    def _stored_bytes(self, group: Group) -> int:
        return sum(self.store.stored_bytes(n) for n in group)

    def _hint_ahead(self) -> None:
        while self._next_hint < len(self._plan) and self._hinted_bytes < self.readahead_bytes:
            group = self._plan[self._next_hint]
            self._hinted_bytes += self._stored_bytes(group)
            self._next_hint += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="weights-readahead", daemon=True)
                self._thread.start()
            self._hints.put(group)

    def _run(self) -> None:
        while (group := self._hints.get()) is not None:
            for name in group:
                try:
                    self.store.will_need(name)
                except (OSError, ModelFileError):
                    pass   # only a hint: the op's own read reports any real problem

    def close(self) -> None:
        if self._thread is not None:
            self._hints.put(None)
            self._thread.join()
            self._thread = None
        super().close()


class RamProvider(WeightsProvider):
    """Keep every weight in RAM (as fp32) once it has been read."""

    def __init__(self, store: TensorStore):
        super().__init__(store)
        self._cache: dict[str, np.ndarray] = {}

    def get(self, names: Group) -> list[np.ndarray]:
        out = []
        for n in names:
            w = self._cache.get(n)
            if w is None:
                w = self._cache[n] = self.store.read(n)
            out.append(w)
        return out


class PrefetchProvider(WeightsProvider):
    """A background thread reads the next groups of the plan while the current op computes.

    It keeps at most `budget` fp32 bytes read ahead (always at least the next group).
    A request that does not match the plan is served by a direct read, so a wrong plan
    costs time, never correctness; `misses` counts them.
    """

    def __init__(self, store: TensorStore, budget: int):
        super().__init__(store)
        self.budget = budget
        self.misses = 0
        self._cond = threading.Condition()
        self._plan: list[Group] = []
        self._next_read = 0      # index of the next group the thread reads
        self._next_use = 0       # index of the next group the model should ask for
        self._ready: dict[int, list[np.ndarray] | BaseException] = {}
        self._ready_bytes = 0
        self._generation = 0
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="weights-prefetch", daemon=True)
        self._thread.start()

    def _group_bytes(self, group: Group) -> int:
        return sum(4 * int(np.prod(self.store.shape(n))) for n in group)

    def begin(self, plan: Sequence[Group]) -> None:
        with self._cond:
            self._plan = list(plan)
            self._next_read = self._next_use = 0
            self._ready.clear()
            self._ready_bytes = 0
            self._generation += 1
            self._cond.notify_all()

    def end(self) -> None:
        self.begin([])

    def _run(self) -> None:
        _yield_to_compute()
        while True:
            with self._cond:
                while not self._closed and not self._can_read():
                    self._cond.wait()
                if self._closed:
                    return
                index, group, generation = self._next_read, self._plan[self._next_read], self._generation
                self._next_read += 1
            try:
                result: list[np.ndarray] | BaseException = [self.store.read(n) for n in group]
            except BaseException as e:  # handed to the consumer, raised there
                result = e
            with self._cond:
                if generation == self._generation:
                    self._ready[index] = result
                    if not isinstance(result, BaseException):
                        self._ready_bytes += sum(w.nbytes for w in result)
                    self._cond.notify_all()

    def _can_read(self) -> bool:
        if self._next_read >= len(self._plan):
            return False
        if self._next_read < self._next_use or self._ready_bytes == 0:
            return True  # the model is waiting for it, or nothing is read ahead yet
        return self._ready_bytes + self._group_bytes(self._plan[self._next_read]) <= self.budget

    def get(self, names: Group) -> list[np.ndarray]:
        with self._cond:
            index = self._next_use
            if index >= len(self._plan) or self._plan[index] != tuple(names):
                self.misses += 1
                expected = None
            else:
                expected = index
                self._next_use += 1
                self._cond.notify_all()
                while expected not in self._ready:
                    self._cond.wait()
                result = self._ready.pop(expected)
                if not isinstance(result, BaseException):
                    self._ready_bytes -= sum(w.nbytes for w in result)
                self._cond.notify_all()
        if expected is None:
            return [self.store.read(n) for n in names]
        if isinstance(result, BaseException):
            raise result
        return result

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()
        super().close()


def _yield_to_compute() -> None:
    """Give the calling (reader) thread the lowest CPU priority. Reading ahead is only
    worth it in the gaps the compute leaves: when it competes for a core instead, the
    BLAS threads of the op in flight wait for each other at every barrier. If the model
    ends up waiting for a weight, the cores are idle and the reader gets them anyway."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)   # Linux: per thread
    except (AttributeError, OSError):
        pass


def make_provider(store: TensorStore, kind: str, prefetch_bytes: int, chunk_bytes: int = 0,
                  threads: int = 1, readahead_bytes: int = Options.readahead_bytes) -> WeightsProvider:
    """The provider named `kind`; `threads`: the cores the model computes on."""
    if kind == "nocache":
        store.convert_threads = threads   # the model waits for every read: convert on all its cores
        return NoCacheProvider(store, chunk_bytes, readahead_bytes)
    if kind == "ram":
        return RamProvider(store)
    return PrefetchProvider(store, prefetch_bytes)
