"""A tiny random SDXL model as a diffusers folder and as a single-file SGM checkpoint.

`make_tiny_model(root)` builds an SDXL-shaped pipeline with diffusers/transformers
(heads of 64 channels, as every SDXL-family model has: the importer reads the heads
from that convention), stores it as fp16 in diffusers layout, and returns the fp32
diffusers pipeline loaded back from those files. `write_sgm(folder, path)` writes the
same weights under their original SGM names (the inverse of diffusers' single-file
mapping), with the buffers real files carry; `load_single_file` reads such a file with
diffusers' own `from_single_file`, which cross-checks the writer.

`sgm_entries(configs)` lists every SGM tensor of a model with its shape and the
diffusers tensors it is made of, without torch: bench/models_import.py uses it to write
a full-size random checkpoint.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from engine.convert import sgm_keys
from engine.convert.layout import COMPONENTS, expected_shapes
from engine.safetensors import SafetensorsWriter, read_header, read_raw
from engine.sdxl.unet_config import parse_config
from tiny_models import perturb_parameters

HEAD = 64
UNET = dict(sample_size=16, in_channels=4, out_channels=4, block_out_channels=(32, 64, 128), layers_per_block=2,
            down_block_types=("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
            up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
            attention_head_dim=(1, 1, 2), transformer_layers_per_block=(1, 2, 3), use_linear_projection=True,
            cross_attention_dim=64 + 128, addition_embed_type="text_time", addition_time_embed_dim=8,
            projection_class_embeddings_input_dim=6 * 8 + 128, norm_num_groups=32)
VAE = dict(block_out_channels=(32, 32, 64, 64), layers_per_block=2, latent_channels=4, norm_num_groups=32,
           down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
           sample_size=64, scaling_factor=0.13025)
TEXT = {
    "text_encoder": dict(hidden_size=64, num_attention_heads=1, num_hidden_layers=3, intermediate_size=128,
                         hidden_act="quick_gelu", projection_dim=64),
    "text_encoder_2": dict(hidden_size=128, num_attention_heads=2, num_hidden_layers=3, intermediate_size=256,
                           hidden_act="gelu", projection_dim=128),
}
TOKEN_IDS = dict(vocab_size=49408, max_position_embeddings=77, bos_token_id=0, eos_token_id=2, pad_token_id=1)


def make_tiny_model(root: Path, seed: int = 0):
    """Write the tiny model under `root` (once) and return diffusers' fp32 pipeline on those files."""
    import torch
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    from engine.convert import project_files

    root = Path(root)
    if not (root / "model_index.json").exists():
        torch.manual_seed(seed)
        models = {
            "unet": UNet2DConditionModel(**UNET),
            "vae": AutoencoderKL(**VAE),
            "text_encoder": CLIPTextModel(CLIPTextConfig(**TEXT["text_encoder"], **TOKEN_IDS)),
            "text_encoder_2": CLIPTextModelWithProjection(CLIPTextConfig(**TEXT["text_encoder_2"], **TOKEN_IDS)),
        }
        for i, (name, model) in enumerate(models.items()):
            perturb_parameters(model, seed + i + 100, embeddings=True)
            model.half().save_pretrained(root / name)
        for name, pad in project_files.PAD_TOKENS.items():
            project_files.write_tokenizer(root / name, pad)
        project_files.write_scheduler(root / "scheduler")
        project_files.write_model_index(root)
    return load_pipeline(root)


def load_pipeline(root: Path):
    import torch
    from diffusers import StableDiffusionXLPipeline

    pipe = StableDiffusionXLPipeline.from_pretrained(root, torch_dtype=torch.float32, local_files_only=True,
                                                     add_watermarker=False)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def sgm_entries(configs: dict[str, dict]) -> dict[str, tuple[tuple[int, ...], list[Part], str]]:
    """SGM key -> (shape, the diffusers tensors it holds in row order, how: "" | "T" | "1x1")."""
    cfg = parse_config(configs["unet"])
    levels = len(configs["vae"]["block_out_channels"])
    width = configs["text_encoder_2"]["hidden_size"]
    entries: dict[str, tuple[tuple[int, ...], list[Part], str]] = {}
    for component in COMPONENTS:
        for name, shape in expected_shapes(component, configs[component], component).items():
            where = {"unet": lambda n: sgm_keys.unet_key(n, cfg), "vae": lambda n: sgm_keys.vae_key(n, levels),
                     "text_encoder": sgm_keys.clip_l_key,
                     "text_encoder_2": lambda n: sgm_keys.open_clip_key(n, width)}[component](name)
            if where.rows:
                old = entries.get(where.key, ((0,) + shape[1:], [], ""))
                entries[where.key] = ((old[0][0] + shape[0],) + shape[1:], old[1] + [(component, name)], "")
            elif where.transposed:
                entries[where.key] = (tuple(reversed(shape)), [(component, name)], "T")
            elif where.conv1x1:
                entries[where.key] = (tuple(shape) + (1, 1), [(component, name)], "1x1")
            else:
                entries[where.key] = (tuple(shape), [(component, name)], "")
    for key, (shape, parts, _) in entries.items():
        if len(parts) > 1:   # q, k, v rows must be in that order
            order = [n.split(".")[-2] for _, n in parts]
            assert order == ["q_proj", "k_proj", "v_proj"], (key, order)
    return dict(sorted(entries.items()))


# Buffers real SDXL checkpoints carry beside the weights (the importer ignores them).
BUFFERS = {
    sgm_keys.CLIP_L_PREFIX + "text_model.embeddings.position_ids": ("I64", (1, 77)),
    sgm_keys.OPEN_CLIP_PREFIX + "logit_scale": ("F32", ()),
}


def write_sgm(folder: Path, path: Path) -> Path:
    """The diffusers folder's fp16 weights, bit for bit, as one SGM checkpoint."""
    folder = Path(folder)
    configs = {c: json.loads((folder / c / "config.json").read_text()) for c in COMPONENTS}
    files = {c: folder / c / ("model.safetensors" if c.startswith("text") else "diffusion_pytorch_model.safetensors")
             for c in COMPONENTS}
    headers = {c: read_header(f) for c, f in files.items()}

    def tensor(component: str, name: str) -> np.ndarray:
        info = headers[component].get(name) or headers[component][name.removeprefix("text_model.")]
        return read_raw(info).view(np.float16)

    def assemble(shape, parts, how) -> np.ndarray:
        arrays = [tensor(c, n) for c, n in parts]
        if how == "T":
            return np.ascontiguousarray(arrays[0].T)
        return np.concatenate(arrays).reshape(shape)

    write_sgm_file(path, sgm_entries(configs), assemble)
    return path


def write_sgm_file(path: Path, entries, assemble) -> None:
    """Write `entries` (from sgm_entries) as fp16, each from assemble(shape, parts, how),
    plus the usual buffers."""
    buffers = {k: (d, s) for k, (d, s) in BUFFERS.items()
               if any(e.startswith(k.rsplit(".", 2)[0]) for e in entries)}
    header = [(k, "F16", shape) for k, (shape, _, _) in entries.items()] + [(k, d, s) for k, (d, s) in buffers.items()]
    with open(path, "wb") as f:
        writer = SafetensorsWriter(f, header, {"format": "pt"})
        for key, (shape, parts, how) in entries.items():
            writer.write(key, assemble(shape, parts, how).astype(np.float16, copy=False))
        for key, (dtype, shape) in buffers.items():
            writer.write(key, np.arange(77, dtype=np.int64).reshape(shape) if dtype == "I64"
                         else np.full(shape, 4.6052, dtype=np.float32))
        writer.close()


def load_single_file(path: Path, config_folder: Path):
    """diffusers' own reading of an SGM file (offline: configs from `config_folder`)."""
    import torch
    from diffusers import StableDiffusionXLPipeline

    pipe = StableDiffusionXLPipeline.from_single_file(str(path), config=str(config_folder), local_files_only=True,
                                                      torch_dtype=torch.float32, add_watermarker=False)
    pipe.set_progress_bar_config(disable=True)
    return pipe


class TinyCheckpoint:
    """The tiny model as a diffusers folder (`folder`) and as an SGM file (`sgm`), with
    diffusers' fp32 pipeline on the folder (`pipe`)."""

    def __init__(self, root: Path):
        self.folder = Path(root) / "diffusers"
        self.sgm = Path(root) / "tiny_sdxl.safetensors"
        self.pipe = make_tiny_model(self.folder)
        if not self.sgm.exists():
            write_sgm(self.folder, self.sgm)

    def unet_inputs(self, batch: int = 2, h: int = 8, w: int = 12, tokens: int = 77, seed: int = 0):
        rng = np.random.default_rng(seed)
        cross = UNET["cross_attention_dim"]
        pooled = UNET["projection_class_embeddings_input_dim"] - 6 * UNET["addition_time_embed_dim"]
        return (rng.standard_normal((batch, 4, h, w)).astype(np.float32), 601.0,
                rng.standard_normal((batch, tokens, cross)).astype(np.float32),
                rng.standard_normal((batch, pooled)).astype(np.float32),
                np.array([[h * 8, w * 8, 0, 0, h * 8, w * 8]] * batch, dtype=np.float32))


def unet_reference(unet, x, t, ctx, text, ids) -> np.ndarray:
    """diffusers' UNet output for the engine's inputs."""
    import torch

    with torch.no_grad():
        out = unet(torch.from_numpy(x), t, torch.from_numpy(ctx),
                   added_cond_kwargs=dict(text_embeds=torch.from_numpy(text), time_ids=torch.from_numpy(ids)))
    return out.sample.numpy()
