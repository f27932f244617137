"""The op trace (`ops_printf`): one line per op with its weight bytes, seconds, RSS and
the page faults it took.

OnnxStream's most useful debugging tool: it shows where time and memory go. Page
faults show memory handed to the process fresh (each 4 KB page zeroed by the kernel):
an op with many is allocating big arrays it could reuse.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from typing import TextIO

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


class OpTrace:
    """Prints ops as they finish, and keeps totals per op kind."""

    def __init__(self, enabled: bool, stream: TextIO | None = None):
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.count = 0
        self.totals: dict[str, list[float]] = {}

    def begin(self) -> tuple[float, int]:
        return time.perf_counter(), _minor_faults() if self.enabled else 0

    def end(self, kind: str, name: str, weight_bytes: int, started: tuple[float, int]) -> None:
        if not self.enabled:
            return
        seconds = time.perf_counter() - started[0]
        faults = _minor_faults() - started[1]
        self.count += 1
        total = self.totals.setdefault(kind, [0, 0.0, 0, 0])
        total[0] += 1
        total[1] += seconds
        total[2] += weight_bytes
        total[3] += faults
        print(f"#{self.count:<5d} {kind:<10s} {name:<58s} {weight_bytes / 1e6:9.2f} MB "
              f"{seconds * 1000:9.1f} ms  rss {rss_bytes() / 1e6:7.1f} MB  faults {faults:7d}", file=self.stream)

    def summary(self) -> None:
        if not self.enabled or not self.totals:
            return
        print(f"{'op':<10s} {'count':>6s} {'seconds':>9s} {'weights MB':>11s} {'faults':>9s}", file=self.stream)
        for kind, (n, s, b, f) in sorted(self.totals.items(), key=lambda kv: -kv[1][1]):
            print(f"{kind:<10s} {n:6d} {s:9.2f} {b / 1e6:11.1f} {f:9d}", file=self.stream)
        print(f"peak rss {peak_rss_bytes() / 1e6:.1f} MB", file=self.stream)
        self.totals.clear()
        self.count = 0
