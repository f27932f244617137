"""Checking model folders and listing them: `slowframe models verify DEST`, `slowframe models list [DIR]`.

verify recomputes the sha256 of every file the manifest lists and checks every weight
file tensor by tensor against its component's config.json: names, shapes, dtypes, the
scale and zero point of uint8 weights, and nothing extra. list reads only manifests.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from engine.convert import manifest as mf
from engine.convert.layout import COMPONENTS, WEIGHT_FILES, expected_shapes
from engine.convert.tiny_vae import FOLDER as TINY_VAE, WEIGHTS as TINY_WEIGHTS, check_tiny_vae
from engine.errors import ModelFileError
from engine.safetensors import PICKLE_SUFFIXES
from engine.weights import Q_SCALE, Q_ZERO, TensorStore, read_config

PARTIAL_SUFFIX = ".partial"


@dataclass
class VerifyReport:
    files: int
    bytes: int
    tensors: int


def verify_model(root: str | Path, log=print) -> VerifyReport:
    """Raise ModelFileError naming the first file or tensor that is wrong."""
    root = Path(root)
    manifest = mf.read_manifest(root)
    listed = manifest["files"]
    for component in COMPONENTS:
        rel = f"{component}/{WEIGHT_FILES[component]}"
        if rel not in listed:
            raise ModelFileError(f"{root / mf.MANIFEST}: lists no {rel}; import the model again")
    total = 0
    for rel, record in sorted(listed.items()):
        path = root / rel
        if not path.is_file():
            raise ModelFileError(f"{path}: missing (the manifest lists it); copy the model folder again")
        size = path.stat().st_size
        if size != record["bytes"]:
            raise ModelFileError(f"{path}: {size} bytes, the manifest says {record['bytes']}; the file is truncated "
                                 "or was changed: copy the model folder again")
        if size > 64 << 20:
            log(f"  hashing {rel} ({size / 1e9:.2f} GB)")
        if mf.sha256_file(path) != record["sha256"]:
            raise ModelFileError(f"{path}: sha256 differs from the manifest; the file is damaged (failing SD card?) "
                                 "or was changed: copy the model folder again")
        total += size
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and rel not in listed and path.suffix in (".safetensors", *PICKLE_SUFFIXES):
            raise ModelFileError(f"{path}: a weight file the import did not write; remove it")
    tensors = 0
    for component in COMPONENTS:
        tensors += check_component(root / component, component)
    if f"{TINY_VAE}/{TINY_WEIGHTS}" in listed:
        tensors += check_tiny_vae(root)
    return VerifyReport(len(listed), total, tensors)


def check_component(folder: Path, component: str) -> int:
    """Every tensor the config implies, with its shape and dtype, and no others; returns the count."""
    config = read_config(folder)
    store = TensorStore([folder / WEIGHT_FILES[component]])
    try:
        expected = expected_shapes(component, config, folder / "config.json", store)
        store.check(expected)
        allowed = set(expected) | {n + s for n in expected for s in (Q_SCALE, Q_ZERO) if n + s in store}
        extra = [n for n in store.tensors if n not in allowed]
        if extra:
            raise ModelFileError(f"{folder / WEIGHT_FILES[component]}: unexpected tensor '{extra[0]}' (not in an "
                                 f"SDXL {component} with this config.json); import the model again")
        return len(store.tensors)
    finally:
        store.close()


@dataclass
class ModelEntry:
    name: str
    path: Path
    bytes: int
    precision: str
    source: str
    status: str           # "ok", or why it cannot be used


def list_models(folder: str | Path) -> list[ModelEntry]:
    """The model folders in `folder` (from their manifests; nothing is hashed)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelFileError(f"{folder}: no such folder")
    entries = []
    for path in sorted(folder.iterdir()):
        if not path.is_dir():
            continue
        size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
        if path.name.startswith(".") and path.name.endswith(PARTIAL_SUFFIX):
            name = path.name[1:-len(PARTIAL_SUFFIX)]
            entries.append(ModelEntry(name, path, size, "-", "-", "unfinished import: run the same "
                                      "`slowframe models import` again to finish it"))
            continue
        if path.name.startswith("."):
            continue
        try:
            manifest = mf.read_manifest(path)
        except ModelFileError:
            if (path / "model_index.json").is_file():
                entries.append(ModelEntry(path.name, path, size, "-", "-", "diffusers folder, not imported"))
            continue
        source = os.path.basename(str(manifest.get("source", {}).get("path", "?")))
        loras = manifest.get("loras") or []
        if loras:
            source += " + " + ", ".join(f"{os.path.basename(l['path'])}:{l['weight']:g}" for l in loras)
        entries.append(ModelEntry(path.name, path, size, str(manifest.get("precision", "?")), source, "ok"))
    return entries
