"""`slowframe models import` of folders whose VAE has no encoder, like slowframe's own demo
model: the engine only decodes, so the import keeps what there is and checks it."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from engine.convert.importer import import_model
from engine.errors import ModelFileError
from engine.safetensors import SafetensorsWriter, read_header, read_raw
from engine.sdxl import Pipeline
from engine.sdxl.random_model import write_random_model
from frame.cli import main

VAE_WEIGHTS = "vae/diffusion_pytorch_model.fp16.safetensors"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return write_random_model(tmp_path_factory.mktemp("demo") / "model")


def test_demo_model_imports_verifies_and_generates_the_same_latents(demo, tmp_path, capsys):
    dest = tmp_path / "imported"
    assert main(["models", "import", str(demo), str(dest)]) == 0
    assert main(["models", "verify", str(dest)]) == 0
    assert "OK" in capsys.readouterr().out
    vae = read_header(dest / "vae" / "diffusion_pytorch_model.safetensors")
    assert vae and not any(name.startswith(("encoder.", "quant_conv.")) for name in vae)
    run = dict(prompt="a lighthouse at dusk", negative_prompt="blurry", steps=2, seed=1, width=64, height=64)
    assert np.array_equal(Pipeline.load(dest).generate(**run).latents, Pipeline.load(demo).generate(**run).latents)


def test_component_folders_count_without_model_index_entries(demo, tmp_path):
    index = json.loads((demo / "model_index.json").read_text())
    assert "unet" not in index     # the demo model's index names no components, as hand-made folders often do
    left_out = tmp_path / "left-out"
    shutil.copytree(demo, left_out)
    (left_out / "model_index.json").write_text(json.dumps(dict(index, vae=[None, None])))
    with pytest.raises(ModelFileError, match=r"missing vae/"):
        import_model(left_out, tmp_path / "out", log=lambda *_: None)


def test_part_of_an_encoder_is_named_as_missing_tensors(demo, tmp_path):
    src = tmp_path / "half-encoder"
    shutil.copytree(demo, src)
    header = read_header(demo / VAE_WEIGHTS)
    tensors = {name: read_raw(info) for name, info in header.items()}
    tensors["encoder.conv_in.weight"] = np.zeros((32, 3, 3, 3), np.float16)
    with open(src / VAE_WEIGHTS, "wb") as f:
        writer = SafetensorsWriter(f, [(n, "F16", v.shape) for n, v in tensors.items()], {"format": "pt"})
        for name, values in tensors.items():
            writer.write(name, values)
        writer.close()
    with pytest.raises(ModelFileError, match=r"vae: tensor 'encoder.conv_in.bias' is missing"):
        import_model(src, tmp_path / "out", log=lambda *_: None)
