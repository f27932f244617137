"""A single-file SGM model (sd_xl_base_1.0.safetensors and its fine-tunes) as diffusers
components: what the file is, the configs its tensor shapes imply, and where each
diffusers tensor lives in it (engine/convert/sgm_keys.py).

The file carries no configuration, so it is read from the shapes: channels, levels,
resnets per level, transformer depths, context width, text encoder sizes. Attention
heads are not visible in shapes; every SDXL-family model uses heads of 64 channels
(SGM's num_head_channels: 64), so heads = channels / 64. A model built otherwise
imports with `config_dir`, a diffusers folder whose config files describe it.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from engine.convert import sgm_keys
from engine.convert.headers import check_unique_names
from engine.convert.layout import expected_shapes
from engine.convert.sgm_keys import COMPONENT_PREFIXES, UNET_PREFIX, VAE_PREFIX, SgmTensor
from engine.convert.source import IGNORED_SUFFIXES, ComponentSource, ModelSource, SourceTensor, check_shapes
from engine.errors import ModelFileError
from engine.sdxl.unet_config import parse_config as parse_unet_config
from engine.weights import TensorStore

HEAD_CHANNELS = 64
SDXL_VAE_SCALING = 0.13025
SDXL_SAMPLE_SIZE = 1024
EMA_PREFIX = "model_ema."

Shapes = dict[str, tuple[int, ...]]


def open_sgm(path: Path, config_dir: Path | None = None) -> ModelSource:
    """Read an SGM single-file model's header and map every tensor; nothing else is read."""
    check_unique_names(path)
    store = TensorStore([path])
    try:
        shapes = {name: info.shape for name, info in store.tensors.items()}
        identify(shapes, path)
        configs = configs_from_dir(config_dir) if config_dir else derive_configs(shapes, path)
        source = ModelSource("sgm", path, {}, stores=[store])
        for component in ("text_encoder", "text_encoder_2", "unet", "vae"):
            source.components[component] = map_component(component, configs[component], store, path)
        ignored = [n for n in shapes if not any(n.startswith(p) for p in COMPONENT_PREFIXES.values())]
        if ignored:
            ema = sum(n.startswith(EMA_PREFIX) for n in ignored)
            source.notes.append(f"ignored {len(ignored)} tensors outside the four models"
                                + (f" ({ema} of them EMA weights)" if ema else f" (e.g. {ignored[0]})"))
        return source
    except BaseException:
        store.close()
        raise


def map_component(component: str, config: dict, store: TensorStore, path: Path,
                  prefix: str | None = None) -> ComponentSource:
    """Every diffusers tensor of `component` found in the SGM file; all of the file's
    tensors under the component's prefix (`prefix` when it differs from SGM's, as in a
    standalone VAE file) must be used."""
    standard = COMPONENT_PREFIXES[component]
    prefix = standard if prefix is None else prefix
    origin = f"{path} ({prefix}*)" if prefix else str(path)
    expected = expected_shapes(component, config, f"{origin} (config)")
    locate = _locator(component, config)
    tensors: dict[str, SourceTensor] = {}
    sgm_name: dict[str, str] = {}
    used: set[str] = set()
    for name, shape in expected.items():
        where = locate(name)
        where = dataclasses.replace(where, key=prefix + where.key[len(standard):])
        sgm_name[name] = where.key
        info = store.tensors.get(where.key)
        if info is None:
            continue  # check_shapes names it
        used.add(where.key)
        tensors[name] = SourceTensor(store, where.key, _diffusers_shape(where, info.shape, shape), where.rows,
                                     where.transposed)
    leftover = [n for n in store.tensors if n.startswith(prefix) and n not in used and not n.endswith(IGNORED_SUFFIXES)]
    if leftover:
        more = f" (and {len(leftover) - 1} more)" if len(leftover) > 1 else ""
        raise ModelFileError(f"{path}: unexpected tensor '{leftover[0]}'{more}: not part of an SDXL {component} "
                             "with the configuration the other tensors imply; the file is not a standard SDXL "
                             "model")
    result = ComponentSource(component, config, tensors, origin, [path])
    check_shapes(result, sgm_name)
    return result


def _locator(component: str, config: dict):
    if component == "unet":
        cfg = parse_unet_config(config)
        return lambda name: sgm_keys.unet_key(name, cfg)
    if component == "vae":
        levels = len(config["block_out_channels"])
        return lambda name: sgm_keys.vae_key(name, levels)
    if component == "text_encoder":
        return sgm_keys.clip_l_key
    width = config["hidden_size"]
    return lambda name: sgm_keys.open_clip_key(name, width)


def _diffusers_shape(where: SgmTensor, stored: tuple[int, ...], expected: tuple[int, ...]) -> tuple[int, ...]:
    """The shape the stored tensor has in the diffusers layout (the expected one whenever
    the stored shape agrees with it, so check_shapes reports real disagreements)."""
    if where.rows:
        r0, r1 = where.rows
        return (r1 - r0,) + stored[1:] if stored and stored[0] >= r1 else stored
    if where.transposed:
        return tuple(reversed(stored))
    if where.conv1x1 and stored == tuple(expected) + (1, 1):
        return tuple(expected)
    return stored


# -- what is this file? -------------------------------------------------------------

SDXL_KEYS = {
    "unet": UNET_PREFIX + "label_emb.0.0.weight",
    "text_encoder": sgm_keys.CLIP_L_PREFIX + "text_model.embeddings.token_embedding.weight",
    "text_encoder_2": sgm_keys.OPEN_CLIP_PREFIX + "token_embedding.weight",
    "vae": VAE_PREFIX + "decoder.conv_in.weight",
}


def identify(shapes: Shapes, path: Path) -> None:
    """Accept an SDXL base-architecture single-file model; otherwise say what the file is."""
    names = list(shapes)
    has = lambda prefix: any(n.startswith(prefix) for n in names)  # noqa: E731
    if any(".lora_down." in n or ".lora_A." in n or n.startswith("lora_unet_") or ".hada_w1" in n for n in names):
        raise ModelFileError(f"{path}: this is a LoRA (a style or subject add-on), not a model. Import the base "
                             "model and add the LoRA with --lora FILE[:WEIGHT]")
    if has("cond_stage_model.transformer."):
        found = "Stable Diffusion 1.x (one CLIP ViT-L text encoder under cond_stage_model.transformer)"
    elif has("cond_stage_model.model."):
        found = "Stable Diffusion 2.x (an OpenCLIP ViT-H text encoder under cond_stage_model.model)"
    elif has("conditioner.embedders.0.model.") and not has("conditioner.embedders.1."):
        found = ("the SDXL refiner (one OpenCLIP text encoder, conditioner.embedders.0.model). The refiner only "
                 "polishes the base model's pictures and cannot draw from a prompt alone")
    elif any("double_blocks." in n for n in names):
        found = "a Flux model (double_blocks.*)"
    elif any("joint_blocks." in n for n in names):
        found = "a Stable Diffusion 3 model (joint_blocks.*)"
    elif has(UNET_PREFIX) and not has("conditioner.") and not has(VAE_PREFIX):
        kind = "an SDXL" if UNET_PREFIX + "label_emb.0.0.weight" in shapes else "a Stable Diffusion 1.x/2.x"
        found = (f"{kind} UNet alone (model.diffusion_model.*, no text encoders or VAE). slowframe imports whole "
                 "single-file models; get the full .safetensors of this model")
    elif "down_blocks.0.resnets.0.conv1.weight" in shapes or "conv_in.weight" in shapes:
        found = ("one component of a diffusers model (names like down_blocks.0...). Import the whole diffusers "
                 "folder instead: the one holding model_index.json")
    elif has("encoder.down.0.") or has("decoder.up.0.") or (has(VAE_PREFIX) and not has(UNET_PREFIX)):
        found = "a VAE alone. Use it with --vae FILE when importing a model"
    else:
        missing = [c for c, key in SDXL_KEYS.items() if key not in shapes]
        if not missing:
            return
        if len(missing) < len(SDXL_KEYS):
            raise ModelFileError(
                f"{path}: an SDXL single-file model without its {', '.join(missing)} (no '{SDXL_KEYS[missing[0]]}'). "
                "slowframe needs the UNet, both text encoders and the VAE in one file; get the full single-file model")
        sample = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        found = f"not a Stable Diffusion model slowframe knows ({len(names)} tensors: {sample})"
    raise ModelFileError(f"{path}: this is {found}. slowframe runs SDXL 1.0-architecture models (SDXL base, "
                         "SDXL-Turbo and their fine-tunes)")


# -- configs from shapes ---------------------------------------------------------------

def derive_configs(shapes: Shapes, path: Path) -> dict[str, dict]:
    """diffusers/transformers config.json contents for the four components."""
    te1 = _clip_l_config(under(shapes, sgm_keys.CLIP_L_PREFIX + "text_model."), path)
    te2 = _open_clip_config(under(shapes, sgm_keys.OPEN_CLIP_PREFIX), path)
    unet = _unet_config(under(shapes, UNET_PREFIX), te2["projection_dim"], path)
    vae = vae_config_from_shapes(under(shapes, VAE_PREFIX), path)
    if unet["cross_attention_dim"] != te1["hidden_size"] + te2["hidden_size"]:
        raise ModelFileError(f"{path}: the UNet attends to {unet['cross_attention_dim']}-wide text embeddings but "
                             f"the text encoders give {te1['hidden_size']} + {te2['hidden_size']}; the file mixes "
                             "parts of different models")
    if vae["latent_channels"] != unet["in_channels"]:
        raise ModelFileError(f"{path}: the VAE has {vae['latent_channels']} latent channels but the UNet takes "
                             f"{unet['in_channels']}")
    return {"unet": unet, "vae": vae, "text_encoder": te1, "text_encoder_2": te2}


def configs_from_dir(folder: Path) -> dict[str, dict]:
    """Configs from a diffusers folder (`--config DIR`), for models that differ from SDXL's conventions."""
    configs = {}
    for component, name in (("unet", "config.json"), ("vae", "config.json"), ("text_encoder", "config.json"),
                            ("text_encoder_2", "config.json")):
        path = Path(folder) / component / name
        try:
            configs[component] = json.loads(path.read_text())
        except OSError as e:
            raise ModelFileError(f"{path}: cannot read ({e.strerror}); --config needs a diffusers model folder "
                                 "with unet/, vae/, text_encoder/ and text_encoder_2/ config files") from None
        except ValueError as e:
            raise ModelFileError(f"{path}: not valid JSON ({e})") from None
    return configs


def under(shapes: Shapes, prefix: str) -> Shapes:
    return {n[len(prefix):]: s for n, s in shapes.items() if n.startswith(prefix)}


def _need(shapes: Shapes, key: str, prefix: str, path: Path, ndim: int | None = None) -> tuple[int, ...]:
    shape = shapes.get(key)
    if shape is None:
        raise ModelFileError(f"{path}: tensor '{prefix}{key}' is missing; the file is incomplete or not "
                             "SDXL-architecture")
    if ndim is not None and len(shape) != ndim:
        raise ModelFileError(f"{path}: tensor '{prefix}{key}' has shape {list(shape)}, expected {ndim} dimensions")
    return shape


def _count(names, pattern: str) -> int:
    """How many consecutive i have `pattern.format(i)` in `names`."""
    n = 0
    while pattern.format(n) in names:
        n += 1
    return n


def _unet_config(s: Shapes, pooled_dim: int, path: Path) -> dict:
    p = UNET_PREFIX
    c0, in_channels = _need(s, "input_blocks.0.0.weight", p, path, 4)[:2]
    if in_channels != 4:
        raise ModelFileError(f"{path}: the UNet takes {in_channels} input channels ('{p}input_blocks.0.0.weight'); "
                             "this is an inpainting or image-conditioned model. slowframe generates from text only")
    modules = _modules(s)
    levels: list[dict] = [dict(resnets=[])]
    n = 1
    while f"input_blocks.{n}" in modules:
        if f"input_blocks.{n}.0.op" in modules:
            levels.append(dict(resnets=[]))
        else:
            levels[-1]["resnets"].append(_unet_block(s, modules, f"input_blocks.{n}", path))
        n += 1
    if not levels[-1]["resnets"]:
        raise ModelFileError(f"{path}: the UNet's last level has no resnets ('{p}input_blocks.{n - 1}')")
    channels, layers, attention, depth = [], [], [], []
    for i, level in enumerate(levels):
        blocks = level["resnets"]
        if len({(b["channels"], b["depth"]) for b in blocks}) != 1:
            raise ModelFileError(f"{path}: UNet level {i} mixes resnet widths {[b['channels'] for b in blocks]} or "
                                 f"transformer depths {[b['depth'] for b in blocks]}; not an SDXL-architecture UNet")
        channels.append(blocks[0]["channels"])
        layers.append(len(blocks))
        attention.append(blocks[0]["depth"] > 0)
        depth.append(blocks[0]["depth"] or 1)
    up_attention = []
    first = 0
    for i in reversed(range(len(levels))):
        blocks = [_unet_block(s, modules, f"output_blocks.{first + j}", path) for j in range(layers[i] + 1)]
        if any(b["depth"] != (depth[i] if attention[i] else 0) or b["channels"] != channels[i] for b in blocks):
            raise ModelFileError(f"{path}: the UNet's up blocks do not mirror its down blocks at level {i} "
                                 "(a distilled or pruned SDXL variant?); slowframe supports the SDXL 1.0 layout")
        up_attention.append(attention[i])
        first += layers[i] + 1
    if f"output_blocks.{first}" in modules:
        raise ModelFileError(f"{path}: unexpected tensors '{p}output_blocks.{first}.*': more up blocks than down "
                             "blocks")
    mid = _count(modules, "middle_block.1.transformer_blocks.{}")
    if mid != depth[-1]:
        raise ModelFileError(f"{path}: the UNet's middle block has {mid} transformer blocks but its deepest level has "
                             f"{depth[-1]}; not an SDXL-architecture UNet")
    attn = next((f"input_blocks.{n}.1" for n in range(1, n) if f"input_blocks.{n}.1.proj_in.weight" in s), None)
    if attn is None:
        raise ModelFileError(f"{path}: the UNet has no cross-attention blocks ('{p}input_blocks.*.1'); not an "
                             "SDXL-architecture UNet")
    if len(s[f"{attn}.proj_in.weight"]) != 2:
        raise ModelFileError(f"{path}: '{p}{attn}.proj_in.weight' is a convolution; SDXL uses linear projections "
                             "(this looks like a Stable Diffusion 1.x/2.0 UNet)")
    cross = _need(s, f"{attn}.transformer_blocks.0.attn2.to_k.weight", p, path, 2)[1]
    temb, adm = _need(s, "label_emb.0.0.weight", p, path, 2)
    time_embed = _need(s, "time_embed.0.weight", p, path, 2)
    if time_embed != (temb, c0):
        raise ModelFileError(f"{path}: '{p}time_embed.0.weight' has shape {list(time_embed)}, expected {[temb, c0]}")
    time_ids = adm - pooled_dim
    if time_ids <= 0 or time_ids % 6:
        raise ModelFileError(f"{path}: '{p}label_emb.0.0.weight' takes {adm} inputs, which is not the pooled text "
                             f"embedding ({pooled_dim}) plus six size/crop embeddings")
    for c, has_attention in zip(channels, attention):
        if has_attention and c % HEAD_CHANNELS:
            raise ModelFileError(f"{path}: a {c}-channel attention level cannot have {HEAD_CHANNELS}-channel heads; "
                                 "import with --config DIR pointing at this model's diffusers configs")
    return {
        "_class_name": "UNet2DConditionModel",
        "act_fn": "silu",
        "addition_embed_type": "text_time",
        "addition_embed_type_num_heads": 64,
        "addition_time_embed_dim": time_ids // 6,
        "attention_head_dim": [max(1, c // HEAD_CHANNELS) for c in channels],
        "block_out_channels": channels,
        "center_input_sample": False,
        "cross_attention_dim": cross,
        "down_block_types": ["CrossAttnDownBlock2D" if a else "DownBlock2D" for a in attention],
        "downsample_padding": 1,
        "flip_sin_to_cos": True,
        "freq_shift": 0,
        "in_channels": in_channels,
        "layers_per_block": layers[0] if len(set(layers)) == 1 else layers,
        "mid_block_type": "UNetMidBlock2DCrossAttn",
        "norm_eps": 1e-05,
        "norm_num_groups": 32,
        "out_channels": _need(s, "out.2.weight", p, path, 4)[0],
        "projection_class_embeddings_input_dim": adm,
        "sample_size": SDXL_SAMPLE_SIZE // 8,
        "transformer_layers_per_block": depth,
        "up_block_types": ["CrossAttnUpBlock2D" if a else "UpBlock2D" for a in up_attention],
        "use_linear_projection": True,
    }


def _unet_block(s: Shapes, modules: set[str], block: str, path: Path) -> dict:
    """Width and transformer depth (0: none) of one SGM resnet(+attention) block."""
    channels = _need(s, f"{block}.0.out_layers.3.weight", UNET_PREFIX, path, 4)[0]
    depth = _count(modules, block + ".1.transformer_blocks.{}")
    return dict(channels=channels, depth=depth)


def _modules(s: Shapes) -> set[str]:
    """Every module path that has tensors under it ('a', 'a.b', ... of each 'a.b.c.weight')."""
    paths = set()
    for key in s:
        parts = key.split(".")
        paths.update(".".join(parts[:i]) for i in range(1, len(parts)))
    return paths


def vae_config_from_shapes(s: Shapes, path: Path) -> dict:
    p = VAE_PREFIX
    modules = _modules(s)
    levels = _count(modules, "decoder.up.{}")
    if levels == 0:
        _need(s, "decoder.up.0.block.0.conv1.weight", p, path)
    channels = [_need(s, f"decoder.up.{i}.block.0.conv2.weight", p, path, 4)[0] for i in range(levels)]
    layers = _count(modules, "decoder.up.0.block.{}") - 1
    if layers < 1:
        raise ModelFileError(f"{path}: the VAE decoder's up blocks have too few resnets ('{p}decoder.up.0.block.*')")
    return {
        "_class_name": "AutoencoderKL",
        "act_fn": "silu",
        "block_out_channels": channels,
        "down_block_types": ["DownEncoderBlock2D"] * levels,
        "force_upcast": True,
        "in_channels": _need(s, "encoder.conv_in.weight", p, path, 4)[1],
        "latent_channels": _need(s, "decoder.conv_in.weight", p, path, 4)[1],
        "layers_per_block": layers,
        "norm_num_groups": 32,
        "out_channels": _need(s, "decoder.conv_out.weight", p, path, 4)[0],
        "sample_size": SDXL_SAMPLE_SIZE,
        "scaling_factor": SDXL_VAE_SCALING,
        "up_block_types": ["UpDecoderBlock2D"] * levels,
    }


# Both SDXL text encoders' configs carry CLIP's original special-token ids (EOS 2: the
# pooled output is taken at the largest token id, which is EOS).
CLIP_TOKEN_IDS = {"bos_token_id": 0, "eos_token_id": 2, "pad_token_id": 1}


def _clip_config(arch: str, act: str, vocab: int, hidden: int, positions: int, layers: int, inner: int,
                 projection: int, path: Path, where: str) -> dict:
    if hidden % HEAD_CHANNELS:
        raise ModelFileError(f"{path}: the {where} text encoder is {hidden} wide, not a multiple of "
                             f"{HEAD_CHANNELS}-channel heads; import with --config DIR")
    if layers < 2:
        raise ModelFileError(f"{path}: the {where} text encoder has {layers} layers; SDXL reads the "
                             "second-to-last one, so at least 2 are needed")
    return {
        "architectures": [arch],
        "attention_dropout": 0.0,
        **CLIP_TOKEN_IDS,
        "dropout": 0.0,
        "hidden_act": act,
        "hidden_size": hidden,
        "initializer_factor": 1.0,
        "initializer_range": 0.02,
        "intermediate_size": inner,
        "layer_norm_eps": 1e-05,
        "max_position_embeddings": positions,
        "model_type": "clip_text_model",
        "num_attention_heads": hidden // HEAD_CHANNELS,
        "num_hidden_layers": layers,
        "projection_dim": projection,
        "vocab_size": vocab,
    }


def _clip_l_config(s: Shapes, path: Path) -> dict:
    p = sgm_keys.CLIP_L_PREFIX + "text_model."
    vocab, hidden = _need(s, "embeddings.token_embedding.weight", p, path, 2)
    positions = _need(s, "embeddings.position_embedding.weight", p, path, 2)[0]
    layers = _count(_modules(s), "encoder.layers.{}")
    inner = _need(s, "encoder.layers.0.mlp.fc1.weight", p, path, 2)[0]
    return _clip_config("CLIPTextModel", "quick_gelu", vocab, hidden, positions, layers, inner, hidden, path,
                        "first (CLIP ViT-L)")


def _open_clip_config(s: Shapes, path: Path) -> dict:
    p = sgm_keys.OPEN_CLIP_PREFIX
    vocab, hidden = _need(s, "token_embedding.weight", p, path, 2)
    positions = _need(s, "positional_embedding", p, path, 2)[0]
    layers = _count(_modules(s), "transformer.resblocks.{}")
    inner = _need(s, "transformer.resblocks.0.mlp.c_fc.weight", p, path, 2)[0]
    projection = _need(s, "text_projection", p, path, 2)
    if projection[0] != hidden:
        raise ModelFileError(f"{path}: '{p}text_projection' has shape {list(projection)}; expected {hidden} rows "
                             "(the encoder's width)")
    return _clip_config("CLIPTextModelWithProjection", "gelu", vocab, hidden, positions, layers, inner,
                        projection[1], path, "second (OpenCLIP ViT-bigG)")
