"""How low can any dithering go? A bound on the corpus error for one panel's inks.

    python3 bench/dither_bound.py --panel acep-5.7 --size 300x224   # ~10 min on 2 cores

The quality target compares the dithered picture, shown with the measured palette, with
the tone-compressed original (frame.display.quality.score). Saturated colours beyond
what the inks can mix cost every method the same; this script measures that floor.

It relaxes the problem: instead of one ink per pixel, each pixel may show any mix of
the inks (weights >= 0 summing to 1, a softmax), and the mean S-CIELAB dE2000 against
the reference is minimised directly by gradient descent (Adam, torch on the CPU),
starting from our own dither. Every dithered picture is one such mix (one-hot weights),
so the minimum is below the error of any dithering, ours or another's; it also has no
grain at all. Gradient descent finds a local minimum, so the printed figure estimates
the relaxed minimum from above; the optimiser only ever lowers it from our dither's
error. torch is a test-time dependency (see the project brief), not needed on the Pi.

The S-CIELAB here is frame.display.scielab written again in torch (same filters, same
symmetric edges); the "check" column is that version's score of our dither, which must
equal quality.score's.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from frame.display.colour import RGB_TO_XYZ, WHITE_XYZ, srgb_to_linear  # noqa: E402
from frame.display.dither import dither, target_linear  # noqa: E402
from frame.display.fit import fit_picture  # noqa: E402
from frame.display.palette import Palette  # noqa: E402
from frame.display.panels import PANELS, get_panel  # noqa: E402
from frame.display.quality import inky_indices, score  # noqa: E402
from frame.display.scielab import (DEFAULT_PPD, OPPONENT_TO_XYZ, SPATIAL_FILTERS, XYZ_TO_OPPONENT,  # noqa: E402
                                   gaussian_1d, kernel_width)

PHOTOS = sorted((Path(__file__).resolve().parent.parent / "tests" / "data" / "photos").glob("*.jpg"))


def _t(a) -> torch.Tensor:
    return torch.as_tensor(np.asarray(a, dtype=np.float64))


def _blur_axis(x: torch.Tensor, kernel: torch.Tensor, axis: int) -> torch.Tensor:
    r = len(kernel) // 2
    head, tail = x.narrow(axis, 0, r).flip(axis), x.narrow(axis, x.shape[axis] - r, r).flip(axis)
    padded = torch.cat([head, x, tail], axis)  # "symmetric" edges, as scielab._convolve_axis
    if axis == 0:
        return torch.nn.functional.conv2d(padded[None, None], kernel.view(1, 1, -1, 1))[0, 0]
    return torch.nn.functional.conv2d(padded[None, None], kernel.view(1, 1, 1, -1))[0, 0]


def spatial_lab(linear: torch.Tensor, ppd: float) -> torch.Tensor:
    """frame.display.scielab.spatial_lab in torch."""
    width = kernel_width(ppd)
    opp = linear @ _t(RGB_TO_XYZ).T @ _t(XYZ_TO_OPPONENT).T
    channels = []
    for c, filters in enumerate(SPATIAL_FILTERS):
        out = 0
        for weight, spread in filters:
            g = _t(gaussian_1d(spread * ppd, width))
            out = out + weight * _blur_axis(_blur_axis(opp[..., c], g, 0), g, 1)
        channels.append(out)
    t = (torch.stack(channels, -1) @ _t(OPPONENT_TO_XYZ).T) / _t(WHITE_XYZ)
    d = 6.0 / 29.0
    f = torch.where(t > d ** 3, torch.clamp(t, min=d ** 3) ** (1.0 / 3.0), t / (3 * d * d) + 4.0 / 29.0)
    return torch.stack([116 * f[..., 1] - 16, 500 * (f[..., 0] - f[..., 1]), 200 * (f[..., 1] - f[..., 2])], -1)


def delta_e_2000(lab1: torch.Tensor, lab2: torch.Tensor) -> torch.Tensor:
    """frame.display.colour.delta_e_2000 in torch (tiny epsilons keep the gradient finite)."""
    eps = 1e-12
    L1, a1, b1 = lab1.unbind(-1)
    L2, a2, b2 = lab2.unbind(-1)
    c_bar = (torch.sqrt(a1 * a1 + b1 * b1 + eps) + torch.sqrt(a2 * a2 + b2 * b2 + eps)) / 2
    g = 0.5 * (1 - torch.sqrt(c_bar ** 7 / (c_bar ** 7 + 25.0 ** 7)))
    a1p, a2p = a1 * (1 + g), a2 * (1 + g)
    c1p, c2p = torch.sqrt(a1p * a1p + b1 * b1 + eps), torch.sqrt(a2p * a2p + b2 * b2 + eps)
    h1p, h2p = torch.atan2(b1, a1p) % (2 * math.pi), torch.atan2(b2, a2p) % (2 * math.pi)
    dh = h2p - h1p
    dh = torch.where(dh > math.pi, dh - 2 * math.pi, torch.where(dh < -math.pi, dh + 2 * math.pi, dh))
    dHp = 2 * torch.sqrt(c1p * c2p + eps) * torch.sin(dh / 2)
    dLp, dCp = L2 - L1, c2p - c1p
    Lbp, Cbp = (L1 + L2) / 2, (c1p + c2p) / 2
    hsum = h1p + h2p
    hbp = torch.where((h1p - h2p).abs() > math.pi,
                      torch.where(hsum < 2 * math.pi, hsum + 2 * math.pi, hsum - 2 * math.pi), hsum) / 2
    t = (1 - 0.17 * torch.cos(hbp - math.radians(30)) + 0.24 * torch.cos(2 * hbp)
         + 0.32 * torch.cos(3 * hbp + math.radians(6)) - 0.20 * torch.cos(4 * hbp - math.radians(63)))
    d_theta = math.radians(30) * torch.exp(-(((torch.rad2deg(hbp) - 275) / 25) ** 2))
    rc = 2 * torch.sqrt(Cbp ** 7 / (Cbp ** 7 + 25.0 ** 7))
    sl = 1 + 0.015 * (Lbp - 50) ** 2 / torch.sqrt(20 + (Lbp - 50) ** 2)
    sc, sh = 1 + 0.045 * Cbp, 1 + 0.015 * Cbp * t
    rt = -torch.sin(2 * d_theta) * rc
    return torch.sqrt((dLp / sl) ** 2 + (dCp / sc) ** 2 + (dHp / sh) ** 2 + rt * (dCp / sc) * (dHp / sh) + eps)


def bound(picture: np.ndarray, palette: Palette, steps: int, ppd: float) -> tuple[float, float]:
    """(this script's S-CIELAB of our dither, the relaxed minimum) for one picture."""
    inks = _t(srgb_to_linear(np.asarray(palette.shown, np.uint8)))
    reference = spatial_lab(_t(target_linear(picture, palette)), ppd)
    start = torch.as_tensor(dither(picture, palette).astype(np.int64))
    check = float(delta_e_2000(spatial_lab(inks[start], ppd), reference).mean())
    logits = (torch.nn.functional.one_hot(start, len(inks)).double() * 3.0).requires_grad_(True)
    optimiser = torch.optim.Adam([logits], lr=0.1)
    best = check  # our dither itself is one of the mixes
    for _ in range(steps):
        loss = delta_e_2000(spatial_lab(torch.softmax(logits, -1) @ inks, ppd), reference).mean()
        best = min(best, float(loss.detach()))
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    return check, best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--panel", default="acep-5.7", choices=list(PANELS))
    parser.add_argument("--size", default=None, help="WxH to fit the photographs to (default: the panel's)")
    parser.add_argument("--steps", type=int, default=200, help="Adam steps per photograph")
    args = parser.parse_args()
    torch.set_num_threads(2)
    panel = get_panel(args.panel)
    palette = Palette.for_panel(panel)
    size = tuple(int(v) for v in args.size.split("x")) if args.size else panel.size
    print(f"{panel.name} at {size[0]}x{size[1]}, {DEFAULT_PPD:g} pixels/degree, {args.steps} steps; "
          "mean S-CIELAB dE2000 against the tone-compressed picture")
    rows = []
    for path in PHOTOS:
        picture = np.asarray(fit_picture(Image.open(path), size, "cover", "centre"))
        ours = score(dither(picture, palette), picture, palette).mean
        inky = score(inky_indices(picture, panel, 0.5), picture, palette).mean
        check, relaxed = bound(picture, palette, args.steps, DEFAULT_PPD)
        rows.append((inky, ours, relaxed))
        print(f"  {path.stem:10s} inky {inky:5.2f}  ours {ours:5.2f} (check {check:5.2f})  "
              f"any dithering >= ~{relaxed:5.2f}", flush=True)
    inky, ours, relaxed = np.mean(rows, axis=0)
    print(f"  mean       inky {inky:5.2f}  ours {ours:5.2f}  bound {relaxed:5.2f}; "
          f"ratio to inky: ours {ours / inky:.3f}, bound {relaxed / inky:.3f}")


if __name__ == "__main__":
    main()
