"""The `slowframe` command: the parser assembled from one module per command group, and user errors.

Each module of this package holds one group's subcommands, their flags and what they do:
generate, models, demo, daemon (run and the commands talking to a running frame), config,
display and web. `slowframe generate` builds only its own parser, so a generating process never imports
the display, theme and model-import code.
"""

from __future__ import annotations

import argparse
import sys

from engine import __version__ as engine_version
from engine.errors import EngineError

# Errors that mean a user mistake, by module: looked up only in the modules this run imported
# (a module never imported raised nothing), so `generate` need not import them.
USER_ERRORS = (("frame.config", "ConfigError"), ("frame.control", "ControlError"),
               ("frame.display.errors", "DisplayError"))


def build_parser(only_generate: bool = False, only_web: bool = False) -> argparse.ArgumentParser:
    """The whole command line; with `only_generate`, just `slowframe generate`, which then
    never imports the display, theme and model-import code: ~5 MB that would stay resident
    through the whole run, on a 512 MB Pi. With `only_web`, just `slowframe web`, which then
    never imports the engine and the display (numpy and the kernels: ~20 MB of a 40 MB budget)."""
    parser = argparse.ArgumentParser(prog="slowframe", description="Slow generative art on an e-ink frame.")
    parser.add_argument("--version", action="version", version=f"slowframe {version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    if only_generate:
        from frame.cli import generate

        generate.add_commands(sub)
        return parser
    if only_web:
        from frame.cli import web

        web.add_commands(sub)
        return parser
    from frame.cli import config, daemon, demo, display, generate, models, web

    # in the order `slowframe --help` lists them
    models.add_commands(sub)
    demo.add_commands(sub)
    daemon.add_run_command(sub)
    config.add_commands(sub)
    daemon.add_control_commands(sub)
    display.add_commands(sub)
    web.add_commands(sub)
    generate.add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(only_generate=argv[:1] == ["generate"], only_web=argv[:1] == ["web"]).parse_args(argv)
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


def version() -> str:
    """The installed package's version, else the engine's (a source checkout run with `python -m frame.cli`)."""
    from importlib.metadata import PackageNotFoundError, version as installed

    try:
        return installed("slowframe")
    except PackageNotFoundError:
        return engine_version


def user_errors() -> tuple[type[Exception], ...]:
    loaded = [getattr(sys.modules[module], name) for module, name in USER_ERRORS if module in sys.modules]
    return (EngineError, *loaded)
