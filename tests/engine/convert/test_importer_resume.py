"""An interrupted import never leaves a folder that passes for a model, resumes where it
stopped, and converts with memory independent of the model file's size."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.convert.importer import import_model
from engine.convert.manifest import MANIFEST
from engine.convert.verify import list_models, verify_model
from engine.errors import ModelFileError
from engine.sdxl import UNet

KILL_AT = """
import os, signal, sys
import engine.convert.importer as importer

importer.DURABLE_BYTES = 1 << 20     # make progress durable every MB (64 MB on a real model)

def progress(p):
    if p.file == sys.argv[3] and p.index == int(sys.argv[4]):
        os.kill(os.getpid(), signal.SIGKILL)    # no cleanup, no flush: like pulling the plug

importer.import_model(sys.argv[1], sys.argv[2], precision=sys.argv[5], log=lambda *_: None, progress=progress)
"""


def run_killed(src: Path, dest: Path, file: str, index: int, precision: str = "fp16") -> None:
    proc = subprocess.run([sys.executable, "-c", KILL_AT, str(src), str(dest), file, str(index), precision],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr


def outputs(root: Path) -> dict:
    return json.loads((root / MANIFEST).read_text())["files"]


@pytest.fixture(scope="module")
def clean_import(tiny_single_file, tmp_path_factory):
    dest = tmp_path_factory.mktemp("clean") / "tiny"
    import_model(tiny_single_file.sgm, dest, log=lambda *_: None)
    return dest


def test_killed_import_leaves_nothing_that_passes_for_a_model_and_rerun_completes(tiny_single_file, clean_import,
                                                                                 tmp_path):
    dest = tmp_path / "tiny"
    partial = tmp_path / ".tiny.partial"
    run_killed(tiny_single_file.sgm, dest, "unet/diffusion_pytorch_model.safetensors", 400)
    assert not dest.exists() and partial.is_dir()
    for folder in (dest, partial):
        with pytest.raises(ModelFileError):
            verify_model(folder, log=lambda *_: None)
    with pytest.raises(ModelFileError, match="unfinished import"):
        verify_model(partial, log=lambda *_: None)
    with pytest.raises(ModelFileError):
        UNet.load(partial / "unet")
    entry, = list_models(tmp_path)
    assert entry.name == "tiny" and "unfinished import" in entry.status

    lines: list[str] = []
    import_model(tiny_single_file.sgm, dest, log=lines.append)
    assert any("resuming" in line for line in lines), lines
    assert not partial.exists()
    assert outputs(dest) == outputs(clean_import)
    verify_model(dest, log=lambda *_: None)


def test_resume_keeps_finished_files_and_continues_a_half_written_one(tiny_single_file, clean_import, tmp_path,
                                                                     monkeypatch):
    import engine.convert.importer as importer

    dest = tmp_path / "tiny"
    partial = tmp_path / ".tiny.partial"
    run_killed(tiny_single_file.sgm, dest, "vae/diffusion_pytorch_model.safetensors", 200)
    state = json.loads((partial / importer.STATE_FILE).read_text())
    finished = [f for f, r in state["files"].items() if r["sha256"]]
    assert "unet/diffusion_pytorch_model.safetensors" in finished and "text_encoder/model.safetensors" in finished
    before = {f: (partial / f).stat().st_mtime_ns for f in finished}

    written = []
    monkeypatch.setattr(importer, "_write_tensor", _spy(importer._write_tensor, written))
    import_model(tiny_single_file.sgm, dest, log=lambda *_: None)
    assert {f: (dest / f).stat().st_mtime_ns for f in finished} == before
    assert 0 < len(written) < 244           # only the rest of the VAE's 244 tensors
    assert outputs(dest) == outputs(clean_import)


def test_changed_options_start_over(tiny_single_file, clean_import, tmp_path):
    dest = tmp_path / "tiny"
    run_killed(tiny_single_file.sgm, dest, "unet/diffusion_pytorch_model.safetensors", 300, precision="uint8")
    lines: list[str] = []
    import_model(tiny_single_file.sgm, dest, precision="fp16", log=lines.append)
    assert any("starting over" in line for line in lines), lines
    assert outputs(dest) == outputs(clean_import)


def test_weights_are_converted_in_bands_not_held_whole(tiny_single_file, tmp_path):
    """The single-file model is 90 MB as fp32; converting all of its weights (to uint8, the
    costliest path) may add only a few 1 MB bands to the process's memory, and the whole
    import stays far below the Pi's 300 MB budget."""
    script = """
import sys
from engine.trace import peak_rss_bytes, rss_bytes
import engine.convert.importer as importer
import engine.sdxl.tokenizer, engine.sdxl.unet, numpy
importer.CHUNK_ELEMENTS = 1 << 18
base = rss_bytes()
peaks = []
importer.import_model(sys.argv[1], sys.argv[2], precision="uint8", log=lambda *_: None,
                      progress=lambda p: peaks.append(peak_rss_bytes()))
print((peaks[-1] - base) / 1e6, peak_rss_bytes() / 1e6)
"""
    proc = subprocess.run([sys.executable, "-c", script, str(tiny_single_file.sgm), str(tmp_path / "m")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    grown, peak = (float(v) for v in proc.stdout.split()[-2:])
    fp32_size = 2 * os.path.getsize(tiny_single_file.sgm) / 1e6
    assert grown < 0.2 * fp32_size, f"converting {fp32_size:.0f} MB of fp32 weights grew RSS by {grown:.0f} MB"
    assert peak < 300, peak


def _spy(function, calls: list):
    def wrapper(*args, **kwargs):
        calls.append(args[2])
        return function(*args, **kwargs)
    return wrapper
