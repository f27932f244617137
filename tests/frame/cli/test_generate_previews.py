"""`slowframe generate --preview-every / --decode-every`: pictures of the sampler's estimate as it goes."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from engine.sdxl.preview import linear_preview
from frame.cli import main
from frame.cli.generate import StepPictures, step_pictures


@dataclass
class Report:
    step: int
    steps: int
    denoised: np.ndarray | None


def estimate(step: int) -> np.ndarray:
    return np.full((1, 4, 3, 5), step / 10, np.float32)


def test_previews_every_n_steps_but_the_last_once_per_step(tmp_path):
    write = StepPictures(2, tmp_path / "p", "step", linear_preview)
    for step in range(1, 7):
        for _evaluation in range(2):          # split CFG reports each step twice
            write(Report(step, 6, estimate(step)))
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == ["step-002.png", "step-004.png"]
    written = np.asarray(Image.open(tmp_path / "p" / "step-004.png"))
    assert np.array_equal(written, np.asarray(linear_preview(estimate(4))))


def test_a_report_without_an_estimate_writes_nothing(tmp_path):
    write = StepPictures(1, tmp_path / "p", "step", linear_preview)
    write(Report(1, 4, None))                 # right after a resume
    assert not (tmp_path / "p").exists()


def test_the_flags_choose_the_writers_and_the_vae_decodes_for_decode_every(tmp_path):
    decoded = []
    pipe = SimpleNamespace(decode=lambda z, tiled: decoded.append((z, tiled)) or Image.new("RGB", (8, 8)))
    args = SimpleNamespace(preview_dir=str(tmp_path / "d"), preview_every=3, preview_decoder="linear",
                           models_path=str(tmp_path), decode_every=2, not_tiled=False)
    preview, vae = step_pictures(args, pipe)
    for step in range(1, 5):
        report = Report(step, 5, estimate(step))
        preview(report)
        vae(report)
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["decoded-002.png", "decoded-004.png",
                                                                  "step-003.png"]
    assert [int(z[0, 0, 0, 0] * 10 + 0.5) for z, _ in decoded] == [2, 4]
    assert all(tiled for _, tiled in decoded)


@pytest.mark.parametrize("flag", ["--preview-every", "--decode-every"])
def test_a_step_count_below_one_is_refused_before_anything_loads(tmp_path, capsys, flag):
    assert main(["generate", "--models-path", str(tmp_path / "nowhere"), "--prompt", "a boat", flag, "0"]) == 1
    err = capsys.readouterr().err
    assert f"{flag} must be 1 or more" in err and "Traceback" not in err
