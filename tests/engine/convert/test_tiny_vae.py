"""`slowframe models import --tiny-vae`: a tiny decoder becomes a model's vae_tiny/, checked,
recorded in the manifest, and decodes as the source does; what it says about other files."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from engine.convert.manifest import MANIFEST
from engine.convert.tiny_vae import import_tiny_vae
from engine.convert.verify import verify_model
from engine.errors import ModelFileError
from engine.safetensors import SafetensorsWriter, read_header, read_raw
from engine.sdxl.tiny_vae import TinyVAEDecoder
from frame.cli import main
from tiny_models import make_tiny_vae

SOURCE_WEIGHTS = "diffusion_pytorch_model.safetensors"


@pytest.fixture(scope="module")
def taesdxl(tmp_path_factory):
    folder = tmp_path_factory.mktemp("taesdxl") / "taesdxl"
    make_tiny_vae(folder)
    return folder


def fresh_model(imported, tmp_path):
    copy = tmp_path / "model"
    shutil.copytree(imported, copy)
    return copy


def decoded(folder) -> np.ndarray:
    z = (2.5 * np.random.default_rng(0).standard_normal((1, 4, 8, 12))).astype(np.float32)
    with TinyVAEDecoder.load(folder) as tiny:
        return tiny.decode(z)


def decoder_only_file(src, path):
    """The decoder as taesdxl_decoder.safetensors names it: '1.weight', '3.conv.0.weight'..."""
    tensors = {n: i for n, i in read_header(src / SOURCE_WEIGHTS).items() if n.startswith("decoder.layers.")}

    def original(name: str) -> str:
        index, _, rest = name[len("decoder.layers."):].partition(".")
        return f"{int(index) + 1}.{rest}"

    with open(path, "wb") as f:
        writer = SafetensorsWriter(f, [(original(n), i.dtype, i.shape) for n, i in tensors.items()])
        for name, info in tensors.items():
            writer.write(original(name), read_raw(info).view(np.float16))
        writer.close()
    return path


def test_cli_adds_a_tiny_decoder_to_a_model_that_verify_then_checks(taesdxl, imported, tmp_path, capsys):
    dest = fresh_model(imported, tmp_path)
    assert main(["models", "import", "--tiny-vae", str(taesdxl), str(dest)]) == 0
    assert "vae_tiny" in capsys.readouterr().out
    assert sorted(p.name for p in (dest / "vae_tiny").iterdir()) == ["config.json", SOURCE_WEIGHTS]
    stored = read_header(dest / "vae_tiny" / SOURCE_WEIGHTS)
    assert all(n.startswith("decoder.layers.") and i.dtype == "F16" for n, i in stored.items())   # no encoder
    manifest = json.loads((dest / MANIFEST).read_text())
    assert {"vae_tiny/config.json", f"vae_tiny/{SOURCE_WEIGHTS}"} <= set(manifest["files"])
    assert manifest["tiny_vae"]["path"] == str(taesdxl)
    assert np.array_equal(decoded(dest / "vae_tiny"), decoded(taesdxl))   # fp16 in, fp16 out: the same weights
    report = verify_model(dest, log=lambda *_: None)
    assert report.tensors == sum(len(read_header(p)) for p in dest.rglob("*.safetensors"))


def test_import_with_a_tiny_decoder_in_one_command(tiny_single_file, taesdxl, tmp_path, capsys):
    dest = tmp_path / "with-tiny"
    assert main(["models", "import", str(tiny_single_file.sgm), str(dest), "--tiny-vae", str(taesdxl)]) == 0
    assert (dest / "vae_tiny" / SOURCE_WEIGHTS).is_file()
    assert main(["models", "verify", str(dest)]) == 0


def test_the_decoder_file_of_taesds_own_repository_is_taken_in(taesdxl, imported, tmp_path):
    dest = fresh_model(imported, tmp_path)
    single = decoder_only_file(taesdxl, tmp_path / "taesdxl_decoder.safetensors")
    import_tiny_vae(single, dest, log=lambda *_: None)
    assert np.array_equal(decoded(dest / "vae_tiny"), decoded(taesdxl))


def test_verify_refuses_a_damaged_tiny_decoder(taesdxl, imported, tmp_path, capsys):
    dest = fresh_model(imported, tmp_path)
    import_tiny_vae(taesdxl, dest, log=lambda *_: None)
    weights = dest / "vae_tiny" / SOURCE_WEIGHTS
    data = bytearray(weights.read_bytes())
    data[-2] ^= 0xFF
    weights.write_bytes(bytes(data))
    assert main(["models", "verify", str(dest)]) == 1
    err = capsys.readouterr().err
    assert "vae_tiny/diffusion_pytorch_model.safetensors" in err and "sha256" in err


def test_a_plain_diffusers_folder_gets_one_too(taesdxl, tiny_single_file, tmp_path):
    dest = tmp_path / "diffusers"
    shutil.copytree(tiny_single_file.folder, dest)
    lines = []
    import_tiny_vae(taesdxl, dest, log=lines.append)
    assert (dest / "vae_tiny" / SOURCE_WEIGHTS).is_file()
    assert any("not recorded" in line for line in lines)


# -- bad input -------------------------------------------------------------------


def test_the_full_vae_is_refused_naming_what_was_expected(tiny_single_file, imported, tmp_path, capsys):
    dest = fresh_model(imported, tmp_path)
    assert main(["models", "import", "--tiny-vae", str(tiny_single_file.folder / "vae"), str(dest)]) == 1
    err = capsys.readouterr().err
    assert "_class_name is 'AutoencoderKL'; the tiny decoder needs an AutoencoderTiny" in err
    assert "Traceback" not in err and not (dest / "vae_tiny").exists()


def test_a_decoder_file_of_other_shapes_names_the_tensor(taesdxl, imported, tmp_path):
    narrow = tmp_path / "narrow"
    make_tiny_vae(narrow, decoder_block_out_channels=(16,) * 4)
    single = decoder_only_file(narrow, tmp_path / "taesd_decoder.safetensors")
    dest = fresh_model(imported, tmp_path)
    with pytest.raises(ModelFileError, match=r"tensor '1.weight' has shape \[16, 4, 3, 3\], TAESDXL's decoder needs "
                                         r"\[64, 4, 3, 3\]"):
        import_tiny_vae(single, dest, log=lambda *_: None)
    assert not (dest / "vae_tiny").exists()


def test_a_latent_space_of_16_channels_is_refused(imported, tmp_path):
    flux = tmp_path / "taef1"
    make_tiny_vae(flux, latent_channels=16)
    with pytest.raises(ModelFileError, match=r"16-channel latents \(taesd3 or taef1\?\).*madebyollin/taesdxl"):
        import_tiny_vae(flux, fresh_model(imported, tmp_path), log=lambda *_: None)


def test_missing_source_and_existing_tiny_decoder(taesdxl, imported, tmp_path, capsys):
    dest = fresh_model(imported, tmp_path)
    assert main(["models", "import", "--tiny-vae", str(tmp_path / "nowhere"), str(dest)]) == 1
    assert "nowhere: no such file or folder; expected a tiny decoder (madebyollin/taesdxl" in capsys.readouterr().err
    import_tiny_vae(taesdxl, dest, log=lambda *_: None)
    assert main(["models", "import", "--tiny-vae", str(taesdxl), str(dest)]) == 1
    assert "has a tiny decoder already; remove that folder first" in capsys.readouterr().err


def test_one_folder_without_tiny_vae_asks_for_dest(imported, capsys):
    assert main(["models", "import", str(imported)]) == 1
    assert "give the model folder to create" in capsys.readouterr().err
