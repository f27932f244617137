"""`slowframe generate`: one picture from the command line, resumable, with a progress bar.

The flags follow OnnxStream's sd tool where they overlap (--models-path, --prompt,
--neg-prompt, --steps, --seed, --res, --rpi-lowmem is --preset rpi-lowmem here).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np

from engine.atomic import atomic_write
from engine.errors import Cancelled, InputError
from engine.options import PRESETS
from engine.sdxl.recipes import RECIPES
from engine.sdxl.samplers import SAMPLERS, SCHEDULES


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "generate", help="generate one picture from a prompt",
        description="Generate one picture with SDXL. With --checkpoint-dir the run saves its state after every "
                    "UNet evaluation; run the same command again after a power cut or Ctrl-C and it resumes.")
    p.add_argument("--models-path", required=True, metavar="DIR", help="an SDXL model folder (diffusers layout)")
    p.add_argument("--prompt", required=True, help="what to draw; (word:1.3) and [word] set emphasis")
    p.add_argument("--neg-prompt", default=None, metavar="TEXT", help="what to avoid")
    p.add_argument("--steps", type=int, default=None, help="sampling steps (default: the recipe's, 20 for sdxl)")
    p.add_argument("--seed", type=int, default=None, help="0..2^64-1 (default: random, printed)")
    p.add_argument("--num", type=int, default=1, metavar="N",
                   help="N pictures in one pass over the weights, seeds SEED, SEED+1, ... (written as "
                        "OUTPUT-1.png, OUTPUT-2.png, ...; the preset's memory budget limits N)")
    p.add_argument("--width", type=int, default=None, help="pixels, a multiple of 64 (default: the recipe's, 1024)")
    p.add_argument("--height", type=int, default=None, help="pixels, a multiple of 64 (default: the recipe's, 1024)")
    p.add_argument("--res", default=None, metavar="WxH", help="width and height at once, e.g. 1344x768")
    p.add_argument("--guidance", type=float, default=None, help="classifier-free guidance (default: the recipe's, 5 for sdxl, 0 for the few-step models)")
    p.add_argument("--recipe", default=None, metavar="NAME",
                   help=f"the sampling a kind of model was made for: {', '.join(RECIPES)} (default sdxl; "
                        "the README lists the files each needs)")
    p.add_argument("--sampler", default=None, metavar="NAME",
                   help=f"{', '.join(SAMPLERS)} (OnnxStream's names too, e.g. dpm++2m; default: the recipe's)")
    p.add_argument("--schedule", default=None, metavar="NAME",
                   help=f"{', '.join(SCHEDULES)} (default: the model's own spacing)")
    p.add_argument("--timesteps", default=None, metavar="T,T,...",
                   help="explicit training timesteps instead of a schedule, e.g. 999,749,499,249 (sets the steps)")
    p.add_argument("--eta", type=float, default=None,
                   help="fresh noise per step, 0-1, for euler_a, dpm2_a, dpmpp_2s_a, dpmpp_2m_sde, dpmpp_3m_sde "
                        "(default 1) and ddim (default 0)")
    p.add_argument("--gamma", type=float, default=None, help="tcd's fresh noise per step, 0-1 (default 0.3)")
    p.add_argument("--turbo", action="store_true", help="the same as --recipe turbo")
    p.add_argument("--lora", action="append", default=[], metavar="FILE[:WEIGHT]",
                   help="a style LoRA applied while the weights stream (repeatable; weight default 1)")
    p.add_argument("--preset", choices=list(PRESETS), default="default",
                   help="engine settings: default (a PC), rpi, rpi-lowmem (a Pi Zero 2 W at 1024x1024)")
    p.add_argument("--output", default="out.png", help="the PNG to write (default: %(default)s)")
    p.add_argument("--save-latents", metavar="FILE.npy", help="also write the final latents (before VAE scaling)")
    p.add_argument("--decode-latents", metavar="FILE.npy", help="skip diffusion: decode these latents")
    p.add_argument("--init-noise", metavar="FILE.npy", help="initial noise (1,4,H/8,W/8) instead of the seed's")
    p.add_argument("--not-tiled", action="store_true", help="decode the VAE in one piece (needs far more memory)")
    p.add_argument("--checkpoint-dir", metavar="DIR", help="save state after every UNet evaluation; resume from it")
    p.add_argument("--restart", action="store_true", help="discard the checkpoints in --checkpoint-dir first")
    p.add_argument("--ops-printf", action="store_true", help="print every op with its bytes, time and RSS")
    p.add_argument("--json", action="store_true", help="print progress as one JSON object per line on stdout")
    p.set_defaults(func=cmd_generate)


def size_from(args: argparse.Namespace) -> tuple[int | None, int | None]:
    if args.res is not None:
        if args.width is not None or args.height is not None:
            raise InputError("give either --res WxH or --width/--height, not both")
        w, sep, h = args.res.lower().partition("x")
        if not sep or not w.isdigit() or not h.isdigit():
            raise InputError(f"--res must look like 1024x1024 (width x height), got '{args.res}'")
        return int(w), int(h)
    return args.width, args.height


def cmd_generate(args: argparse.Namespace) -> int:
    from engine.sdxl import Pipeline

    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    width, height = size_from(args)
    if args.turbo:
        if args.recipe not in (None, "turbo"):
            raise InputError(f"--turbo is --recipe turbo; give one recipe, not also --recipe {args.recipe}")
        args.recipe = "turbo"
    overrides = {"ops_printf": True} if args.ops_printf else {}
    loras = []
    if args.lora:     # engine.convert only when needed: what is imported stays resident through the UNet
        from engine.convert.lora import parse_lora_spec
        loras = [parse_lora_spec(spec) for spec in args.lora]
    pipe = Pipeline.load(args.models_path, preset=args.preset, loras=loras, **overrides)
    output = Path(args.output)
    if args.decode_latents:
        latents = load_npy(args.decode_latents, "--decode-latents")
        image = pipe.decode(latents, tiled=not args.not_tiled)
        image.save(output)
        print(f"wrote {output} ({image.width}x{image.height}) from {args.decode_latents}", file=sys.stderr)
        return 0
    init_noise = load_npy(args.init_noise, "--init-noise") if args.init_noise else None

    cancel = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: cancel.set())
    progress = JsonProgress() if args.json else ProgressBar()
    try:
        results = pipe.generate_batch(
            args.prompt, num=args.num, negative_prompt=args.neg_prompt, steps=args.steps, guidance=args.guidance,
            seed=args.seed, width=width, height=height, sampler=args.sampler, recipe=args.recipe,
            schedule=args.schedule, timesteps=args.timesteps, eta=args.eta, gamma=args.gamma, init_noise=init_noise,
            checkpoint_dir=args.checkpoint_dir, restart=args.restart, on_progress=progress, cancel=cancel,
            tiled=not args.not_tiled)
    except Cancelled:
        progress.close()
        where = f"; run the same command to resume from {args.checkpoint_dir}" if args.checkpoint_dir else ""
        print(f"slowframe: stopped{where}", file=sys.stderr)
        return 143
    progress.close()
    for i, result in enumerate(results):
        path = numbered(output, i, len(results))
        result.save(path)
        if args.save_latents:
            save_npy(numbered(Path(args.save_latents), i, len(results)), result.latents)
        meta = result.metadata
        summary = {"event": "done", "output": str(path), "seed": meta["seed"], "resumed_from": result.resumed_from,
                   **result.timings}
        if args.json:
            print(json.dumps(summary), flush=True)
        print(f"wrote {path} ({meta['width']}x{meta['height']}, seed {meta['seed']}, "
              f"{result.timings['seconds_per_step']} s/step)", file=sys.stderr)
    return 0


def numbered(path: Path, i: int, count: int) -> Path:
    """The i-th of `count` files named like `path`: path itself for one, NAME-1.png, NAME-2.png, ... for more."""
    return path if count == 1 else path.with_name(f"{path.stem}-{i + 1}{path.suffix}")


def load_npy(path: str, flag: str) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise InputError(f"{flag} {path}: cannot read a .npy array ({e})") from None


def save_npy(path: str, array: np.ndarray) -> None:
    with atomic_write(path) as f:
        np.save(f, array)


class ProgressBar:
    """Each StepProgress as step k/n, a bar, seconds per step and the time left, redrawn in place on a terminal."""

    def __init__(self, stream=sys.stderr, width: int = 24):
        self.stream, self.width = stream, width
        self.tty = stream.isatty()
        self.started = time.monotonic()

    def __call__(self, p) -> None:
        filled = round(self.width * p.evaluation / p.evaluations)
        rate = f"{p.seconds_per_step:.1f} s/step" if p.seconds_per_step is not None else "-- s/step"
        eta = f"ETA {format_seconds(p.eta_seconds)}" if p.eta_seconds is not None else ""
        line = f"step {p.step}/{p.steps} [{'#' * filled}{'.' * (self.width - filled)}] {rate} {eta}"
        if self.tty:
            self.stream.write("\r" + line.ljust(78))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")


class JsonProgress:
    """Each StepProgress as one JSON object per line on stdout."""

    def __call__(self, p) -> None:
        print(json.dumps({"event": "progress", "step": p.step, "steps": p.steps, "evaluation": p.evaluation,
                          "evaluations": p.evaluations, "seconds_per_step": p.seconds_per_step,
                          "eta_seconds": p.eta_seconds, "resumed_from": p.resumed_from}), flush=True)

    def close(self) -> None:
        pass


def format_seconds(s: float) -> str:
    s = int(round(s))
    h, rem = divmod(s, 3600)
    return f"{h}:{rem // 60:02d}:{rem % 60:02d}" if h else f"{rem // 60}:{rem % 60:02d}"
