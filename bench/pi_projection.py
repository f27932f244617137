#!/usr/bin/env python3
"""Projected Pi Zero 2 W time of a finished picture, from the FLOPs and weight bytes in the engine's op trace.

Each stage of a picture (text encoders, UNet evaluations, VAE decode) is run once on this
machine with the op trace on (`ops_printf`); the trace gives every op's FLOPs, counted from
the shapes it ran on (engine/flops.py: GEMM-like and the rest apart), and the weight bytes
it read. A recipe (steps, guidance) says how many times each stage runs. The Pi time of a
stage is then

    compute = conv GEMM FLOPs / G_conv + other GEMM FLOPs / G_matmul + the rest / G_other
    read    = weight bytes / R                                  (the microSD card)
    time    = compute + read        where weights are read when an op needs them (OnnxStream's
                                    --rpi-lowmem UNet)
            = max(compute, read) + (1 - overlap) * min(compute, read)
                                    where the kernel is asked to read the next ops' bytes
                                    ahead (our nocache provider): overlap measured on a
                                    throttled disk (bench/card_overlap.py: CARD_OVERLAP)
            = max(compute, read)    where a thread reads ahead (prefetch)

(4 Cortex-A53 cores at 1 GHz.) The GEMM-like FLOPs are split into convolutions and matrix
products (linear layers, feed-forward, attention) because the published runs say they run
at different speeds: the Turbo run, mostly VAE convolutions, is faster than one GEMM rate
fitted on the UNet-heavy 11-hour run predicts (the output says by how much). G_conv and G_matmul are calibrated on
OnnxStream's published Pi Zero 2 W times, projected the same way from the same traces:
its SDXL base 1024x1024 10-step run (about 11 h) and its SDXL-Turbo 512x512 1-step run
(29 min) fix them; its 3-step Turbo run (50 min) is left as a check. R and G_other are
stated, not fitted (CARD_READ_MB_S, OTHER_GFLOPS). Nothing here knows the slowframe
targets: the calibration only ever sees OnnxStream's figures.

Our engine's compute time per stage is OnnxStream's calibrated one scaled by the x86 ratio
(our seconds / OnnxStream's for the same stage, measured on one machine by
bench/onnxstream.py: X86_RATIOS); a stage without a measured ratio runs at OnnxStream's speed
per FLOP. Reads are not scaled: their bytes come from the trace and each engine's file formats.

Measured stage figures are cached in ${SLOWFRAME_BENCH_CACHE:-~/.cache/slowframe-bench}/
pi-projection/, keyed on the model's contents, the preset, the stage and its shape, and
engine/flops.py itself; the printable op trace of each measurement is kept beside them
(one line per op). The default model is the benchmarks' full-size random SDXL
(bench/pipeline_full.py assembles it; ~7 GB, built on first use).

    python bench/pi_projection.py                          # every standard case
    python bench/pi_projection.py --remeasure              # ignore the cache
    python bench/pi_projection.py --x86-ratio unet=0.8 --x86-ratio vae=1.1 \\
        --x86-ratio-source "bench/onnxstream.py, session N, machine M"

Not run in CI.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))
from engine.options import PRESETS  # noqa: E402  (engine before numpy: it sets OpenBLAS's thread spin)
from harness import CACHE, child_main, describe_rc, log, print_table, read_json, run_child, write_json  # noqa: E402

SCRIPT = Path(__file__).resolve()
STORE = CACHE / "pi-projection"
DEFAULT_MODEL = CACHE / "sdxl-random-pipeline"

# -- the Pi Zero 2 W, as stated ---------------------------------------------------------------
CORES, CLOCK_GHZ = 4, 1.0
# One 128-bit NEON FMLA (4 fp32 multiply-adds) issued per cycle per core: 8 FLOP/cycle
# (Arm Cortex-A53 TRM; ncnn's A53 kernels are scheduled around it). The calibrated GEMM
# figures are compared with this as a sanity check only.
PEAK_GFLOPS = CORES * CLOCK_GHZ * 8
# The BCM2837's SD host runs its 4-bit bus at 50 MHz by default: 25 MB/s raw, ~20 MB/s of
# sequential reads measured on the Pi 2/3 (same controller as the Zero 2 W;
# raspberrypi.stackexchange.com/q/43618: "~20 MB/s by default, ~40 MB/s" with
# dtparam=sd_overclock=100 and a UHS card). Stated, not fitted.
CARD_READ_MB_S = 20.0
# The ops that are not GEMMs (norms, softmax, activations, bias adds) stream their tensors
# through memory: an fp32 element read and written (8 bytes) for about 5 FLOPs (the costs
# in engine/flops.py). The RP3A0's LPDDR2 (450 MHz DDR, 32 bits) moves 3.6 GB/s at most; an
# A53 streams well under half of that, taken as 1.5 GB/s: about 1 GFLOP/s. Stated, not
# calibrated: OnnxStream's cases spend 0.2-0.3% of their FLOPs in these ops, too few to
# tell their speed apart (fitted beside one GEMM figure they come out an unphysical
# 16 MFLOP/s); at 1 GFLOP/s they are 1-2% of any projection, so its error matters little.
OTHER_GFLOPS = 1.0

# -- OnnxStream's published Pi Zero 2 W runs (README at commit 9f54639) ------------------------
# Its SDXL runs: --rpi-lowmem (UNet weights read when each op needs them, no cache and
# nothing read ahead: DiskNoCacheWeightsProvider in src/onnxstream.h; fp16
# weights, fp32 arithmetic), text encoders fp32 with the default prefetching provider, one
# run per prompt (src/sd.cpp run_te_model, batch 1); the VAE decoder fp16 weights with the
# prefetching provider, tiles of 32x32 latents; no cross-attention K/V cache, so every UNet
# evaluation reads and computes everything. Guidance: a negative prompt ("ugly, blurry"),
# two batch-1 UNet evaluations a step; Turbo: none.
ONNXSTREAM_BYTES_PER_PARAM = {"text": 4, "unet": 2, "vae": 2}
ONNXSTREAM_PROVIDER = {"text": "prefetch", "unet": "on-use", "vae": "prefetch"}
# How reads meet compute with each of our weights providers (engine/weights.py): nocache
# asks the kernel to read the next ops' bytes ahead while the cores compute; prefetch and
# ram read ahead on a thread.
OUR_PROVIDER = {"nocache": "readahead", "prefetch": "prefetch", "ram": "prefetch"}

# How much of the shorter of reading and computing hides behind the longer with our
# nocache provider's read-ahead, by read time / compute time: bench/card_overlap.py, one
# full-size random UNet evaluation in rpi-lowmem (its 8 MB read-ahead window) at 128x128,
# in the 256 MiB memory cgroup, with the disk throttled to that ratio, against the same
# evaluation unthrottled (bench/RESULTS.md#card-overlap). Each figure is the mean over the
# rounds and both evaluations (K/V computed, cached); without the memory limit, with the
# 32 MB window, and at 96x160 the means came out the same. Between the measured ratios it
# is interpolated, beyond them the nearest is taken.
CARD_OVERLAP: tuple[tuple[float, float], ...] = ((0.4, 0.95), (1.0, 0.75), (2.5, 0.87))
CARD_OVERLAP_SOURCE = ("bench/card_overlap.py, session 21, machine I: one rpi-lowmem UNet evaluation at 128x128 "
                       "in 256 MiB, the disk throttled by a blkio cgroup, 2-3 rounds")

# The x86 ratio (our compute time / OnnxStream's for the same stage on one machine), per
# stage, from bench/onnxstream.py's head-to-head in the Pi configurations on both sides
# (bench/RESULTS.md#onnxstream-head-to-head). Stages without a measured ratio (text
# encoders, the tiny decoder) run at OnnxStream's calibrated speed per FLOP. --x86-ratio
# overrides these and --x86-ratio-source says where the figures come from.
X86_RATIOS: dict[str, float] = {"unet": 0.447, "vae": 0.595}
X86_RATIOS_SOURCE = ("bench/onnxstream.py, session 20, machine I (idle): one 128x128 UNet evaluation, ours "
                     "rpi-lowmem 33.5 s against OnnxStream --rpi-lowmem 74.9 s; the 25-tile VAE decode, ours "
                     "rpi-lowmem 75.9 s against OnnxStream's tiled 127.6 s; the same weights and inputs")


PROMPT = "a lighthouse on a rocky coast at dusk, dramatic clouds, oil painting"
NEGATIVE = "ugly, blurry"
PANEL = "spectra6-7.3"


# ============================================================================== the recipes


@dataclass(frozen=True)
class Case:
    """A finished picture: who runs it, at what size, with how many steps and evaluations."""

    label: str
    engine: str                   # "slowframe" (the --preset's options) or "onnxstream"
    width: int
    height: int
    steps: int
    guidance: bool                # classifier-free guidance: a negative prompt, two UNet passes a step
    decoder: str = "vae"          # a DECODERS key: "vae" (the full tiled VAE) or "tiny"
    published_minutes: float | None = None
    source: str = ""
    role: str = ""                # "fixes": calibrates the figures; "check": compared after


def published_cases() -> list[Case]:
    src = "OnnxStream README (9f54639)"
    return [
        Case("OnnxStream SDXL base, 1024x1024, 10 steps, CFG", "onnxstream", 1024, 1024, 10, True,
             published_minutes=11 * 60, source=f"{src}: 'about 11 hours on my RPI Zero 2'", role="fixes"),
        Case("OnnxStream SDXL-Turbo, 512x512, 1 step", "onnxstream", 512, 512, 1, False,
             published_minutes=29, source=f"{src}: '29 minutes (1 step)'", role="fixes"),
        Case("OnnxStream SDXL-Turbo, 512x512, 3 steps", "onnxstream", 512, 512, 3, False,
             published_minutes=50, source=f"{src}: '50 minutes' (3 steps)", role="check"),
    ]


def our_cases(panel_size: tuple[int, int]) -> list[Case]:
    w, h = panel_size
    return [
        Case(f"lightning-4 / dmd2 (4 steps, no CFG), {w}x{h} (7.3\" panel bucket), tiled VAE", "slowframe", w, h, 4,
             False),
        Case(f"lightning-4 / dmd2 (4 steps, no CFG), {w}x{h}, tiny decoder", "slowframe", w, h, 4, False,
             decoder="tiny"),
        Case("SDXL base, 1024x1024, 10 steps, CFG, tiled VAE", "slowframe", 1024, 1024, 10, True),
        Case("SDXL base, 1024x1024, 10 steps, CFG, tiny decoder", "slowframe", 1024, 1024, 10, True, decoder="tiny"),
    ]


def recipe_cases(panel_size: tuple[int, int]) -> list[Case]:
    """Every recipe (engine/sdxl/recipes.py) at its own steps and guidance, with each decoder: at the
    panel's bucket, or at the size its model was trained at when that is not SDXL's 1024x1024 (Turbo)."""
    from engine.sdxl.recipes import RECIPES

    cases = []
    for r in RECIPES.values():
        w, h = panel_size if r.size == (1024, 1024) else r.size
        for decoder in DECODERS:
            cases.append(Case(f"recipe {r.name}", "slowframe", w, h, r.steps, r.guidance > 1, decoder=decoder))
    return cases


# ============================================================================== measuring


def _flops_version() -> str:
    return hashlib.sha256((REPO / "engine" / "flops.py").read_bytes()).hexdigest()[:12]


def measurement_key(fingerprint: str, preset: str, stage: str, shape: dict) -> str:
    text = json.dumps({"model": fingerprint, "preset": preset, "stage": stage, "shape": shape,
                       "flops": _flops_version()}, sort_keys=True)
    return f"{stage}-" + "-".join(f"{k}{v}" for k, v in sorted(shape.items())) + "-" + \
        hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Decoder:
    """A way to turn latents into the picture: the stage it is traced as, the shape one
    traced pass decodes, and how many such passes a picture of lh x lw latents takes."""

    stage: str
    label: str
    unit: str                               # what one pass decodes: "tile", "picture"
    shape: Callable[[int, int], dict]
    passes: Callable[[int, int], int]


def _tile_shape(lh: int, lw: int) -> dict:
    from engine.sdxl.tiles import Tiling

    size = Tiling().size
    return {"h": min(size, lh), "w": min(size, lw)}


def _tiles(lh: int, lw: int) -> int:
    from engine.sdxl.tiles import Tiling

    return len(Tiling().grid(lh, lw))


# Every tile of the tiled VAE has the same shape, so one traced tile stands for all. The
# tiny decoder (TAESDXL) decodes the whole picture in bands that add no FLOPs: one pass.
DECODERS = {"vae": Decoder("vae", "VAE decode", "tile", _tile_shape, _tiles),
            "tiny": Decoder("tiny", "tiny decoder", "picture", lambda lh, lw: {"h": lh, "w": lw}, lambda lh, lw: 1)}
STAGES = ("text", "unet", *(d.stage for d in DECODERS.values()))   # what an x86 ratio can be given for


def stage_shapes(case: Case, cfg_batch: bool) -> dict[str, dict]:
    """The shape each stage of `case` runs at (what a measurement is keyed on)."""
    lh, lw = case.height // 8, case.width // 8
    if case.engine == "onnxstream":
        prompts, batch = 1, 1             # one text-encoder run per prompt, batch-1 UNet passes
    else:
        prompts = 2 if case.guidance else 1
        batch = 2 if case.guidance and cfg_batch else 1
    decoder = DECODERS[case.decoder]
    return {"text": {"prompts": prompts}, "unet": {"h": lh, "w": lw, "batch": batch},
            decoder.stage: decoder.shape(lh, lw)}


class Tracer:
    """A stage's op records, summed per pass, and its printable trace (one line per op)."""

    def __init__(self, stream):
        self.stream = stream
        self.records: list = []
        self.passes: list[dict] = []

    def watch(self, model) -> None:
        model.trace.stream = self.stream
        model.trace.on_op = self.records.append

    def run(self, label: str, work: Callable[[], object]) -> None:
        print(f"== {label}", file=self.stream)
        self.records.clear()
        work()
        self.add_pass(label)

    def add_pass(self, label: str, skipped: set[str] = frozenset()) -> None:
        """The last run's records as a pass, without the ops named in `skipped`: sums per op kind."""
        kinds: dict[str, dict] = {}
        for r in self.records:
            if r.name not in skipped:
                k = kinds.setdefault(r.kind, {"gemm": 0, "other": 0, "bytes": 0, "seconds": 0.0, "ops": 0})
                for key, value in (("gemm", r.flops.gemm), ("other", r.flops.other), ("bytes", r.weight_bytes),
                                   ("seconds", r.seconds), ("ops", 1)):
                    k[key] += value
        self.passes.append({"label": label, "kinds": kinds})


def trace_text(root: Path, preset: str, shape: dict, tracer: Tracer) -> list:
    from engine.sdxl.conditioning import TextEncoders

    with TextEncoders.load(root, preset, cache=False, ops_printf=True) as encoders:
        for e in encoders.encoders:
            tracer.watch(e)
        tracer.run("text encoders", lambda: encoders.encode(PROMPT, NEGATIVE if shape["prompts"] == 2 else None))
        return [e.store for e in encoders.encoders]


def trace_unet(root: Path, preset: str, shape: dict, tracer: Tracer) -> list:
    import numpy as np

    from engine.sdxl.unet import UNet

    rng = np.random.default_rng(0)
    with UNet.load(root / "unet", preset, ops_printf=True) as unet:
        tracer.watch(unet)
        cfg, b, h, w = unet.config, shape["batch"], shape["h"], shape["w"]
        x = rng.standard_normal((b, cfg.in_channels, h, w)).astype(np.float32)
        ctx = rng.standard_normal((b, 77, cfg.down[0].cross_dim)).astype(np.float32)
        text = rng.standard_normal((b, cfg.add_in_dim - 6 * cfg.add_time_dim)).astype(np.float32)
        ids = np.tile(np.array([[h * 8, w * 8, 0, 0, h * 8, w * 8]], np.float32), (b, 1))
        tracer.run("K/V computed", lambda: unet(x, 500.0, ctx, text, ids))
        # The next evaluations of the same conditioning (where the preset caches K/V) run
        # the same ops on the same shapes but the cross-attention K/V projections, which
        # the cached plan leaves out: their figures are the first's without those ops
        # (tests/engine/test_flops.py pins that), so a second evaluation is not traced.
        skipped = {n.rsplit(".", 1)[0] for g in set(unet.plans[False]) - set(unet.plans[True]) for n in g}
        tracer.add_pass("K/V cached", skipped if unet.options.cross_kv_cache else set())
        return [unet.store]


def trace_vae_tile(root: Path, preset: str, shape: dict, tracer: Tracer) -> list:
    import numpy as np

    from engine.sdxl.vae import VAEDecoder

    with VAEDecoder.load(root / "vae", preset, ops_printf=True) as vae:
        tracer.watch(vae)
        z = np.random.default_rng(0).standard_normal((1, vae.config.latent_channels, shape["h"], shape["w"]))
        tracer.run("one tile", lambda: vae.decode(z.astype(np.float32)))
        return [vae.store]


def trace_tiny(root: Path, preset: str, shape: dict, tracer: Tracer) -> list:
    import numpy as np

    from engine.sdxl.tiny_vae import TINY_VAE, TinyVAEDecoder

    folder = root / TINY_VAE
    if not (folder / "config.json").is_file():   # the model has none: the benchmarks' random TAESDXL
        import tiny_vae

        tiny_vae.ensure_weights()
        folder = tiny_vae.TINY_DIR
    with TinyVAEDecoder.load(folder, preset, ops_printf=True) as tiny:
        tracer.watch(tiny)
        z = np.random.default_rng(0).standard_normal((1, tiny.config.latent_channels, shape["h"], shape["w"]))
        tracer.run("whole picture", lambda: tiny.decode(z.astype(np.float32)))
        return [tiny.store]


TRACERS: dict[str, Callable[[Path, str, dict, Tracer], list]] = {
    "text": trace_text, "unet": trace_unet, "vae": trace_vae_tile, "tiny": trace_tiny}


def child_measure(spec: dict) -> dict:
    """In a fresh process: run each requested stage with the op trace on and write its sums."""
    root, preset = Path(spec["root"]), spec["preset"]
    done = {}
    for job in spec["jobs"]:
        stage, shape, out = job["stage"], job["shape"], Path(job["out"])
        log_path = out.with_suffix(".trace.txt")
        with open(log_path, "w") as stream:
            tracer = Tracer(stream)
            stores = TRACERS[stage](root, preset, shape, tracer)
        params = sum(math.prod(s.shape(n)) for s in stores for n in s.tensors)
        stored = sum(s.tensors[n].nbytes for s in stores for n in s.tensors)
        result = {"stage": stage, "shape": shape, "preset": preset, "passes": tracer.passes,
                  "bytes_per_param": stored / params, "trace": str(log_path)}
        write_json(out, result)
        done[str(out)] = result
    return done


def measure(root: Path, preset: str, wanted: dict[str, tuple[str, dict]], remeasure: bool) -> dict[str, dict]:
    """Each wanted stage's trace sums, from the cache or measured in one fresh child process."""
    STORE.mkdir(parents=True, exist_ok=True)
    found, jobs = {}, []
    for key, (stage, shape) in wanted.items():
        cached = None if remeasure else read_json(STORE / f"{key}.json")
        if cached and not cached.get("error"):
            found[key] = cached
        else:
            jobs.append({"stage": stage, "shape": shape, "out": str(STORE / f"{key}.json")})
    if jobs:
        log(f"[measure] {len(jobs)} stage(s) to trace with preset {preset}: "
            + ", ".join(f"{j['stage']} {j['shape']}" for j in jobs) + " (minutes for the full-size model)")
        rc, res, wall = run_child(SCRIPT, {"kind": "measure", "root": str(root), "preset": preset, "jobs": jobs,
                                           "result": str(STORE / "child-result.json")})
        if rc != 0 or res is None or res.get("error"):
            raise SystemExit(f"[measure] the tracing child failed ({describe_rc(rc)}):\n"
                             f"{(res or {}).get('error', 'no result')}")
        log(f"[measure] done in {wall:.0f} s")
        for key, (stage, shape) in wanted.items():
            if key not in found:
                found[key] = read_json(STORE / f"{key}.json")
    return found


# ============================================================================== projecting


@dataclass(frozen=True)
class Figures:
    """What a Pi Zero 2 W does per second: GEMM FLOPs of convolutions and of the matrix
    products (linear layers, feed-forward, attention), the other FLOPs, card reads."""

    conv_gflops: float
    matmul_gflops: float
    other_gflops: float
    read_mb_s: float
    card_overlap: tuple[tuple[float, float], ...] = CARD_OVERLAP


def card_overlap(read_per_compute: float, measured: tuple[tuple[float, float], ...]) -> float:
    """The overlap at this read time / compute time: straight lines between the measured
    ratios, the nearest measured one beyond them."""
    points = sorted(measured)
    if not points:
        return 0.0
    if read_per_compute <= points[0][0]:
        return points[0][1]
    for (k0, o0), (k1, o1) in zip(points, points[1:]):
        if read_per_compute <= k1:
            return o0 + (o1 - o0) * (read_per_compute - k0) / (k1 - k0)
    return points[-1][1]


@dataclass
class StageRun:
    """One stage of a picture: its per-pass trace sums times how often it runs."""

    label: str
    stage: str                    # text, unet, vae, tiny: what an x86 ratio applies to
    count: int
    conv: float                   # GEMM FLOPs of the convolutions, all passes
    matmul: float                 # GEMM FLOPs of the other ops
    other: float                  # the rest
    read_bytes: float
    provider: str                 # on-use: reads add to compute; readahead: CARD_OVERLAP; prefetch: max
    ratio: float = 1.0            # x86 ratio applied to the compute time

    def compute_s(self, f: Figures) -> float:
        return self.ratio * (self.conv / f.conv_gflops + self.matmul / f.matmul_gflops
                             + self.other / f.other_gflops) / 1e9

    def read_s(self, f: Figures) -> float:
        return self.read_bytes / (f.read_mb_s * 1e6)

    def seconds(self, f: Figures) -> float:
        c, r = self.compute_s(f), self.read_s(f)
        if self.provider == "on-use" or min(c, r) == 0:
            return c + r
        if self.provider == "readahead":
            return max(c, r) + (1 - card_overlap(r / c, f.card_overlap)) * min(c, r)
        return max(c, r)


@dataclass
class Projection:
    case: Case
    stages: list[StageRun] = field(default_factory=list)

    def minutes(self, f: Figures) -> float:
        return sum(s.seconds(f) for s in self.stages) / 60


def kv_fills(evaluations: int, steps: int, options) -> int:
    """UNet evaluations that compute their cross-attention K/V (the rest reuse them): a
    conditioning's first; with split guidance and one cached conditioning the pipeline
    alternates the halves' order, so every step after the first computes one half afresh."""
    if not options.cross_kv_cache:
        return evaluations * steps
    if evaluations == 1:
        return 1
    return 2 if options.kv_cache_entries >= 2 else steps + 1


def project(case: Case, measured: dict[str, dict], keys: dict[str, str], options, ratios: dict[str, float]) -> Projection:
    """The stages of `case` with their FLOPs, bytes and providers."""
    p = Projection(case)
    onnx = case.engine == "onnxstream"
    decoder = DECODERS[case.decoder]
    text, unet, decode = (measured[keys[s]] for s in ("text", "unet", decoder.stage))

    def add(label: str, stage: str, count: int, m: dict, pass_index: int) -> None:
        if count == 0:
            return
        kinds = m["passes"][pass_index]["kinds"]
        conv = sum(k["gemm"] for kind, k in kinds.items() if kind == "conv")
        matmul = sum(k["gemm"] for kind, k in kinds.items() if kind != "conv")
        other = sum(k["other"] for k in kinds.values())
        stored = sum(k["bytes"] for k in kinds.values())
        if onnx:   # the same parameters, in OnnxStream's file formats
            stored *= ONNXSTREAM_BYTES_PER_PARAM[stage] / m["bytes_per_param"]
        provider = ONNXSTREAM_PROVIDER[stage] if onnx else OUR_PROVIDER[options.weights]
        p.stages.append(StageRun(label, stage, count, count * conv, count * matmul, count * other, count * stored,
                                 provider, 1.0 if onnx else ratios.get(stage, 1.0)))

    text_runs = 2 if onnx and case.guidance else 1
    add("text encoders" + (" (prompt, negative)" if case.guidance else ""), "text", text_runs, text, 0)
    per_step = 2 if case.guidance and (onnx or not options.cfg_batch) else 1
    evaluations = per_step * case.steps
    fills = evaluations if onnx else kv_fills(per_step, case.steps, options)
    add("UNet evaluation" + ("" if onnx else ", K/V computed"), "unet", fills, unet, 0)
    add("UNet evaluation, K/V cached", "unet", evaluations - fills, unet, 1)
    passes = decoder.passes(case.height // 8, case.width // 8)
    add(f"{decoder.label}, {passes} {decoder.unit}{'s' if passes > 1 else ''}", decoder.stage, passes, decode, 0)
    return p


def calibrate(fixing: list[Projection], other_gflops: float, read_mb_s: float) -> Figures:
    """The convolution and matrix-product GFLOP/s that make the two fixing projections take
    their published times, the other figures as stated.

    Each stage's time is linear in (1/G_conv, 1/G_matmul) once it is known whether its
    reads or its compute take longer (prefetching stages): solve the 2x2 system, see which
    side of each max() the answer falls on, and repeat until that no longer changes."""
    if len(fixing) != 2:
        raise ValueError("two published cases fix the two GEMM figures")
    guess = Figures(4.0, 4.0, other_gflops, read_mb_s)
    for _ in range(50):
        rows = []
        for proj in fixing:
            a = b = const = 0.0
            for s in proj.stages:
                if s.provider == "readahead":
                    raise ValueError("calibration takes OnnxStream's cases, whose stages read on use or prefetch")
                compute_bound = s.provider == "on-use" or s.compute_s(guess) >= s.read_s(guess)
                if compute_bound:
                    a += s.ratio * s.conv / 1e9
                    b += s.ratio * s.matmul / 1e9
                    const += s.ratio * s.other / (other_gflops * 1e9)
                if s.provider == "on-use" or not compute_bound:
                    const += s.read_s(guess)
            rows.append((a, b, proj.case.published_minutes * 60 - const))
        (a1, b1, c1), (a2, b2, c2) = rows
        det = a1 * b2 - a2 * b1
        if abs(det) < 1e-9 * abs(a1 * b2):
            raise SystemExit("calibration: the two cases do not tell convolutions and matrix products apart")
        x = (c1 * b2 - c2 * b1) / det        # seconds per convolution GFLOP
        y = (a1 * c2 - a2 * c1) / det        # seconds per matrix-product GFLOP
        if x <= 0 or y <= 0:
            raise SystemExit(f"calibration failed: {x:.3g} s per convolution GFLOP, {y:.3g} s per matrix-product "
                             "GFLOP; the published times do not fit this time model with the stated figures")
        new = Figures(1 / x, 1 / y, other_gflops, read_mb_s)
        if new == guess:
            break
        guess = new
    return guess


def one_rate(proj: Projection, other_gflops: float, read_mb_s: float) -> float:
    """The single GEMM GFLOP/s (convolutions and matrix products alike) that makes `proj`
    take its published time: what the two-figure calibration is compared with."""
    lo, hi = 1e-3, 1e3
    for _ in range(100):
        mid = math.sqrt(lo * hi)
        if proj.minutes(Figures(mid, mid, other_gflops, read_mb_s)) > proj.case.published_minutes:
            lo = mid
        else:
            hi = mid
    return math.sqrt(lo * hi)


# ============================================================================== printing


def gf(x: float) -> str:
    return f"{x / 1e9:,.0f}" if x >= 1e10 else f"{x / 1e9:,.1f}"


READS = {"on-use": "add", "readahead": "read ahead", "prefetch": "overlap"}


def print_projection(p: Projection, f: Figures) -> None:
    rows = []
    for s in p.stages:
        rows.append({"stage": s.label, "runs": str(s.count), "conv GFLOP": gf(s.conv), "matmul GFLOP": gf(s.matmul),
                     "other GFLOP": gf(s.other), "read GB": f"{s.read_bytes / 1e9:.2f}",
                     "compute min": f"{s.compute_s(f) / 60:.1f}", "read min": f"{s.read_s(f) / 60:.1f}",
                     "minutes": f"{s.seconds(f) / 60:.1f}", "reads": READS[s.provider]})
    total = {"stage": "total", "runs": "", "conv GFLOP": gf(sum(s.conv for s in p.stages)),
             "matmul GFLOP": gf(sum(s.matmul for s in p.stages)), "other GFLOP": gf(sum(s.other for s in p.stages)),
             "read GB": f"{sum(s.read_bytes for s in p.stages) / 1e9:.2f}",
             "compute min": f"{sum(s.compute_s(f) for s in p.stages) / 60:.1f}",
             "read min": f"{sum(s.read_s(f) for s in p.stages) / 60:.1f}", "minutes": f"{p.minutes(f):.1f}",
             "reads": f"= {p.minutes(f) / 60:.2f} h"}
    log(f"\n{p.case.label}" + (f"   [published: {p.case.published_minutes:.0f} min; {p.case.source}]"
                                if p.case.published_minutes else ""))
    print_table(["stage", "runs", "conv GFLOP", "matmul GFLOP", "other GFLOP", "read GB", "compute min", "read min",
                 "minutes", "reads"], rows + [total])


def print_recipes(cases: list[Case], projections: dict, f: Figures) -> None:
    """One row per recipe: size, steps, UNet evaluations, minutes with each decoder."""
    rows: dict[str, dict] = {}
    for case in cases:
        p = projections[case]
        row = rows.setdefault(case.label, {
            "recipe": case.label.removeprefix("recipe "), "size": f"{case.width}x{case.height}",
            "steps": str(case.steps), "UNet evaluations": str(sum(s.count for s in p.stages if s.stage == "unet"))})
        row[f"min, {DECODERS[case.decoder].label}"] = f"{p.minutes(f):.0f}"
    log("\nevery recipe on a Pi Zero 2 W (LoRAs merged at import: `models import --lora`; applied at run time "
        "a LoRA adds its own reads to every evaluation):")
    print_table(list(next(iter(rows.values()))), list(rows.values()))


def parse_ratios(items: list[str]) -> dict[str, float]:
    ratios: dict[str, float] = {}
    for item in items:
        stage, _, value = item.rpartition("=")
        stages = [stage] if stage else list(STAGES)
        try:
            r = float(value)
        except ValueError:
            raise SystemExit(f"--x86-ratio {item!r}: expected STAGE=RATIO or RATIO (a number such as 0.8)") from None
        if not r > 0 or not math.isfinite(r):
            raise SystemExit(f"--x86-ratio {item!r}: the ratio must be a positive number")
        for s in stages:
            if s not in STAGES:
                raise SystemExit(f"--x86-ratio {item!r}: unknown stage {s!r}; stages: {', '.join(STAGES)}")
            ratios[s] = r
    return ratios


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=DEFAULT_MODEL,
                   help="SDXL model folder (diffusers layout; default: the benchmarks' random SDXL, built if missing)")
    p.add_argument("--preset", default="rpi-lowmem", choices=list(PRESETS),
                   help="engine preset our cases run with (default %(default)s)")
    p.add_argument("--other-gflops", type=float, default=OTHER_GFLOPS,
                   help="GFLOP/s of the non-GEMM ops (default %(default)s: memory-bound, see OTHER_GFLOPS)")
    p.add_argument("--read-mb-s", type=float, default=CARD_READ_MB_S,
                   help="microSD read rate, MB/s (default %(default)s: the Zero 2 W's SD host at its default clock)")
    p.add_argument("--x86-ratio", action="append", default=[], metavar="[STAGE=]RATIO",
                   help="our compute time / OnnxStream's on one x86 machine, for a stage (text, unet, vae, tiny) or all")
    p.add_argument("--x86-ratio-source", default=None, help="where the --x86-ratio figures were measured")
    p.add_argument("--no-card-overlap", action="store_true",
                   help="let our read-ahead hide nothing: reads add to compute, as for OnnxStream's UNet")
    p.add_argument("--remeasure", action="store_true", help="trace every stage again instead of using the cache")
    args = p.parse_args(argv)

    from engine.options import resolve
    from engine.sdxl.pipeline import model_fingerprint
    from frame.display import fit_size

    for flag, value in (("--read-mb-s", args.read_mb_s), ("--other-gflops", args.other_gflops)):
        if not (value > 0 and math.isfinite(value)):
            raise SystemExit(f"{flag} must be a positive number, got {value}")
    ratios = dict(X86_RATIOS)
    source = X86_RATIOS_SOURCE
    if args.x86_ratio:
        ratios = parse_ratios(args.x86_ratio)
        if not args.x86_ratio_source:
            raise SystemExit("--x86-ratio needs --x86-ratio-source: say which run measured it")
        source = args.x86_ratio_source
    if args.model == DEFAULT_MODEL:
        import pipeline_full

        pipeline_full.ensure_model()
    elif not (args.model / "unet" / "config.json").is_file():
        raise SystemExit(f"--model {args.model}: not an SDXL model folder (no unet/config.json)")
    options = resolve(args.preset)
    fingerprint = model_fingerprint(args.model)

    published = published_cases()
    ours = our_cases(fit_size(PANEL))
    recipes = recipe_cases(fit_size(PANEL))
    wanted: dict[str, tuple[str, dict]] = {}
    case_keys: dict[Case, dict[str, str]] = {}
    for case in published + ours + recipes:
        # OnnxStream's cases are traced with our preset's ops: only FLOPs and bytes are
        # taken from them, and those do not depend on the options.
        keys = {}
        for stage, shape in stage_shapes(case, options.cfg_batch).items():
            key = measurement_key(fingerprint, args.preset, stage, shape)
            keys[stage] = key
            wanted[key] = (stage, shape)
        case_keys[case] = keys
    measured = measure(args.model, args.preset, wanted, args.remeasure)

    projections = {case: project(case, measured, case_keys[case], options, ratios)
                   for case in published + ours + recipes}
    figures = calibrate([projections[c] for c in published if c.role == "fixes"], args.other_gflops, args.read_mb_s)
    figures = replace(figures, card_overlap=() if args.no_card_overlap else CARD_OVERLAP)

    log(f"\nPi Zero 2 W projection: model {args.model} ({fingerprint[:12]}), our preset {args.preset}")
    log(f"  {CORES} Cortex-A53 cores at {CLOCK_GHZ:g} GHz, fp32 NEON peak {PEAK_GFLOPS:.0f} GFLOP/s")
    log(f"  microSD reads: {figures.read_mb_s:g} MB/s (stated: the SD host's default 50 MHz clock)")
    log("  our read-ahead hides " + (", ".join(f"{o:.0%} at reads {k:g}x compute" for k, o in figures.card_overlap)
                                     + f" ({CARD_OVERLAP_SOURCE})" if figures.card_overlap
                                     else "nothing (--no-card-overlap): reads add to compute"))
    log(f"  other (non-GEMM) ops: {figures.other_gflops:g} GFLOP/s (stated: memory-bound, see OTHER_GFLOPS)")
    log(f"  calibrated on OnnxStream's SDXL base 10-step and Turbo 1-step runs: convolutions "
        f"{figures.conv_gflops:.2f} GFLOP/s ({figures.conv_gflops / PEAK_GFLOPS:.0%} of peak), matrix products "
        f"{figures.matmul_gflops:.2f} GFLOP/s ({figures.matmul_gflops / PEAK_GFLOPS:.0%})")
    log("  x86 ratio (ours / OnnxStream): " + (", ".join(f"{s} {r:g}" for s, r in sorted(ratios.items()))
                                                 + f" ({source})" if ratios else f"none ({source})"))
    for case in published:
        print_projection(projections[case], figures)
    for case in ours:
        print_projection(projections[case], figures)
    print_recipes(recipes, projections, figures)
    log("\ncalibration (published vs projected):")
    for case in published:
        got = projections[case].minutes(figures)
        log(f"  {case.role:6s} {case.label}: published {case.published_minutes:.0f} min, projected {got:.1f} min "
            f"({got / case.published_minutes - 1:+.1%})")
    g = one_rate(projections[published[0]], args.other_gflops, args.read_mb_s)
    single = Figures(g, g, args.other_gflops, args.read_mb_s)
    log(f"  against one GEMM rate for all, fitted on the first case alone ({g:.2f} GFLOP/s):")
    for case in published[1:]:
        got = projections[case].minutes(single)
        log(f"  {'':6s} {case.label}: projected {got:.1f} min ({got / case.published_minutes - 1:+.1%})")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "_child":
        sys.exit(child_main(sys.argv[2], {"measure": child_measure}))
    sys.exit(main())
