"""`threads`, one meaning: the CPU threads the engine computes on, for BLAS, the C kernels'
splits and attention heads; `slowframe generate --threads N` sets it, bad values are refused."""

from __future__ import annotations

import subprocess
import sys

import pytest

from engine import bands, blas, ops
from engine.errors import InputError
from engine.sdxl.unet import UNet


def _spy(monkeypatch) -> dict[str, list]:
    """Record the BLAS thread count each linear op runs with, and the thread counts the
    attention head workers and the kernels' splits are asked for."""
    seen: dict[str, list] = {"blas": [], "heads": [], "splits": []}
    linear, pool, split_ops, split_bands = ops.linear, ops.worker_pool, ops.in_parallel, bands.in_parallel

    def spy_linear(*args, **kwargs):
        seen["blas"].append(blas.thread_count())
        return linear(*args, **kwargs)

    def spy_pool(n):
        seen["heads"].append(n)
        return pool(n)

    def spying(split):
        def spy_split(part, start, stop, elements, threads=0):
            seen["splits"].append(threads)
            return split(part, start, stop, elements, threads)
        return spy_split

    monkeypatch.setattr(ops, "linear", spy_linear)
    monkeypatch.setattr(ops, "worker_pool", spy_pool)
    monkeypatch.setattr(ops, "in_parallel", spying(split_ops))
    monkeypatch.setattr(bands, "in_parallel", spying(split_bands))
    return seen


@pytest.mark.skipif(not blas.AVAILABLE, reason="no OpenBLAS thread control in this numpy")
def test_the_thread_count_reaches_blas_for_the_evaluation_and_is_restored_after(tiny_unet, monkeypatch):
    before = blas.thread_count()
    seen = _spy(monkeypatch)
    with UNet.load(tiny_unet.folder, threads=1) as unet:
        unet(*tiny_unet.inputs(batch=1, tokens=77))
    assert seen["blas"] and set(seen["blas"]) == {1}
    assert blas.thread_count() == before


def test_the_thread_count_reaches_the_head_workers_and_the_kernels_splits(tiny_unet, monkeypatch):
    seen = _spy(monkeypatch)
    with UNet.load(tiny_unet.folder, threads=3, attention_slices=1) as unet:
        heads = {lv.heads for lv in unet.config.down if lv.attention}
        unet(*tiny_unet.inputs(batch=1, tokens=77))
    assert seen["heads"] and set(seen["heads"]) <= {min(3, h) for h in heads}
    assert seen["splits"] and set(seen["splits"]) == {3}


def test_the_default_is_every_core(tiny_unet):
    from engine.parallel import cores

    with UNet.load(tiny_unet.folder) as unet:
        assert unet.threads == cores()
    with UNet.load(tiny_unet.folder, threads=1) as unet:
        assert unet.threads == 1


@pytest.mark.parametrize("value, words", [(-1, "0 (all cores) or more"), ("4", "must be int"), (True, "must be int"),
                                          (2.0, "must be int")])
def test_bad_thread_counts_are_refused_by_the_python_api(tiny_unet, value, words):
    with pytest.raises(InputError, match="threads") as e:
        UNet.load(tiny_unet.folder, threads=value)
    assert words in str(e.value)


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5", ""])
def test_bad_thread_counts_are_refused_by_the_cli_with_a_message(tmp_path, value):
    r = subprocess.run([sys.executable, "-m", "frame.cli", "generate", "--models-path", str(tmp_path), "--prompt", "x",
                        "--threads", value], capture_output=True, text=True)
    assert r.returncode == 2
    assert "--threads" in r.stderr and "whole number of CPU threads" in r.stderr and repr(value) in r.stderr
    assert "Traceback" not in r.stderr
