"""retain_freed_bytes: freed heap is kept for the next op's weights where the UNet's hidden
states are small, and goes back to the system where they are large and after each evaluation."""

from __future__ import annotations

import subprocess
import sys

import pytest

from engine import memory
from engine.sdxl import UNet

CHILD = """
import resource, sys
import numpy as np
from engine import memory
from engine.trace import rss_bytes
assert memory.return_freed_arrays(8 << 20)        # as rpi-lowmem: 4 MB arrays come from the heap
if sys.argv[1] == "retain":
    assert memory.retain_freed(64 << 20)
faults = []
for i in range(6):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    a = np.ones(4 << 20, dtype=np.uint8)           # at the heap's top: trimmed when freed, by default
    del a
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
held = rss_bytes()
memory.retain_freed(0)
print(max(faults[1:]), (held - rss_bytes()) >> 20)
"""


def faults_and_returned_mb(mode: str) -> tuple[int, int]:
    out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, check=True)
    faults, returned = out.stdout.split()
    return int(faults), int(returned)


@pytest.mark.skipif(memory._mallopt is None, reason="mallopt is glibc's; other C libraries keep their own policy")
def test_retained_heap_serves_the_next_array_without_page_faults_and_goes_back_when_released():
    at_least = (4 << 20) // (2 << 20)   # once per page, 2 MB with huge pages
    trimmed_faults, _ = faults_and_returned_mb("trim")
    retained_faults, returned_mb = faults_and_returned_mb("retain")
    assert trimmed_faults >= at_least
    assert retained_faults < at_least // 2 + 1 and retained_faults * 20 < trimmed_faults
    assert returned_mb >= 3   # the retained 4 MB left the process once retention ended


def test_unet_retains_freed_memory_only_in_blocks_with_small_inputs_and_returns_it_after(tiny_unet, monkeypatch):
    inputs = tiny_unet.inputs(batch=1, h=16, w=16, tokens=77)
    with UNet.load(tiny_unet.folder, preset="rpi-lowmem") as unet:
        block_inputs: list[int] = []
        retain_at = unet._retain_at
        monkeypatch.setattr(unet, "_retain_at", lambda h: (block_inputs.append(h.nbytes), retain_at(h)))
        unet(*inputs)
        sizes = sorted(set(block_inputs))
        assert len(sizes) >= 2, sizes
        limit = 10 * sizes[0]   # only the smallest block inputs qualify

        calls: list[int] = []
        monkeypatch.setattr(memory, "retain_freed", lambda n: calls.append(n) or True)
        unet.options = unet.options.replace(retain_freed_bytes=limit)
        block_inputs.clear()
        unet(*inputs)
    wanted = [10 * n <= limit for n in block_inputs]
    changes = [limit if on else 0 for i, on in enumerate(wanted) if on != (wanted[i - 1] if i else False)]
    if wanted[-1]:
        changes.append(0)
    assert True in wanted and False in wanted
    assert calls == changes   # set on entering a small block, released on leaving it and at the end


def test_the_low_memory_preset_retains_freed_memory_and_the_pc_preset_needs_not():
    from engine.options import resolve
    assert resolve("rpi-lowmem").retain_freed_bytes == 64 << 20
    assert resolve("default").retain_freed_bytes == 0   # it keeps all freed memory anyway
