from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))


def pcc(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson correlation of two arrays, flattened, in float64."""
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.corrcoef(a, b)[0, 1])


class TinyUNet:
    """A tiny random SDXL-shaped UNet on disk and its diffusers fp32 reference."""

    def __init__(self, name: str, folder: Path):
        from tiny_models import make_unet, pooled_dim

        self.name = name
        self.folder = folder
        self.ref = make_unet(name, folder)
        self.cross_dim = self.ref.config.cross_attention_dim
        self.pooled_dim = pooled_dim(self.ref)

    def inputs(self, batch: int = 2, h: int = 16, w: int = 24, tokens: int = 154, seed: int = 0):
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((batch, 4, h, w)).astype(np.float32)
        ctx = rng.standard_normal((batch, tokens, self.cross_dim)).astype(np.float32)
        text = rng.standard_normal((batch, self.pooled_dim)).astype(np.float32)
        ids = np.array([[h * 8, w * 8, 0, 0, h * 8, w * 8]] * batch, dtype=np.float32)
        return x, 701.0, ctx, text, ids

    def reference(self, x, t, ctx, text, ids) -> np.ndarray:
        import torch

        with torch.no_grad():
            out = self.ref(torch.from_numpy(x), t, torch.from_numpy(ctx),
                           added_cond_kwargs=dict(text_embeds=torch.from_numpy(text), time_ids=torch.from_numpy(ids)))
        return out.sample.numpy()


@pytest.fixture(scope="session")
def tiny_unets(tmp_path_factory) -> dict[str, TinyUNet]:
    from tiny_models import UNET_CONFIGS

    root = tmp_path_factory.mktemp("unets")
    return {name: TinyUNet(name, root / name) for name in UNET_CONFIGS}


@pytest.fixture(scope="session")
def tiny_unet(tiny_unets) -> TinyUNet:
    return tiny_unets["tiny"]


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """A tiny SDXL model as a diffusers folder and as a single-file SGM checkpoint (tests/tiny_sgm.py)."""
    from tiny_sgm import TinyCheckpoint

    return TinyCheckpoint(tmp_path_factory.mktemp("checkpoint"))
