"""What a preview costs the picture: the worker's whole preview path at 1024x1024, against a step's time.

    python3 bench/preview.py                      # 1024x1024 (128x128 latents), 10 rounds
    python3 bench/preview.py --step-seconds 74.2  # the step time to compare with

Times frame.worker.Previews.offer, the code the worker runs after a step when a preview is
due: the linear map of the denoised latents, the 8x smooth upscale, the PNG (compress
level 1) and its atomic write. It also times the same PNG at Pillow's default level 6,
interleaved round by round, since the level is the one choice in the path. The step time
to compare with is not measured here (a 1024x1024 step in rpi-lowmem takes over a minute
and needs the full-size weights): pass this machine's from bench/pipeline_full.py; the
default is the latest in bench/RESULTS.md. Target: a preview costs <= 2% of a step.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.sdxl.preview import linear_preview  # noqa: E402
from frame.worker import PreviewRequest, Previews  # noqa: E402

LATEST_STEP_SECONDS = 74.2   # bench/RESULTS.md, Whole pipeline: 1024x1024 rpi-lowmem, session 16, machine F


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=1024, help="picture side in pixels (default 1024)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--step-seconds", type=float, default=LATEST_STEP_SECONDS)
    args = parser.parse_args()
    side = args.size // 8
    rng = np.random.default_rng(0)
    denoised = rng.standard_normal((1, 4, side, side)).astype(np.float32)
    lines: list[dict] = []
    with tempfile.TemporaryDirectory() as folder:
        previews = Previews(PreviewRequest(Path(folder) / "preview.png", every_seconds=0), model="")
        offer, level6 = [], []
        for round_ in range(args.rounds + 1):
            previews.last = None
            started = time.perf_counter()
            previews.offer({"step": 1, "steps": 2, "denoised": denoised}, lines.append)
            took = time.perf_counter() - started
            image = linear_preview(denoised)
            started = time.perf_counter()
            image.save(io.BytesIO(), format="PNG")
            png6 = time.perf_counter() - started
            if round_:   # the first round warms the caches
                offer.append(took)
                level6.append(png6)
        size = (Path(folder) / "preview.png").stat().st_size
    assert len(lines) == args.rounds + 1, lines
    cost = statistics.median(offer)
    print(f"preview at {args.size}x{args.size} ({side}x{side} latents): {cost:.3f} s median of {args.rounds} "
          f"(min {min(offer):.3f}, max {max(offer):.3f}); PNG {size / 1e6:.2f} MB")
    print(f"the PNG alone at level 6 (Pillow's default): {statistics.median(level6):.3f} s")
    share = cost / args.step_seconds
    print(f"{100 * share:.2f}% of a {args.step_seconds:.1f} s step: {'PASS' if share <= 0.02 else 'FAIL'} (<= 2%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
