"""`slowframe models import`: single-file SGM models and diffusers folders become model
folders whose weights, configs and outputs match the diffusers model they came from."""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pytest
import torch

from conftest import pcc
from engine.convert.importer import import_model
from engine.convert.layout import COMPONENTS, WEIGHT_FILES
from engine.convert.manifest import MANIFEST
from engine.convert.verify import list_models, verify_model
from engine.quantize import quantize_folder
from engine.safetensors import SafetensorsWriter, read_header, read_raw
from engine.errors import ModelFileError
from engine.sdxl import Pipeline, UNet
from engine.sdxl.random_model import write_random_model
from frame.cli import main
from sgm_files import load_single_file
from tiny_models import load_pipeline, unet_reference
from tokenizer_files import write_saved_tokenizer

SDXL_ONLY_KEYS = {"sample_size"}   # configs the weights cannot tell; the importer writes SDXL's


def tensors_of(folder, component) -> dict[str, tuple[str, np.ndarray]]:
    """name (text encoders with their text_model. prefix) -> (dtype, raw values) of a component's weights."""
    files = sorted((folder / component).glob("*.safetensors"))
    out = {}
    for path in files:
        for name, info in read_header(path).items():
            key = name if not component.startswith("text") or name.startswith("text_model.") or \
                name == "text_projection.weight" else "text_model." + name
            out[key] = (info.dtype, read_raw(info))
    return out


def test_sgm_writer_is_what_diffusers_from_single_file_reads(tiny_single_file):
    single = load_single_file(tiny_single_file.sgm, tiny_single_file.folder)
    for component in COMPONENTS:
        want = getattr(tiny_single_file.pipe, component).state_dict()
        got = getattr(single, component).state_dict()
        assert set(got) == set(want), component
        for name in want:
            assert torch.equal(got[name], want[name]), (component, name)


def test_single_file_import_gives_the_diffusers_folders_weights_bit_for_bit(tiny_single_file, imported):
    for component in COMPONENTS:
        want = tensors_of(tiny_single_file.folder, component)
        got = tensors_of(imported, component)
        assert set(got) == set(want), component
        for name, (dtype, values) in want.items():
            assert got[name][0] == dtype == "F16", (component, name)
            assert np.array_equal(got[name][1], values), (component, name)


def test_configs_read_from_the_single_files_shapes_are_the_diffusers_models(tiny_single_file, imported):
    for component in COMPONENTS:
        want = json.loads((tiny_single_file.folder / component / "config.json").read_text())
        got = json.loads((imported / component / "config.json").read_text())
        for key, value in got.items():
            if key in want and key not in SDXL_ONLY_KEYS:
                assert value == want[key] or value == list(want[key]), (component, key, value, want[key])


def test_imported_single_file_generates_the_same_latents_as_the_folder_it_came_from(tiny_single_file, imported):
    ours = load_pipeline(imported)
    noise = torch.from_numpy(np.random.default_rng(1).standard_normal((1, 4, 8, 8)).astype(np.float32))
    kwargs = dict(prompt="a lighthouse at dusk, oil painting", negative_prompt="blurry", num_inference_steps=3,
                  guidance_scale=5.0, height=64, width=64, output_type="latent")
    with torch.no_grad():
        want = tiny_single_file.pipe(latents=noise.clone(), **kwargs).images.numpy()
        got = ours(latents=noise.clone(), **kwargs).images.numpy()
    assert np.abs(want).max() > 0.1
    assert pcc(got, want) >= 0.99999


def test_engine_unet_of_the_imported_model_matches_diffusers(tiny_single_file, imported):
    inputs = tiny_single_file.unet_inputs()
    with UNet.load(imported / "unet") as unet:
        got = unet(*inputs)
    assert pcc(got, unet_reference(tiny_single_file.pipe.unet, *inputs)) >= 0.9999


def test_uint8_import_is_models_quantize_of_the_unet_only(tiny_single_file, imported, tmp_path):
    dest = tmp_path / "tiny-uint8"
    import_model(tiny_single_file.sgm, dest, precision="uint8", log=lambda *_: None)
    quantized = tmp_path / "quantized-unet"
    quantize_folder(imported / "unet", quantized, log=lambda *_: None)
    want = read_header(quantized / WEIGHT_FILES["unet"])
    header = read_header(dest / "unet" / WEIGHT_FILES["unet"])
    assert list(header) == list(want)   # the order a UNet evaluation reads them
    for name, info in want.items():
        assert header[name].dtype == info.dtype and np.array_equal(read_raw(header[name]), read_raw(info)), name
    matrix = "down_blocks.1.attentions.0.transformer_blocks.0.attn1.to_q.weight"
    assert header[matrix].dtype == "U8" and header[matrix + ".q_scale"].dtype == "F32"
    assert header["conv_norm_out.weight"].dtype == "F16"
    assert json.loads((dest / "unet" / "config.json").read_text())["_slowframe_quantization"]
    for component in ("vae", "text_encoder", "text_encoder_2"):
        assert {i.dtype for i in read_header(dest / component / WEIGHT_FILES[component]).values()} == {"F16"}
    order = list(header)
    assert order.index("time_embedding.linear_1.weight") < order.index("conv_in.weight") < \
        order.index("down_blocks.0.resnets.0.norm1.weight") < order.index("mid_block.resnets.0.norm1.weight") < \
        order.index("up_blocks.0.resnets.0.norm1.weight") < order.index("conv_out.weight")
    inputs = tiny_single_file.unet_inputs()
    with UNet.load(dest / "unet") as unet:
        got = unet(*inputs)
    assert pcc(got, unet_reference(tiny_single_file.pipe.unet, *inputs)) >= 0.998
    assert verify_model(dest, log=lambda *_: None).tensors > 0


def test_manifest_records_source_hash_precision_and_every_file(tiny_single_file, imported):
    manifest = json.loads((imported / MANIFEST).read_text())
    source = manifest["source"]
    assert source["kind"] == "sgm"
    assert source["files"][0]["sha256"] == hashlib.sha256(tiny_single_file.sgm.read_bytes()).hexdigest()
    assert manifest["precision"] == "fp16" and manifest["loras"] == [] and manifest["vae"] is None
    assert manifest["supplied"] == ["tokenizer", "tokenizer_2", "scheduler"]
    on_disk = {p.relative_to(imported).as_posix() for p in imported.rglob("*") if p.is_file()} - {MANIFEST}
    assert set(manifest["files"]) == on_disk
    for rel, record in manifest["files"].items():
        data = (imported / rel).read_bytes()
        assert record == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def test_supplied_tokenizers_are_sdxls(imported):
    from transformers import CLIPTokenizer

    from engine.sdxl.tokenizer import ClipTokenizer

    for name, pad in (("tokenizer", 49407), ("tokenizer_2", 0)):
        ref = CLIPTokenizer.from_pretrained(imported / name)
        ids = ref("a photo of a cat!", padding="max_length", max_length=77).input_ids
        assert ids[:6] == [49406, 320, 1125, 539, 320, 2368]
        assert ids[-1] == pad
        assert ClipTokenizer.from_folder(imported / name)("a photo of a cat!").tolist() == ids
    scheduler = json.loads((imported / "scheduler" / "scheduler_config.json").read_text())
    assert scheduler["_class_name"] == "EulerDiscreteScheduler" and scheduler["timestep_spacing"] == "leading"


def test_diffusers_folder_with_tokenizers_saved_by_current_transformers(tmp_path):
    plain = write_random_model(tmp_path / "plain")   # no tokenizer folders: the bundled vocabulary
    src = tmp_path / "src"
    shutil.copytree(plain, src)
    for name in ("tokenizer", "tokenizer_2"):   # tokenizer_2 padding with EOS: not the bundled vocabulary's "!"
        write_saved_tokenizer(src / name, "<|endoftext|>")
    import_model(src, tmp_path / "imported", log=lambda *_: None)
    assert (tmp_path / "imported" / "tokenizer_2" / "tokenizer.json").is_file()
    run = dict(prompt="a cat!", steps=1, seed=1, width=64, height=64)
    got = Pipeline.load(tmp_path / "imported").generate(**run).latents
    assert np.array_equal(got, Pipeline.load(src).generate(**run).latents)
    assert not np.array_equal(got, Pipeline.load(plain).generate(**run).latents)
    (src / "tokenizer_2" / "tokenizer.json").unlink()
    with pytest.raises(ModelFileError, match=r"src/tokenizer_2: tokenizer file\(s\) missing"):
        import_model(src, tmp_path / "again", log=lambda *_: None)


def test_diffusers_folder_with_fp32_shards_bf16_old_names_and_fp16_variant(tiny_single_file, imported, tmp_path):
    src = tmp_path / "variants"
    shutil.copytree(tiny_single_file.folder, src)
    _reshard_as_fp32(src / "unet")
    _rename_vae_attention_old_style(src / "vae")
    te2 = src / "text_encoder_2" / "model.safetensors"
    original_te2 = {n: read_raw(i).view(np.float16) for n, i in read_header(te2).items()}
    _rewrite(te2, {n: (_bf16(v), "BF16") for n, v in original_te2.items()})
    vae = src / "vae" / "diffusion_pytorch_model.safetensors"
    fp16_variant = src / "vae" / "diffusion_pytorch_model.fp16.safetensors"
    shutil.copyfile(vae, fp16_variant)
    # an fp32 file of zeros beside it must be ignored: the fp16 variant wins
    _rewrite(vae, {n: (np.zeros(i.shape, np.float32), "F32") for n, i in read_header(vae).items()})
    dest = tmp_path / "from-folder"
    import_model(src, dest, log=lambda *_: None)
    for component in ("unet", "vae", "text_encoder"):
        want, got = tensors_of(imported, component), tensors_of(dest, component)
        assert set(got) == set(want)
        assert all(np.array_equal(got[n][1], want[n][1]) for n in want), component
    got = tensors_of(dest, "text_encoder_2")
    for name, values in original_te2.items():
        expected = _bf16(values).view(np.float32).astype(np.float16)
        assert np.array_equal(got[name][1].view(np.float16), expected), name
    manifest = json.loads((dest / MANIFEST).read_text())
    assert manifest["source"]["kind"] == "diffusers" and manifest["supplied"] == []
    assert (dest / "tokenizer" / "vocab.json").read_bytes() == (src / "tokenizer" / "vocab.json").read_bytes()


def test_vae_option_replaces_the_vae_from_a_single_vae_file(tiny_single_file, tmp_path):
    from engine.convert.sgm_keys import VAE_PREFIX

    header = read_header(tiny_single_file.sgm)
    vae = {n[len(VAE_PREFIX):]: (read_raw(i).view(np.float16).astype(np.float32) * 0.5, "F16")
           for n, i in header.items() if n.startswith(VAE_PREFIX)}
    vae_file = tmp_path / "sdxl_vae.safetensors"
    _rewrite(vae_file, vae)
    dest = tmp_path / "with-vae"
    import_model(tiny_single_file.sgm, dest, vae=vae_file, log=lambda *_: None)
    got = tensors_of(dest, "vae")
    halved = tensors_of(tiny_single_file.folder, "vae")
    for name, (_, values) in halved.items():
        assert np.array_equal(got[name][1].view(np.float16), (values.view(np.float16).astype(np.float32) * 0.5)
                              .astype(np.float16).reshape(got[name][1].shape)), name
    manifest = json.loads((dest / MANIFEST).read_text())
    assert manifest["vae"]["files"][0]["path"] == str(vae_file)
    assert [f["path"] for f in manifest["source"]["files"]] == [str(tiny_single_file.sgm)]


def test_config_dir_supplies_what_shapes_cannot_tell(tiny_single_file, tmp_path):
    """Heads are invisible in the weights; a model whose heads are not 64 channels wide
    imports with --config (here the same weights with 32-channel heads)."""
    from diffusers import UNet2DConditionModel

    configs = tmp_path / "configs"
    for component in COMPONENTS:
        (configs / component).mkdir(parents=True)
        shutil.copyfile(tiny_single_file.folder / component / "config.json", configs / component / "config.json")
    unet_config = json.loads((configs / "unet" / "config.json").read_text())
    unet_config["attention_head_dim"] = [1, 2, 4]
    (configs / "unet" / "config.json").write_text(json.dumps(unet_config))
    dest = tmp_path / "heads32"
    import_model(tiny_single_file.sgm, dest, config_dir=configs, log=lambda *_: None)
    assert json.loads((dest / "unet" / "config.json").read_text())["attention_head_dim"] == [1, 2, 4]
    reference = UNet2DConditionModel.from_pretrained(tiny_single_file.folder / "unet", attention_head_dim=[1, 2, 4])
    inputs = tiny_single_file.unet_inputs(seed=6)
    want = unet_reference(reference.float().eval(), *inputs)
    with UNet.load(dest / "unet") as unet:
        got = unet(*inputs)
    assert pcc(got, want) >= 0.9999
    assert pcc(want, unet_reference(tiny_single_file.pipe.unet, *inputs)) < 0.9999   # the heads matter


def test_cli_import_verify_and_list(tiny_single_file, tmp_path, capsys):
    models = tmp_path / "models"
    models.mkdir()
    assert main(["models", "import", str(tiny_single_file.sgm), str(models / "tiny"), "--precision", "uint8"]) == 0
    assert "peak RSS" in capsys.readouterr().out
    assert main(["models", "verify", str(models / "tiny")]) == 0
    assert "OK" in capsys.readouterr().out
    assert main(["models", "list", str(models)]) == 0
    listing = capsys.readouterr().out
    assert "tiny" in listing and "uint8" in listing and tiny_single_file.sgm.name in listing
    entry, = list_models(models)
    assert (entry.name, entry.precision, entry.status) == ("tiny", "uint8", "ok")


def test_verify_names_a_damaged_file(imported, tmp_path, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(imported, copy)
    weights = copy / "text_encoder" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0xFF
    weights.write_bytes(bytes(data))
    assert main(["models", "verify", str(copy)]) == 1
    err = capsys.readouterr().err
    assert "text_encoder/model.safetensors" in err and "sha256" in err and "Traceback" not in err


# -- helpers that rewrite a diffusers folder in the other formats found in the wild ----

def _rewrite(path, tensors: dict[str, tuple[np.ndarray, str]]) -> None:
    """Write float `tensors` as {name: (values, "F16" | "F32" | "BF16")}."""
    def stored(values: np.ndarray, dtype: str) -> np.ndarray:
        if dtype == "BF16":
            return (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
        return values.astype(np.float16 if dtype == "F16" else np.float32)

    with open(path, "wb") as f:
        w = SafetensorsWriter(f, [(n, d, v.shape) for n, (v, d) in tensors.items()], {"format": "pt"})
        for name, (values, dtype) in tensors.items():
            w.write(name, stored(values, dtype))
        w.close()


def _bf16(values: np.ndarray) -> np.ndarray:
    """fp16 values rounded to bfloat16 (as float32 whose low 16 bits are zero)."""
    bits = values.astype(np.float32).view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32)


def _reshard_as_fp32(folder) -> None:
    path = folder / "diffusion_pytorch_model.safetensors"
    tensors = {n: read_raw(i).view(np.float16).astype(np.float32) for n, i in read_header(path).items()}
    path.unlink()
    names = list(tensors)
    shards = {"diffusion_pytorch_model-00001-of-00002.safetensors": names[::2],
              "diffusion_pytorch_model-00002-of-00002.safetensors": names[1::2]}
    for shard, members in shards.items():
        _rewrite(folder / shard, {n: (tensors[n], "F32") for n in members})
    index = {"metadata": {}, "weight_map": {n: s for s, members in shards.items() for n in members}}
    (folder / "diffusion_pytorch_model.safetensors.index.json").write_text(json.dumps(index))


def _rename_vae_attention_old_style(folder) -> None:
    path = folder / "diffusion_pytorch_model.safetensors"
    old = {"to_q": "query", "to_k": "key", "to_v": "value", "to_out.0": "proj_attn"}
    tensors = {}
    for name, info in read_header(path).items():
        values = read_raw(info).view(np.float16)
        for new, legacy in old.items():
            marker = f".mid_block.attentions.0.{new}."
            if marker in name:
                name = name.replace(marker, f".mid_block.attentions.0.{legacy}.")
                if name.endswith(".weight"):
                    values = values.reshape(values.shape + (1, 1))
        tensors[name] = (values, "F16")
    _rewrite(path, tensors)
