"""keep_freed_memory: freed arrays are reused by later ones instead of faulting in fresh pages."""

from __future__ import annotations

import subprocess
import sys

import pytest

from engine import memory

CHILD = """
import resource, sys
import numpy as np
from engine import memory
if sys.argv[1] == "keep":
    assert memory.keep_freed_memory()
faults = []
for i in range(6):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    a = np.empty(48 << 20, dtype=np.uint8)   # over glibc's 32 MB mmap ceiling
    a[::4096] = 1                            # touch every page
    del a
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(max(faults[1:]))
"""


def faults_per_array(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, check=True)
    return int(out.stdout)


@pytest.mark.skipif(memory._mallopt is None, reason="mallopt is glibc's; other C libraries keep their own policy")
def test_kept_memory_serves_the_next_big_array_without_page_faults():
    at_least = (48 << 20) // (2 << 20)   # a fresh mapping faults once per page, 2 MB with huge pages
    assert faults_per_array("system") >= at_least
    assert faults_per_array("keep") < at_least // 3


def test_presets_keep_memory_on_a_pc_and_return_it_on_a_pi():
    from engine.options import resolve
    assert resolve("default").keep_freed_memory
    assert not resolve("rpi").keep_freed_memory and not resolve("rpi-lowmem").keep_freed_memory
