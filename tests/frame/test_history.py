"""The history folder: records, PNG metadata, limits, crash leftovers."""

from __future__ import annotations

import json

from PIL import Image

from frame.history import History, parameters_text

RECORD = {"theme": "sea", "prompt": "a calm sea", "negative_prompt": "text", "seed": 42, "steps": 20,
          "sampler": "euler", "guidance": 7.0, "width": 64, "height": 48, "model": "/models/sdxl", "preset": "rpi-lowmem"}


def picture(value: int = 100, size=(64, 48)) -> Image.Image:
    return Image.effect_noise(size, value).convert("RGB")


def test_pictures_carry_their_settings_in_the_png_and_beside_it(tmp_path):
    history = History(tmp_path, keep=10, max_mb=100)
    entry = history.add(picture(), RECORD, "20250301-070000")
    assert entry.id == "20250301-070000-sea"
    assert json.loads(entry.sidecar.read_text()) == RECORD
    png = Image.open(entry.image)
    assert png.text["parameters"] == ("a calm sea\nNegative prompt: text\nSteps: 20, Sampler: euler, CFG scale: 7.0, "
                                      "Seed: 42, Size: 64x48, Model: /models/sdxl, Preset: rpi-lowmem")
    assert json.loads(png.text["slowframe"]) == RECORD
    assert parameters_text({"prompt": "p"}) == "p\n"


def test_entries_are_oldest_first_and_names_never_collide(tmp_path):
    history = History(tmp_path, keep=10, max_mb=100)
    history.add(picture(), {**RECORD, "prompt": "b"}, "20250301-080000")
    history.add(picture(), {**RECORD, "prompt": "a"}, "20250301-070000")
    history.add(picture(), {**RECORD, "prompt": "c"}, "20250301-080000")
    assert [e.prompt for e in history.entries()] == ["a", "b", "c"]
    assert history.recent_prompts(2) == ["b", "c"] and history.recent_prompts(0) == []


def test_keep_limits_the_number_of_pictures(tmp_path):
    history = History(tmp_path, keep=3, max_mb=100)
    for i in range(5):
        history.add(picture(), {**RECORD, "prompt": str(i)}, f"20250301-0{i}0000")
    assert [e.prompt for e in history.entries()] == ["2", "3", "4"]
    assert len(list(tmp_path.glob("*.png"))) == 3


def test_max_mb_limits_the_size_but_never_removes_the_newest(tmp_path):
    history = History(tmp_path, keep=100, max_mb=0.5)
    for i in range(4):
        history.add(picture(size=(300, 300)), {**RECORD, "prompt": str(i)}, f"20250301-0{i}0000")
    sizes = [e.size_bytes() for e in history.entries()]
    assert sum(sizes) <= 0.5e6 and history.entries()[-1].prompt == "3"
    tiny = History(tmp_path / "tiny", keep=100, max_mb=0.01)
    tiny.add(picture(size=(300, 300)), RECORD, "20250301-070000")
    assert len(tiny.entries()) == 1   # bigger than the limit on its own, but the newest stays


def test_leftovers_of_a_power_cut_are_cleaned_up(tmp_path):
    history = History(tmp_path, keep=10, max_mb=100)
    history.add(picture(), RECORD, "20250301-070000")
    (tmp_path / ".20250301-080000-sea.png.tmp").write_bytes(b"half")
    picture().save(tmp_path / "20250301-090000-sea.png")     # its JSON never made it
    again = History(tmp_path, keep=10, max_mb=100)
    assert [e.id for e in again.entries()] == ["20250301-070000-sea"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["20250301-070000-sea.json", "20250301-070000-sea.png"]


def test_pictures_deleted_by_hand_disappear_from_the_list(tmp_path):
    history = History(tmp_path, keep=10, max_mb=100)
    entry = history.add(picture(), RECORD, "20250301-070000")
    history.add(picture(), RECORD, "20250301-080000")
    assert len(history.entries()) == 2
    entry.sidecar.unlink()
    assert [e.id for e in history.entries()] == ["20250301-080000-sea"]


def test_a_picture_from_the_pipeline_carries_the_pipelines_own_parameters_text(tmp_path):
    from engine.sdxl.pipeline import parameters_text as pipeline_text

    made = {"prompt": "a calm sea", "negative_prompt": "text", "steps": 20, "sampler": "euler_a", "guidance": 7.0,
            "seed": 42, "width": 64, "height": 48, "model_name": "sdxl", "model": "0123456789abcdef",
            "turbo": False, "engine_version": "0.1.0"}
    record = {**RECORD, "sampler": "euler_a", "pipeline": {**made, "parameters": pipeline_text(made)}}
    png = Image.open(History(tmp_path, keep=10, max_mb=100).add(picture(), record, "20250301-070000").image)
    assert png.text["parameters"] == pipeline_text(made)
    assert "Sampler: Euler a," in png.text["parameters"], "the label `slowframe generate` writes, not 'euler_a'"
