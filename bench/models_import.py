#!/usr/bin/env python3
"""Benchmark of `slowframe models import` on a full-size single-file SDXL model.

Writes a random single-file model with exactly the tensors, names and shapes of
sd_xl_base_1.0.safetensors (SGM layout, fp16, ~6.9 GB; values are random finite fp16
bits, which costs the converter the same as real weights), then imports it in a fresh
subprocess per precision and reports seconds, peak RSS (VmHWM of that process) and
the output size. It also checks that the configs the importer reads from the shapes
are SDXL base's. Big files go to

    ${SLOWFRAME_BENCH_CACHE:-~/.cache/slowframe-bench}/models-import/

and are deleted at the end unless --keep. Needs ~14 GB of free disk (the model file and
one import at a time). Run from the repository root:

    python bench/models_import.py                   # uint8 and fp16
    python bench/models_import.py --precisions uint8 --keep

Not run in CI.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repo's engine, if not installed
import engine  # noqa: E402,F401  (it sets OpenBLAS's thread spin: bench/RESULTS.md#threads)
import numpy as np  # noqa: E402

from engine.atomic import publish  # noqa: E402
from harness import CACHE as BENCH_CACHE  # noqa: E402  (bench/, the script's own folder)
from harness import REPO  # noqa: E402

sys.path.insert(0, str(REPO / "tests"))
CACHE = BENCH_CACHE / "models-import"

SDXL_UNET = {
    "_class_name": "UNet2DConditionModel", "addition_embed_type": "text_time", "addition_time_embed_dim": 256,
    "attention_head_dim": [5, 10, 20], "block_out_channels": [320, 640, 1280], "cross_attention_dim": 2048,
    "down_block_types": ["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"], "in_channels": 4,
    "layers_per_block": 2, "norm_num_groups": 32, "out_channels": 4, "projection_class_embeddings_input_dim": 2816,
    "transformer_layers_per_block": [1, 2, 10], "use_linear_projection": True,
    "up_block_types": ["CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"],
}
SDXL_VAE = {"_class_name": "AutoencoderKL", "block_out_channels": [128, 256, 512, 512], "in_channels": 3,
            "latent_channels": 4, "layers_per_block": 2, "norm_num_groups": 32, "out_channels": 3,
            "scaling_factor": 0.13025, "down_block_types": ["DownEncoderBlock2D"] * 4,
            "up_block_types": ["UpDecoderBlock2D"] * 4}
CLIP = {"model_type": "clip_text_model", "vocab_size": 49408, "max_position_embeddings": 77,
        "layer_norm_eps": 1e-05, "bos_token_id": 0, "eos_token_id": 2, "pad_token_id": 1}
SDXL_TE1 = {**CLIP, "architectures": ["CLIPTextModel"], "hidden_size": 768, "intermediate_size": 3072,
            "num_attention_heads": 12, "num_hidden_layers": 12, "hidden_act": "quick_gelu", "projection_dim": 768}
SDXL_TE2 = {**CLIP, "architectures": ["CLIPTextModelWithProjection"], "hidden_size": 1280, "intermediate_size": 5120,
            "num_attention_heads": 20, "num_hidden_layers": 32, "hidden_act": "gelu", "projection_dim": 1280}
CONFIGS = {"unet": SDXL_UNET, "vae": SDXL_VAE, "text_encoder": SDXL_TE1, "text_encoder_2": SDXL_TE2}

CHILD = """
import json, sys, time
from engine.convert.importer import import_model
from engine.trace import peak_rss_bytes
started = time.monotonic()
report = import_model(sys.argv[1], sys.argv[2], precision=sys.argv[3], log=lambda line: print(line, flush=True))
print(json.dumps({"seconds": time.monotonic() - started, "peak_rss": peak_rss_bytes(),
                  "bytes_in": report.bytes_in, "bytes_out": report.bytes_out}))
"""


def write_single_file(path: Path) -> None:
    from sgm_files import sgm_entries, write_sgm_file

    rng = np.random.default_rng(0)

    def random_fp16(shape, parts, how) -> np.ndarray:
        bits = rng.integers(0, 1 << 16, size=shape, dtype=np.uint16)
        bits &= 0xBFFF          # the exponent's top bit clear: finite, |x| < 2
        return bits.view(np.float16)

    tmp = path.with_suffix(".partial")
    write_sgm_file(tmp, sgm_entries(CONFIGS), random_fp16)
    publish(tmp, path)


def check_derived_configs(path: Path) -> list[str]:
    """Differences between the configs the importer reads from the shapes and SDXL base's."""
    from engine.convert.sgm_source import derive_configs
    from engine.safetensors import read_header

    derived = derive_configs({n: i.shape for n, i in read_header(path).items()}, path)
    return [f"{c}.{k}: {derived[c].get(k)!r} != {v!r}" for c, config in CONFIGS.items() for k, v in config.items()
            if derived[c].get(k) != v]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--precisions", nargs="+", default=["uint8", "fp16"], choices=["uint8", "fp16"])
    parser.add_argument("--keep", action="store_true", help="keep the model file and outputs")
    args = parser.parse_args()
    CACHE.mkdir(parents=True, exist_ok=True)
    single_file = CACHE / "sd_xl_base_1.0-random.safetensors"
    try:
        if not single_file.exists():
            started = time.monotonic()
            print(f"writing a random full-size SDXL single-file model to {single_file}", flush=True)
            write_single_file(single_file)
            print(f"  {single_file.stat().st_size / 1e9:.2f} GB in {time.monotonic() - started:.0f} s", flush=True)
        differences = check_derived_configs(single_file)
        print("configs read from the shapes: " + ("SDXL base's" if not differences else "; ".join(differences)))
        results = {}
        for precision in args.precisions:
            dest = CACHE / f"imported-{precision}"
            shutil.rmtree(dest, ignore_errors=True)
            print(f"importing as {precision} ...", flush=True)
            proc = subprocess.run([sys.executable, "-c", CHILD, str(single_file), str(dest), precision], cwd=REPO,
                                  capture_output=True, text=True)
            if proc.returncode:
                sys.exit(f"import failed:\n{proc.stdout}\n{proc.stderr}")
            results[precision] = result = json.loads(proc.stdout.strip().splitlines()[-1])
            print(f"  {precision}: {result['seconds']:.0f} s, peak RSS {result['peak_rss'] / 2**20:.0f} MiB, "
                  f"{result['bytes_in'] / 1e9:.2f} GB -> {result['bytes_out'] / 1e9:.2f} GB", flush=True)
            if not args.keep:
                shutil.rmtree(dest)
        print(json.dumps(results, indent=1))
    finally:
        if not args.keep:
            shutil.rmtree(CACHE, ignore_errors=True)


if __name__ == "__main__":
    main()
