#!/usr/bin/env python3
"""Benchmark: peak RSS of one full-size SDXL UNet evaluation per batch size (several pictures per pass).

Each case runs in a fresh subprocess: the random SDXL-base-shaped UNet that bench/unet_full.py
builds (run that first, or `python bench/unet_full.py --build-only`), one evaluation of a batch
of B pictures at the given latent size with the preset (default rpi-lowmem), the conditioning
one prompt repeated as the pipeline repeats it, and the process's peak RSS and the seconds.

    python bench/unet_batch_memory.py                       # 64x64 latents (512x512), batches 1, 2, 3
    python bench/unet_batch_memory.py --sizes 64,96,128 --batches 1,2

Not run in CI; figures go to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # the worktree's engine, run from anywhere
CACHE = Path(os.environ.get("SLOWFRAME_BENCH_CACHE", Path.home() / ".cache" / "slowframe-bench"))
UNET = CACHE / "sdxl-random" / "unet"


def child(batch: int, size: int, preset: str) -> dict:
    import numpy as np

    from engine.sdxl import UNet

    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, 4, size, size), dtype=np.float32)
    ctx = np.repeat(rng.standard_normal((1, 77, 2048), dtype=np.float32), batch, 0)
    pooled = np.repeat(rng.standard_normal((1, 1280), dtype=np.float32), batch, 0)
    ids = np.repeat(np.array([[size * 8, size * 8, 0, 0, size * 8, size * 8]], np.float32), batch, 0)
    started = time.perf_counter()
    with UNet.load(UNET, preset) as unet:
        unet(x, 701.0, ctx, pooled, ids)
    seconds = time.perf_counter() - started
    return {"batch": batch, "size": size, "preset": preset, "seconds": round(seconds, 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6, 1)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="64", help="latent sizes (pixels / 8), comma separated (default 64)")
    p.add_argument("--batches", default="1,2,3", help="pictures per batch, comma separated (default 1,2,3)")
    p.add_argument("--preset", default="rpi-lowmem")
    p.add_argument("_child", nargs="?", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args._child:
        print(json.dumps(child(*map(int, args._child.split("x")), args.preset)))
        return 0
    if not (UNET / "config.json").is_file():
        print(f"no random UNet at {UNET}: run `python bench/unet_full.py --build-only` first", file=sys.stderr)
        return 1
    print(f"{'latents':>8} {'pictures':>8} {'s/eval':>7} {'peak RSS MB':>12} {'MB more':>8}")
    for size in map(int, args.sizes.split(",")):
        first = None
        for batch in map(int, args.batches.split(",")):
            out = subprocess.run([sys.executable, __file__, "--preset", args.preset, f"{batch}x{size}"],
                                 capture_output=True, text=True, check=True, cwd=Path(__file__).parent.parent)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            first = first or r["peak_rss_mb"]
            print(f"{size:>5}x{size:<3}{batch:>8} {r['seconds']:>7} {r['peak_rss_mb']:>12} "
                  f"{r['peak_rss_mb'] - first:>8.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
