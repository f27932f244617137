"""Form edits of the config's YAML text: one value or list item changes, every other character stays."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest
import yaml

from frame.web import yamledit
from frame.web.yamledit import EditError

EXAMPLE = (Path(__file__).resolve().parents[3] / "config.example.yaml").read_text()


def changed_lines(before: str, after: str) -> list[str]:
    return [line for line in difflib.ndiff(before.splitlines(), after.splitlines()) if line[:1] in "+-"]


def test_a_value_is_replaced_in_place_keeping_comments():
    edited = yamledit.set_value(EXAMPLE, ("themes", 1, "steps"), 30)
    assert changed_lines(EXAMPLE, edited) == ["-     steps: 24", "+     steps: 30"]
    assert yaml.safe_load(edited)["themes"][1]["steps"] == 30


def test_a_flow_list_stays_flow_and_keeps_its_line_comment():
    edited = yamledit.set_value(EXAMPLE, ("wildcards", "time"), ["dawn", "a: b"])
    assert "  time: [dawn, 'a: b']                                      # example" in edited


def test_a_missing_key_is_added_where_its_siblings_are():
    edited = yamledit.set_value(EXAMPLE, ("themes", 0, "negative"), "people")
    assert changed_lines(EXAMPLE, edited) == ["+     negative: people"]
    assert yaml.safe_load(edited)["themes"][0]["negative"] == "people"
    made = yamledit.set_value("model: {preset: rpi}\n", ("schedule", "times"), ["07:00"])
    assert yaml.safe_load(made) == {"model": {"preset": "rpi"}, "schedule": {"times": ["07:00"]}}


@pytest.mark.parametrize("value", ["a {red|blue} boat", "yes", "multi\nline", "#not a comment", "12", "x: y"])
def test_text_is_quoted_wherever_yaml_would_misread_it(value):
    flow = "themes:\n  - {name: a, prompt: b}\n"
    block = "themes:\n  - name: a\n    prompt: b\n"
    for text in (flow, block):
        assert yaml.safe_load(yamledit.set_value(text, ("themes", 0, "prompt"), value))["themes"][0]["prompt"] == value
        assert yaml.safe_load(yamledit.set_value(text, ("themes", 0, "new"), value))["themes"][0]["new"] == value


def test_keys_and_items_are_deleted_moved_and_appended():
    text = "themes:\n  - name: a   # first\n    steps: 3\n  # between\n  - {name: b}\n  - name: c\norder: shuffle\n"
    assert yaml.safe_load(yamledit.delete_key(text, ("themes", 0, "steps")))["themes"][0] == {"name": "a"}
    assert "# first" in yamledit.delete_key(text, ("themes", 0, "steps"))
    moved = yamledit.move_item(text, ("themes",), 0, 1)
    assert [t["name"] for t in yaml.safe_load(moved)["themes"]] == ["b", "a", "c"] and "# between" in moved
    deleted = yamledit.delete_item(text, ("themes",), 2)
    assert [t["name"] for t in yaml.safe_load(deleted)["themes"]] == ["a", "b"]
    assert yaml.safe_load(deleted)["order"] == "shuffle"
    appended = yamledit.append_item(text, ("themes",), {"name": "d", "prompt": "x"})
    assert yaml.safe_load(appended)["themes"][-1] == {"name": "d", "prompt": "x"}
    assert yamledit.move_item(text, ("themes",), 2, 1) == text   # the last item has no neighbour below


def test_text_that_is_not_yaml_or_not_the_expected_shape_is_an_edit_error():
    with pytest.raises(EditError, match="not valid YAML"):
        yamledit.set_value("a: [", ("a",), 1)
    with pytest.raises(EditError, match="not a list"):
        yamledit.append_item("themes: {a: 1}\n", ("themes",), {"name": "x"})
