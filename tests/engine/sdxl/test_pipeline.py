"""The generation pipeline end to end: against diffusers' StableDiffusionXLPipeline on a
tiny random SDXL model, and killed and resumed without changing a byte."""

from __future__ import annotations

import json
import logging
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from diffusers import DPMSolverMultistepScheduler, EulerAncestralDiscreteScheduler, EulerDiscreteScheduler
from diffusers.schedulers import scheduling_euler_ancestral_discrete
from PIL import Image

from conftest import pcc
from engine.checkpoint import CheckpointDir
from engine.errors import Cancelled, InputError, ModelFileError
from engine.sdxl import Pipeline
from engine.sdxl.samplers import draw_noise

REPO = Path(__file__).resolve().parents[3]
WIDTH, HEIGHT = 128, 64          # latents 16 x 8: non-square
PROMPT, NEGATIVE = "a lighthouse at dusk, oil painting", "blurry"   # no emphasis: diffusers reads it literally


@pytest.fixture(scope="module")
def tiny_sdxl(tmp_path_factory):
    from tiny_models import make_sdxl

    root = tmp_path_factory.mktemp("tiny-sdxl")
    return root, make_sdxl(root)


def reference_scheduler(ref, sampler: str, recipe: str | None):
    config = ref.scheduler.config
    if sampler == "euler":
        return EulerDiscreteScheduler.from_config(config)
    if recipe == "turbo" or sampler == "euler_a":
        return EulerAncestralDiscreteScheduler.from_config(config, timestep_spacing="trailing" if recipe else "leading")
    return DPMSolverMultistepScheduler.from_config(config, use_karras_sigmas=True, algorithm_type="dpmsolver++",
                                                   solver_order=2)


def psnr(a: Image.Image, b: Image.Image) -> float:
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    mse = np.mean((x - y) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


@pytest.mark.parametrize("sampler,recipe,guidance", [
    ("euler", None, 5.0), ("euler_a", None, 7.0), ("dpmpp_2m_karras", None, 5.0), (None, "turbo", 0.0)])
def test_final_latents_and_picture_match_diffusers(tiny_sdxl, sampler, recipe, guidance, monkeypatch):
    root, ref = tiny_sdxl
    seed = 1234
    noise = np.random.default_rng(5).standard_normal((1, 4, HEIGHT // 8, WIDTH // 8), dtype=np.float32)

    # diffusers, with our initial noise and (ancestral) our per-step noise: the seed's
    # stream after the injected initial noise, which the pipeline does not draw.
    ref_rng = np.random.Generator(np.random.PCG64(seed))
    monkeypatch.setattr(scheduling_euler_ancestral_discrete, "randn_tensor",
                        lambda shape, **kw: torch.from_numpy(draw_noise(ref_rng, tuple(shape))))
    ref.scheduler = reference_scheduler(ref, sampler, recipe)
    with torch.no_grad():
        ref_latents = ref(prompt=PROMPT, negative_prompt=NEGATIVE, num_inference_steps=4, guidance_scale=guidance,
                          width=WIDTH, height=HEIGHT, latents=torch.from_numpy(noise), output_type="latent").images
        decoded = ref.vae.decode(ref_latents / ref.vae.config.scaling_factor).sample
    ref_image = ref.image_processor.postprocess(decoded, output_type="pil")[0]

    pipe = Pipeline.load(root)
    result = pipe.generate(PROMPT, NEGATIVE, steps=4, guidance=guidance, seed=seed, width=WIDTH, height=HEIGHT,
                           sampler=sampler, recipe=recipe, init_noise=noise)

    assert result.latents.shape == (1, 4, HEIGHT // 8, WIDTH // 8)
    assert pcc(result.latents, ref_latents.numpy()) >= 0.999
    assert result.image.size == (WIDTH, HEIGHT)
    assert psnr(result.image, ref_image) >= 40.0


@pytest.mark.parametrize("kv_entries", [2, 1])
def test_split_cfg_gives_the_batched_result(tiny_sdxl, kv_entries):
    root, _ = tiny_sdxl
    kw = dict(steps=3, guidance=6.0, seed=9, width=WIDTH, height=HEIGHT, sampler="euler_a")
    batched = Pipeline.load(root).generate(PROMPT, NEGATIVE, **kw)
    split = Pipeline.load(root, cfg_batch=False, kv_cache_entries=kv_entries).generate(PROMPT, NEGATIVE, **kw)
    assert pcc(batched.latents, split.latents) >= 0.99999


def test_the_png_documents_its_settings(tiny_sdxl, tmp_path):
    root, _ = tiny_sdxl
    result = Pipeline.load(root).generate(PROMPT, NEGATIVE, steps=2, seed=77, width=WIDTH, height=HEIGHT)
    path = result.save(tmp_path / "pic.png")
    text = Image.open(path).text["parameters"]
    assert text.startswith(PROMPT + "\nNegative prompt: blurry\n")
    assert "Steps: 2, Sampler: Euler, CFG scale: 5.0, Seed: 77, Size: 128x64" in text
    assert json.loads(Image.open(path).text["slowframe"])["seed"] == 77

    result = Pipeline.load(root).generate(PROMPT, steps=2, seed=77, width=WIDTH, height=HEIGHT,
                                          sampler="dpmpp_2m_karras")
    assert "Steps: 2, Sampler: DPM++ 2M, Schedule type: Karras, CFG scale: 5.0" in result.parameters
    assert (result.metadata["sampler"], result.metadata["schedule"]) == ("dpmpp_2m", "karras")
    result = Pipeline.load(root).generate(PROMPT, seed=77, width=WIDTH, height=HEIGHT, sampler="tcd",
                                          timesteps="999,499", gamma=0.5, guidance=0.0)
    assert ('Steps: 2, Sampler: TCD, Schedule type: Explicit, Timesteps: "999,499", Gamma: 0.5, CFG scale: 0.0'
            in result.parameters)


# -- checkpoints and resume ----------------------------------------------------------


def cli(root: Path, workdir: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "frame.cli", "generate", "--models-path", str(root), "--prompt", PROMPT,
            "--neg-prompt", NEGATIVE, "--res", f"{WIDTH}x{HEIGHT}", "--seed", "4242", "--steps", "16",
            "--checkpoint-dir", str(workdir / "ckpt"), "--output", str(workdir / "out.png"),
            "--save-latents", str(workdir / "latents.npy"), "--json", *extra]


def run_to_completion(cmd: list[str]) -> list[dict]:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def kill_during_run(cmd: list[str], after_events: int, extra_delay: float) -> None:
    """Start the run, wait for `after_events` progress lines plus a little, then SIGKILL it."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO)
    seen = 0
    while seen < after_events:
        line = proc.stdout.readline()
        if not line:
            break
        seen += json.loads(line)["event"] == "progress"
    time.sleep(extra_delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    proc.stdout.close()
    assert seen == after_events, "the run ended before it could be killed"


@pytest.mark.parametrize("sampler,preset", [
    ("euler", "default"), ("euler_a", "default"), ("dpmpp_2m_karras", "default"), ("euler_a", "rpi-lowmem")])
def test_killed_and_resumed_runs_give_byte_identical_latents_and_png(tiny_sdxl, tmp_path, sampler, preset):
    root, _ = tiny_sdxl
    extra = ("--sampler", sampler, "--preset", preset)
    whole = tmp_path / "whole"
    run_to_completion(cli(root, whole, *extra))

    broken = tmp_path / "broken"
    rng = np.random.default_rng(abs(hash((sampler, preset))) % 2 ** 32)
    kills = 0
    for after in (0, 4, 9):
        kill_during_run(cli(root, broken, *extra), after, float(rng.uniform(0.0, 0.08)))
    events = run_to_completion(cli(root, broken, *extra))
    assert events[-1]["event"] == "done" and events[-1]["resumed_from"] >= 4   # 9 evaluations: 4 steps or more

    assert (broken / "latents.npy").read_bytes() == (whole / "latents.npy").read_bytes()
    assert (broken / "out.png").read_bytes() == (whole / "out.png").read_bytes()


# Every multistep and every stochastic sampler, killed at random moments (within a step of two
# evaluations and within a split-CFG evaluation too, with rpi-lowmem), resumes to the same PNG.
RESUMED_SAMPLERS = [("dpmpp_2m", "karras", "default"), ("dpmpp_2m_sde", "exponential", "rpi-lowmem"),
                    ("dpmpp_3m_sde", "karras", "default"), ("dpmpp_2s_a", "default", "rpi-lowmem"),
                    ("dpm2_a", "karras", "default"), ("heun", "normal", "rpi-lowmem"), ("lms", "karras", "default"),
                    ("ipndm", "simple", "default"), ("unipc", "sgm_uniform", "rpi-lowmem"),
                    ("ddpm", "default", "default"), ("lcm", "default", "rpi-lowmem"), ("tcd", "trailing", "default"),
                    ("ddim", "default", "rpi-lowmem")]


@pytest.mark.parametrize("sampler,schedule,preset", RESUMED_SAMPLERS, ids=lambda v: str(v))
def test_every_multistep_and_stochastic_sampler_resumes_to_the_same_png(tiny_sdxl, tmp_path, sampler, schedule,
                                                                      preset):
    root, _ = tiny_sdxl
    extra = ["--sampler", sampler, "--schedule", schedule, "--preset", preset, "--steps", "8"]
    if sampler == "ddim":
        extra += ["--eta", "0.7"]
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    run_to_completion(cli(root, whole, *extra))
    rng = np.random.default_rng(abs(hash((sampler, schedule, preset))) % 2 ** 32)
    for after in rng.integers(1, 3, size=2):   # each run makes 1-2 reports (and a little more) before its kill
        kill_during_run(cli(root, broken, *extra), int(after), float(rng.uniform(0.0, 0.05)))
    events = run_to_completion(cli(root, broken, *extra))
    assert events[-1]["event"] == "done" and events[-1]["resumed_from"] is not None
    assert (broken / "latents.npy").read_bytes() == (whole / "latents.npy").read_bytes()
    assert (broken / "out.png").read_bytes() == (whole / "out.png").read_bytes()


def generate_in(root: Path, ckpt: Path, **kw):
    args = dict(steps=4, seed=21, width=WIDTH, height=HEIGHT, sampler="dpmpp_2m_karras", checkpoint_dir=ckpt)
    return Pipeline.load(root).generate(PROMPT, NEGATIVE, **{**args, **kw})


def stop_after(evaluations: int):
    def on_progress(p):
        return p.evaluation < evaluations
    return on_progress


def test_a_corrupt_newest_checkpoint_resumes_from_the_one_before(tiny_sdxl, tmp_path, caplog):
    root, _ = tiny_sdxl
    caplog.set_level(logging.INFO, logger="engine.sdxl.pipeline")
    whole = generate_in(root, tmp_path / "a")
    with pytest.raises(Cancelled):
        generate_in(root, tmp_path / "b", on_progress=stop_after(3))
    newest = sorted((tmp_path / "b").glob("step-*.ckpt"))[-1]
    newest.write_bytes(newest.read_bytes()[:-100])
    resumed = generate_in(root, tmp_path / "b")
    assert resumed.resumed_from == 2
    assert "unusable" in caplog.text and "resumed from step 2" in caplog.text
    np.testing.assert_array_equal(resumed.latents, whole.latents)


def test_a_checkpoint_of_another_sampler_setting_is_refused(tiny_sdxl, tmp_path):
    root, _ = tiny_sdxl
    with pytest.raises(Cancelled):
        generate_in(root, tmp_path, sampler="dpmpp_2m_sde", schedule="karras", eta=0.5, on_progress=stop_after(1))
    for change, says in [(dict(eta=0.6), "eta: 0.5 there, 0.6 now"), (dict(schedule="exponential"),
                         "schedule: 'karras' there, 'exponential' now"), (dict(sampler="dpmpp_3m_sde"),
                         "sampler: 'dpmpp_2m_sde' there, 'dpmpp_3m_sde' now")]:
        kw = {**dict(sampler="dpmpp_2m_sde", schedule="karras", eta=0.5), **change}
        with pytest.raises(InputError, match=says):
            generate_in(root, tmp_path, **kw)
    resumed = generate_in(root, tmp_path, sampler="DPM++ 2M SDE", schedule="Karras", eta=0.5)
    assert resumed.resumed_from == 1, "the same setting, however it is spelled, resumes"


def test_progress_carries_the_estimate_of_the_picture_after_each_step(tiny_sdxl, tmp_path):
    root, _ = tiny_sdxl
    seen = []
    result = generate_in(root, tmp_path, sampler="heun", steps=3, on_progress=seen.append, checkpoint_dir=None)
    assert [(p.step, p.evaluation, p.evaluations, p.denoised is not None) for p in seen] == [
        (0, 1, 5, False), (1, 2, 5, True), (1, 3, 5, False), (2, 4, 5, True), (3, 5, 5, True)]
    assert all(p.denoised.shape == result.latents.shape and p.denoised.dtype == np.float32
               for p in seen if p.denoised is not None)
    np.testing.assert_array_equal(seen[-1].denoised, result.latents)
    assert seen[-1].seconds_per_step is not None and seen[-1].eta_seconds == 0


def test_a_different_job_in_the_same_folder_is_refused_until_restart(tiny_sdxl, tmp_path):
    root, _ = tiny_sdxl
    with pytest.raises(Cancelled):
        generate_in(root, tmp_path, on_progress=stop_after(1))
    with pytest.raises(InputError) as err:
        generate_in(root, tmp_path, seed=22, steps=5)
    message = str(err.value)
    assert "different job" in message and "seed: 21 there, 22 now" in message and "steps: 4 there, 5 now" in message
    assert "restart=True" in message and "--restart" not in message, "the Python API's own words"
    fresh = generate_in(root, tmp_path, seed=22, steps=5, restart=True)
    assert fresh.resumed_from is None


def test_without_a_seed_a_resume_takes_the_checkpointed_one(tiny_sdxl, tmp_path):
    root, _ = tiny_sdxl
    with pytest.raises(Cancelled):
        generate_in(root, tmp_path, seed=None, on_progress=stop_after(2))
    first_seed = CheckpointDir(tmp_path).latest().meta["job"]["seed"]
    resumed = generate_in(root, tmp_path, seed=None)
    assert resumed.resumed_from == 2
    assert resumed.metadata["seed"] == first_seed


def test_cancel_stops_within_one_evaluation_and_keeps_the_last_checkpoint(tiny_sdxl, tmp_path):
    root, _ = tiny_sdxl
    cancel = threading.Event()
    seen = []

    def on_progress(p):
        seen.append(p.evaluation)
        if p.evaluation == 2:
            threading.Timer(0.01, cancel.set).start()

    with pytest.raises(Cancelled):
        generate_in(root, tmp_path, on_progress=on_progress, cancel=cancel, steps=30)
    assert seen[-1] in (2, 3), "the run stops during, or right after, the evaluation in progress"
    assert CheckpointDir(tmp_path).latest().meta["step"] == seen[-1]


def test_a_set_cancel_event_stops_a_model_at_its_next_op(tiny_sdxl):
    from engine.sdxl import UNet

    root, _ = tiny_sdxl
    with UNet.load(root / "unet") as unet:
        x = np.zeros((1, 4, 8, 8), np.float32)
        args = (x, 10.0, np.zeros((1, 77, 96), np.float32), np.zeros((1, 64), np.float32), np.zeros((1, 6), np.float32))
        unet.cancel = threading.Event()
        unet.cancel.set()
        with pytest.raises(Cancelled):
            unet(*args)
        unet.cancel.clear()
        assert np.isfinite(unet(*args)).all(), "the model is usable again after a cancelled evaluation"


def test_sigterm_checkpoints_and_exits_promptly(tiny_sdxl, tmp_path):
    root, _ = tiny_sdxl
    proc = subprocess.Popen(cli(root, tmp_path, "--steps", "200"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO)
    while json.loads(proc.stdout.readline())["event"] != "progress":
        pass
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - sent < 10
    assert proc.returncode == 143
    assert "run the same command to resume" in err
    assert list((tmp_path / "ckpt").glob("step-*.ckpt"))


@pytest.mark.parametrize("kwargs,message", [
    (dict(width=100), "not a multiple of 8"),
    (dict(height=32), "from 64 to 4096"),
    (dict(width=0), "width must be a whole number of pixels from 64 to 4096, got 0"),   # 0 is not "the default"
    (dict(sampler="dpmpp_2z"), "unknown sampler 'dpmpp_2z'; choose one of: dpmpp_2m, "),
    (dict(sampler="euler", schedule="karas"), "unknown schedule 'karas'; choose one of: karras, "),
    (dict(sampler="lcm", timesteps=[999, 1000]), "timestep 1000 is outside"),
    (dict(sampler="lcm", timesteps="999,499,749"), "must go down"),
    (dict(sampler="euler", eta=0.5), "sampler euler takes no eta"),
    (dict(sampler="lcm", steps=60), "at most 50 steps"),
    (dict(steps=0), "steps must be"),
    (dict(seed=-1), "seed must be"),
    (dict(guidance=float("nan")), "guidance must be"),
    (dict(init_noise=np.zeros((1, 4, 4, 4), np.float32)), "init noise must be"),
])
def test_bad_requests_are_refused_with_what_is_allowed(tiny_sdxl, kwargs, message):
    root, _ = tiny_sdxl
    args = dict(steps=2, width=WIDTH, height=HEIGHT)
    with pytest.raises(InputError, match=message):
        Pipeline.load(root).generate(PROMPT, **{**args, **kwargs})


@pytest.mark.parametrize("flags,message", [
    (["--sampler", "dpm++2z"], "unknown sampler 'dpm++2z'; choose one of: dpmpp_2m, "),
    (["--schedule", "karas"], "unknown schedule 'karas'; choose one of: karras, "),
    (["--timesteps", "999,1200"], "timestep 1200 is outside the model's training timesteps 0..999"),
    (["--sampler", "tcd", "--eta", "0.3"], "sampler tcd takes no eta (tcd's amount of noise is its gamma)"),
    (["--recipe", "lightnin-8"], "unknown recipe 'lightnin-8'; choose one of: lightning-8, "),
    (["--recipe", "dmd2"], "recipe dmd2 is for DMD2 4-step: it needs the LoRA dmd2_sdxl_4step_lora_fp16.safetensors"),
    (["--turbo", "--steps", "8"], "recipe turbo supports 1-4 steps, not 8"),
    (["--turbo", "--recipe", "sdxl"], "--turbo is --recipe turbo; give one recipe, not also --recipe sdxl"),
])
def test_the_command_line_names_bad_sampler_settings_without_a_traceback(tiny_sdxl, tmp_path, flags, message):
    root, _ = tiny_sdxl
    done = subprocess.run(cli(root, tmp_path, *flags), capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 1
    assert message in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "ckpt").exists() or not list((tmp_path / "ckpt").iterdir())


def test_a_bad_request_with_restart_keeps_the_checkpoints(tiny_sdxl, tmp_path):
    root, _ = tiny_sdxl
    with pytest.raises(Cancelled):
        generate_in(root, tmp_path, on_progress=stop_after(1))
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(InputError, match="multiple of 8"):
        generate_in(root, tmp_path, width=100, restart=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_tokenizer_folders_saved_by_current_transformers_are_used(tmp_path):
    from engine.sdxl.random_model import write_random_model
    from tokenizer_files import write_saved_tokenizer, write_tokenizer

    demo = write_random_model(tmp_path / "demo")      # no tokenizer folders: the bundled vocabulary
    latents = {}
    for kind, write in (("saved", write_saved_tokenizer), ("legacy", write_tokenizer)):
        model = tmp_path / kind
        shutil.copytree(demo, model)
        for name in ("tokenizer", "tokenizer_2"):   # tokenizer_2 padding with EOS: not the bundled vocabulary's "!"
            write(model / name, "<|endoftext|>")
        latents[kind] = Pipeline.load(model).generate("a cat!", steps=1, seed=1, width=64, height=64).latents
    bundled = Pipeline.load(demo).generate("a cat!", steps=1, seed=1, width=64, height=64).latents
    assert np.array_equal(latents["saved"], latents["legacy"])
    assert not np.array_equal(latents["saved"], bundled)


def test_an_incomplete_model_folder_names_what_is_missing(tmp_path):
    (tmp_path / "unet").mkdir()
    with pytest.raises(ModelFileError, match="missing unet/, vae/, text_encoder/, text_encoder_2/"):
        Pipeline.load(tmp_path)
    with pytest.raises(ModelFileError, match="no such model folder"):
        Pipeline.load(tmp_path / "nowhere")


def test_a_lora_applied_at_run_time_gives_the_picture_of_the_model_with_it_merged(tiny_single_file, tmp_path):
    from engine.convert.importer import import_model
    from lora_files import kohya_lora

    lora = kohya_lora(tmp_path / "style.safetensors")
    merged = tmp_path / "merged"
    import_model(tiny_single_file.sgm, merged, loras=[(lora, 0.8)], log=lambda *_: None)
    kw = dict(steps=2, seed=3, width=96, height=64, sampler="euler")
    plain = Pipeline.load(tiny_single_file.folder).generate(PROMPT, NEGATIVE, **kw)
    styled = Pipeline.load(tiny_single_file.folder, loras=[(lora, 0.8)]).generate(PROMPT, NEGATIVE, **kw)
    baked = Pipeline.load(merged).generate(PROMPT, NEGATIVE, **kw)
    assert pcc(styled.latents, baked.latents) >= 0.9999
    assert pcc(styled.latents, plain.latents) < 0.999, "the style changes the picture"
    assert styled.metadata["loras"][0][:2] == ["style.safetensors", 0.8]


def test_a_missing_lora_file_is_named_before_any_work(tiny_sdxl, tmp_path):
    root, _ = tiny_sdxl
    with pytest.raises(ModelFileError, match="nope.safetensors"):
        Pipeline.load(root, loras=[(tmp_path / "nope.safetensors", 1.0)])
