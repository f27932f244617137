"""`slowframe run` with the real pipeline on the built-in tiny model: a picture, and a SIGKILL survived."""

from __future__ import annotations

import json
import signal
import time

import numpy as np
import pytest
from PIL import Image

from daemon_processes import Daemon
from engine.sdxl import Pipeline


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from engine.sdxl.random_model import write_random_model

    return write_random_model(tmp_path_factory.mktemp("tiny") / "model")


def config(model) -> str:
    return f"""\
model: {{path: {model}, preset: default}}
display: {{backend: file, panel: spectra6-4.0, output: panel, min_interval: 0, preview: auto}}
themes:
  - {{name: boats, prompt: "a {{red|blue}} boat", steps: 3, size: 256x256, guidance: 5}}
buttons: {{enabled: false}}
"""


def test_the_daemon_makes_a_picture_and_resumes_it_after_sigkill(tmp_path, tiny_model):
    first = Daemon(tmp_path, config(tiny_model), generator="frame.worker:load_sdxl")
    try:
        first.wait_for(lambda m: "boats: step 1/3" in m, "the first step", timeout=240)
        job = json.loads((tmp_path / "state" / "job" / "job.json").read_text())["job"]
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait()
    finally:
        first.close()
    (tmp_path / "notify.sock").unlink()
    second = Daemon(tmp_path, config(tiny_model), generator="frame.worker:load_sdxl")
    try:
        deadline = time.monotonic() + 240
        while not list((tmp_path / "state" / "history").glob("*.json")) and time.monotonic() < deadline:
            time.sleep(0.5)
        [sidecar] = (tmp_path / "state" / "history").glob("*.json")
        record = json.loads(sidecar.read_text())
        assert (record["id"], record["seed"], record["prompt"]) == (job["id"], job["seed"], job["prompt"])
        assert record["pipeline"]["seed"] == job["seed"] and record["pipeline"]["steps"] == 3
        assert "resumed from step" in second.logtext()     # not started over...
        assert Image.open(tmp_path / "panel" / "panel.png").size == (600, 400)
        # ...and the same picture as a run that was never interrupted
        uninterrupted = Pipeline.load(tiny_model, preset="default").generate(
            job["prompt"], job["negative_prompt"] or None, steps=3, guidance=5.0, seed=job["seed"], width=256,
            height=256, sampler="euler").image
        assert np.array_equal(np.asarray(Image.open(sidecar.with_suffix(".png"))), np.asarray(uninterrupted))
        parameters = Image.open(sidecar.with_suffix(".png")).text["parameters"]
        assert "Steps: 3, Sampler: Euler, CFG scale: 5.0" in parameters, "the words `slowframe generate` writes"
    finally:
        second.close()


def test_images_per_pass_puts_every_picture_of_the_pass_in_the_history(tmp_path, tiny_model):
    text = config(tiny_model).replace("guidance: 5}", "guidance: 5, images_per_pass: 2}")
    daemon = Daemon(tmp_path, text, generator="frame.worker:load_sdxl")
    try:
        deadline = time.monotonic() + 400
        while len(list((tmp_path / "state" / "history").glob("*.json"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        records = [(json.loads(p.read_text()), p) for p in (tmp_path / "state" / "history").glob("*.json")]
    finally:
        daemon.close()
    records = sorted(records, key=lambda r: r[0]["seed"])
    (first, first_path), (second, second_path) = records
    assert second["seed"] == first["seed"] + 1 and second["id"] == first["id"] + "-2"
    assert first["shown"] is not None and second["shown"] is None
    assert second["pipeline"]["seed"] == second["seed"] and second["prompt"] == first["prompt"]
    pipe = Pipeline.load(tiny_model, preset="default")
    for record, path in records:   # the pictures single runs with these seeds give (to float32 rounding)
        alone = pipe.generate(record["prompt"], negative_prompt=record["negative_prompt"], steps=3, guidance=5.0,
                              seed=record["seed"], width=256, height=256, sampler="euler").image
        difference = np.abs(np.asarray(Image.open(path.with_suffix(".png")), np.int16) - np.asarray(alone, np.int16))
        assert difference.max() <= 1
