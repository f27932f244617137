"""The op trace's FLOP counts (engine/flops.py): GEMM FLOPs match torch's own FLOP counter
on the diffusers reference model run on the same inputs; the rest are counted per element."""

from __future__ import annotations

import io

import numpy as np
import pytest

from engine import flops
from engine.sdxl.unet import UNet
from engine.sdxl.vae import VAEDecoder
from engine.trace import OpRecord


@pytest.fixture(scope="module")
def tiny_vae(tmp_path_factory):
    from tiny_models import TinyVAE

    return TinyVAE("tiny", tmp_path_factory.mktemp("vae"))


def _torch_flops(run) -> int:
    """torch's count; its CPU fused attention counts nothing, so attention runs as plain matmuls."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        run()
    return counter.get_total_flops()


def _traced(model, run) -> list[OpRecord]:
    records: list[OpRecord] = []
    model.trace.stream = io.StringIO()
    model.trace.on_op = records.append
    run()
    return records


@pytest.mark.parametrize("batch, size", [(1, (16, 24)), (2, (8, 8))])
def test_unet_gemm_flops_equal_torch_flop_counter_on_diffusers(tiny_unet, batch, size):
    inputs = tiny_unet.inputs(batch=batch, h=size[0], w=size[1], tokens=77)
    with UNet.load(tiny_unet.folder, ops_printf=True) as unet:
        records = _traced(unet, lambda: unet(*inputs))
    expected = _torch_flops(lambda: tiny_unet.reference(*inputs))
    assert sum(r.flops.gemm for r in records) == expected
    assert {r.kind for r in records if r.flops.gemm} == {"linear", "conv", "ff", "attention"}


def test_a_cached_kv_evaluation_counts_no_cross_attention_kv_projections(tiny_unet):
    inputs = tiny_unet.inputs(batch=1, tokens=77)
    with UNet.load(tiny_unet.folder, ops_printf=True) as unet:
        first = _traced(unet, lambda: unet(*inputs))
        second = _traced(unet, lambda: unet(*inputs))
    kv = [r for r in first if ".attn2.to_k" in r.name or ".attn2.to_v" in r.name]
    assert kv and not any(".attn2.to_k" in r.name or ".attn2.to_v" in r.name for r in second)
    assert sum(r.flops.gemm for r in first) - sum(r.flops.gemm for r in second) == sum(r.flops.gemm for r in kv)
    assert sum(r.weight_bytes for r in first) - sum(r.weight_bytes for r in second) == \
        sum(r.weight_bytes for r in kv) > 0


def test_vae_gemm_flops_equal_torch_flop_counter_on_diffusers(tiny_vae):
    z = tiny_vae.latents(h=8, w=12)
    with VAEDecoder.load(tiny_vae.folder, ops_printf=True) as vae:
        records = _traced(vae, lambda: vae.decode(z, tiled=False))
    assert sum(r.flops.gemm for r in records) == _torch_flops(lambda: tiny_vae.reference(z))


def test_other_flops_are_counted_per_element_of_what_each_op_ran_on(tiny_unet):
    inputs = tiny_unet.inputs(batch=1, h=8, w=8, tokens=77)
    with UNet.load(tiny_unet.folder, ops_printf=True) as unet:
        records = _traced(unet, lambda: unet(*inputs))
        out_channels = unet.config.down[0].channels
    norm_out = next(r for r in records if r.name == "conv_norm_out")
    assert norm_out.flops == flops.Flops(0, out_channels * 8 * 8 * (flops.GROUP_NORM + flops.SILU))
    conv_in = next(r for r in records if r.name == "conv_in")
    assert conv_in.flops == flops.Flops(2 * out_channels * 64 * 4 * 9, out_channels * 64)   # with its bias


def test_the_printed_trace_carries_each_ops_flops(tiny_unet):
    with UNet.load(tiny_unet.folder, ops_printf=True) as unet:
        unet.trace.stream = io.StringIO()
        records: list[OpRecord] = []
        unet.trace.on_op = records.append
        unet(*tiny_unet.inputs(batch=1, tokens=77))
        lines = [ln for ln in unet.trace.stream.getvalue().splitlines() if ln.startswith("#")]
    assert len(lines) == len(records)
    for line, r in zip(lines, records):
        assert r.name in line
        assert float(line.split(" GF gemm")[0].split()[-1]) == pytest.approx(r.flops.gemm / 1e9, abs=6e-4)


def test_attention_counts_two_gemms_per_head_and_the_softmax_of_every_score():
    f = flops.attention(batch=2, queries=10, keys=7, channels=12, heads=3)
    assert f.gemm == 2 * (2 * 10 * 7 * 12) * 2
    assert f.other == 2 * (2 * 10 * 12 + 3 * 10 * 7 * flops.SOFTMAX)


def test_a_disabled_trace_calls_no_listener(tiny_unet):
    with UNet.load(tiny_unet.folder) as unet:
        unet.trace.on_op = lambda r: pytest.fail("listener called with the trace off")
        out = unet(*tiny_unet.inputs(batch=1, tokens=77))
    assert np.isfinite(out).all()
