"""The config file as the forms see it: its text and values read through the daemon (which refuses a YAML bomb
before anything expands it), saved through the daemon (which checks it) with every problem made readable next
to the line it is about. The web process imports none of the frame's config code: ~20 MB it need not hold."""

from __future__ import annotations

from dataclasses import dataclass

from frame.web.link import ask
from frame.web.yamledit import EditError

# On the card the daemon waits up to 30 s (frame.configsave.COMMIT_SECONDS) for the root step that writes the
# boot partition; this is the longer wait for its answer, within waitress's 60 s channel_timeout (frame.cli.web).
SAVE_SECONDS = 40.0


@dataclass
class ConfigFile:
    path: str
    text: str
    version: str
    problems: list[dict]
    data: dict | None       # the file's values; None when they cannot be read (data_error says why)
    data_error: str | None
    choices: dict           # the values a setting may take, by form field
    defaults: dict          # what the frame uses when the file leaves a key out, by dotted path


@dataclass
class Saved:
    ok: bool
    message: str
    problems: list[dict]   # each with "where" (line:column) and "source" (that line of the text sent)


def current() -> ConfigFile:
    reply = ask("config")
    if not reply.get("ok"):
        raise EditError(reply.get("message", "the daemon could not read the config"))
    return ConfigFile(reply["path"], reply["text"], reply["version"], reply.get("problems", []), reply.get("data"),
                      reply.get("data_error"), reply.get("choices", {}), reply.get("defaults", {}))


def as_data(config: ConfigFile) -> dict:
    """The file's values (a mapping); EditError when a form cannot edit it."""
    if config.data_error:
        raise EditError(f"{config.data_error}; fix it in the YAML editor")
    if not isinstance(config.data, dict):
        raise EditError("the config is not a mapping of keys; fix it in the YAML editor")
    return config.data


def save(text: str, version: str) -> Saved:
    reply = ask("config_replace", timeout=SAVE_SECONDS, text=text, version=version)
    lines = text.split("\n")
    problems = [{**p, "where": f"line {p['line']}, column {p['column']}",
                 "source": lines[p["line"] - 1] if 0 < p["line"] <= len(lines) else ""}
                for p in reply.get("problems", [])]
    return Saved(bool(reply.get("ok")), reply.get("message", ""), problems)
