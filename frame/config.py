"""The frame's YAML config: where it is found, its defaults, and checking every value.

``load_config(path)`` reads the file node by node (PyYAML's composer, which keeps each
value's line and column) and collects every problem as a ``Problem`` printed
``FILE:LINE:COLUMN: error: message``, each saying what is allowed (unknown keys get the
closest valid name). It returns the Config when there are no errors (warnings allowed),
else raises ConfigError holding all of them, so one run of ``slowframe config check``
shows everything to fix. Relative paths in the file are relative to the file's folder.

The file is looked for at ``--config``, then SEARCH_PATH (the FAT boot partition first,
so it can be edited from any PC); with no file at all the frame runs on the defaults.
"""

from __future__ import annotations

import datetime as dt
import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from frame.display.config import AUTO_PANEL, KEYS as DISPLAY_KEYS, DisplayConfig, check_value
from frame.display.errors import DisplayError
from frame.display.palette import Palette
from frame.display.panels import PANELS
from frame.themes import ORDERS, Origin, Template, TemplateError, WildcardLoader, parse_template

SEARCH_PATH = (Path("/boot/firmware/slowframe.yaml"), Path("/etc/slowframe/config.yaml"))
DEFAULT_MODEL_PATH = Path("/var/lib/slowframe/models/sdxl-base-1.0")
PRESETS = ("default", "rpi", "rpi-lowmem")
SAMPLERS = ("euler", "euler_a", "dpmpp_2m_karras", "turbo")
ACTIONS = ("skip", "regenerate", "previous", "next", "latest", "status", "none")
LOG_LEVELS = ("debug", "info", "warning", "error")
MAX_STEPS = 150
MAX_GPIO = 27
# BCM pins the Inky HAT uses: I2C (EEPROM), SPI, chip selects, BUSY, DC, RESET
PANEL_PINS = {2: "I2C SDA", 3: "I2C SCL", 7: "SPI chip select 1", 8: "SPI chip select 0", 9: "SPI MISO",
              10: "SPI MOSI", 11: "SPI clock", 17: "the panel's BUSY line", 22: "the panel's DC line",
              27: "the panel's RESET line"}
# the Inky Impression's four buttons (BCM); on the 13.3" panel C is on 25 because 16 is a chip select
DEFAULT_BUTTONS = {"A": (5, "previous", "latest"), "B": (6, "next", "latest"),
                   "C": (16, "skip", "regenerate"), "D": (24, "status", "none")}
LARGE_PANEL_BUTTON_C = 25


class ConfigError(Exception):
    """A config with errors; ``problems`` lists all of them (warnings included)."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


@dataclass(frozen=True)
class Problem:
    """One thing wrong (or worth a warning) in a config file, at a 1-based line and column."""

    file: str
    line: int
    column: int
    message: str
    severity: str = "error"

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}: {self.severity}: {self.message}"


@dataclass(frozen=True)
class ModelSettings:
    path: Path = DEFAULT_MODEL_PATH
    preset: str = "rpi-lowmem"


@dataclass(frozen=True)
class Theme:
    """One kind of picture: its prompt templates and generation settings."""

    name: str
    templates: tuple[Template, ...]
    negative: str = ""
    steps: int = 20
    guidance: float = 7.0
    sampler: str = "euler"
    size: tuple[int, int] | None = None   # None: the panel's best size
    lora: Path | None = None
    lora_weight: float = 1.0
    weight: float = 1.0


@dataclass(frozen=True)
class QuietHours:
    """No refreshes from ``start`` until ``end`` (which may be after midnight)."""

    start: dt.time
    end: dt.time

    def contains(self, t: dt.time) -> bool:
        if self.start <= self.end:
            return self.start <= t < self.end
        return t >= self.start or t < self.end

    def __str__(self) -> str:
        return f"{self.start:%H:%M}-{self.end:%H:%M}"


@dataclass(frozen=True)
class ScheduleSettings:
    times: tuple[dt.time, ...] = ()         # empty: continuous
    quiet_hours: tuple[QuietHours, ...] = ()


@dataclass(frozen=True)
class HistorySettings:
    folder: Path | None = None   # None: <state directory>/history
    keep: int = 200
    max_mb: float = 1000.0


@dataclass(frozen=True)
class ButtonSpec:
    name: str
    pin: int | None   # None: the panel's default pin for A-D (C depends on the panel)
    press: str
    hold: str


@dataclass(frozen=True)
class ButtonSettings:
    enabled: bool = True
    hold_time: float = 1.0
    buttons: tuple[ButtonSpec, ...] = tuple(ButtonSpec(n, None, p, h) for n, (_, p, h) in DEFAULT_BUTTONS.items())

    def pins_for(self, panel_name: str | None) -> dict[str, int]:
        """Each button's BCM pin on ``panel_name`` (C moves to 25 on the 13.3" panel)."""
        pins = {}
        for spec in self.buttons:
            if spec.pin is not None:
                pins[spec.name] = spec.pin
            elif spec.name == "C" and panel_name == "spectra6-13.3":
                pins[spec.name] = LARGE_PANEL_BUTTON_C
            else:
                pins[spec.name] = DEFAULT_BUTTONS[spec.name][0]
        return pins


@dataclass(frozen=True)
class Config:
    """Everything the daemon needs; built by ``load_config`` or ``Config.defaults``."""

    source: Path | None
    model: ModelSettings
    display: DisplayConfig
    themes: tuple[Theme, ...]
    wildcards: dict[str, tuple[Template, ...]]
    order: str = "shuffle"
    no_repeat: int = 20
    schedule: ScheduleSettings = ScheduleSettings()
    history: HistorySettings = HistorySettings()
    buttons: ButtonSettings = ButtonSettings()
    log_level: str = "info"
    warnings: tuple[Problem, ...] = ()
    watched_files: tuple[Path, ...] = field(default=(), compare=False)

    @classmethod
    def defaults(cls) -> Config:
        """The config used when no file exists: built-in themes, an Inky panel found by its EEPROM."""
        return _parse_text(BUILTIN_CONFIG, "<built-in config>", Path.cwd(), source=None)

    def theme(self, name: str) -> Theme | None:
        return next((t for t in self.themes if t.name == name), None)


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


def find_config(explicit: str | Path | None = None) -> Path | None:
    """The config file to use: ``explicit`` (which must exist), else the first of SEARCH_PATH, else None."""
    if explicit is not None:
        path = Path(explicit)
        if not path.is_file():
            raise ConfigError([Problem(str(path), 1, 1, "no such config file (check the path given to --config)")])
        return path
    return next((p for p in SEARCH_PATH if p.is_file()), None)


def load_config(path: str | Path) -> Config:
    """Read and check ``path``; ConfigError listing every problem when it has errors."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[:exc.start].count(b"\n") + 1
        raise ConfigError([Problem(str(path), line, 1, "the file is not UTF-8 text; save it as UTF-8")]) from None
    except OSError as exc:
        raise ConfigError([Problem(str(path), 1, 1, f"cannot read the file: {exc.strerror}")]) from None
    return _parse_text(text, str(path), path.resolve().parent, source=path)


def check_config(path: str | Path) -> list[Problem]:
    """Every problem in ``path`` (errors and warnings) without raising."""
    try:
        return list(load_config(path).warnings)
    except ConfigError as exc:
        return exc.problems


def _parse_text(text: str, name: str, base: Path, source: Path | None) -> Config:
    reader = _Reader(name, base)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        message = f"{exc.problem} {exc.context or ''}".strip() if exc.problem else str(exc)
        if "\t" in text and "\\t" in message:
            message += " (YAML indents with spaces only; replace the tab characters)"
        elif mark is not None:
            message += _quoting_hint(text.splitlines()[mark.line] if mark.line < len(text.splitlines()) else "")
        raise ConfigError([Problem(name, mark.line + 1 if mark else 1, mark.column + 1 if mark else 1,
                                   f"not valid YAML: {message}")]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([Problem(name, 1, 1, f"not valid YAML: {exc}")]) from None
    config = reader.config(root, source)
    errors = [p for p in reader.problems if p.severity == "error"]
    if errors:
        raise ConfigError(sorted(reader.problems, key=lambda p: (p.file, p.line, p.column)))
    return config


_TIME = re.compile(r"^(\d{1,2}):(\d{2})$")
_SIZE = re.compile(r"^(\d+)\s*[xX]\s*(\d+)$")
_NULL_VALUES = ("", "~", "null", "Null", "NULL")
_TRUE = ("true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON")
_FALSE = ("false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF")


_UNQUOTED = re.compile(r"^\s*(?:-\s+)?([A-Za-z_][\w ]*):\s+([^\s\"'].*?)\s*$")


def _quoting_hint(line: str) -> str:
    """For ``prompt: {a|b} sea`` and the like: YAML reads {, [ and ': ' as syntax; quotes fix it."""
    match = _UNQUOTED.match(line)
    if match and any(c in match[2] for c in "{}[]|:#"):
        value = match[2].replace('"', '\\"')
        return f' (text with {{, [, | or ": " in it must be in double quotes: {match[1]}: "{value}")'
    return ""


def _is_null(node: Node) -> bool:
    return isinstance(node, ScalarNode) and node.tag.endswith(":null") and node.value in _NULL_VALUES


def _kind(node: Node) -> str:
    if isinstance(node, MappingNode):
        return "a mapping (key: value lines)"
    if isinstance(node, SequenceNode):
        return "a list"
    return f"{node.value!r}" if node.value != "" else "nothing"


def _suggest(word: str, choices: Iterable[str]) -> str:
    choices = list(choices)
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f"; allowed: {', '.join(choices)}" if choices else ""


class _Reader:
    """Turns YAML nodes into settings, recording a Problem for each bad value."""

    def __init__(self, file: str, base: Path):
        self.file = file
        self.base = base
        self.problems: list[Problem] = []
        self.written: dict[int, Origin] = {}   # id(template) -> where it was written in the file
        self.wildcard_loader = WildcardLoader(self._wildcard_problem, self.written, Origin(file, 1, 1, None))

    # ------------------------------------------------------------ reporting

    def error(self, node: Node | None, message: str, column_offset: int = 0) -> None:
        self._add(node, message, "error", column_offset)

    def warn(self, node: Node | None, message: str, column_offset: int = 0) -> None:
        self._add(node, message, "warning", column_offset)

    def _add(self, node, message, severity, column_offset) -> None:
        self.problems.append(Problem(self.file, *_place(node, column_offset), message, severity))

    def _wildcard_problem(self, file: str, line: int, column: int, message: str) -> None:
        self.problems.append(Problem(file, line, column, message))

    # ------------------------------------------------------------ value readers

    def mapping(self, node: Node, where: str, allowed: Iterable[str]) -> dict[str, Node] | None:
        """The mapping's values by key; unknown and repeated keys reported."""
        if _is_null(node):
            return {}
        if not isinstance(node, MappingNode):
            self.error(node, f"{where}: expected a mapping (key: value lines), got {_kind(node)}")
            return None
        allowed = allowed if isinstance(allowed, _AnyName) else list(allowed)
        out: dict[str, Node] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode):
                self.error(key_node, f"{where}: a key must be a plain name")
                continue
            key = key_node.value
            if key in out:
                self.error(key_node, f"{where}: {key!r} is given twice (the first is on line "
                                     f"{self._key_line(node, key)}); keep one")
                continue
            if key not in allowed:
                self.error(key_node, f"{where}: unknown key {key!r}{_suggest(key, allowed)}")
                continue
            out[key] = value_node
        return out

    @staticmethod
    def _key_line(node: MappingNode, key: str) -> int:
        return next(k.start_mark.line + 1 for k, _ in node.value if isinstance(k, ScalarNode) and k.value == key)

    def scalar(self, node: Node, where: str, what: str) -> str | None:
        if not isinstance(node, ScalarNode):
            self.error(node, f"{where}: expected {what}, got {_kind(node)}")
            return None
        return node.value

    def text(self, node: Node, where: str, allow_empty: bool = True) -> str | None:
        value = self.scalar(node, where, "text")
        if value is not None and not allow_empty and not value.strip():
            self.error(node, f"{where}: must not be empty")
            return None
        return value

    def integer(self, node: Node, where: str, lo: int, hi: int, unit: str = "") -> int | None:
        raw = self.scalar(node, where, "a whole number")
        if raw is None:
            return None
        try:
            value = int(raw.replace("_", ""), 10)
        except ValueError:
            self.error(node, f"{where}: {raw!r} is not a whole number; use {lo} to {hi}{unit}")
            return None
        if not lo <= value <= hi:
            self.error(node, f"{where}: {value} is out of range; use {lo} to {hi}{unit}")
            return None
        return value

    def number(self, node: Node, where: str, lo: float, hi: float, unit: str = "",
               lo_open: bool = False) -> float | None:
        raw = self.scalar(node, where, "a number")
        if raw is None:
            return None
        try:
            value = float(raw.replace("_", ""))
        except ValueError:
            self.error(node, f"{where}: {raw!r} is not a number; use {lo:g} to {hi:g}{unit}")
            return None
        if not (lo < value if lo_open else lo <= value) or not value <= hi or value != value:
            bound = f"more than {lo:g}" if lo_open else f"{lo:g}"
            self.error(node, f"{where}: {value:g} is out of range; use {bound} to {hi:g}{unit}")
            return None
        return value

    def boolean(self, node: Node, where: str) -> bool | None:
        raw = self.scalar(node, where, "true or false")
        if raw in _TRUE:
            return True
        if raw in _FALSE:
            return False
        if raw is not None:
            self.error(node, f"{where}: {raw!r} is not true or false")
        return None

    def choice(self, node: Node, where: str, choices: Iterable[str]) -> str | None:
        raw = self.scalar(node, where, "one of " + ", ".join(choices))
        if raw is None:
            return None
        if raw not in choices:
            self.error(node, f"{where}: {raw!r} is not allowed{_suggest(raw, choices)}")
            return None
        return raw

    def sequence(self, node: Node, where: str, single_ok: bool = False) -> list[Node]:
        if _is_null(node):
            return []
        if isinstance(node, SequenceNode):
            return list(node.value)
        if single_ok and isinstance(node, ScalarNode):
            return [node]
        self.error(node, f"{where}: expected a list (lines starting with '- ', or [a, b]), got {_kind(node)}")
        return []

    def time(self, node: Node, where: str) -> dt.time | None:
        raw = self.scalar(node, where, 'a time such as "07:00"')
        if raw is None:
            return None
        match = _TIME.match(raw.strip())
        if match and int(match[1]) < 24 and int(match[2]) < 60:
            return dt.time(int(match[1]), int(match[2]))
        self.error(node, f'{where}: {raw!r} is not a time; write HH:MM on a 24-hour clock, e.g. "07:00" or "19:30"')
        return None

    def path(self, node: Node, where: str) -> Path | None:
        raw = self.text(node, where, allow_empty=False)
        if raw is None:
            return None
        path = Path(raw).expanduser()
        return path if path.is_absolute() else self.base / path

    def template(self, node: Node, where: str) -> Template | None:
        raw = self.text(node, where, allow_empty=False)
        if raw is None:
            return None
        try:
            template = parse_template(raw)
        except TemplateError as exc:
            self.error(node, f"{where}: {exc.message}", _column_offset(node, exc.offset))
            return None
        self.written[id(template)] = Origin(self.file, *_place(node), _text_column(node))
        return template

    # ------------------------------------------------------------ the document

    def config(self, root: Node | None, source: Path | None) -> Config:
        sections = ("model", "display", "themes", "defaults", "wildcards", "wildcard_folder", "order",
                    "no_repeat", "schedule", "history", "buttons", "log_level")
        top = (self.mapping(root, "the config", sections) or {}) if root is not None else {}
        model = self.model(top.get("model"))
        display = self.display(top.get("display"))
        folder = self.path(top["wildcard_folder"], "wildcard_folder") if "wildcard_folder" in top \
            else self.base / "wildcards"
        wildcards = self.wildcards(top.get("wildcards"))
        defaults = dict(THEME_DEFAULTS)
        if "defaults" in top:
            defaults, _ = self.theme_fields(top["defaults"], "defaults", defaults, THEME_KEYS)
        if "themes" in top:
            themes = self.themes(top["themes"], defaults)
        else:
            builtin = Config.defaults()
            if source is not None:
                self.warn(root, "no themes: in the config, so the built-in themes are used (see config.example.yaml)")
            themes, wildcards = list(builtin.themes), {**builtin.wildcards, **wildcards}
        self.wildcard_loader.resolve([t for theme in themes for t in theme.templates], wildcards, folder)

        def optional(key, read):
            return read(top[key]) if key in top else None

        order = optional("order", lambda n: self.choice(n, "order", ORDERS))
        no_repeat = optional("no_repeat", lambda n: self.integer(n, "no_repeat", 0, 100_000, " recent prompts"))
        log_level = optional("log_level", lambda n: self.choice(n, "log_level", LOG_LEVELS))
        return Config(
            source=source, model=model, display=display, themes=tuple(themes), wildcards=wildcards,
            order=order or "shuffle", no_repeat=20 if no_repeat is None else no_repeat,
            schedule=self.schedule(top.get("schedule")), history=self.history(top.get("history")),
            buttons=self.buttons(top.get("buttons"), display), log_level=log_level or "info",
            warnings=tuple(sorted((p for p in self.problems if p.severity == "warning"),
                                  key=lambda p: (p.file, p.line, p.column))),
            watched_files=((source,) if source is not None else ()) + tuple(self.wildcard_loader.files))

    def model(self, node: Node | None) -> ModelSettings:
        values = self.mapping(node, "model", ("path", "preset")) if node is not None else {}
        if not values:
            return ModelSettings()
        path = self.path(values["path"], "model.path") if "path" in values else DEFAULT_MODEL_PATH
        preset = self.choice(values["preset"], "model.preset", PRESETS) if "preset" in values else None
        if path is not None and "path" in values and not path.exists():
            self.warn(values["path"], f"model.path: {path} does not exist yet; until a model is copied there the "
                                      "frame shows a message instead of pictures (see `slowframe models import`)")
        return ModelSettings(path or DEFAULT_MODEL_PATH, preset or "rpi-lowmem")

    def display(self, node: Node | None) -> DisplayConfig:
        """The display section, each key checked by frame.display's own validator and reported at its place."""
        if node is None:
            return DisplayConfig()
        values = self.mapping(node, "display", DISPLAY_KEYS)
        if values is None:
            return DisplayConfig()
        good: dict[str, object] = {}
        constructor = yaml.SafeLoader("")
        for key, value_node in values.items():
            try:
                value = constructor.construct_object(value_node, deep=True)
            except yaml.YAMLError as exc:
                self.error(value_node, f"display.{key}: {exc}")
                continue
            if key == "panel" and value != AUTO_PANEL and value not in PANELS:
                # in a file, name the closest panel rather than list them all
                self.error(value_node, f"display.panel: {value!r} is not a panel{_suggest(str(value), PANELS)} "
                                       "(or \"auto\" to read the HAT's EEPROM; `slowframe panels` lists them)")
                continue
            try:
                good[key] = check_value(key, value)
            except DisplayError as exc:
                self.error(value_node, str(exc))
        if good.get("backend") == "file" and good.get("panel", AUTO_PANEL) == AUTO_PANEL:
            if "panel" not in values or good.get("panel") == AUTO_PANEL:   # else the bad name is reported already
                self.error(values.get("panel") or values["backend"],
                           "display.backend: the file backend has no EEPROM to read; name the panel it stands for "
                           "with display.panel (e.g. spectra6-7.3)")
            return DisplayConfig()
        config = DisplayConfig(**good)
        if "output" in good and not Path(config.output).expanduser().is_absolute():
            config = replace(config, output=str(self.base / Path(config.output).expanduser()))
        if config.palette and config.panel != AUTO_PANEL:
            try:
                Palette.for_panel(PANELS[config.panel], config.palette)
            except DisplayError as exc:
                self.error(values["palette"], f"display.{exc}")
        return config

    def theme_fields(self, node: Node, where: str, defaults: dict, keys: Iterable[str]) -> tuple[dict, dict]:
        """A theme's generation settings over ``defaults``, and its nodes by key."""
        values = self.mapping(node, where, keys)
        if values is None:
            return dict(defaults), {}
        out = dict(defaults)
        readers = {
            "negative": lambda n, w: self.text(n, w),
            "steps": lambda n, w: self.integer(n, w, 1, MAX_STEPS, " steps"),
            "guidance": lambda n, w: self.number(n, w, 0.0, 30.0),
            "sampler": lambda n, w: self.choice(n, w, SAMPLERS),
            "size": self.size,
            "lora": self.lora,
            "lora_weight": lambda n, w: self.number(n, w, -4.0, 4.0),
            "weight": lambda n, w: self.number(n, w, 0.0, 1e6, lo_open=True),
        }
        for key, reader in readers.items():
            if key in values:
                value = reader(values[key], f"{where}.{key}")
                if value is not None:
                    out[key] = None if value == "panel" else value
        if "steps" in values and out["steps"] > 60:
            self.warn(values["steps"], f"{where}.steps: {out['steps']} steps take many hours on a Pi Zero 2 W and "
                                       "rarely look better than 20-40")
        if out["sampler"] == "turbo" and out["steps"] > 4 and ("steps" in values or "sampler" in values):
            self.warn(values.get("steps") or values["sampler"],
                      f"{where}: turbo models are made for 1-4 steps, not {out['steps']}")
        return out, values

    def size(self, node: Node, where: str) -> tuple[int, int] | str | None:
        raw = self.scalar(node, where, '"panel" or a size such as "1024x768"')
        if raw is None:
            return None
        if raw.strip() == "panel":
            return "panel"
        match = _SIZE.match(raw.strip())
        if not match:
            self.error(node, f'{where}: {raw!r} is not a size; write "panel" (the best size for the panel) '
                             'or WIDTHxHEIGHT, e.g. "1024x768"')
            return None
        w, h = int(match[1]), int(match[2])
        if not (256 <= w <= 2048 and 256 <= h <= 2048) or w % 8 or h % 8:
            self.error(node, f"{where}: {w}x{h} is not allowed; both sides must be multiples of 8 from 256 to 2048")
            return None
        if w % 64 or h % 64:
            self.warn(node, f"{where}: {w}x{h}: SDXL works best with multiples of 64 (e.g. "
                            f"{round(w / 64) * 64}x{round(h / 64) * 64})")
        return (w, h)

    def lora(self, node: Node, where: str) -> Path | None:
        path = self.path(node, where)
        if path is not None and not path.exists():
            self.warn(node, f"{where}: {path} does not exist yet; this theme fails until the file is there")
        return path

    def themes(self, node: Node, defaults: dict) -> list[Theme]:
        items = self.sequence(node, "themes")
        if isinstance(node, SequenceNode) and not items or _is_null(node):
            self.error(node, "themes: the list is empty; add at least one theme with a name and a prompt")
        themes: list[Theme] = []
        seen: dict[str, int] = {}
        for i, item in enumerate(items):
            where = f"themes[{i}]"
            values, nodes = self.theme_fields(item, where, defaults, THEME_KEYS + ("name", "prompt", "prompts"))
            if not isinstance(item, MappingNode):
                continue
            name = self.text(nodes["name"], f"{where}.name", allow_empty=False) if "name" in nodes else None
            if "name" not in nodes:
                self.error(item, f"{where}: missing 'name' (a short label shown in the status and history)")
            elif name is not None and name in seen:
                self.error(nodes["name"], f"{where}.name: {name!r} is already the name of the theme on line "
                                          f"{seen[name]}; names must be unique")
            if name is not None:
                seen.setdefault(name, nodes["name"].start_mark.line + 1)
            templates = self.prompts(item, nodes, where)
            if name is not None and templates:
                themes.append(Theme(name=name, templates=tuple(templates), **values))
        return themes

    def prompts(self, item: Node, nodes: dict[str, Node], where: str) -> list[Template]:
        if "prompt" in nodes and "prompts" in nodes:
            self.error(nodes["prompts"], f"{where}: give either 'prompt' or 'prompts', not both")
            return []
        if "prompt" not in nodes and "prompts" not in nodes:
            self.error(item, f"{where}: missing 'prompt' (a template such as \"a {{misty|sunny}} harbour, "
                             "__style__\")")
            return []
        key = "prompt" if "prompt" in nodes else "prompts"
        entries = self.sequence(nodes[key], f"{where}.{key}", single_ok=True)
        if isinstance(nodes[key], SequenceNode) and not entries:
            self.error(nodes[key], f"{where}.{key}: the list is empty; give at least one template")
        templates = [self.template(n, f"{where}.{key}" + (f"[{j}]" if key == "prompts" else ""))
                     for j, n in enumerate(entries)]
        return [t for t in templates if t is not None]

    def wildcards(self, node: Node | None) -> dict[str, tuple[Template, ...]]:
        """Wildcard lists given in the config: a list of entries, or the name of a text file."""
        if node is None:
            return {}
        lists: dict[str, tuple[Template, ...]] = {}
        for name, value in (self.mapping(node, "wildcards", _AnyName()) or {}).items():
            where = f"wildcards.{name}"
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", name):
                self.error(value, f"{where}: list names use letters, digits, '-' and '_' (used as __{name}__)")
                continue
            if isinstance(value, ScalarNode) and not _is_null(value):
                path = self.path(value, where)
                entries = self.wildcard_loader.load_file(path, (self.file, *_place(value)), where) \
                    if path is not None else []
            else:
                items = self.sequence(value, where)
                if not items and (isinstance(value, SequenceNode) or _is_null(value)):
                    self.error(value, f"{where}: the list is empty; give at least one entry")
                entries = [t for j, n in enumerate(items) if (t := self.template(n, f"{where}[{j}]")) is not None]
            if entries:
                lists[name] = tuple(entries)
        return lists

    def schedule(self, node: Node | None) -> ScheduleSettings:
        values = self.mapping(node, "schedule", ("times", "quiet_hours")) if node is not None else {}
        if not values:
            return ScheduleSettings()
        times: list[dt.time] = []
        for i, item in enumerate(self.sequence(values["times"], "schedule.times", single_ok=True)
                                 if "times" in values else []):
            t = self.time(item, f"schedule.times[{i}]")
            if t is not None:
                if t in times:
                    self.warn(item, f"schedule.times[{i}]: {t:%H:%M} is listed twice")
                else:
                    times.append(t)
        quiet: list[QuietHours] = []
        for i, item in enumerate(self.sequence(values["quiet_hours"], "schedule.quiet_hours", single_ok=True)
                                 if "quiet_hours" in values else []):
            where = f"schedule.quiet_hours[{i}]"
            raw = self.scalar(item, where, 'a range such as "22:00-07:00"')
            if raw is None:
                continue
            start, sep, end = raw.partition("-")
            a, b = _TIME.match(start.strip()), _TIME.match(end.strip())
            if not sep or not a or not b or int(a[1]) > 23 or int(b[1]) > 23 or int(a[2]) > 59 or int(b[2]) > 59:
                self.error(item, f'{where}: {raw!r} is not a range of times; write "HH:MM-HH:MM", e.g. "22:00-07:00"')
                continue
            hours = QuietHours(dt.time(int(a[1]), int(a[2])), dt.time(int(b[1]), int(b[2])))
            if hours.start == hours.end:
                self.error(item, f"{where}: {raw!r} starts and ends at the same time")
                continue
            quiet.append(hours)
        for i, t in enumerate(times):
            inside = [q for q in quiet if q.contains(t)]
            if inside:
                self.warn(values["times"], f"schedule.times[{i}]: {t:%H:%M} falls in the quiet hours {inside[0]}; "
                                           "that picture waits until they end")
        return ScheduleSettings(tuple(sorted(times)), tuple(quiet))

    def history(self, node: Node | None) -> HistorySettings:
        values = self.mapping(node, "history", ("folder", "keep", "max_mb")) if node is not None else {}
        if not values:
            return HistorySettings()
        default = HistorySettings()
        folder = self.path(values["folder"], "history.folder") if "folder" in values else None
        keep = self.integer(values["keep"], "history.keep", 1, 1_000_000, " pictures") if "keep" in values else None
        max_mb = self.number(values["max_mb"], "history.max_mb", 1.0, 10_000_000.0, " MB") \
            if "max_mb" in values else None
        return HistorySettings(folder, keep or default.keep, max_mb or default.max_mb)

    def buttons(self, node: Node | None, display: DisplayConfig) -> ButtonSettings:
        if node is None:
            return ButtonSettings()
        values = self.mapping(node, "buttons", _AnyName())
        if not values:
            return ButtonSettings()
        enabled = self.boolean(values.pop("enabled"), "buttons.enabled") if "enabled" in values else None
        hold = self.number(values.pop("hold_time"), "buttons.hold_time", 0.1, 10.0, " seconds") \
            if "hold_time" in values else None
        specs = {name: ButtonSpec(name, None, press, hold_) for name, (_, press, hold_) in DEFAULT_BUTTONS.items()}
        pin_nodes: dict[str, Node] = {}
        for name, value in values.items():
            where = f"buttons.{name}"
            if _is_null(value) or (isinstance(value, ScalarNode) and value.value in _FALSE):
                specs.pop(name, None)
                continue
            fields_ = self.mapping(value, where, ("pin", "press", "hold"))
            if fields_ is None:
                continue
            base = specs.get(name) or ButtonSpec(name, None, "none", "none")
            pin = self.integer(fields_["pin"], f"{where}.pin", 0, MAX_GPIO, " (BCM numbering)") \
                if "pin" in fields_ else base.pin
            if "pin" in fields_ and pin is not None:
                pin_nodes[name] = fields_["pin"]
                if pin in PANEL_PINS:
                    self.error(fields_["pin"], f"{where}.pin: GPIO {pin} is {PANEL_PINS[pin]}, used by the panel; "
                                               f"pick a free pin")
            if pin is None and name not in DEFAULT_BUTTONS:
                if "pin" not in fields_:
                    self.error(value, f"{where}: missing 'pin' (the BCM GPIO number the button pulls to ground)")
                continue
            press = self.choice(fields_["press"], f"{where}.press", ACTIONS) if "press" in fields_ else base.press
            hold_ = self.choice(fields_["hold"], f"{where}.hold", ACTIONS) if "hold" in fields_ else base.hold
            specs[name] = ButtonSpec(name, pin, press or base.press, hold_ or base.hold)
        panel = display.panel if display.panel != AUTO_PANEL else None
        owners: dict[int, str] = {}
        settings = ButtonSettings(True if enabled is None else enabled, hold or 1.0, tuple(specs.values()))
        for name, pin in settings.pins_for(panel).items():
            other = owners.setdefault(pin, name)
            if other != name:
                mine, theirs = (name, other) if name in pin_nodes or other not in pin_nodes else (other, name)
                self.error(pin_nodes.get(mine) or node, f"buttons.{mine}: GPIO {pin} is also button "
                                                        f"{theirs}'s pin; each button needs its own")
        return settings


THEME_DEFAULTS: dict = {"negative": "", "steps": 20, "guidance": 7.0, "sampler": "euler", "size": None,
                        "lora": None, "lora_weight": 1.0, "weight": 1.0}
THEME_KEYS = tuple(THEME_DEFAULTS)


class _AnyName(list):
    """An ``allowed`` list that accepts any key (for user-named entries)."""

    def __contains__(self, item) -> bool:
        return True


def _place(node: Node | None, column_offset: int = 0) -> tuple[int, int]:
    """The 1-based line and column of ``node`` (1, 1 for none), ``column_offset`` columns further on."""
    line, column = (node.start_mark.line + 1, node.start_mark.column + 1) if node is not None else (1, 1)
    return line, column + column_offset


def _text_column(node: Node | None) -> int | None:
    """Columns from a scalar's start to its text's first character (1 past a quote); None for multi-line values."""
    if not isinstance(node, ScalarNode) or node.start_mark.line != node.end_mark.line:
        return None
    return 1 if node.style in ('"', "'") else 0


def _column_offset(node: Node | None, offset: int) -> int:
    """Columns from a scalar's start to character ``offset`` of its value (single-line scalars only)."""
    shift = _text_column(node)
    return 0 if shift is None else offset + shift
