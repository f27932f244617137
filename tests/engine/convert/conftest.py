"""Fixtures of the model-import tests: an imported tiny SDXL model."""

from __future__ import annotations

import pytest

from engine.convert.importer import import_model


@pytest.fixture(scope="module")
def imported(tiny_single_file, tmp_path_factory):
    """The tiny SDXL single-file model imported (fp16); copy it before changing it."""
    dest = tmp_path_factory.mktemp("imported") / "tiny-sdxl"
    import_model(tiny_single_file.sgm, dest, log=lambda *_: None)
    return dest
