"""Tiny random VAEs of the SDXL layout (AutoencoderKL, four levels, GroupNorm(32)),
written in diffusers layout for reference tests.

Each is built with diffusers from a seed, stored as fp16 safetensors (like real SDXL
files) and loaded back into an fp32 diffusers model, so the engine and the reference
use exactly the same weights.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from diffusers import AutoencoderKL

from engine.safetensors import SafetensorsWriter, read_header, read_raw
from tiny_models import perturb_parameters

FP16_WEIGHTS = "diffusion_pytorch_model.fp16.safetensors"

VAE_CONFIGS = {
    # SDXL's pattern at 1/4 width: shortcuts in the last two up blocks, layers_per_block 2.
    "tiny": dict(block_out_channels=(32, 32, 64, 64), layers_per_block=2),
    # Every level a different width (a shortcut in three up blocks), one resnet per level,
    # no post_quant_conv.
    "varied": dict(block_out_channels=(32, 64, 96, 128), layers_per_block=1, use_post_quant_conv=False),
}


def vae_kwargs(name: str) -> dict:
    kw = dict(in_channels=3, out_channels=3, latent_channels=4, norm_num_groups=32, scaling_factor=0.13025,
              down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4)
    kw.update(VAE_CONFIGS[name])
    return kw


def make_vae(name: str, folder: Path, seed: int = 0) -> AutoencoderKL:
    """Write tiny VAE `name` to `folder` (fp16 variant) and return its fp32 reference model."""
    folder = Path(folder)
    if not (folder / "config.json").exists():
        torch.manual_seed(seed)
        model = AutoencoderKL(**vae_kwargs(name))
        perturb_parameters(model, seed + 1)
        model.half().save_pretrained(folder, variant="fp16")
    model = AutoencoderKL.from_pretrained(folder, variant="fp16", torch_dtype=torch.float16).float()
    return model.eval()


def copy_with_old_attention_names(src: Path, dst: Path) -> Path:
    """The same VAE with the mid attention named as older files do: query/key/value/proj_attn."""
    old = {"to_q": "query", "to_k": "key", "to_v": "value", "to_out.0": "proj_attn"}
    prefix = "decoder.mid_block.attentions.0."

    def rename(name: str) -> str:
        for new, legacy in old.items():
            if name.startswith(prefix + new + "."):
                return prefix + legacy + name[len(prefix + new):]
        return name

    dst.mkdir(parents=True)
    (dst / "config.json").write_text((src / "config.json").read_text())
    tensors = read_header(src / FP16_WEIGHTS)
    with open(dst / FP16_WEIGHTS, "wb") as f:
        writer = SafetensorsWriter(f, [(rename(n), "F16", i.shape) for n, i in tensors.items()])
        for name, info in tensors.items():
            writer.write(rename(name), read_raw(info).view(np.float16))
        writer.close()
    return dst


def copy_as_fp32(model: AutoencoderKL, dst: Path) -> Path:
    """The reference's (fp16-rounded) weights stored as fp32, without the fp16 variant."""
    model.save_pretrained(dst)
    assert (dst / "diffusion_pytorch_model.safetensors").is_file(), sorted(p.name for p in dst.iterdir())
    return dst


def edit_config(folder: Path, **changes: object) -> None:
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


class TinyVAE:
    """A tiny random VAE on disk and its diffusers fp32 reference."""

    def __init__(self, name: str, folder: Path):
        self.name = name
        self.folder = folder
        self.ref = make_vae(name, folder)

    def latents(self, batch: int = 1, h: int = 16, w: int = 16, seed: int = 0) -> np.ndarray:
        """z = latents / scaling_factor, as the pipeline passes them."""
        rng = np.random.default_rng(seed)
        return (rng.standard_normal((batch, 4, h, w)) / 0.13025).astype(np.float32)

    def reference(self, z: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return self.ref.decode(torch.from_numpy(z)).sample.numpy()


def smooth_latents(h: int, w: int, seed: int = 0, cells: int = 6) -> np.ndarray:
    """(1, 4, h, w) latents that vary slowly: random values on a coarse grid of about
    `cells` per side, bilinearly interpolated, divided by the scaling factor."""
    rng = np.random.default_rng(seed)
    coarse = rng.standard_normal((4, cells + 1, cells + 1))
    ys = np.linspace(0, cells, h)
    xs = np.linspace(0, cells, w)
    y0 = np.minimum(ys.astype(int), cells - 1)
    x0 = np.minimum(xs.astype(int), cells - 1)
    fy = (ys - y0)[:, None]
    fx = (xs - x0)[None, :]
    c00 = coarse[:, y0][:, :, x0]
    c01 = coarse[:, y0][:, :, x0 + 1]
    c10 = coarse[:, y0 + 1][:, :, x0]
    c11 = coarse[:, y0 + 1][:, :, x0 + 1]
    z = (c00 * (1 - fy) * (1 - fx) + c01 * (1 - fy) * fx + c10 * fy * (1 - fx) + c11 * fy * fx)
    return (z[None] / 0.13025).astype(np.float32)
