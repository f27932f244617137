"""Several pictures per pass: a batch of N gives the pictures N single runs give, reads each
UNet weight as often as one picture does, resumes after a stop, and stays within the budget."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from conftest import pcc
from engine.errors import Cancelled, InputError
from engine.sdxl import Pipeline
from engine.weights import TensorStore

REPO = Path(__file__).resolve().parents[3]
WIDTH, HEIGHT = 96, 64
PROMPT, NEGATIVE = "a lighthouse at dusk, oil painting", "blurry"


@pytest.fixture(scope="module")
def tiny_sdxl(tmp_path_factory):
    from tiny_models import make_sdxl

    root = tmp_path_factory.mktemp("tiny-sdxl-batch")
    make_sdxl(root)
    return root


@pytest.mark.parametrize("preset,kw", [
    ("default", dict(sampler="euler_a", steps=3, guidance=6.0)),          # CFG as one batch of 2N
    ("rpi-lowmem", dict(sampler="dpmpp_2m_sde", schedule="karras", steps=3, guidance=5.0)),   # split CFG
    ("default", dict(recipe="turbo", steps=2)),                            # no CFG
])
def test_a_batch_gives_the_pictures_of_single_runs_with_the_next_seeds(tiny_sdxl, tmp_path, preset, kw):
    pipe = Pipeline.load(tiny_sdxl, preset=preset)
    batch = pipe.generate_batch(PROMPT, negative_prompt=NEGATIVE, seed=40, width=WIDTH, height=HEIGHT, num=3, **kw)
    singles = [pipe.generate(PROMPT, NEGATIVE, seed=40 + i, width=WIDTH, height=HEIGHT, **kw) for i in range(3)]
    assert [r.metadata["seed"] for r in batch] == [40, 41, 42]
    for i, (got, want) in enumerate(zip(batch, singles)):
        # Not the same bytes: the UNet's kernels are not batch-independent (a picture evaluated
        # in a batch differs from it evaluated alone by float32 rounding, ~1e-6 relative: the
        # matrix products split and sum their rows differently for another row count).
        # rpi-lowmem's uint8 skips turn such a difference into a step of their 256 levels now and then
        assert pcc(got.latents, want.latents) >= 0.99999, i
        assert np.abs(got.latents - want.latents).max() <= 1e-3 * np.abs(want.latents).max(), i
        pixels = np.abs(np.asarray(got.image, np.int16) - np.asarray(want.image, np.int16))
        assert pixels.max() <= 1, i
        assert got.metadata == want.metadata, i
    assert pcc(batch[0].latents, batch[1].latents) < 0.99


def counted_reads(monkeypatch) -> Counter:
    """Every weight read from a model file, by tensor name (whole or in bands of rows)."""
    reads: Counter = Counter()
    read, read_rows = TensorStore.read, TensorStore.read_rows

    def counting_read(self, name):
        reads[name] += 1
        return read(self, name)

    def counting_read_rows(self, name, r0, r1, out=None):
        reads[name, r0] += 1
        return read_rows(self, name, r0, r1, out)

    monkeypatch.setattr(TensorStore, "read", counting_read)
    monkeypatch.setattr(TensorStore, "read_rows", counting_read_rows)
    return reads


@pytest.mark.parametrize("preset", ["default", "rpi-lowmem"])
def test_a_batch_reads_each_weight_as_often_as_one_picture(tiny_sdxl, monkeypatch, preset):
    kw = dict(seed=5, width=WIDTH, height=HEIGHT, steps=2, guidance=5.0)
    pipe = Pipeline.load(tiny_sdxl, preset=preset, weights="nocache")
    reads = counted_reads(monkeypatch)
    pipe.generate(PROMPT, NEGATIVE, **kw)
    one = Counter(reads)
    reads.clear()
    pipe.generate_batch(PROMPT, negative_prompt=NEGATIVE, num=3, **kw)
    three = Counter(reads)
    decoder = {k for k in three if str(k[0] if isinstance(k, tuple) else k).startswith(("decoder.", "post_quant"))}
    assert decoder and all(three[k] == 3 * one[k] for k in decoder)    # the pictures are decoded one by one
    assert {k: n for k, n in three.items() if k not in decoder} == {k: n for k, n in one.items() if k not in decoder}
    unet = {k: n for k, n in one.items() if k not in decoder and "_blocks." in str(k)}
    evaluations = 2 * (1 if preset == "default" else 2)     # steps x (batched CFG: 1 call, split: 2)
    # every UNet weight once an evaluation, but cross-attention's K and V projections: those are
    # read when a conditioning's K/V is computed, and then kept (engine/options.py, cross_kv_cache)
    kv = {k for k in unet if ".attn2.to_k." in str(k) or ".attn2.to_v." in str(k)}
    assert kv and {unet[k] for k in unet if k not in kv} == {evaluations}
    assert max(unet[k] for k in kv) < evaluations


def test_a_stopped_batch_resumes_to_the_same_pictures(tiny_sdxl, tmp_path):
    kw = dict(seed=8, width=WIDTH, height=HEIGHT, sampler="dpmpp_2m_sde", schedule="karras", steps=3, num=2)
    pipe = Pipeline.load(tiny_sdxl, preset="rpi-lowmem")
    whole = pipe.generate_batch(PROMPT, negative_prompt=NEGATIVE, **kw)
    calls = []
    with pytest.raises(Cancelled):
        pipe.generate_batch(PROMPT, negative_prompt=NEGATIVE, checkpoint_dir=tmp_path / "ckpt",
                            on_progress=lambda p: calls.append(p) or len(calls) < 3, **kw)
    resumed = pipe.generate_batch(PROMPT, negative_prompt=NEGATIVE, checkpoint_dir=tmp_path / "ckpt", **kw)
    assert resumed[0].resumed_from == 1
    for got, want in zip(resumed, whole):
        assert np.array_equal(got.latents, want.latents)
    with pytest.raises(InputError, match="pictures: 2 there, 3 now"):
        pipe.generate_batch(PROMPT, negative_prompt=NEGATIVE, checkpoint_dir=tmp_path / "ckpt", **{**kw, "num": 3})


@pytest.mark.parametrize("kwargs,message", [
    (dict(num=0), "the number of pictures must be a whole number from 1, got 0"),
    (dict(num=2, init_noise=np.zeros((1, 4, 8, 12), np.float32)), "init noise is one picture's"),
    (dict(num=4, width=512, height=512), "4 pictures of 512x512 at once do not fit the preset's 250 MB budget; "
                                          "at most 3 at that size"),
    (dict(num=3, width=768, height=768), "at most 2 at that size"),
    (dict(num=2, width=1024, height=1024), "at most 1 at that size"),
    (dict(num=2, seed=2 ** 64 - 1), "seeds 18446744073709551615 to 18446744073709551616 go past"),
])
def test_batches_beyond_the_budget_or_bad_are_refused(tiny_sdxl, kwargs, message):
    pipe = Pipeline.load(tiny_sdxl, preset="rpi-lowmem")
    with pytest.raises(InputError, match=message):
        pipe.generate_batch(PROMPT, **{**dict(width=WIDTH, height=HEIGHT, steps=1), **kwargs})


def test_the_command_line_writes_one_file_a_picture(tiny_sdxl, tmp_path):
    cmd = [sys.executable, "-m", "frame.cli", "generate", "--models-path", str(tiny_sdxl), "--prompt", PROMPT,
           "--res", f"{WIDTH}x{HEIGHT}", "--seed", "11", "--steps", "2", "--num", "2",
           "--output", str(tmp_path / "out.png")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert "seed 11" in done.stderr and "seed 12" in done.stderr
    from PIL import Image
    single = Pipeline.load(tiny_sdxl).generate(PROMPT, seed=12, width=WIDTH, height=HEIGHT, steps=2)
    second = Image.open(tmp_path / "out-2.png")
    assert second.text["parameters"] == single.parameters
    assert np.abs(np.asarray(second, np.int16) - np.asarray(single.image, np.int16)).max() <= 1
    assert (tmp_path / "out-1.png").exists() and not (tmp_path / "out.png").exists()
