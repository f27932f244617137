"""The op trace (`ops_printf`): one line per op with its weight bytes, FLOPs, seconds, RSS
and the page faults it took.

OnnxStream's most useful debugging tool: it shows where time and memory go. Page
faults show memory handed to the process fresh (each 4 KB page zeroed by the kernel):
an op with many is allocating big arrays it could reuse. FLOPs are counted from the
shapes the op ran on (engine/flops.py), GEMM-like and the rest apart; a benchmark adds
them up per stage through `on_op` (bench/pi_projection.py).
"""

from __future__ import annotations

import os
import resource
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from engine.flops import Flops

_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    """Resident set size of this process now."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


def peak_rss_bytes() -> int:
    """Highest resident set size of this process so far (VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def _minor_faults() -> int:
    """Page faults this process has taken that needed no disk read (fresh or cached pages)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


@dataclass(frozen=True)
class OpRecord:
    """One finished op as the trace saw it."""

    kind: str                # linear, conv, attention...
    name: str                # its module name in the model files
    weight_bytes: int        # its weights as stored (what a read from disk costs)
    flops: Flops             # GEMM-like and other FLOPs, from the shapes it ran on
    seconds: float


class OpTrace:
    """Prints ops as they finish, and keeps totals per op kind."""

    def __init__(self, enabled: bool, stream: TextIO | None = None):
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.count = 0
        self.totals: dict[str, list[float]] = {}
        self.on_op: Callable[[OpRecord], None] | None = None
        """Called with every op as it finishes, while the trace is enabled."""

    def begin(self) -> tuple[float, int]:
        return time.perf_counter(), _minor_faults() if self.enabled else 0

    def end(self, kind: str, name: str, weight_bytes: int, started: tuple[float, int], flops: Flops = Flops()) -> None:
        if not self.enabled:
            return
        seconds = time.perf_counter() - started[0]
        faults = _minor_faults() - started[1]
        self.count += 1
        total = self.totals.setdefault(kind, [0, 0.0, 0, 0, 0, 0])
        for i, value in enumerate((1, seconds, weight_bytes, flops.gemm, flops.other, faults)):
            total[i] += value
        print(f"#{self.count:<5d} {kind:<10s} {name:<58s} {weight_bytes / 1e6:9.2f} MB "
              f"{flops.gemm / 1e9:9.3f} GF gemm {flops.other / 1e9:8.4f} GF other "
              f"{seconds * 1000:9.1f} ms  rss {rss_bytes() / 1e6:7.1f} MB  faults {faults:7d}", file=self.stream)
        if self.on_op is not None:
            self.on_op(OpRecord(kind, name, weight_bytes, flops, seconds))

    def summary(self) -> None:
        if not self.enabled or not self.totals:
            return
        print(f"{'op':<10s} {'count':>6s} {'seconds':>9s} {'weights MB':>11s} {'gemm GF':>10s} {'other GF':>9s} "
              f"{'faults':>9s}", file=self.stream)
        for kind, (n, s, b, g, o, f) in sorted(self.totals.items(), key=lambda kv: -kv[1][1]):
            print(f"{kind:<10s} {n:6d} {s:9.2f} {b / 1e6:11.1f} {g / 1e9:10.2f} {o / 1e9:9.3f} {f:9d}",
                  file=self.stream)
        print(f"peak rss {peak_rss_bytes() / 1e6:.1f} MB", file=self.stream)
        self.totals.clear()
        self.count = 0
