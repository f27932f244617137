"""config.example.yaml says "the values below are the defaults unless marked example": every value not
marked so is read by the config reader and compared with what the frame does without it."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

from frame.config.document import read_document

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "config.example.yaml"
PROBE = 'themes: [{name: probe, prompt: "x __probe__"}]\n'   # a theme made from the defaults: section


def comment(line: str) -> str:
    """The comment at the end of a YAML line ('' when none): from the first # outside quotes after a space."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            quote = None if c == quote else quote
        elif c in "\"'":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[i:]
    return ""


def without_examples(node: Node, lines: list[str]) -> Node | None:
    """``node`` with every mapping entry and list item whose first line is marked "# example" taken out, and
    lists and mappings that are left empty by that taken out too (None for the node itself)."""
    def marked(child: Node) -> bool:
        return "example" in comment(lines[child.start_mark.line])

    if isinstance(node, MappingNode):
        kept = [(k, v) for k, v in node.value if not marked(k)]
        kept = [(k, without_examples(v, lines)) for k, v in kept]
        node.value = [(k, v) for k, v in kept if v is not None]
        return node if node.value else None
    if isinstance(node, SequenceNode):
        had = bool(node.value)
        node.value = [c for c in (without_examples(c, lines) for c in node.value if not marked(c)) if c is not None]
        return node if node.value or not had else None
    return node


def read(text: str, base: Path):
    """The config ``text`` with the probe theme, whose __probe__ list must come from the wildcard folder."""
    return read_document(text + PROBE, "example", base, source=None)


@pytest.fixture
def base(tmp_path):
    """The config files' folder, with the probe's list in the default wildcard_folder only."""
    (tmp_path / "wildcards").mkdir()
    (tmp_path / "wildcards" / "probe.txt").write_text("y\n")
    return tmp_path


def test_every_value_of_the_example_not_marked_example_is_the_built_in_default(base):
    tmp_path = base
    text = EXAMPLE.read_text()
    root = without_examples(yaml.compose(text), text.splitlines())
    kept = yaml.safe_dump(yaml.SafeLoader("").construct_document(root), sort_keys=False)
    assert "themes" not in kept and "harbours" not in kept and "fruit" not in kept, "examples are taken out"
    assert {"model", "display", "defaults", "order", "schedule", "history", "buttons", "wildcard_folder"} <= \
        set(yaml.safe_load(kept)), "...and only they"
    example, builtin = read(kept, tmp_path), read("", tmp_path)
    assert example.model == builtin.model
    output = Path(builtin.display.output)   # a relative path is read relative to the file's folder
    assert dataclasses.replace(example.display, output=str(tmp_path / output)) == \
        dataclasses.replace(builtin.display, output=str(tmp_path / output))
    assert example.display.output == str(tmp_path / output)
    assert example.theme("probe") == builtin.theme("probe")       # defaults: negative, steps, guidance, ...
    for name in ("order", "no_repeat", "log_level", "schedule", "history", "buttons"):
        assert getattr(example, name) == getattr(builtin, name), name
    assert example.watched_files == builtin.watched_files == (tmp_path / "wildcards" / "probe.txt",)


def test_the_frames_steps_and_guidance_are_what_generate_says_it_uses(base):
    help_text = subprocess.run([sys.executable, "-m", "frame.cli", "generate", "--help"], capture_output=True,
                               text=True, cwd=REPO, check=True).stdout
    words = " ".join(help_text.split())
    steps = re.search(r"sampling steps \(default: the recipe's, (\d+) for sdxl", words)[1]
    guidance = re.search(r"classifier-free guidance \(default: the recipe's, ([\d.]+) for sdxl", words)[1]
    theme = read("", base).theme("probe")
    assert (theme.steps, theme.guidance) == (int(steps), float(guidance))
