"""Prompt templates: ``{a|b|c}`` alternatives, ``__name__`` wildcard lists, seeded expansion.

A template is text with two kinds of choice in it:

- ``{misty|sunlit|stormy}`` picks one alternative; alternatives may be empty
  (``{old |}boat``) and may nest (``{a {red|blue} boat|a harbour}``);
- ``__colour__`` picks one entry of the wildcard list ``colour`` (defined in the config
  or in a text file); entries are templates themselves.

``WildcardLoader`` reads list files (one entry per line) and checks that every
``__name__`` a set of prompts uses resolves, without lists referring to each other in a
circle. Expansion is a pure function of the template, the lists and a seed, so a picture's
recorded seed reproduces its prompt. ``ThemePicker`` chooses which theme comes next and
``choose_prompt`` draws a seed whose prompt is not among the recent ones.
"""

from __future__ import annotations

import difflib
import random
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from frame.loratags import without_tags
from frame.userfiles import UserFileError, clean_text, read_user_text

MAX_DEPTH = 16          # wildcard lists may refer to other lists; deeper than this is a cycle
_WILDCARD = re.compile(r"__([A-Za-z0-9][A-Za-z0-9_-]*?)__")
ORDERS = ("sequential", "shuffle", "weighted")


class TemplateError(ValueError):
    """A template that cannot be parsed; ``offset`` is the character where the problem is."""

    def __init__(self, message: str, offset: int):
        super().__init__(message)
        self.message = message
        self.offset = offset


@dataclass(frozen=True)
class Choice:
    """``{a|b|c}``: one of the alternatives, each a sequence of parts."""

    alternatives: tuple[tuple[Part, ...], ...]


@dataclass(frozen=True)
class Wildcard:
    """``__name__``: one entry of a wildcard list; ``offset`` is where it stands in the source."""

    name: str
    offset: int


Part = str | Choice | Wildcard


@dataclass(frozen=True)
class Template:
    """A parsed prompt template."""

    source: str
    parts: tuple[Part, ...]

    def wildcards(self) -> list[Wildcard]:
        """Every ``__name__`` reference, in order of appearance."""
        found: list[Wildcard] = []

        def walk(parts: Sequence[Part]) -> None:
            for part in parts:
                if isinstance(part, Wildcard):
                    found.append(part)
                elif isinstance(part, Choice):
                    for alternative in part.alternatives:
                        walk(alternative)

        walk(self.parts)
        return found


def parse_template(source: str) -> Template:
    """Parse ``source``; TemplateError with the offending character offset when braces do not match."""
    parts, end = _parse_sequence(source, 0, inside_braces=False)
    assert end == len(source)
    return Template(source, parts)


def _parse_sequence(text: str, pos: int, inside_braces: bool) -> tuple[tuple[Part, ...], int]:
    parts: list[Part] = []
    literal: list[str] = []

    def flush() -> None:
        if literal:
            parts.extend(_split_wildcards("".join(literal), pos - len("".join(literal))))
            literal.clear()

    while pos < len(text):
        ch = text[pos]
        if ch == "{":
            flush()
            choice, pos = _parse_choice(text, pos)
            parts.append(choice)
            continue
        if ch == "}":
            if inside_braces:
                break
            raise TemplateError("'}' without a matching '{' (alternatives are written {a|b|c})", pos)
        if ch == "|" and inside_braces:
            break
        literal.append(ch)
        pos += 1
    flush()
    return tuple(parts), pos


def _parse_choice(text: str, start: int) -> tuple[Choice, int]:
    alternatives: list[tuple[Part, ...]] = []
    pos = start + 1
    while True:
        parts, pos = _parse_sequence(text, pos, inside_braces=True)
        alternatives.append(parts)
        if pos >= len(text):
            raise TemplateError("'{' is never closed: add the '}' that ends its alternatives", start)
        if text[pos] == "}":
            return Choice(tuple(alternatives)), pos + 1
        pos += 1  # past '|'


def _split_wildcards(text: str, offset: int) -> list[Part]:
    parts: list[Part] = []
    pos = 0
    for match in _WILDCARD.finditer(text):
        if match.start() > pos:
            parts.append(text[pos:match.start()])
        parts.append(Wildcard(match.group(1), offset + match.start()))
        pos = match.end()
    if pos < len(text):
        parts.append(text[pos:])
    return parts


def find_cycle(lists: Mapping[str, Sequence[Template]]) -> list[str] | None:
    """A chain of wildcard lists that refer back to themselves (``['a', 'b', 'a']``), or None."""
    state: dict[str, int] = {}   # 1 = on the current path, 2 = finished

    def visit(name: str, path: list[str]) -> list[str] | None:
        state[name] = 1
        for template in lists.get(name, ()):
            for ref in template.wildcards():
                if state.get(ref.name) == 1:
                    return path + [name, ref.name]
                if ref.name in lists and ref.name not in state:
                    cycle = visit(ref.name, path + [name])
                    if cycle:
                        return cycle
        state[name] = 2
        return None

    for name in lists:
        if name not in state:
            cycle = visit(name, [])
            if cycle:
                start = cycle.index(cycle[-1])
                return cycle[start:]
    return None


Place = tuple[str, int, int]   # file, 1-based line, 1-based column


@dataclass(frozen=True)
class Origin:
    """Where a template is written: file, 1-based line and column.

    ``text_column``: how many columns on from there the template's text starts (1 after a
    quote); None when columns inside it cannot be counted (text over several lines).
    """

    file: str
    line: int
    column: int
    text_column: int | None = 0

    @property
    def start(self) -> Place:
        return self.file, self.line, self.column

    def at(self, offset: int) -> Place:
        """Where character ``offset`` of the template is (its start when that cannot be counted)."""
        return self.file, self.line, self.column + (0 if self.text_column is None else self.text_column + offset)


class WildcardLoader:
    """Wildcard lists read from text files, and the check that every ``__name__`` resolves without a cycle.

    ``written`` tells where each template of the config itself was written (by ``id``;
    ``unplaced`` stands for the others); every problem goes to ``report(file, line, column,
    message)``; ``files`` lists each list file read, so the daemon can watch them.
    """

    def __init__(self, report: Callable[[str, int, int, str], None], written: Mapping[int, Origin],
                 unplaced: Origin):
        self.report = report
        self.written = written
        self.unplaced = unplaced
        self.files: list[Path] = []
        self._from_files: dict[int, Origin] = {}   # id(template) -> its line in a list file
        self._troubled: set[str] = set()            # files a problem was reported in

    def _report(self, place: Place, message: str) -> None:
        self._troubled.add(place[0])
        self.report(*place, message)

    def load_file(self, path: Path, at: Place, where: str) -> list[Template]:
        """Entries of a wildcard text file: one per line; blank lines and lines starting with # skipped.

        ``at`` is where the file was asked for, for problems with the file as a whole.
        """
        self.files.append(path)
        try:
            lines = read_user_text(path).splitlines()
        except FileNotFoundError:
            self._report(at, f"{where}: the file {path} does not exist (one entry per line; # starts a comment)")
            return []
        except UserFileError as exc:
            self._report((str(path), exc.line, 1) if exc.line > 1 else at, f"{where}: {path}: {exc.message}")
            return []
        entries = []
        for number, line in enumerate(lines, 1):
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            origin = Origin(str(path), number, len(line) - len(line.lstrip()) + 1)
            stripped, why = clean_text(stripped)
            if why:
                self._report(origin.at(0), f"{where}: this entry {why}")
                continue
            try:
                template = parse_template(stripped)
            except TemplateError as exc:
                self._report(origin.at(exc.offset), f"{where}: {exc.message}")
                continue
            self._from_files[id(template)] = origin
            entries.append(template)
        if not entries and str(path) not in self._troubled:
            self._report(at, f"{where}: {path} has no entries (one per line)")
        return entries

    def resolve(self, templates: Iterable[Template], lists: dict[str, tuple[Template, ...]],
                folder: Path | None) -> None:
        """Add the ``__name__`` lists that ``templates`` and ``lists`` use from ``folder`` (``name.txt``) to
        ``lists``; report the names found nowhere and lists that refer to each other in a circle."""
        pending = list(templates) + [t for ts in lists.values() for t in ts]
        checked: set[str] = set()
        while pending:
            template = pending.pop()
            for ref in template.wildcards():
                if ref.name in lists or ref.name in checked:
                    continue
                checked.add(ref.name)
                candidate = folder / f"{ref.name}.txt" if folder is not None else None
                if candidate is not None and candidate.is_file():
                    # problems with the whole file are shown where the config asked for it (its top when the
                    # asking template is itself from a list file)
                    entries = self.load_file(candidate, self.written.get(id(template), self.unplaced).start,
                                             f"__{ref.name}__")
                    if entries:
                        lists[ref.name] = tuple(entries)
                        pending += entries
                    continue
                known = sorted(set(lists) | _folder_names(folder))
                close = difflib.get_close_matches(ref.name, known, n=1)
                hint = f"did you mean __{close[0]}__? or " if close else ""
                message = (f"unknown wildcard list __{ref.name}__; {hint}define it under wildcards: or create "
                           f"{candidate or ref.name + '.txt'} (one entry per line)")
                self._report(self.origin(template).at(ref.offset), message)
        cycle = find_cycle(lists)
        if cycle:
            self._report(self.origin(lists[cycle[0]][0]).at(0),
                         "wildcards: these lists refer to each other in a circle, so a prompt would never end: "
                         + " -> ".join(f"__{n}__" for n in cycle))

    def origin(self, template: Template) -> Origin:
        """Where ``template`` was written: in the config, or in a list file."""
        return self._from_files.get(id(template)) or self.written.get(id(template), self.unplaced)


def _folder_names(folder: Path | None) -> set[str]:
    try:
        return {p.stem for p in folder.glob("*.txt")} if folder is not None else set()
    except OSError:
        return set()


def expand(template: Template, lists: Mapping[str, Sequence[Template]], rng: random.Random) -> str:
    """The prompt ``template`` stands for under ``rng``: every choice made, spaces tidied."""
    out: list[str] = []
    _expand_parts(template.parts, lists, rng, out, 0)
    return " ".join("".join(out).split())


def _expand_parts(parts: Sequence[Part], lists: Mapping[str, Sequence[Template]], rng: random.Random,
                  out: list[str], depth: int) -> None:
    for part in parts:
        if isinstance(part, str):
            out.append(part)
        elif isinstance(part, Choice):
            _expand_parts(part.alternatives[rng.randrange(len(part.alternatives))], lists, rng, out, depth)
        else:
            entries = lists.get(part.name)
            if not entries:
                raise KeyError(f"wildcard list __{part.name}__ is not defined")
            if depth >= MAX_DEPTH:
                raise RecursionError(f"wildcard lists nest deeper than {MAX_DEPTH} at __{part.name}__")
            _expand_parts(entries[rng.randrange(len(entries))].parts, lists, rng, out, depth + 1)


def prompt_for_seed(templates: Sequence[Template], lists: Mapping[str, Sequence[Template]], seed: int) -> str:
    """The prompt a theme's templates give for ``seed`` (which template, then each choice)."""
    rng = random.Random(seed)
    template = templates[rng.randrange(len(templates))]
    return expand(template, lists, rng)


def choose_prompt(templates: Sequence[Template], lists: Mapping[str, Sequence[Template]],
                  recent: Sequence[str], rng: random.Random, attempts: int = 64) -> tuple[str, int]:
    """A fresh (prompt, seed): the first draw whose prompt is not in ``recent`` (oldest first); prompts are
    compared without their LoRA tags, as the history keeps them.

    When every draw repeats a recent prompt (a theme with few combinations), the draw whose
    prompt was used longest ago wins, so the frame still varies as much as it can.
    """
    last_used = {prompt: i for i, prompt in enumerate(recent)}
    best: tuple[int, str, int] | None = None
    for _ in range(attempts):
        seed = rng.getrandbits(64)
        prompt = prompt_for_seed(templates, lists, seed)
        age = last_used.get(without_tags(prompt))
        if age is None:
            return prompt, seed
        if best is None or age < best[0]:
            best = (age, prompt, seed)
    assert best is not None
    return best[1], best[2]


def _picker_state(state: object) -> dict:
    """The parts of a saved picker state that have the right types (a damaged state.json starts afresh)."""
    if not isinstance(state, Mapping):
        return {}
    good: dict = {}
    if isinstance(state.get("last"), str):
        good["last"] = state["last"]
    if isinstance(state.get("bag"), list):
        good["bag"] = [name for name in state["bag"] if isinstance(name, str)]
    return good


class ThemePicker:
    """Which theme comes next: in order, shuffled (each once per round) or weighted at random.

    Its whole state is ``state`` (JSON-able), which the daemon saves so a restart carries on
    where it left off.
    """

    def __init__(self, order: str, state: Mapping | None = None):
        if order not in ORDERS:
            raise ValueError(f"theme order {order!r}: use one of {', '.join(ORDERS)}")
        self.order = order
        self.state: dict = _picker_state(state)

    def next(self, names: Sequence[str], weights: Sequence[float], rng: random.Random) -> str:
        """The name of the next theme among ``names`` (the current config's themes)."""
        if not names:
            raise ValueError("no themes to choose from")
        if self.order == "sequential":
            last = self.state.get("last")
            choice = names[(names.index(last) + 1) % len(names)] if last in names else names[0]
        elif self.order == "shuffle":
            bag = [name for name in self.state.get("bag", []) if name in names]
            if not bag:
                bag = list(names)
                rng.shuffle(bag)
                if len(bag) > 1 and bag[0] == self.state.get("last"):
                    bag.append(bag.pop(0))   # never the same theme twice across rounds
            choice = bag.pop(0)
            self.state["bag"] = bag
        else:
            choice = rng.choices(list(names), weights=list(weights))[0]
        self.state["last"] = choice
        return choice
