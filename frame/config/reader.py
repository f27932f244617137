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
import reprlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from frame.userfiles import UserFileError, clean_text, read_user_text

TIME = re.compile(r"^(\d{1,2}):(\d{2})$")
_NULL_VALUES = ("", "~", "null", "Null", "NULL")
TRUE = ("true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON")
FALSE = ("false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF")
_UNQUOTED = re.compile(r"^\s*(?:-\s+)?([A-Za-z_][\w ]*):\s+([^\s\"'].*?)\s*$")
MAX_VALUES = 20_000   # values in the document with every alias expanded (the example config has ~300)
MAX_DEPTH = 32        # lists and mappings inside each other (the example config nests 4 deep)


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
    """The text of ``path``; ConfigError (one Problem) when it cannot be read, is not a regular file, is too
    long or is not UTF-8."""
    try:
        return read_user_text(path)
    except FileNotFoundError:
        raise ConfigError([Problem(str(path), 1, 1, "no such config file")]) from None
    except UserFileError as exc:
        raise ConfigError([Problem(str(path), exc.line, 1, exc.message)]) from None


def compose(text: str, file: str) -> tuple[Node | None, list[Problem]]:
    """The document's root node (None when empty) and the problems with its text (values the frame cannot
    carry: these do not stop the reading); ConfigError (with a hint) when it is not YAML, or expands past
    MAX_VALUES or MAX_DEPTH through its aliases."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        message = f"{exc.problem} {exc.context or ''}".strip() if exc.problem else str(exc)
        if "\t" in text and "\\t" in message:
            message += " (YAML indents with spaces only; replace the tab characters)"
        elif re.search(r"unknown escape character '[()\[\]]'", message):
            message += (" (A1111's escaped brackets \\( \\) \\[ \\] mean the bracket itself; in double quotes YAML "
                        "wants the backslash doubled, \"a \\\\(big\\\\) boat\", or put the text in single quotes: "
                        "'a \\(big\\) boat')")
        elif mark is not None:
            message += _quoting_hint(text.splitlines()[mark.line] if mark.line < len(text.splitlines()) else "")
        raise ConfigError([Problem(file, mark.line + 1 if mark else 1, mark.column + 1 if mark else 1,
                                   f"not valid YAML: {message}")]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([Problem(file, 1, 1, f"not valid YAML: {exc}")]) from None
    except RecursionError:
        raise ConfigError([Problem(file, 1, 1, f"not usable YAML: lists or mappings nested more than "
                                               f"{MAX_DEPTH} deep")]) from None
    if root is None:
        return None, []
    shape = _Shape(file)
    shape.check(root)
    if shape.fatal:
        raise ConfigError(shape.fatal)
    return root, shape.problems


class _Shape:
    """The document's size with its aliases expanded, its depth, and its text, checked before anything reads it:
    nine anchors nine deep are 387 million values, and a value quoted in a message would be built whole."""

    def __init__(self, file: str):
        self.file = file
        self.problems: list[Problem] = []   # text the frame cannot use: the rest can still be read
        self.fatal: list[Problem] = []      # size, depth, self-reference: nothing can be read
        self._sizes: dict[int, int] = {}

    def check(self, root: Node) -> None:
        self._measure(root, ())

    def _measure(self, node: Node, trail: tuple[int, ...]) -> int:
        """The number of values under ``node`` counting every alias use (MAX_VALUES + 1 once past it); a
        problem at the first node where the limits are crossed."""
        key = id(node)
        if key in self._sizes:
            return self._sizes[key]
        if key in trail:
            self._problem(node, "an alias (*name) refers to a list or mapping that contains it; "
                                "a config cannot hold itself", fatal=True)
            return MAX_VALUES + 1
        if isinstance(node, ScalarNode):
            node.value, why = clean_text(node.value)
            if why:
                self._problem(node, f"this text {why}")
                node.refused = True   # reported here: Reader.scalar and Reader.python pass it over
            size = 1
        else:
            if len(trail) >= MAX_DEPTH:
                self._problem(node, f"lists and mappings nested more than {MAX_DEPTH} deep; a config needs "
                                    "a few levels", fatal=True)
                return MAX_VALUES + 1
            children = [n for pair in node.value for n in pair] if isinstance(node, MappingNode) else node.value
            size = 1
            for child in children:
                size += self._measure(child, trail + (key,))
                if size > MAX_VALUES:
                    if not self.fatal:   # said once, at the innermost list or mapping that crossed the limit
                        self._problem(node, f"expands to more than {MAX_VALUES:,} values through its aliases "
                                            "(*name); a frame's config needs far fewer: remove the aliases "
                                            "that repeat others", fatal=True)
                    break
        self._sizes[key] = min(size, MAX_VALUES + 1)
        return self._sizes[key]

    def _problem(self, node: Node, message: str, fatal: bool = False) -> None:
        problem = Problem(self.file, node.start_mark.line + 1, node.start_mark.column + 1, message)
        (self.fatal if fatal else self.problems).append(problem)


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
    return reprlib.repr(node.value) if node.value != "" else "nothing"


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
            if _refused(key_node):
                continue
            key = key_node.value
            if key in out:
                self.error(key_node, f"{where}: {reprlib.repr(key)} is given twice (the first is on line "
                                     f"{self._key_line(node, key)}); keep one")
                continue
            if key not in allowed:
                self.error(key_node, f"{where}: unknown key {reprlib.repr(key)}{suggest(key, allowed)}")
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
        """The scalar's text as written; ``what`` names what was expected when it is a list or mapping.
        None also for text compose refused (too long, a control character: reported there)."""
        if not isinstance(node, ScalarNode):
            self.error(node, f"{where}: expected {what}, got {_kind(node)}")
            return None
        return None if _refused(node) else node.value

    def python(self, node: Node, where: str) -> object | None:
        """The node as YAML's own Python value (lists, mappings, numbers...), for checks written in Python;
        None also when YAML cannot build it (reported)."""
        if _refused(node):
            return None
        try:
            return yaml.SafeLoader("").construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            self.error(node, f"{where}: {exc}")
            return None


def _refused(node: Node) -> bool:
    """Whether compose refused the text of ``node`` or of a value inside it (the document is small by then)."""
    if isinstance(node, ScalarNode):
        return getattr(node, "refused", False)
    children = [n for pair in node.value for n in pair] if isinstance(node, MappingNode) else node.value
    return any(_refused(child) for child in children)


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
    """A file or folder; relative ones are relative to the file being read, ``~`` is the home folder.

    ``kind`` "folder", "file" or "model" (a model folder or a single-file .safetensors model): what
    must be there when something is, and no file may stand where a folder of the path belongs (the
    frame makes missing folders; it cannot make them through a file).
    """

    kind: str | None = None

    def read(self, reader: Reader, node: Node, where: str) -> Path | None:
        raw = Text(allow_empty=False).read(reader, node, where)
        if raw is None:
            return None
        path = placed_path(reader, node, raw, where)
        if path is None:
            return None
        problem = self.kind and _wrong_kind(path, self.kind)
        if problem:
            reader.error(node, f"{where}: {problem}")
            return None
        return path


def placed_path(reader: Reader, node: Node, raw: str, where: str) -> Path | None:
    """The path `raw` (read from `node`) stands for: a leading ~ or ~user made the home folder it
    names, a relative path taken from the config's folder. None, with an error at the node
    saying what to write instead, where there is no such home folder."""
    try:
        path = Path(raw).expanduser()
    except RuntimeError:   # "~name..." where no user has that name, or "~" with no home folder
        user = raw[1:].split("/", 1)[0]
        whose = f"user '{user}'" if user else "the current user"
        reader.error(node, f"{where}: '{raw}' starts with '~', the home folder of {whose}, which this system does "
                           f"not have; write the whole path (e.g. /home/pi/...), or ./{raw} for a name that starts "
                           f"with '~'")
        return None
    return path if path.is_absolute() else reader.base / path


def _wrong_kind(path: Path, kind: str) -> str | None:
    """Why ``path`` cannot be the ``kind`` ("folder" or "file") asked for, or None."""
    try:
        if path.exists():
            if kind == "model" and not path.is_dir() and not (path.is_file() and path.suffix.lower() == ".safetensors"):
                return (f"{path} is neither a model folder nor a single-file .safetensors model; name one of "
                        "those (`slowframe models import` explains which files it reads)")
            if kind == "folder" and not path.is_dir():
                return f"{path} is a file, not a folder; name a folder (or remove the file)"
            if kind == "file" and not path.is_file():
                what = "a folder" if path.is_dir() else "not a regular file (a FIFO or a device?)"
                return f"{path} is {what}; name a text file"
            return None
        for parent in path.parents:
            if parent.exists():
                return None if parent.is_dir() else f"{parent} is a file, so {path} cannot be made; fix the path"
    except OSError as exc:   # e.g. a path too long, or a folder we may not look into
        return f"cannot look at {path}: {exc.strerror}"
    return None
