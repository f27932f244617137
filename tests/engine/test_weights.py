"""Weights providers, the execution plan, the K/V cache, uint8 weights and the op trace."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import pcc
from engine import parallel, weights
from engine.errors import ModelFileError
from engine.quantize import quantize_folder
from engine.sdxl import UNet
from engine.weights import PrefetchProvider, TensorStore, WeightRows


class RecordingStore(TensorStore):
    """A TensorStore that remembers the order of reads."""

    def __init__(self, files):
        super().__init__(files)
        self.reads: list[str] = []

    def read(self, name):
        self.reads.append(name)
        return super().read(name)


def test_every_provider_gives_bit_identical_results(tiny_unet):
    inputs = tiny_unet.inputs(batch=1, tokens=77)
    outputs = {}
    for weights in ("nocache", "prefetch", "ram"):
        with UNet.load(tiny_unet.folder, weights=weights, prefetch_bytes=200_000) as unet:
            outputs[weights] = [unet(*inputs), unet(*inputs)]
            if weights == "prefetch":
                assert unet.provider.misses == 0
    first = outputs["nocache"][0]
    for runs in outputs.values():
        for out in runs:
            assert np.array_equal(out, first)


@pytest.mark.parametrize("kv_cache", [False, True])
def test_plan_is_exactly_the_order_weights_are_read(tiny_unet, kv_cache):
    with UNet.load(tiny_unet.folder, weights="nocache", cross_kv_cache=kv_cache) as unet:
        unet.store = unet.provider.store = RecordingStore(unet.store.files)
        inputs = tiny_unet.inputs(batch=2, tokens=154)
        for cached in ([False, True] if kv_cache else [False, False]):
            unet.store.reads.clear()
            unet(*inputs)
            assert unet.store.reads == [n for group in unet.plans[cached] for n in group]


def test_kv_cache_skips_cross_attention_key_value_weights(tiny_unet):
    with UNet.load(tiny_unet.folder) as unet:
        uncached = {n for g in unet.plans[False] for n in g}
        cached = {n for g in unet.plans[True] for n in g}
    dropped = uncached - cached
    assert dropped and all(".attn2.to_k." in n or ".attn2.to_v." in n for n in dropped)
    assert len(dropped) == sum(1 for n in uncached if ".attn2.to_k." in n or ".attn2.to_v." in n)


def test_cached_cross_kv_gives_the_same_result_as_computing_it(tiny_unet):
    x, t, ctx, text, ids = tiny_unet.inputs(batch=1, tokens=77)
    ctx2 = ctx[:, ::-1].copy()
    with UNet.load(tiny_unet.folder, cross_kv_cache=False) as plain:
        expected = [plain(x, t, c, text, ids) for c in (ctx, ctx2)]
    with UNet.load(tiny_unet.folder, cross_kv_cache=True) as cached:
        # alternate two conditionings, as CFG run as two evaluations does
        for _ in range(2):
            for c, e in zip((ctx, ctx2), expected):
                assert np.array_equal(cached(x, t, c, text, ids), e)
    with UNet.load(tiny_unet.folder, preset="rpi") as rpi:   # fp16 K/V: same on first and cached use
        first = rpi(x, t, ctx, text, ids)
        assert np.array_equal(rpi(x, t, ctx, text, ids), first)
        assert pcc(first, expected[0]) > 0.99999


def test_prefetch_keeps_within_its_budget_and_survives_wrong_requests(tiny_unet):
    store = TensorStore.open(tiny_unet.folder)
    names = list(store.tensors)[:40]
    plan = [(n,) for n in names]
    provider = PrefetchProvider(store, budget=1)   # never more than one group ahead
    provider.begin(plan)
    for n in names[:10]:
        assert np.array_equal(provider.get((n,))[0], store.read(n))
        assert provider._ready_bytes <= max(4 * np.prod(store.shape(m)) for m in names)
    wrong = provider.get((names[30],))[0]            # out of plan: read directly
    assert provider.misses == 1 and np.array_equal(wrong, store.read(names[30]))
    assert np.array_equal(provider.get((names[10],))[0], store.read(names[10]))
    provider.end()
    provider.close()


def _read_everything(folder):
    store = TensorStore.open(folder)
    try:
        return {n: store.read(n) for n in store.tensors}
    finally:
        store.close()


def test_weights_read_through_pread_when_files_cannot_be_mapped(tiny_unet, tmp_path, monkeypatch):
    u8 = tmp_path / "u8"
    quantize_folder(tiny_unet.folder, u8, log=lambda *_: None)
    monkeypatch.setattr(weights, "CHUNK_BYTES", 4096)   # many pieces, mapped at unaligned offsets
    mapped = {folder: _read_everything(folder) for folder in (tiny_unet.folder, u8)}

    def no_mmap(*args, **kwargs):
        raise OSError(19, "No such device")
    monkeypatch.setattr(weights.mmap, "mmap", no_mmap)
    for folder, tensors in mapped.items():
        for name, t in _read_everything(folder).items():
            assert np.array_equal(t, tensors[name]), name


def test_a_weights_file_cut_short_after_opening_is_a_clear_error(tiny_unet, tmp_path):
    folder = tmp_path / "unet"
    shutil.copytree(tiny_unet.folder, folder)
    store = TensorStore.open(folder)
    last = max(store.tensors, key=lambda n: store._info(n).offset)
    with open(store._info(last).path, "r+b") as f:   # e.g. the file replaced by a partial copy
        f.truncate(store._info(last).offset + 4)
    with pytest.raises(ModelFileError, match="truncated after loading started"):
        store.read(last)
    store.close()


def test_uint8_weights_stay_close_to_the_fp32_reference(tiny_unet, tmp_path):
    report = quantize_folder(tiny_unet.folder, tmp_path / "u8", log=lambda *_: None)
    assert report.quantized > 0
    assert report.bytes_out < 0.6 * report.bytes_in
    inputs = tiny_unet.inputs(batch=2, tokens=154)
    expected = tiny_unet.reference(*inputs)
    with UNet.load(tmp_path / "u8") as unet:
        assert unet.store.is_quantized("down_blocks.1.attentions.0.transformer_blocks.0.ff.net.0.proj.weight")
        assert pcc(unet(*inputs), expected) >= 0.999
    with UNet.load(tmp_path / "u8", preset="rpi-lowmem") as unet:
        assert pcc(unet(*inputs), expected) >= 0.999


def test_quantized_file_is_written_in_execution_order(tiny_unet, tmp_path):
    quantize_folder(tiny_unet.folder, tmp_path / "u8", log=lambda *_: None)
    with UNet.load(tmp_path / "u8", weights="nocache") as unet:
        offsets = [unet.store.tensors[n].offset for g in unet.plans[False] for n in g]
    assert offsets == sorted(offsets)


def test_quantize_never_leaves_a_half_written_model(tiny_unet, tmp_path, monkeypatch):
    import engine.quantize as q

    def fail(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(q, "quantize_rows", fail)
    with pytest.raises(KeyboardInterrupt):
        quantize_folder(tiny_unet.folder, tmp_path / "u8", log=lambda *_: None)
    assert sorted(os.listdir(tmp_path)) == []


def test_quantize_cli_reports_and_refuses_an_existing_destination(tiny_unet, tmp_path):
    cmd = [sys.executable, "-m", "frame.cli", "models", "quantize", str(tiny_unet.folder), str(tmp_path / "u8")]
    first = subprocess.run(cmd, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    assert "quantized" in first.stdout and "peak RSS" in first.stdout
    again = subprocess.run(cmd, capture_output=True, text=True)
    assert again.returncode == 1
    assert "already exists" in again.stderr and "Traceback" not in again.stderr


def test_ops_printf_prints_each_op_with_bytes_time_rss_and_page_faults(tiny_unet):
    with UNet.load(tiny_unet.folder, ops_printf=True) as unet:
        unet.trace.stream = io.StringIO()
        unet(*tiny_unet.inputs(batch=1, tokens=77))
        lines = unet.trace.stream.getvalue().splitlines()
        n_ops = len(unet.plans[False])
    op_lines = [ln for ln in lines if ln.startswith("#")]
    assert len(op_lines) >= n_ops
    assert any("conv_in" in ln and "MB" in ln and "rss" in ln for ln in op_lines)
    assert all(int(ln.split("faults")[1]) >= 0 for ln in op_lines)
    assert any(ln.startswith("peak rss") for ln in lines)


def test_banded_weights_give_the_same_result_as_whole_weights(tiny_unet, tmp_path):
    inputs = tiny_unet.inputs(batch=2, tokens=154)
    with UNet.load(tiny_unet.folder, weights="nocache") as whole:
        expected = whole(*inputs)
    with UNet.load(tiny_unet.folder, weights="nocache", weight_chunk_bytes=8192) as banded:
        ff = "down_blocks.2.attentions.0.transformer_blocks.0.ff.net.0.proj.weight"
        conv = "up_blocks.0.resnets.0.conv1.weight"
        assert all(isinstance(w, WeightRows) for w in banded.provider.get((ff, conv)))
        got = banded(*inputs)
    assert pcc(got, expected) >= 0.999999
    assert np.allclose(got, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


def test_reads_converted_on_several_threads_give_the_same_bits(tiny_unet, tmp_path, monkeypatch):
    quantize_folder(tiny_unet.folder, tmp_path / "u8", log=lambda *_: None)
    expected = {folder: _read_everything(folder) for folder in (tiny_unet.folder, tmp_path / "u8")}
    monkeypatch.setattr(parallel, "PARALLEL_MIN_ELEMENTS", 16)      # split even tiny tensors
    monkeypatch.setattr(weights, "CHUNK_BYTES", 4096)               # and in many windows
    for folder, tensors in expected.items():
        store = TensorStore.open(folder)
        store.convert_threads = 3
        for name, t in tensors.items():
            assert np.array_equal(store.read(name), t), name
        store.close()


def test_read_rows_equals_slicing_the_whole_tensor(tiny_unet, tmp_path):
    quantize_folder(tiny_unet.folder, tmp_path / "u8", log=lambda *_: None)
    name = "up_blocks.0.resnets.0.conv1.weight"
    for folder in (tiny_unet.folder, tmp_path / "u8"):
        store = TensorStore.open(folder)
        whole = store.read(name)
        assert np.array_equal(store.read_rows(name, 5, 37), whole[5:37])
        assert np.array_equal(store.read_rows(name, 0, whole.shape[0]), whole)
        store.close()


def test_a_piece_a_pool_thread_still_holds_does_not_fail_the_read(tiny_unet, monkeypatch):
    """ThreadPoolExecutor drops a finished task (and the view of the mapping it holds) a moment after its
    result arrives; closing the mapping in that moment raised BufferError and killed a run."""
    expected = _read_everything(tiny_unet.folder)
    monkeypatch.setattr(weights, "CHUNK_BYTES", 4096)
    held = []

    def late_release(part, start, stop, elements, threads=0):
        part(start, stop)
        held.append(part)   # as the pool's work item does, until its thread moves on
    monkeypatch.setattr(weights, "in_parallel", late_release)
    for name, t in _read_everything(tiny_unet.folder).items():
        assert np.array_equal(t, expected[name]), name
        held.clear()
