"""`slowframe models quantize | import | download | verify | list`: making and checking model folders."""

from __future__ import annotations

import argparse
from pathlib import Path

from engine.convert.importer import PRECISIONS
from engine.convert.lora import parse_lora_spec
from frame.paths import MODELS_DIR, default_state_dir


def add_commands(sub: argparse._SubParsersAction) -> None:
    models = sub.add_parser("models", help="prepare model folders")
    models_sub = models.add_subparsers(dest="models_command", required=True)
    quantize = models_sub.add_parser(
        "quantize", help="convert a diffusers unet/ folder (or a model root) to uint8 weights",
        description="Write a copy of a model with uint8 weights (per output channel, scale and zero point "
                    "beside each tensor): half the size of fp16 and half the reads per step.")
    quantize.add_argument("src", help="a diffusers component folder such as .../unet, or a model root")
    quantize.add_argument("dst", help="the new folder to create (must not exist)")
    quantize.set_defaults(func=cmd_quantize)

    imp = models_sub.add_parser(
        "import", help="make a model folder from a diffusers folder or a single-file .safetensors SDXL model",
        description="Convert an SDXL model into the folder slowframe runs, tensor by tensor in a few hundred MB "
                    "(fine on the Pi itself). SRC is a diffusers folder (model_index.json, unet/, ...) or one "
                    "single-file .safetensors model as model sites offer them (sd_xl_base_1.0.safetensors and its "
                    "fine-tunes). An interrupted import resumes when the same command is run again.")
    imp.add_argument("src", help="diffusers model folder, or single-file .safetensors model; with --tiny-vae "
                                 "alone: the model folder to add the tiny decoder to")
    imp.add_argument("dest", nargs="?", help="the model folder to create (must not exist)")
    imp.add_argument("--precision", choices=PRECISIONS, default="fp16",
                     help="fp16 (default), or uint8: the UNet as uint8 with a scale per output channel, "
                          "half the size and half the reads per step")
    imp.add_argument("--lora", action="append", default=[], type=parse_lora_spec, metavar="FILE[:WEIGHT]",
                     help="merge a LoRA style into the weights (kohya or diffusers format; weight 1 if not given); "
                          "repeat for several")
    imp.add_argument("--vae", metavar="FILE_OR_DIR", help="use this VAE instead of the model's own (a diffusers "
                     "vae/ folder or a .safetensors VAE, e.g. sdxl-vae-fp16-fix)")
    imp.add_argument("--tiny-vae", metavar="FILE_OR_DIR", help="also take in a tiny decoder (madebyollin/taesdxl: "
                     "its folder, or taesdxl_decoder.safetensors) as the model's vae_tiny/, for `decoder: tiny` "
                     "and previews; `models import --tiny-vae PATH MODEL` adds one to a model made earlier")
    imp.add_argument("--config", metavar="DIR", help="for a single-file model whose architecture differs from "
                     "SDXL's conventions: a diffusers folder whose config files describe it")
    imp.set_defaults(func=cmd_import)

    download = models_sub.add_parser(
        "download", help="fetch an SDXL model from the Hugging Face hub or a link and import it",
        description="Fetch an SDXL model on the frame itself and import it as `models import` does (a few hundred MB "
                    "of memory), while it arrives: each tensor is converted once its bytes are on the card, and the "
                    "downloaded bytes are given back as the import takes them in, so the card needs room for about "
                    "the model alone. REPO_OR_URL is a Hugging Face repository (ORG/NAME: a diffusers model such as "
                    "stabilityai/sdxl-turbo), a file in one (ORG/NAME/FILE.safetensors, or its huggingface.co link), "
                    "or an https:// link to a single-file .safetensors model. Every file is checked against the size "
                    "and sha256 the hub lists. Interrupted (a power cut, the network)? Run the same command again: "
                    "the download and the import resume where they stopped. Gated repositories: set HF_TOKEN; another"
                    " hub or a mirror: set HF_ENDPOINT.")
    download.add_argument("source", metavar="REPO_OR_URL", help="ORG/NAME, ORG/NAME/FILE.safetensors or a link")
    download.add_argument("dest", nargs="?", help="the model folder to create (default: the model's name in "
                          "--models-dir)")
    download.add_argument("--models-dir", default=str(MODELS_DIR), metavar="DIR",
                          help="where the model folder goes when DEST is not given (default: %(default)s)")
    download.add_argument("--precision", choices=PRECISIONS, default="fp16",
                          help="as for `models import`: fp16 (default) or uint8 (the UNet at half the size)")
    download.add_argument("--download-dir", default=str(default_state_dir() / "downloads"), metavar="DIR",
                          help="where the files arrive until imported, then deleted (default: %(default)s; on the "
                               "frame the root partition, beside the models partition)")
    download.set_defaults(func=cmd_download)

    verify = models_sub.add_parser("verify", help="check a model folder's files against its manifest and configs",
                                   description="Recompute the sha256 of every file of an imported model and check "
                                               "every tensor's name, shape and dtype against its config.json.")
    verify.add_argument("dest", help="the model folder")
    verify.set_defaults(func=cmd_verify)

    ls = models_sub.add_parser("list", help="list model folders: name, size, precision, source")
    ls.add_argument("dir", nargs="?", default=str(MODELS_DIR),
                    help="folder holding model folders (default: %(default)s)")
    ls.set_defaults(func=cmd_list)


def cmd_import(args: argparse.Namespace) -> int:
    from engine.convert.importer import import_model
    from engine.convert.tiny_vae import import_tiny_vae
    from engine.errors import InputError
    from engine.trace import peak_rss_bytes

    if args.dest is None:
        if args.tiny_vae is None:
            raise InputError("give the model folder to create: slowframe models import SRC DEST")
        if args.lora or args.vae or args.config or args.precision != "fp16":
            raise InputError("--tiny-vae with one folder adds a tiny decoder to that model; --precision, --lora, "
                             "--vae and --config are for importing a model (SRC DEST)")
        import_tiny_vae(args.tiny_vae, args.src, log=print)
        return 0
    report = import_model(args.src, args.dest, precision=args.precision, loras=args.lora, vae=args.vae,
                          config_dir=args.config, log=print)
    print(f"imported {args.src} -> {report.dest}: {report.bytes_in / 1e9:.2f} GB -> {report.bytes_out / 1e9:.2f} GB "
          f"({args.precision}) in {report.seconds:.1f} s, peak RSS {peak_rss_bytes() / 1e6:.0f} MB")
    if args.tiny_vae is not None:
        import_tiny_vae(args.tiny_vae, report.dest, log=print)
    print(f"check it any time with: slowframe models verify {report.dest}")
    return 0


def cmd_download(args: argparse.Namespace) -> int:
    from engine.convert.download import download_model
    from engine.trace import peak_rss_bytes

    report = download_model(args.source, args.dest, args.models_dir, precision=args.precision,
                            download_dir=args.download_dir, log=print)
    checks = ", ".join(f"{n} by {how}" for how, n in sorted(report.checked.items()))
    print(f"downloaded {args.source}: {report.files} files, {report.bytes / 1e9:.2f} GB ({checks}; "
          f"{report.received / 1e9:.2f} GB this run), imported as {report.dest}: "
          f"{report.imported.bytes_out / 1e9:.2f} GB ({args.precision}); at most {report.peak_disk / 1e9:.2f} GB "
          f"on one drive at once, peak RSS {peak_rss_bytes() / 1e6:.0f} MB")
    print(f"use it with model.path: {report.dest}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from engine.convert.verify import verify_model

    report = verify_model(args.dest, log=print)
    print(f"{args.dest}: OK ({report.files} files, {report.bytes / 1e9:.2f} GB, {report.tensors} tensors)")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from engine.convert.verify import list_models

    entries = list_models(args.dir)
    if not entries:
        print(f"no models in {args.dir} (make one with: slowframe models import SRC {Path(args.dir) / 'NAME'})")
        return 0
    rows = [("NAME", "SIZE", "PRECISION", "SOURCE", "STATUS")]
    rows += [(e.name, f"{e.bytes / 1e9:.2f} GB", e.precision, e.source, e.status) for e in entries]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[4])
    return 0


def cmd_quantize(args: argparse.Namespace) -> int:
    from engine.quantize import quantize_folder
    from engine.trace import peak_rss_bytes

    report = quantize_folder(args.src, args.dst, log=print)
    print(f"quantized {report.quantized} of {report.tensors} tensors to uint8: "
          f"{report.bytes_in / 1e9:.2f} GB -> {report.bytes_out / 1e9:.2f} GB in {report.seconds:.1f} s "
          f"(peak RSS {peak_rss_bytes() / 1e6:.0f} MB)")
    print(f"use it with: UNet.load({str(args.dst)!r}) or --models-path")
    return 0
