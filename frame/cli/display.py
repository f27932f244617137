"""`slowframe panels | dither | show`: the panels, dithering a picture, and putting one on the display."""

from __future__ import annotations

import argparse
from pathlib import Path

from frame.display.errors import DisplayError
from frame.paths import SEARCH_PATH


def cmd_panels(args: argparse.Namespace) -> int:
    from frame.display.fit import bucket_for
    from frame.display.panels import PANELS

    for panel in PANELS.values():
        gen = bucket_for(panel.width, panel.height)
        print(f"{panel.name:14s} {panel.width}x{panel.height}  {panel.title}")
        print(f"{'':14s} generate at {gen[0]}x{gen[1]} (portrait {gen[1]}x{gen[0]}); "
              f"HAT EEPROM variant {', '.join(map(str, panel.eeprom_variants))}; driver {panel.inky_module}")
        inks = ", ".join(f"{i}={ink} {tuple(rgb)}" for i, (ink, rgb) in enumerate(zip(panel.inks, panel.measured)))
        print(f"{'':14s} inks (index=ink, measured sRGB; {panel.measured_source}): {inks}")
    return 0


def _open_image(path: str):
    from frame.pictures import PictureError, open_picture

    try:
        return open_picture(path)
    except PictureError as exc:
        raise DisplayError(str(exc)) from None


def cmd_dither(args: argparse.Namespace) -> int:
    from frame.display.dither import DitherSettings, dither
    from frame.display.fit import fit_picture
    from frame.display.palette import Palette
    from frame.display.panels import get_panel
    from frame.display.quality import score

    panel = get_panel(args.panel)
    palette = Palette.for_panel(panel)
    settings = DitherSettings(args.method, args.saturation, args.tone)
    size = panel.size if not args.portrait else (panel.height, panel.width)
    image = _open_image(args.input)
    if args.fit == "none" and image.size != size:
        raise DisplayError(f"{args.input}: is {image.width}x{image.height} but {panel.name} needs {size[0]}x{size[1]}; "
                           "use --fit cover or --fit contain to resize it")
    picture = fit_picture(image, size, args.fit if args.fit != "none" else "cover", args.crop)
    indices = dither(picture, palette, settings)
    from PIL import Image

    out = Image.fromarray(indices, "P")
    out.putpalette(palette.flat())
    _save(out, args.output)
    message = f"wrote {args.output}: {size[0]}x{size[1]} mode P, {panel.name} inks in native order"
    if args.look:
        _save(Image.fromarray(palette.render(indices), "RGB"), args.look)
        message += f"; look {args.look}"
    print(message)
    if args.score:
        s = score(indices, picture, palette, settings.tone)
        print(f"S-CIELAB dE2000 against the tone-compressed picture: mean {s.mean:.2f}, 95th percentile {s.p95:.2f}")
    return 0


def _save(image, path: str) -> None:
    try:
        image.save(path, format="PNG")
    except OSError as exc:
        raise DisplayError(f"{path}: cannot write ({exc.strerror or exc})") from None


def load_display_config(path: str | None):
    """The ``display:`` section of the slowframe config (``path``, or the usual places), as a DisplayConfig."""
    import yaml

    from frame.display.config import DisplayConfig

    candidates = [path] if path else [p for p in SEARCH_PATH if p.exists()]
    if not candidates:
        return DisplayConfig()
    where = candidates[0]
    try:
        with open(where, encoding="utf-8") as f:
            document = yaml.safe_load(f) or {}
    except FileNotFoundError:
        raise DisplayError(f"{where}: no such config file") from None
    except yaml.YAMLError as exc:
        raise DisplayError(f"{where}: not valid YAML: {exc}") from None
    if not isinstance(document, dict):
        raise DisplayError(f"{where}: expected a mapping of settings at the top level")
    try:
        return DisplayConfig.from_mapping(document.get("display"))
    except DisplayError as exc:
        raise DisplayError(f"{where}: {exc}") from None


HISTORY_WORDS = ("next", "previous", "latest")


def cmd_show(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from frame.display import open_display

    if args.image in HISTORY_WORDS and not Path(args.image).exists():
        return show_from_history(args.image, args.socket)   # the running frame owns the panel
    config = load_display_config(args.config)
    changes = {key: value for key, value in (("backend", args.backend), ("panel", args.panel),
                                             ("output", args.output)) if value is not None}
    if args.caption is not None:
        changes["caption"] = True
    if changes:
        config = replace(config, **changes)
    image = _open_image(args.image)
    with open_display(config) as display:
        display.show(image, caption=args.caption)
        where = f" (files in {Path(config.output).resolve()})" if config.backend == "file" else ""
        print(f"shown on {display.panel.title}{where}")
    return 0


def show_from_history(which: str, socket: str | None = None) -> int:
    """``slowframe show next|previous|latest``: ask the daemon to browse its history."""
    from frame.control import request

    reply = request("show", socket, which=which)
    print(reply.get("message", "?"))
    return 0 if reply.get("ok") else 1


def add_commands(sub: argparse._SubParsersAction) -> None:
    from frame.display.config import BACKENDS
    from frame.display.dither import DEFAULT_METHOD, METHODS, TONE_MODES
    from frame.display.fit import CROP_MODES, FIT_MODES
    from frame.display.panels import PANELS
    from frame.cli.daemon import add_socket_option

    panels = sub.add_parser("panels", help="list the supported panels, their sizes and inks")
    panels.set_defaults(func=cmd_panels)

    methods = "; ".join(f"{m.name}: {m.note}" for m in METHODS.values())
    dither = sub.add_parser(
        "dither", help="dither a picture for a panel into a palette PNG",
        description="Write a mode-P PNG whose indices are the panel's inks in native order "
                    "(Spectra 6: black, white, yellow, red, blue, green; 7-colour: black, white, green, blue, red, "
                    f"yellow, orange). Methods: {methods}.")
    dither.add_argument("input", help="the picture (any format Pillow reads)")
    dither.add_argument("output", help="the PNG to write")
    dither.add_argument("--panel", required=True, choices=list(PANELS), metavar="NAME",
                        help=f"one of: {', '.join(PANELS)}")
    dither.add_argument("--method", default=DEFAULT_METHOD, choices=list(METHODS), metavar="NAME",
                        help=f"error diffusion kernel (default {DEFAULT_METHOD}): {', '.join(METHODS)}")
    dither.add_argument("--fit", default="cover", choices=FIT_MODES,
                        help="cover: fill and crop; contain: letterbox; none: the picture must have the panel's size")
    dither.add_argument("--crop", default="saliency", choices=CROP_MODES, help="which part cover keeps")
    dither.add_argument("--portrait", action="store_true", help="the panel hangs in portrait")
    dither.add_argument("--saturation", type=float, default=1.0,
                        help="0..1 as in inky: 1 aims with the measured inks (default), 0 with pure colours")
    dither.add_argument("--tone", default="compress", choices=TONE_MODES,
                        help="fit the picture's tones into the panel's black..white range (default compress)")
    dither.add_argument("--look", "--preview", metavar="PNG", help="also write what the panel will look like")
    dither.add_argument("--score", action="store_true", help="print the S-CIELAB error of the result")
    dither.set_defaults(func=cmd_dither)

    show = sub.add_parser("show", help="put a picture on the configured display",
                          description="Fit, dither and show a picture with the display settings of the config file "
                                      f"(--config, else {' or '.join(map(str, SEARCH_PATH))}).")
    show.add_argument("image", help="the picture, or next / previous / latest to browse the running frame's history")
    show.add_argument("--config", help="the slowframe config file whose display: section to use")
    show.add_argument("--backend", choices=BACKENDS, help="override display.backend")
    show.add_argument("--panel", choices=["auto", *PANELS], metavar="NAME", help="override display.panel")
    show.add_argument("--output", help="override display.output (file backend)")
    show.add_argument("--caption", help="text to put under the picture")
    add_socket_option(show)
    show.set_defaults(func=cmd_show)
