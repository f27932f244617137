"""<lora:NAME:WEIGHT> tags in prompts: found, checked, taken out, and named files found in the LoRA folder."""

from __future__ import annotations

import pytest

from frame.loratags import find_tags, take_tags, without_tags


@pytest.mark.parametrize("text,tags", [
    ("a boat <lora:woodcut:0.8>", [("woodcut", 0.8, 7)]),
    ("<lora:woodcut> a boat", [("woodcut", 1.0, 0)]),
    ("<LoRA: ink wash :-0.5>, <lyco:grain:1.2>", [("ink wash", -0.5, 0), ("grain", 1.2, 24)]),
    ("a <3 heart, no tags, <not a tag>", []),
])
def test_tags_are_found_with_name_weight_and_place(text, tags):
    found, problems = find_tags(text)
    assert problems == []
    assert [(t.name, t.weight, t.offset) for t in found] == tags


@pytest.mark.parametrize("text,message,offset", [
    ("a <hypernet:x:1>", "LoRAs only", 2),
    ("a <lora::1>", "no LoRA name", 2),
    ("<lora:x:1:0.5>", "one weight only", 0),
    ("<lora:x:strong>", "not a number", 0),
    ("<lora:x:9>", "not a number from -4 to 4", 0),
])
def test_tags_that_cannot_be_used_are_problems_at_their_place(text, message, offset):
    found, [problem] = find_tags(text)
    assert found == [] and message in problem.message and problem.offset == offset


def test_tags_are_removed_as_a1111_removes_them():
    assert without_tags("a boat, <lora:woodcut:0.8>, at sea <lora:ink>") == "a boat, , at sea"


def test_named_files_are_found_anywhere_in_the_folder(tmp_path):
    (tmp_path / "styles").mkdir()
    (tmp_path / "styles" / "woodcut.safetensors").write_bytes(b"x")
    (tmp_path / "ink.safetensors").write_bytes(b"x")
    prompt, loras = take_tags("a boat <lora:woodcut:0.8> <lora:ink>", tmp_path)
    assert prompt == "a boat"
    assert loras == [(tmp_path / "styles" / "woodcut.safetensors", 0.8), (tmp_path / "ink.safetensors", 1.0)]
    with pytest.raises(ValueError, match="no LoRA named 'woodcat'.*did you mean 'woodcut'"):
        take_tags("<lora:woodcat:1>", tmp_path)
    with pytest.raises(ValueError, match="has no .safetensors files"):
        take_tags("<lora:woodcut:1>", tmp_path / "nowhere")
