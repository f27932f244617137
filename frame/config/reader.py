"""A YAML reader that keeps every value's file, line and column: it knows YAML, not slowframe's keys.

``compose(text, file)`` parses a document into PyYAML nodes (each with its position);
a ``Reader`` turns nodes into values, recording a ``Problem`` at the node for each bad
one (printed ``FILE:LINE:COLUMN: error: message``, saying what is allowed) instead of
stopping at the first. The value kinds (``Whole``, ``Number``, ``OneOf``...) are what
section tables are written with.
"""

from __future__ import annotations

import datetime as dt
import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

TIME = re.compile(r"^(\d{1,2}):(\d{2})$")
_NULL_VALUES = ("", "~", "null", "Null", "NULL")
TRUE = ("true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON")
FALSE = ("false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF")
_UNQUOTED = re.compile(r"^\s*(?:-\s+)?([A-Za-z_][\w ]*):\s+([^\s\"'].*?)\s*$")


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


def read_text(path: Path) -> str:
    """The text of ``path``; ConfigError (one Problem) when it cannot be read or is not UTF-8."""
    try:
        return path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[:exc.start].count(b"\n") + 1
        raise ConfigError([Problem(str(path), line, 1, "the file is not UTF-8 text; save it as UTF-8")]) from None
    except OSError as exc:
        raise ConfigError([Problem(str(path), 1, 1, f"cannot read the file: {exc.strerror}")]) from None


def compose(text: str, file: str) -> Node | None:
    """The document's root node (None when empty); ConfigError (one Problem, with a hint) when it is not YAML."""
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        message = f"{exc.problem} {exc.context or ''}".strip() if exc.problem else str(exc)
        if "\t" in text and "\\t" in message:
            message += " (YAML indents with spaces only; replace the tab characters)"
        elif mark is not None:
            message += _quoting_hint(text.splitlines()[mark.line] if mark.line < len(text.splitlines()) else "")
        raise ConfigError([Problem(file, mark.line + 1 if mark else 1, mark.column + 1 if mark else 1,
                                   f"not valid YAML: {message}")]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([Problem(file, 1, 1, f"not valid YAML: {exc}")]) from None


def _quoting_hint(line: str) -> str:
    """For ``prompt: {a|b} sea`` and the like: YAML reads {, [ and ': ' as syntax; quotes fix it."""
    match = _UNQUOTED.match(line)
    if match and any(c in match[2] for c in "{}[]|:#"):
        value = match[2].replace('"', '\\"')
        return f' (text with {{, [, | or ": " in it must be in double quotes: {match[1]}: "{value}")'
    return ""


def is_null(node: Node) -> bool:
    """Whether ``node`` is YAML's null (an empty value, ``~`` or ``null``)."""
    return isinstance(node, ScalarNode) and node.tag.endswith(":null") and node.value in _NULL_VALUES


def _kind(node: Node) -> str:
    if isinstance(node, MappingNode):
        return "a mapping (key: value lines)"
    if isinstance(node, SequenceNode):
        return "a list"
    return f"{node.value!r}" if node.value != "" else "nothing"


def suggest(word: str, choices: Iterable[str]) -> str:
    """"; did you mean 'x'?" for the closest of ``choices``, else "; allowed: ..." listing them."""
    choices = list(choices)
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f"; allowed: {', '.join(choices)}" if choices else ""


def text_column(node: Node | None) -> int | None:
    """Columns from a scalar's start to its text's first character (1 past a quote); None for multi-line values."""
    if not isinstance(node, ScalarNode) or node.start_mark.line != node.end_mark.line:
        return None
    return 1 if node.style in ('"', "'") else 0


def column_offset(node: Node | None, offset: int) -> int:
    """Columns from a scalar's start to character ``offset`` of its value (single-line scalars only)."""
    shift = text_column(node)
    return 0 if shift is None else offset + shift


class AnyName(list):
    """An ``allowed`` list that accepts any key (for user-named entries)."""

    def __contains__(self, item) -> bool:
        return True


class Reader:
    """Turns the YAML nodes of one file into values, recording a Problem for each bad one.

    Relative paths are taken relative to ``base`` (the file's folder).
    """

    def __init__(self, file: str, base: Path):
        self.file = file
        self.base = base
        self.problems: list[Problem] = []

    # ------------------------------------------------------------ reporting

    def error(self, node: Node | None, message: str, column_offset: int = 0) -> None:
        self._add(node, message, "error", column_offset)

    def warn(self, node: Node | None, message: str, column_offset: int = 0) -> None:
        self._add(node, message, "warning", column_offset)

    def _add(self, node: Node | None, message: str, severity: str, column_offset: int) -> None:
        self.problems.append(Problem(self.file, *self.place(node, column_offset), message, severity))

    @staticmethod
    def place(node: Node | None, column_offset: int = 0) -> tuple[int, int]:
        """The 1-based line and column of ``node`` (1, 1 for none), ``column_offset`` columns further on."""
        line, column = (node.start_mark.line + 1, node.start_mark.column + 1) if node is not None else (1, 1)
        return line, column + column_offset

    # ------------------------------------------------------------ structure

    def mapping(self, node: Node, where: str, allowed: Iterable[str]) -> dict[str, Node] | None:
        """The mapping's values by key (empty for null); unknown and repeated keys reported."""
        if is_null(node):
            return {}
        if not isinstance(node, MappingNode):
            self.error(node, f"{where}: expected a mapping (key: value lines), got {_kind(node)}")
            return None
        allowed = allowed if isinstance(allowed, AnyName) else list(allowed)
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
                self.error(key_node, f"{where}: unknown key {key!r}{suggest(key, allowed)}")
                continue
            out[key] = value_node
        return out

    @staticmethod
    def _key_line(node: MappingNode, key: str) -> int:
        return next(k.start_mark.line + 1 for k, _ in node.value if isinstance(k, ScalarNode) and k.value == key)

    def sequence(self, node: Node, where: str, single_ok: bool = False) -> list[Node]:
        """The list's items (none for null; a lone scalar counts as a list of one when ``single_ok``)."""
        if is_null(node):
            return []
        if isinstance(node, SequenceNode):
            return list(node.value)
        if single_ok and isinstance(node, ScalarNode):
            return [node]
        self.error(node, f"{where}: expected a list (lines starting with '- ', or [a, b]), got {_kind(node)}")
        return []

    def scalar(self, node: Node, where: str, what: str) -> str | None:
        """The scalar's text as written; ``what`` names what was expected when it is a list or mapping."""
        if not isinstance(node, ScalarNode):
            self.error(node, f"{where}: expected {what}, got {_kind(node)}")
            return None
        return node.value

    def python(self, node: Node, where: str) -> object | None:
        """The node as YAML's own Python value (lists, mappings, numbers...), for checks written in Python;
        None also when YAML cannot build it (reported)."""
        try:
            return yaml.SafeLoader("").construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            self.error(node, f"{where}: {exc}")
            return None


class Kind(Protocol):
    """A kind of value a key takes: ``read`` gives the value, or None after reporting what is allowed."""

    def read(self, reader: Reader, node: Node, where: str) -> object | None: ...


@dataclass(frozen=True)
class Text:
    """Any text; ``allow_empty`` false: blank text is an error."""

    allow_empty: bool = True

    def read(self, reader: Reader, node: Node, where: str) -> str | None:
        value = reader.scalar(node, where, "text")
        if value is not None and not self.allow_empty and not value.strip():
            reader.error(node, f"{where}: must not be empty")
            return None
        return value


@dataclass(frozen=True)
class Number:
    """A number from ``lo`` (exclusive when ``lo_open``) to ``hi``; ``unit`` follows the range in messages."""

    lo: float
    hi: float
    unit: str = ""
    lo_open: bool = False
    what = "a number"

    def convert(self, raw: str) -> float:
        return float(raw.replace("_", ""))

    def show(self, value: float) -> str:
        return f"{value:g}"

    def read(self, reader: Reader, node: Node, where: str) -> float | None:
        raw = reader.scalar(node, where, self.what)
        if raw is None:
            return None
        try:
            value = self.convert(raw)
        except ValueError:
            reader.error(node, f"{where}: {raw!r} is not {self.what}; use {self.show(self.lo)} to "
                               f"{self.show(self.hi)}{self.unit}")
            return None
        if not (self.lo < value if self.lo_open else self.lo <= value) or not value <= self.hi or value != value:
            bound = f"more than {self.show(self.lo)}" if self.lo_open else self.show(self.lo)
            reader.error(node, f"{where}: {self.show(value)} is out of range; use {bound} to "
                               f"{self.show(self.hi)}{self.unit}")
            return None
        return value


@dataclass(frozen=True)
class Whole(Number):
    """A whole number from ``lo`` to ``hi``; ``unit`` follows the range in messages."""

    what = "a whole number"

    def convert(self, raw: str) -> int:
        return int(raw.replace("_", ""), 10)

    def show(self, value: float) -> str:
        return str(value)


@dataclass(frozen=True)
class Flag:
    """true or false (YAML's yes/no and on/off too)."""

    def read(self, reader: Reader, node: Node, where: str) -> bool | None:
        raw = reader.scalar(node, where, "true or false")
        if raw in TRUE:
            return True
        if raw in FALSE:
            return False
        if raw is not None:
            reader.error(node, f"{where}: {raw!r} is not true or false")
        return None


@dataclass(frozen=True)
class OneOf:
    """One of ``choices``."""

    choices: tuple[str, ...]

    def read(self, reader: Reader, node: Node, where: str) -> str | None:
        raw = reader.scalar(node, where, "one of " + ", ".join(self.choices))
        if raw is None:
            return None
        if raw not in self.choices:
            reader.error(node, f"{where}: {raw!r} is not allowed{suggest(raw, self.choices)}")
            return None
        return raw


@dataclass(frozen=True)
class Time:
    """A time of day, HH:MM on a 24-hour clock."""

    def read(self, reader: Reader, node: Node, where: str) -> dt.time | None:
        raw = reader.scalar(node, where, 'a time such as "07:00"')
        if raw is None:
            return None
        match = TIME.match(raw.strip())
        if match and int(match[1]) < 24 and int(match[2]) < 60:
            return dt.time(int(match[1]), int(match[2]))
        reader.error(node, f'{where}: {raw!r} is not a time; write HH:MM on a 24-hour clock, e.g. "07:00" or '
                           '"19:30"')
        return None


@dataclass(frozen=True)
class FilePath:
    """A file or folder; relative ones are relative to the file being read, ``~`` is the home folder."""

    def read(self, reader: Reader, node: Node, where: str) -> Path | None:
        raw = Text(allow_empty=False).read(reader, node, where)
        if raw is None:
            return None
        path = Path(raw).expanduser()
        return path if path.is_absolute() else reader.base / path
