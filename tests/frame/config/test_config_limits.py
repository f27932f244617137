"""Configs that once passed the check and then crashed the daemon, or exhausted memory: each refused with a place."""

from __future__ import annotations

import os
import tracemalloc

import pytest

from frame.config import ConfigError, check_config, load_config
from frame.themes import prompt_for_seed
from frame.userfiles import MAX_FILE_BYTES, MAX_TEXT_CHARS

BASE = "display: {backend: file, panel: spectra6-7.3}\n"


def errors(path) -> list[str]:
    return [str(p) for p in check_config(path) if p.severity == "error"]


def write(tmp_path, text: str, name: str = "frame.yaml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_an_unpaired_surrogate_escape_in_a_prompt_is_an_error_at_its_place(tmp_path):
    path = write(tmp_path, BASE + 'themes:\n  - name: lake\n    prompt: "mountains \\uD800 above a lake"\n')
    assert errors(path) == [f"{path}:4:13: error: this text holds an unpaired surrogate escape (\\uD800), which is "
                            "not a character; write the character itself, or a \\U escape such as \\U0001F600"]


def test_a_surrogate_pair_escape_is_the_character_it_spells(tmp_path):
    path = write(tmp_path, BASE + 'themes:\n  - name: cat\n    prompt: "a cat \\uD83D\\uDE00 smiling"\n')
    config = load_config(path)
    assert prompt_for_seed(config.themes[0].templates, config.wildcards, 1) == "a cat \U0001F600 smiling"


@pytest.mark.parametrize("escape, code", [("\\0", "0000"), ("\\x07", "0007"), ("\\e", "001B")])
def test_control_characters_are_refused(tmp_path, escape, code):
    path = write(tmp_path, BASE + f'themes:\n  - name: t\n    prompt: "a{escape}b"\n')
    assert any(f"U+{code}" in e and ":4:13:" in e for e in errors(path))


def test_a_list_where_a_panel_name_belongs_is_an_error_not_a_crash(tmp_path):
    path = write(tmp_path, "display: {panel: [spectra6-7.3]}\n")
    assert errors(path) == [f"{path}:1:18: error: display.panel: expected text, got ['spectra6-7.3']"]


def test_an_alias_bomb_is_refused_before_it_is_expanded(tmp_path):
    anchors = ["  a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    anchors += [f"  a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    path = write(tmp_path, "x-anchors:\n" + "\n".join(anchors) + "\ndisplay:\n  caption: *a9\n")
    tracemalloc.start()
    try:
        found = errors(path)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert len(found) == 1 and "expands to more than 20,000 values through its aliases" in found[0]
    assert peak < 32 * 1024 * 1024


def test_an_alias_that_contains_itself_is_refused(tmp_path):
    path = write(tmp_path, BASE + "wildcards:\n  style: &loop [a, *loop]\n")
    assert any("refers to a list or mapping that contains it" in e for e in errors(path))


def test_deep_nesting_is_refused(tmp_path):
    path = write(tmp_path, BASE + "wildcards:\n  style: " + "[" * 40 + "]" * 40 + "\n")
    assert any("nested more than 32 deep" in e for e in errors(path))
    path = write(tmp_path, "a: " + "[" * 5000 + "]" * 5000 + "\n")
    assert any("nested" in e for e in errors(path))


def test_an_overlong_value_is_refused_and_not_quoted(tmp_path):
    path = write(tmp_path, BASE + f'model: {{path: "{"x" * (MAX_TEXT_CHARS + 1)}"}}\n')
    found = errors(path)
    assert len(found) == 1 and f"at most {MAX_TEXT_CHARS:,} are allowed" in found[0] and len(found[0]) < 300


def test_an_oversized_file_is_refused_unread(tmp_path):
    path = write(tmp_path, BASE + "#" * MAX_FILE_BYTES + "\n")
    assert "at most 1,048,576 are read" in errors(path)[0]


def test_a_history_folder_that_is_a_file_is_an_error(tmp_path):
    (tmp_path / "taken").write_text("")
    path = write(tmp_path, BASE + "history: {folder: taken}\n")
    assert errors(path) == [f"{path}:2:19: error: history.folder: {tmp_path / 'taken'} is a file, not a folder; "
                            "name a folder (or remove the file)"]


def test_a_model_path_under_a_file_is_an_error(tmp_path):
    (tmp_path / "taken").write_text("")
    path = write(tmp_path, BASE + "model: {path: taken/sdxl}\n")
    assert any("is a file, so" in e and "cannot be made" in e for e in errors(path))


def test_fifos_and_folders_where_files_belong_are_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "folder").mkdir()
    path = write(tmp_path, BASE + "wildcards:\n  style: pipe\n  mood: folder\n")
    found = errors(path)
    assert any("pipe is not a regular file (a FIFO or a device?)" in e for e in found)
    assert any("folder is a folder; name a text file" in e for e in found)
    with pytest.raises(ConfigError, match="not a regular file"):
        load_config(tmp_path / "pipe")


def test_a_control_character_in_a_wildcard_file_is_refused_at_its_line(tmp_path):
    (tmp_path / "styles.txt").write_text("linocut\nink\x00wash\n")
    path = write(tmp_path, BASE + "themes:\n  - {name: t, prompt: __styles__}\nwildcards:\n  styles: styles.txt\n")
    assert any(e.startswith(f"{tmp_path / 'styles.txt'}:2:") and "U+0000" in e for e in errors(path))


def test_a_single_file_model_path_says_the_frame_imports_it_and_how_to_do_it_now(tmp_path):
    (tmp_path / "mine.safetensors").write_bytes(b"x")
    path = write(tmp_path, BASE + "model: {path: mine.safetensors}\n")
    problems = [p for p in check_config(path) if "model.path" in str(p)]
    assert [p.severity for p in problems] == ["warning"]
    assert f"the frame imports it into {tmp_path / 'mine'} before its first picture" in str(problems[0])
    assert f"slowframe models import {tmp_path / 'mine.safetensors'} {tmp_path / 'mine'}" in str(problems[0])
    assert load_config(path).model.path == tmp_path / "mine.safetensors"
    (tmp_path / "mine").mkdir()                       # imported: nothing to say
    assert not [p for p in check_config(path) if "model.path" in str(p)]


def test_a_model_path_naming_another_kind_of_file_is_an_error(tmp_path):
    (tmp_path / "mine.ckpt").write_bytes(b"x")
    path = write(tmp_path, BASE + "model: {path: mine.ckpt}\n")
    assert errors(path) == [f"{path}:2:15: error: model.path: {tmp_path / 'mine.ckpt'} is neither a model folder nor "
                            "a single-file .safetensors model; name one of those (`slowframe models import` "
                            "explains which files it reads)"]
