"""Prompt templates: parsing, seeded expansion, no-repeat choice and theme order."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from frame.themes import (Choice, Origin, TemplateError, ThemePicker, Wildcard, WildcardLoader, choose_prompt, expand,
                          find_cycle, parse_template, prompt_for_seed)


def lists(**entries):
    return {name: tuple(parse_template(e) for e in values) for name, values in entries.items()}


def test_alternatives_nest_and_may_be_empty():
    t = parse_template("a {{red|blue} boat|harbour}{ at night|}")
    assert t.parts[0] == "a "
    outer, optional = t.parts[1], t.parts[2]
    assert isinstance(outer, Choice) and len(outer.alternatives) == 2
    assert isinstance(outer.alternatives[0][0], Choice)
    assert optional.alternatives[1] == ()
    seen = {expand(t, {}, random.Random(s)) for s in range(200)}
    assert seen == {"a red boat", "a blue boat", "a harbour", "a red boat at night", "a blue boat at night",
                    "a harbour at night"}


def test_wildcards_are_found_with_their_offsets():
    t = parse_template("__colour__ sea, {__style__|plain}")
    assert [(w.name, w.offset) for w in t.wildcards()] == [("colour", 0), ("style", 17)]
    assert isinstance(t.parts[0], Wildcard)


@pytest.mark.parametrize("text, offset, words", [
    ("a {misty|sunny harbour", 2, "never closed"),
    ("a misty} harbour", 7, "without a matching"),
    ("{a|{b|c}", 0, "never closed"),
])
def test_unbalanced_braces_point_at_the_culprit(text, offset, words):
    with pytest.raises(TemplateError) as info:
        parse_template(text)
    assert info.value.offset == offset
    assert words in info.value.message


def test_a_bar_outside_braces_is_plain_text():
    assert expand(parse_template("black | white"), {}, random.Random(0)) == "black | white"


def test_expansion_is_a_function_of_the_seed():
    templates = [parse_template("a {misty|sunny} __place__"), parse_template("__place__ at {dawn|dusk}")]
    wl = lists(place=["harbour", "{old|new} town", "forest"])
    first = [prompt_for_seed(templates, wl, seed) for seed in range(50)]
    again = [prompt_for_seed(templates, wl, seed) for seed in range(50)]
    assert first == again
    assert len(set(first)) > 10   # the seed really drives the choices


def test_wildcard_entries_expand_recursively_and_spaces_are_tidied():
    wl = lists(thing=["__colour__ boat"], colour=["red", "deep {blue|green}"])
    out = {expand(parse_template("a  __thing__ {|at night}"), wl, random.Random(s)) for s in range(100)}
    assert out == {"a red boat", "a deep blue boat", "a deep green boat", "a red boat at night",
                   "a deep blue boat at night", "a deep green boat at night"}


def test_cycles_between_lists_are_found():
    assert find_cycle(lists(a=["x __b__"], b=["__c__"], c=["__a__", "y"])) == ["a", "b", "c", "a"]
    assert find_cycle(lists(a=["__a__"])) == ["a", "a"]
    assert find_cycle(lists(a=["__b__"], b=["plain"])) is None


def test_wildcard_loader_reads_list_files_and_points_at_each_problem(tmp_path):
    folder = tmp_path / "lists"
    folder.mkdir()
    (folder / "style.txt").write_text("# styles\n\nwoodcut\n  {gouache|ink\n  __mood__ print\n")
    (folder / "mood.txt").write_text("calm\n__style__\n")
    problems = []
    prompt = parse_template("a __style__ sea, __colr__")
    loader = WildcardLoader(lambda *problem: problems.append(problem), {id(prompt): Origin("f.yaml", 3, 13, 1)},
                            Origin("f.yaml", 1, 1, None))
    found: dict = {}
    loader.resolve([prompt], found, folder)
    assert [t.source for t in found["style"]] == ["woodcut", "__mood__ print"]
    assert sorted(loader.files) == [folder / "mood.txt", folder / "style.txt"]
    style = str(folder / "style.txt")
    assert problems == [   # a mistake in a file at its line; an unknown name at the character in the prompt
        (style, 4, 3, "__style__: '{' is never closed: add the '}' that ends its alternatives"),
        ("f.yaml", 3, 31, f"unknown wildcard list __colr__; define it under wildcards: or create {folder / 'colr.txt'} "
                          "(one entry per line)"),
        (style, 3, 1, "wildcards: these lists refer to each other in a circle, so a prompt would never end: "
                      "__style__ -> __mood__ -> __style__"),
    ]


def test_choose_prompt_avoids_recent_prompts():
    templates = [parse_template("{a|b|c|d}")]
    rng = random.Random(1)
    recent: list[str] = []
    for _ in range(4):
        prompt, seed = choose_prompt(templates, {}, recent[-3:], rng)
        assert prompt not in recent[-3:]
        assert prompt_for_seed(templates, {}, seed) == prompt   # the recorded seed gives the prompt back
        recent.append(prompt)
    assert sorted(recent) == ["a", "b", "c", "d"]


def test_choose_prompt_takes_the_oldest_when_everything_is_recent():
    templates = [parse_template("{a|b}")]
    prompt, _ = choose_prompt(templates, {}, ["b", "a"], random.Random(3))
    assert prompt == "b"   # used longest ago


def test_sequential_order_cycles_through_the_themes():
    picker = ThemePicker("sequential")
    names = ["a", "b", "c"]
    assert [picker.next(names, [1, 1, 1], random.Random(0)) for _ in range(5)] == ["a", "b", "c", "a", "b"]
    resumed = ThemePicker("sequential", picker.state)   # what the daemon saves and loads
    assert resumed.next(names, [1, 1, 1], random.Random(0)) == "c"


def test_shuffle_shows_each_theme_once_per_round_and_never_twice_in_a_row():
    picker = ThemePicker("shuffle")
    names = ["a", "b", "c", "d"]
    rng = random.Random(7)
    picks = [picker.next(names, [1] * 4, rng) for _ in range(40)]
    for round_start in range(0, 40, 4):
        assert sorted(picks[round_start:round_start + 4]) == names
    assert all(x != y for x, y in zip(picks, picks[1:]))


def test_shuffle_drops_themes_removed_from_the_config():
    picker = ThemePicker("shuffle", {"bag": ["gone", "b"], "last": "a"})
    assert picker.next(["a", "b"], [1, 1], random.Random(0)) == "b"


def test_weighted_order_follows_the_weights():
    picker = ThemePicker("weighted")
    rng = random.Random(11)
    counts = Counter(picker.next(["a", "b", "c"], [1, 2, 7], rng) for _ in range(5000))
    shares = {k: v / 5000 for k, v in counts.items()}
    assert shares["a"] == pytest.approx(0.1, abs=0.02)
    assert shares["b"] == pytest.approx(0.2, abs=0.02)
    assert shares["c"] == pytest.approx(0.7, abs=0.02)
