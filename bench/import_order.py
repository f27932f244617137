#!/usr/bin/env python3
"""Benchmark: the engine's speed whatever a script imports first, numpy or `engine`.

OpenBLAS reads OPENBLAS_THREAD_TIMEOUT when numpy loads it; `import engine` sets it, and
restarts OpenBLAS's threads when numpy was there first (engine.blas.follow_thread_timeout).
This times full-size 128x128 UNet evaluations (preset `default`) in fresh processes that
import numpy before `engine` and after it, alternating, and prints each round's figures
and the ratio of the medians.

It uses the random SDXL weights and inputs bench/unet_full.py builds and caches (run
`python bench/unet_full.py --build-only` once). From the repository root:

    nice -n 10 python bench/import_order.py --rounds 3
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

ORDERS = ("engine-first", "numpy-first")
SCRIPT = Path(__file__).resolve()


def child_evaluate(spec: dict) -> dict:
    """Runs in the child, after the imports in spec["order"]: one UNet load, evaluations timed."""
    import numpy as np

    from engine.blas import follow_thread_timeout
    from engine.sdxl import UNet
    from unet_full import UNET_DIR, load_inputs

    x = load_inputs(Path(spec["inputs"]))
    unet = UNet.load(str(UNET_DIR), preset="default")
    eval_s, cpu_s = [], []
    for _ in range(spec["evaluations"]):
        c0, w0 = time.process_time(), time.perf_counter()
        np.asarray(unet(x["sample"], x["timestep"], x["encoder_hidden_states"], x["text_embeds"], x["time_ids"]))
        eval_s.append(time.perf_counter() - w0)
        cpu_s.append(time.process_time() - c0)
    unet.close()
    return {"eval_s": eval_s, "cpu_s": cpu_s, "timeout_env": os.environ.get("OPENBLAS_THREAD_TIMEOUT"),
            "entry_points": follow_thread_timeout()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2, help="each order this many times, alternating (default 2)")
    p.add_argument("--evaluations", type=int, default=2,
                   help="evaluations per process; the last is the figure (default 2: the first reads the weights)")
    args = p.parse_args(argv)
    from harness import CACHE, log, run_child

    inputs = CACHE / "inputs" / "128x128-b1"
    if not (inputs / "sample.npy").is_file():
        raise SystemExit(f"{inputs}: no inputs; run `python bench/unet_full.py --build-only` first")
    times: dict[str, list[float]] = {order: [] for order in ORDERS}
    for rnd in range(args.rounds):
        for order in ORDERS if rnd % 2 == 0 else reversed(ORDERS):
            spec = {"kind": order, "inputs": str(inputs), "evaluations": args.evaluations,
                    "result": str(CACHE / f"import-order-{os.getpid()}.json")}
            rc, res, wall = run_child(SCRIPT, spec)
            if rc != 0 or not res or "eval_s" not in res:
                raise SystemExit(f"[round {rnd + 1}] {order}: the child failed (exit {rc}): {res and res.get('error')}")
            times[order].append(res["eval_s"][-1])
            log(f"[round {rnd + 1}] {order:12s} s/eval {', '.join(f'{s:.1f}' for s in res['eval_s'])} "
                f"(cpu {', '.join(f'{s:.1f}' for s in res['cpu_s'])}), OPENBLAS_THREAD_TIMEOUT="
                f"{res['timeout_env']}, OpenBLAS entry points {'found' if res['entry_points'] else 'MISSING'}")
    Path(spec["result"]).unlink(missing_ok=True)
    medians = {order: statistics.median(t) for order, t in times.items()}
    for order in ORDERS:
        log(f"{order:12s} median {medians[order]:.1f} s/eval over {', '.join(f'{t:.1f}' for t in times[order])}")
    log(f"numpy-first / engine-first: {medians['numpy-first'] / medians['engine-first']:.3f}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "_child":
        # The order under test comes first, before anything (the harness too) imports either.
        sys.path.insert(0, str(SCRIPT.parent.parent))   # the repo's engine, if not installed
        if json.loads(sys.argv[2])["kind"] == "numpy-first":
            importlib.import_module("numpy")
        importlib.import_module("engine")
        from harness import child_main
        sys.exit(child_main(sys.argv[2], {order: child_evaluate for order in ORDERS}))
    sys.exit(main())
