"""The settings sections of the config file: each a table of its keys and the small function that builds it.

A table row is a ``Key``: name, kind of value (with its range or choices) and meaning; the
defaults are the settings dataclasses' own (frame.config.settings). The display's keys are
frame.display's own table, checked by its validator; the sections holding prompts are in
frame.config.prompts.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, replace

from yaml.nodes import Node, ScalarNode

from frame.config.reader import (FALSE, TIME, AnyName, FilePath, Flag, Kind, Number, OneOf, Reader, Time, Whole,
                                 is_null, placed_path, suggest)
from frame.config.settings import (DEFAULT_BUTTONS, ButtonSettings, ButtonSpec, HistorySettings, ModelSettings,
                                   QuietHours, ScheduleSettings)
from frame.display.config import AUTO_PANEL, KEYS as DISPLAY_KEYS, DisplayConfig, check_value
from frame.display.errors import DisplayError
from frame.display.palette import Palette
from frame.models import imported_folder, is_single_file
from frame.display.panels import PANELS
from frame.themes import ORDERS

PRESETS = ("default", "rpi", "rpi-lowmem")
DECODERS = ("full", "tiny")    # engine.sdxl.pipeline.DECODERS, without importing the engine
ACTIONS = ("skip", "regenerate", "previous", "next", "latest", "status", "shutdown", "reboot", "none")
LOG_LEVELS = ("debug", "info", "warning", "error")
MAX_GPIO = 27
# BCM pins the Inky HAT uses: I2C (EEPROM), SPI, chip selects, BUSY, DC, RESET
PANEL_PINS = {2: "I2C SDA", 3: "I2C SCL", 7: "SPI chip select 1", 8: "SPI chip select 0", 9: "SPI MISO",
              10: "SPI MOSI", 11: "SPI clock", 17: "the panel's BUSY line", 22: "the panel's DC line",
              27: "the panel's RESET line"}


@dataclass(frozen=True)
class Key:
    """One key of a section: its name, the kind of value it takes and what it means."""

    name: str
    kind: Kind
    doc: str


TOP = (
    Key("order", OneOf(ORDERS), "which theme comes next: sequential, shuffle (each once per round) or weighted"),
    Key("no_repeat", Whole(0, 100_000, " recent prompts"), "how many recent prompts a new one must differ from"),
    Key("log_level", OneOf(LOG_LEVELS), "how much the daemon logs"),
)
MODEL = (
    Key("path", FilePath("model"), "the SDXL model folder (see `slowframe models import`), or a single-file "
                                    ".safetensors model, which the frame imports into a folder beside it"),
    Key("preset", OneOf(PRESETS), "the engine's memory preset"),
    Key("lora_folder", FilePath("folder"), "where <lora:NAME:WEIGHT> in a prompt finds NAME.safetensors"),
    Key("decoder", OneOf(DECODERS), "what turns a finished picture's latents into pixels: full (the model's VAE) "
                                    "or tiny (its vae_tiny/: seconds instead of minutes)"),
)
HISTORY = (
    Key("folder", FilePath("folder"), "where shown pictures are kept (default: <state directory>/history)"),
    Key("keep", Whole(1, 1_000_000, " pictures"), "how many pictures to keep"),
    Key("max_mb", Number(1.0, 10_000_000.0, " MB"), "the most space they may take"),
)
BUTTONS = (
    Key("enabled", Flag(), "whether the buttons are read at all"),
    Key("hold_time", Number(0.1, 10.0, " seconds"), "how long a press must last to count as a hold"),
)
PIN = Key("pin", Whole(0, MAX_GPIO, " (BCM numbering)"), "the BCM GPIO number the button pulls to ground")
ACTION_KEYS = (Key("press", OneOf(ACTIONS), "what a short press does"), Key("hold", OneOf(ACTIONS), "what a hold does"))
BUTTON = (PIN, *ACTION_KEYS)   # each button, A-D or one of your own naming; A-D keep their defaults for the rest
SCHEDULE = ("times", "quiet_hours")   # lists, read by read_schedule


def read_keys(reader: Reader, values: dict[str, Node], where: str, keys: Sequence[Key]) -> dict[str, object]:
    """The good values among ``values`` by key, each read as its row of ``keys`` says (in the table's order).

    ``where`` is the section's name in messages ("" for the top level).
    """
    out = {}
    for key in keys:
        if key.name in values:
            value = key.kind.read(reader, values[key.name], f"{where}.{key.name}" if where else key.name)
            if value is not None:
                out[key.name] = value
    return out


def names(keys: Sequence[Key]) -> tuple[str, ...]:
    """The keys' names, in the table's order (the keys a section allows)."""
    return tuple(key.name for key in keys)


def read_model(reader: Reader, node: Node | None) -> ModelSettings:
    """The model section; a model folder that is not there yet is only a warning."""
    values = reader.mapping(node, "model", names(MODEL)) if node is not None else {}
    if not values:
        return ModelSettings()
    settings = read_keys(reader, values, "model", MODEL)
    path = settings.get("path")
    if path is not None and not path.exists():
        reader.warn(values["path"], f"model.path: {path} does not exist yet; until a model is copied there the "
                                    "frame shows a message instead of pictures (see `slowframe models import`)")
    elif path is not None and is_single_file(path) and not imported_folder(path).exists():
        reader.warn(values["path"], f"model.path: {path} is a single-file model; the frame imports it into "
                                    f"{imported_folder(path)} before its first picture (once, as long as reading the whole "
                                    "file takes; `slowframe status` shows the progress). To do it now instead: "
                                    f"slowframe models import {path} {imported_folder(path)}")
    return ModelSettings(**settings)


def read_display(reader: Reader, node: Node | None) -> DisplayConfig:
    """The display section, each key checked by frame.display's validator and reported at its place."""
    values = reader.mapping(node, "display", DISPLAY_KEYS) if node is not None else None
    if values is None:
        return DisplayConfig()
    good = read_keys(reader, values, "display", [Key(key, _DisplayValue(key), s.doc)
                                                  for key, s in DISPLAY_KEYS.items()])
    if good.get("backend") == "file" and good.get("panel", AUTO_PANEL) == AUTO_PANEL:
        if "panel" not in values or good.get("panel") == AUTO_PANEL:   # else the bad name is reported already
            reader.error(values.get("panel") or values["backend"],
                         "display.backend: the file backend has no EEPROM to read; name the panel it stands for "
                         "with display.panel (e.g. spectra6-7.3)")
        return DisplayConfig()
    config = DisplayConfig(**good)
    if "output" in good:
        output = placed_path(reader, values["output"], config.output, "display.output")
        if output is None:
            return DisplayConfig()
        config = replace(config, output=str(output))
    if config.palette and config.panel != AUTO_PANEL:
        try:
            Palette.for_panel(PANELS[config.panel], config.palette)
        except DisplayError as exc:
            reader.error(values["palette"], f"display.{exc}")
    return config


def read_schedule(reader: Reader, node: Node | None) -> ScheduleSettings:
    """The schedule section: times of day for new pictures, and quiet hours without refreshes."""
    values = reader.mapping(node, "schedule", SCHEDULE) if node is not None else {}
    if not values:
        return ScheduleSettings()
    times: list[dt.time] = []
    for i, item in enumerate(reader.sequence(values["times"], "schedule.times", single_ok=True)
                             if "times" in values else []):
        t = Time().read(reader, item, f"schedule.times[{i}]")
        if t is not None:
            if t in times:
                reader.warn(item, f"schedule.times[{i}]: {t:%H:%M} is listed twice")
            else:
                times.append(t)
    quiet: list[QuietHours] = []
    for i, item in enumerate(reader.sequence(values["quiet_hours"], "schedule.quiet_hours", single_ok=True)
                             if "quiet_hours" in values else []):
        where = f"schedule.quiet_hours[{i}]"
        raw = reader.scalar(item, where, 'a range such as "22:00-07:00"')
        if raw is None:
            continue
        start, sep, end = raw.partition("-")
        a, b = TIME.match(start.strip()), TIME.match(end.strip())
        if not sep or not a or not b or int(a[1]) > 23 or int(b[1]) > 23 or int(a[2]) > 59 or int(b[2]) > 59:
            reader.error(item, f'{where}: {raw!r} is not a range of times; write "HH:MM-HH:MM", e.g. '
                               '"22:00-07:00"')
            continue
        hours = QuietHours(dt.time(int(a[1]), int(a[2])), dt.time(int(b[1]), int(b[2])))
        if hours.start == hours.end:
            reader.error(item, f"{where}: {raw!r} starts and ends at the same time")
            continue
        quiet.append(hours)
    for i, t in enumerate(times):
        inside = [q for q in quiet if q.contains(t)]
        if inside:
            reader.warn(values["times"], f"schedule.times[{i}]: {t:%H:%M} falls in the quiet hours {inside[0]}; "
                                         "that picture waits until they end")
    return ScheduleSettings(tuple(sorted(times)), tuple(quiet))


def read_history(reader: Reader, node: Node | None) -> HistorySettings:
    """The history section: where shown pictures are kept and how many."""
    values = reader.mapping(node, "history", names(HISTORY)) if node is not None else {}
    if not values:
        return HistorySettings()
    return HistorySettings(**read_keys(reader, values, "history", HISTORY))


def read_buttons(reader: Reader, node: Node | None, display: DisplayConfig) -> ButtonSettings:
    """The buttons section: A-D with their defaults, changed, switched off or joined by buttons of your own;
    each pin checked against the panel's pins and the other buttons' (on ``display``'s panel)."""
    if node is None:
        return ButtonSettings()
    values = reader.mapping(node, "buttons", AnyName())
    if not values:
        return ButtonSettings()
    settings = read_keys(reader, values, "buttons", BUTTONS)
    for key in BUTTONS:
        values.pop(key.name, None)
    specs = {name: ButtonSpec(name, None, press, hold) for name, (_, press, hold) in DEFAULT_BUTTONS.items()}
    pin_nodes: dict[str, Node] = {}
    for name, value in values.items():
        where = f"buttons.{name}"
        if is_null(value) or (isinstance(value, ScalarNode) and value.value in FALSE):
            specs.pop(name, None)
            continue
        fields_ = reader.mapping(value, where, names(BUTTON))
        if fields_ is None:
            continue
        base = specs.get(name) or ButtonSpec(name, None, "none", "none")
        pin = PIN.kind.read(reader, fields_["pin"], f"{where}.pin") if "pin" in fields_ else base.pin
        if "pin" in fields_ and pin is not None:
            pin_nodes[name] = fields_["pin"]
            if pin in PANEL_PINS:
                reader.error(fields_["pin"], f"{where}.pin: GPIO {pin} is {PANEL_PINS[pin]}, used by the panel; "
                                             f"pick a free pin")
        if pin is None and name not in DEFAULT_BUTTONS:
            if "pin" not in fields_:
                reader.error(value, f"{where}: missing 'pin' (the BCM GPIO number the button pulls to ground)")
            continue
        actions = read_keys(reader, fields_, where, ACTION_KEYS)
        specs[name] = ButtonSpec(name, pin, actions.get("press", base.press), actions.get("hold", base.hold))
    panel = display.panel if display.panel != AUTO_PANEL else None
    owners: dict[int, str] = {}
    result = ButtonSettings(**settings, buttons=tuple(specs.values()))
    for name, pin in result.pins_for(panel).items():
        other = owners.setdefault(pin, name)
        if other != name:
            mine, theirs = (name, other) if name in pin_nodes or other not in pin_nodes else (other, name)
            reader.error(pin_nodes.get(mine) or node, f"buttons.{mine}: GPIO {pin} is also button "
                                                      f"{theirs}'s pin; each button needs its own")
    return result


@dataclass(frozen=True)
class _DisplayValue:
    """A ``display:`` key's value, checked by frame.display's own validator (``check_value``)."""

    key: str

    def read(self, reader: Reader, node: Node, where: str) -> object | None:
        value = reader.python(node, where)
        if value is None and not is_null(node):
            return None   # not a YAML value (reported)
        if self.key == "panel" and isinstance(value, str) and value != AUTO_PANEL and value not in PANELS:
            # in a file, name the closest panel rather than list them all
            reader.error(node, f"{where}: {value!r} is not a panel{suggest(str(value), PANELS)} "
                               "(or \"auto\" to read the HAT's EEPROM; `slowframe panels` lists them)")
            return None
        try:
            return check_value(self.key, value)
        except DisplayError as exc:
            reader.error(node, str(exc))
            return None
