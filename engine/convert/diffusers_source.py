"""A diffusers SDXL folder (stabilityai/stable-diffusion-xl-base-1.0, sdxl-turbo, ...) as
import components, and a replacement VAE given with --vae (a diffusers vae/ folder or a
single VAE file in either naming).

Weights may be fp32, fp16 or bf16, `.fp16` variants (preferred when both exist) or
sharded with an index. Older spellings are brought to the current ones: text encoder
names without transformers' "text_model." prefix, and the VAE attention's
query/key/value/proj_attn (sometimes stored as 1x1 convolution kernels).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from engine.convert import sgm_keys
from engine.convert.headers import check_unique_names
from engine.convert.layout import TEXT_PREFIX, expected_shapes
from engine.convert.sgm_source import map_component, under, vae_config_from_shapes
from engine.convert.source import IGNORED_SUFFIXES, ComponentSource, ModelSource, SourceTensor, check_shapes
from engine.errors import ModelFileError
from engine.safetensors import refuse_pickle
from engine.sdxl.tokenizer import ClipTokenizer
from engine.weights import TensorStore, find_weight_files, read_config

STEMS = {"unet": "diffusion_pytorch_model", "vae": "diffusion_pytorch_model", "text_encoder": "model",
         "text_encoder_2": "model"}
COPIED = ("tokenizer", "tokenizer_2", "scheduler")
OLD_VAE_ATTENTION = {"query": "to_q", "key": "to_k", "value": "to_v", "proj_attn": "to_out.0"}


def open_diffusers(root: Path, find: Callable[[Path, str], list[Path]] = find_weight_files) -> ModelSource:
    """Read a diffusers folder's configs and weight headers; nothing else is read.

    `find(folder, stem)` names a component's weight files (a download names them while they
    still arrive under other names)."""
    index_path = root / "model_index.json"
    if not index_path.is_file():
        if (root / "config.json").is_file():
            raise ModelFileError(f"{root}: this is one component of a model (it has a config.json); pass the model "
                                 "folder that holds model_index.json, unet/, vae/ and the text encoders")
        raise ModelFileError(f"{root}: no model_index.json; expected a diffusers model folder (unet/, vae/, "
                             "text_encoder/, text_encoder_2/, ...) or a single-file .safetensors model")
    index = _read_json(index_path)
    kind = index.get("_class_name", "?")
    if not str(kind).startswith("StableDiffusionXL"):
        raise ModelFileError(f"{index_path}: this is a {kind} model. slowframe runs SDXL 1.0-architecture models "
                             "(StableDiffusionXLPipeline: SDXL base, SDXL-Turbo and their fine-tunes)")
    # A component is there when its folder is; model_index.json's [null, null] says it is left out on purpose.
    # Its other entries are not required: slowframe's demo model and hand-made folders list none.
    missing = [c for c in STEMS if not (root / c).is_dir() or index.get(c) == [None, None]]
    if missing:
        refiner = "text_encoder" in missing and "text_encoder_2" not in missing
        why = (" It looks like the SDXL refiner, which only polishes the base model's pictures and cannot draw "
               "from a prompt alone." if refiner else "")
        raise ModelFileError(f"{root}: missing {', '.join(f'{c}/' for c in missing)}; slowframe needs the UNet, "
                             f"both text encoders and the VAE.{why}")
    source = ModelSource("diffusers", root, {}, index_files=[index_path])
    try:
        for component in ("text_encoder", "text_encoder_2", "unet", "vae"):
            source.components[component] = _open_component(root / component, component, source, find)
        for name in COPIED:
            if (root / name).is_dir():
                source.copied[name] = root / name
        for name in ("tokenizer", "tokenizer_2"):
            if name in source.copied:
                ClipTokenizer.from_folder(root / name)   # unreadable files are named now, not on the frame
        if "force_zeros_for_empty_prompt" in index:
            source.pipeline["force_zeros_for_empty_prompt"] = bool(index["force_zeros_for_empty_prompt"])
        return source
    except BaseException:
        source.close()
        raise


def open_vae(path: Path, source: ModelSource) -> ComponentSource:
    """The VAE given with --vae: a diffusers vae/ folder, or one .safetensors file with
    the original (SGM/ldm) names, with or without the first_stage_model. prefix."""
    path = Path(path)
    if path.is_dir():
        if not (path / "config.json").is_file() and (path / "vae" / "config.json").is_file():
            path = path / "vae"
        return _open_component(path, "vae", source)
    refuse_pickle(path)
    if not path.is_file():
        raise ModelFileError(f"{path}: no such file or folder (--vae)")
    check_unique_names(path)
    store = TensorStore([path])
    source.stores.append(store)
    names = list(store.tensors)
    if "decoder.conv_in.weight" in store.tensors and any(".up_blocks." in n for n in names):
        if (path.parent / "config.json").is_file():
            return _open_component(path.parent, "vae", source)
        raise ModelFileError(f"{path}: a diffusers-format VAE file needs its config.json beside it; pass the folder "
                             "it came in (e.g. .../vae) to --vae")
    prefix = next((p for p in (sgm_keys.VAE_PREFIX, "vae.", "") if p + "decoder.conv_in.weight" in store.tensors), None)
    if prefix is None:
        raise ModelFileError(f"{path}: not a VAE (no decoder.conv_in.weight under first_stage_model., vae. or at the "
                             f"top level; found e.g. '{names[0] if names else 'nothing'}')")
    shapes = {n: info.shape for n, info in store.tensors.items()}
    config = vae_config_from_shapes(under(shapes, prefix), path)
    return map_component("vae", config, store, path, prefix)


def _open_component(folder: Path, component: str, source: ModelSource,
                    find: Callable[[Path, str], list[Path]] = find_weight_files) -> ComponentSource:
    config = read_config(folder)
    files = find(folder, STEMS[component])
    for path in files:
        check_unique_names(path)
    store = TensorStore(files)
    source.stores.append(store)
    if any(n.endswith((".q_scale", ".q_zero")) for n in store.tensors):
        raise ModelFileError(f"{folder}: these weights are already converted by slowframe (uint8); import the "
                             "original model instead")
    expected = expected_shapes(component, config, folder / "config.json")
    tensors: dict[str, SourceTensor] = {}
    for key, info in store.tensors.items():
        if key.endswith(IGNORED_SUFFIXES):
            continue
        name = _current_name(component, key)
        if name in tensors:
            raise ModelFileError(f"{info.path}: tensors '{tensors[name].key}' and '{key}' are the same weight "
                                 f"({component} {name}); the file is not a clean export")
        shape = info.shape
        if name in expected and shape == tuple(expected[name]) + (1, 1):
            shape = tuple(expected[name])   # a linear weight stored as a 1x1 convolution kernel
        tensors[name] = SourceTensor(store, key, shape)
    result = ComponentSource(component, config, tensors, str(folder), [folder / "config.json", *files])
    check_shapes(result)
    return result


def _current_name(component: str, key: str) -> str:
    if component.startswith("text_encoder"):
        return key if key.startswith(TEXT_PREFIX) or key == "text_projection.weight" else TEXT_PREFIX + key
    if component == "vae" and ".mid_block.attentions.0." in key:
        head, _, tail = key.partition(".mid_block.attentions.0.")
        module, _, param = tail.rpartition(".")
        return f"{head}.mid_block.attentions.0.{OLD_VAE_ATTENTION.get(module, module)}.{param}"
    return key


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise ModelFileError(f"{path}: cannot read ({e.strerror})") from None
    except ValueError as e:
        raise ModelFileError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise ModelFileError(f"{path}: expected a JSON object")
    return data
