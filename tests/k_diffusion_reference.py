"""k-diffusion's sampling.py and external.py, loaded without the package's __init__ (test-only reference).

k-diffusion 0.1.1.post1 (`pip install --no-deps k-diffusion==0.1.1.post1`, plus torchsde,
torchdiffeq and trampoline) is the reference for the samplers and schedules diffusers does
not have. Its __init__ imports training-time dependencies (skimage, torchvision, ...), so
this module loads just the two files it needs, with `utils` reduced to the one function
they call.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import torch


def _append_dims(x: torch.Tensor, target_dims: int) -> torch.Tensor:
    """k_diffusion.utils.append_dims: trailing singleton dimensions up to target_dims."""
    return x[(...,) + (None,) * (target_dims - x.ndim)]


def _load() -> tuple[types.ModuleType, types.ModuleType]:
    spec = importlib.util.find_spec("k_diffusion")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("k-diffusion is not installed: pip install --no-deps k-diffusion==0.1.1.post1")
    folder = Path(spec.submodule_search_locations[0])
    package = types.ModuleType("k_diffusion")
    package.__path__ = [str(folder)]
    utils = types.ModuleType("k_diffusion.utils")
    utils.append_dims = _append_dims
    package.utils = utils
    sys.modules.setdefault("k_diffusion", package)
    sys.modules.setdefault("k_diffusion.utils", utils)
    loaded = []
    for name in ("sampling", "external"):
        module_spec = importlib.util.spec_from_file_location(f"k_diffusion.{name}", folder / f"{name}.py")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[module_spec.name] = module
        setattr(package, name, module)
        module_spec.loader.exec_module(module)
        loaded.append(module)
    return loaded[0], loaded[1]


sampling, external = _load()
