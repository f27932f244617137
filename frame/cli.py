"""The `slowframe` command."""

from __future__ import annotations

import argparse
import sys

from engine.errors import EngineError
from frame.config import ConfigError
from frame.control import ControlError
from frame.daemon_commands import add_daemon_commands
from frame.display.commands import add_display_commands
from frame.display.errors import DisplayError


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
    import os
    import time
    from pathlib import Path

    import numpy as np

    from engine.sdxl import UNet
    from engine.sdxl.random_model import write_random_unet
    from engine.trace import peak_rss_bytes

    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "slowframe" / "demo-unet"
    if not (cache / "config.json").exists():
        print(f"making the built-in tiny SDXL-architecture model (random weights) in {cache}")
        write_random_unet(cache)
    out_dir = Path(args.output)
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    unet_inputs = None
    results = {}
    for preset in ("default", "rpi", "rpi-lowmem"):
        with UNet.load(cache, preset=preset, ops_printf=args.ops_printf) as unet:
            if unet_inputs is None:
                cfg = unet.config
                h, w = 64, 96                   # a 512x768 picture's latent, batch 2 as with CFG
                unet_inputs = (rng.standard_normal((2, 4, h, w), dtype=np.float32), 999.0,
                               rng.standard_normal((2, 154, cfg.down[0].cross_dim), dtype=np.float32),
                               rng.standard_normal((2, cfg.add_in_dim - 6 * cfg.add_time_dim), dtype=np.float32),
                               np.array([[h * 8, w * 8, 0, 0, h * 8, w * 8]] * 2, dtype=np.float32))
            started = time.perf_counter()
            results[preset] = unet(*unet_inputs)
            print(f"{preset:>10s}: one UNet evaluation (batch 2, 64x96 latent, 154 tokens) "
                  f"in {time.perf_counter() - started:.2f} s")
        np.save(out_dir / f"eps-{preset}.npy", results[preset])
    base = results["default"].ravel().astype(np.float64)
    for preset in ("rpi", "rpi-lowmem"):
        print(f"{preset:>10s} vs default: PCC {np.corrcoef(base, results[preset].ravel())[0, 1]:.6f}")
    print(f"peak RSS {peak_rss_bytes() / 1e6:.0f} MB; outputs in {out_dir}/eps-*.npy")
    print("This exercises the streaming SDXL UNet engine on a tiny random model. Pictures need real SDXL "
          "weights and the text encoders, VAE and sampler, which are being built next.")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="slowframe", description="Slow generative art on an e-ink frame.")
    sub = parser.add_subparsers(dest="command", required=True)

    models = sub.add_parser("models", help="prepare model folders")
    models_sub = models.add_subparsers(dest="models_command", required=True)
    quantize = models_sub.add_parser(
        "quantize", help="convert a diffusers unet/ folder (or a model root) to uint8 weights",
        description="Write a copy of a model with uint8 weights (per output channel, scale and zero point "
                    "beside each tensor): half the size of fp16 and half the reads per step.")
    quantize.add_argument("src", help="a diffusers component folder such as .../unet, or a model root")
    quantize.add_argument("dst", help="the new folder to create (must not exist)")
    quantize.set_defaults(func=cmd_models_quantize)

    demo = sub.add_parser("demo", help="run the engine on a built-in tiny model (no download needed)")
    demo.add_argument("--output", default="slowframe-demo", help="folder for the outputs (default: %(default)s)")
    demo.add_argument("--ops-printf", action="store_true", help="print every op with its bytes, time and RSS")
    demo.set_defaults(func=cmd_demo)

    add_daemon_commands(sub)

    add_display_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (EngineError, DisplayError, ConfigError, ControlError) as e:
        print(f"slowframe: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("slowframe: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
