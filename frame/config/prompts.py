"""The sections that hold prompts (``themes:``, ``defaults:``, ``wildcards:``), each template kept with its place.

Where each template was written goes to frame.themes.WildcardLoader, which loads the
wildcard list files and checks every ``__name__`` (pointing at the very character).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from pathlib import Path

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from engine.errors import InputError
from engine.options import resolve
from engine.sdxl.pipeline import pictures_within
from engine.sdxl.recipes import find_recipe
from engine.sdxl.samplers import SAMPLERS, SCHEDULES, nearest_first
from engine.sdxl.samplers.names import normalised, sampler_name, schedule_name
from frame.config.reader import (AnyName, FilePath, Number, Problem, Reader, Text, Whole, column_offset, is_null,
                                 text_column)
from frame.config.sections import Key, names, read_keys
from frame.config.settings import ModelSettings, Theme
from frame.loratags import find_tags, lora_files, unknown_name
from frame.themes import Origin, Template, TemplateError, WildcardLoader, parse_template

TURBO = "turbo"     # the old `sampler: turbo`, read as `recipe: turbo` with a warning
SAMPLING = ("steps", "sampler", "schedule")   # what a recipe sets unless the theme (or defaults:) does
MAX_STEPS = 150
_SIZE = re.compile(r"^(\d+)\s*[xX]\s*(\d+)$")


@dataclass(frozen=True)
class Size:
    """A theme's picture size: "panel" (the panel's best size) or WIDTHxHEIGHT."""

    def read(self, reader: Reader, node: Node, where: str) -> tuple[int, int] | str | None:
        raw = reader.scalar(node, where, '"panel" or a size such as "1024x768"')
        if raw is None:
            return None
        if raw.strip() == "panel":
            return "panel"
        match = _SIZE.match(raw.strip())
        if not match:
            reader.error(node, f'{where}: {raw!r} is not a size; write "panel" (the best size for the panel) '
                               'or WIDTHxHEIGHT, e.g. "1024x768"')
            return None
        w, h = int(match[1]), int(match[2])
        if not (256 <= w <= 2048 and 256 <= h <= 2048) or w % 8 or h % 8:
            reader.error(node, f"{where}: {w}x{h} is not allowed; both sides must be multiples of 8 from 256 to 2048")
            return None
        if w % 64 or h % 64:
            reader.warn(node, f"{where}: {w}x{h}: SDXL works best with multiples of 64 (e.g. "
                              f"{round(w / 64) * 64}x{round(h / 64) * 64})")
        return (w, h)


@dataclass(frozen=True)
class SamplingName:
    """A sampler or schedule name in any spelling engine.sdxl.samplers reads ("DPM++ 2M Karras",
    OnnxStream's "dpm++2m"); Prompts.sampling makes it canonical once both are known."""

    what: str                       # "sampler" or "schedule"
    check: Callable[[str], object]  # raises InputError for a name that is not one
    choices: tuple[str, ...]        # listed, nearest first, when it is not
    example: str

    def read(self, reader: Reader, node: Node, where: str) -> str | None:
        raw = reader.scalar(node, where, f"a {self.what} such as {self.example}")
        if raw is None:
            return None
        try:
            if raw.strip() not in self.choices:
                self.check(raw)
        except InputError:
            reader.error(node, f"{where}: {raw!r} is not a {self.what}; choose one of: "
                               f"{', '.join(nearest_first(normalised(raw), self.choices))}")
            return None
        return raw.strip()


@dataclass(frozen=True)
class RecipeName:
    """A recipe's name (engine.sdxl.recipes), canonical."""

    def read(self, reader: Reader, node: Node, where: str) -> str | None:
        raw = reader.scalar(node, where, "a recipe such as sdxl, turbo, lightning-4 or dmd2")
        if raw is None:
            return None
        try:
            return find_recipe(raw).name
        except InputError as exc:
            reader.error(node, f"{where}: {exc}")
            return None


@dataclass(frozen=True)
class LoraFile:
    """A LoRA file; one that is not there yet is a warning (the theme fails until it is)."""

    def read(self, reader: Reader, node: Node, where: str) -> Path | None:
        path = FilePath("file").read(reader, node, where)
        if path is not None and not path.exists():
            reader.warn(node, f"{where}: {path} does not exist yet; this theme fails until the file is there")
        return path


THEME = (   # also the keys of ``defaults:``, which every theme starts from
    Key("negative", Text(), "what the picture should not show"),
    Key("recipe", RecipeName(), "the kind of model and its sampling: sdxl, turbo, lightning-4, dmd2, ... "
        "(sets steps, sampler, schedule and guidance unless they are given)"),
    Key("steps", Whole(1, MAX_STEPS, " steps"), "denoising steps"),
    Key("guidance", Number(0.0, 30.0), "classifier-free guidance scale"),
    Key("sampler", SamplingName("sampler", sampler_name, SAMPLERS + (TURBO,), "euler, dpmpp_2m or lcm"),
        "the sampler"),
    Key("schedule", SamplingName("schedule", schedule_name, SCHEDULES, "karras or trailing"),
        "the noise schedule (default: the model's own)"),
    Key("size", Size(), '"panel" (the best size for the panel) or WIDTHxHEIGHT'),
    Key("images_per_pass", Whole(1, 8, " pictures"), "pictures made together in one pass over the weights "
        "(seeds in a row; all go to the history; the engine's memory budget limits them)"),
    Key("lora", LoraFile(), "a LoRA file to apply"),
    Key("lora_weight", Number(-4.0, 4.0), "how strongly the LoRA applies"),
    Key("weight", Number(0.0, 1e6, lo_open=True), "how often the theme comes up with order: weighted"),
)
THEME_DEFAULTS = {f.name: f.default for f in fields(Theme) if f.name in names(THEME)}


class Prompts:
    """The prompt templates of one file being read, each with where it was written, and their wildcard lists."""

    def __init__(self, reader: Reader, model: ModelSettings | None = None):
        self.reader = reader
        self.model = model or ModelSettings()   # a LoRA recipe runs without a LoRA on a model imported with it;
                                                # its preset's memory budget limits images_per_pass
        self.defaults_given: set[str] = set()   # the keys ``defaults:`` sets, which a recipe does not replace
        self.written: dict[int, Origin] = {}   # id(template) -> where it was written in the file
        self.wildcard_loader = WildcardLoader(self._wildcard_problem, self.written, Origin(reader.file, 1, 1, None))

    def _wildcard_problem(self, file: str, line: int, column: int, message: str) -> None:
        self.reader.problems.append(Problem(file, line, column, message))

    def template(self, node: Node, where: str) -> Template | None:
        """A prompt template written in the file; where it stands is kept for the wildcard checks."""
        raw = Text(allow_empty=False).read(self.reader, node, where)
        if raw is None:
            return None
        try:
            template = parse_template(raw)
        except TemplateError as exc:
            self.reader.error(node, f"{where}: {exc.message}", column_offset(node, exc.offset))
            return None
        self.written[id(template)] = Origin(self.reader.file, *self.reader.place(node), text_column(node))
        return template

    def check_lora_tags(self, templates: Iterable[Template], folder: Path) -> None:
        """Every <lora:NAME:WEIGHT> tag in ``templates`` (themes' prompts, wildcard entries) usable, and naming a
        file in ``folder``; each problem reported at the tag."""
        files: dict[str, Path] | None = None
        for template in templates:
            tags, problems = find_tags(template.source)
            origin = self.wildcard_loader.origin(template)
            for problem in problems:
                self.reader.problems.append(Problem(*origin.at(problem.offset), problem.message))
            for tag in tags:
                files = lora_files(folder) if files is None else files
                if tag.name not in files:
                    self.reader.problems.append(Problem(*origin.at(tag.offset), unknown_name(tag.name, folder, files)))

    def wildcards(self, node: Node | None) -> dict[str, tuple[Template, ...]]:
        """Wildcard lists given in the config: a list of entries, or the name of a text file."""
        if node is None:
            return {}
        reader = self.reader
        lists: dict[str, tuple[Template, ...]] = {}
        for name, value in (reader.mapping(node, "wildcards", AnyName()) or {}).items():
            where = f"wildcards.{name}"
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", name):
                reader.error(value, f"{where}: list names use letters, digits, '-' and '_' (used as __{name}__)")
                continue
            if isinstance(value, ScalarNode) and not is_null(value):
                path = FilePath("file").read(reader, value, where)
                entries = self.wildcard_loader.load_file(path, (reader.file, *reader.place(value)), where) \
                    if path is not None else []
            else:
                items = reader.sequence(value, where)
                if not items and (isinstance(value, SequenceNode) or is_null(value)):
                    reader.error(value, f"{where}: the list is empty; give at least one entry")
                entries = [t for j, n in enumerate(items) if (t := self.template(n, f"{where}[{j}]")) is not None]
            if entries:
                lists[name] = tuple(entries)
        return lists

    def theme_fields(self, node: Node, where: str, defaults: dict, extra: tuple[str, ...] = ()) -> tuple[dict, dict]:
        """A theme's generation settings over ``defaults``, and its nodes by key (``extra``: keys read elsewhere)."""
        values = self.reader.mapping(node, where, names(THEME) + extra)
        if values is None:
            return dict(defaults), {}
        out = dict(defaults)
        for key, value in read_keys(self.reader, values, where, THEME).items():
            out[key] = None if key == "size" and value == "panel" else value
        tags, problems = find_tags(out["negative"]) if "negative" in values and out["negative"] else ([], [])
        if tags or problems:
            offset = min(found.offset for found in tags + problems)
            self.reader.error(values["negative"], f"{where}.negative: LoRA tags (<lora:NAME:WEIGHT>) go in the "
                                                  "prompt, not in the negative prompt",
                              column_offset(values["negative"], offset))
        # A theme's own recipe replaces what defaults: set; a recipe in defaults: keeps it.
        given = set(values) | (self.defaults_given if "recipe" not in values else set())
        if out["sampler"] == TURBO:
            if "sampler" in values:
                self.reader.warn(values["sampler"], f"{where}.sampler: 'turbo' is now a recipe; write recipe: turbo "
                                                    "instead of sampler: turbo")
            out["recipe"] = TURBO
            given -= {"sampler", "schedule"}    # what sampler: turbo meant was the whole of recipe: turbo
        if "steps" in values and out["steps"] > 60:
            self.reader.warn(values["steps"], f"{where}.steps: {out['steps']} steps take many hours on a Pi Zero 2 W "
                                              "and rarely look better than 20-40")
        shorthand = "sampler" in given and out["sampler"] != TURBO and sampler_name(out["sampler"])[1] is not None
        self.sampling(out, values, given, where)
        self.pictures(out, values, where)
        if where == "defaults":    # "DPM++ 2M Karras" there gives the themes their schedule too
            self.defaults_given = given | ({"schedule"} if shorthand else set())
        return out, values

    def sampling(self, out: dict, values: dict[str, Node], given: set[str], where: str) -> None:
        """The recipe with the steps, sampler, schedule and guidance given over it, in canonical
        names ("dpmpp_2m_karras" becomes dpmpp_2m with karras); a combination the engine refuses
        is an error at the key that made it, a LoRA recipe without its LoRA at the recipe."""
        recipe = find_recipe(out["recipe"])
        try:
            spec = recipe.spec(*(out[k] if k in given else None for k in SAMPLING))
            spec.build()
        except InputError as exc:
            key = next((k for k in ("schedule", "steps", "sampler", "recipe") if k in values), None)
            if key is not None:
                self.reader.error(values[key], f"{where}: {exc}")
            return
        out["steps"], out["sampler"], out["schedule"] = spec.steps, spec.sampler, spec.schedule
        if "guidance" not in given:
            out["guidance"] = recipe.guidance
        missing = recipe.missing_file(self.model.path, [out["lora"]] if out["lora"] else [])
        if missing and "recipe" in values:
            self.reader.error(values["recipe"], f"{where}: {missing}")

    def pictures(self, out: dict, values: dict[str, Node], where: str) -> None:
        """images_per_pass within what the model's preset holds at the theme's size (the panel's
        size is known only when the frame runs: the job says so then)."""
        budget = resolve(self.model.preset).memory_budget
        if "images_per_pass" not in values or out["images_per_pass"] < 2 or not budget or out["size"] is None:
            return
        fits = pictures_within(budget, *out["size"])
        if out["images_per_pass"] > fits:
            self.reader.error(values["images_per_pass"], f"{where}.images_per_pass: {out['images_per_pass']} "
                                                         f"pictures of {out['size'][0]}x{out['size'][1]} do not fit "
                                                         f"the {self.model.preset} preset's memory; at most {fits}")

    def themes(self, node: Node, defaults: dict) -> list[Theme]:
        """The themes list: each theme's name, prompts and settings over ``defaults``."""
        reader = self.reader
        items = reader.sequence(node, "themes")
        if isinstance(node, SequenceNode) and not items or is_null(node):
            reader.error(node, "themes: the list is empty; add at least one theme with a name and a prompt")
        themes: list[Theme] = []
        seen: dict[str, int] = {}
        for i, item in enumerate(items):
            where = f"themes[{i}]"
            values, nodes = self.theme_fields(item, where, defaults, ("name", "prompt", "prompts"))
            if not isinstance(item, MappingNode):
                continue
            name = Text(allow_empty=False).read(reader, nodes["name"], f"{where}.name") if "name" in nodes else None
            if "name" not in nodes:
                reader.error(item, f"{where}: missing 'name' (a short label shown in the status and history)")
            elif name is not None and name in seen:
                reader.error(nodes["name"], f"{where}.name: {name!r} is already the name of the theme on line "
                                            f"{seen[name]}; names must be unique")
            if name is not None:
                seen.setdefault(name, nodes["name"].start_mark.line + 1)
            templates = self.prompts(item, nodes, where)
            if name is not None and templates:
                themes.append(Theme(name=name, templates=tuple(templates), **values))
        return themes

    def prompts(self, item: Node, nodes: dict[str, Node], where: str) -> list[Template]:
        """A theme's ``prompt`` (one template) or ``prompts`` (a list of them)."""
        if "prompt" in nodes and "prompts" in nodes:
            self.reader.error(nodes["prompts"], f"{where}: give either 'prompt' or 'prompts', not both")
            return []
        if "prompt" not in nodes and "prompts" not in nodes:
            self.reader.error(item, f"{where}: missing 'prompt' (a template such as \"a {{misty|sunny}} harbour, "
                                    "__style__\")")
            return []
        key = "prompt" if "prompt" in nodes else "prompts"
        entries = self.reader.sequence(nodes[key], f"{where}.{key}", single_ok=True)
        if isinstance(nodes[key], SequenceNode) and not entries:
            self.reader.error(nodes[key], f"{where}.{key}: the list is empty; give at least one template")
        templates = [self.template(n, f"{where}.{key}" + (f"[{j}]" if key == "prompts" else ""))
                     for j, n in enumerate(entries)]
        return [t for t in templates if t is not None]
