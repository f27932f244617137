"""The history folder as a power cut or a hand edit may leave it: entries that can be read, never a crash."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from frame.history import History, parameters_text
from frame.pictures import PictureError, open_picture


def add(history: History, prompt: str = "a calm sea", stamp: str = "20250301-070000"):
    return history.add(Image.new("RGB", (16, 12), "blue"), {"theme": "sea", "prompt": prompt, "seed": 1,
                                                             "steps": 4, "negative_prompt": "blurry"}, stamp)


def test_a_prompt_with_a_lone_surrogate_or_line_breaks_is_stored_as_one_readable_line(tmp_path):
    history = History(tmp_path, keep=10, max_mb=100)
    entry = add(history, "mountains \ud800 above a lake\nSteps: 99, Sampler: fake")
    text = Image.open(entry.image).text["parameters"]
    assert text.splitlines()[0] == "mountains \ufffd above a lake Steps: 99, Sampler: fake"
    assert text.splitlines()[1] == "Negative prompt: blurry"
    assert len(text.splitlines()) == 3
    assert history.entries()[0].prompt == "mountains \ud800 above a lake\nSteps: 99, Sampler: fake"


def test_the_parameters_text_never_has_extra_lines():
    text = parameters_text({"prompt": "a\r\nb\x00c", "negative_prompt": "x\ny", "steps": 3})
    assert text.splitlines() == ["a  b c", "Negative prompt: x y", "Steps: 3"]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sidecar=st.binary(max_size=200) | st.recursive(
           st.none() | st.integers() | st.text(max_size=10), lambda v: st.lists(v, max_size=3)
           | st.dictionaries(st.text(max_size=5), v, max_size=3), max_leaves=10).map(lambda v: json.dumps(v).encode()),
       cut=st.integers(min_value=0, max_value=400))
def test_damaged_sidecars_and_pictures_are_skipped_or_refused(tmp_path, sidecar, cut):
    folder = Path(tempfile.mkdtemp(dir=tmp_path))   # hypothesis runs every example in the same tmp_path
    history = History(folder, keep=10, max_mb=100)
    good = add(history)
    (folder / "20250302-070000-bad.json").write_bytes(sidecar)
    (folder / "20250302-070000-bad.png").write_bytes(good.image.read_bytes()[:cut])
    entries = history.entries()
    assert good.id in [e.id for e in entries]
    for entry in entries:
        assert isinstance(entry.record, dict)
        assert isinstance(entry.prompt, str) and isinstance(entry.theme, str)
        try:
            open_picture(entry.image)
        except PictureError:
            pass
    history.prune()


def test_a_deeply_nested_sidecar_is_skipped(tmp_path):
    history = History(tmp_path, keep=10, max_mb=100)
    add(history)
    (tmp_path / "20250302-070000-x.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "20250302-070000-x.png").write_bytes(b"")
    assert len(history.entries()) == 1
