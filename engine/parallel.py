"""Splitting work: into equal bands, and over the cores."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

# Below this many elements an elementwise op runs on the calling thread: handing work to
# another thread costs about what one core needs for this much copying
# (bench/RESULTS.md#threads).
PARALLEL_MIN_ELEMENTS = 1 << 17


def in_parallel(part: Callable[[int, int], None], start: int, stop: int, elements: int, threads: int = 0) -> None:
    """Run part(a, b) over disjoint ranges covering start:stop, on up to `threads` workers
    (0: one per core). For ops whose results do not depend on the split (elementwise,
    per-row), so any thread count gives the same bits; numpy and our C kernels release
    the GIL, so the ranges really run at once."""
    n = stop - start
    threads = min(threads or cores(), n, max(1, elements // PARALLEL_MIN_ELEMENTS))
    if threads <= 1:
        if n > 0:
            part(start, stop)
        return
    bounds = [start + n * i // threads for i in range(threads + 1)]
    futures = [worker_pool(threads).submit(part, bounds[i], bounds[i + 1]) for i in range(1, threads)]
    part(bounds[0], bounds[1])
    for future in futures:
        future.result()


def equal_step(total: int, most: int) -> int:
    """The step that cuts `total` into as few equal bands as bands of at most `most`
    allow: no short last band (a thin GEMM, or a small last transform, runs slowly)."""
    return -(-total // -(-total // max(1, most)))


def cores() -> int:
    """CPU cores this process may run on."""
    return len(os.sched_getaffinity(0)) or 1


_pools: dict[int, ThreadPoolExecutor] = {}


def worker_pool(threads: int) -> ThreadPoolExecutor:
    """The process's pool of `threads` workers (made on first use)."""
    if threads not in _pools:
        _pools[threads] = ThreadPoolExecutor(threads, thread_name_prefix="engine")
    return _pools[threads]
