"""The generation worker in a real child process: progress, resume, stop, failures, priority.

The generator is tests/frame_fakes.FakePipeline (the Pipeline contract: progress, a
checkpoint per step, resume, cancel), so these run in seconds without a model.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import time
from pathlib import Path

import pytest

from daemon_processes import ENV
from frame import worker
from frame.jobs import Job
from frame.worker import ChildRunner, Failed, Finished, JobProgress
from frame_fakes import calls, make_job, uninterrupted_state, write_fake_model


def run_worker(job: Job, folder: Path, stop_after: int | None = None, timeout: float = 30) -> list:
    events: queue.Queue = queue.Queue()
    runner = ChildRunner(events.put, generator="frame_fakes:load_fake", env=ENV)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "checkpoints").mkdir(exist_ok=True)
    runner.start(job, folder / "checkpoints", folder / "result.png", folder / "worker.lock")
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
