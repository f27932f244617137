"""`slowframe generate`: one picture from the command line, resumable, with a progress bar.

The flags follow OnnxStream's sd tool where they overlap, so its command lines work here:
--models-path, --prompt, --neg-prompt, --steps, --seed, --res, --turbo, --not-tiled,
--save-latents, --decode-latents, --ops-printf; --rpi-lowmem and --rpi [auto|force|disable]
choose the preset (--preset rpi-lowmem / rpi); --xl is accepted (slowframe runs SDXL only);
--embed-parameters is accepted (slowframe always writes the settings into the PNG).
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

from engine import defaults
from engine.atomic import atomic_write
from engine.errors import Cancelled, CheckpointMismatch, InputError
from engine.options import PRESETS
from engine.sdxl.preview import PREVIEW_DECODERS, PreviewDecoder, open_preview_decoder
from engine.sdxl.recipes import RECIPES
from engine.sdxl.samplers import SAMPLERS, SCHEDULES
from frame.loratags import find_tags, take_tags
from frame.paths import LORA_DIR

RPI_MODES = {"a": "auto", "auto": "auto", "f": "force", "force": "force", "y": "force", "yes": "force",
             "d": "disable", "disable": "disable", "n": "disable", "no": "disable"}
PI_MODEL_FILE = Path("/proc/device-tree/model")   # "Raspberry Pi Zero 2 W Rev 1.0" on the frame


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "generate", help="generate one picture from a prompt",
        description="Generate one picture with SDXL. With --checkpoint-dir the run saves its state after every "
                    "UNet evaluation; run the same command again after a power cut or Ctrl-C and it resumes.")
    p.add_argument("--models-path", required=True, metavar="DIR", help="an SDXL model folder (diffusers layout)")
    p.add_argument("--prompt", required=True,
                   help="what to draw; (word:1.3) and [word] set emphasis, BREAK starts a new 75-token chunk, "
                        "<lora:NAME:WEIGHT> applies NAME.safetensors from --lora-folder")
    p.add_argument("--neg-prompt", default=None, metavar="TEXT", help="what to avoid")
    p.add_argument("--steps", type=int, default=None, help=f"sampling steps (default: the recipe's, {defaults.STEPS} for sdxl)")
    p.add_argument("--seed", type=int, default=None, help="0..2^64-1 (default: random, printed)")
    p.add_argument("--num", type=int, default=1, metavar="N",
                   help="N pictures in one pass over the weights, seeds SEED, SEED+1, ... (written as "
                        "OUTPUT-1.png, OUTPUT-2.png, ...; the preset's memory budget limits N)")
    p.add_argument("--width", type=int, default=None, help="pixels, a multiple of 64 (default: the recipe's, 1024)")
    p.add_argument("--height", type=int, default=None, help="pixels, a multiple of 64 (default: the recipe's, 1024)")
    p.add_argument("--res", default=None, metavar="WxH", help="width and height at once, e.g. 1344x768")
    p.add_argument("--guidance", type=float, default=None, help=f"classifier-free guidance (default: the recipe's, "
                   f"{defaults.GUIDANCE:g} for sdxl, 0 for the few-step models)")
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
    p.add_argument("--lora-folder", default=str(LORA_DIR), metavar="DIR",
                   help="where <lora:NAME:WEIGHT> in the prompt finds NAME.safetensors (default: %(default)s)")
    p.add_argument("--preset", choices=list(PRESETS), default=None,
                   help="engine settings: default (a PC; the default), rpi, rpi-lowmem (a Pi Zero 2 W at 1024x1024)")
    p.add_argument("--rpi-lowmem", action="store_true", help="OnnxStream's name for --preset rpi-lowmem")
    p.add_argument("--rpi", nargs="?", const="force", metavar="auto|force|disable",
                   help="OnnxStream's Raspberry Pi switch: force (no value) is --preset rpi, auto is rpi on a "
                        "Raspberry Pi and default elsewhere, disable is --preset default")
    p.add_argument("--xl", action="store_true", help="accepted for OnnxStream's command lines (always SDXL here)")
    p.add_argument("--embed-parameters", action="store_true",
                   help="accepted for OnnxStream's command lines: the PNG always carries the settings (a "
                        "'parameters' chunk as other Stable Diffusion tools write it; no file paths)")
    p.add_argument("--threads", type=thread_count, default=None, metavar="N",
                   help="CPU threads the engine computes on: BLAS, its C kernels, attention heads "
                        "(default: all cores)")
    p.add_argument("--output", default="out.png", help="the PNG to write (default: %(default)s)")
    p.add_argument("--save-latents", metavar="FILE.npy", help="also write the final latents (before VAE scaling)")
    p.add_argument("--decode-latents", metavar="FILE.npy", help="skip diffusion: decode these latents")
    p.add_argument("--init-noise", metavar="FILE.npy", help="initial noise (1,4,H/8,W/8) instead of the seed's")
    p.add_argument("--not-tiled", action="store_true", help="decode the VAE in one piece (needs far more memory)")
    p.add_argument("--decoder", choices=("full", "tiny"), default="full",
                   help="full: the model's VAE (default); tiny: the tiny decoder TAESDXL, seconds instead of "
                        "minutes, from the model's vae_tiny/ or --tiny-vae (the full VAE if it is missing)")
    p.add_argument("--tiny-vae", metavar="DIR", help="the tiny decoder's folder, if not the model's vae_tiny/")
    p.add_argument("--checkpoint-dir", metavar="DIR", help="save state after every UNet evaluation; resume from it")
    p.add_argument("--restart", action="store_true", help="discard the checkpoints in --checkpoint-dir first")
    p.add_argument("--ops-printf", action="store_true", help="print every op with its bytes, time and RSS")
    p.add_argument("--json", action="store_true", help="print progress as one JSON object per line on stdout")
    p.add_argument("--preview-every", type=int, metavar="N",
                   help="every N steps, write the sampler's estimate of the picture so far, through a preview "
                        "decoder (seconds, not a VAE decode), to --preview-dir as step-KKK.png")
    p.add_argument("--preview-dir", metavar="DIR", help="where previews and decoded steps go (default: previews/)")
    p.add_argument("--preview-decoder", choices=sorted(PREVIEW_DECODERS), default="linear",
                   help="linear: SDXL's latent-to-RGB map, 8x upscaled (default)")
    p.add_argument("--decode-every", type=int, metavar="N",
                   help="every N steps, decode the estimate with the full VAE to --preview-dir as decoded-KKK.png "
                        "(minutes each and the VAE's memory on top of the UNet's: for a PC)")
    p.set_defaults(func=cmd_generate)


def thread_count(text: str) -> int:
    """--threads: a whole number of threads, at least 1."""
    from engine.parallel import cores

    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of CPU threads, 1 or more (this machine has "
                                         f"{cores()} cores; leave it out to use them all), got '{text}'")
    return int(text)


def size_from(args: argparse.Namespace) -> tuple[int | None, int | None]:
    if args.res is not None:
        if args.width is not None or args.height is not None:
            raise InputError("give either --res WxH or --width/--height, not both")
        w, sep, h = args.res.lower().partition("x")
        if not sep or not w.isdigit() or not h.isdigit():
            raise InputError(f"--res must look like 1024x1024 (width x height), got '{args.res}'")
        return int(w), int(h)
    return args.width, args.height


def prompt_loras(args: argparse.Namespace) -> tuple[str, list[tuple[Path, float]]]:
    """The prompt without its <lora:NAME:WEIGHT> tags, and the LoRA files they name in --lora-folder."""
    if args.neg_prompt is not None and any(found for found in find_tags(args.neg_prompt)):
        raise InputError("--neg-prompt: LoRA tags (<lora:NAME:WEIGHT>) go in --prompt")
    try:
        return take_tags(args.prompt, Path(args.lora_folder))
    except ValueError as e:
        raise InputError(f"--prompt: {e}") from None


def preset_from(args: argparse.Namespace, pi_model_file: Path = PI_MODEL_FILE) -> str:
    """The engine preset --preset, --rpi-lowmem and --rpi choose together (at most one of them)."""
    given = [flag for flag, value in (("--preset", args.preset), ("--rpi-lowmem", args.rpi_lowmem),
                                      ("--rpi", args.rpi)) if value]
    if len(given) > 1:
        raise InputError(f"give one of {' and '.join(given)}: each chooses the engine preset")
    if args.rpi_lowmem:
        return "rpi-lowmem"
    if args.rpi is not None:
        mode = RPI_MODES.get(args.rpi.lower())
        if mode is None:
            raise InputError(f"--rpi {args.rpi}: use auto, force or disable (or A, F, D as in OnnxStream)")
        if mode == "auto":
            mode = "force" if on_raspberry_pi(pi_model_file) else "disable"
        return "rpi" if mode == "force" else "default"
    return args.preset or "default"


def on_raspberry_pi(model_file: Path = PI_MODEL_FILE) -> bool:
    """Whether the device tree names a Raspberry Pi."""
    try:
        return model_file.read_bytes().startswith(b"Raspberry Pi")
    except OSError:
        return False


def cmd_generate(args: argparse.Namespace) -> int:
    from engine.sdxl import Pipeline

    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    width, height = size_from(args)
    if args.turbo:
        if args.recipe not in (None, "turbo"):
            raise InputError(f"--turbo is --recipe turbo; give one recipe, not also --recipe {args.recipe}")
        args.recipe = "turbo"
    preset = preset_from(args)
    for flag, every in (("--preview-every", args.preview_every), ("--decode-every", args.decode_every)):
        if every is not None and every < 1:
            raise InputError(f"{flag} must be 1 or more (a picture every N steps), got {every}")
    overrides: dict[str, object] = {"ops_printf": True} if args.ops_printf else {}
    if args.threads is not None:
        overrides["threads"] = args.threads
    loras = []
    if args.lora:     # engine.convert only when needed: what is imported stays resident through the UNet
        from engine.convert.lora import parse_lora_spec
        loras = [parse_lora_spec(spec) for spec in args.lora]
    prompt, tagged = prompt_loras(args)
    pipe = Pipeline.load(args.models_path, preset=preset, loras=loras + tagged, tiny_vae=args.tiny_vae, **overrides)
    output = Path(args.output)
    if args.decode_latents:
        latents = load_npy(args.decode_latents, "--decode-latents")
        image = pipe.decode(latents, tiled=not args.not_tiled, decoder=args.decoder)
        image.save(output)
        print(f"wrote {output} ({image.width}x{image.height}) from {args.decode_latents}", file=sys.stderr)
        return 0
    init_noise = load_npy(args.init_noise, "--init-noise") if args.init_noise else None

    cancel = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: cancel.set())
    progress = JsonProgress() if args.json else ProgressBar()
    watchers = [progress] + step_pictures(args, pipe)

    def on_progress(p) -> None:
        for watch in watchers:
            watch(p)

    try:
        results = pipe.generate_batch(
            prompt, num=args.num, negative_prompt=args.neg_prompt, steps=args.steps, guidance=args.guidance,
            seed=args.seed, width=width, height=height, sampler=args.sampler, recipe=args.recipe,
            schedule=args.schedule, timesteps=args.timesteps, eta=args.eta, gamma=args.gamma, init_noise=init_noise,
            checkpoint_dir=args.checkpoint_dir, restart=args.restart, on_progress=on_progress, cancel=cancel,
            tiled=not args.not_tiled, decoder=args.decoder)
    except CheckpointMismatch as e:
        raise InputError(f"{e.folder} holds checkpoints of a different job ({'; '.join(e.differences)}). Add "
                         "--restart to discard them and start this job over, or give another --checkpoint-dir."
                         ) from None
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
        per_step = result.timings["seconds_per_step"]
        how = f"{per_step} s/step" if per_step is not None else \
            f"all {meta['steps']} steps were done already in {args.checkpoint_dir}: only the VAE ran"
        print(f"wrote {path} ({meta['width']}x{meta['height']}, seed {meta['seed']}, {how})", file=sys.stderr)
    return 0


def numbered(path: Path, i: int, count: int) -> Path:
    """The i-th of `count` files named like `path`: path itself for one, NAME-1.png, NAME-2.png, ... for more."""
    return path if count == 1 else path.with_name(f"{path.stem}-{i + 1}{path.suffix}")


def step_pictures(args: argparse.Namespace, pipe) -> list[StepPictures]:
    """The --preview-every and --decode-every writers the flags ask for."""
    folder = Path(args.preview_dir or "previews")
    writers = []
    if args.preview_every:
        decoder = open_preview_decoder(args.preview_decoder, Path(args.models_path),
                                       on_fallback=lambda why: print(f"slowframe: {why}", file=sys.stderr))
        writers.append(StepPictures(args.preview_every, folder, "step", decoder))
    if args.decode_every:
        writers.append(StepPictures(args.decode_every, folder, "decoded",
                                    lambda z: pipe.decode(z, tiled=not args.not_tiled)))
    return writers


class StepPictures:
    """Every ``every`` steps but the last (the picture itself), the progress report's ``denoised`` estimate
    through ``decode``, written as ``folder/{name}-KKK.png``; reports without an estimate are skipped."""

    def __init__(self, every: int, folder: Path, name: str, decode: PreviewDecoder):
        self.every, self.folder, self.name, self.decode = every, folder, name, decode
        self.written: int | None = None   # the step last written (a step can be reported once per evaluation)

    def __call__(self, p) -> None:
        denoised = getattr(p, "denoised", None)
        if denoised is None or p.step % self.every or p.step >= p.steps or p.step == self.written:
            return
        self.written = p.step
        self.folder.mkdir(parents=True, exist_ok=True)
        with atomic_write(self.folder / f"{self.name}-{p.step:03d}.png") as f:
            self.decode(denoised).save(f, format="PNG")


def load_npy(path: str, flag: str) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise InputError(f"{flag} {path}: cannot read a .npy array ({e})") from None


def save_npy(path: str, array: np.ndarray) -> None:
    with atomic_write(path) as f:
        np.save(f, array)


class ProgressBar:
    """Each StepProgress as step k/n, a bar, seconds per step and the time left: redrawn in place on a
    terminal after every UNet evaluation, else one line per finished step (with guidance as two evaluations,
    half a step does not print the step before it again)."""

    def __init__(self, stream=None, width: int = 24):
        self.stream, self.width = stream or sys.stderr, width
        self.tty = self.stream.isatty()
        self.started = time.monotonic()
        self.printed: int | None = None   # the step of the last line written (not on a terminal)

    def __call__(self, p) -> None:
        if not self.tty:
            if p.step == self.printed or (self.printed is None and p.step == (p.resumed_from or 0)):
                return
            self.printed = p.step
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
