#!/usr/bin/env python3
"""Benchmark of the text encoders: SDXL's full-size CLIP ViT-L (123 M parameters) and
OpenCLIP ViT-bigG (695 M) with random weights, encoding a 225-token prompt and a
negative prompt (3 chunks each: 6 sequences of 77 tokens per encoder).

Compares slowframe's TextEncoders (each preset) with transformers' CLIPTextModel /
CLIPTextModelWithProjection in float32 on the same weights and token ids: seconds and
CPU seconds (loading included), peak RSS (VmHWM of a fresh process per case, imports
included) and the agreement of all four outputs (Pearson correlation, max abs diff).

It needs no download: on first use it writes random SDXL-shaped encoders (fp16, 1.6 GB,
numpy only) and the CLIP tokenizers in diffusers layout under

    ${SLOWFRAME_BENCH_CACHE:-~/.cache/slowframe-bench}/sdxl-text-random/

Run from the repository root:

    python bench/text_full.py                                  # every preset + transformers
    python bench/text_full.py --presets rpi-lowmem --skip-transformers
    python bench/text_full.py --build-only

Not run in CI. Each case runs as `python bench/text_full.py _child SPEC` (bench/harness.py).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repo's engine, if not installed
import engine  # noqa: E402,F401  (it sets OpenBLAS's thread spin: bench/RESULTS.md#threads)
import numpy as np  # noqa: E402

from harness import CACHE, child_main, describe_rc, proc_status_kb, run_child  # noqa: E402
from kernels_check import require_c_kernels  # noqa: E402  (bench/, the script's own folder)

SCRIPT = Path(__file__).resolve()
MODEL = CACHE / "sdxl-text-random"
FIELDS = ("prompt_embeds", "negative_embeds", "pooled", "negative_pooled")

ENCODERS = {   # SDXL base's text_encoder/config.json and text_encoder_2/config.json
    "text_encoder": dict(architectures=["CLIPTextModel"], hidden_size=768, num_hidden_layers=12,
                         num_attention_heads=12, intermediate_size=3072, hidden_act="quick_gelu", projection_dim=768),
    "text_encoder_2": dict(architectures=["CLIPTextModelWithProjection"], hidden_size=1280, num_hidden_layers=32,
                           num_attention_heads=20, intermediate_size=5120, hidden_act="gelu", projection_dim=1280),
}
COMMON = dict(model_type="clip_text_model", vocab_size=49408, max_position_embeddings=77, layer_norm_eps=1e-5,
              bos_token_id=0, eos_token_id=2, pad_token_id=1, attention_dropout=0.0, dropout=0.0,
              initializer_factor=1.0, initializer_range=0.02, torch_dtype="float16")

WORDS = ("cat dog red blue tree house sky sun moon star car road city river lake hill rock sand sea boat bird "
         "fish king queen girl boy man woman old new big small dark light gold green white").split()
PROMPT = " ".join(WORDS[i % len(WORDS)] for i in range(225))          # 225 single-token words: 3 full chunks
NEGATIVE = "blurry, ugly, low quality, watermark, text, deformed hands, extra fingers"


def build() -> None:
    if (MODEL / "done").exists():
        return
    from engine.safetensors import SafetensorsWriter
    from engine.sdxl.text_encoder import param_shapes, parse_config
    from engine.sdxl.tokenizer import standard_vocabulary

    print(f"writing random full-size SDXL text encoders to {MODEL} (once)", flush=True)
    rng = np.random.default_rng(0)
    for name, sizes in ENCODERS.items():
        folder = MODEL / name
        folder.mkdir(parents=True, exist_ok=True)
        config = {**COMMON, **sizes}
        shapes = param_shapes(parse_config(config), prefix="text_model.")
        with open(folder / "model.fp16.safetensors", "wb") as f:
            writer = SafetensorsWriter(f, [(n, "F16", s) for n, s in shapes.items()], {"format": "pt"})
            for n, shape in shapes.items():
                writer.write(n, _init(n, shape, rng).astype(np.float16))
            writer.close()
        (folder / "config.json").write_text(json.dumps(config, indent=2))
    vocab, merges = standard_vocabulary()
    for name, pad in (("tokenizer", "<|endoftext|>"), ("tokenizer_2", "!")):
        folder = MODEL / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
        (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(" ".join(m) for m in merges) + "\n",
                                           encoding="utf-8")
        (folder / "tokenizer_config.json").write_text(json.dumps(
            {"model_max_length": 77, "pad_token": pad, "tokenizer_class": "CLIPTokenizer", "do_lower_case": True,
             "bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}))
    (MODEL / "done").write_text("ok\n")


def _init(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if "norm" in name:
        return (1.0 if name.endswith("weight") else 0.0) + 0.1 * rng.standard_normal(shape, dtype=np.float32)
    if len(shape) == 1:
        return 0.02 * rng.standard_normal(shape, dtype=np.float32)
    if "embedding" in name:
        return 0.5 * rng.standard_normal(shape, dtype=np.float32)
    return rng.standard_normal(shape, dtype=np.float32) / np.float32(np.sqrt(shape[1]))


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def peak_rss_mb() -> float:
    return proc_status_kb("VmHWM") / 1024


def child_slowframe(spec: dict) -> dict:
    from engine.sdxl import TextEncoders

    started = time.perf_counter()
    with TextEncoders.load(MODEL, preset=spec["preset"], cache=False) as te:
        c = te.encode(PROMPT, NEGATIVE, emphasis=False)
    figures = dict(seconds=time.perf_counter() - started, cpu_seconds=cpu_seconds(), peak_rss_mb=peak_rss_mb())
    np.savez(spec["output"], **{f: getattr(c, f) for f in FIELDS})
    return figures


def child_transformers(spec: dict) -> dict:
    import torch
    from transformers import CLIPTextModel, CLIPTextModelWithProjection

    from engine.sdxl.prompt import Segment, chunks_needed, to_chunks, weighted_tokens
    from engine.sdxl.tokenizer import sdxl_tokenizers

    torch.set_grad_enabled(False)
    started = time.perf_counter()
    tokenizers = sdxl_tokenizers(MODEL)
    tokens = [[weighted_tokens(tok, [Segment(text, 1.0)]) for tok in tokenizers] for text in (PROMPT, NEGATIVE)]
    chunks = max(chunks_needed(tok, t) for pair in tokens for tok, t in zip(tokenizers, pair))
    states, pooled = [], None
    for i, cls in enumerate((CLIPTextModel, CLIPTextModelWithProjection)):
        model = cls.from_pretrained(MODEL / ("text_encoder", "text_encoder_2")[i], variant="fp16",
                                    dtype=torch.float32).eval()
        ids = np.concatenate([to_chunks(tokenizers[i], pair[i], chunks)[0] for pair in tokens])
        out = model(torch.from_numpy(ids), output_hidden_states=True)
        states.append(out.hidden_states[-2].numpy())
        if i == 1:
            pooled = out.text_embeds.numpy()
        del model, out
    embeds = np.concatenate(states, axis=-1)
    width = embeds.shape[-1]
    outputs = dict(prompt_embeds=embeds[:chunks].reshape(1, -1, width), negative_embeds=embeds[chunks:].reshape(
        1, -1, width), pooled=pooled[:1], negative_pooled=pooled[chunks:chunks + 1])
    figures = dict(seconds=time.perf_counter() - started, cpu_seconds=cpu_seconds(), peak_rss_mb=peak_rss_mb())
    np.savez(spec["output"], **outputs)
    return figures


def run_case(spec: dict, scratch: Path, label: str) -> dict:
    """One case in a fresh process: its figures (a JSON result) and its four outputs (an .npz)."""
    name = label.replace(" ", "-")
    spec = dict(spec, output=str(scratch / f"{name}.npz"), result=str(scratch / f"{name}.json"))
    rc, result, _ = run_child(SCRIPT, spec)
    if rc != 0 or not result or result.get("error"):
        raise SystemExit(f"{label} failed ({describe_rc(rc)})")
    with np.load(spec["output"]) as data:
        result["outputs"] = {f: data[f] for f in FIELDS}
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="+", default=["rpi-lowmem", "rpi", "default"])
    parser.add_argument("--skip-transformers", action="store_true")
    parser.add_argument("--build-only", action="store_true")
    args = parser.parse_args()
    build()
    if args.build_only:
        return 0
    print(f"engine kernels: {require_c_kernels()}", flush=True)
    results = {}
    scratch = MODEL / "results"
    scratch.mkdir(exist_ok=True)
    cases = [(p, {"kind": "slowframe", "preset": p}) for p in args.presets]
    if not args.skip_transformers:
        cases.append(("transformers fp32", {"kind": "transformers"}))
    for label, spec in cases:
        print(f"running {label} ...", flush=True)
        results[label] = run_case(spec, scratch, label)
    reference = results.get("transformers fp32")
    print(f"\n225-token prompt + negative prompt, 3 chunks each (cores: {os.cpu_count()})")
    print(f"{'case':<18s} {'seconds':>8s} {'CPU s':>7s} {'peak RSS MB':>12s}  agreement with transformers fp32 "
          "(PCC, max |diff|)")
    for label, r in results.items():
        agreement = ""
        if reference is not None and r is not reference:
            parts = []
            for f in FIELDS:
                a, b = r["outputs"][f].astype(np.float64).ravel(), reference["outputs"][f].astype(np.float64).ravel()
                parts.append(f"{f} {np.corrcoef(a, b)[0, 1]:.7f} {np.abs(a - b).max():.2e}")
            agreement = "; ".join(parts)
        print(f"{label:<18s} {r['seconds']:8.1f} {r['cpu_seconds']:7.1f} {r['peak_rss_mb']:12.0f}  {agreement}")
    return 0


CHILD_KINDS = {"slowframe": child_slowframe, "transformers": child_transformers}

if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "_child":
        sys.exit(child_main(sys.argv[2], CHILD_KINDS))
    sys.exit(main())
