"""Tiny random SDXL-shaped models for reference tests: UNets, VAEs, text encoders and whole model folders.

Each model is built with diffusers/transformers from fixed seeds, its parameters
perturbed so every one matters, stored as fp16 safetensors (like real SDXL files) and
loaded back as fp32, so the engine and the reference use exactly the same weights.
Tokenizer folders come from tests/tokenizer_files.py, single-file SGM models from
tests/sgm_files.py. Nothing is downloaded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from diffusers import AutoencoderKL, AutoencoderTiny, StableDiffusionXLPipeline, UNet2DConditionModel
from diffusers.configuration_utils import FrozenDict
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

from engine.convert import project_files
from engine.safetensors import SafetensorsWriter, read_header, read_raw
from sgm_files import write_sgm
from tokenizer_files import write_tokenizers

CLASSES = {"unet": UNet2DConditionModel, "vae": AutoencoderKL, "text_encoder": CLIPTextModel,
           "text_encoder_2": CLIPTextModelWithProjection}
FP16_WEIGHTS = "diffusion_pytorch_model.fp16.safetensors"

SDXL_BLOCKS = dict(
    down_block_types=("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
    up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
)

# Three tiny UNets: each has three levels, GroupNorm(32), transformer depth > 1.
UNET_CONFIGS = {
    "tiny": dict(block_out_channels=(32, 64, 128), attention_head_dim=(2, 4, 8), transformer_layers_per_block=(1, 2, 3),
                 cross_attention_dim=96, addition_time_embed_dim=8, projection_class_embeddings_input_dim=6 * 8 + 64),
    "wide-heads": dict(block_out_channels=(64, 96, 128), attention_head_dim=(1, 3, 2),
                       transformer_layers_per_block=(1, 2, 2), cross_attention_dim=64, addition_time_embed_dim=16,
                       projection_class_embeddings_input_dim=6 * 16 + 32),
    "deep": dict(block_out_channels=(32, 64, 64), attention_head_dim=(1, 2, 4), transformer_layers_per_block=(1, 3, 2),
                 layers_per_block=1, cross_attention_dim=128, addition_time_embed_dim=4,
                 projection_class_embeddings_input_dim=6 * 4 + 40),
}

VAE_CONFIGS = {
    # SDXL's pattern at 1/4 width: shortcuts in the last two up blocks, layers_per_block 2.
    "tiny": dict(block_out_channels=(32, 32, 64, 64), layers_per_block=2),
    # Every level a different width (a shortcut in three up blocks), one resnet per level,
    # no post_quant_conv.
    "varied": dict(block_out_channels=(32, 64, 96, 128), layers_per_block=1, use_post_quant_conv=False),
}

# Like SDXL's (eos_token_id 2: the pooled EOS is found by argmax of the ids), at a tiny
# size; the widths fit the "tiny" UNet (96 = 32 + 64).
TEXT_ENCODER_CONFIGS = {
    "text_encoder": dict(hidden_size=32, num_attention_heads=4, num_hidden_layers=3, intermediate_size=64,
                         hidden_act="quick_gelu", projection_dim=32),
    "text_encoder_2": dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=4, intermediate_size=160,
                           hidden_act="gelu", projection_dim=64),
}
SDXL_TOKEN_IDS = dict(vocab_size=49408, max_position_embeddings=77, bos_token_id=0, eos_token_id=2, pad_token_id=1)

# Every attention head 64 channels wide, as in every SDXL-family model: the SGM importer
# reads the heads from that convention. The text widths (64 + 128) make the UNet's
# context and pooled vector.
HEADS64_CONFIGS = {
    "unet": dict(block_out_channels=(32, 64, 128), attention_head_dim=(1, 1, 2), transformer_layers_per_block=(1, 2, 3),
                 cross_attention_dim=64 + 128, addition_time_embed_dim=8,
                 projection_class_embeddings_input_dim=6 * 8 + 128),
    "vae": dict(VAE_CONFIGS["tiny"], sample_size=64),
    "text_encoder": dict(hidden_size=64, num_attention_heads=1, num_hidden_layers=3, intermediate_size=128,
                         hidden_act="quick_gelu", projection_dim=64),
    "text_encoder_2": dict(hidden_size=128, num_attention_heads=2, num_hidden_layers=3, intermediate_size=256,
                           hidden_act="gelu", projection_dim=128),
}


def unet_kwargs(changes: dict) -> dict:
    kw = dict(sample_size=16, in_channels=4, out_channels=4, layers_per_block=2, use_linear_projection=True,
              addition_embed_type="text_time", norm_num_groups=32, flip_sin_to_cos=True, freq_shift=0, **SDXL_BLOCKS)
    kw.update(changes)
    return kw


def vae_kwargs(changes: dict) -> dict:
    kw = dict(in_channels=3, out_channels=3, latent_channels=4, norm_num_groups=32, scaling_factor=0.13025,
              down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4)
    kw.update(changes)
    return kw


def text_kwargs(changes: dict, eos_token_id: int = 2) -> dict:
    return {**changes, **SDXL_TOKEN_IDS, "eos_token_id": eos_token_id}


class Seeds(NamedTuple):
    """How a model's random weights are drawn."""

    torch: int | None        # torch.manual_seed before building; None: go on from where the last model left it
    perturb: int             # perturb_parameters' generator
    embeddings: bool = False  # perturb_parameters' `embeddings`


def seeds_alone(seed: int = 0) -> dict[str, Seeds]:
    """Each component from its own seed (as make_unet, make_vae and make_text_model draw them)."""
    return {"unet": Seeds(seed, seed + 1), "vae": Seeds(seed, seed + 1),
            "text_encoder": Seeds(seed, seed + 100, True), "text_encoder_2": Seeds(seed + 1, seed + 101, True)}


def seeds_in_turn(seed: int = 0) -> dict[str, Seeds]:
    """All components from one torch generator seeded once, in CLASSES' order, every embedding perturbed."""
    return {c: Seeds(seed if i == 0 else None, seed + 100 + i, True) for i, c in enumerate(CLASSES)}


def perturb_parameters(model: torch.nn.Module, generator_seed: int, embeddings: bool = False) -> None:
    """Default init leaves norms at weight 1, bias 0 and some outputs at zero; random
    values make every parameter matter so a wrong one changes the output. With
    `embeddings`, embedding tables get unit-variance values too (they keep text encoders'
    states far from trivial). Matrices keep the libraries' own init."""
    g = torch.Generator().manual_seed(generator_seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
            elif embeddings and "embedding" in name and p.ndim == 2:
                p.copy_(torch.randn(p.shape, generator=g))


def random_model(component: str, kwargs: dict, seeds: Seeds) -> torch.nn.Module:
    """A `component` model (a key of CLASSES) with random, perturbed weights."""
    if seeds.torch is not None:
        torch.manual_seed(seeds.torch)
    cls = CLASSES[component]
    model = cls(CLIPTextConfig(**kwargs)) if component.startswith("text") else cls(**kwargs)
    perturb_parameters(model, seeds.perturb, seeds.embeddings)
    return model


def stored_fp16(component: str, kwargs: dict, folder: Path, seeds: Seeds) -> torch.nn.Module:
    """Write a random `component` to `folder` (once, fp16 variant) and return the fp32 model read back."""
    folder = Path(folder)
    if not (folder / "config.json").exists():
        random_model(component, kwargs, seeds).half().save_pretrained(folder, variant="fp16")
    dtype = {"dtype" if component.startswith("text") else "torch_dtype": torch.float16}
    return CLASSES[component].from_pretrained(folder, variant="fp16", **dtype).float().eval()


def make_unet(name: str, folder: Path, seed: int = 0) -> UNet2DConditionModel:
    """Write tiny UNet `name` to `folder` (fp16 variant) and return its fp32 reference model."""
    return stored_fp16("unet", unet_kwargs(UNET_CONFIGS[name]), folder, seeds_alone(seed)["unet"])


def make_vae(name: str, folder: Path, seed: int = 0) -> AutoencoderKL:
    """Write tiny VAE `name` to `folder` (fp16 variant) and return its fp32 reference model."""
    return stored_fp16("vae", vae_kwargs(VAE_CONFIGS[name]), folder, seeds_alone(seed)["vae"])


def make_tiny_vae(folder: Path, seed: int = 0, **changes: object) -> AutoencoderTiny:
    """Write a random AutoencoderTiny of TAESDXL's architecture (its real sizes: 64 channels,
    3-3-3-1 decoder blocks, 4.9 MB of decoder weights in fp32; `changes` alter its config)
    to `folder` as fp16 diffusion_pytorch_model.safetensors, and return its fp32 reference.
    Its pictures vary (standard deviation ~0.4 on 2.5-sigma latents)."""
    folder = Path(folder)
    if not (folder / "config.json").exists():
        torch.manual_seed(seed)
        model = AutoencoderTiny(**changes)
        perturb_parameters(model, seed + 1)
        with torch.no_grad():   # the default init fades the picture to one flat colour over 30 ReLU convs
            for name, p in model.named_parameters():
                if name.startswith("decoder.") and name.endswith(".weight"):
                    p.mul_(1.5)
        model.half().save_pretrained(folder)
    return AutoencoderTiny.from_pretrained(folder, torch_dtype=torch.float16).float().eval()


def make_text_model(root: Path, seed: int = 0, eos_token_id: int = 2) -> tuple[CLIPTextModel,
                                                                              CLIPTextModelWithProjection]:
    """Write root/text_encoder (CLIPTextModel, quick_gelu), root/text_encoder_2
    (CLIPTextModelWithProjection, exact gelu, a different width) and the two tokenizer
    folders (once) and return the fp32 encoders."""
    write_tokenizers(root)
    seeds = seeds_alone(seed)
    return tuple(stored_fp16(c, text_kwargs(kw, eos_token_id), Path(root) / c, seeds[c])
                 for c, kw in TEXT_ENCODER_CONFIGS.items())


@dataclass(frozen=True)
class WholeModel:
    """A whole tiny SDXL model: each component's constructor arguments and seeds, and
    the weights files' names (variant "fp16": *.fp16.safetensors as hub repos ship them;
    None: the plain names)."""

    kwargs: dict[str, dict]
    seeds: dict[str, Seeds]
    variant: str | None


SDXL_MODELS = {
    # The "tiny" UNet, VAE and text encoders, as make_unet, make_vae and make_text_model make them.
    "tiny": WholeModel({"unet": unet_kwargs(UNET_CONFIGS["tiny"]), "vae": vae_kwargs(VAE_CONFIGS["tiny"]),
                        **{c: text_kwargs(kw) for c, kw in TEXT_ENCODER_CONFIGS.items()}},
                       seeds_alone(), "fp16"),
    # Heads of 64 channels, the layout single-file SGM models are read in.
    "heads64": WholeModel({"unet": unet_kwargs(HEADS64_CONFIGS["unet"]), "vae": vae_kwargs(HEADS64_CONFIGS["vae"]),
                           "text_encoder": text_kwargs(HEADS64_CONFIGS["text_encoder"]),
                           "text_encoder_2": text_kwargs(HEADS64_CONFIGS["text_encoder_2"])},
                          seeds_in_turn(), None),
}


def make_sdxl(root: Path, name: str = "tiny") -> StableDiffusionXLPipeline:
    """Write whole tiny model `name` under `root` (once): the components, tokenizers, SDXL
    base's scheduler config and model_index.json; return diffusers' fp32 pipeline on those files."""
    root = Path(root)
    model = SDXL_MODELS[name]
    if not (root / "model_index.json").exists():
        for component in CLASSES:
            random_model(component, model.kwargs[component], model.seeds[component]).half().save_pretrained(
                root / component, variant=model.variant)
        write_tokenizers(root)
        project_files.write_scheduler(root / "scheduler")
        project_files.write_model_index(root)
    return load_pipeline(root, model.variant)


def load_pipeline(root: Path, variant: str | None = None) -> StableDiffusionXLPipeline:
    """diffusers' fp32 pipeline on a model folder."""
    pipe = StableDiffusionXLPipeline.from_pretrained(root, variant=variant, torch_dtype=torch.float32,
                                                     local_files_only=True, add_watermarker=False)
    pipe.set_progress_bar_config(disable=True)
    return pipe


UNetInputs = tuple[np.ndarray, float, np.ndarray, np.ndarray, np.ndarray]


def pooled_dim(config: FrozenDict) -> int:
    """The width of a UNet's pooled text vector."""
    return config.projection_class_embeddings_input_dim - 6 * config.addition_time_embed_dim


def unet_inputs(config: FrozenDict, t: float, batch: int, h: int, w: int, tokens: int, seed: int) -> UNetInputs:
    """Random (x, t, context, pooled text, time ids) for a UNet with `config`."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, 4, h, w)).astype(np.float32)
    ctx = rng.standard_normal((batch, tokens, config.cross_attention_dim)).astype(np.float32)
    text = rng.standard_normal((batch, pooled_dim(config))).astype(np.float32)
    ids = np.array([[h * 8, w * 8, 0, 0, h * 8, w * 8]] * batch, dtype=np.float32)
    return x, t, ctx, text, ids


def unet_reference(unet: UNet2DConditionModel, x: np.ndarray, t: float, ctx: np.ndarray, text: np.ndarray,
                   ids: np.ndarray) -> np.ndarray:
    """diffusers' UNet output for the engine's inputs."""
    with torch.no_grad():
        out = unet(torch.from_numpy(x), t, torch.from_numpy(ctx),
                   added_cond_kwargs=dict(text_embeds=torch.from_numpy(text), time_ids=torch.from_numpy(ids)))
    return out.sample.numpy()


class TinyUNet:
    """A tiny random SDXL-shaped UNet on disk and its diffusers fp32 reference."""

    def __init__(self, name: str, folder: Path):
        self.name = name
        self.folder = folder
        self.ref = make_unet(name, folder)

    def inputs(self, batch: int = 2, h: int = 16, w: int = 24, tokens: int = 154, seed: int = 0) -> UNetInputs:
        return unet_inputs(self.ref.config, 701.0, batch, h, w, tokens, seed)

    def reference(self, x: np.ndarray, t: float, ctx: np.ndarray, text: np.ndarray, ids: np.ndarray) -> np.ndarray:
        return unet_reference(self.ref, x, t, ctx, text, ids)


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


class TinySingleFile:
    """The "heads64" model as a diffusers folder (`folder`) and as an SGM single-file model (`sgm`), with
    diffusers' fp32 pipeline on the folder (`pipe`)."""

    def __init__(self, root: Path):
        self.folder = Path(root) / "diffusers"
        self.sgm = Path(root) / "tiny_sdxl.safetensors"
        self.pipe = make_sdxl(self.folder, "heads64")
        if not self.sgm.exists():
            write_sgm(self.folder, self.sgm)

    def unet_inputs(self, batch: int = 2, h: int = 8, w: int = 12, tokens: int = 77, seed: int = 0) -> UNetInputs:
        return unet_inputs(self.pipe.unet.config, 601.0, batch, h, w, tokens, seed)


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
