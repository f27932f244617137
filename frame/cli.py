"""The `slowframe` command."""

from __future__ import annotations

import argparse
import sys

from engine.errors import EngineError
from frame.generate import add_generate_command

# Errors that mean a user mistake, by module: looked up only in the modules this run imported
# (a module never imported raised nothing), so `generate` need not import them.
USER_ERRORS = (("frame.config", "ConfigError"), ("frame.control", "ControlError"),
               ("frame.display.errors", "DisplayError"))


def cmd_models_quantize(args: argparse.Namespace) -> int:
    from engine.quantize import quantize_folder
    from engine.trace import peak_rss_bytes

    report = quantize_folder(args.src, args.dst, log=print)
    print(f"quantized {report.quantized} of {report.tensors} tensors to uint8: "
          f"{report.bytes_in / 1e9:.2f} GB -> {report.bytes_out / 1e9:.2f} GB in {report.seconds:.1f} s "
          f"(peak RSS {peak_rss_bytes() / 1e6:.0f} MB)")
    print(f"use it with: UNet.load({str(args.dst)!r}) or --models-path")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """The frame's whole job once, on the built-in tiny model: prompt -> picture -> panel."""
    import logging
    import os
    import time
    from pathlib import Path

    from engine.sdxl import Pipeline
    from engine.sdxl.random_model import write_random_model
    from engine.trace import peak_rss_bytes
    from frame.display import fit_size, open_display

    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    model = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "slowframe" / "demo-model"
    if not (model / "model_index.json").is_file():
        print(f"making the built-in tiny SDXL-architecture model (random weights, 31 MB) in {model}")
    write_random_model(model)
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
          f"{out_dir / 'preview.png'} (what it will look like)")
    print(f"peak RSS {peak_rss_bytes() / 1e6:.0f} MB. The built-in model has random weights, so the picture is "
          "abstract noise; point `slowframe generate --models-path` at a real SDXL model for art.")
    return 0


def build_parser(only_generate: bool = False) -> argparse.ArgumentParser:
    """The whole command line; with `only_generate`, just `slowframe generate`, which then
    never imports the display, theme and model-import code: ~5 MB that would stay resident
    through the whole run, on a 512 MB Pi."""
    parser = argparse.ArgumentParser(prog="slowframe", description="Slow generative art on an e-ink frame.")
    sub = parser.add_subparsers(dest="command", required=True)
    if only_generate:
        add_generate_command(sub)
        return parser
    from engine.convert.commands import add_models_commands
    from frame.daemon_commands import add_daemon_commands
    from frame.display.commands import add_display_commands

    models = sub.add_parser("models", help="prepare model folders")
    models_sub = models.add_subparsers(dest="models_command", required=True)
    quantize = models_sub.add_parser(
        "quantize", help="convert a diffusers unet/ folder (or a model root) to uint8 weights",
        description="Write a copy of a model with uint8 weights (per output channel, scale and zero point "
                    "beside each tensor): half the size of fp16 and half the reads per step.")
    quantize.add_argument("src", help="a diffusers component folder such as .../unet, or a model root")
    quantize.add_argument("dst", help="the new folder to create (must not exist)")
    quantize.set_defaults(func=cmd_models_quantize)
    add_models_commands(models_sub)

    demo = sub.add_parser("demo", help="the whole job on a built-in tiny model: prompt -> picture -> panel "
                                       "(no download needed)")
    demo.add_argument("--output", default="slowframe-demo", help="folder for the outputs (default: %(default)s)")
    demo.add_argument("--panel", default="spectra6-7.3", help="panel to dither for (default: %(default)s)")
    demo.add_argument("--preset", default="rpi-lowmem", help="engine preset (default: %(default)s, as on a Pi)")
    demo.add_argument("--steps", type=int, default=4, help="sampling steps (default: %(default)s)")
    demo.add_argument("--seed", type=int, default=1, help="default: %(default)s")
    demo.add_argument("--ops-printf", action="store_true", help="print every op with its bytes, time and RSS")
    demo.set_defaults(func=cmd_demo)

    add_daemon_commands(sub)

    add_display_commands(sub)
    add_generate_command(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(only_generate=argv[:1] == ["generate"]).parse_args(argv)
    try:
        return args.func(args)
    except Exception as e:
        if not isinstance(e, user_errors()):
            raise
        print(f"slowframe: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("slowframe: interrupted", file=sys.stderr)
        return 130


def user_errors() -> tuple[type[Exception], ...]:
    loaded = [getattr(sys.modules[module], name) for module, name in USER_ERRORS if module in sys.modules]
    return (EngineError, *loaded)


if __name__ == "__main__":
    sys.exit(main())
