"""`slowframe demo`: the frame's whole job once, on a built-in tiny model, with no download."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path


def add_commands(sub: argparse._SubParsersAction) -> None:
    demo = sub.add_parser("demo", help="the whole job on a built-in tiny model: prompt -> picture -> panel "
                                       "(no download needed)")
    demo.add_argument("--output", default="slowframe-demo", help="folder for the outputs (default: %(default)s)")
    demo.add_argument("--panel", default="spectra6-7.3", help="panel to dither for (default: %(default)s)")
    demo.add_argument("--preset", default="rpi-lowmem", help="engine preset (default: %(default)s, as on a Pi)")
    demo.add_argument("--steps", type=int, default=4, help="sampling steps (default: %(default)s)")
    demo.add_argument("--seed", type=int, default=1, help="default: %(default)s")
    demo.add_argument("--ops-printf", action="store_true", help="print every op with its bytes, time and RSS")
    demo.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    """The frame's whole job once, on the built-in tiny model: prompt -> picture -> panel."""
    from engine.sdxl import Pipeline
    from engine.sdxl.random_model import write_random_model
    from engine.trace import peak_rss_bytes
    from frame.display import fit_size, open_display

    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    model = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "slowframe" / "demo-model"
    if not (model / "model_index.json").is_file():
        print(f"making the built-in tiny SDXL-architecture model (random weights, 31 MB) in {model}")
    write_random_model(model)
    add_tokenizers(model)
    out_dir = Path(args.output)
    out_dir.mkdir(parents=True, exist_ok=True)
    # The generation size the frame would pick for this panel, at half the side for a quick demo.
    width, height = (max(64, side // 128 * 64) for side in fit_size(args.panel))
    prompt = "a lighthouse on a rocky coast at dusk, oil painting"
    pipe = Pipeline.load(model, preset=args.preset, ops_printf=args.ops_printf)
    started = time.perf_counter()
    result = pipe.generate(prompt, "blurry", steps=args.steps, seed=args.seed, width=width, height=height,
                           sampler="euler_a", checkpoint_dir=out_dir / "checkpoints", restart=True)
    picture = result.save(out_dir / "picture.png")
    print(f"generated {picture} ({width}x{height}, {args.steps} steps, seed {args.seed}, preset {args.preset}) "
          f"in {time.perf_counter() - started:.1f} s")
    with open_display({"backend": "file", "panel": args.panel, "output": str(out_dir), "min_interval": 0}) as display:
        display.show(result.image, caption=prompt)
    print(f"dithered for the {args.panel} panel: {out_dir / 'panel.png'} (what the panel is sent) and "
          f"{out_dir / 'look.png'} (what it will look like)")
    print(f"peak RSS {peak_rss_bytes() / 1e6:.0f} MB. The built-in model has random weights, so the picture is "
          "abstract noise; point `slowframe generate --models-path` at a real SDXL model for art.")
    return 0


def add_tokenizers(model: Path) -> None:
    """The standard CLIP tokenizer folders in the demo model, once: without them the pipeline would note on
    every run that it falls back to the bundled vocabulary (the same one, so the picture does not change)."""
    from engine.atomic import atomic_folder
    from engine.convert.project_files import PAD_TOKENS, write_tokenizer

    for name, pad in PAD_TOKENS.items():
        if not (model / name).is_dir():
            try:
                with atomic_folder(model / name) as tmp:
                    write_tokenizer(tmp, pad)
            except FileExistsError:
                pass   # written meanwhile by another demo
