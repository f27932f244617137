"""The `slowframe` command."""

from __future__ import annotations

import argparse
import sys

from engine.errors import EngineError


def cmd_models_quantize(args: argparse.Namespace) -> int:
    from engine.quantize import quantize_folder
    from engine.trace import peak_rss_bytes

    report = quantize_folder(args.src, args.dst, log=print)
    print(f"quantized {report.quantized} of {report.tensors} tensors to uint8: "
          f"{report.bytes_in / 1e9:.2f} GB -> {report.bytes_out / 1e9:.2f} GB in {report.seconds:.1f} s "
          f"(peak RSS {peak_rss_bytes() / 1e6:.0f} MB)")
    print(f"use it with: UNet.load({str(args.dst)!r}) or --models-path")
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
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except EngineError as e:
        print(f"slowframe: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("slowframe: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
