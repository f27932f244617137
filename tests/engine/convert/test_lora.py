"""LoRA styles, kohya and diffusers/PEFT, merged at import and applied while weights
stream, against diffusers' load_lora_weights + fuse_lora on the same tiny model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from conftest import pcc
from engine.convert.importer import import_model
from engine.convert.layout import WEIGHT_FILES
from engine.convert.lora import attach_loras, bind, open_lora, open_loras, parse_lora_spec
from engine.errors import ModelFileError
from engine.sdxl import UNet
from engine.sdxl.text_encoder import ClipTextEncoder
from engine.weights import TensorStore
from lora_files import kohya_lora, peft_lora
from tiny_models import load_pipeline, unet_reference

WEIGHT = 0.7


def fused_reference(folder, lora, weight):
    pipe = load_pipeline(folder)
    pipe.load_lora_weights(str(lora))
    pipe.fuse_lora(lora_scale=weight)
    pipe.unload_lora_weights()
    return pipe


def state(pipe, component) -> dict[str, np.ndarray]:
    """A component's weights, text encoders' names with their text_model. prefix."""
    out = {}
    for name, value in getattr(pipe, component).state_dict().items():
        if component.startswith("text") and not name.startswith("text_model.") and name != "text_projection.weight":
            name = "text_model." + name
        out[name] = value.numpy()
    return out


@pytest.fixture(scope="module", params=["kohya-sgm-names", "kohya-diffusers-names", "peft"])
def case(request, tiny_single_file, tmp_path_factory):
    folder = tmp_path_factory.mktemp(f"lora-{request.param}")
    path = folder / f"{request.param}.safetensors"
    if request.param.startswith("kohya"):
        kohya_lora(path, spelling=request.param.split("-")[1])
    else:
        peft_lora(tiny_single_file.folder, path)
    reference = fused_reference(tiny_single_file.folder, path, WEIGHT)
    changed = {}
    for c in ("unet", "text_encoder", "text_encoder_2"):
        base = state(tiny_single_file.pipe, c)
        changed[c] = [n for n, v in state(reference, c).items() if not np.array_equal(v, base[n])]
    assert all(len(names) >= 2 for names in changed.values()), changed
    return path, reference, changed


def test_merged_at_import_matches_diffusers_fuse_lora(case, tiny_single_file, tmp_path):
    path, reference, changed = case
    dest = tmp_path / "styled"
    import_model(tiny_single_file.sgm, dest, loras=[(path, WEIGHT)], log=lambda *_: None)
    for component, names in changed.items():
        base, want = state(tiny_single_file.pipe, component), state(reference, component)
        store = TensorStore([dest / component / WEIGHT_FILES[component]])
        for name in want:
            got = store.read(name)
            if name in names:   # the change the LoRA made, through fp16 storage
                assert pcc(got - base[name], want[name] - base[name]) >= 0.9999, (component, name)
            else:
                assert np.array_equal(got, base[name]), (component, name)
        store.close()
    inputs = tiny_single_file.unet_inputs(seed=4)
    expected = unet_reference(reference.unet, *inputs)
    assert pcc(expected, unet_reference(tiny_single_file.pipe.unet, *inputs)) < 0.999   # the style matters
    with UNet.load(dest / "unet") as unet:
        assert pcc(unet(*inputs), expected) >= 0.9999


def test_applied_at_run_time_matches_diffusers_fuse_lora(case, tiny_single_file):
    path, reference, changed = case
    loras = open_loras([(path, WEIGHT)])
    inputs = tiny_single_file.unet_inputs(seed=5)
    # rpi-lowmem reads weights in bands of 4 KB here (every band is patched on its own),
    # with fp32 skips and K/V so only the LoRA path is compared
    banded = dict(skip_dtype="fp32", kv_dtype="fp32", weight_chunk_bytes=4096)
    for preset, overrides in (("default", {}), ("rpi-lowmem", banded)):
        with UNet.load(tiny_single_file.folder / "unet", preset=preset, **overrides) as unet:
            attach_loras(unet, "unet", loras)
            got = unet(*inputs)
        assert pcc(got, unet_reference(reference.unet, *inputs)) >= 0.9999, preset
    ids = reference.tokenizer("a lighthouse at dusk", padding="max_length", max_length=77, return_tensors="pt")
    for component in ("text_encoder", "text_encoder_2"):
        with ClipTextEncoder.load(tiny_single_file.folder / component) as encoder:
            attach_loras(encoder, component, loras)
            got = encoder(ids.input_ids.numpy(), pooled=True)
        with torch.no_grad():
            want = getattr(reference, component)(ids.input_ids, output_hidden_states=True)
        assert pcc(got.hidden_states, want.hidden_states[-2].numpy()) >= 0.9999, component
        pooled = want.text_embeds if component == "text_encoder_2" else want.pooler_output
        assert pcc(got.pooled, pooled.numpy()) >= 0.9999, component
        store = TensorStore([tiny_single_file.folder / component / WEIGHT_FILES[component]])
        store.patch = bind(loras, component, {n: i.shape for n, i in store.tensors.items()})
        for name in changed[component]:   # and weight by weight
            key = name if name in store else name.removeprefix("text_model.")
            assert np.allclose(store.read(key), state(reference, component)[name], atol=1e-5, rtol=0), name
        store.close()
    for lora in loras:
        lora.close()


def test_alphas_per_module_and_stacked_loras_add_up(tiny_single_file, tmp_path):
    first = kohya_lora(tmp_path / "a.safetensors", seed=1, alpha=1.0, rank=4)
    second = kohya_lora(tmp_path / "b.safetensors", seed=2, alpha=8.0, rank=4)
    loras = open_loras([(first, 0.5), (second, -1.25)])
    store = TensorStore([tiny_single_file.folder / "unet" / WEIGHT_FILES["unet"]])
    shapes = {n: i.shape for n, i in store.tensors.items()}
    name = "down_blocks.0.resnets.0.conv1.weight"
    base = store.read(name)
    store.patch = bind(loras, "unet", shapes, UNet.load(tiny_single_file.folder / "unet").config)
    expected = base.copy()
    for path, weight, alpha in ((first, 0.5, 1.0), (second, -1.25, 8.0)):
        lora = TensorStore([path])
        up = lora.read("lora_unet_input_blocks_1_0_in_layers_2.lora_up.weight").reshape(32, 4)
        down = lora.read("lora_unet_input_blocks_1_0_in_layers_2.lora_down.weight").reshape(4, -1)
        expected += (weight * alpha / 4 * up @ down).reshape(base.shape)
    assert np.allclose(store.read(name), expected, atol=1e-6)
    assert np.allclose(store.read_rows(name, 5, 9), expected[5:9], atol=1e-6)   # banded reads too
    store.close()


def test_lora_spec_parsing():
    assert parse_lora_spec("styles/ink.safetensors:0.8") == (parse_lora_spec("styles/ink.safetensors")[0], 0.8)
    assert parse_lora_spec("styles/ink.safetensors")[1] == 1.0
    assert parse_lora_spec("c:/x/ink.safetensors:-1.5")[1] == -1.5


def _lora_file(path, tensors):
    save_file({k: torch.as_tensor(v) for k, v in tensors.items()}, str(path))
    return path


@pytest.mark.parametrize("keys,message", [
    ({"lora_unet_x.hada_w1_a": (4, 8)}, "LoHa"),
    ({"lora_unet_x.lokr_w1": (4, 8)}, "LoKr"),
    ({"lora_unet_x.lora_down.weight": (4, 8), "lora_unet_x.lora_up.weight": (8, 4), "lora_unet_x.dora_scale": (1, 8)},
     "DoRA"),
    ({"lora_te_text_model_encoder_layers_0_self_attn_q_proj.lora_down.weight": (4, 768)}, "1.x/2.x"),
    ({"model.diffusion_model.out.2.weight": (4, 4)}, "not a LoRA file"),
    ({"lora_unet_x.lora_down.weight": (4, 8)}, "no matching"),
])
def test_unsupported_lora_files_are_refused_by_name(tmp_path, keys, message):
    path = _lora_file(tmp_path / "bad.safetensors", {k: np.zeros(s, np.float16) for k, s in keys.items()})
    with pytest.raises(ModelFileError, match=message):
        open_lora(path)


def test_lora_for_another_model_names_the_module(tiny_single_file, tmp_path):
    shapes = {n: i.shape for n, i in TensorStore([tiny_single_file.folder / "unet" / WEIGHT_FILES["unet"]])
              .tensors.items()}
    cfg = UNet.load(tiny_single_file.folder / "unet").config
    sd15 = _lora_file(tmp_path / "sd15.safetensors", {   # SDXL's first level has no attention; SD 1.5's has
        "lora_unet_down_blocks_0_attentions_0_proj_in.lora_down.weight": np.zeros((4, 32), np.float16),
        "lora_unet_down_blocks_0_attentions_0_proj_in.lora_up.weight": np.zeros((32, 4), np.float16)})
    with pytest.raises(ModelFileError, match="lora_unet_down_blocks_0_attentions_0_proj_in.*matches no weight"):
        bind([open_lora(sd15)], "unet", shapes, cfg)
    wide = _lora_file(tmp_path / "wide.safetensors", {
        "lora_unet_input_blocks_4_1_proj_in.lora_down.weight": np.zeros((4, 640), np.float16),
        "lora_unet_input_blocks_4_1_proj_in.lora_up.weight": np.zeros((640, 4), np.float16)})
    with pytest.raises(ModelFileError, match="down_blocks.1.attentions.0.proj_in.weight' is \\[64, 64\\]"):
        bind([open_lora(wide)], "unet", shapes, cfg)


def test_import_records_the_loras_in_the_manifest(tiny_single_file, tmp_path):
    import hashlib
    import json

    path = kohya_lora(tmp_path / "style.safetensors")
    dest = tmp_path / "styled"
    import_model(tiny_single_file.sgm, dest, loras=[(path, 0.6)], log=lambda *_: None)
    lora, = json.loads((dest / "slowframe-model.json").read_text())["loras"]
    assert lora == {"path": str(path), "weight": 0.6, "format": "kohya", "modules": 14,
                    "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def test_older_diffusers_names_change_the_same_weights_as_peft_names(tiny_single_file, tmp_path):
    rng = np.random.default_rng(9)
    modules = {   # older diffusers spelling -> (PEFT module path, out, in)
        "unet.down_blocks.1.attentions.0.transformer_blocks.0.attn1.processor.to_q_lora":
            ("unet.down_blocks.1.attentions.0.transformer_blocks.0.attn1.to_q", 64, 64),
        "unet.up_blocks.0.attentions.1.transformer_blocks.0.attn2.processor.to_out_lora":
            ("unet.up_blocks.0.attentions.1.transformer_blocks.0.attn2.to_out.0", 128, 128),
        "unet.mid_block.attentions.0.proj_in.lora": ("unet.mid_block.attentions.0.proj_in", 128, 128),
        "text_encoder.text_model.encoder.layers.0.self_attn.to_out_lora":
            ("text_encoder.text_model.encoder.layers.0.self_attn.out_proj", 64, 64),
        "text_encoder_2.text_model.encoder.layers.1.mlp.fc1.lora_linear_layer":
            ("text_encoder_2.text_model.encoder.layers.1.mlp.fc1", 256, 128),
    }
    old, peft = {}, {}
    for name, (module, out, inner) in modules.items():
        down, up = rng.standard_normal((4, inner)).astype(np.float16), rng.standard_normal((out, 4)).astype(np.float16)
        old[f"{name}.down.weight"], old[f"{name}.up.weight"] = down, up
        peft[f"{module}.lora_A.weight"], peft[f"{module}.lora_B.weight"] = down, up
    old_file = open_lora(_lora_file(tmp_path / "old.safetensors", old), 0.5)
    peft_file = open_lora(_lora_file(tmp_path / "peft.safetensors", peft), 0.5)
    assert (old_file.format, peft_file.format) == ("diffusers", "peft")
    cfg = UNet.load(tiny_single_file.folder / "unet").config
    for component in ("unet", "text_encoder", "text_encoder_2"):
        path = tiny_single_file.folder / component / WEIGHT_FILES[component]
        stores = [TensorStore([path]), TensorStore([path])]
        shapes = {n: i.shape for n, i in stores[0].tensors.items()}
        for store, lora in zip(stores, (old_file, peft_file)):
            store.patch = bind([lora], component, shapes, cfg if component == "unet" else None)
        assert set(stores[0].patch.terms) == set(stores[1].patch.terms) != set()
        for name in stores[0].patch.terms:
            assert np.array_equal(stores[0].read(name), stores[1].read(name)), name
