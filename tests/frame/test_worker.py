"""The generation worker in a real child process: progress, resume, stop, failures, priority.

The generator is tests/frame_fakes.FakePipeline (the Pipeline contract: progress, a
checkpoint per step, resume, cancel), so these run in seconds without a model.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from daemon_processes import ENV
from frame import worker
from frame.jobs import Job
from engine.convert.verify import verify_model
from engine.sdxl.preview import linear_preview
from frame.worker import (ChildRunner, Failed, Finished, ImportFailed, Imported, ImportProgress, JobPreview,
                          JobProgress, PreviewRequest, StopRequest, run_job)
from frame_fakes import FakePipeline, calls, make_job, uninterrupted_state, write_fake_model


def run_worker(job: Job, folder: Path, stop_after: int | None = None, timeout: float = 30,
               preview: PreviewRequest | None = None) -> list:
    events: queue.Queue = queue.Queue()
    runner = ChildRunner(events.put, generator="frame_fakes:load_fake", env=ENV)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "checkpoints").mkdir(exist_ok=True)
    runner.start(job, folder / "checkpoints", folder / "result.png", folder / "worker.lock", preview)
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        event = events.get(timeout=timeout)
        seen.append(event)
        if isinstance(event, JobProgress) and stop_after is not None and event.step >= stop_after:
            runner.stop()
        if isinstance(event, (Finished, Failed)):
            return seen
    raise AssertionError(f"the worker did not finish: {seen}")


def test_worker_reports_progress_and_writes_the_picture(tmp_path):
    model = write_fake_model(tmp_path / "model")
    job = make_job(model)
    events = run_worker(job, tmp_path / "job")
    assert [e.step for e in events if isinstance(e, JobProgress)] == [1, 2, 3, 4, 5, 6]
    done = events[-1]
    assert isinstance(done, Finished) and done.output == tmp_path / "job" / "result.png"
    assert done.metadata == {"prompt": "a calm sea", "seed": 1234, "model": "fake"}
    assert done.output.exists() and done.seconds_per_step is not None


def test_the_pipelines_parameters_text_comes_with_the_picture(tmp_path):
    text = "a calm sea\nSteps: 6, Sampler: Euler a, CFG scale: 5.0, Seed: 1234"
    events = run_worker(make_job(write_fake_model(tmp_path / "model", parameters=text)), tmp_path / "job")
    assert events[-1].metadata == {"prompt": "a calm sea", "seed": 1234, "model": "fake", "parameters": text}


def test_the_jobs_decoder_reaches_the_generator(tmp_path):
    model = write_fake_model(tmp_path / "model")
    run_worker(make_job(model, decoder="tiny"), tmp_path / "job")
    run_worker(make_job(model), tmp_path / "job2")
    assert [c["decoder"] for c in calls(model) if c["event"] == "start"] == ["tiny", "full"]


@pytest.mark.parametrize("job,asked", [
    (dict(sampler="dpmpp_2m", schedule="karras"), dict(sampler="dpmpp_2m", schedule="karras", recipe="sdxl")),
    (dict(sampler="lcm", schedule="default"), dict(sampler="lcm", schedule="default", recipe="sdxl")),
    # the recipe's own timesteps: the pipeline is asked for the recipe, not for a schedule
    (dict(sampler="lcm", schedule="explicit", steps=4, recipe="dmd2"),
     dict(sampler="lcm", schedule=None, recipe="dmd2")),
    (dict(sampler="euler", schedule="trailing", steps=4, recipe="lightning-4"),
     dict(sampler="euler", schedule="trailing", recipe="lightning-4")),
    # a job written before recipes, with the old turbo sampler
    (dict(sampler="turbo", schedule="default"), dict(sampler=None, schedule=None, recipe="turbo"))])
def test_worker_asks_the_pipeline_for_the_job_recipe_sampler_and_schedule(tmp_path, job, asked):
    model = write_fake_model(tmp_path / "model")
    events = run_worker(make_job(model, **job), tmp_path / "job")
    assert isinstance(events[-1], Finished)
    start = next(c for c in calls(model) if c["event"] == "start")
    assert {k: start[k] for k in asked} == asked


def test_a_job_of_several_pictures_writes_each_with_the_next_seed(tmp_path):
    model = write_fake_model(tmp_path / "model")
    events = run_worker(make_job(model, pictures=3), tmp_path / "job")
    assert isinstance(events[-1], Finished)
    starts = [c for c in calls(model) if c["event"] == "start"]
    assert [c["seed"] for c in starts] == [1234, 1235, 1236]
    pictures = [tmp_path / "job" / name for name in ("result.png", "result-2.png", "result-3.png")]
    assert all(p.exists() for p in pictures)
    assert len({p.read_bytes() for p in pictures}) == 3


def test_stopped_worker_keeps_its_checkpoint_and_resumes_to_the_same_picture(tmp_path):
    model = write_fake_model(tmp_path / "model", step_seconds=0.2)
    job = make_job(model, steps=8)
    first = run_worker(job, tmp_path / "job", stop_after=3)
    assert isinstance(first[-1], Failed) and first[-1].cancelled
    assert json.loads((tmp_path / "job" / "checkpoints" / "fake.ckpt.json").read_text())["step"] >= 3
    second = run_worker(job, tmp_path / "job")
    assert isinstance(second[-1], Finished)
    resumed = [c for c in calls(model) if c["event"] == "start"][-1]["resumed_from"]
    assert resumed >= 3
    assert [e.step for e in second if isinstance(e, JobProgress)][0] == resumed + 1
    assert calls(model)[-1]["state"] == uninterrupted_state(job)


def test_worker_killed_for_memory_is_reported_as_out_of_memory(tmp_path, monkeypatch):
    kills = iter([7, 8])                       # the kernel's OOM kill count went up meanwhile
    monkeypatch.setattr(worker, "oom_kills", lambda: next(kills))
    model = write_fake_model(tmp_path / "model", oom_presets=["rpi"])
    [failed] = run_worker(make_job(model), tmp_path / "job")
    assert isinstance(failed, Failed) and failed.oom and failed.exit_code == -signal.SIGKILL


def test_a_sigkill_not_from_the_oom_killer_is_a_crash_not_a_reason_for_a_smaller_preset(tmp_path, monkeypatch):
    monkeypatch.setattr(worker, "oom_kills", lambda: 7)   # unchanged: someone else sent SIGKILL
    model = write_fake_model(tmp_path / "model", oom_presets=["rpi"])
    [failed] = run_worker(make_job(model), tmp_path / "job")
    assert isinstance(failed, Failed) and not failed.oom and not failed.user_error
    assert "not by the kernel's OOM killer" in failed.message


def test_a_full_disk_in_the_worker_is_reported_for_a_later_retry(tmp_path):
    model = write_fake_model(tmp_path / "model", fail="cannot write the checkpoint x: No space left on device",
                             fail_kind="storage")
    [failed] = run_worker(make_job(model), tmp_path / "job")
    assert isinstance(failed, Failed) and failed.retry_later and failed.user_error


def test_worker_errors_are_reported_with_their_message(tmp_path):
    model = write_fake_model(tmp_path / "model", fail="unet/diffusion_pytorch_model.safetensors is truncated")
    [failed] = run_worker(make_job(model), tmp_path / "job")
    assert isinstance(failed, Failed) and failed.user_error and not failed.oom
    assert failed.message == "unet/diffusion_pytorch_model.safetensors is truncated"


def test_worker_runs_at_low_priority(tmp_path):
    model = write_fake_model(tmp_path / "model", step_seconds=0.3)
    events: queue.Queue = queue.Queue()
    runner = ChildRunner(events.put, generator="frame_fakes:load_fake", env=ENV)
    (tmp_path / "job" / "checkpoints").mkdir(parents=True)
    runner.start(make_job(model, steps=4), tmp_path / "job" / "checkpoints", tmp_path / "job" / "r.png",
                 tmp_path / "job" / "lock")
    assert isinstance(events.get(timeout=30), JobProgress)
    pid = runner._proc.pid
    assert os.getpriority(os.PRIO_PROCESS, pid) == 19
    assert Path(f"/proc/{pid}/oom_score_adj").read_text().strip() == "1000"
    runner.stop()


def test_the_jobs_loras_are_applied_by_the_pipeline(tiny_single_file, tmp_path):
    from lora_files import kohya_lora

    lora = kohya_lora(tmp_path / "woodcut.safetensors")
    job = make_job(tiny_single_file.folder, preset="default", steps=1, height=64, loras=((str(lora), 0.8),))
    emitted = []
    request = {"generator": worker.DEFAULT_GENERATOR, "job": job.to_json(), "checkpoint_dir": str(tmp_path / "ckpt"),
               "output": str(tmp_path / "result.png")}
    assert worker.run_job(request, emitted.append, worker.StopRequest()) == worker.EXIT_OK
    done = emitted[-1]
    assert done["event"] == "done" and done["metadata"]["loras"][0][:2] == ["woodcut.safetensors", 0.8]


def test_checkpoints_of_other_settings_in_the_jobs_folder_start_the_job_over(tmp_path, caplog):
    from engine.errors import Cancelled
    from engine.sdxl import Pipeline
    from engine.sdxl.random_model import write_random_model

    model = write_random_model(tmp_path / "model")
    job = make_job(model, preset="default", steps=2, height=64)
    stale = Pipeline.load(model)          # as an older slowframe or another model left them
    with pytest.raises(Cancelled):
        stale.generate(job.prompt, steps=3, seed=job.seed, width=64, height=64, checkpoint_dir=tmp_path / "ckpt",
                       on_progress=lambda p: False)
    emitted = []
    request = {"generator": worker.DEFAULT_GENERATOR, "job": job.to_json(), "checkpoint_dir": str(tmp_path / "ckpt"),
               "output": str(tmp_path / "result.png")}
    assert worker.run_job(request, emitted.append, worker.StopRequest()) == worker.EXIT_OK
    assert emitted[-1]["metadata"]["steps"] == 2
    assert "starting it over" in caplog.text and "steps: 3 there, 2 now" in caplog.text


# ---------------------------------------------------------------- previews

def estimates(job: Job) -> dict[int, np.ndarray]:
    """The fake's ``denoised`` estimate after each step of ``job``, computed in this process."""
    seen = {}
    FakePipeline(job.model, job.preset, []).generate(
        job.prompt, steps=job.steps, seed=job.seed, width=job.width, height=job.height, sampler=job.sampler,
        guidance=job.guidance, on_progress=lambda p: seen.setdefault(p.step, p.denoised))
    return seen


def test_the_worker_writes_a_preview_of_the_estimate_when_one_is_due(tmp_path):
    model = write_fake_model(tmp_path / "model")
    job = make_job(model, steps=8)
    preview = PreviewRequest(tmp_path / "job" / "preview.png", every_steps=3)
    events = run_worker(job, tmp_path / "job", preview=preview)
    shown = [e for e in events if isinstance(e, JobPreview)]
    # the first estimate, then every 3 steps; never the last step, whose picture comes next
    assert [(e.step, e.steps, e.path) for e in shown] == [(1, 8, preview.path), (4, 8, preview.path),
                                                          (7, 8, preview.path)]
    assert isinstance(events[-1], Finished)
    written = Image.open(preview.path)
    assert written.size == (job.width, job.height)   # 8x the latents
    expected = linear_preview(estimates(job)[7])
    assert np.array_equal(np.asarray(written.convert("RGB")), np.asarray(expected))
    progress = [e for e in events if isinstance(e, (JobProgress, JobPreview))]
    assert progress.index(shown[0]) == 1             # each preview follows its step's progress line


def test_previews_by_seconds_and_none_unasked(tmp_path):
    model = write_fake_model(tmp_path / "model")
    job = make_job(model, steps=5)
    every = run_worker(job, tmp_path / "a", preview=PreviewRequest(tmp_path / "a" / "p.png", every_seconds=0))
    assert [e.step for e in every if isinstance(e, JobPreview)] == [1, 2, 3, 4]
    rare = run_worker(job, tmp_path / "b", preview=PreviewRequest(tmp_path / "b" / "p.png", every_seconds=3600))
    assert [e.step for e in rare if isinstance(e, JobPreview)] == [1]
    plain = run_worker(job, tmp_path / "c")
    assert not [e for e in plain if isinstance(e, JobPreview)] and not (tmp_path / "c" / "p.png").exists()


def test_a_resumed_run_previews_its_first_step_and_ends_on_the_same_picture(tmp_path):
    model = write_fake_model(tmp_path / "model", step_seconds=0.2)
    job = make_job(model, steps=8)
    preview = PreviewRequest(tmp_path / "job" / "preview.png", every_steps=4)
    first = run_worker(job, tmp_path / "job", stop_after=3, preview=preview)
    assert isinstance(first[-1], Failed) and first[-1].cancelled
    second = run_worker(job, tmp_path / "job", preview=preview)
    resumed = [e.step for e in second if isinstance(e, JobProgress)][0]
    assert [e.step for e in second if isinstance(e, JobPreview)][0] == resumed
    assert calls(model)[-1]["state"] == uninterrupted_state(job)


def test_progress_without_an_estimate_makes_no_preview_and_no_trouble(tmp_path):
    model = write_fake_model(tmp_path / "model", no_denoised=True)
    job = make_job(model, steps=4)
    events = run_worker(job, tmp_path / "job", preview=PreviewRequest(tmp_path / "job" / "p.png", every_steps=1))
    assert [e.step for e in events if isinstance(e, JobProgress)] == [1, 2, 3, 4]
    assert not [e for e in events if isinstance(e, JobPreview)] and isinstance(events[-1], Finished)


def in_process(job: Job, folder: Path, preview: PreviewRequest) -> list[dict]:
    folder.mkdir(parents=True, exist_ok=True)
    request = {"generator": "frame_fakes:load_fake", "job": job.to_json(), "checkpoint_dir": str(folder),
               "output": str(folder / "result.png"), "lock": str(folder / "lock"), "preview": preview.to_json()}
    lines: list[dict] = []
    assert run_job(request, lines.append, StopRequest()) == worker.EXIT_OK
    return lines


def test_a_preview_that_cannot_be_written_never_costs_the_picture(tmp_path, caplog):
    job = make_job(write_fake_model(tmp_path / "model"), steps=4)
    lines = in_process(job, tmp_path / "job", PreviewRequest(tmp_path / "gone" / "p.png", every_steps=1))
    assert [line["event"] for line in lines] == ["progress"] * 4 + ["done"]
    assert "previews: no preview at step 1" in caplog.text and (tmp_path / "job" / "result.png").exists()


def test_a_preview_decoder_that_is_not_there_falls_back_to_the_linear_map_saying_so_once(tmp_path, caplog):
    caplog.set_level(logging.WARNING, "slowframe.worker")
    job = make_job(write_fake_model(tmp_path / "model"), steps=6)
    path = tmp_path / "job" / "p.png"
    lines = in_process(job, tmp_path / "job", PreviewRequest(path, every_steps=1, decoder="nonesuch"))
    assert [line["step"] for line in lines if line["event"] == "preview"] == [1, 2, 3, 4, 5]
    [warning] = [r.getMessage() for r in caplog.records if "previews" in r.getMessage()]
    assert "no preview decoder 'nonesuch'" in warning and "linear map instead" in warning
    assert np.array_equal(np.asarray(Image.open(path).convert("RGB")), np.asarray(linear_preview(estimates(job)[5])))


def run_import(source: Path, dest: Path, timeout: float = 120) -> list:
    events: queue.Queue = queue.Queue()
    runner = ChildRunner(events.put, env=ENV)
    runner.start_import(source, dest, dest.parent / "worker.lock")
    seen = []
    while True:
        event = events.get(timeout=timeout)
        seen.append(event)
        if isinstance(event, (Imported, ImportFailed)):
            return seen


def test_the_worker_imports_a_single_file_model_and_tells_its_progress(tiny_single_file, tmp_path):
    source = tmp_path / "tiny.safetensors"
    source.symlink_to(tiny_single_file.sgm)
    events = run_import(source, tmp_path / "tiny")
    progress = [e for e in events if isinstance(e, ImportProgress)]
    percents = [100 * e.bytes_done // e.bytes_total for e in progress]
    assert len(percents) > 50 and percents == sorted(set(percents))      # once per percent, going up
    assert events[-1] == Imported(source, tmp_path / "tiny")
    verify_model(tmp_path / "tiny", log=lambda *_: None)


def test_a_half_copied_model_fails_to_import_with_the_reason(tiny_single_file, tmp_path):
    source = tmp_path / "cut.safetensors"
    source.write_bytes(tiny_single_file.sgm.read_bytes()[:300_000])
    events = run_import(source, tmp_path / "cut")
    assert isinstance(events[-1], ImportFailed) and "truncated" in events[-1].message
    assert not (tmp_path / "cut").exists()
