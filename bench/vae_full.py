#!/usr/bin/env python3
"""Benchmark of the VAE decoder: a full-size SDXL VAE decoding a 128x128 latent (1024x1024).

Measures slowframe's tiled decode (engine.sdxl.VAEDecoder, 25 tiles of 32x32 latents)
in rpi-lowmem: seconds per tile and in total, peak RSS, and whether it completes in a
256 MiB cgroup v1 memory limit (page cache included). Compares with diffusers'
AutoencoderKL in fp32 on the CPU, untiled and tiled (tile sizes set to SDXL's 256
pixels, or it would not tile at 1024x1024): Pearson correlation of the pictures, and
the seam ratio of engine.sdxl.tiles.seam_ratio (mean pixel step across tile borders
over the mean step across other latent-cell boundaries; ~1 means no seam).

It needs no downloaded model: on first use it builds random SDXL-shaped AutoencoderKL
weights (torch.manual_seed(0), diffusers' default init, float16, 167 MB) in diffusers
layout under

    ${SLOWFRAME_BENCH_CACHE:-~/.cache/slowframe-bench}/sdxl-random/vae/

The latent is smooth random noise (a coarse grid, bilinearly interpolated) divided by
the scaling factor, as a pipeline passes it. Random weights make a noise-like picture:
the figures measure speed, memory and agreement, not beauty. Every case runs in a
fresh subprocess so peak RSS is its own. Not run in CI. From the repository root:

    python bench/vae_full.py                  # everything (~10-20 min on 2 cores)
    python bench/vae_full.py --skip-diffusers --no-cgroup
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repo's engine, if not installed
import engine  # noqa: E402,F401  (it sets OpenBLAS's thread spin: bench/RESULTS.md#threads)
import numpy as np  # noqa: E402

from engine.atomic import atomic_folder  # noqa: E402
from harness import (CACHE, MB, REPO, child_main, compare, cgroup_unavailable_reason, describe_cgroup,  # noqa: E402
                     describe_drop, describe_rc, drop_page_cache, log, memory_figures, read_json, run_child,
                     run_in_cgroup, verdict, write_json)
from kernels_check import require_c_kernels  # noqa: E402  (bench/, the script's own folder)

SCRIPT = Path(__file__).resolve()

VAE_DIR = CACHE / "sdxl-random" / "vae"
WEIGHTS_NAME = "diffusion_pytorch_model.fp16.safetensors"
RUNS = CACHE / "vae-runs"
LATENT = (128, 128)
TILE, OVERLAP = 32, 8
TARGET_RSS_MB = 250.0

# stabilityai/stable-diffusion-xl-base-1.0, vae/config.json
SDXL_VAE_CONFIG = {
    "act_fn": "silu",
    "block_out_channels": [128, 256, 512, 512],
    "down_block_types": ["DownEncoderBlock2D"] * 4,
    "in_channels": 3,
    "latent_channels": 4,
    "layers_per_block": 2,
    "norm_num_groups": 32,
    "out_channels": 3,
    "sample_size": 1024,
    "scaling_factor": 0.13025,
    "up_block_types": ["UpDecoderBlock2D"] * 4,
    "force_upcast": True,
}


# ----------------------------------------------------------------------------- weights and latent


def ensure_weights() -> None:
    if (VAE_DIR / WEIGHTS_NAME).is_file() and (VAE_DIR / "config.json").is_file():
        log(f"[weights] using {VAE_DIR}")
        return
    with atomic_folder(VAE_DIR) as tmp:
        log(f"[weights] building random SDXL VAE weights in {tmp}")
        rc, res, wall = run_child(SCRIPT, {"kind": "build", "out": str(tmp), "result": str(CACHE / "vae-build.json")})
        res = res or {}
        if rc != 0 or res.get("error"):
            raise SystemExit(f"[weights] build failed ({describe_rc(rc)})\n{res.get('error', '')}")
    log(f"[weights] {res['params']:,} parameters ({res['decoder_params']:,} in the decoder) in {wall:.0f} s")


def child_build(spec: dict) -> dict:
    import torch
    from diffusers import AutoencoderKL

    torch.manual_seed(0)
    model = AutoencoderKL(**SDXL_VAE_CONFIG)
    model.half().save_pretrained(spec["out"], variant="fp16")
    decoder = sum(p.numel() for n, p in model.named_parameters() if n.startswith(("decoder.", "post_quant_conv.")))
    return {"params": sum(p.numel() for p in model.parameters()), "decoder_params": decoder}


def ensure_latent() -> Path:
    """Smooth noise: random values on a 17x17 grid, bilinearly interpolated to 128x128, / scaling."""
    path = RUNS / "latent-128x128.npy"
    if not path.is_file():
        rng = np.random.default_rng(20240601)
        coarse = rng.standard_normal((4, 17, 17))
        pos = np.linspace(0, 16, LATENT[0])
        i = np.minimum(pos.astype(int), 15)
        f = pos - i
        rows = coarse[:, i] * (1 - f)[None, :, None] + coarse[:, i + 1] * f[None, :, None]
        z = rows[:, :, i] * (1 - f)[None, None, :] + rows[:, :, i + 1] * f[None, None, :]
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, (z[None] / SDXL_VAE_CONFIG["scaling_factor"]).astype(np.float32))
    return path


# ----------------------------------------------------------------------------- cases


def child_engine(spec: dict) -> dict:
    sys.path.insert(0, str(REPO))
    from engine.sdxl import VAEDecoder
    from engine.sdxl.tiles import Tiling

    mem_import = memory_figures()
    z = np.load(spec["latent"])
    t0 = time.perf_counter()
    with VAEDecoder.load(str(VAE_DIR), preset=spec["preset"], tile_size=TILE, tile_overlap=OVERLAP) as vae:
        load_s = time.perf_counter() - t0
        t1, c1 = time.perf_counter(), time.process_time()
        x = vae.decode(z, tiled=spec["tiled"])
        decode_s, cpu_s = time.perf_counter() - t1, time.process_time() - c1
    np.save(spec["output"], x)
    tiles = len(Tiling(TILE, OVERLAP).grid(*z.shape[2:])) if spec["tiled"] else 1
    return {"load_s": load_s, "decode_s": decode_s, "cpu_s": cpu_s, "tiles": tiles, "mem_after_import": mem_import,
            "mem": memory_figures()}


def child_diffusers(spec: dict) -> dict:
    import torch
    from diffusers import AutoencoderKL

    torch.set_num_threads(spec["threads"])
    z = torch.from_numpy(np.load(spec["latent"]))
    vae = AutoencoderKL.from_pretrained(str(VAE_DIR), variant="fp16", torch_dtype=torch.float32).eval()
    tiles = 1
    if spec["tiled"]:
        vae.enable_tiling()
        vae.tile_sample_min_size = TILE * 8
        vae.tile_latent_min_size = TILE
        step = int(TILE * (1 - vae.tile_overlap_factor))
        tiles = len(range(0, z.shape[2], step)) * len(range(0, z.shape[3], step))
    t0, c0 = time.perf_counter(), time.process_time()
    with torch.inference_mode():
        x = vae.decode(z).sample
    decode_s, cpu_s = time.perf_counter() - t0, time.process_time() - c0
    np.save(spec["output"], x.numpy())
    return {"decode_s": decode_s, "cpu_s": cpu_s, "tiles": tiles, "threads": torch.get_num_threads(),
            "mem": memory_figures()}


# What each case runs: (child kind, label, spec). Results and pictures are kept in RUNS, so
# a later run with --cases can redo some cases and still compare with the others.
CASES = {
    "lowmem": ("engine", "engine-rpi-lowmem-tiled", {"preset": "rpi-lowmem", "tiled": True}),
    "default-tiled": ("engine", "engine-default-tiled", {"preset": "default", "tiled": True}),
    "default": ("engine", "engine-default-untiled", {"preset": "default", "tiled": False}),
    "diffusers": ("diffusers", "diffusers-fp32-untiled", {"tiled": False}),
    "diffusers-tiled": ("diffusers", "diffusers-fp32-tiled", {"tiled": True}),
}
DEFAULT_CASES = ("lowmem", "default", "diffusers", "diffusers-tiled")


def run_case(key: str, latent: Path, args, cgroup_procs: Path | None = None) -> dict:
    kind, label, spec = CASES[key]
    spec = dict(spec, kind=kind, latent=str(latent), threads=args.torch_threads,
                output=str(RUNS / f"{label}.npy"), result=str(RUNS / f"{label}.child.json"))
    Path(spec["output"]).unlink(missing_ok=True)
    if kind == "engine":
        log(f"[{label}] {describe_drop(drop_page_cache(VAE_DIR / WEIGHTS_NAME))}")
    rc, res, wall = run_child(SCRIPT, spec, cgroup_procs=cgroup_procs)
    res = res or {}
    res.update(label=label, rc=rc, wall_s=wall, completed=rc == 0 and not res.get("error"), output=spec["output"],
               ran_at=time.strftime("%Y-%m-%d %H:%M:%S"), load_average=os.getloadavg())
    if res["completed"]:
        log(f"[{label}] {res['decode_s']:.1f} s, {res['tiles']} tile(s), "
            f"peak RSS {res['mem']['vmhwm_bytes'] / MB:.0f} MB")
    else:
        log(f"[{label}] FAILED: {describe_rc(rc)}\n{res.get('error', '')}")
    return res


def run_lowmem_in_cgroup(latent: Path, args) -> dict:
    def in_cgroup(procs: Path) -> tuple[int, dict]:
        r = run_case("lowmem", latent, args, procs)
        return r["rc"], r

    rc, res, st = run_in_cgroup(in_cgroup)
    res["cgroup"] = st
    log(f"[cgroup] rpi-lowmem tiled in 256 MiB: {describe_cgroup(st, rc)}")
    return res


def cached(key: str) -> dict | None:
    res = read_json(RUNS / f"{CASES[key][1]}.json")
    if res and res.get("completed") and Path(res["output"]).is_file():
        res["cached"] = True
        return res
    return None


def seam(path: str) -> float:
    sys.path.insert(0, str(REPO))
    from engine.sdxl.tiles import Tiling, seam_ratio

    return seam_ratio(np.load(path)[0], Tiling(TILE, OVERLAP), 8)


# ----------------------------------------------------------------------------- main


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", default=",".join(DEFAULT_CASES),
                   help=f"cases to run, of {', '.join(CASES)} (default %(default)s); the others' latest "
                        "results are reused when there are any")
    p.add_argument("--no-cgroup", action="store_true", help="run rpi-lowmem outside the 256 MiB cgroup")
    p.add_argument("--torch-threads", type=int, default=2)
    args = p.parse_args(argv)
    selected = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in selected if c not in CASES]
    if unknown:
        p.error(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}")

    kernels = require_c_kernels()
    RUNS.mkdir(parents=True, exist_ok=True)
    log(f"engine kernels: {kernels}")
    log(f"slowframe VAE benchmark - {time.strftime('%Y-%m-%d %H:%M:%S')}, {platform.node()}, {os.cpu_count()} CPUs, "
        f"numpy {np.__version__}; latent {LATENT[0]}x{LATENT[1]}, tiles {TILE} latents, overlap {OVERLAP}")
    ensure_weights()
    latent = ensure_latent()

    why = None if args.no_cgroup else cgroup_unavailable_reason()
    if why and "lowmem" in selected:
        log(f"[cgroup] SKIPPED: {why}")
    use_cgroup = not args.no_cgroup and why is None
    cases: dict[str, dict] = {}
    for key in CASES:
        if key not in selected:
            if (res := cached(key)) is not None:
                cases[key] = res
            continue
        res = run_lowmem_in_cgroup(latent, args) if key == "lowmem" and use_cgroup else run_case(key, latent, args)
        write_json(RUNS / f"{CASES[key][1]}.json", res)
        cases[key] = res
    done = {k: v for k, v in cases.items() if v.get("completed")}

    log("")
    log("== results (MB = 10^6 bytes; peak RSS = VmHWM of the case's own process; load = the machine's 1-minute "
        "load average when the case ended, on 2 cores; seam ratio at slowframe's tile borders, see "
        "engine/sdxl/tiles.py)")
    for key, r in cases.items():
        if key not in done:
            log(f"  {r['label']:26s} FAILED ({describe_rc(r['rc'])})")
            continue
        per_tile = f"{r['tiles']:3d} tiles {r['decode_s'] / r['tiles']:6.2f} s/tile" if r["tiles"] > 1 else " " * 24
        cg = f", cgroup max usage {r['cgroup']['max_usage_in_bytes'] / MB:.0f} MB" if r.get("cgroup") else ""
        log(f"  {r['label']:26s} {r['decode_s']:7.1f} s (cpu {r['cpu_s']:6.1f} s) {per_tile}  "
            f"peak RSS {r['mem']['vmhwm_bytes'] / MB:5.0f} MB  seam ratio {seam(r['output']):.3f}  "
            f"load {r['load_average'][0]:.1f}{cg}{' (cached ' + r['ran_at'] + ')' if r.get('cached') else ''}")

    def pcc(a: str, b: str) -> str:
        if a not in done or b not in done:
            return "not measured"
        c = compare(done[a]["output"], done[b]["output"])
        return f"PCC {c['pcc']:.6f}, max|diff| {c['max_abs']:.3g}"

    log(f"  engine default untiled vs diffusers untiled:  {pcc('default', 'diffusers')}")
    log(f"  engine rpi-lowmem tiled vs engine untiled:    {pcc('lowmem', 'default')}")
    log(f"  engine rpi-lowmem tiled vs default tiled:     {pcc('lowmem', 'default-tiled')}")
    log(f"  engine rpi-lowmem tiled vs diffusers tiled:   {pcc('lowmem', 'diffusers-tiled')}")
    log(f"  diffusers tiled vs diffusers untiled:         {pcc('diffusers-tiled', 'diffusers')}")
    for key in ("lowmem", "default-tiled"):
        if key in done and "diffusers-tiled" in done:
            log(f"  {CASES[key][1]} time / diffusers tiled time: "
                f"{done[key]['decode_s'] / done['diffusers-tiled']['decode_s']:.2f}x")
    lm = done.get("lowmem")
    rss = lm["mem"]["vmhwm_bytes"] / MB if lm else None
    log("")
    log(f"== target: rpi-lowmem tiled peak RSS <= {TARGET_RSS_MB:.0f} MB: "
        + ("not measured" if rss is None else f"{verdict(rss <= TARGET_RSS_MB)} ({rss:.0f} MB)"))
    in_cgroup = cases.get("lowmem", {}).get("cgroup")
    log("== target: completes inside a 256 MiB memory cgroup: "
        + ("not measured" if not in_cgroup else verdict(bool(lm))))
    out = CACHE / f"vae-results-{time.strftime('%Y%m%d-%H%M%S')}.json"
    write_json(out, cases)
    log(f"\nfull results: {out}")
    return 0


CHILD_KINDS = {"build": child_build, "engine": child_engine, "diffusers": child_diffusers}

if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "_child":
        sys.exit(child_main(sys.argv[2], CHILD_KINDS))
    sys.exit(main())
