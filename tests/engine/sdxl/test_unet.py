"""The streamed UNet against diffusers' UNet2DConditionModel on the same random weights."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

from conftest import pcc
from engine import ops
from engine.model import StreamedModel
from engine.sdxl import UNet
from engine.bands import Dense

CONFIGS = ["tiny", "wide-heads", "deep"]


@pytest.mark.parametrize("name", CONFIGS)
def test_default_preset_matches_diffusers_batch2_nonsquare_154_tokens(tiny_unets, name):
    model = tiny_unets[name]
    inputs = model.inputs(batch=2, h=16, w=24, tokens=154)
    expected = model.reference(*inputs)
    with UNet.load(model.folder) as unet:
        got = unet(*inputs)
    assert got.shape == expected.shape == (2, 4, 16, 24)
    assert got.dtype == np.float32
    assert pcc(got, expected) >= 0.9999


@pytest.mark.parametrize("name", CONFIGS)
def test_rpi_lowmem_preset_with_uint8_skips_matches_diffusers(tiny_unets, name):
    model = tiny_unets[name]
    inputs = model.inputs(batch=2, h=16, w=24, tokens=154)
    with UNet.load(model.folder, preset="rpi-lowmem") as unet:
        got = unet(*inputs)
    assert pcc(got, model.reference(*inputs)) >= 0.9999


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("preset", ["rpi", "rpi-lowmem"])
def test_batch1_square_77_tokens_each_preset(tiny_unets, name, preset):
    model = tiny_unets[name]
    inputs = model.inputs(batch=1, h=16, w=16, tokens=77, seed=3)
    with UNet.load(model.folder, preset=preset) as unet:
        got = unet(*inputs)
    assert pcc(got, model.reference(*inputs)) >= 0.9999


def test_feed_forward_in_bands_of_tokens_and_of_hidden_units_matches_diffusers(tiny_unet, monkeypatch):
    # 48x40: level 1 has more tokens (480) than 4x its width (256), level 2 fewer (120 vs 512)
    used = []
    for way in ("_ff_in_token_bands", "_ff_in_hidden_bands"):
        real = getattr(StreamedModel, way)
        monkeypatch.setattr(StreamedModel, way, lambda self, *a, _real=real, _way=way: used.append(_way) or _real(self, *a))
    inputs = tiny_unet.inputs(batch=1, h=48, w=40, tokens=77)
    with UNet.load(tiny_unet.folder, band_bytes=8192) as unet:   # several bands of either kind
        got = unet(*inputs)
    assert set(used) == {"_ff_in_token_bands", "_ff_in_hidden_bands"}
    assert pcc(got, tiny_unet.reference(*inputs)) >= 0.9999


@pytest.mark.parametrize("h,w", [(15, 22), (8, 12), (9, 5)])
def test_odd_latent_sizes_upsample_to_the_skip_size_like_diffusers(tiny_unet, h, w):
    inputs = tiny_unet.inputs(batch=1, h=h, w=w, tokens=77)
    with UNet.load(tiny_unet.folder) as unet:
        got = unet(*inputs)
    assert pcc(got, tiny_unet.reference(*inputs)) >= 0.9999


def test_fractional_timestep_and_per_item_timesteps(tiny_unet):
    x, _, ctx, text, ids = tiny_unet.inputs(batch=2)
    with UNet.load(tiny_unet.folder) as unet:
        got = unet(x, np.array([12.25, 803.5], dtype=np.float32), ctx, text, ids)
    with torch.no_grad():
        ref = tiny_unet.ref(torch.from_numpy(x), torch.tensor([12.25, 803.5]), torch.from_numpy(ctx),
                            added_cond_kwargs=dict(text_embeds=torch.from_numpy(text),
                                                   time_ids=torch.from_numpy(ids))).sample.numpy()
    assert pcc(got, ref) >= 0.9999


# -- per module: diffusers' inputs and outputs captured with forward hooks -----------


def capture(model: torch.nn.Module, modules: dict[str, torch.nn.Module], inputs) -> dict[str, dict]:
    """Run the reference once and record each module's named arguments and output."""
    seen: dict[str, dict] = {}
    handles = []
    for key, module in modules.items():
        sig = inspect.signature(module.forward)

        def hook(mod, args, kwargs, output, key=key, sig=sig):
            bound = sig.bind(*args, **kwargs).arguments
            seen[key] = dict(args=bound, output=output)

        handles.append(module.register_forward_hook(hook, with_kwargs=True))
    try:
        x, t, ctx, text, ids = inputs
        with torch.no_grad():
            model(torch.from_numpy(x), t, torch.from_numpy(ctx),
                  added_cond_kwargs=dict(text_embeds=torch.from_numpy(text), time_ids=torch.from_numpy(ids)))
    finally:
        for h in handles:
            h.remove()
    return seen


def np_(t: torch.Tensor) -> np.ndarray:
    return t.detach().numpy().astype(np.float32)


@pytest.fixture(scope="module")
def captured(tiny_unet):
    ref = tiny_unet.ref
    modules = {
        "down_blocks.0.resnets.0": ref.down_blocks[0].resnets[0],
        "down_blocks.1.resnets.0": ref.down_blocks[1].resnets[0],       # with a 1x1 shortcut
        "up_blocks.2.resnets.0": ref.up_blocks[2].resnets[0],           # on a concatenation
        "down_blocks.1.attentions.1": ref.down_blocks[1].attentions[1],
        "down_blocks.2.attentions.0.transformer_blocks.1": ref.down_blocks[2].attentions[0].transformer_blocks[1],
        "down_blocks.2.attentions.0.transformer_blocks.1.attn1":
            ref.down_blocks[2].attentions[0].transformer_blocks[1].attn1,
        "down_blocks.2.attentions.0.transformer_blocks.1.attn2":
            ref.down_blocks[2].attentions[0].transformer_blocks[1].attn2,
        "mid_block": ref.mid_block,
    }
    for i, block in enumerate(ref.down_blocks):
        modules[f"down_blocks.{i}"] = block
    for i, block in enumerate(ref.up_blocks):
        modules[f"up_blocks.{i}"] = block
    inputs = tiny_unet.inputs(batch=2, h=16, w=24, tokens=154)
    with UNet.load(tiny_unet.folder) as unet:
        yield unet, capture(ref, modules, inputs)


@pytest.mark.parametrize("name", ["down_blocks.0.resnets.0", "down_blocks.1.resnets.0", "up_blocks.2.resnets.0"])
def test_resnet_block(captured, name):
    unet, seen = captured
    a = seen[name]["args"]
    got = unet.resnet(name, Dense(np_(a["input_tensor"])), ops.silu(np_(a["temb"])))
    assert pcc(got, np_(seen[name]["output"])) >= 0.99999


def test_transformer2d_model(captured):
    unet, seen = captured
    name = "down_blocks.1.attentions.1"
    a = seen[name]["args"]
    lv = unet.config.down[1]
    got = unet.transformer(name, np_(a["hidden_states"]), np_(a["encoder_hidden_states"]), lv.depth, lv.heads)
    assert pcc(got, np_(seen[name]["output"][0])) >= 0.99999


def test_basic_transformer_block(captured):
    unet, seen = captured
    name = "down_blocks.2.attentions.0.transformer_blocks.1"
    a = seen[name]["args"]
    h = np_(a["hidden_states"]).copy()
    unet.transformer_block(name, h, np_(a["encoder_hidden_states"]), unet.config.down[2].heads)
    assert pcc(h, np_(seen[name]["output"])) >= 0.99999


def test_self_and_cross_attention(captured):
    unet, seen = captured
    heads = unet.config.down[2].heads
    p = "down_blocks.2.attentions.0.transformer_blocks.1"
    a1 = seen[p + ".attn1"]
    got1 = unet.self_attention(p + ".attn1", np_(a1["args"]["hidden_states"]), heads)
    assert pcc(got1, np_(a1["output"])) >= 0.99999
    a2 = seen[p + ".attn2"]
    got2 = unet.cross_attention(p + ".attn2", np_(a2["args"]["hidden_states"]),
                                np_(a2["args"]["encoder_hidden_states"]), heads)
    assert pcc(got2, np_(a2["output"])) >= 0.99999


@pytest.mark.parametrize("i", [0, 1, 2])
def test_down_block_output_and_its_skips(captured, i):
    unet, seen = captured
    a = seen[f"down_blocks.{i}"]["args"]
    out, res = seen[f"down_blocks.{i}"]["output"]
    ctx = a.get("encoder_hidden_states")
    skips = []
    got = unet.down_block(i, np_(a["hidden_states"]), ops.silu(np_(a["temb"])),
                          None if ctx is None else np_(ctx), skips)
    assert pcc(got, np_(out)) >= 0.99999
    assert len(skips) == len(res)
    for s, r in zip(skips, res):
        assert pcc(s.dense(), np_(r)) >= 0.99999


def test_mid_block(captured):
    unet, seen = captured
    a = seen["mid_block"]["args"]
    got = unet.mid_block(np_(a["hidden_states"]), ops.silu(np_(a["temb"])), np_(a["encoder_hidden_states"]))
    assert pcc(got, np_(seen["mid_block"]["output"])) >= 0.99999


@pytest.mark.parametrize("i", [0, 1, 2])
def test_up_block(captured, i):
    unet, seen = captured
    a = seen[f"up_blocks.{i}"]["args"]
    h = np_(a["hidden_states"])
    B, _, H, W = h.shape
    # The block upsamples to the size of the skip below it; diffusers gets it as 2x.
    below = Dense(np.zeros((B, 1, 2 * H, 2 * W), dtype=np.float32))
    skips = [below] + [Dense(np_(r)) for r in a["res_hidden_states_tuple"]]
    ctx = a.get("encoder_hidden_states")
    got = unet.up_block(i, h, ops.silu(np_(a["temb"])), None if ctx is None else np_(ctx), skips)
    assert skips == [below]
    assert pcc(got, np_(seen[f"up_blocks.{i}"]["output"])) >= 0.99999
