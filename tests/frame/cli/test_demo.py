"""`slowframe demo`: the whole job on the built-in model, with no download and no torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from PIL import Image

REPO = Path(__file__).resolve().parents[3]


def test_demo_generates_a_picture_and_the_panel_files(tmp_path):
    blocked = tmp_path / "blocked"          # the demo must run where torch & co are not installed
    blocked.mkdir()
    for name in ("torch", "diffusers", "transformers"):
        (blocked / f"{name}.py").write_text(f"raise ImportError('the demo imported {name}')\n")
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(blocked)}
    cmd = [sys.executable, "-m", "frame.cli", "demo", "--output", str(tmp_path / "out"), "--steps", "1",
           "--panel", "acep-7.3"]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "making the built-in tiny SDXL-architecture model" in done.stdout
    picture = Image.open(tmp_path / "out" / "picture.png")
    assert picture.size == (640, 384) and "parameters" in picture.text
    panel = Image.open(tmp_path / "out" / "panel.png")
    assert panel.mode == "P" and panel.size == (800, 480)
    assert max(panel.getdata()) < 7, "only the 7-colour panel's native inks"
    assert Image.open(tmp_path / "out" / "look.png").size == (800, 480)
    again = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=600)
    assert again.returncode == 0, again.stderr
    assert "making the built-in" not in again.stdout
    for run in (done, again):
        assert "tokenizer" not in run.stdout + run.stderr, "the built-in model is complete: nothing to note"
