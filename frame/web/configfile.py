"""The config file as the forms see it: read through the daemon, read as data with the checker's limits, saved
through the daemon (which checks it) with every problem made readable next to the line it is about."""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from frame.config.reader import ConfigError, compose
from frame.web.link import ask
from frame.web.yamledit import EditError


@dataclass
class ConfigFile:
    path: str
    text: str
    version: str
    problems: list[dict]


@dataclass
class Saved:
    ok: bool
    message: str
    problems: list[dict]   # each with "where" (line:column) and "source" (that line of the text sent)


def current() -> ConfigFile:
    reply = ask("config")
    if not reply.get("ok"):
        raise EditError(reply.get("message", "the daemon could not read the config"))
    return ConfigFile(reply["path"], reply["text"], reply["version"], reply.get("problems", []))


def as_data(config: ConfigFile) -> dict:
    """The file's values (a mapping), checked for size and depth first: a YAML bomb in the file is refused here
    as it is by the daemon, before anything expands it."""
    try:
        compose(config.text, config.path)
    except ConfigError as exc:
        raise EditError(f"{exc.problems[0]}; fix it in the YAML editor") from None
    data = yaml.safe_load(config.text) if config.text.strip() else {}
    if not isinstance(data, dict):
        raise EditError("the config is not a mapping of keys; fix it in the YAML editor")
    return data


def save(text: str, version: str) -> Saved:
    reply = ask("config_replace", text=text, version=version)
    lines = text.split("\n")
    problems = [{**p, "where": f"line {p['line']}, column {p['column']}",
                 "source": lines[p["line"] - 1] if 0 < p["line"] <= len(lines) else ""}
                for p in reply.get("problems", [])]
    return Saved(bool(reply.get("ok")), reply.get("message", ""), problems)
