"""The model being imported, as diffusers components whose tensors are still in the
source files: each SourceTensor knows its file, its name there, and how its rows map
(a band of a fused tensor, a transposed one), and reads rows as fp32 on demand.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.convert.layout import expected_shapes
from engine.errors import ModelFileError
from engine.safetensors import TensorInfo
from engine.weights import TensorStore

# Buffers some files carry beside the weights; no model reads them.
IGNORED_SUFFIXES = ("position_ids", "logit_scale")


@dataclass(frozen=True)
class SourceTensor:
    """One tensor of the imported model: `key` in `store`, seen in the diffusers layout."""

    store: TensorStore
    key: str
    shape: tuple[int, ...]
    rows: tuple[int, int] | None = None   # only these rows of the stored tensor
    transposed: bool = False              # stored as the transpose of `shape`

    @property
    def info(self) -> TensorInfo:
        return self.store.tensors[self.key]

    @property
    def copyable(self) -> bool:
        """Its stored bytes, row for row, are the output's (no transpose)."""
        return not self.transposed

    def read_rows(self, r0: int, r1: int) -> np.ndarray:
        """Rows r0:r1 in the diffusers layout, as fp32."""
        if self.transposed:
            return np.ascontiguousarray(self.store.read(self.key).T[r0:r1])
        base = self.rows[0] if self.rows else 0
        return self.store.read_rows(self.key, base + r0, base + r1).reshape((r1 - r0,) + self.shape[1:])

    def byte_range(self, r0: int, r1: int) -> tuple[int, int]:
        """File offset and length of rows r0:r1 as stored (copyable tensors only)."""
        info = self.info
        row_bytes = info.nbytes // max(1, info.shape[0] if info.shape else 1)
        base = self.rows[0] if self.rows else 0
        return info.offset + (base + r0) * row_bytes, (r1 - r0) * row_bytes


@dataclass
class ComponentSource:
    """One component (unet, vae, text_encoder, text_encoder_2): its config.json and tensors."""

    name: str
    config: dict
    tensors: dict[str, SourceTensor]
    origin: str          # where it comes from, for messages
    files: list[Path]    # the files it is read from


@dataclass
class ModelSource:
    """Everything an import reads."""

    kind: str                               # "sgm" (a single-file model) or "diffusers" (a folder)
    path: Path
    components: dict[str, ComponentSource]
    index_files: list[Path] = field(default_factory=list)  # read besides the components' (model_index.json)
    copied: dict[str, Path] = field(default_factory=dict)   # tokenizer/, scheduler/ ... taken as they are
    pipeline: dict = field(default_factory=dict)            # model_index.json settings to keep
    notes: list[str] = field(default_factory=list)          # what was ignored, for the log
    stores: list[TensorStore] = field(default_factory=list)

    def files(self, components=None) -> list[Path]:
        """The files the model (or these of its components) is read from, each once."""
        names = self.components if components is None else components
        paths = self.index_files + [p for c in names for p in self.components[c].files]
        return list(dict.fromkeys(paths))

    def close(self) -> None:
        for store in self.stores:
            store.close()


def check_shapes(component: ComponentSource, source_name: dict[str, str] | None = None) -> None:
    """Every tensor the component's config implies is there with its shape, and nothing else.

    `source_name` gives, for a diffusers name, the name in the source file (SGM keys),
    so messages name what the user's file holds."""
    expected = expected_shapes(component.name, component.config, f"{component.origin} (config)", component.tensors)

    def label(name: str) -> str:
        key = source_name.get(name, name) if source_name else name
        return f"'{key}'" + (f" ({component.name} {name})" if key != name else "")

    for name, shape in expected.items():
        tensor = component.tensors.get(name)
        if tensor is None:
            raise ModelFileError(f"{component.origin}: tensor {label(name)} is missing; the file is incomplete or "
                                 "is not a standard SDXL model")
        if tuple(tensor.shape) != tuple(shape):
            raise ModelFileError(f"{component.origin}: tensor {label(name)} has shape {list(tensor.shape)} but the "
                                 f"model's configuration implies {list(shape)}; the file mixes parts of different "
                                 "models or is damaged")
    extra = [n for n in component.tensors if n not in expected]
    if extra:
        more = f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""
        raise ModelFileError(f"{component.origin}: unexpected tensor {label(extra[0])}{more}: not part of an "
                             f"SDXL {component.name} with this configuration")
