from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

if TYPE_CHECKING:   # tiny_models imports torch: only the fixtures that build models load it
    from tiny_models import TinyUNet


def pcc(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson correlation of two arrays, flattened, in float64."""
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.corrcoef(a, b)[0, 1])


@pytest.fixture(scope="session")
def tiny_unets(tmp_path_factory) -> dict[str, TinyUNet]:
    from tiny_models import UNET_CONFIGS, TinyUNet

    root = tmp_path_factory.mktemp("unets")
    return {name: TinyUNet(name, root / name) for name in UNET_CONFIGS}


@pytest.fixture(scope="session")
def tiny_unet(tiny_unets) -> TinyUNet:
    return tiny_unets["tiny"]


@pytest.fixture(scope="session")
def tiny_single_file(tmp_path_factory):
    """A tiny SDXL model as a diffusers folder and as a single-file SGM model (tests/sgm_files.py)."""
    from tiny_models import TinySingleFile

    return TinySingleFile(tmp_path_factory.mktemp("single-file"))
