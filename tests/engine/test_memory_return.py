"""mmap_threshold: arrays freed on a Pi go back to the system instead of staying resident as heap."""

from __future__ import annotations

import subprocess
import sys

import pytest

from engine import memory

CHILD = """
import sys
import numpy as np
from engine import memory
from engine.trace import rss_bytes
if sys.argv[1] == "return":
    assert memory.return_freed_arrays(1 << 20)
big = np.ones(16 << 20, dtype=np.uint8)
del big                      # glibc's default threshold now rises to 16 MB
before = rss_bytes()
arrays, pins = [], []
for i in range(12):
    arrays.append(np.ones(4 << 20, dtype=np.uint8))   # 48 MB touched in all
    pins.append(np.ones(64 << 10, dtype=np.uint8))    # small live blocks between them: no trim at the top
del arrays
print((rss_bytes() - before) >> 20)
"""


def resident_after_free_mb(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, check=True)
    return int(out.stdout)


@pytest.mark.skipif(memory._mallopt is None, reason="mallopt is glibc's; other C libraries keep their own policy")
def test_freed_arrays_stay_resident_by_default_and_go_back_with_a_fixed_threshold():
    assert resident_after_free_mb("default") >= 40
    assert resident_after_free_mb("return") <= 4


def test_the_low_memory_preset_returns_freed_arrays():
    from engine.options import resolve
    assert resolve("rpi-lowmem").mmap_threshold == 8 << 20
    assert resolve("default").mmap_threshold == 0
