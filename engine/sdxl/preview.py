"""Previews of a picture still being made: the sampler's denoised estimate turned into RGB without the VAE.

The free one is a linear map: each latent pixel's four channels times a fixed 4x3 factor
matrix plus a bias give its RGB in [-1, 1], one colour per 8x8 block of the picture, which
``linear_preview`` upscales 8x with a smooth (bicubic) filter. It is the map ComfyUI uses for
SDXL latents (comfy/latent_formats.py, class SDXL: ``latent_rgb_factors`` and
``latent_rgb_factors_bias``, applied in latent_preview.py's Latent2RGBPreviewer as
``linear(x0, factors.T, bias)`` and shown as ``(rgb + 1) / 2`` clamped); OnnxStream's
``--preview-steps`` does the same kind of map. The factors act on the sampler's latents
(before dividing by the VAE's scaling_factor), the space ``StepProgress.denoised`` is in.

The other is the tiny decoder (TAESDXL, engine/sdxl/tiny_vae.py) from the model's vae_tiny/
folder, run on the latents averaged over 2x2 cells: a half-size picture, upscaled to full size.
Half size because a full-size tiny decode costs about 6% of a 1024x1024 `rpi-lowmem` step and
a half-size one about 1.5%, and a preview for a 800x480 panel loses nothing by it
(bench/RESULTS.md#tiny-decoder).

``open_preview_decoder(kind, model)`` picks the decoder by name from PREVIEW_DECODERS: each
entry loads its decoder for a model folder and raises EngineError (saying what it looked
for, where) when it cannot; given ``on_fallback``, the linear map stands in and the reason
goes to ``on_fallback`` once.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image

from engine.errors import EngineError, InputError, ModelFileError

# ComfyUI comfy/latent_formats.py, class SDXL (rows: latent channels 0-3; columns: R, G, B)
LATENT_RGB_FACTORS = np.array([[0.3651, 0.4232, 0.4341],
                               [-0.2533, -0.0042, 0.1068],
                               [0.1076, 0.1111, -0.0362],
                               [-0.3165, -0.2492, -0.2188]], dtype=np.float32)
LATENT_RGB_BIAS = np.array([0.1084, -0.0175, -0.0011], dtype=np.float32)
UPSCALE = 8   # the VAE's pixels per latent along each side

PreviewDecoder = Callable[[np.ndarray], Image.Image]


def linear_rgb(latents: np.ndarray) -> np.ndarray:
    """The factor matrix applied: (1, 4, h, w) latents -> (h, w, 3) float32 RGB, about -1..1 (not clamped)."""
    a = np.asarray(latents)
    if a.ndim != 4 or a.shape[0] != 1 or a.shape[1] != LATENT_RGB_FACTORS.shape[0]:
        raise InputError(f"a preview needs SDXL latents of shape (1, 4, height, width), got {list(a.shape)}")
    if not np.issubdtype(a.dtype, np.floating):
        raise InputError(f"latents must be a float array, got dtype {a.dtype}")
    return np.einsum("chw,cr->hwr", a[0].astype(np.float32), LATENT_RGB_FACTORS) + LATENT_RGB_BIAS


def linear_preview(latents: np.ndarray) -> Image.Image:
    """An RGB picture of ``latents`` (the denoised estimate), 8x the latents' size, from the linear map."""
    rgb = linear_rgb(latents)
    # non-finite values (a diverging sampler) become mid-grey rather than noise in the preview
    rgb = np.nan_to_num(rgb, nan=0.0, posinf=1.0, neginf=-1.0)
    pixels = np.rint((np.clip(rgb, -1.0, 1.0) + 1.0) * 127.5).astype(np.uint8)
    small = Image.fromarray(pixels, "RGB")
    return small.resize((small.width * UPSCALE, small.height * UPSCALE), Image.Resampling.BICUBIC)


def _linear(model: Path | None) -> PreviewDecoder:
    return linear_preview


def half_size(latents: np.ndarray) -> np.ndarray:
    """Latents averaged over 2x2 cells (a side of odd length keeps its last row or column out)."""
    a = np.asarray(latents, dtype=np.float32)
    h, w = a.shape[2] // 2 * 2, a.shape[3] // 2 * 2
    if h == 0 or w == 0:
        return a
    cells = a[:, :, :h, :w].reshape(a.shape[0], a.shape[1], h // 2, 2, w // 2, 2)
    return cells.mean(axis=(3, 5), dtype=np.float32)


def _tiny(model: Path | None) -> PreviewDecoder:
    from engine.sdxl.tiny_vae import TINY_VAE, TinyVAEDecoder, tiny_vae_problem

    if model is None:
        raise ModelFileError("the tiny preview decoder needs a model folder to find its vae_tiny/ in")
    folder = model / TINY_VAE
    problem = tiny_vae_problem(folder)
    if problem is not None:
        raise ModelFileError(problem)

    def decode(latents: np.ndarray) -> Image.Image:
        linear_rgb(latents)          # the same shape checks as the linear map's
        with TinyVAEDecoder.load(folder) as tiny:   # loaded per preview: 2.4 MB, nothing kept between them
            image = tiny.to_image(tiny.decode(half_size(latents) / np.float32(tiny.scaling_factor)))
        return image.resize((latents.shape[3] * UPSCALE, latents.shape[2] * UPSCALE), Image.Resampling.BICUBIC)

    return decode


# name -> loader(model folder) returning the decoder; a loader raises EngineError when it cannot load
PREVIEW_DECODERS: dict[str, Callable[[Path | None], PreviewDecoder]] = {"linear": _linear, "tiny": _tiny}


def open_preview_decoder(kind: str, model: Path | None = None,
                         on_fallback: Callable[[str], None] | None = None) -> PreviewDecoder:
    """The preview decoder called ``kind`` for the model folder ``model``: InputError for an unknown name, the
    loader's EngineError when its files are missing or wrong; with ``on_fallback`` instead the linear map,
    and ``on_fallback`` is told why."""
    try:
        loader = PREVIEW_DECODERS.get(kind)
        if loader is None:
            raise InputError(f"no preview decoder {kind!r} in this build; use one of {', '.join(PREVIEW_DECODERS)}")
        return loader(Path(model) if model is not None else None)
    except EngineError as exc:
        if on_fallback is None:
            raise
        on_fallback(f"{exc}; previews use the linear map instead")
        return linear_preview
