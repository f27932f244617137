#!/usr/bin/env python3
"""Benchmark of the tiny decoder (TAESDXL): a 1024x1024 decode in bands, next to the full
tiled VAE and to one UNet step, in rpi-lowmem.

Cases, each in a fresh subprocess (peak RSS = the case's own VmHWM):

- tiny: engine.sdxl.tiny_vae.TinyVAEDecoder decoding 128x128 latents (1024x1024) in
  rpi-lowmem with its automatic bands (8 latent rows), then with 4 and 16 (--bands):
  seconds and peak RSS. Run twice, before and after the UNet, so the ratio below
  compares timings taken around the same minutes (2-core VMs drift).
- tiny in a 256 MiB memory cgroup (page cache included), when root.
- unet: one UNet evaluation at 128x128 in rpi-lowmem (bench/unet_full.py's case: the
  second of two evaluations). A step is two evaluations (split CFG, guidance > 1), so
  the cost of one tiny-decoder preview relative to a step is tiny s / (2 x s/eval);
  the issue's target is <= 2%. The same for a half-size preview: the latents averaged
  over 2x2 cells (64x64), decoded to 512x512, a quarter of the work.
- full: the full tiled VAE in rpi-lowmem, measured by bench/vae_full.py (its result is
  reused when it has one; --full runs it again, 25 tiles: minutes).

Weights: random TAESDXL-shaped AutoencoderTiny weights (diffusers' default init,
torch.manual_seed(0), fp16, decoder and encoder) built on first use under

    ${SLOWFRAME_BENCH_CACHE:-~/.cache/slowframe-bench}/taesdxl-random/

and the UNet and VAE caches of bench/unet_full.py and bench/vae_full.py. The latent is
bench/vae_full.py's smooth noise, times the VAE's scaling factor: the sampler's latents,
which the tiny decoder takes as they are. Not run in CI. From the repository root:

    nice -n 10 python bench/tiny_vae.py                 # tiny, cgroup, UNet step, tiny again
    nice -n 10 python bench/tiny_vae.py --skip-unet --bands 8
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repo's engine, if not installed
import engine  # noqa: E402,F401  (before numpy: it sets OpenBLAS's thread spin, read when numpy loads)
import numpy as np  # noqa: E402

from engine.atomic import atomic_folder  # noqa: E402
from harness import (CACHE, MB, child_main, cgroup_unavailable_reason, describe_cgroup,  # noqa: E402
                     describe_drop, describe_rc, drop_page_cache, log, memory_figures, run_child,
                     run_in_cgroup, verdict, write_json)
from kernels_check import require_c_kernels  # noqa: E402

SCRIPT = Path(__file__).resolve()
TINY_DIR = CACHE / "taesdxl-random"
WEIGHTS = "diffusion_pytorch_model.safetensors"
RUNS = CACHE / "tiny-vae-runs"
CGROUP_NAME = "slowframe-tiny-vae-bench"   # its own: another benchmark may hold theirs meanwhile
PREVIEW_TARGET = 0.02
TARGET_RSS_MB = 250.0


def ensure_weights() -> None:
    if (TINY_DIR / WEIGHTS).is_file():
        log(f"[weights] using {TINY_DIR}")
        return
    with atomic_folder(TINY_DIR) as tmp:
        rc, res, _ = run_child(SCRIPT, {"kind": "build", "out": str(tmp), "result": str(RUNS / "build.json")})
        if rc != 0 or (res or {}).get("error"):
            raise SystemExit(f"[weights] build failed ({describe_rc(rc)})\n{(res or {}).get('error', '')}")
    log(f"[weights] built random TAESDXL weights in {TINY_DIR}: {res['decoder_params']:,} decoder parameters")


def child_build(spec: dict) -> dict:
    import torch
    from diffusers import AutoencoderTiny

    torch.manual_seed(0)
    model = AutoencoderTiny()
    model.half().save_pretrained(spec["out"])
    return {"decoder_params": sum(p.numel() for n, p in model.named_parameters() if n.startswith("decoder."))}


def child_tiny(spec: dict) -> dict:
    from engine.sdxl.tiny_vae import TinyVAEDecoder

    latents = np.load(spec["latent"]) * np.float32(spec["vae_scaling"])   # back to the sampler's latents
    if spec["pool"] > 1:
        B, C, h, w = latents.shape
        k = spec["pool"]
        latents = latents.reshape(B, C, h // k, k, w // k, k).mean(axis=(3, 5), dtype=np.float32)
    t0 = time.perf_counter()
    with TinyVAEDecoder.load(TINY_DIR, preset="rpi-lowmem", band_latents=spec["bands"]) as tiny:
        load_s = time.perf_counter() - t0
        t1, c1 = time.perf_counter(), time.process_time()
        image = tiny.to_image(tiny.decode(latents / tiny.scaling_factor))
        decode_s, cpu_s = time.perf_counter() - t1, time.process_time() - c1
    image.save(spec["output"])
    return {"load_s": load_s, "decode_s": decode_s, "cpu_s": cpu_s, "mem": memory_figures()}


def run_tiny(latent: Path, bands: int, label: str, procs: Path | None = None, pool: int = 1) -> dict:
    import vae_full

    spec = {"kind": "tiny", "latent": str(latent), "bands": bands, "pool": pool, "output": str(RUNS / f"{label}.png"),
            "result": str(RUNS / f"{label}.child.json"), "vae_scaling": vae_full.SDXL_VAE_CONFIG["scaling_factor"]}
    log(f"[{label}] {describe_drop(drop_page_cache(TINY_DIR / WEIGHTS))}")
    rc, res, wall = run_child(SCRIPT, spec, cgroup_procs=procs)
    res = dict(res or {}, label=label, rc=rc, bands=bands, completed=rc == 0 and not (res or {}).get("error"),
               load_average=os.getloadavg())
    if res["completed"]:
        log(f"[{label}] {res['decode_s']:.1f} s (cpu {res['cpu_s']:.1f} s), peak RSS "
            f"{res['mem']['vmhwm_bytes'] / MB:.0f} MB, load {res['load_average'][0]:.1f}")
    else:
        log(f"[{label}] FAILED: {describe_rc(rc)}\n{res.get('error', '')}")
    return res


def run_unet(args) -> dict:
    import unet_full

    unet_full.ensure_weights()
    inputs = unet_full.ensure_inputs(128, 128, 1)
    args.repeats = 1
    res = unet_full.run_engine_case(128, 128, 1, "rpi-lowmem", {}, inputs, args, tag="-tiny-vae-bench")
    res["load_average"] = os.getloadavg()
    return res


def full_vae(args, latent: Path) -> dict | None:
    import vae_full

    if args.full:
        vae_full.ensure_weights()
        args.torch_threads = 2
        res = vae_full.run_case("lowmem", latent, args)
        write_json(vae_full.RUNS / f"{vae_full.CASES['lowmem'][1]}.json", res)
        return res if res.get("completed") else None
    return vae_full.cached("lowmem")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bands", default="0,4,16", help="latent rows per band to measure (0: automatic); "
                                                      "default %(default)s")
    p.add_argument("--skip-unet", action="store_true", help="no UNet evaluation (no preview-cost ratio)")
    p.add_argument("--full", action="store_true", help="run the full tiled VAE too (else reuse bench/vae_full.py's "
                                                       "latest rpi-lowmem result)")
    p.add_argument("--no-cgroup", action="store_true")
    args = p.parse_args(argv)
    bands = [int(b) for b in args.bands.split(",")]

    RUNS.mkdir(parents=True, exist_ok=True)
    log(f"engine kernels: {require_c_kernels()}")
    log(f"slowframe tiny decoder benchmark - {time.strftime('%Y-%m-%d %H:%M:%S')}, {platform.node()}, "
        f"{os.cpu_count()} CPUs; 1024x1024 (128x128 latents), rpi-lowmem")
    import vae_full

    ensure_weights()
    RUNS.mkdir(parents=True, exist_ok=True)
    vae_full.RUNS.mkdir(parents=True, exist_ok=True)
    latent = vae_full.ensure_latent()

    cases = [run_tiny(latent, b, f"tiny-bands{b or 'auto'}") for b in bands]
    half = run_tiny(latent, 0, "tiny-half", pool=2)
    why = "--no-cgroup" if args.no_cgroup else cgroup_unavailable_reason()
    cg = None
    if why:
        log(f"[cgroup] not used: {why}")
    else:
        def in_cgroup(procs: Path) -> tuple[int, dict]:
            r = run_tiny(latent, 0, "tiny-cgroup", procs)
            return r["rc"], r
        rc, cg_res, cg = run_in_cgroup(in_cgroup, CGROUP_NAME)
        log(f"[cgroup] tiny decoder in 256 MiB: {describe_cgroup(cg, rc)}")
    unet = None if args.skip_unet else run_unet(args)
    again = run_tiny(latent, 0, "tiny-bandsauto-again") if unet else None
    half_again = run_tiny(latent, 0, "tiny-half-again", pool=2) if unet else None
    full = full_vae(args, latent)

    log("")
    log("== results (MB = 10^6 bytes; peak RSS = the case's own VmHWM; load = 1-minute load average on 2 cores)")
    for r in cases + [half] + ([again, half_again] if again else []):
        if r["completed"]:
            log(f"  {r['label']:24s} {r['decode_s']:7.1f} s  cpu {r['cpu_s']:7.1f} s  peak RSS "
                f"{r['mem']['vmhwm_bytes'] / MB:5.0f} MB  load {r['load_average'][0]:.1f}")
    if cg is not None:
        log(f"  tiny in the 256 MiB cgroup: {describe_cgroup(cg, cg_res['rc'])}")
    if full:
        log(f"  full tiled VAE (bench/vae_full.py, {full.get('ran_at', '?')}{', cached' if full.get('cached') else ''})"
            f": {full['decode_s']:.1f} s, {full['tiles']} tiles, peak RSS {full['mem']['vmhwm_bytes'] / MB:.0f} MB")
    auto = next((r for r in cases if r["bands"] == 0 and r["completed"]), None)
    if full and auto:
        log(f"  tiny / full decode time: {auto['decode_s'] / full['decode_s']:.3f}"
            + (" (not interleaved: the full VAE's figure is cached)" if full.get("cached") else ""))
    ratio = None
    if unet and unet.get("completed") and auto and again and again["completed"]:
        step, step_cpu = 2 * unet["s_per_eval"], 2 * unet["eval_cpu_s"][-1]
        tiny_s = (auto["decode_s"] + again["decode_s"]) / 2
        tiny_cpu = (auto["cpu_s"] + again["cpu_s"]) / 2
        ratio = tiny_s / step
        log(f"  UNet rpi-lowmem 128x128: {unet['s_per_eval']:.1f} s/eval (cpu {step_cpu / 2:.1f} s), a step (split "
            f"CFG) {step:.1f} s; tiny decode (mean of the runs before and after) {tiny_s:.1f} s = {100 * ratio:.2f}% "
            f"of a step; in cpu seconds {100 * tiny_cpu / step_cpu:.2f}%")
        if half["completed"] and half_again["completed"]:
            half_s = (half["decode_s"] + half_again["decode_s"]) / 2
            half_cpu = (half["cpu_s"] + half_again["cpu_s"]) / 2
            log(f"  half-size preview (512x512 from 2x2-averaged latents): {half_s:.1f} s = "
                f"{100 * half_s / step:.2f}% of a step; in cpu seconds {100 * half_cpu / step_cpu:.2f}%")
    log("")
    rss = auto["mem"]["vmhwm_bytes"] / MB if auto else None
    log(f"== target: tiny decoder peak RSS <= {TARGET_RSS_MB:.0f} MB: "
        + ("not measured" if rss is None else f"{verdict(rss <= TARGET_RSS_MB)} ({rss:.0f} MB)"))
    log("== target: completes in a 256 MiB cgroup: " + ("not measured" if cg is None else verdict(cg_res["completed"])))
    log(f"== target: a tiny-decoder preview <= {100 * PREVIEW_TARGET:.0f}% of a step: "
        + ("not measured" if ratio is None else f"{verdict(ratio <= PREVIEW_TARGET)} ({100 * ratio:.2f}%)"))
    out = CACHE / f"tiny-vae-results-{time.strftime('%Y%m%d-%H%M%S')}.json"
    write_json(out, {"tiny": cases, "again": again, "half": [half, half_again], "cgroup": cg, "unet": unet,
                     "full": full})
    log(f"\nfull results: {out}")
    return 0


CHILD_KINDS = {"build": child_build, "tiny": child_tiny}

if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "_child":
        sys.exit(child_main(sys.argv[2], CHILD_KINDS))
    sys.exit(main())
