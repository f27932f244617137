#!/usr/bin/env python3
"""Benchmark of the engine core: one full-size SDXL UNet evaluation.

Compares slowframe's streaming numpy UNet (engine.sdxl.UNet) with diffusers'
UNet2DConditionModel in float32 on the CPU: seconds per evaluation, peak RSS,
and the agreement of the outputs (Pearson correlation, max abs diff). It also
runs the rpi-lowmem case inside a 256 MiB cgroup v1 memory limit, page cache
included, which is what the Pi Zero 2 W leaves us.

It needs no downloaded model: on first use it builds random SDXL-base-shaped
weights (torch.manual_seed(0), diffusers' default init, stored in float16,
5.1 GB) in diffusers layout under

    ${SLOWFRAME_BENCH_CACHE:-~/.cache/slowframe-bench}/sdxl-random/unet/

Building takes ~11 GB of RAM for a few minutes; the diffusers fp32 reference
needs ~11-16 GB. Run from the repository root:

    python bench/unet_full.py                       # everything
    python bench/unet_full.py --sizes 64 --presets rpi-lowmem --no-cgroup
    python bench/unet_full.py --sizes 128 --rounds 3 --no-cgroup   # interleaved: a drifting machine
    python bench/unet_full.py --skip-diffusers --override some_option=4
    python bench/unet_full.py --build-only           # weights + inputs only
    python bench/unet_full.py --cgroup-selftest      # 100 MB / 300 MB dummies

Every measured case runs in a fresh subprocess (so peak RSS is per case); the
child entry point is the hidden subcommand `_child` of this file, which gets a
JSON spec on the command line and writes a JSON result file (bench/harness.py,
shared with the other benchmarks). Only the children import torch, diffusers or
engine.sdxl. Not run in CI.
"""

from __future__ import annotations

import argparse
import fcntl
import gc
import hashlib
import json
import os
import platform
import shutil
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repo's engine, if not installed
import engine  # noqa: E402,F401  (it sets OpenBLAS's thread spin: bench/RESULTS.md#threads)
import numpy as np  # noqa: E402

from engine.atomic import atomic_folder, publish  # noqa: E402
from harness import (CACHE, MB, REPO, child_alloc, child_main, cgroup_selftest, cgroup_unavailable_reason,  # noqa: E402
                     compare, describe_cgroup, describe_drop, describe_rc, drop_page_cache, fmt, listed_rounds, log,
                     memory_figures, page_cache_fraction, print_table, proc_io, read_json, reset_peak_rss, run_child,
                     run_in_cgroup, verdict, write_json)
from kernels_check import require_c_kernels  # noqa: E402  (bench/, the script's own folder)

SCRIPT = Path(__file__).resolve()

# SLOWFRAME_BENCH_TINY=1: a tiny UNet with SDXL's input/conditioning shapes, to smoke-test this
# script in a minute (its own weights, references and runs; figures mean nothing).
TINY = os.environ.get("SLOWFRAME_BENCH_TINY", "") not in ("", "0")
MODEL_NAME = "sdxl-tiny-random" if TINY else "sdxl-random"
MODEL_DIR = CACHE / MODEL_NAME
UNET_DIR = MODEL_DIR / "unet"
WEIGHTS_NAME = "diffusion_pytorch_model.fp16.safetensors"
BUILD_INFO_NAME = "slowframe-bench-build.json"

EXPECTED_PARAMS = 2_567_463_684
PRESETS = ("default", "rpi", "rpi-lowmem")
BATCH = 1
TIMESTEP = 500.0
INPUT_SEED = 20240601

# Targets (MB = 10**6 bytes, the stricter reading of "250 MB").
TARGET_LOWMEM_RSS_MB = 250.0
TARGET_DEFAULT_VS_DIFFUSERS = 1.0
TARGET_LOWMEM_VS_DEFAULT = 1.3

# The SDXL base 1.0 UNet config (stabilityai/stable-diffusion-xl-base-1.0, unet/config.json);
# everything not listed is UNet2DConditionModel's default, which matches that file.
SDXL_UNET_CONFIG = {
    "sample_size": 128,
    "in_channels": 4,
    "out_channels": 4,
    "center_input_sample": False,
    "flip_sin_to_cos": True,
    "freq_shift": 0,
    "down_block_types": ["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"],
    "mid_block_type": "UNetMidBlock2DCrossAttn",
    "up_block_types": ["CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"],
    "only_cross_attention": False,
    "block_out_channels": [320, 640, 1280],
    "layers_per_block": 2,
    "downsample_padding": 1,
    "mid_block_scale_factor": 1,
    "act_fn": "silu",
    "norm_num_groups": 32,
    "norm_eps": 1e-5,
    "cross_attention_dim": 2048,
    "transformer_layers_per_block": [1, 2, 10],
    "attention_head_dim": [5, 10, 20],
    "num_attention_heads": None,
    "use_linear_projection": True,
    "upcast_attention": False,
    "resnet_time_scale_shift": "default",
    "addition_embed_type": "text_time",
    "addition_time_embed_dim": 256,
    "projection_class_embeddings_input_dim": 2816,
    "time_embedding_type": "positional",
}

if TINY:
    SDXL_UNET_CONFIG = dict(SDXL_UNET_CONFIG, block_out_channels=[32, 64, 64], transformer_layers_per_block=[1, 1, 1],
                            attention_head_dim=[2, 4, 4], norm_num_groups=8)
    EXPECTED_PARAMS = None


# ----------------------------------------------------------------------------- small helpers


def parse_value(text: str):
    low = text.lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    if low in ("none", "null"):
        return None
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def parse_overrides(items: list[str]) -> dict:
    out = {}
    for item in items:
        if "=" not in item:
            raise SystemExit(f"--override expects KEY=VALUE, got {item!r}")
        key, value = item.split("=", 1)
        key = key.strip()
        if not key.isidentifier():
            raise SystemExit(f"--override key {key!r} is not a valid keyword name")
        out[key] = parse_value(value)
    return out


def file_sha256(paths) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(Path(p).name.encode())
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


# ----------------------------------------------------------------------------- step 1: weights


def weights_path() -> Path:
    return UNET_DIR / WEIGHTS_NAME


def build_info() -> dict | None:
    """The build record of a complete weights folder, or None if there is none."""
    info = read_json(UNET_DIR / BUILD_INFO_NAME)
    if not info or not (UNET_DIR / "config.json").is_file() or not weights_path().is_file():
        return None
    if weights_path().stat().st_size != info.get("weights_bytes"):
        return None
    return info


def ensure_weights() -> dict:
    info = build_info()
    if info is not None:
        log(f"[weights] using {UNET_DIR} (built {info.get('built_at')}, {info.get('params'):,} params, "
            f"generation took {info.get('total_s', 0):.0f} s)")
        return info
    MODEL_DIR.mkdir(parents=True, exist_ok=True)
    with open(MODEL_DIR / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second bench run waits for the first's build
        info = build_info()
        if info is not None:  # another run finished building while we waited for the lock
            log(f"[weights] using {UNET_DIR}, built meanwhile by another run")
            return info
        if UNET_DIR.exists():
            # Never produced by an interrupted build (the rename comes last), so leave it to a person.
            raise SystemExit(f"[weights] {UNET_DIR} exists but has no valid {BUILD_INFO_NAME} (or its weights "
                             f"file has the wrong size): not built by this script, or damaged. Remove it to rebuild.")
        with atomic_folder(UNET_DIR) as tmp:   # complete: only then does it get the real name
            log(f"[weights] building random SDXL UNet weights in {tmp} (subprocess; ~11 GB RAM, several minutes)")
            spec = {"kind": "build", "out": str(tmp), "result": str(MODEL_DIR / f"build-result-{os.getpid()}.json")}
            rc, res, wall = run_child(SCRIPT, spec)
            Path(spec["result"]).unlink(missing_ok=True)
            if rc != 0 or not res or res.get("error"):
                err = (res or {}).get("error", "")
                raise SystemExit(f"[weights] build failed ({describe_rc(rc)})\n{err}")
            res["total_s"] = wall
            write_json(tmp / BUILD_INFO_NAME, res)
        log(f"[weights] built {res['params']:,} params in {wall:.0f} s "
            f"(init {res['init_s']:.0f} s, half {res['half_s']:.0f} s, save {res['save_s']:.0f} s), "
            f"peak RSS {res['mem']['vmhwm_bytes'] / MB:.0f} MB -> {UNET_DIR}")
        if EXPECTED_PARAMS is not None and res["params"] != EXPECTED_PARAMS:
            log(f"[weights] WARNING: expected {EXPECTED_PARAMS:,} params, got {res['params']:,}")
        return build_info()


def child_build(spec: dict) -> dict:
    import torch
    from diffusers import UNet2DConditionModel

    out = Path(spec["out"])
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    t0 = time.perf_counter()
    torch.manual_seed(0)
    model = UNet2DConditionModel(**SDXL_UNET_CONFIG)
    init_s = time.perf_counter() - t0
    params = sum(p.numel() for p in model.parameters())
    t1 = time.perf_counter()
    model = model.half()
    half_s = time.perf_counter() - t1
    t2 = time.perf_counter()
    model.save_pretrained(out, variant="fp16", safe_serialization=True, max_shard_size="100GB")
    save_s = time.perf_counter() - t2
    weights = out / WEIGHTS_NAME
    if not weights.is_file():
        raise RuntimeError(f"save_pretrained did not write {weights}: {sorted(p.name for p in out.iterdir())}")
    os.chmod(weights, 0o644)
    with open(weights, "rb") as f:
        os.fsync(f.fileno())
    return {
        "params": params,
        "expected_params": EXPECTED_PARAMS,
        "init_s": init_s,
        "half_s": half_s,
        "save_s": save_s,
        "weights_bytes": weights.stat().st_size,
        "build_id": uuid.uuid4().hex,
        "built_at": time.strftime("%Y-%m-%d %H:%M:%S"),
        "torch": torch.__version__,
        "diffusers": __import__("diffusers").__version__,
        "seed": 0,
        "mem": memory_figures(),
    }


# ----------------------------------------------------------------------------- step 2: inputs

INPUT_NAMES = ("sample", "timestep", "encoder_hidden_states", "text_embeds", "time_ids")


def input_dir(h: int, w: int, batch: int) -> Path:
    return CACHE / "inputs" / f"{h}x{w}-b{batch}"


def ensure_inputs(h: int, w: int, batch: int) -> Path:
    d = input_dir(h, w, batch)
    if all((d / f"{n}.npy").is_file() for n in INPUT_NAMES):
        return d
    rng = np.random.default_rng([INPUT_SEED, h, w, batch])
    arrays = {
        "sample": rng.standard_normal((batch, 4, h, w), dtype=np.float32),
        "timestep": np.array(TIMESTEP, dtype=np.float32),
        "encoder_hidden_states": rng.standard_normal((batch, 77, 2048), dtype=np.float32),
        "text_embeds": rng.standard_normal((batch, 1280), dtype=np.float32),
        "time_ids": np.array([[h * 8, w * 8, 0, 0, h * 8, w * 8]] * batch, dtype=np.float32),
    }
    shutil.rmtree(d, ignore_errors=True)
    with atomic_folder(d) as tmp:
        for name, arr in arrays.items():
            np.save(tmp / f"{name}.npy", arr)
    log(f"[inputs] wrote {d}")
    return d


def load_inputs(d: Path) -> dict:
    arrs = {n: np.load(Path(d) / f"{n}.npy") for n in INPUT_NAMES}
    arrs["timestep"] = float(arrs["timestep"])
    return arrs


def inputs_key(d: Path) -> str:
    return file_sha256([d / f"{n}.npy" for n in INPUT_NAMES])


# ----------------------------------------------------------------------------- step 3: cases


def case_dir(h: int, w: int, batch: int) -> Path:
    d = CACHE / "runs" / MODEL_NAME / f"{h}x{w}-b{batch}"
    d.mkdir(parents=True, exist_ok=True)
    return d


def reference_key(info: dict, inputs: Path) -> dict:
    st = weights_path().stat()
    return {
        "build_id": info.get("build_id"),
        "weights_bytes": st.st_size,
        "weights_mtime_ns": st.st_mtime_ns,
        "inputs_sha256": inputs_key(inputs),
    }


def run_reference(h, w, batch, info, inputs, args) -> dict | None:
    """The diffusers fp32 case: cached when inputs/weights are unchanged."""
    d = CACHE / "reference" / MODEL_NAME / f"{h}x{w}-b{batch}"
    d.mkdir(parents=True, exist_ok=True)
    meta_path, out_path = d / "reference.json", d / "eps.npy"
    key = reference_key(info, inputs)
    cached = read_json(meta_path)
    valid = bool(cached) and cached.get("key") == key and out_path.is_file()
    same_run = valid and len(cached.get("eval_s", [])) >= args.repeats and cached.get("torch_threads") == args.torch_threads
    if valid and (args.skip_diffusers or (same_run and not args.fresh_reference)):
        log(f"[diffusers {h}x{w}] reusing cached reference from {cached.get('ran_at')} ({out_path})")
        cached["cached"] = True
        cached["output"] = str(out_path)
        return cached
    if args.skip_diffusers:
        log(f"[diffusers {h}x{w}] --skip-diffusers and no valid cached reference: no PCC / ratio for this size")
        return None
    log(f"[diffusers {h}x{w}] fp32 reference in a fresh process "
        f"(load + {args.repeats} eval{'s' if args.repeats > 1 else ''}, no warm-up)")
    spec = {"kind": "diffusers", "inputs": str(inputs), "output": str(out_path) + ".partial.npy",
            "repeats": args.repeats, "threads": args.torch_threads, "result": str(d / "result-partial.json")}
    cache_frac = page_cache_fraction(weights_path())
    rc, res, wall = run_child(SCRIPT, spec)
    if rc != 0 or not res or res.get("error") or "eval_s" not in res:
        log(f"[diffusers {h}x{w}] FAILED ({describe_rc(rc)}) {(res or {}).get('error', '')}")
        return None
    publish(spec["output"], out_path)
    res.update(key=key, ran_at=time.strftime("%Y-%m-%d %H:%M:%S"), cached=False, output=str(out_path),
               weights_cached_at_start=cache_frac, process_wall_s=wall)
    write_json(meta_path, res)
    Path(spec["result"]).unlink(missing_ok=True)
    log(f"[diffusers {h}x{w}] load {res['load_s']:.1f} s, evals {', '.join(f'{t:.1f}' for t in res['eval_s'])} s "
        f"(1st includes first-call overhead), peak RSS {res['mem']['vmhwm_bytes'] / MB:.0f} MB "
        f"(during evals {fmt((res.get('eval_peak_rss_bytes') or 0) / MB, '.0f')} MB)")
    return res


def child_diffusers(spec: dict) -> dict:
    import torch
    from diffusers import UNet2DConditionModel

    torch.set_num_threads(spec["threads"])
    x = load_inputs(Path(spec["inputs"]))
    t0 = time.perf_counter()
    model = UNet2DConditionModel.from_pretrained(str(UNET_DIR), variant="fp16", torch_dtype=torch.float32)
    model.eval()
    load_s = time.perf_counter() - t0
    gc.collect()
    mem_after_load = memory_figures()
    # Peak RSS is dominated by loading (no accelerate: a randomly initialised fp32 model plus
    # the state dict); reset VmHWM so the evaluations' own peak can be reported too.
    hwm_reset = reset_peak_rss()
    sample = torch.from_numpy(x["sample"])
    ehs = torch.from_numpy(x["encoder_hidden_states"])
    added = {"text_embeds": torch.from_numpy(x["text_embeds"]), "time_ids": torch.from_numpy(x["time_ids"])}
    eval_s, eval_cpu_s = [], []
    out = None
    with torch.inference_mode():
        for _ in range(spec["repeats"]):
            c0, w0 = time.process_time(), time.perf_counter()
            out = model(sample, x["timestep"], encoder_hidden_states=ehs, added_cond_kwargs=added).sample
            eval_s.append(time.perf_counter() - w0)
            eval_cpu_s.append(time.process_time() - c0)
    eps = out.numpy().astype(np.float32, copy=False)
    np.save(spec["output"], eps)
    warm = eval_s[1:]
    mem = memory_figures()
    eval_peak = mem["vmhwm_bytes"] if hwm_reset else None
    # whole-process peak, load included (on some kernels clear_refs resets ru_maxrss too)
    mem["vmhwm_bytes"] = max(mem["vmhwm_bytes"] or 0, mem_after_load["vmhwm_bytes"] or 0, mem["ru_maxrss_bytes"])
    return {
        "load_s": load_s,
        "eval_s": eval_s,
        "eval_cpu_s": eval_cpu_s,
        # s/eval used for ratios: median of the evaluations after the first when there are
        # any; with --repeats 1 it is the single eval, which includes first-call overhead.
        "s_per_eval": float(np.median(warm)) if warm else eval_s[0],
        "s_per_eval_includes_first_call": not warm,
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "mem_after_load": mem_after_load,
        "mem": mem,
        "eval_peak_rss_bytes": eval_peak,
        "io": proc_io(),
        "shape": list(eps.shape),
    }


def engine_label(preset: str, overrides: dict) -> str:
    if not overrides:
        return preset
    tag = hashlib.sha1(json.dumps(overrides, sort_keys=True).encode()).hexdigest()[:8]
    return f"{preset}+{tag}"


def run_engine_case(h, w, batch, preset, overrides, inputs, args, *, ops_printf=False,
                    cgroup_procs: Path | list[Path] | None = None, tag="",
                    where: str = " in the 256 MiB cgroup") -> dict:
    d = case_dir(h, w, batch)
    unet_dir = getattr(args, "unet", None) or UNET_DIR
    label = engine_label(preset, overrides) + ("" if unet_dir == UNET_DIR else f"@{unet_dir.name}") + tag
    kwargs = dict(overrides)
    if ops_printf:
        kwargs["ops_printf"] = True
    spec = {"kind": "engine", "preset": preset, "overrides": kwargs, "inputs": str(inputs), "unet_dir": str(unet_dir),
            "repeats": args.repeats, "output": str(d / f"{label}.npy"), "result": str(d / f"{label}.json")}
    Path(spec["output"]).unlink(missing_ok=True)
    for f in sorted(unet_dir.glob("*.safetensors")):   # one file; drop reports the last
        drop = drop_page_cache(f)
    where = where if cgroup_procs else ""
    log(f"[engine {h}x{w} {label}{where}] {describe_drop(drop)}")
    if ops_printf:
        log(f"[engine {h}x{w} {label}] ops_printf=True: one line per op follows (timings include the printing)")
    rc, res, wall = run_child(SCRIPT, spec, cgroup_procs=cgroup_procs)
    res = res or {}
    res.update(preset=preset, label=label, overrides=overrides, rc=rc, status=describe_rc(rc),
               page_cache=drop, process_wall_s=wall, ops_printf=ops_printf)
    res["completed"] = rc == 0 and not res.get("error") and Path(spec["output"]).is_file()
    if res["completed"]:
        res["output"] = spec["output"]
        ev = res["eval_s"]
        log(f"[engine {h}x{w} {label}{where}] load {res['load_s']:.1f} s, eval 1 {ev[0]:.1f} s, "
            f"eval 2 {fmt(res.get('s_per_eval'), '.1f')} s, peak RSS {res['mem']['vmhwm_bytes'] / MB:.0f} MB")
    else:
        err = res.get("error") or ""
        log(f"[engine {h}x{w} {label}{where}] FAILED: {describe_rc(rc)}, reached stage {res.get('stage', 'start')!r}"
            + (f"\n{err.rstrip()}" if err else ""))
    return res


def child_engine(spec: dict) -> dict:
    """Runs in the child; writes partial results after each stage, so a kill shows how far it got."""
    result_path = Path(spec["result"])
    res = {"stage": "start", "pid": os.getpid(), "mem_start": memory_figures()}
    write_json(result_path, res)
    import importlib.util

    if importlib.util.find_spec("engine") is None:
        sys.path.insert(0, str(REPO))
    from engine.sdxl import UNet

    res.update(stage="imported", mem_after_import=memory_figures())
    write_json(result_path, res)
    x = load_inputs(Path(spec["inputs"]))
    io0 = proc_io()
    t0 = time.perf_counter()
    unet = UNet.load(spec.get("unet_dir", str(UNET_DIR)), preset=spec["preset"], **spec["overrides"])
    res.update(stage="loaded", load_s=time.perf_counter() - t0, mem_after_load=memory_figures(), io_after_load=proc_io())
    write_json(result_path, res)
    eval_s, eval_cpu_s, read_bytes = [], [], []
    eps = None
    for i in range(1 + spec["repeats"]):
        r0 = proc_io().get("read_bytes", 0)
        c0, w0 = time.process_time(), time.perf_counter()
        eps = unet(x["sample"], x["timestep"], x["encoder_hidden_states"], x["text_embeds"], x["time_ids"])
        eval_s.append(time.perf_counter() - w0)
        eval_cpu_s.append(time.process_time() - c0)
        read_bytes.append(proc_io().get("read_bytes", 0) - r0)
        res.update(stage=f"eval {i + 1} done", eval_s=eval_s, eval_cpu_s=eval_cpu_s, eval_read_bytes=read_bytes,
                   mem=memory_figures())
        write_json(result_path, res)
    arr = np.asarray(eps)
    res.update(out_dtype=str(arr.dtype), shape=list(arr.shape))
    np.save(spec["output"], arr)
    if callable(getattr(unet, "close", None)):
        unet.close()
    # s/eval: the 2nd evaluation (median of evaluations 2.. with --repeats > 1)
    res.update(stage="done", s_per_eval=float(np.median(eval_s[1:])), io=proc_io(), io_start=io0, mem=memory_figures())
    return res


# ----------------------------------------------------------------------------- step 4: cgroup


def cgroup_engine_case(h, w, batch, overrides, inputs, args) -> dict:
    def fn(procs):
        r = run_engine_case(h, w, batch, "rpi-lowmem", overrides, inputs, args, cgroup_procs=procs, tag="-cgroup")
        return r["rc"], r

    rc, res, st = run_in_cgroup(fn)
    res["cgroup"] = st
    log(f"[cgroup] rpi-lowmem {h}x{w} b{batch}: {describe_cgroup(st, rc)}"
        + (f", s/eval {res['s_per_eval']:.1f}" if res.get("completed") else ""))
    return res


# ----------------------------------------------------------------------------- step 5: report


TABLE_COLUMNS = ["size", "case", "load s", "eval1 s", "s/eval", "cpu s", "peak RSS MB", "x diffusers", "PCC",
                 "max|diff|", "note"]


def cpu_s(res: dict) -> float | None:
    """CPU seconds of the evaluation(s) behind s/eval (same choice as s/eval)."""
    c = res.get("eval_cpu_s") or []
    return float(np.median(c[1:])) if len(c) > 1 else (c[0] if c else None)


def run_rounds(h, w, info, inputs, presets, overrides, ops_case, args) -> tuple[dict | None, dict]:
    """diffusers, then every preset, `args.rounds` times over. Each case's result is its
    last round's, with s_per_eval the median over rounds (round_s: each round's), peak
    RSS the highest, and x_diffusers the median of the per-round ratios to diffusers:
    cases run minutes apart compare fairly even when the machine's speed drifts."""
    refs, runs = [], {p: [] for p in presets}
    for rnd in range(args.rounds):
        if args.rounds > 1:
            log(f"[round {rnd + 1}/{args.rounds} {h}x{w}]")
        ref = run_reference(h, w, BATCH, info, inputs, args)
        refs.append(ref)
        for preset in presets:
            r = run_engine_case(h, w, BATCH, preset, overrides, inputs, args, ops_printf=ops_case == (preset, h, w))
            if ref and r.get("completed"):
                r["compare"] = compare(r["output"], ref["output"])
            runs[preset].append(r)
    ref = refs[-1] if all(refs) else None
    if ref:
        ref = dict(ref, round_s=[x["s_per_eval"] for x in refs])
        ref["s_per_eval"] = float(np.median(ref["round_s"]))
    engines = {}
    for preset, rs in runs.items():
        failed = [x for x in rs if not x.get("completed")]
        r = failed[0] if failed else rs[-1]     # one failed round fails the case
        if not failed:
            r = dict(r, round_s=[x["s_per_eval"] for x in rs])
            r["s_per_eval"] = float(np.median(r["round_s"]))
            r["mem"] = dict(r["mem"], vmhwm_bytes=max(x["mem"]["vmhwm_bytes"] for x in rs))
            if ref:
                r["round_x_diffusers"] = [x / y for x, y in zip(r["round_s"], ref["round_s"])]
                r["x_diffusers"] = float(np.median(r["round_x_diffusers"]))
        engines[preset] = r
    return ref, engines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="128,64", help="latent sizes, comma separated: N or HxW (default 128,64)")
    p.add_argument("--presets", default=",".join(PRESETS), help="engine presets (default %(default)s)")
    p.add_argument("--repeats", type=int, default=1,
                   help="diffusers: evaluations to time (1st included); engine: warm evaluations after the "
                        "1st, cold one (default 1, i.e. eval 1 and eval 2)")
    p.add_argument("--torch-threads", type=int, default=2, help="torch threads for the diffusers reference (default 2)")
    p.add_argument("--skip-diffusers", action="store_true", help="never run diffusers; reuse a cached reference only")
    p.add_argument("--fresh-reference", action="store_true", help="recompute the diffusers reference even if cached")
    p.add_argument("--rounds", type=int, default=1,
                   help="run diffusers and every preset this many times, interleaved, and judge the medians "
                        "of the per-round ratios: a machine whose speed drifts between runs then compares "
                        "cases measured minutes apart (implies --fresh-reference; default 1)")
    p.add_argument("--no-cgroup", action="store_true", help="skip the 256 MiB memory cgroup run")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="keyword override for UNet.load (int/float/bool/none/str), repeatable")
    p.add_argument("--ops-printf", metavar="PRESET:SIZE",
                   help="pass ops_printf=True to UNet.load for this one case, e.g. rpi-lowmem:64")
    p.add_argument("--unet", type=Path, metavar="DIR",
                   help="run the engine on this copy of the random UNet instead (e.g. `slowframe models quantize`'s "
                        "uint8 one), against the same diffusers reference")
    p.add_argument("--build-only", action="store_true", help="build the weights and inputs, then stop")
    p.add_argument("--cgroup-selftest", nargs="?", const="100,300", metavar="MB,MB",
                   help="check the cgroup machinery with dummy children allocating these MB (default 100,300)")
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error("--repeats must be >= 1")
    if args.rounds < 1:
        p.error("--rounds must be >= 1")
    if args.rounds > 1:
        if args.skip_diffusers:
            p.error("--rounds runs diffusers every round: it cannot go with --skip-diffusers")
        args.fresh_reference = True
    overrides = parse_overrides(args.override)
    if args.unet is not None:
        args.unet = args.unet.expanduser().resolve()
        if not (args.unet / "config.json").is_file() or not any(args.unet.glob("*.safetensors")):
            p.error(f"--unet {args.unet}: not a UNet folder (config.json and a .safetensors file); make one with "
                    f"`slowframe models quantize {UNET_DIR} DST`")

    sizes = []
    for s in args.sizes.split(","):
        s = s.strip().lower()
        if s:
            hh, _, ww = s.partition("x")
            sizes.append((int(hh), int(ww or hh)))
    presets = [s.strip() for s in args.presets.split(",") if s.strip()]
    ops_case = None
    if args.ops_printf:
        pr, _, sz = args.ops_printf.partition(":")
        hh, _, ww = sz.lower().partition("x")
        try:
            ops_case = (pr, int(hh), int(ww or hh))
        except ValueError:
            p.error("--ops-printf expects PRESET:SIZE, e.g. rpi-lowmem:64")
        if pr not in presets or (ops_case[1], ops_case[2]) not in sizes:
            p.error(f"--ops-printf case {args.ops_printf} is not among --presets/--sizes")

    CACHE.mkdir(parents=True, exist_ok=True)
    log(f"slowframe UNet benchmark - {time.strftime('%Y-%m-%d %H:%M:%S')}, {platform.node()}, "
        f"{os.cpu_count()} CPUs, python {platform.python_version()}, numpy {np.__version__}, "
        f"OPENBLAS_THREAD_TIMEOUT={os.environ.get('OPENBLAS_THREAD_TIMEOUT', 'unset')}")
    log(f"cache: {CACHE}" + ("   ** SLOWFRAME_BENCH_TINY: tiny smoke-test model, figures are meaningless **" if TINY else ""))

    if args.cgroup_selftest:
        why = cgroup_unavailable_reason()
        if why:
            log(f"[cgroup selftest] SKIPPED: {why}")
            return 0
        res = cgroup_selftest(SCRIPT, [int(x) for x in args.cgroup_selftest.split(",") if x.strip()])
        write_json(CACHE / "cgroup-selftest.json", res)
        return 0

    info = ensure_weights()
    input_dirs = {(h, w): ensure_inputs(h, w, BATCH) for h, w in sizes}
    if args.build_only:
        return 0
    kernels = require_c_kernels()
    log(f"engine kernels: {kernels}")

    rows, results, targets = [], {"sizes": {}, "overrides": overrides, "argv": sys.argv, "kernels": kernels}, []
    lowmem_cgroup = None
    for h, w in sizes:
        inputs = input_dirs[(h, w)]
        size = f"{h}x{w}"
        ref, engines = run_rounds(h, w, info, inputs, presets, overrides, ops_case, args)
        ref_s = ref.get("s_per_eval") if ref else None
        case_res = {"diffusers": ref, "engine": engines}
        results["sizes"][size] = case_res
        if ref:
            ev = ref["eval_s"]
            rows.append({"size": size, "case": "diffusers fp32", "load s": fmt(ref.get("load_s"), ".1f"),
                         "eval1 s": fmt(ev[0], ".1f"), "s/eval": fmt(ref_s, ".1f"), "cpu s": fmt(cpu_s(ref), ".1f"),
                         "peak RSS MB": fmt(ref["mem"]["vmhwm_bytes"] / MB, ".0f"), "x diffusers": "1.00",
                         "note": "; ".join(x for x in (
                             f"cached {ref.get('ran_at')}" if ref.get("cached") else None,
                             listed_rounds(ref["round_s"], ".1f", " s"),
                             "s/eval incl. first call" if ref.get("s_per_eval_includes_first_call") else None,
                             f"peak during evals {ref['eval_peak_rss_bytes'] / MB:.0f} MB"
                             if ref.get("eval_peak_rss_bytes") else None) if x)})
        for preset in presets:
            ops = ops_case == (preset, h, w)
            r = engines[preset]
            row = {"size": size, "case": r["label"]}
            if r.get("completed"):
                cmp_ = r.get("compare", {})
                row.update({"load s": fmt(r["load_s"], ".1f"), "eval1 s": fmt(r["eval_s"][0], ".1f"),
                            "s/eval": fmt(r["s_per_eval"], ".1f"), "cpu s": fmt(cpu_s(r), ".1f"),
                            "peak RSS MB": fmt(r["mem"]["vmhwm_bytes"] / MB, ".0f"),
                            "x diffusers": fmt(r.get("x_diffusers"), ".2f"),
                            "PCC": fmt(cmp_.get("pcc"), ".6f"), "max|diff|": fmt(cmp_.get("max_abs"), ".3g"),
                            "note": "; ".join(x for x in (
                                cmp_.get("note"), "ops_printf" if ops else None,
                                listed_rounds(r["round_s"], ".1f", " s")) if x)})
            else:
                row["note"] = f"FAILED: {r['status']} at {r.get('stage', 'start')!r}"
            rows.append(row)

    # cgroup
    cg_note = None
    if args.no_cgroup:
        cg_note = "skipped (--no-cgroup)"
    elif "rpi-lowmem" not in presets or (128, 128) not in sizes:
        cg_note = "skipped (needs rpi-lowmem in --presets and 128 in --sizes)"
    else:
        why = cgroup_unavailable_reason()
        if why:
            cg_note = f"skipped: {why}"
            log(f"[cgroup] SKIPPED: {why}")
        else:
            lowmem_cgroup = cgroup_engine_case(128, 128, BATCH, overrides, input_dirs[(128, 128)], args)
            results["cgroup"] = lowmem_cgroup
            ref = results["sizes"]["128x128"]["diffusers"]
            r = lowmem_cgroup
            row = {"size": "128x128", "case": r["label"] + " (256MiB cg)"}
            if r.get("completed"):
                if ref:
                    r["compare"] = compare(r["output"], ref["output"])
                cmp_ = r.get("compare", {})
                ref_s = ref.get("s_per_eval") if ref else None
                row.update({"load s": fmt(r["load_s"], ".1f"), "eval1 s": fmt(r["eval_s"][0], ".1f"),
                            "s/eval": fmt(r["s_per_eval"], ".1f"), "cpu s": fmt(cpu_s(r), ".1f"),
                            "peak RSS MB": fmt(r["mem"]["vmhwm_bytes"] / MB, ".0f"),
                            "x diffusers": fmt(r["s_per_eval"] / ref_s if ref_s else None, ".2f"),
                            "PCC": fmt(cmp_.get("pcc"), ".6f"), "max|diff|": fmt(cmp_.get("max_abs"), ".3g")})
            row["note"] = describe_cgroup(r["cgroup"], r["rc"])
            rows.append(row)

    # targets
    def eng(size, preset):
        r = results["sizes"].get(size, {}).get("engine", {}).get(preset)
        return r if r and r.get("completed") else None

    def ratio_note(ratio, per_round):
        if ratio is None:
            return "not measured"
        rounds = listed_rounds(per_round, ".2f")
        return f"{ratio:.2f}x" + (f" (median of {rounds})" if rounds else "")

    lm, df = eng("128x128", "rpi-lowmem"), eng("128x128", "default")
    ref128 = (results["sizes"].get("128x128") or {}).get("diffusers")
    v = None if lm is None else lm["mem"]["vmhwm_bytes"] / MB <= TARGET_LOWMEM_RSS_MB
    targets.append((verdict(v), f"rpi-lowmem peak RSS <= {TARGET_LOWMEM_RSS_MB:.0f} MB at 128x128 b1",
                    f"{lm['mem']['vmhwm_bytes'] / MB:.0f} MB" if lm else "not measured"))
    if lowmem_cgroup is None:
        targets.append(("n/a ", "rpi-lowmem 128x128 b1 completes in a 256 MiB memory cgroup", cg_note or ""))
    else:
        targets.append((verdict(lowmem_cgroup.get("completed")), "rpi-lowmem 128x128 b1 completes in a 256 MiB memory cgroup",
                        describe_cgroup(lowmem_cgroup["cgroup"], lowmem_cgroup["rc"])))
    ratio = df.get("x_diffusers") if (df and ref128) else None
    got = ratio_note(ratio, df.get("round_x_diffusers", []) if df else [])
    if ratio is not None and ref128.get("cached"):
        # a machine's speed drifts between runs (here by up to 1.5x within an hour): only
        # a diffusers time measured in this run makes a ratio worth a verdict
        got += (f" against a diffusers time cached at {ref128.get('ran_at')}; rerun with --fresh-reference "
                "for a same-run ratio")
        ratio = None
    targets.append((verdict(None if ratio is None else ratio <= TARGET_DEFAULT_VS_DIFFUSERS),
                    f"default s/eval <= {TARGET_DEFAULT_VS_DIFFUSERS:.1f}x diffusers fp32 at 128x128", got))
    for h, w in sizes:
        size = f"{h}x{w}"
        a, b = eng(size, "rpi-lowmem"), eng(size, "default")
        per_round = [x / y for x, y in zip(a["round_s"], b["round_s"])] if (a and b) else []
        ratio = float(np.median(per_round)) if per_round else None
        if ratio is None and size != "128x128":
            continue
        got = ratio_note(ratio, per_round)
        targets.append((verdict(None if ratio is None else ratio <= TARGET_LOWMEM_VS_DEFAULT),
                        f"rpi-lowmem s/eval <= {TARGET_LOWMEM_VS_DEFAULT:.1f}x default at {size}", got))

    log("")
    log(f"== results (batch {BATCH}; s/eval = engine eval 2 (median of warm evals with --repeats > 1), "
        f"eval 1 is cold after POSIX_FADV_DONTNEED; diffusers s/eval = median of evals after the 1st, "
        f"or the single first eval with --repeats 1; cpu s = process CPU seconds of that eval (cpu s / s/eval < threads "
        f"means the cores were shared); MB = 10^6 bytes; peak RSS = VmHWM of the case's process)")
    if overrides:
        log(f"   UNet.load overrides: {overrides}")
    print_table(TABLE_COLUMNS, rows)
    log("")
    log("== targets")
    for verdict_, what, got in targets:
        log(f"  {verdict_}  {what}: {got}")
    results["targets"] = [{"verdict": v.strip(), "target": t, "measured": g} for v, t, g in targets]
    results["table"] = rows
    out = CACHE / f"results-{time.strftime('%Y%m%d-%H%M%S')}.json"
    write_json(out, results)
    log(f"\nfull results: {out}")
    return 0


# ----------------------------------------------------------------------------- child entry point

CHILD_KINDS = {"build": child_build, "diffusers": child_diffusers, "engine": child_engine, "alloc": child_alloc}

if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "_child":
        sys.exit(child_main(sys.argv[2], CHILD_KINDS))
    sys.exit(main())
