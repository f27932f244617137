#!/usr/bin/env python3
"""Benchmark against OnnxStream: the same random SDXL UNet and VAE decoder on both engines, on this machine.

OnnxStream (github.com/vitoplantamura/OnnxStream, C++ on XNNPACK) is the engine slowframe's Pi
figures are judged against. This script builds it at commit 9f54639 from local sources, converts
the random SDXL UNet and VAE that bench/unet_full.py and bench/vae_full.py use into its format by
its own conversion path, and runs, interleaved in one run:

  - one 128x128-latent UNet evaluation: OnnxStream --rpi-lowmem vs our `rpi-lowmem`, and
    OnnxStream's PC default (DiskPrefetch, fp16 arithmetic on AVX2) vs our `default`;
  - the 25-tile VAE decode of a 128x128 latent: OnnxStream's tiled decoder vs ours (`rpi-lowmem`);

and reports seconds, peak RSS, the PCC of OnnxStream's output against ours and against diffusers
fp32, and the time per op kind on both sides (OnnxStream's own per-op timer, m_ops_times_printf;
our op trace, ops_printf).

Steps, each cached under ${SLOWFRAME_BENCH_CACHE:-~/.cache/slowframe-bench}/onnxstream/ with a
marker, so a rerun skips what is done; `--redo STEP` does one again (and what depends on it):

  sources   OnnxStream 9f54639 and the exact commits it pins (XNNPACK from its CMakeLists, cpuinfo,
            pthreadpool, FXdiv from XNNPACK's cmake/Download*.cmake), taken from bare git mirrors
            (--mirrors; nothing is downloaded): checked against those pins
  build     XNNPACK with CMake + ninja (kleidiai off: Arm only; tests/benchmarks off) pointed at the
            local cpuinfo/pthreadpool/FXdiv, then bench/onnxstream_driver.cpp + OnnxStream's
            onnxstream.cpp with the flags of its CMakeLists (Release, MAX_SPEED: -O3 -march=native)
  export    torch.onnx.export (TorchScript exporter, opset 14, fixed shapes, constant folding), as
            OnnxStream's README says: the UNet wrapped as `unet` (OnnxStream's sd.cpp names its
            tensors /unet/...), inputs sample, timestep, encoder_hidden_states, text_embeds,
            time_ids; the VAE decoder at its 32x32-latent tile, input latent_sample
  simplify  onnx-simplifier (onnxsim), weights as external data
  convert   its onnx2txt notebook's logic (onnx2txt/onnx2txt.ipynb at 9f54639, ported line for line
            into convert_onnx2txt below, with name indexes instead of its list scans), fp16 weights
  run       the interleaved cases (always run)

Test/bench-only dependencies beyond the project's: onnx, onnxsim (`pip install onnx onnxsim`), a
C++20 compiler, cmake and ninja. The UNet's export peaks at ~16 GB of RAM, the simplifier under 2 GB
(`--stop-after convert` to prepare only). From the repository root:

    python bench/onnxstream.py                         # everything
    python bench/onnxstream.py --rounds 2              # two interleaved rounds
    python bench/onnxstream.py --redo convert          # convert again (then run)
    python bench/onnxstream.py --stop-after build

Every measured case runs in a fresh process (peak RSS is its own) at the script's own niceness
(start it with `nice -n 10` on a shared machine), after the page cache of its weights is dropped; s/eval is the second evaluation in that process on both
sides (the first is a cold read), or with --evals 1 the first, cold, one on both sides. Not run in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repo's engine, if not installed
import engine  # noqa: E402,F401  (it sets OpenBLAS's thread spin: bench/RESULTS.md#threads)
import numpy as np  # noqa: E402

from harness import (CACHE, MB, REPO, child_main, compare, describe_rc, fmt, log, print_table,  # noqa: E402
                     read_json, run_child, write_json)

SCRIPT = Path(__file__).resolve()
DRIVER_SOURCE = SCRIPT.parent / "onnxstream_driver.cpp"
ROOT = CACHE / "onnxstream"
SRC, BUILD, ONNX, MODELS, RUNS = ROOT / "src", ROOT / "build", ROOT / "onnx", ROOT / "models", ROOT / "runs"
DRIVER = BUILD / "onnxstream_driver"
STEPS = ("sources", "build", "export", "simplify", "convert", "run")
NICE = 10

UNET_DIR = CACHE / "sdxl-random" / "unet"
VAE_DIR = CACHE / "sdxl-random" / "vae"
LATENT = 128        # the UNet's input and the VAE's latent, in latents: 1024x1024 pixels
VAE_TILE = 32       # OnnxStream's SDXL decoder tile (sd.cpp: sdxl_vae_decoder_32x32_fp16)

# name, mirror (GitHub owner/name), commit, what pins it, paths to take (None: all)
SOURCES = (
    ("OnnxStream", "vitoplantamura/OnnxStream", "9f5463907acd576e90d5f1a465c8117573c7ef7d",
     "issue 32 (January 2026)", ("src", "onnx2txt", "LICENSE")),
    ("XNNPACK", "google/XNNPACK", "5671db0572e2d5240f2f08f9085174014742ac2d", "OnnxStream/src/CMakeLists.txt", None),
    ("cpuinfo", "pytorch/cpuinfo", "8a1772a0c5c447df2d18edf33ec4603a8c9c04a6",
     "XNNPACK/cmake/DownloadCpuinfo.cmake", None),
    ("pthreadpool", "google/pthreadpool", "f94ab76fe99754960035d520dce28e15b647e8cf",
     "XNNPACK/cmake/DownloadPThreadPool.cmake", None),
    ("FXdiv", "Maratyszcza/FXdiv", "b408327ac2a15ec3e43352421954f5b1967701d1", "XNNPACK/cmake/DownloadFXdiv.cmake", None),
)
XNNPACK_TARGETS = ("XNNPACK", "microkernels-prod", "pthreadpool", "cpuinfo")
XNNPACK_LIBS = ("libXNNPACK.a", "libmicrokernels-prod.a", "pthreadpool/libpthreadpool.a", "cpuinfo/libcpuinfo.a")

# The models OnnxStream's sd.cpp reads, by its folder names.
MODEL_NAMES = {"unet": "sdxl_unet_fp16", "vae": "sdxl_vae_decoder_32x32_fp16"}
UNET_INPUTS = (  # ONNX input name, shape at batch 1 (sd.cpp's CFGDenoiser_CompVisDenoiser pushes these)
    ("sample", (1, 4, LATENT, LATENT)),
    ("timestep", (1,)),
    ("encoder_hidden_states", (1, 77, 2048)),
    ("text_embeds", (1, 1280)),
    ("time_ids", (1, 6)),
)


class StepFailed(Exception):
    """A step could not complete: the message says why and how to redo it."""

    def __init__(self, step: str, why: str):
        super().__init__(f"[{step}] FAILED: {why}\n  fix the cause, then redo only this step: "
                         f"python bench/onnxstream.py --redo {step}")
        self.step = step


# ----------------------------------------------------------------------------- markers


def marker(step: str) -> Path:
    return ROOT / f".done-{step}.json"


def step_done(step: str) -> dict | None:
    """The marker of a completed step, if it is still valid: written after every step it depends on."""
    m = read_json(marker(step))
    if not m:
        return None
    i = STEPS.index(step)
    if i > 0:
        prev = read_json(marker(STEPS[i - 1]))
        if not prev or prev.get("finished_at", 0) > m.get("finished_at", 0):
            return None
    return m


def mark_done(step: str, info: dict) -> None:
    write_json(marker(step), dict(info, step=step, finished_at=time.time(), at=time.strftime("%Y-%m-%d %H:%M:%S")))


def run_cmd(step: str, cmd: list[str], log_path: Path, **kw) -> None:
    """Run a build command niced, its output into log_path; a failure names the log's last lines."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        try:
            rc = subprocess.call(["nice", "-n", str(NICE)] + cmd, stdout=f, stderr=subprocess.STDOUT, **kw)
        except FileNotFoundError as e:
            raise StepFailed(step, f"{e.filename or cmd[0]} not found: install it (cmake, ninja-build, g++)") from e
    if rc != 0:
        tail = "\n    ".join(log_path.read_text(errors="replace").splitlines()[-15:])
        raise StepFailed(step, f"{cmd[0]} exited {rc}; last lines of {log_path}:\n    {tail}")


# ----------------------------------------------------------------------------- step: sources


def mirror_git_dir(mirrors: Path, repo: str) -> Path | None:
    """A bare mirror at MIRRORS/owner+name/repo, or a clone at MIRRORS/owner+name."""
    base = mirrors / repo.replace("/", "+")
    for cand in (base / "repo", base / ".git", base):
        if (cand / "objects").is_dir() and (cand / "HEAD").is_file():
            return cand
    return None


def step_sources(args) -> dict:
    SRC.mkdir(parents=True, exist_ok=True)
    got = {}
    for name, repo, commit, pinned_by, paths in SOURCES:
        git = mirror_git_dir(args.mirrors, repo)
        if git is None:
            raise StepFailed("sources", f"no git mirror of github.com/{repo} under {args.mirrors}: mirror it (a bare "
                                        f"clone) as {args.mirrors / repo.replace('/', '+') / 'repo'}, or pass --mirrors")
        dest = SRC / name
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir()
        tar = subprocess.run(["git", f"--git-dir={git}", "archive", commit] + list(paths or ()),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if tar.returncode != 0:
            raise StepFailed("sources", f"{repo} at {commit} (pinned by {pinned_by}) is not in {git}: "
                                        f"{tar.stderr.decode(errors='replace').strip()[:300]}; fetch it into the mirror")
        subprocess.run(["tar", "-x", "-C", str(dest)], input=tar.stdout, check=True)
        got[name] = {"repo": repo, "commit": commit, "mirror": str(git), "pinned_by": pinned_by}
        log(f"[sources] {name} {commit[:12]} from {git}")
    # The pins are the upstream files' own: a changed commit above must match them.
    for name, repo, commit, pinned_by, _ in SOURCES[1:]:
        pin_file = SRC / pinned_by
        if commit not in pin_file.read_text():
            raise StepFailed("sources", f"{pin_file} does not pin {repo} at {commit}: SOURCES in {SCRIPT.name} and "
                                        f"the upstream pins disagree")
    return {"sources": got}


# ----------------------------------------------------------------------------- step: build


def step_build(args) -> dict:
    xb = BUILD / "XNNPACK"
    xb.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    run_cmd("build", ["cmake", "-G", "Ninja", "-S", str(SRC / "XNNPACK"), "-B", str(xb),
                      "-DCMAKE_BUILD_TYPE=Release", "-DXNNPACK_BUILD_TESTS=OFF", "-DXNNPACK_BUILD_BENCHMARKS=OFF",
                      "-DCMAKE_POSITION_INDEPENDENT_CODE=OFF", "-DXNNPACK_LIBRARY_TYPE=static",
                      "-DXNNPACK_ENABLE_KLEIDIAI=OFF", f"-DCPUINFO_SOURCE_DIR={SRC / 'cpuinfo'}",
                      f"-DPTHREADPOOL_SOURCE_DIR={SRC / 'pthreadpool'}", f"-DFXDIV_SOURCE_DIR={SRC / 'FXdiv'}"],
            BUILD / "xnnpack-configure.log")
    log(f"[build] XNNPACK configured; building {', '.join(XNNPACK_TARGETS)} with ninja (nice {NICE}; "
        f"~1000 files, ~25 min on 2 cores; log {BUILD / 'xnnpack-build.log'})")
    run_cmd("build", ["ninja", "-C", str(xb)] + list(XNNPACK_TARGETS), BUILD / "xnnpack-build.log")
    t1 = time.perf_counter()
    os_src = SRC / "OnnxStream" / "src"
    # OnnxStream's src/CMakeLists.txt: C++20, -fcoroutines for GCC, Release (-O3 -DNDEBUG) and MAX_SPEED
    # (-O3 -march=native); the same include directories and libraries (kleidiai is Arm only).
    cmd = ["g++", "-std=c++20", "-fcoroutines", "-O3", "-DNDEBUG", "-march=native",
           f"-I{os_src}", f"-I{SRC / 'XNNPACK' / 'include'}", f"-I{SRC / 'pthreadpool' / 'include'}",
           f"-I{SRC / 'cpuinfo' / 'include'}", str(DRIVER_SOURCE), str(os_src / "onnxstream.cpp"),
           "-o", str(DRIVER)] + [str(xb / lib) for lib in XNNPACK_LIBS] + ["-lpthread"]
    log("[build] compiling bench/onnxstream_driver.cpp with OnnxStream's onnxstream.cpp")
    run_cmd("build", cmd, BUILD / "driver-build.log")
    return {"xnnpack_build_s": t1 - t0, "driver_build_s": time.perf_counter() - t1, "driver": str(DRIVER),
            "compiler": subprocess.run(["g++", "--version"], capture_output=True, text=True).stdout.splitlines()[0]}


# ----------------------------------------------------------------------------- step: export


def onnx_path(model: str, stage: str) -> Path:
    return ONNX / f"{model}-{stage}" / f"{model}.onnx"


def child_export(spec: dict) -> dict:
    import torch
    from diffusers import AutoencoderKL, UNet2DConditionModel

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    out = Path(spec["out"])
    t0 = time.perf_counter()
    if spec["model"] == "unet":
        class UNetForExport(torch.nn.Module):
            """The UNet under the attribute name `unet`, so the tensors are named /unet/... as in sd.cpp."""

            def __init__(self, unet):
                super().__init__()
                self.unet = unet

            def forward(self, sample, timestep, encoder_hidden_states, text_embeds, time_ids):
                added = {"text_embeds": text_embeds, "time_ids": time_ids}
                return self.unet(sample, timestep, encoder_hidden_states, added_cond_kwargs=added, return_dict=False)[0]

        model = UNetForExport(UNet2DConditionModel.from_pretrained(str(UNET_DIR), variant="fp16",
                                                                   torch_dtype=torch.float32).eval())
        inputs = tuple(torch.zeros(shape) for _, shape in UNET_INPUTS)
        names = [n for n, _ in UNET_INPUTS]
    else:
        class VAEDecoderForExport(torch.nn.Module):
            """AutoencoderKL.decode (post_quant_conv + decoder) on an already scaled latent."""

            def __init__(self, vae):
                super().__init__()
                self.vae = vae

            def forward(self, latent_sample):
                return self.vae.decode(latent_sample, return_dict=False)[0]

        model = VAEDecoderForExport(AutoencoderKL.from_pretrained(str(VAE_DIR), variant="fp16",
                                                                  torch_dtype=torch.float32).eval())
        inputs = (torch.zeros(1, 4, VAE_TILE, VAE_TILE),)
        names = ["latent_sample"]
    load_s = time.perf_counter() - t0
    out.parent.mkdir(parents=True, exist_ok=True)
    with torch.inference_mode():
        torch.onnx.export(model, inputs, str(out), dynamo=False, opset_version=14, do_constant_folding=True,
                          input_names=names, output_names=["out_sample"], export_params=True, external_data=True)
    from harness import memory_figures
    return {"load_s": load_s, "export_s": time.perf_counter() - t0 - load_s, "mem": memory_figures(),
            "torch": torch.__version__}


def step_export(args) -> dict:
    info = {}
    for model in args.models:
        out = onnx_path(model, "export")
        shutil.rmtree(out.parent, ignore_errors=True)
        log(f"[export] {model}: torch.onnx.export in a fresh process -> {out}")
        spec = {"kind": "export", "model": model, "out": str(out), "result": str(ROOT / f"export-{model}.json")}
        rc, res, wall = run_child(SCRIPT, spec, nice=NICE)
        if rc != 0 or not res or res.get("error"):
            raise StepFailed("export", f"{model}: {describe_rc(rc)}\n{(res or {}).get('error', '')}")
        log(f"[export] {model}: {wall:.0f} s, peak RSS {res['mem']['vmhwm_bytes'] / MB:.0f} MB")
        info[model] = res
    return info



# ----------------------------------------------------------------------------- step: simplify


def child_simplify(spec: dict) -> dict:
    """onnxsim.simplify on the exported model. Over 2 GB, the simplifier holds the weights three
    times (22 GB for the UNet: killed here), so for that model the weights stored as external data
    are made graph inputs of their shape first and made weights again after, the approach of the
    large-model simplifier OnnxStream's README points to (luchangli03/onnxsim_large_model): the
    graph is simplified whole; only folding ops on the weights themselves is left out, and
    torch.onnx.export's constant folding did that already (counted in `ops_on_weights_only`)."""
    import onnx
    import onnxsim

    from harness import memory_figures
    t0 = time.perf_counter()
    src, out = Path(spec["in"]), Path(spec["out"])
    out.parent.mkdir(parents=True, exist_ok=True)
    if not spec["large"]:
        model, ok = onnxsim.simplify(str(src))
        onnx.save(model, str(out))
        return {"simplify_s": time.perf_counter() - t0, "check_ok": ok, "mem": memory_figures(),
                "onnxsim": onnxsim.__version__}
    model = onnx.load(str(src), load_external_data=False)
    external = {t.name: t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL}
    kept = [t for t in model.graph.initializer if t.name not in external]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)
    for t in external.values():
        model.graph.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    model, ok = onnxsim.simplify(model)
    inputs = [i for i in model.graph.input if i.name not in external]
    used = {i.name for i in model.graph.input if i.name in external}
    del model.graph.input[:]
    model.graph.input.extend(inputs)
    model.graph.initializer.extend(external[n] for n in used)
    for name in used:   # the weights' files, moved beside the simplified model (copied with --keep-onnx;
        for entry in external[name].external_data:   # onnx.load refuses hard links)
            if entry.key == "location":
                (shutil.copy2 if spec["keep"] else os.replace)(src.parent / entry.value, out.parent / entry.value)
    onnx.save(model, str(out))
    weights = {t.name for t in model.graph.initializer} | {n.output[0] for n in model.graph.node if n.op_type == "Constant"}
    only_weights = sum(1 for n in model.graph.node if n.input and all(x in weights for x in n.input if x))
    return {"simplify_s": time.perf_counter() - t0, "check_ok": ok, "mem": memory_figures(),
            "onnxsim": onnxsim.__version__, "external_weights": len(used), "ops_on_weights_only": only_weights}


def step_simplify(args) -> dict:
    info = {}
    for model in args.models:
        src, out = onnx_path(model, "export"), onnx_path(model, "simplify")
        if not src.is_file():
            raise StepFailed("simplify", f"{src} is missing (an export is removed once simplified, unless "
                                          f"--keep-onnx): redo from the export, --redo export")
        shutil.rmtree(out.parent, ignore_errors=True)
        large = sum(f.stat().st_size for f in src.parent.iterdir()) > 2**31
        log(f"[simplify] {model}: onnx-simplifier in a fresh process -> {out}")
        spec = {"kind": "simplify", "in": str(src), "out": str(out), "large": large, "keep": args.keep_onnx,
                "result": str(ROOT / f"simplify-{model}.json")}
        rc, res, wall = run_child(SCRIPT, spec, nice=NICE)
        if rc != 0 or not res or res.get("error"):
            raise StepFailed("simplify", f"{model}: {describe_rc(rc)}\n{(res or {}).get('error', '')}")
        log(f"[simplify] {model}: {wall:.0f} s, peak RSS {res['mem']['vmhwm_bytes'] / MB:.0f} MB")
        info[model] = res
        if not args.keep_onnx:
            shutil.rmtree(src.parent)   # the export is only the simplifier's input
    return info


# ----------------------------------------------------------------------------- step: convert


def convert_onnx2txt(onnx_filename: str, dest_folder: Path, convert_to_fp16: bool = True) -> dict:
    """OnnxStream's onnx2txt notebook (9f54639), its one cell ported with the same checks and output:
    model.txt, one line per op, `name:OpType*input:...*output:...*attrs`, and one headerless .bin
    per weight (Conv weights twice, as _nhwc and _nchw). QUANTIZE_UINT8 off and INFER_SHAPES on, its
    defaults; CONVERT_TO_FP16 on, as for OnnxStream's *_fp16 models. Where the notebook scans the
    whole graph for every name, this looks names up in indexes built once (same result)."""
    import string

    import onnx
    import onnx.numpy_helper

    onnx.shape_inference.infer_shapes_path(onnx_filename)
    model = onnx.load(onnx_filename)
    output_dir = Path(dest_folder)
    shutil.rmtree(output_dir, ignore_errors=True)
    output_dir.mkdir(parents=True)

    nodes = list(model.graph.node)
    initializers = {t.name: t for t in model.graph.initializer}
    input_idxs: dict[str, list[int]] = {}
    output_idxs: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        for x in n.input:
            input_idxs.setdefault(x, []).append(i)
        for o in n.output:
            output_idxs.setdefault(o, []).append(i)
    graph_inputs_by = {}
    for gi in model.graph.input:
        graph_inputs_by.setdefault(gi.name, []).append(gi)
    graph_outputs_by = {}
    for go in model.graph.output:
        graph_outputs_by.setdefault(go.name, []).append(go)
    value_info_by = {}
    for vi in model.graph.value_info:
        value_info_by.setdefault(vi.name, []).append(vi)
    model_txt = open(output_dir / "model.txt", "w")

    def get_final_name(name: str) -> str:
        final_name = ""
        for c in name:
            if c in string.ascii_letters + string.digits:
                final_name += c
            else:
                final_name += "_" + format(ord(c), "X") + "_"
        return final_name

    op_constants = {}

    def search_name(name: str, node, in_out_index: int):
        weights = [initializers[name]] if name in initializers else []
        in_idxs = input_idxs.get(name, [])
        out_idxs = output_idxs.get(name, [])
        graph_inputs = graph_inputs_by.get(name, [])
        graph_outputs = graph_outputs_by.get(name, [])
        shapes = value_info_by.get(name, [])
        shape = ""
        if name in op_constants and len(weights) == 0:
            weights = [op_constants[name]]
        name = get_final_name(name)
        if len(shapes) == 1 and len(weights) == 1:
            shapes = []
        if len(shapes) + len(graph_inputs) + len(graph_outputs) + len(weights) != 1:
            raise ValueError("Error: " + name)
        elif len(shapes) == 1:
            shape = ",".join(str(d.dim_value) for d in shapes[0].type.tensor_type.shape.dim)
        elif len(graph_inputs) == 1:
            shape = ",".join(str(d.dim_value) for d in graph_inputs[0].type.tensor_type.shape.dim)
        elif len(graph_outputs) == 1:
            shape = ",".join(str(d.dim_value) for d in graph_outputs[0].type.tensor_type.shape.dim)
        elif len(weights) == 1:
            a = onnx.numpy_helper.to_array(weights[0])
            if node.op_type == "Mul" and in_out_index == 1 and str(a.dtype) == "int64":
                a = a.astype("float32")
            if convert_to_fp16 and str(a.dtype) == "float32":
                a = a.astype("float16")
            t = str(a.dtype)
            if t != "float32" and t != "int64" and t != "float16":
                raise ValueError(f"Error: {name} has dtype {t}")

            def save_to_disk(n, arr):
                nonlocal shape
                shape = t + ":" + ",".join(str(d) for d in arr.shape)
                n = n + ".bin"
                arr.tofile(output_dir / n)
                return n

            if node.op_type == "Gemm":
                trans_a = next(iter(x for x in node.attribute if x.name == "transA" and x.i != 0 and in_out_index == 0), None)
                trans_b = next(iter(x for x in node.attribute if x.name == "transB" and x.i != 0 and in_out_index == 1), None)
                trans = False
                if trans_a is not None:
                    node.attribute.remove(trans_a)
                    trans = True
                if trans_b is not None:
                    node.attribute.remove(trans_b)
                    trans = True
                if trans:
                    a = np.transpose(a)
                    name = name + "_transposed"
            elif node.op_type == "Conv":
                if in_out_index == 0 or in_out_index == 1:
                    if len(a.shape) == 3:  # Conv1D
                        a = a[..., np.newaxis]
                    if len(a.shape) != 4:
                        raise ValueError(f"Error: Conv weight {name} of shape {a.shape}")
                    save_to_disk(name + "_nhwc", np.transpose(a, (0, 2, 3, 1)))
                    name = name + "_nchw"
            name = save_to_disk(name, a)
        else:
            raise ValueError("Error: " + name)
        return name, weights, in_idxs, out_idxs, graph_inputs, graph_outputs, shape

    op_stats: dict[str, int] = {}
    for idx, node in enumerate(nodes):
        if len(node.input) == 0 or len(node.output) == 0:
            if node.op_type == "Constant" and len(node.output) == 1:
                values = [x for x in node.attribute if x.name == "value"]
                if len(values) != 1 or values[0].type != onnx.AttributeProto.TENSOR:
                    raise ValueError(f"Error: Constant {node.name} without one tensor value")
                op_constants[node.output[0]] = values[0].t
                continue
            raise ValueError(f"Error: {node.op_type} {node.name} without inputs or outputs")
        op_stats[node.op_type] = op_stats.get(node.op_type, 0) + 1
        line = [node.name + ":" + node.op_type]
        inputs = []
        for input_index, input_name in enumerate(node.input):
            if len(input_name) == 0:
                inputs.append("")
                continue
            input_name, weights, in_idxs, out_idxs, graph_inputs, _, shape = search_name(input_name, node, input_index)
            if len(out_idxs) >= 2 or (len(out_idxs) == 1 and out_idxs[0] >= idx) or \
                    (len(weights) == 0 and len(out_idxs) == 0 and len(graph_inputs) == 0):
                raise ValueError(f"Error: input {input_name} of {node.name}")
            inputs.append(input_name + "(" + shape + ")")
        if len(inputs) == 0:
            raise ValueError(f"Error: {node.name} has no inputs")
        line.append("input:" + ";".join(inputs))
        outputs = []
        for output_index, output_name in enumerate(node.output):
            if len(output_name) == 0:
                raise ValueError(f"Error: {node.name} has an unnamed output")
            output_name, weights, in_idxs, _, _, graph_outputs, shape = search_name(output_name, node, -output_index - 1)
            if any(i <= idx for i in in_idxs) or (len(in_idxs) == 0 and len(graph_outputs) == 0) or len(weights) != 0:
                raise ValueError(f"Error: output {output_name} of {node.name}")
            outputs.append(output_name + "(" + shape + ")")
        line.append("output:" + ";".join(outputs))
        attrs = []
        for a in node.attribute:
            if a.type == onnx.AttributeProto.INT:
                attr = str(a.i)
            elif a.type == onnx.AttributeProto.FLOAT:
                attr = str(a.f)
            elif a.type == onnx.AttributeProto.STRING:
                attr = a.s.decode("utf-8", errors="ignore") if isinstance(a.s, bytes) else str(a.s)
            elif a.type == onnx.AttributeProto.INTS:
                attr = ",".join(str(x) for x in a.ints)
            elif a.type == onnx.AttributeProto.TENSOR:
                v = onnx.numpy_helper.to_array(a.t).flatten().tolist()
                if len(v) != 1:
                    raise ValueError(f"Error: attribute {a.name} of {node.name} is not a scalar")
                attr = str(v[0])
            else:
                raise ValueError(f"Error: attribute {a.name} of {node.name} has an unsupported type")
            attrs.append(a.name + ":" + attr)
        if len(attrs) != 0:
            line.append(";".join(attrs))
        if any("*" in t for t in line):
            raise ValueError(f"Error: '*' in the line of {node.name}")
        model_txt.write("*".join(line) + "\n")
    model_txt.close()
    return op_stats


def child_convert(spec: dict) -> dict:
    from harness import memory_figures
    t0 = time.perf_counter()
    op_stats = convert_onnx2txt(spec["in"], Path(spec["out"]))
    return {"convert_s": time.perf_counter() - t0, "op_stats": op_stats, "mem": memory_figures()}


def step_convert(args) -> dict:
    info = {}
    for model in args.models:
        src, out = onnx_path(model, "simplify"), MODELS / MODEL_NAMES[model]
        if not src.is_file():
            raise StepFailed("convert", f"{src} is missing (the ONNX files are removed once used, unless "
                                         f"--keep-onnx): redo from the export, --redo export")
        log(f"[convert] {model}: onnx2txt, fp16 weights, in a fresh process -> {out}")
        spec = {"kind": "convert", "in": str(src), "out": str(out), "result": str(ROOT / f"convert-{model}.json")}
        rc, res, wall = run_child(SCRIPT, spec, nice=NICE)
        if rc != 0 or not res or res.get("error"):
            raise StepFailed("convert", f"{model}: {describe_rc(rc)}\n{(res or {}).get('error', '')}")
        total = sum(res["op_stats"].values())
        log(f"[convert] {model}: {wall:.0f} s, {total} ops ({', '.join(f'{k} {v}' for k, v in sorted(res['op_stats'].items(), key=lambda kv: -kv[1]))})")
        info[model] = res
        if not args.keep_onnx:
            shutil.rmtree(src.parent)   # converted: the simplified ONNX is no longer needed
    return info


# ----------------------------------------------------------------------------- step: run

OPS_TIMES_MARK = "\033[7m > \033[0m"   # what m_ops_times_printf prints before its per-op-kind times
EVAL_MARK = re.compile(r"^\[eval (\d+)\] ", re.M)


def drop_folder_cache(folder: Path) -> int:
    """POSIX_FADV_DONTNEED on every file of a converted model: its first evaluation reads from disk."""
    n = 0
    for f in folder.iterdir():
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        n += 1
    return n


def onnxstream_ops_ms(stdout: str) -> dict[str, float]:
    """Milliseconds per op kind in the last evaluation, from m_ops_times_printf's lines: it prints
    ` Kind:ms/10,` per kind at the end of every model run (sd.cpp's 10 steps), so x10 here; the
    VAE's 25 tile runs in the last evaluation add up."""
    evals = EVAL_MARK.split(stdout)   # [before eval 1, "1", between 1 and 2, "2", ...]
    last = evals[-3] if len(evals) >= 3 else stdout
    ops: dict[str, float] = {}
    for part in last.split(OPS_TIMES_MARK)[1:]:
        for kind, ms in re.findall(r" (\w+):([0-9.eE+-]+),", part):
            ops[kind] = ops.get(kind, 0.0) + float(ms) * 10
    return ops


def run_onnxstream(config: str, model: str, inputs: list[str], label: str, repeats: int) -> dict:
    """One OnnxStream case in a fresh driver process, after dropping its model's page cache."""
    folder = MODELS / MODEL_NAMES[model]
    out_raw, result, stdout_log = RUNS / f"{label}.f32", RUNS / f"{label}.driver.json", RUNS / f"{label}.log"
    for p in (out_raw, result):
        p.unlink(missing_ok=True)
    files = drop_folder_cache(folder)
    log(f"[{label}] page cache of its {files} model files dropped (POSIX_FADV_DONTNEED) - 1st eval is a cold read")
    # Not niced here: our cases (bench/unet_full.py's children) are not either, so both sides run at
    # the niceness the script was started with.
    cmd = [str(DRIVER), config, str(folder), str(out_raw), str(result), str(repeats)] + inputs
    t0 = time.perf_counter()
    with open(stdout_log, "w") as f:
        rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - t0
    text = stdout_log.read_text(errors="replace")
    res = read_json(result) or {}
    res.update(label=label, rc=rc, process_wall_s=wall, completed=rc == 0 and out_raw.is_file() and "eval_s" in res)
    if not res["completed"]:
        err = [ln for ln in text.splitlines() if "ERROR" in ln][-1:] or text.splitlines()[-3:]
        log(f"[{label}] FAILED: {describe_rc(rc)}: {' / '.join(err)} (log {stdout_log})")
        return res
    shape = (1, 4, LATENT, LATENT) if model == "unet" else (1, 3, LATENT * 8, LATENT * 8)
    arr = np.fromfile(out_raw, dtype=np.float32).reshape(shape)
    res["output"] = str(RUNS / f"{label}.npy")
    np.save(res["output"], arr)
    out_raw.unlink()
    res["s_per_eval"] = res["eval_s"][-1]
    res["ops_ms"] = onnxstream_ops_ms(text)
    res["mem"] = {"vmhwm_bytes": res["vmhwm_bytes"]}
    log(f"[{label}] evals {', '.join(f'{t:.1f}' for t in res['eval_s'])} s, peak RSS {res['vmhwm_bytes'] / MB:.0f} MB")
    return res


def write_unet_inputs(inputs_dir: Path) -> list[str]:
    """bench/unet_full.py's inputs as raw float32 files, as driver arguments NAME=FILE:SHAPE (names
    encoded as OnnxStream's get_final_name does: '_' is '_5F_')."""
    folder = RUNS / "inputs"
    folder.mkdir(parents=True, exist_ok=True)
    args = []
    for name, shape in UNET_INPUTS:
        arr = np.asarray(np.load(inputs_dir / f"{name}.npy"), dtype=np.float32).reshape(shape)
        arr.tofile(folder / f"{name}.f32")
        args.append(f"{name.replace('_', '_5F_')}={folder / f'{name}.f32'}:{','.join(map(str, shape))}")
    return args


def write_latent(latent: Path) -> list[str]:
    arr = np.load(latent).astype(np.float32)
    path = RUNS / "inputs" / "latent.f32"
    path.parent.mkdir(parents=True, exist_ok=True)
    arr.tofile(path)
    return [f"latent_5F_sample={path}:{','.join(map(str, arr.shape))}"]


def our_unet_ops(preset: str, inputs_dir: Path, evals: int) -> dict:
    """Our op split: one unet_full.py engine child with ops_printf, its trace summary of evaluation
    `evals` (1 cold, 2 warm: the one compared; seconds per op kind, the per-op printing included)."""
    import unet_full

    label = f"ours-{preset}-ops"
    spec = {"kind": "engine", "preset": preset, "overrides": {"ops_printf": True}, "inputs": str(inputs_dir),
            "repeats": evals - 1, "output": str(RUNS / f"{label}.npy"), "result": str(RUNS / f"{label}.json")}
    trace = RUNS / f"{label}.trace"
    with open(trace, "w") as f:
        rc = subprocess.call([sys.executable, str(unet_full.SCRIPT), "_child", json.dumps(spec)],
                             stdout=f, stderr=subprocess.STDOUT, cwd=str(REPO))
    if rc != 0:
        log(f"[{label}] FAILED: {describe_rc(rc)} (trace {trace})")
        return {}
    blocks = re.split(r"^op\s+count\s+seconds.*$", trace.read_text(), flags=re.M)
    ops = {}
    for line in blocks[-1].splitlines():
        parts = line.split()
        if len(parts) == 7 and parts[1].isdigit():
            ops[parts[0]] = float(parts[2]) * 1000
    return ops


def ensure_vae_reference(latent: Path, args) -> dict | None:
    import vae_full

    res = vae_full.cached("diffusers")
    if res is None:
        log("[diffusers vae] fp32 untiled reference in a fresh process")
        res = vae_full.run_case("diffusers", latent, args)
        write_json(vae_full.RUNS / f"{vae_full.CASES['diffusers'][1]}.json", res)
    return res if res.get("completed") else None


# What one round runs, in this order: (key, side, what, model)
CASES = (
    ("os-unet-rpi-lowmem", "onnxstream", "unet-rpi-lowmem", "unet"),
    ("ours-unet-rpi-lowmem", "ours", "rpi-lowmem", "unet"),
    ("os-unet-default", "onnxstream", "unet-default", "unet"),
    ("ours-unet-default", "ours", "default", "unet"),
    ("os-vae-tiled", "onnxstream", "vae-tiled", "vae"),
    ("ours-vae-rpi-lowmem", "ours", "lowmem", "vae"),
)
CASE_GROUPS = {"unet-lowmem": ("os-unet-rpi-lowmem", "ours-unet-rpi-lowmem"),
               "unet-default": ("os-unet-default", "ours-unet-default"),
               "vae": ("os-vae-tiled", "ours-vae-rpi-lowmem")}
# Ours against OnnxStream's, for the ratios and PCCs.
OPPONENT = {"ours-unet-rpi-lowmem": "os-unet-rpi-lowmem", "ours-unet-default": "os-unet-default",
            "ours-vae-rpi-lowmem": "os-vae-tiled"}


def run_case(key: str, side: str, what: str, model: str, ctx: dict, args) -> dict:
    import unet_full
    import vae_full

    if side == "onnxstream":
        inputs = ctx["os_unet_inputs"] if model == "unet" else ctx["os_latent"]
        return run_onnxstream(what, model, inputs, key, repeats=args.evals if model == "unet" else 1)
    if model == "unet":
        r = unet_full.run_engine_case(LATENT, LATENT, 1, what, {}, ctx["inputs_dir"], ctx["unet_args"])
        if r.get("completed"):
            r["s_per_eval"] = r["eval_s"][args.evals - 1]   # its evaluation 1 is cold, 2 warm
    else:
        r = vae_full.run_case(what, ctx["latent"], ctx["vae_args"])
        if r.get("completed"):
            r["s_per_eval"] = r["decode_s"]
    return r


def median_rounds(rs: list[dict]) -> dict:
    """A case over rounds: its last round's result, s/eval the median over rounds, peak RSS the highest."""
    failed = [r for r in rs if not r.get("completed")]
    if failed:
        return failed[0]
    r = dict(rs[-1], round_s=[x["s_per_eval"] for x in rs])
    r["s_per_eval"] = float(np.median(r["round_s"]))
    r["peak_rss_bytes"] = max(x["mem"]["vmhwm_bytes"] for x in rs)
    return r


def step_run(args) -> dict:
    import unet_full
    import vae_full
    from kernels_check import require_c_kernels

    log(f"engine kernels: {require_c_kernels()}")
    keys = [k for g in args.cases for k in CASE_GROUPS[g]]
    for key, side, _, model in CASES:
        if key in keys and side == "onnxstream" and not (MODELS / MODEL_NAMES[model] / "model.txt").is_file():
            raise StepFailed("convert", f"{MODELS / MODEL_NAMES[model] / 'model.txt'} is missing")
    if not DRIVER.is_file():
        raise StepFailed("build", f"{DRIVER} is missing")
    RUNS.mkdir(parents=True, exist_ok=True)     # vae_full's folder: its ensure_latent below makes it
    info = unet_full.ensure_weights()
    ctx = {"inputs_dir": unet_full.ensure_inputs(LATENT, LATENT, 1), "latent": vae_full.ensure_latent(),
           "unet_args": argparse.Namespace(repeats=1, skip_diffusers=False, fresh_reference=False, torch_threads=2),
           "vae_args": argparse.Namespace(torch_threads=2)}
    ctx["os_unet_inputs"] = write_unet_inputs(ctx["inputs_dir"])
    ctx["os_latent"] = write_latent(ctx["latent"])
    refs = {"unet": unet_full.run_reference(LATENT, LATENT, 1, info, ctx["inputs_dir"], ctx["unet_args"])
            if any("unet" in k for k in keys) else None,
            "vae": ensure_vae_reference(ctx["latent"], ctx["vae_args"]) if "os-vae-tiled" in keys else None}
    rounds: dict[str, list[dict]] = {k: [] for k in keys}
    for rnd in range(args.rounds):
        log(f"[round {rnd + 1}/{args.rounds}]")
        for key, side, what, model in CASES:
            if key in keys:
                rounds[key].append(run_case(key, side, what, model, ctx, args))
    cases = {k: median_rounds(rs) for k, rs in rounds.items()}
    for key, r in cases.items():
        model = "unet" if "unet" in key else "vae"
        if r.get("completed") and refs[model]:
            r["vs_diffusers"] = compare(r["output"], refs[model]["output"])
        opp = cases.get(OPPONENT.get(key, ""))
        if r.get("completed") and opp and opp.get("completed"):
            r["vs_onnxstream"] = compare(r["output"], opp["output"])
            per_round = [a["s_per_eval"] / b["s_per_eval"] for a, b in zip(rounds[key], rounds[OPPONENT[key]])]
            r["x_onnxstream_rounds"] = per_round
            r["x_onnxstream"] = float(np.median(per_round))
    ops = {}
    if args.op_split and "os-unet-rpi-lowmem" in cases and cases["os-unet-rpi-lowmem"].get("completed"):
        ops = {"onnxstream rpi-lowmem": cases["os-unet-rpi-lowmem"]["ops_ms"],
               "ours rpi-lowmem": our_unet_ops("rpi-lowmem", ctx["inputs_dir"], args.evals)}
        if "os-unet-default" in cases and cases["os-unet-default"].get("completed"):
            ops["onnxstream default"] = cases["os-unet-default"]["ops_ms"]
    report(cases, refs, ops, args)
    out = ROOT / f"results-{time.strftime('%Y%m%d-%H%M%S')}.json"
    write_json(out, {"cases": cases, "rounds": rounds, "ops_ms": ops, "argv": sys.argv, "machine": machine()})
    log(f"\nfull results: {out}")
    return {"results": str(out)}


def machine() -> dict:
    model = ""
    try:
        model = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    return {"node": platform.node(), "cpus": os.cpu_count(), "cpu": model,
            "avx512f": " avx512f" in flags, "load_average": os.getloadavg()}


def report(cases: dict, refs: dict, ops: dict, args) -> None:
    rows = []
    for key, r in cases.items():
        row = {"case": key}
        if not r.get("completed"):
            row["note"] = f"FAILED ({describe_rc(r.get('rc', -1))})"
            rows.append(row)
            continue
        d, o = r.get("vs_diffusers") or {}, r.get("vs_onnxstream") or {}
        evals = r.get("eval_s") or [r.get("decode_s")]
        row.update({"eval1 s": fmt(evals[0], ".1f"), "s/eval": fmt(r["s_per_eval"], ".1f"),
                    "peak RSS MB": fmt(r["peak_rss_bytes"] / MB, ".0f"),
                    "x OnnxStream": fmt(r.get("x_onnxstream"), ".2f"),
                    "PCC vs diffusers": fmt(d.get("pcc"), ".6f"), "PCC vs OnnxStream": fmt(o.get("pcc"), ".6f"),
                    "note": f"rounds {', '.join(f'{x:.1f}' for x in r['round_s'])} s" if len(r["round_s"]) > 1 else ""})
        rows.append(row)
    log("")
    log(f"== results (s/eval: UNet = evaluation {args.evals} in the process (1: a cold read after POSIX_FADV_DONTNEED, "
        "2: warm);"
        " VAE = one 25-tile decode of a 128x128 latent, cold; median over rounds; peak RSS = VmHWM of the case's "
        "process, highest over rounds; MB = 10^6 bytes; x OnnxStream = ours / OnnxStream's same configuration, "
        "median of the per-round ratios)")
    print_table(["case", "eval1 s", "s/eval", "peak RSS MB", "x OnnxStream", "PCC vs diffusers", "PCC vs OnnxStream",
                 "note"], rows)
    for model, ref in refs.items():
        if ref:
            log(f"  diffusers fp32 {model} reference: {ref['output']}")
    lm, os_lm = cases.get("ours-unet-rpi-lowmem"), cases.get("os-unet-rpi-lowmem")
    if lm and os_lm and lm.get("completed") and os_lm.get("completed"):
        ratio = lm["x_onnxstream"]
        rss_ok = lm["peak_rss_bytes"] <= os_lm["peak_rss_bytes"]
        log("")
        log(f"== target: rpi-lowmem UNet evaluation <= 1.0x OnnxStream --rpi-lowmem (aim 0.7x) at <= its peak RSS: "
            f"{'PASS' if ratio <= 1.0 and rss_ok else 'FAIL'} - {ratio:.2f}x "
            f"(rounds {', '.join(f'{x:.2f}' for x in lm['x_onnxstream_rounds'])}), peak RSS "
            f"{lm['peak_rss_bytes'] / MB:.0f} MB vs {os_lm['peak_rss_bytes'] / MB:.0f} MB")
    if ops:
        log("")
        log("== op split, one 128x128 UNet evaluation, seconds per op kind (OnnxStream: its m_ops_times_printf, "
            "weight reads included; ours: the op trace of a separate ops_printf run, printing included)")
        for side, kinds in ops.items():
            total = sum(kinds.values()) / 1000
            parts = ", ".join(f"{k} {v / 1000:.1f}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]))
            log(f"  {side:24s} total {total:6.1f} s: {parts}")
        log("  grouped (s): " + " | ".join(
            f"{side}: " + ", ".join(f"{g} {v:.1f}" for g, v in op_groups(kinds).items()) for side, kinds in ops.items()))


# Op kinds on both sides, grouped to compare like with like. OnnxStream runs ONNX ops: a Linear is a
# MatMul (+ Add for its bias), LayerNorm is ReduceMean/Sub/Pow/Add/Sqrt/Div at opset 14, GroupNorm
# is Reshape/InstanceNormalization/Reshape(/Mul/Add), GELU is Erf and friends; ours names its fused
# ops (engine/trace.py). What is not listed is "other" (elementwise, reshapes, copies).
OP_GROUPS = {
    "conv": {"Conv", "conv"},
    "attention": {"AttentionFusedOps", "ScaledDotProductAttention", "Softmax", "attention"},
    "gemm": {"MatMul", "Gemm", "linear", "ff"},
    "norm": {"InstanceNormalization", "ReduceMean", "Pow", "Sqrt", "groupnorm", "layernorm"},
}


def op_groups(kinds: dict[str, float]) -> dict[str, float]:
    """Seconds per group of op kinds (OP_GROUPS), from milliseconds per op kind."""
    out = {g: 0.0 for g in (*OP_GROUPS, "other")}
    for kind, ms in kinds.items():
        group = next((g for g, members in OP_GROUPS.items() if kind in members), "other")
        out[group] += ms / 1000
    return out


# ----------------------------------------------------------------------------- main

# The children this script runs in fresh processes (`SCRIPT _child SPEC`, bench/harness.py).
CHILD_KINDS = {"export": child_export, "simplify": child_simplify, "convert": child_convert}
STEP_FUNCS = {"sources": step_sources, "build": step_build, "export": step_export, "simplify": step_simplify,
              "convert": step_convert, "run": step_run}
STEP_CHECKS = {  # a done step's product, which must still be there
    "sources": lambda: (SRC / "OnnxStream" / "src" / "onnxstream.cpp").is_file(),
    "build": DRIVER.is_file,
    "convert": lambda: all((MODELS / n / "model.txt").is_file() for n in MODEL_NAMES.values()),
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--redo", action="append", default=[], choices=STEPS[:-1], metavar="STEP",
                   help=f"do this step again even if its marker says done, and what follows it ({', '.join(STEPS[:-1])})")
    p.add_argument("--stop-after", choices=STEPS, metavar="STEP", help="stop after this step")
    p.add_argument("--mirrors", type=Path, default=Path(os.environ.get("SLOWFRAME_MIRRORS", "/work/.mirror")),
                   help="folder of bare git mirrors, OWNER+NAME/repo (default $SLOWFRAME_MIRRORS or %(default)s)")
    p.add_argument("--rounds", type=int, default=1, help="interleaved rounds of all cases (default 1)")
    p.add_argument("--cases", default=",".join(CASE_GROUPS),
                   help=f"case groups to run, of {', '.join(CASE_GROUPS)} (default all)")
    p.add_argument("--evals", type=int, choices=(1, 2), default=2,
                   help="the UNet evaluation compared on both sides: 1, the cold one (OnnxStream then runs only "
                        "it: on a loaded machine one takes many minutes), or 2, the warm one (default)")
    p.add_argument("--no-op-split", dest="op_split", action="store_false",
                   help="skip our separate ops_printf run for the op split")
    p.add_argument("--keep-onnx", action="store_true", help="keep the exported and simplified ONNX files")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be >= 1")
    args.cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    if unknown := [c for c in args.cases if c not in CASE_GROUPS]:
        p.error(f"unknown case group(s) {', '.join(unknown)}; choose from {', '.join(CASE_GROUPS)}")
    args.models = ("unet", "vae")
    ROOT.mkdir(parents=True, exist_ok=True)
    log(f"slowframe vs OnnxStream - {time.strftime('%Y-%m-%d %H:%M:%S')}, {platform.node()}, {os.cpu_count()} CPUs; "
        f"cache {ROOT}")
    redo_from = min((STEPS.index(s) for s in args.redo), default=len(STEPS))
    try:
        for i, step in enumerate(STEPS):
            done = step_done(step) if step != "run" else None
            if done and i < redo_from and STEP_CHECKS.get(step, lambda: True)():
                log(f"[{step}] done {done['at']} (marker {marker(step)}); --redo {step} to do it again")
            else:
                t0 = time.perf_counter()
                result = STEP_FUNCS[step](args)
                if step != "run":
                    mark_done(step, dict(result, seconds=time.perf_counter() - t0))
                    log(f"[{step}] done in {time.perf_counter() - t0:.0f} s")
            if step == args.stop_after:
                break
    except StepFailed as e:
        log(str(e))
        return 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "_child":
        sys.exit(child_main(sys.argv[2], CHILD_KINDS))
    sys.exit(main())
