"""The streaming tax on the UNet's linear layers: fp16 weights converted per use vs fp32 resident.

    python3 bench/linear_convert.py            # ~2 min on 2 cores
    python3 bench/linear_convert.py --reps 15

diffusers keeps every weight resident in fp32; the engine stores fp16 and converts each
weight to fp32 (engine.kernels, on all cores) just before its GEMM. This measures, for
every distinct linear shape of one 128x128 SDXL UNet evaluation (batch 1), the GEMM on a
resident fp32 weight and the same GEMM preceded by that conversion, and scales both by
how often the shape occurs in an evaluation (the cached cross-attention K/V excluded).
The difference is the least a streaming engine built on a BLAS sgemm pays over a
resident-weight one for these layers, before any overlap of reading and computing.

The two variants run alternately, repetition after repetition, and the medians are
compared: a shared machine's speed drifts by tens of percent within minutes, and only
figures taken side by side mean anything. Not run in CI.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import engine  # noqa: E402,F401  (OpenBLAS thread settings)
import numpy as np  # noqa: E402

from engine import kernels  # noqa: E402
from engine.parallel import cores, in_parallel  # noqa: E402
from kernels_check import require_c_kernels  # noqa: E402  (bench/, the script's own folder)

# (tokens, out, in): count per 128x128 evaluation. Level 3 (32x32 tokens, 1280 channels):
# 60 transformer blocks (to_q/k/v/out of attn1, to_q/out of attn2, GEGLU net.0.proj and
# net.2) and 6 transformers' proj_in/proj_out; level 2 (64x64, 640): 10 blocks, 5 transformers.
SHAPES = {
    (1024, 1280, 1280): 60 * 6 + 6 * 2,
    (1024, 10240, 1280): 60,
    (1024, 1280, 5120): 60,
    (4096, 640, 640): 10 * 6 + 5 * 2,
    (4096, 5120, 640): 10,
    (4096, 640, 2560): 10,
}


def convert(src: np.ndarray, dst: np.ndarray, threads: int) -> None:
    """fp16 bits -> fp32 on `threads` cores, as TensorStore does where the model waits."""
    s, d = src.reshape(-1), dst.reshape(-1)
    in_parallel(lambda a, b: kernels.f16_to_f32(s[a:b], d[a:b]), 0, s.size, s.size, threads)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=9, help="alternating repetitions per shape (median reported)")
    args = p.parse_args()
    rng = np.random.default_rng(0)
    threads = cores()
    print(f"{threads} cores, conversion kernels: {require_c_kernels()}")
    print(f"{'tokens x out x in':>20s} {'count':>6s} {'resident ms':>12s} {'convert+GEMM ms':>16s} "
          f"{'convert ms':>11s} {'tax':>6s} {'GF/s':>6s}")
    totals = [0.0, 0.0]
    for (m, n, k), count in SHAPES.items():
        x = rng.standard_normal((m, k), dtype=np.float32)
        w16 = rng.standard_normal((n, k), dtype=np.float32).astype(np.float16)
        w32 = w16.astype(np.float32)
        buf = np.empty_like(w32)
        y = np.empty((m, n), dtype=np.float32)
        bits = w16.view(np.uint16)

        def resident() -> None:
            np.matmul(x, w32.T, out=y)

        def streamed() -> None:
            convert(bits, buf, threads)
            np.matmul(x, buf.T, out=y)

        def convert_only() -> None:
            convert(bits, buf, threads)

        runs = {f: [] for f in (resident, streamed, convert_only)}
        for f in runs:
            f()
        for _ in range(args.reps):
            for f, times in runs.items():
                t = time.perf_counter()
                f()
                times.append(time.perf_counter() - t)
        r, s, c = (float(np.median(v)) for v in runs.values())
        totals[0] += r * count
        totals[1] += s * count
        print(f"{f'{m} x {n} x {k}':>20s} {count:6d} {r * 1e3:12.2f} {s * 1e3:16.2f} {c * 1e3:11.2f} "
              f"{s / r - 1:6.1%} {2 * m * n * k / r / 1e9:6.0f}")
    print(f"per 128x128 evaluation: resident {totals[0]:.2f} s, converted per use {totals[1]:.2f} s "
          f"(+{totals[1] - totals[0]:.2f} s, {totals[1] / totals[0] - 1:.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
