"""Reading a whole config file into a Config: each top-level key handed to its section, in a fixed order."""

from __future__ import annotations

from pathlib import Path

from yaml.nodes import Node

from frame.config.prompts import THEME_DEFAULTS, Prompts
from frame.config.reader import ConfigError, FilePath, Problem, Reader, compose
from frame.config.sections import (TOP, read_buttons, read_display, read_history, read_keys, read_model,
                                   read_schedule)
from frame.config.settings import Config

SECTIONS = ("model", "display", "themes", "defaults", "wildcards", "wildcard_folder", "order", "no_repeat",
            "schedule", "history", "buttons", "log_level")

BUILTIN_CONFIG = """\
themes:
  - name: landscapes
    prompt: "a {quiet|misty|sunlit|stormy} __landscape__ at __time__, __style__"
  - name: still life
    prompt: "a still life of __object__ on a {wooden table|window sill}, __style__"
wildcards:
  landscape: [mountain lake, harbour with fishing boats, pine forest, coastal cliffs, wheat field, old town square]
  time: [dawn, noon, dusk, night]
  object: [lemons and a blue jug, a teapot and pears, tulips in a vase, seashells]
  style: [woodblock print, gouache painting, linocut in few colours, watercolour with bold outlines]
"""


def default_config() -> Config:
    """The config used when no file exists: built-in themes, an Inky panel found by its EEPROM."""
    return read_document(BUILTIN_CONFIG, "<built-in config>", Path.cwd(), source=None)


def read_document(text: str, file: str, base: Path, source: Path | None) -> Config:
    """The Config ``text`` (the contents of ``file``) describes; ConfigError listing every problem when it has
    errors (warnings alone go in ``Config.warnings``). Relative paths are relative to ``base``."""
    reader = Reader(file, base)
    root, text_problems = compose(text, file)
    reader.problems.extend(text_problems)
    config = _read_config(reader, root, source)
    if any(p.severity == "error" for p in reader.problems):
        raise ConfigError(sorted(reader.problems, key=_position))
    return config


def _position(problem: Problem) -> tuple[str, int, int]:
    return problem.file, problem.line, problem.column


def _read_config(reader: Reader, root: Node | None, source: Path | None) -> Config:
    top = (reader.mapping(root, "the config", SECTIONS) or {}) if root is not None else {}
    model = read_model(reader, top.get("model"))
    display = read_display(reader, top.get("display"))
    folder = FilePath("folder").read(reader, top["wildcard_folder"], "wildcard_folder") if "wildcard_folder" in top \
        else reader.base / "wildcards"
    prompts = Prompts(reader, model)
    wildcards = prompts.wildcards(top.get("wildcards"))
    defaults = dict(THEME_DEFAULTS)
    if "defaults" in top:
        defaults, _ = prompts.theme_fields(top["defaults"], "defaults", defaults)
    if "themes" in top:
        themes = prompts.themes(top["themes"], defaults)
    else:
        builtin = default_config()
        if source is not None:
            reader.warn(root, "no themes: in the config, so the built-in themes are used (see config.example.yaml)")
        themes, wildcards = list(builtin.themes), {**builtin.wildcards, **wildcards}
    templates = [t for theme in themes for t in theme.templates]
    prompts.wildcard_loader.resolve(templates, wildcards, folder)
    prompts.check_lora_tags(templates + [t for entries in wildcards.values() for t in entries], model.lora_folder)
    settings = read_keys(reader, top, "", TOP)
    return Config(
        source=source, model=model, display=display, themes=tuple(themes), wildcards=wildcards, **settings,
        schedule=read_schedule(reader, top.get("schedule")), history=read_history(reader, top.get("history")),
        buttons=read_buttons(reader, top.get("buttons"), display),
        warnings=tuple(sorted((p for p in reader.problems if p.severity == "warning"), key=_position)),
        watched_files=((source,) if source is not None else ()) + tuple(prompts.wildcard_loader.files))
