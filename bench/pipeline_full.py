#!/usr/bin/env python3
"""Benchmark of the whole pipeline: prompt -> 1024x1024 picture with full-size random SDXL
weights, as a Pi Zero 2 W runs it (`rpi-lowmem`: streamed weights, split CFG, tiled VAE).

Runs `slowframe generate --preset rpi-lowmem --res 1024x1024 --steps 2 --guidance 5
--checkpoint-dir ...` in a fresh process, inside a 256 MiB memory cgroup (page cache
included) when it can, after dropping the weights from the page cache, and prints:
peak RSS of the whole run (text encoders, UNet, tiled VAE), seconds per stage and per
step, and checkpoint overhead as a share of step time. What a picture takes on a Pi Zero 2 W
is bench/pi_projection.py's to say.

The weights come from the other benchmarks' caches (built on first use, ~7 GB):
unet/ and vae/ from bench/unet_full.py and bench/vae_full.py, the text encoders from
bench/text_full.py, assembled with symlinks into

    ${SLOWFRAME_BENCH_CACHE:-~/.cache/slowframe-bench}/sdxl-random-pipeline/

    python bench/pipeline_full.py                 # in the cgroup when root
    python bench/pipeline_full.py --no-cgroup --steps 1
    python bench/pipeline_full.py --steps 1 --decoder tiny   # the tiny decoder (bench/tiny_vae.py's) decodes
    python bench/pipeline_full.py --recipe lightning-4 --lora random   # a recipe, its LoRA applied at run time

A recipe runs its own steps and guidance (engine/sdxl/recipes.py); `--lora random` builds a
random kohya LoRA of rank 64 on every linear and convolution weight of the UNet (a
full-size stand-in for the distilled LoRAs, which are about that size) and applies it while
the weights stream, as a theme's `lora:` does.

Not run in CI.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

from harness import (CACHE, MB, cgroup_unavailable_reason, describe_cgroup, describe_drop,  # noqa: E402
                     drop_page_cache, in_cgroup, log, reset_peak_rss, run_in_cgroup)
from kernels_check import require_c_kernels  # noqa: E402

# Its own cgroup, so it can run while another benchmark holds the UNet benchmark's.
CGROUP_NAME = "slowframe-pipeline-bench"

ROOT = CACHE / "sdxl-random-pipeline"
SCHEDULER = {"_class_name": "EulerDiscreteScheduler", "num_train_timesteps": 1000, "beta_start": 0.00085,
             "beta_end": 0.012, "beta_schedule": "scaled_linear", "timestep_spacing": "leading", "steps_offset": 1,
             "prediction_type": "epsilon", "interpolation_type": "linear", "use_karras_sigmas": False}
PROMPT = ("a lighthouse on a rocky coast at dusk, dramatic clouds, oil painting, muted palette, "
          "soft light, highly detailed")

# One SDXL UNet evaluation at 1024x1024 (128x128 latents), batch 1: the op trace's GEMM
# FLOPs (bench/pi_projection.py, bench/RESULTS.md#pi-zero-2-w-projection).
UNET_TFLOP = 6.76


def ensure_model() -> None:
    import unet_full
    import vae_full

    unet_full.ensure_weights()
    vae_full.ensure_weights()
    text = CACHE / "sdxl-text-random"
    if not (text / "text_encoder_2" / "config.json").is_file():
        subprocess.run([sys.executable, str(REPO / "bench" / "text_full.py"), "--build-only"], check=True)
    ROOT.mkdir(parents=True, exist_ok=True)
    links = {"unet": CACHE / "sdxl-random" / "unet", "vae": CACHE / "sdxl-random" / "vae"}
    for name in ("text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2"):
        links[name] = text / name
    for name, target in links.items():
        link = ROOT / name
        if not link.exists():
            link.symlink_to(target)
    (ROOT / "scheduler").mkdir(exist_ok=True)
    (ROOT / "scheduler" / "scheduler_config.json").write_text(json.dumps(SCHEDULER, indent=1))


RANDOM_LORA = CACHE / "sdxl-random-lora" / "random_rank64_lora.safetensors"
LORA_RANK = 64


def ensure_random_lora() -> Path:
    """A kohya LoRA (diffusers module spelling) of rank LORA_RANK on every 2-D and 4-D weight of
    the random UNet, built once from its safetensors headers."""
    if RANDOM_LORA.is_file():
        return RANDOM_LORA
    import numpy as np
    from safetensors.numpy import save_file

    from engine.weights import TensorStore

    rng = np.random.default_rng(0)
    tensors = {}
    store = TensorStore.open(CACHE / "sdxl-random" / "unet")
    try:
        for name in store.tensors:
            shape = store.shape(name)
            if not name.endswith(".weight") or len(shape) not in (2, 4) or min(shape[:2]) < LORA_RANK:
                continue
            module = "lora_unet_" + name[:-len(".weight")].replace(".", "_")
            out, rest = shape[0], shape[1:]
            tensors[f"{module}.lora_down.weight"] = (0.01 * rng.standard_normal((LORA_RANK, *rest))).astype(np.float16)
            tensors[f"{module}.lora_up.weight"] = (0.01 * rng.standard_normal(
                (out, LORA_RANK, *((1, 1) if len(shape) == 4 else ())))).astype(np.float16)
            tensors[f"{module}.alpha"] = np.array(LORA_RANK / 2, np.float16)
    finally:
        store.close()
    RANDOM_LORA.parent.mkdir(parents=True, exist_ok=True)
    partial = RANDOM_LORA.with_suffix(".partial")
    save_file(tensors, str(partial))
    partial.replace(RANDOM_LORA)
    log(f"[lora] built {RANDOM_LORA}: {len(tensors) // 3} modules, {RANDOM_LORA.stat().st_size / 1e6:.0f} MB")
    return RANDOM_LORA


def lora_file(args: argparse.Namespace) -> Path:
    return RANDOM_LORA if args.lora == "random" else Path(args.lora)


def weight_files() -> list[Path]:
    return sorted(p.resolve() for p in ROOT.glob("*/*.safetensors"))


def child(argv: list[str], result: Path) -> int:
    """Runs in the measured process: the CLI, then its peak RSS, whole and per stage (the
    high-water mark is read and reset where the text encoders start and end and where the
    VAE starts and ends)."""
    from engine.sdxl.pipeline import Pipeline
    from engine.trace import peak_rss_bytes
    from frame.cli import main

    stages: dict[str, int] = {}

    def stage_ends(name: str) -> None:
        stages[name] = max(stages.get(name, 0), peak_rss_bytes())
        reset_peak_rss()

    def measured(method, name: str, before: str):
        def run(*args, **kwargs):
            stage_ends(before)
            try:
                return method(*args, **kwargs)
            finally:
                stage_ends(name)
        return run

    Pipeline.conditioning = measured(Pipeline.conditioning, "text encoders", "start")
    Pipeline.decode = measured(Pipeline.decode, "vae", "unet")
    started = time.perf_counter()
    rc = main(argv)
    stage_ends("end")
    result.write_text(json.dumps({"rc": rc, "peak_rss_bytes": max(stages.values()), "stage_peak_rss_bytes": stages,
                                  "wall_s": time.perf_counter() - started}))
    return rc


def run(args: argparse.Namespace, procs: Path | None) -> tuple[int, dict]:
    work = CACHE / "-".join(["pipeline-run"] + ([args.decoder] if args.decoder != "full" else [])
                            + ([args.recipe] if args.recipe else []))
    work.mkdir(parents=True, exist_ok=True)
    result = work / "result.json"
    result.unlink(missing_ok=True)
    argv = ["generate", "--models-path", str(ROOT), "--prompt", PROMPT, "--neg-prompt", "blurry, text",
            "--preset", args.preset, "--res", f"{args.size}x{args.size}", "--seed", "1",
            "--output", str(work / "out.png"), "--checkpoint-dir", str(work / "ckpt"), "--restart", "--json"]
    if args.recipe:
        argv += ["--recipe", args.recipe] + (["--steps", str(args.steps)] if args.steps else [])
    else:
        argv += ["--steps", str(args.steps or 2), "--guidance", "5"]
    if args.lora:
        argv += ["--lora", str(lora_file(args))]
    if args.decoder == "tiny":
        import tiny_vae

        tiny_vae.ensure_weights()
        argv += ["--decoder", "tiny", "--tiny-vae", str(tiny_vae.TINY_DIR)]
    cmd = [sys.executable, str(Path(__file__).resolve()), "_child", str(result), json.dumps(argv)]
    if procs is not None:
        cmd = in_cgroup(cmd, procs)
    events = []
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, text=True)
    for line in proc.stdout:
        events.append(json.loads(line))
        if events[-1]["event"] == "progress":
            e = events[-1]
            log(f"  evaluation {e['evaluation']}/{e['evaluations']}, step {e['step']}/{e['steps']}, "
                f"{e['seconds_per_step']} s/step")
    rc = proc.wait()
    res = json.loads(result.read_text()) if result.is_file() else {}
    res["events"] = events
    return rc, res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=None, help="default: the recipe's, else 2")
    p.add_argument("--recipe", default=None, help="a recipe (engine/sdxl/recipes.py): its steps and guidance")
    p.add_argument("--lora", default=None, metavar="FILE|random",
                   help="a LoRA applied at run time; random: a rank-64 LoRA on every UNet weight (built once)")
    p.add_argument("--size", type=int, default=1024, help="picture width and height (default %(default)s)")
    p.add_argument("--preset", default="rpi-lowmem")
    p.add_argument("--no-cgroup", action="store_true")
    p.add_argument("--decoder", choices=("full", "tiny"), default="full",
                   help="tiny: bench/tiny_vae.py's random TAESDXL decodes the picture instead of the tiled VAE")
    args = p.parse_args(argv)

    log(f"engine kernels: {require_c_kernels()}")
    ensure_model()
    if args.lora == "random":
        ensure_random_lora()
    for f in weight_files() + ([lora_file(args)] if args.lora else []):
        drop = drop_page_cache(f)
    log(f"[cache] dropped the page cache of {len(weight_files())} weight files ({describe_drop(drop)} for the last)")
    reason = None if args.no_cgroup else cgroup_unavailable_reason()
    started = time.perf_counter()
    if args.no_cgroup or reason:
        if reason:
            log(f"[cgroup] not used: {reason}")
        rc, res = run(args, None)
        cg = None
    else:
        name = "-".join([CGROUP_NAME] + ([args.decoder] if args.decoder != "full" else [])
                        + ([args.recipe] if args.recipe else []))   # runs side by side
        rc, res, cg = run_in_cgroup(lambda procs: run(args, procs), name)
        log(f"[cgroup] {describe_cgroup(cg, rc)}")
    wall = time.perf_counter() - started
    done = [e for e in res.get("events", []) if e["event"] == "done"]
    if rc != 0 or not done:
        log(f"FAILED: exit {rc}")
        return 1
    done = done[0]
    last = [e for e in res["events"] if e["event"] == "progress"][-1]
    steps, evaluations = last["steps"], last["evaluations"]
    step_s = done["seconds_per_step"]
    ckpt_share = done["checkpoint_seconds"] / (step_s * steps)
    unet_s = step_s * steps
    other_s = res["wall_s"] - unet_s
    evals_per_step = evaluations / steps
    achieved = f" ({UNET_TFLOP * 1e3 * evals_per_step / step_s:.0f} GFLOP/s achieved here)" if args.size == 1024 else ""
    log("")
    log(f"preset {args.preset}, decoder {args.decoder}, {args.size}x{args.size}, "
        + (f"recipe {args.recipe}, " if args.recipe else "guidance 5, ")
        + (f"LoRA {args.lora} at run time, " if args.lora else "")
        + f"{steps} steps ({evals_per_step:g} UNet evaluations per step), whole run {wall:.0f} s")
    log(f"peak RSS of the run: {res['peak_rss_bytes'] / MB:.1f} MB (target <= 250 MB)"
        + (f"; in the 256 MiB cgroup: {describe_cgroup(cg, rc)}" if cg else ""))
    log("peak RSS by stage: " + ", ".join(f"{name} {peak / MB:.1f} MB"
                                          for name, peak in res["stage_peak_rss_bytes"].items()))
    log(f"UNet: {step_s:.1f} s/step{achieved}; text encoders + decoder + load: "
        f"{other_s:.0f} s")
    log(f"checkpoint overhead: {done['checkpoint_seconds']:.3f} s in {steps} steps = {ckpt_share * 100:.3f}% "
        f"of step time (target <= 1%)")
    log("a Pi Zero 2 W's time for a picture: bench/pi_projection.py")
    out = CACHE / f"pipeline-results-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"args": vars(args), "rc": rc, "result": res, "cgroup": cg, "wall_s": wall}, indent=1))
    log(f"results: {out}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_child":
        sys.exit(child(json.loads(sys.argv[3]), Path(sys.argv[2])))
    sys.exit(main())
