"""Bad input to `slowframe models import`: pickles are refused unopened, other architectures
are named, damaged model files are reported by tensor, and nothing is left behind."""

from __future__ import annotations

import json
import pickle
import struct

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from engine.convert.importer import import_model
from engine.errors import ModelFileError
from engine.safetensors import SafetensorsWriter
from frame.cli import main


class CreatesFile:
    """Unpickling this creates `path`: what a malicious model file can do."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return open, (self.path, "w")


def evil_pickle(path, marker):
    path.write_bytes(pickle.dumps(CreatesFile(marker)))
    return path


def test_the_crafted_pickle_really_creates_a_file_when_unpickled(tmp_path):
    marker = tmp_path / "pwned-by-loads"
    pickle.loads(evil_pickle(tmp_path / "probe.ckpt", marker).read_bytes()).close()
    assert marker.exists()


@pytest.mark.parametrize("suffix", [".ckpt", ".pt", ".pth", ".bin"])
def test_pickled_model_files_are_refused_without_unpickling(tmp_path, capsys, suffix):
    marker = tmp_path / "pwned"
    src = evil_pickle(tmp_path / f"model{suffix}", marker)
    assert main(["models", "import", str(src), str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "pickle" in err and ".safetensors" in err and "Traceback" not in err
    assert not marker.exists() and not (tmp_path / "out").exists()


def test_pickles_as_lora_vae_inside_a_folder_or_named_safetensors_are_refused(tiny_single_file, tmp_path):
    marker = tmp_path / "pwned"
    lora = evil_pickle(tmp_path / "style.pt", marker)
    vae = evil_pickle(tmp_path / "vae.bin", marker)
    disguised = evil_pickle(tmp_path / "model.safetensors", marker)
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "model_index.json").write_text(json.dumps({"_class_name": "StableDiffusionXLPipeline", **{
        c: ["diffusers", "x"] for c in ("unet", "vae", "text_encoder", "text_encoder_2")}}))
    for component in ("unet", "vae", "text_encoder", "text_encoder_2"):
        (folder / component).mkdir()
        (folder / component / "config.json").write_text("{}")
        evil_pickle(folder / component / ("diffusion_pytorch_model.bin" if component in ("unet", "vae")
                                          else "pytorch_model.bin"), marker)
    attempts = [dict(src=tiny_single_file.sgm, loras=[(lora, 1.0)]), dict(src=tiny_single_file.sgm, vae=vae),
                dict(src=disguised), dict(src=folder)]
    for kwargs in attempts:
        with pytest.raises(ModelFileError, match="pickle|safetensors"):
            import_model(dest=tmp_path / "out", log=lambda *_: None, **kwargs)
        assert not (tmp_path / "out").exists()
    assert not marker.exists()


def write_tensors(path, names: dict[str, tuple[int, ...]]):
    with open(path, "wb") as f:
        w = SafetensorsWriter(f, [(n, "F16", s) for n, s in names.items()], {"format": "pt"})
        for name, shape in names.items():
            w.write(name, np.zeros(shape, np.float16))
        w.close()
    return path


UNET_KEY = "model.diffusion_model.input_blocks.0.0.weight"


@pytest.mark.parametrize("names,found", [
    ({"cond_stage_model.transformer.text_model.embeddings.token_embedding.weight": (8, 4), UNET_KEY: (4, 4, 3, 3)},
     "Stable Diffusion 1.x"),
    ({"cond_stage_model.model.token_embedding.weight": (8, 4), UNET_KEY: (4, 4, 3, 3)}, "Stable Diffusion 2.x"),
    ({"conditioner.embedders.0.model.token_embedding.weight": (8, 4), UNET_KEY: (4, 4, 3, 3)}, "SDXL refiner"),
    ({"double_blocks.0.img_attn.norm.key_norm.scale": (4,)}, "Flux"),
    ({"model.diffusion_model.joint_blocks.0.x_block.attn.qkv.weight": (4, 4)}, "Stable Diffusion 3"),
    ({"model.diffusion_model.label_emb.0.0.weight": (4, 4), UNET_KEY: (4, 4, 3, 3)}, "SDXL UNet alone"),
    ({UNET_KEY: (4, 4, 3, 3)}, "1.x/2.x UNet alone"),
    ({"encoder.down.0.block.0.conv1.weight": (4, 4, 3, 3), "decoder.up.0.block.0.conv1.weight": (4, 4, 3, 3)},
     "VAE alone"),
    ({"down_blocks.0.resnets.0.conv1.weight": (4, 4, 3, 3)}, "one component of a diffusers model"),
    ({"lora_unet_input_blocks_4_1_proj_in.lora_down.weight": (4, 8)}, "LoRA"),
    ({"some.other.weight": (4,)}, "not a Stable Diffusion model"),
])
def test_other_architectures_are_named(tmp_path, names, found):
    src = write_tensors(tmp_path / "other.safetensors", names)
    with pytest.raises(ModelFileError, match=found):
        import_model(src, tmp_path / "out", log=lambda *_: None)


@pytest.mark.parametrize("kind,index,found", [
    ("sd15", {"_class_name": "StableDiffusionPipeline"}, "StableDiffusionPipeline"),
    ("refiner", {"_class_name": "StableDiffusionXLImg2ImgPipeline", "text_encoder": [None, None],
                 "text_encoder_2": ["transformers", "CLIPTextModelWithProjection"], "unet": ["diffusers", "x"],
                 "vae": ["diffusers", "x"]}, "refiner"),
])
def test_other_diffusers_folders_are_named(tmp_path, kind, index, found):
    folder = tmp_path / kind
    folder.mkdir()
    (folder / "model_index.json").write_text(json.dumps(index))
    for component in ("unet", "vae", "text_encoder_2"):
        (folder / component).mkdir()
    with pytest.raises(ModelFileError, match=found):
        import_model(folder, tmp_path / "out", log=lambda *_: None)


# -- damaged or altered SDXL single-file models --------------------------------------------

@pytest.fixture(scope="module")
def tensors(tiny_single_file):
    return load_file(str(tiny_single_file.sgm))


def altered(tensors, path, drop=(), change=None):
    out = {k: v for k, v in tensors.items() if k not in drop}
    out.update(change or {})
    save_file(out, str(path))
    return path


TO_V = "model.diffusion_model.output_blocks.2.1.transformer_blocks.0.attn2.to_v.weight"
FC1 = "conditioner.embedders.1.model.transformer.resblocks.1.mlp.c_fc.weight"


def test_missing_tensor_is_named(tensors, tmp_path):
    src = altered(tensors, tmp_path / "missing.safetensors", drop=[TO_V])
    with pytest.raises(ModelFileError, match=f"'{TO_V}'.*missing"):
        import_model(src, tmp_path / "out", log=lambda *_: None)


def test_wrong_shape_is_named_with_both_shapes(tensors, tmp_path):
    src = altered(tensors, tmp_path / "shape.safetensors", change={FC1: np.zeros((256, 96), np.float16)})
    with pytest.raises(ModelFileError, match=rf"'{FC1}'.*\[256, 96\].*\[256, 128\]"):
        import_model(src, tmp_path / "out", log=lambda *_: None)


def test_unexpected_tensor_is_named(tensors, tmp_path):
    extra = "model.diffusion_model.input_blocks.1.0.extra_layers.weight"
    src = altered(tensors, tmp_path / "extra.safetensors", change={extra: np.zeros((4,), np.float16)})
    with pytest.raises(ModelFileError, match=f"unexpected tensor '{extra}'"):
        import_model(src, tmp_path / "out", log=lambda *_: None)


def test_inpainting_unet_is_refused(tensors, tmp_path):
    src = altered(tensors, tmp_path / "inpaint.safetensors", change={UNET_KEY: np.zeros((32, 9, 3, 3), np.float16)})
    with pytest.raises(ModelFileError, match="9 input channels.*inpainting"):
        import_model(src, tmp_path / "out", log=lambda *_: None)


def test_truncated_file_is_named_by_tensor(tiny_single_file, tmp_path, capsys):
    src = tmp_path / "truncated.safetensors"
    src.write_bytes(tiny_single_file.sgm.read_bytes()[:-5000])
    assert main(["models", "import", str(src), str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "truncated" in err and "tensor '" in err and "Traceback" not in err


def test_tensor_named_twice_in_the_header_is_refused(tiny_single_file, tmp_path):
    data = tiny_single_file.sgm.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = data[8:8 + n].decode().rstrip()
    entry = json.dumps(json.loads(header)[TO_V], separators=(",", ":"))
    doubled = header[:-1] + f',"{TO_V}":{entry}' + "}"
    doubled += " " * (-len(doubled) % 8)
    src = tmp_path / "twice.safetensors"
    src.write_bytes(struct.pack("<Q", len(doubled)) + doubled.encode() + data[8 + n:])
    with pytest.raises(ModelFileError, match=f"'{TO_V}' appears twice"):
        import_model(src, tmp_path / "out", log=lambda *_: None)


def test_nan_weights_are_named_and_nothing_is_left_behind(tensors, tmp_path):
    broken = tensors[TO_V].copy()
    broken[3, 5] = np.nan
    src = altered(tensors, tmp_path / "nan.safetensors", change={TO_V: broken})
    with pytest.raises(ModelFileError, match=f"'{TO_V}' contains NaN"):
        import_model(src, tmp_path / "out", log=lambda *_: None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nan.safetensors"]


def test_existing_destination_is_left_alone(tiny_single_file, tmp_path):
    dest = tmp_path / "taken"
    dest.mkdir()
    (dest / "keep.txt").write_text("mine")
    with pytest.raises(ModelFileError, match="already exists"):
        import_model(tiny_single_file.sgm, dest, log=lambda *_: None)
    assert (dest / "keep.txt").read_text() == "mine"
