"""Broken, unsafe or mismatched model files and bad inputs get clear errors, never crashes."""

from __future__ import annotations

import json
import pickle
import shutil
import struct

import numpy as np
import pytest

from engine.errors import InputError, ModelFileError
from engine.safetensors import SafetensorsWriter, read_header
from engine.sdxl import UNet

WEIGHTS = "diffusion_pytorch_model.fp16.safetensors"


@pytest.fixture
def model_copy(tiny_unet, tmp_path):
    dst = tmp_path / "unet"
    shutil.copytree(tiny_unet.folder, dst)
    return dst


def rewrite(path, transform):
    """Rewrite a safetensors file with tensors changed by transform(name, array) -> (name, array) | None."""
    tensors = read_header(path)
    from engine.safetensors import read_raw
    items = []
    for name, info in tensors.items():
        out = transform(name, read_raw(info).view(np.float16))
        if out is not None:
            items.append(out)
    with open(path, "wb") as f:
        w = SafetensorsWriter(f, [(n, "F16", a.shape) for n, a in items])
        for n, a in items:
            w.write(n, a.astype(np.float16))
        w.close()


def test_missing_folder_config_and_weights(tmp_path, model_copy):
    with pytest.raises(ModelFileError, match="config.json: missing"):
        UNet.load(tmp_path / "nowhere")
    (model_copy / WEIGHTS).unlink()
    with pytest.raises(ModelFileError, match="no weights found.*diffusion_pytorch_model.safetensors"):
        UNet.load(model_copy)


def test_missing_tensor_names_the_file_and_the_tensor(model_copy):
    gone = "mid_block.attentions.0.transformer_blocks.0.attn2.to_k.weight"
    rewrite(model_copy / WEIGHTS, lambda n, a: None if n == gone else (n, a))
    with pytest.raises(ModelFileError) as e:
        UNet.load(model_copy)
    assert gone in str(e.value) and WEIGHTS in str(e.value) and "missing" in str(e.value)


def test_shape_mismatch_names_the_tensor_and_both_shapes(model_copy):
    bad = "up_blocks.1.resnets.2.conv1.weight"
    rewrite(model_copy / WEIGHTS, lambda n, a: (n, a[:, :-1]) if n == bad else (n, a))
    with pytest.raises(ModelFileError) as e:
        UNet.load(model_copy)
    msg = str(e.value)
    assert bad in msg and "[64, 95, 3, 3]" in msg and "[64, 96, 3, 3]" in msg


def test_truncated_file_is_reported_before_any_compute(model_copy):
    path = model_copy / WEIGHTS
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelFileError, match="truncated.*copy"):
        UNet.load(model_copy)
    path.write_bytes(data[:5])
    with pytest.raises(ModelFileError, match="too short"):
        UNet.load(model_copy)


@pytest.mark.parametrize("garbage", [
    struct.pack("<Q", 1 << 40) + b"{}",                       # absurd header length
    struct.pack("<Q", 10) + b"not json!!",                    # not JSON
    struct.pack("<Q", 2) + b"[]",                             # JSON but not an object
])
def test_corrupt_header(model_copy, garbage):
    (model_copy / WEIGHTS).write_bytes(garbage)
    with pytest.raises(ModelFileError, match=WEIGHTS):
        UNet.load(model_copy)


def test_inconsistent_header_entry(model_copy):
    path = model_copy / WEIGHTS
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    name = "conv_in.weight"
    header[name]["shape"] = [header[name]["shape"][0] * 2] + header[name]["shape"][1:]
    new = json.dumps(header).encode()
    new += b" " * (n - len(new)) if len(new) <= n else b""
    path.write_bytes(struct.pack("<Q", len(new)) + new + raw[8 + n:])
    with pytest.raises(ModelFileError, match="conv_in.weight.*inconsistent"):
        UNet.load(model_copy)


def test_file_truncated_after_loading_gives_a_clear_error_not_garbage(model_copy, tiny_unet):
    unet = UNet.load(model_copy, weights="nocache")
    path = model_copy / WEIGHTS
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 3])
    with pytest.raises(ModelFileError, match="file ended inside tensor"):
        unet(*tiny_unet.inputs(batch=1, tokens=77))
    unet.close()


@pytest.mark.parametrize("suffix", [".bin", ".ckpt", ".pt", ".pth"])
def test_pickle_files_are_refused_without_being_unpickled(model_copy, tmp_path, suffix):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    folder = model_copy
    (folder / WEIGHTS).unlink()
    (folder / f"diffusion_pytorch_model{suffix}").write_bytes(pickle.dumps(Evil()))
    with pytest.raises(ModelFileError, match="unpickling runs"):
        UNet.load(folder)
    with pytest.raises(ModelFileError, match="pickle"):
        read_header(folder / f"diffusion_pytorch_model{suffix}")
    assert not marker.exists()


def test_not_an_sdxl_unet_config(model_copy):
    config = json.loads((model_copy / "config.json").read_text())
    config["addition_embed_type"] = None    # an SD 1.5 UNet
    (model_copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelFileError, match="addition_embed_type.*SD 1.x/2.x"):
        UNet.load(model_copy)


def test_unknown_preset_and_option(tiny_unet):
    with pytest.raises(InputError, match="unknown preset 'fast'.*rpi-lowmem"):
        UNet.load(tiny_unet.folder, preset="fast")
    with pytest.raises(InputError, match="unknown engine option 'slices'.*attention_slices"):
        UNet.load(tiny_unet.folder, slices=4)
    with pytest.raises(InputError, match="attention_slices"):
        UNet.load(tiny_unet.folder, attention_slices=0)
    with pytest.raises(InputError, match="retain_freed_bytes' must be 0 \\(off\\) or more, got -1"):
        UNet.load(tiny_unet.folder, retain_freed_bytes=-1)


def test_bad_inputs_are_rejected_before_any_work(tiny_unet):
    x, t, ctx, text, ids = tiny_unet.inputs(batch=2)
    with UNet.load(tiny_unet.folder) as unet:
        with pytest.raises(InputError, match="sample has 3 channels"):
            unet(x[:, :3], t, ctx, text, ids)
        with pytest.raises(InputError, match="encoder_hidden_states has shape"):
            unet(x, t, ctx[:1], text, ids)
        with pytest.raises(InputError, match="time_ids"):
            unet(x, t, ctx, text, ids[:, :5])
        bad = x.copy()
        bad[0, 0, 0, 0] = np.nan
        with pytest.raises(InputError, match="sample contains NaN"):
            unet(bad, t, ctx, text, ids)
        with pytest.raises(InputError, match="timestep"):
            unet(x, float("inf"), ctx, text, ids)
        with pytest.raises(InputError, match="float array"):
            unet(x.astype(np.int32), t, ctx, text, ids)
