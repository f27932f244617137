"""uint8 weights: `slowframe models quantize SRC DST`.

Every weight matrix / conv kernel becomes uint8 with one scale and zero point per
output channel (asymmetric: the row's range, widened to include 0, maps onto 0..255
with a whole-number zero point), stored beside it in the same file as
`<name>.q_scale` and `<name>.q_zero` (F32). Norms, biases and small tensors keep
their dtype. Tensors are processed one at a time
(memory: the largest tensor in fp32) and written in the model's execution order so
the Pi reads the file front to back. The result appears atomically: it is written
to a hidden temporary folder next to DST and renamed when complete.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.atomic import atomic_folder
from engine.errors import ModelFileError
from engine.safetensors import SafetensorsWriter, read_raw
from engine.weights import Q_SCALE, Q_ZERO, TensorStore, find_weight_files, read_config

MIN_QUANTIZED_ELEMENTS = 4096
OUTPUT_NAME = "diffusion_pytorch_model.safetensors"
FORMAT = "uint8-per-output-channel-asymmetric"


@dataclass
class QuantizeReport:
    tensors: int
    quantized: int
    bytes_in: int
    bytes_out: int
    seconds: float


def quantize_rows(w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(q uint8 (R, K), scale (R,), zero (R,)) with w ~= (q - zero) * scale per row; the
    zero point is a whole number so the row's range [min(w, 0), max(w, 0)] fits exactly."""
    rows = w.reshape(w.shape[0], -1)
    lo = np.minimum(rows.min(axis=1), 0)
    hi = np.maximum(rows.max(axis=1), 0)
    scale = ((hi - lo) / np.float32(255)).astype(np.float32)
    scale[scale == 0] = 1.0
    zero = np.clip(np.rint(-lo / scale), 0, 255).astype(np.float32)
    q = np.empty(rows.shape, dtype=np.uint8)
    step = max(1, (1 << 20) // rows.shape[1])
    for r0 in range(0, rows.shape[0], step):
        block = rows[r0:r0 + step] / scale[r0:r0 + step, None]
        np.rint(block, out=block)
        block += zero[r0:r0 + step, None]
        np.clip(block, 0, 255, out=block)
        q[r0:r0 + step] = block
    return q.reshape(w.shape), scale, zero


def should_quantize(shape: tuple[int, ...]) -> bool:
    return len(shape) >= 2 and int(np.prod(shape)) >= MIN_QUANTIZED_ELEMENTS


def quantize_folder(src: str | Path, dst: str | Path, log=print) -> QuantizeReport:
    """Quantize a component folder (e.g. unet/), or a model root's unet/ copying the rest."""
    src, dst = Path(src), Path(dst)
    if not src.is_dir():
        raise ModelFileError(f"{src}: no such folder")
    if dst.exists():
        raise ModelFileError(f"{dst}: already exists; give a new folder name (nothing was changed)")
    if not dst.parent.is_dir():
        raise ModelFileError(f"{dst.parent}: no such folder to create {dst.name} in")
    with atomic_folder(dst, durable=True) as tmp:
        if (src / "model_index.json").is_file():
            return _quantize_root(src, tmp, log)
        return _quantize_component(src, tmp, log)


def _quantize_root(src: Path, out: Path, log) -> QuantizeReport:
    if not (src / "unet").is_dir():
        raise ModelFileError(f"{src}: model_index.json but no unet/ folder")
    total = None
    for entry in sorted(src.iterdir()):
        if entry.name == "unet":
            (out / "unet").mkdir()
            total = _quantize_component(entry, out / "unet", log)
        elif entry.is_dir():
            log(f"copying {entry.name}/ unchanged")
            shutil.copytree(entry, out / entry.name)
        else:
            shutil.copy2(entry, out / entry.name)
    return total


def _quantize_component(src: Path, out: Path, log) -> QuantizeReport:
    started = time.monotonic()
    config = read_config(src)
    files = find_weight_files(src)
    tensors = TensorStore(files)
    if any(n.endswith(Q_SCALE) for n in tensors.tensors):
        raise ModelFileError(f"{src}: this model is already quantized")
    names = _write_order(tensors, config, src)
    entries = []
    for name in names:
        info = tensors.tensors[name]
        if should_quantize(info.shape):
            entries += [(name, "U8", info.shape), (name + Q_SCALE, "F32", info.shape[:1]),
                        (name + Q_ZERO, "F32", info.shape[:1])]
        else:
            entries.append((name, info.dtype, info.shape))
    metadata = {"format": "pt", "slowframe_quantization": FORMAT, "source": str(src.resolve())}
    path = out / OUTPUT_NAME
    quantized = 0
    with open(path, "wb") as f:
        writer = SafetensorsWriter(f, entries, metadata)
        for i, name in enumerate(names):
            info = tensors.tensors[name]
            if should_quantize(info.shape):
                q, scale, zero = quantize_rows(tensors.read(name))
                writer.write(name, q)
                writer.write(name + Q_SCALE, scale)
                writer.write(name + Q_ZERO, zero)
                quantized += 1
            else:
                writer.write(name, read_raw(tensors.tensors[name]))
            if (i + 1) % 200 == 0:
                log(f"  {i + 1}/{len(names)} tensors")
        writer.close()
        f.flush()
        os.fsync(f.fileno())
    config_out = dict(config, _slowframe_quantization=FORMAT)
    (out / "config.json").write_text(json.dumps(config_out, indent=2) + "\n")
    bytes_in = sum(p.stat().st_size for p in files)
    tensors.close()
    return QuantizeReport(len(names), quantized, bytes_in, path.stat().st_size, time.monotonic() - started)


def _write_order(tensors: TensorStore, config: dict, src: Path) -> list[str]:
    """Tensor names in the order a UNet evaluation reads them (others after, as stored)."""
    order: list[str] = []
    if config.get("_class_name") == "UNet2DConditionModel":
        from engine.options import Options
        from engine.sdxl.unet import UNet
        from engine.sdxl.unet_config import param_shapes, parse_config
        cfg = parse_config(config, src / "config.json")
        tensors.check(param_shapes(cfg))
        unet = UNet(tensors, cfg, Options(weights="nocache"))
        for group in unet.plans[False]:
            order += [n for n in group if n not in order]
    seen = set(order)
    return order + [n for n in tensors.tensors if n not in seen]

