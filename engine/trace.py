"""The op trace (`ops_printf`): one line per op with its weight bytes, seconds and RSS.

OnnxStream's most useful debugging tool: it shows where time and memory go.
"""

from __future__ import annotations

import os
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


class OpTrace:
    """Prints ops as they finish, and keeps totals per op kind."""

    def __init__(self, enabled: bool, stream: TextIO | None = None):
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.count = 0
        self.totals: dict[str, list[float]] = {}

    def begin(self) -> float:
        return time.perf_counter()

    def end(self, kind: str, name: str, weight_bytes: int, started: float) -> None:
        if not self.enabled:
            return
        seconds = time.perf_counter() - started
        self.count += 1
        total = self.totals.setdefault(kind, [0, 0.0, 0])
        total[0] += 1
        total[1] += seconds
        total[2] += weight_bytes
        print(f"#{self.count:<5d} {kind:<10s} {name:<58s} {weight_bytes / 1e6:9.2f} MB "
              f"{seconds * 1000:9.1f} ms  rss {rss_bytes() / 1e6:7.1f} MB", file=self.stream)

    def summary(self) -> None:
        if not self.enabled or not self.totals:
            return
        print(f"{'op':<10s} {'count':>6s} {'seconds':>9s} {'weights MB':>11s}", file=self.stream)
        for kind, (n, s, b) in sorted(self.totals.items(), key=lambda kv: -kv[1][1]):
            print(f"{kind:<10s} {n:6d} {s:9.2f} {b / 1e6:11.1f}", file=self.stream)
        print(f"peak rss {peak_rss_bytes() / 1e6:.1f} MB", file=self.stream)
        self.totals.clear()
        self.count = 0
