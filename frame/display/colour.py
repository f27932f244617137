"""Colour spaces for dithering and for judging it: sRGB, linear light, CIE XYZ, CIELAB, dE2000.

Linear RGB and XYZ use the sRGB primaries and the D65 white (Y of white = 1). Arrays
carry the colour in their last axis.
"""

from __future__ import annotations

import numpy as np

RGB_TO_XYZ = np.array([[0.4124564, 0.3575761, 0.1804375],
                       [0.2126729, 0.7151522, 0.0721750],
                       [0.0193339, 0.1191920, 0.9503041]])
XYZ_TO_RGB = np.linalg.inv(RGB_TO_XYZ)
WHITE_XYZ = RGB_TO_XYZ.sum(axis=1)  # D65, Y = 1
LUMINANCE = RGB_TO_XYZ[1]           # Y of linear RGB


def _decode(c: np.ndarray) -> np.ndarray:
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)


_DECODE_U8 = _decode(np.arange(256) / 255.0)
_DECODE_U8_F32 = _DECODE_U8.astype(np.float32)


def srgb8_to_linear_f32(srgb: np.ndarray) -> np.ndarray:
    """uint8 sRGB codes -> linear light 0..1 as float32 (half the memory of float64, for pictures)."""
    return _DECODE_U8_F32[np.asarray(srgb, dtype=np.uint8)]


def srgb_to_linear(srgb: np.ndarray) -> np.ndarray:
    """sRGB codes 0..255 (any numeric dtype) -> linear light 0..1, float64."""
    srgb = np.asarray(srgb)
    if srgb.dtype == np.uint8:
        return _DECODE_U8[srgb]
    return _decode(srgb.astype(np.float64) / 255.0)


def linear_to_srgb(linear: np.ndarray) -> np.ndarray:
    """Linear light 0..1 -> sRGB 0..1 (float64; clipped to 0..1 first)."""
    c = np.clip(np.asarray(linear, dtype=np.float64), 0.0, 1.0)
    return np.where(c <= 0.0031308, c * 12.92, 1.055 * c ** (1 / 2.4) - 0.055)


def linear_to_srgb8(linear: np.ndarray) -> np.ndarray:
    """Linear light 0..1 -> sRGB codes as uint8, rounded."""
    return np.round(linear_to_srgb(linear) * 255.0).astype(np.uint8)


def xyz_to_lab(xyz: np.ndarray) -> np.ndarray:
    """CIE XYZ (white Y = 1, D65) -> CIELAB."""
    t = np.asarray(xyz, dtype=np.float64) / WHITE_XYZ
    delta = 6.0 / 29.0
    f = np.where(t > delta ** 3, np.cbrt(t), t / (3 * delta ** 2) + 4.0 / 29.0)
    lab = np.empty_like(f)
    lab[..., 0] = 116.0 * f[..., 1] - 16.0
    lab[..., 1] = 500.0 * (f[..., 0] - f[..., 1])
    lab[..., 2] = 200.0 * (f[..., 1] - f[..., 2])
    return lab


def linear_to_lab(linear: np.ndarray) -> np.ndarray:
    """Linear RGB -> CIELAB (D65)."""
    return xyz_to_lab(np.asarray(linear, dtype=np.float64) @ RGB_TO_XYZ.T)


def srgb8_to_lab(srgb: np.ndarray) -> np.ndarray:
    """sRGB codes 0..255 -> CIELAB (D65)."""
    return linear_to_lab(srgb_to_linear(srgb))


def delta_e_2000(lab1: np.ndarray, lab2: np.ndarray) -> np.ndarray:
    """CIEDE2000 colour difference (kL = kC = kH = 1), elementwise over the leading axes."""
    lab1 = np.asarray(lab1, dtype=np.float64)
    lab2 = np.asarray(lab2, dtype=np.float64)
    L1, a1, b1 = lab1[..., 0], lab1[..., 1], lab1[..., 2]
    L2, a2, b2 = lab2[..., 0], lab2[..., 1], lab2[..., 2]
    c_bar = (np.hypot(a1, b1) + np.hypot(a2, b2)) / 2
    g = 0.5 * (1 - np.sqrt(c_bar ** 7 / (c_bar ** 7 + 25.0 ** 7)))
    a1p, a2p = a1 * (1 + g), a2 * (1 + g)
    c1p, c2p = np.hypot(a1p, b1), np.hypot(a2p, b2)
    h1p = np.degrees(np.arctan2(b1, a1p)) % 360
    h2p = np.degrees(np.arctan2(b2, a2p)) % 360
    dLp = L2 - L1
    dCp = c2p - c1p
    both = c1p * c2p != 0
    dh = h2p - h1p
    dh = np.where(dh > 180, dh - 360, np.where(dh < -180, dh + 360, dh))
    dh = np.where(both, dh, 0.0)
    dHp = 2 * np.sqrt(c1p * c2p) * np.sin(np.radians(dh / 2))
    Lbp = (L1 + L2) / 2
    Cbp = (c1p + c2p) / 2
    hsum = h1p + h2p
    hbp = np.where(np.abs(h1p - h2p) > 180, np.where(hsum < 360, hsum + 360, hsum - 360), hsum) / 2
    hbp = np.where(both, hbp, hsum)
    t = (1 - 0.17 * np.cos(np.radians(hbp - 30)) + 0.24 * np.cos(np.radians(2 * hbp))
         + 0.32 * np.cos(np.radians(3 * hbp + 6)) - 0.20 * np.cos(np.radians(4 * hbp - 63)))
    d_theta = 30 * np.exp(-(((hbp - 275) / 25) ** 2))
    rc = 2 * np.sqrt(Cbp ** 7 / (Cbp ** 7 + 25.0 ** 7))
    sl = 1 + 0.015 * (Lbp - 50) ** 2 / np.sqrt(20 + (Lbp - 50) ** 2)
    sc = 1 + 0.045 * Cbp
    sh = 1 + 0.015 * Cbp * t
    rt = -np.sin(np.radians(2 * d_theta)) * rc
    return np.sqrt((dLp / sl) ** 2 + (dCp / sc) ** 2 + (dHp / sh) ** 2 + rt * (dCp / sc) * (dHp / sh))
