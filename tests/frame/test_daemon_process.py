"""Real processes: the generation worker, and `slowframe run` killed, restarted, stopped, supervised.

The generator is tests/frame_fakes.FakePipeline (the Pipeline contract: progress, a
checkpoint per step, resume, cancel), so these run in seconds without a model.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import tempfile
import time
from pathlib import Path

import pytest

from daemon_processes import ENV, Daemon
from frame.cli import main
from frame.control import request
from frame.jobs import Job
from frame import worker
from frame.worker import ChildRunner, Failed, Finished, JobProgress
from frame_fakes import FakePipeline, calls, write_fake_model


def make_job(model: Path, preset: str = "rpi", steps: int = 6, **changes) -> Job:
    fields = dict(id="20250301-060000-abcdef", theme="sea", prompt="a calm sea", negative_prompt="", seed=1234,
                  steps=steps, guidance=7.0, sampler="euler", width=64, height=48, model=str(model), preset=preset)
    return Job(**{**fields, **changes})


def uninterrupted_state(job: Job) -> list[float]:
    """The fake's final state for ``job`` computed in one go, in this process, in a model
    folder of its own: a daemon still running may be logging its next job to the job's."""
    with tempfile.TemporaryDirectory() as folder:
        shutil.copy(Path(job.model) / "fake.json", folder)
        pipe = FakePipeline(folder, job.preset, [])
        pipe.generate(job.prompt, negative_prompt=None, steps=job.steps, guidance=job.guidance, seed=job.seed,
                      width=job.width, height=job.height, sampler=job.sampler)
        return calls(Path(folder))[-1]["state"]


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


# ---------------------------------------------------------------- the whole daemon

CONFIG = """\
model: {path: model, preset: rpi}
display: {backend: file, panel: spectra6-4.0, output: panel, min_interval: 0}
themes:
  - {name: sea, prompt: "a {calm|rough} sea", steps: 10, size: 256x256}
buttons: {enabled: false}
"""


@pytest.fixture
def daemons(tmp_path):
    started = []

    def start(config: str = CONFIG, **kwargs) -> Daemon:
        d = Daemon(tmp_path, config, **kwargs)
        started.append(d)
        return d

    yield start
    for d in started:
        d.close()


def test_sigkill_mid_job_then_restart_resumes_the_same_job(tmp_path, daemons):
    model = write_fake_model(tmp_path / "model", step_seconds=0.25)
    first = daemons(watchdog_usec=600_000)
    ready = first.wait_for(lambda m: m.startswith("READY=1"), "READY")
    assert f"MAINPID={first.proc.pid}" in ready
    first.wait_for(lambda m: "step 3/10" in m, "progress to step 3")
    first.wait_for(lambda m: m == "WATCHDOG=1", "a watchdog ping")
    status = request("status", tmp_path / "run" / "control.sock")
    job = status["job"]
    assert (job["theme"], job["state"], job["steps"]) == ("sea", "generating", 10)
    assert oct(os.stat(tmp_path / "run" / "control.sock").st_mode & 0o777) == "0o660"

    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait()
    first.close()
    os.unlink(first.notify_path)

    second = daemons()
    second.wait_for(lambda m: m.startswith("READY=1"), "READY after the restart")
    deadline = time.monotonic() + 60
    while not list((tmp_path / "state" / "history").glob("*.json")) and time.monotonic() < deadline:
        time.sleep(0.2)
    sidecars = list((tmp_path / "state" / "history").glob("*.json"))
    assert len(sidecars) == 1, f"no finished picture 60 s after the restart; log:\n{second.logtext()}"
    record = json.loads(sidecars[0].read_text())
    assert (record["id"], record["seed"], record["prompt"]) == (job["id"], job["seed"], job["prompt"])
    starts = [c for c in calls(model) if c["event"] == "start" and c["seed"] == job["seed"]]
    assert len(starts) == 2 and starts[1]["resumed_from"] >= 3   # resumed, not started over
    done = [c for c in calls(model) if c["event"] == "done" and c["seed"] == job["seed"]]
    spec = make_job(model, steps=10, seed=job["seed"], prompt=job["prompt"], width=256, height=256)
    assert done[0]["state"] == uninterrupted_state(spec)        # the same picture as without the kill
    assert (tmp_path / "panel" / "preview.png").exists()


def test_sigterm_stops_cleanly_and_keeps_the_job(tmp_path, daemons):
    write_fake_model(tmp_path / "model", step_seconds=0.3)
    d = daemons()
    d.wait_for(lambda m: "step 2/10" in m, "progress")
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(timeout=30) == 0
    assert any(m.startswith("STOPPING=1") for m in d.messages + [d.wait_for(lambda m: "STOPPING" in m, "STOPPING")])
    saved = json.loads((tmp_path / "state" / "job" / "job.json").read_text())
    assert saved["finished"] is None
    assert json.loads((tmp_path / "state" / "job" / "checkpoints" / "fake.ckpt.json").read_text())["step"] >= 2
    assert not (tmp_path / "run" / "control.sock").exists()


def test_out_of_memory_in_the_worker_is_retried_with_the_lower_preset(tmp_path, daemons):
    # a MemoryError: the daemon in its own process cannot be shown a rising OOM-kill count
    model = write_fake_model(tmp_path / "model", oom_presets=["rpi"], oom_kind="memoryerror")
    d = daemons()
    d.wait_for(lambda m: m.startswith("READY=1"), "READY")
    deadline = time.monotonic() + 60
    while not list((tmp_path / "state" / "history").glob("*.json")) and time.monotonic() < deadline:
        time.sleep(0.2)
    [sidecar] = (tmp_path / "state" / "history").glob("*.json")
    assert json.loads(sidecar.read_text())["preset"] == "rpi-lowmem"
    first_job = [c for c in calls(model) if c["event"] == "start"][:2]
    assert [c["preset"] for c in first_job] == ["rpi", "rpi-lowmem"]
    assert first_job[0]["seed"] == first_job[1]["seed"]
    assert d.proc.poll() is None                 # the daemon never dies with its child
    assert "ran out of memory" in d.logtext()


def test_control_commands_from_the_command_line(tmp_path, daemons, capsys):
    write_fake_model(tmp_path / "model", step_seconds=0.3)
    d = daemons()
    d.wait_for(lambda m: "step 1/10" in m, "progress")
    sock = str(tmp_path / "run" / "control.sock")
    assert main(["status", "--socket", sock]) == 0
    assert capsys.readouterr().out.startswith("sea: step ")
    first = request("status", sock)["job"]["id"]
    assert main(["skip", "--socket", sock]) == 0
    assert capsys.readouterr().out.strip() == "skip: queued"
    d.wait_for(lambda m: "step 1/10" in m and request("status", sock)["job"]["id"] != first, "a new job")
    assert main(["status", "--socket", str(tmp_path / "nope")]) == 1
    captured = capsys.readouterr()
    assert "daemon is not running" in captured.err and "Traceback" not in captured.err
