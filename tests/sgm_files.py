"""SDXL's single-file SGM model format for tests: its tensor list, a writer, and diffusers' reader.

`sgm_entries(configs)` lists every SGM tensor of a model with its shape and the
diffusers tensors it is made of, without torch: bench/models_import.py uses it to write
a full-size random single-file model. `write_sgm(folder, path)` writes a diffusers folder's
weights under their original SGM names (the inverse of diffusers' single-file mapping),
with the buffers real files carry; `load_single_file` reads such a file with diffusers'
own `from_single_file`, which cross-checks the writer.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from engine.convert import sgm_keys
from engine.convert.layout import COMPONENTS, expected_shapes
from engine.safetensors import SafetensorsWriter, read_header, read_raw
from engine.sdxl.unet_config import parse_config


Part = tuple[str, str]   # (component, diffusers tensor name)


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


# Buffers real SDXL single-file models carry beside the weights (the importer ignores them).
BUFFERS = {
    sgm_keys.CLIP_L_PREFIX + "text_model.embeddings.position_ids": ("I64", (1, 77)),
    sgm_keys.OPEN_CLIP_PREFIX + "logit_scale": ("F32", ()),
}


def write_sgm(folder: Path, path: Path) -> Path:
    """The diffusers folder's fp16 weights, bit for bit, as one SGM single-file model."""
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
