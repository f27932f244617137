"""`slowframe models import --tiny-vae SRC`: a tiny decoder (TAESDXL) copied into a model folder's vae_tiny/.

SRC is a diffusers AutoencoderTiny folder (madebyollin/taesdxl: config.json and
diffusion_pytorch_model[.fp16].safetensors) or the decoder alone as TAESD's own
repository ships it (taesdxl_decoder.safetensors: tensors named by position in its
nn.Sequential, one more than diffusers' index since a clamp comes first; the config is
then AutoencoderTiny's default, which is TAESDXL's). The decoder's tensors are written
as fp16 under diffusers' names with the config beside them; the encoder is left out
(nothing here encodes pictures). An imported model's manifest lists the new files, so
`models verify` checks them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine import kernels
from engine.atomic import atomic_folder, atomic_write
from engine.convert import manifest as mf
from engine.errors import ModelFileError
from engine.safetensors import SafetensorsWriter, refuse_pickle
from engine.sdxl.tiny_vae import TINY_VAE, tiny_vae_problem
from engine.sdxl.tiny_vae_config import CLASS_NAME, PREFIX, param_shapes, parse_config
from engine.weights import TensorStore, find_weight_files, read_config

FOLDER = TINY_VAE          # inside the model folder
WEIGHTS = "diffusion_pytorch_model.safetensors"
FP16_MAX = 65504.0
# AutoencoderTiny's defaults, which are TAESDXL's: the config of a bare decoder file.
DEFAULT_CONFIG = {"_class_name": CLASS_NAME, "act_fn": "relu", "decoder_block_out_channels": [64, 64, 64, 64],
                  "latent_channels": 4, "num_decoder_blocks": [3, 3, 3, 1], "out_channels": 3,
                  "scaling_factor": 1.0, "shift_factor": 0.0, "upsample_fn": "nearest",
                  "upsampling_scaling_factor": 2}


@dataclass
class TinyImport:
    folder: Path         # the model's vae_tiny/
    tensors: int
    bytes: int


def import_tiny_vae(src: str | Path, model: str | Path, log: Callable[[str], object] = print) -> TinyImport:
    """Check SRC is a tiny decoder of SDXL latents and write it to MODEL/vae_tiny/."""
    src, model = Path(src), Path(model)
    if not model.is_dir():
        raise ModelFileError(f"{model}: no such model folder to put the tiny decoder in")
    dest = model / FOLDER
    if dest.exists():
        raise ModelFileError(f"{dest}: the model has a tiny decoder already; remove that folder first to replace it")
    config, where, files, names = _open_source(src)
    cfg = parse_config(config, where)
    if cfg.latent_channels != 4:
        raise ModelFileError(f"{where}: a tiny decoder of {cfg.latent_channels}-channel latents (taesd3 or taef1?); "
                             "SDXL's latents have 4: use madebyollin/taesdxl")
    expected = param_shapes(cfg)
    store = TensorStore(files)
    try:
        stored = {ours: store.tensors[theirs] for theirs, ours in names.items() if theirs in store}
        missing = [n for n in expected if n not in stored]
        if missing:
            theirs = {ours: theirs for theirs, ours in names.items()}.get(missing[0], missing[0])
            raise ModelFileError(f"{', '.join(map(str, files))}: tensor '{theirs}' of the tiny decoder is missing "
                                 f"({len(missing)} of {len(expected)} missing); is this madebyollin/taesdxl?")
        for name, shape in expected.items():
            if stored[name].shape != shape:
                raise ModelFileError(f"{stored[name].path}: tensor '{stored[name].name}' has shape "
                                     f"{list(stored[name].shape)}, TAESDXL's decoder needs {list(shape)}")
        with atomic_folder(dest, durable=True) as tmp:
            (tmp / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
            with open(tmp / WEIGHTS, "wb") as f:
                writer = SafetensorsWriter(f, [(n, "F16", s) for n, s in expected.items()], {"format": "pt"})
                for name in expected:
                    writer.write(name, _fp16(store, stored[name].name))
                writer.close()
            problem = tiny_vae_problem(tmp)
            if problem is not None:
                raise ModelFileError(f"the converted tiny decoder does not load: {problem}")
    finally:
        store.close()
    size = sum(p.stat().st_size for p in dest.iterdir())
    _add_to_manifest(model, src, dest, log)
    log(f"tiny decoder {src} -> {dest} ({len(expected)} tensors, {size / 1e6:.1f} MB)")
    return TinyImport(dest, len(expected), size)


def _open_source(src: Path) -> tuple[dict, Path, list[Path], dict[str, str]]:
    """(config, where it comes from, weight files, {name in the files: diffusers name}) of a
    tiny decoder folder or file."""
    if src.is_dir():
        config = read_config(src)
        names = {n: n for n in param_shapes(parse_config(config, src / "config.json"))}
        return config, src / "config.json", find_weight_files(src), names
    if not src.is_file():
        raise ModelFileError(f"{src}: no such file or folder; expected a tiny decoder (madebyollin/taesdxl: its "
                             "folder with config.json and diffusion_pytorch_model.safetensors, or "
                             "taesdxl_decoder.safetensors)")
    refuse_pickle(src)
    if src.suffix.lower() != ".safetensors":
        raise ModelFileError(f"{src}: expected a .safetensors file or a diffusers folder")
    config = dict(DEFAULT_CONFIG)
    names = {}
    for ours in param_shapes(parse_config(config, src)):
        index, _, rest = ours[len(PREFIX) + 1:].partition(".")
        names[f"{int(index) + 1}.{rest}"] = ours
    return config, src, [src], names


def _fp16(store: TensorStore, name: str) -> np.ndarray:
    """A tensor as fp16 bits, refusing values fp16 cannot hold."""
    w = store.read(name)
    if not np.isfinite(w).all() or (w.size and np.abs(w).max() > FP16_MAX):
        raise ModelFileError(f"{store.tensors[name].path}: tensor '{name}' has values that are not finite or beyond "
                             f"fp16's range; the file is damaged")
    return kernels.f32_to_f16(w, np.empty(w.shape, dtype=np.uint16))


def _add_to_manifest(model: Path, src: Path, dest: Path, log: Callable[[str], object]) -> None:
    """List the new files in an imported model's manifest (a plain diffusers folder has none)."""
    if not (model / mf.MANIFEST).is_file():
        log(f"{model} has no {mf.MANIFEST} (not made by `slowframe models import`): vae_tiny/ is not recorded")
        return
    manifest = mf.read_manifest(model)
    for path in sorted(dest.iterdir()):
        manifest["files"][f"{FOLDER}/{path.name}"] = mf.file_record(path)
    manifest["tiny_vae"] = {"path": str(src)}
    with atomic_write(model / mf.MANIFEST, "w", durable=True) as f:
        f.write(json.dumps(manifest, indent=2) + "\n")


def check_tiny_vae(model: Path) -> int:
    """`models verify`: a model's vae_tiny/ holds exactly the tiny decoder's tensors; returns their count."""
    folder = model / FOLDER
    config = read_config(folder)
    expected = param_shapes(parse_config(config, folder / "config.json"))
    store = TensorStore([folder / WEIGHTS])
    try:
        store.check(expected)
        extra = [n for n in store.tensors if n not in expected]
        if extra:
            raise ModelFileError(f"{folder / WEIGHTS}: unexpected tensor '{extra[0]}'; import the tiny decoder again")
        return len(store.tensors)
    finally:
        store.close()
