"""`slowframe run` in a real process: killed, restarted, stopped, supervised, controlled.

The generator is tests/frame_fakes.FakePipeline (the Pipeline contract: progress, a
checkpoint per step, resume, cancel), so these run in seconds without a model.
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from daemon_processes import Daemon
from frame.cli import main
from frame.control import request
from frame_fakes import calls, make_job, uninterrupted_state, write_fake_model


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
    spec = make_job(model, steps=10, seed=job["seed"], prompt=job["prompt"], width=256, height=256,
                    negative_prompt=record["negative_prompt"], guidance=record["guidance"])   # the theme defaults
    assert done[0]["state"] == uninterrupted_state(spec)        # the same picture as without the kill
    assert (tmp_path / "panel" / "look.png").exists()


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


def test_previews_on_the_panel_survive_a_sigkill_and_never_enter_the_history(tmp_path, daemons):
    model = write_fake_model(tmp_path / "model", step_seconds=0.5)
    # a preview every 0.6 s (min_interval 0): each run of the job shows some, whatever its timing
    config = CONFIG.replace("min_interval: 0}", "min_interval: 0, preview: 0.01}").replace("steps: 10", "steps: 24")
    first = daemons(config)
    deadline = time.monotonic() + 30
    while "showing a preview of" not in first.logtext() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "showing a preview of" in first.logtext()
    assert (tmp_path / "state" / "job" / "preview.png").exists()
    job = json.loads((tmp_path / "state" / "job" / "job.json").read_text())["job"]
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait()
    first.close()
    os.unlink(first.notify_path)

    before = (tmp_path / "daemon.log").stat().st_size
    daemons(config)
    deadline = time.monotonic() + 60
    while not list((tmp_path / "state" / "history").glob("*.json")) and time.monotonic() < deadline:
        time.sleep(0.2)
    [sidecar] = (tmp_path / "state" / "history").glob("*.json")
    assert json.loads(sidecar.read_text())["id"] == job["id"]
    assert sorted(p.suffix for p in (tmp_path / "state" / "history").iterdir()) == [".json", ".png"]
    done = [c for c in calls(model) if c["event"] == "done" and c["seed"] == job["seed"]]
    spec = make_job(model, steps=24, seed=job["seed"], prompt=job["prompt"], width=256, height=256,
                    negative_prompt=job["negative_prompt"], guidance=job["guidance"])   # the theme defaults
    assert done[0]["state"] == uninterrupted_state(spec)        # previews cost the picture nothing
    with open(tmp_path / "daemon.log", "rb") as log:
        log.seek(before)
        assert b"showing a preview of" in log.read()              # the resumed run is previewed too
