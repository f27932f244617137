"""Where the frame keeps things: a model's place on the card's models drive, as a PC shows it."""

from __future__ import annotations

from pathlib import Path

from frame.paths import DEFAULT_MODEL_PATH, MODELS_DIR, on_models_drive


def test_a_model_under_the_models_folder_has_a_place_on_the_models_drive():
    assert on_models_drive(DEFAULT_MODEL_PATH) == Path("sdxl-base-1.0")
    assert on_models_drive(MODELS_DIR / "ink" / "v2") == Path("ink/v2")


def test_a_model_elsewhere_or_the_drive_itself_has_none():
    assert on_models_drive(Path("/home/pi/models/sdxl")) is None
    assert on_models_drive(MODELS_DIR) is None
