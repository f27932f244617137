"""The daemon's loop with a fake clock, a runner the test drives, the file display and mock buttons."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import socket
import textwrap
import threading
from pathlib import Path

import pytest
from PIL import Image

from daemon_frames import CONFIG, Frame
from frame.daemon import CONFIG_POLL_SECONDS, Daemon
from frame.display import open_display
from frame.display.file_backend import FileDisplay
from frame.jobs import Job
from frame.notify import Notifier
from frame_fakes import ManualRunner

@pytest.fixture
def frame(tmp_path):
    f = Frame(tmp_path)
    yield f
    f.close()


def test_first_job_starts_with_the_panel_size_and_reports_progress(frame):
    job, checkpoints, output = frame.runner.started[0]
    assert (job.theme, job.steps, job.preset, job.model) == ("sea", 20, "rpi", str(frame.root / "model"))
    assert (job.width, job.height) == frame.display.generation_size()
    assert job.prompt in ("a calm sea", "a rough sea")
    assert checkpoints == frame.root / "state" / "job" / "checkpoints"
    saved = json.loads((frame.root / "state" / "job" / "job.json").read_text())
    assert saved["job"]["id"] == job.id and saved["job"]["seed"] == job.seed   # on disk before any work
    frame.runner.progress(5, seconds_per_step=120)
    frame.step()
    status = frame.daemon.snapshot
    assert status["job"]["step"] == 5 and status["job"]["eta_seconds"] == 15 * 120
    assert status["message"] == "sea: step 5/20, 30 min left"


def test_fixed_times_and_quiet_hours_over_a_day(frame):
    assert frame.display.refreshes == 1   # the first screen, at once
    frame.runner.finish()
    frame.at(6, 30)
    assert frame.history() == ["sea"] and frame.display.refreshes == 2   # the first picture goes up at once
    assert frame.runner.started[-1][0].theme == "hills"                   # the next is made ahead
    frame.runner.finish()
    frame.at(6, 40)
    assert frame.display.refreshes == 2
    assert frame.daemon.snapshot["message"] == "hills: ready, shown at 07:00"
    frame.at(6, 59)
    assert frame.display.refreshes == 2
    frame.at(7, 0)
    assert frame.history() == ["sea", "hills"] and frame.display.refreshes == 3
    frame.runner.finish()
    frame.at(12, 0)
    frame.at(18, 59)
    assert frame.display.refreshes == 3
    frame.at(19, 0)
    assert frame.history() == ["sea", "hills", "town"]
    frame.runner.finish()          # ready at 19:00; the next time is 07:00 tomorrow
    frame.at(23, 0)
    frame.at(6, 59, day=2)
    assert frame.display.refreshes == 4
    frame.at(7, 0, day=2)
    assert frame.display.refreshes == 5 and frame.history() == ["hills", "town", "sea"]   # keep: 3


def test_continuous_pictures_wait_for_quiet_hours_and_the_minimum_interval(tmp_path):
    config = CONFIG.replace('times: ["07:00", "19:00"], ', "")
    f = Frame(tmp_path, config, start=dt.datetime(2025, 3, 1, 21, 0))
    try:
        f.runner.finish()
        f.step()
        assert f.display.refreshes == 1   # the first screen went up at 21:00: the panel rests first
        f.clock.advance(seconds=180)
        f.step()
        assert f.display.refreshes == 2
        f.runner.finish()
        f.step()
        assert f.display.refreshes == 2   # min_interval 180 s since the last refresh
        f.clock.advance(seconds=179)
        f.step()
        assert f.display.refreshes == 2
        f.clock.advance(seconds=1)
        f.step()
        assert f.display.refreshes == 3
        f.at(22, 30)
        f.runner.finish()
        f.step()
        f.at(5, 59, day=2)
        assert f.display.refreshes == 3   # quiet hours 22:00-06:00
        f.at(6, 0, day=2)
        assert f.display.refreshes == 4
    finally:
        f.close()


def test_the_picture_goes_into_the_history_with_its_record(frame):
    job = frame.runner.job
    frame.runner.progress(20, seconds_per_step=61.5)
    frame.runner.finish()
    frame.at(6, 10)
    [entry] = frame.daemon.history.entries()
    record = json.loads(entry.sidecar.read_text())
    assert {k: record[k] for k in ("theme", "prompt", "seed", "steps", "model", "preset", "sampler")} == {
        "theme": "sea", "prompt": job.prompt, "seed": job.seed, "steps": 20, "model": str(frame.root / "model"),
        "preset": "rpi", "sampler": "euler"}
    assert record["started"] == "2025-03-01T06:00:00" and record["finished"] == "2025-03-01T06:10:00"
    assert record["seconds_per_step"] == 60.0   # as the worker reported it with the picture
    png = Image.open(entry.image)
    assert png.text["parameters"].startswith(job.prompt)
    assert f"Seed: {job.seed}" in png.text["parameters"]
    assert json.loads(png.text["slowframe"])["prompt"] == job.prompt
    assert frame.daemon.shown_id == entry.id
    assert (frame.root / "panel" / "look.png").exists()
    following = json.loads((frame.root / "state" / "job" / "job.json").read_text())["job"]
    assert following["id"] != job.id and following["theme"] == "hills"


def test_skip_button_abandons_the_job_and_starts_the_next_theme(frame):
    first = frame.runner.job
    frame.press(16)                       # C: press = skip
    frame.step()
    assert frame.runner.stopped == [first.id]
    assert frame.runner.job.theme == "hills"
    assert frame.history() == []


def test_skip_keeps_a_finished_unshown_picture_in_the_history(frame):
    frame.runner.finish()
    frame.at(6, 5)                        # first picture shown; "hills" is made next
    frame.runner.finish()
    frame.at(6, 30)                       # "hills" waits for 07:00
    frame.press(16)
    frame.step()
    assert frame.history() == ["sea", "hills"]
    assert frame.display.refreshes == 2 and frame.runner.job.theme == "town"   # the first screen and "sea"


def test_hold_regenerates_the_theme_on_the_panel_and_shows_it_when_ready(frame):
    frame.runner.finish()
    frame.at(6, 5)                        # "sea" on the panel, "hills" being made
    assert frame.runner.job.theme == "hills"
    sea_seed = frame.daemon.history.entries()[0].record["seed"]
    frame.press(16, held=0.3)             # C: hold = regenerate
    frame.step()
    job = frame.runner.job
    assert frame.runner.stopped[-1].endswith(frame.runner.started[1][0].id[-6:])
    assert (job.theme, job.requested) == ("sea", True) and job.seed != sea_seed
    frame.runner.finish()
    frame.at(9, 0)                        # asked for: shown when ready, not at 19:00
    assert frame.history() == ["sea", "sea"] and frame.display.refreshes == 3   # after the first screen


def test_previous_and_next_browse_the_history_and_presses_during_a_refresh_are_kept(tmp_path):
    class SlowDisplay(FileDisplay):
        gate = threading.Event()
        started = threading.Event()

        def _refresh(self, panel_indices):
            self.started.set()
            assert self.gate.wait(10)
            super()._refresh(panel_indices)

    f = Frame(tmp_path, CONFIG.replace('times: ["07:00", "19:00"], ', ""), display_class=SlowDisplay)
    try:
        SlowDisplay.gate.set()
        for minute in (10, 20, 30):
            f.runner.finish()
            f.at(6, minute)
            f.clock.advance(seconds=200)
        ids = [e.id for e in f.daemon.history.entries()]
        assert f.daemon.shown_id == ids[-1]
        f.runner.finish()
        SlowDisplay.gate.clear()
        SlowDisplay.started.clear()
        refresh = threading.Thread(target=f.step)   # the 4th picture's refresh, held up
        refresh.start()
        assert SlowDisplay.started.wait(10)
        f.press(5)                                  # A: previous, twice, while the panel refreshes
        f.press(5)
        f.press(6)                                  # B: next
        assert f.daemon.events.qsize() == 3
        SlowDisplay.gate.set()
        refresh.join(10)
        ids = [e.id for e in f.daemon.history.entries()]   # keep: 3
        assert f.daemon.shown_id == ids[-1]
        refreshes = f.display.refreshes
        f.clock.advance(seconds=200)
        f.step()
        assert f.daemon.shown_id == ids[-2]          # back two, forward one: one refresh, not three
        assert f.display.refreshes == refreshes + 1
        f.press(6, held=0.3)                        # B: hold = latest
        f.clock.advance(seconds=200)
        f.step()
        assert f.daemon.shown_id == ids[-1] and f.display.refreshes == refreshes + 2
        f.press(6)                                  # already the newest: no pointless refresh
        f.clock.advance(seconds=200)
        f.step()
        assert f.display.refreshes == refreshes + 2
    finally:
        f.close()


def test_status_button_shows_a_status_screen(frame):
    frame.runner.progress(3)
    frame.press(24)                       # D: status
    frame.clock.advance(seconds=180)      # the panel rests after the first screen
    frame.step()
    assert frame.display.refreshes == 2 and frame.daemon.shown_id is None
    text = frame.daemon.status_text()
    assert text.startswith("sea: step 3/20") and "model: " in text


def test_restart_resumes_the_saved_job(tmp_path):
    f = Frame(tmp_path)
    job = f.runner.job
    f.runner.progress(7)
    f.step()
    f.close()                             # as after SIGKILL or a power cut: job.json stays
    g = Frame(tmp_path)
    try:
        resumed = g.runner.started[0][0]
        assert resumed == job
        assert g.runner.started[0][1] == tmp_path / "state" / "job" / "checkpoints"
    finally:
        g.close()


def test_restart_resumes_a_job_saved_by_an_older_frame(tmp_path):
    f = Frame(tmp_path, CONFIG.replace('prompt: "a {calm|rough} sea"', 'prompt: "a {calm|rough} sea", negative: text'))
    job = f.runner.job
    f.close()
    spec = tmp_path / "state" / "job" / "job.json"
    saved = json.loads(spec.read_text())
    saved["job"]["negative"] = saved["job"].pop("negative_prompt")   # the key before it was negative_prompt
    spec.write_text(json.dumps(saved))
    g = Frame(tmp_path)
    try:
        assert g.runner.started[0][0] == job and job.negative_prompt == "text"
    finally:
        g.close()


def test_restart_shows_a_picture_that_was_finished_but_not_shown(tmp_path):
    f = Frame(tmp_path)
    f.runner.finish()
    f.at(6, 5)
    f.runner.finish()                     # "hills": finished, waiting for 07:00
    f.at(6, 30)
    f.close()
    g = Frame(tmp_path, start=dt.datetime(2025, 3, 1, 6, 45))
    try:
        assert g.runner.started == []      # nothing to make again
        g.at(7, 0)
        assert [e.theme for e in g.daemon.history.entries()] == ["sea", "hills"]
    finally:
        g.close()


def test_out_of_memory_retries_once_with_the_lower_preset_then_moves_on(frame):
    first = frame.runner.job
    frame.runner.fail("killed", oom=True)
    frame.step()
    retry = frame.runner.job
    assert (retry.id, retry.preset) == (first.id, "rpi-lowmem")
    frame.runner.fail("killed", oom=True)
    frame.step()
    assert frame.runner.job.theme == "hills" and frame.runner.job.preset == "rpi"
    assert "sea: " in frame.daemon.last_error


def test_repeated_failures_back_off_and_go_on_the_panel(frame):
    # a user's problem (a bad model file): on the panel at once, since only the user can fix it
    frame.runner.fail("a bad tensor", user_error=True)
    frame.step()
    assert frame.runner.job.theme == "hills"            # the first failure: straight on
    assert "a bad tensor" in frame.daemon._error_screen  # once the panel has rested from the first screen
    frame.runner.fail("a bad tensor", user_error=True)
    frame.step()
    assert frame.runner.job is None                     # the second: wait 5 minutes
    assert frame.daemon.snapshot["message"].startswith("error: hills: a bad tensor; next try at 06:05")
    frame.at(6, 5)
    assert "a bad tensor" in frame.daemon._error_on_panel and frame.display.refreshes == 2
    frame.runner.fail("a bad tensor", user_error=True)
    frame.step()
    frame.at(6, 9)                                      # once the panel has rested
    assert frame.daemon._error_on_panel.startswith("3 picture(s) in a row failed")
    frame.at(6, 35)
    frame.runner.finish()
    frame.step()
    frame.at(6, 40)
    assert frame.history() == ["sea"] and frame.daemon.failures == 0


def test_a_missing_model_is_on_the_panel_and_found_once_copied(tmp_path):
    (tmp_path / "frame.yaml").write_text(CONFIG.replace("path: model", "path: later"))
    f = Frame(tmp_path)
    try:
        assert f.runner.started == [] and f.display.refreshes == 1
        assert "No model at" in f.daemon.last_error
        (tmp_path / "later").mkdir()
        f.clock.advance(seconds=30)
        f.step()
        assert f.runner.started == []
        f.clock.advance(seconds=31)
        f.step()
        assert len(f.runner.started) == 1
    finally:
        f.close()


def test_a_changed_file_is_reloaded_and_a_broken_edit_keeps_the_last_good_config(frame):
    good = frame.daemon.config
    frame.config_path.write_text(CONFIG.replace("order: sequential", "order: shuffl"))
    frame.clock.advance(seconds=CONFIG_POLL_SECONDS + 1)
    frame.step()
    assert frame.daemon.config is good
    assert "config has 1 error(s); running the last good one" in frame.daemon.snapshot["message"]
    assert frame.daemon.snapshot["config_errors"][0].endswith("did you mean 'shuffle'?")
    assert frame.runner.job is not None and frame.display.refreshes == 1   # nothing but the first screen
    frame.config_path.write_text(CONFIG.replace("order: sequential", "order: weighted"))
    frame.clock.advance(seconds=CONFIG_POLL_SECONDS + 1)
    frame.step()
    assert frame.daemon.config.order == "weighted" and frame.daemon.config_problems == []


def test_sighup_reloads_at_once(frame):
    previous = signal.getsignal(signal.SIGHUP), signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        frame.daemon.install_signal_handlers()
        frame.config_path.write_text(CONFIG.replace("keep: 3", "keep: 7"))
        os.kill(os.getpid(), signal.SIGHUP)
        frame.step()                      # no clock advance: not the file poll
        assert frame.daemon.config.history.keep == 7
    finally:
        for signum, handler in zip((signal.SIGHUP, signal.SIGTERM, signal.SIGINT), previous):
            signal.signal(signum, handler)


def test_a_wildcard_file_change_is_a_config_change(tmp_path):
    (tmp_path / "colours.txt").write_text("red\n")
    config = CONFIG.replace('"a {calm|rough} sea"', '"a __colours__ sea"') + "wildcards: {colours: colours.txt}\n"
    f = Frame(tmp_path, config)
    try:
        assert f.runner.job.prompt == "a red sea"
        (tmp_path / "colours.txt").write_text("blue\n")
        f.clock.advance(seconds=CONFIG_POLL_SECONDS + 1)
        f.step()
        assert [t.source for t in f.daemon.config.wildcards["colours"]] == ["blue"]
    finally:
        f.close()


def test_notify_messages_reach_the_notify_socket(tmp_path):
    address = str(tmp_path / "notify.sock")
    sink = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sink.bind(address)
    sink.settimeout(2)
    f = Frame(tmp_path, notifier=Notifier(env={"NOTIFY_SOCKET": address}))
    try:
        messages = []
        while not messages or messages[-1] != "STATUS=sea: step 0/20":
            messages.append(sink.recv(4096).decode())
        ready = [m for m in messages if m.startswith("READY=1\n")]
        assert len(ready) == 1 and f"MAINPID={os.getpid()}" in ready[0]
        f.runner.progress(4, seconds_per_step=90)
        f.step()
        assert sink.recv(4096).decode() == "STATUS=sea: step 4/20, 24 min left"
    finally:
        f.close()
        sink.close()


def test_control_requests_are_queued_for_the_main_loop(frame):
    assert frame.daemon.handle_request({"command": "status"})["job"]["theme"] == "sea"
    assert frame.daemon.handle_request({"command": "skip"}) == {"ok": True, "message": "skip: queued"}
    assert not frame.daemon.handle_request({"command": "show", "which": "sideways"})["ok"]
    assert not frame.daemon.handle_request({"command": "dance"})["ok"]
    frame.step()
    assert frame.runner.job.theme == "hills"


def test_display_files_show_what_the_panel_gets(frame):
    frame.runner.finish(colour=(250, 250, 250))
    frame.step()
    panel = Image.open(frame.root / "panel" / "panel.png")
    assert panel.mode == "P" and panel.size == (800, 480)
    assert isinstance(frame.display, FileDisplay) and frame.display.refreshes == 1


def test_open_display_is_the_default_factory(tmp_path):
    (tmp_path / "model").mkdir()
    config = tmp_path / "frame.yaml"
    config.write_text(textwrap.dedent(CONFIG))
    daemon = Daemon(config, tmp_path / "state", runner_factory=ManualRunner, buttons_factory=None,
                    notifier=Notifier(env={}))
    daemon.start(control=False)
    try:
        assert daemon.display_factory is open_display
        assert daemon.display.panel.name == "spectra6-7.3"
    finally:
        daemon.shutdown()


def test_a_broken_config_at_start_waits_for_a_fix(tmp_path):
    (tmp_path / "frame.yaml").write_text(CONFIG.replace("order: sequential", "order: [sequential"))
    f = Frame(tmp_path)
    try:
        assert f.daemon.config is None and f.runner.started == []
        assert f.daemon.snapshot["message"].startswith("config has errors: not valid YAML")
        f.config_path.write_text(CONFIG)
        f.clock.advance(seconds=CONFIG_POLL_SECONDS + 1)
        f.step()
        assert f.runner.job.theme == "sea" and f.daemon.snapshot["config_errors"] == []
    finally:
        f.close()


def test_show_an_image_through_the_control_socket(frame, tmp_path):
    picture = tmp_path / "mine.png"
    Image.new("RGB", (400, 240), (10, 200, 30)).save(picture)
    assert frame.daemon.handle_request({"command": "show", "image": str(picture)})["ok"]
    frame.step()
    assert frame.display.refreshes == 1 and frame.daemon.shown_id is None
    assert frame.daemon.handle_request({"command": "show", "image": str(tmp_path / "missing.png")})["ok"]
    frame.clock.advance(seconds=200)
    frame.step()                          # logged, nothing shown, nothing broken
    assert frame.display.refreshes == 1 and frame.runner.job is not None


def test_a_second_daemon_on_the_same_state_refuses_to_start(frame):
    from frame.daemon import AlreadyRunning

    other = Daemon(frame.config_path, frame.root / "state", runner_factory=ManualRunner, buttons_factory=None,
                   notifier=Notifier(env={}))
    with pytest.raises(AlreadyRunning, match="another slowframe daemon is using"):
        other.start(control=False)


def saved_state(tmp_path: Path, state) -> None:
    (tmp_path / "state").mkdir(exist_ok=True)
    (tmp_path / "state" / "state.json").write_text(state if isinstance(state, str) else json.dumps(state))


def test_a_last_picture_time_months_ahead_is_recomputed_from_now(tmp_path, caplog):
    # a Pi without network time booted at a wrong date, showed a picture, then the clock was corrected back
    saved_state(tmp_path, {"last_new": "2025-09-01T07:00:00", "shown": None, "cursor": None, "picker": {}})
    f = Frame(tmp_path)
    try:
        assert "more than a day from now" in caplog.text
        f.runner.finish()
        f.at(7, 0)
        assert f.history() == ["sea"] and f.display.refreshes == 2   # due at the next time, not in September
    finally:
        f.close()


def test_a_last_picture_time_within_a_day_is_kept(tmp_path):
    saved_state(tmp_path, {"last_new": "2025-03-01T05:00:00"})
    f = Frame(tmp_path)
    try:
        assert f.daemon.last_new == dt.datetime(2025, 3, 1, 5, 0)
    finally:
        f.close()


@pytest.mark.parametrize("state", [
    "[1, 2]", "not json", "{" * 5000, '{"last_new": 5, "shown": [1], "cursor": {}, "picker": "x"}',
    '{"picker": {"bag": 3, "last": ["a"]}}', '{"picker": {"bag": ["sea", 4, null]}}',
    '{"last_new": "2025-03-01T05:00:00+09:00"}',
])
def test_a_damaged_saved_state_starts_afresh_instead_of_crashing(tmp_path, state):
    saved_state(tmp_path, state)
    f = Frame(tmp_path, config=CONFIG.replace("order: sequential", "order: shuffle"))
    try:
        f.runner.finish()
        f.at(7, 0)
        assert len(f.history()) == 1
    finally:
        f.close()


def set_aside(root: Path) -> list[Path]:
    folder = root / "state" / "set-aside"
    return sorted(folder.iterdir()) if folder.exists() else []


def test_a_worker_crash_resumes_the_job_once_and_the_second_sets_it_aside(frame):
    first = frame.runner.job
    frame.runner.fail("the generator was killed by signal SIGSEGV", code=-11)
    frame.step()
    assert frame.runner.job.id == first.id                 # once more, from its checkpoints
    frame.runner.fail("the generator was killed by signal SIGSEGV", code=-11)
    frame.step()
    assert frame.runner.job.theme == "hills"               # the frame moved on
    [aside] = set_aside(frame.root)
    assert aside.name == first.id and (aside / "job.json").exists()
    assert "crashed on it 2 times" in (aside / "reason.txt").read_text()
    assert frame.display.refreshes == 1                    # the reason on the panel, once
    frame.step()
    assert frame.display.refreshes == 1


def test_an_error_while_showing_a_picture_is_contained_and_the_second_sets_the_job_aside(frame, monkeypatch):
    frame.runner.finish()
    monkeypatch.setattr(frame.daemon.history, "add", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("bug")))
    frame.at(6, 30)
    assert frame.daemon.current is not None and frame.daemon.current.crashes == 1
    frame.at(7, 0)                                         # the next time it is due: the second try
    assert frame.daemon.current is None or frame.daemon.current.job.theme == "hills"
    assert len(set_aside(frame.root)) == 1
    monkeypatch.undo()
    frame.step()                                           # the next turn starts the next theme
    frame.runner.finish()
    frame.at(19, 0)
    assert frame.history() == ["hills"]                    # the daemon lived on


def test_a_daemon_that_died_twice_while_showing_a_job_sets_it_aside_on_start(tmp_path):
    f = Frame(tmp_path)
    f.runner.finish()
    f.step()
    job_file = tmp_path / "state" / "job" / "job.json"
    f.close()
    for _ in range(2):                                     # as if it died mid-show, twice
        saved = json.loads(job_file.read_text())
        saved["handling"] = "showing"
        job_file.write_text(json.dumps(saved))
        g = Frame(tmp_path, start=dt.datetime(2025, 3, 1, 5, 0))
        g.close()
    assert len(set_aside(tmp_path)) == 1
    assert "stopped 2 times while handling it" in (set_aside(tmp_path)[0] / "reason.txt").read_text()


@pytest.mark.parametrize("edit", [
    lambda job: job.update(prompt="mountains \ud800 above a lake"),
    lambda job: job.update(seed="7"),
    lambda job: job.update(steps=None),
    lambda job: job.pop("prompt"),
])
def test_a_job_file_that_cannot_be_a_job_is_set_aside_and_the_frame_starts(tmp_path, edit):
    f = Frame(tmp_path)
    job_file = tmp_path / "state" / "job" / "job.json"
    f.close()
    saved = json.loads(job_file.read_text())
    edit(saved["job"])
    job_file.write_text(json.dumps(saved))
    g = Frame(tmp_path)
    try:
        [aside] = set_aside(tmp_path)
        assert "cannot be a job" in (aside / "reason.txt").read_text()
        assert g.runner.job is not None                     # a new job started
    finally:
        g.close()


def test_a_truncated_history_picture_browsed_to_is_an_error_screen_not_a_dead_daemon(frame):
    frame.runner.finish()
    frame.at(6, 30)                                        # the first picture goes up and into the history
    [entry] = frame.daemon.history.entries()
    data = entry.image.read_bytes()
    entry.image.write_bytes(data[: len(data) // 3])         # a power cut while the card was being written
    frame.daemon.cursor = None
    frame.daemon.handle_request({"command": "show", "which": "latest"})
    frame.daemon.shown_id = None
    frame.at(6, 40)
    assert "cannot be read" in (frame.daemon._error_on_panel or frame.daemon._error_screen or "")
    assert frame.daemon.handle_request({"command": "status"})["ok"]


def test_showing_a_decompression_bomb_is_refused_and_the_daemon_lives(frame, tmp_path):
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 20000, 20000, 1, 0, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(b"\0" * 2501 * 64)) + chunk(b"IEND", b""))
    assert bomb.stat().st_size < 48_000
    assert frame.daemon.handle_request({"command": "show", "image": str(bomb)})["ok"]
    frame.step()
    assert frame.display.refreshes == 1 and frame.runner.job is not None   # the first screen only
    assert frame.daemon.handle_request({"command": "status"})["ok"]


def test_a_full_disk_while_storing_a_picture_is_waited_out_without_a_strike(frame, monkeypatch):
    import errno

    frame.runner.finish()
    real_add = frame.daemon.history.add
    monkeypatch.setattr(frame.daemon.history, "add",
                        lambda *a, **k: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left on device")))
    for minute in (30, 31, 32, 33):
        frame.at(6, minute)
    assert frame.daemon.current is not None and frame.daemon.current.crashes == 0
    monkeypatch.setattr(frame.daemon.history, "add", real_add)
    frame.at(7, 0)
    assert frame.history() == ["sea"] and not set_aside(frame.root)


def test_a_job_stopped_by_a_full_disk_waits_and_goes_on_with_its_checkpoints(frame):
    first = frame.runner.job
    frame.runner.progress(5, seconds_per_step=60)
    frame.step()
    frame.runner.fail("cannot write the checkpoint: No space left on device", user_error=True, code=1,
                      retry_later=True)
    frame.step()
    assert frame.daemon.current.job.id == first.id and frame.runner.job is None      # kept, not yet relaunched
    frame.clock.advance(seconds=61)
    frame.step()
    assert frame.runner.job.id == first.id                                          # the same job goes on
    assert not set_aside(frame.root)


def test_a_picture_stored_just_before_the_daemon_died_is_not_stored_twice(tmp_path):
    f = Frame(tmp_path)
    f.runner.finish()

    def die():
        raise KeyboardInterrupt("the daemon is killed between storing the picture and forgetting the job")
    f.daemon.jobs.clear = die
    with pytest.raises(KeyboardInterrupt):
        f.at(6, 30)
    f.daemon._lock.close()
    f.pins.reset()
    g = Frame(tmp_path, start=dt.datetime(2025, 3, 1, 6, 31))
    try:
        g.at(7, 0)
        ids = [e.record["id"] for e in g.daemon.history.entries()]
        assert len(ids) == len(set(ids)) == 1
        assert g.daemon.current is None or g.daemon.current.job.theme == "hills"
    finally:
        g.close()


def test_lora_tags_in_a_prompt_become_the_jobs_loras(tmp_path):
    (tmp_path / "loras").mkdir()
    (tmp_path / "loras" / "woodcut.safetensors").write_bytes(b"x")
    frame = Frame(tmp_path, CONFIG.replace("preset: rpi}", "preset: rpi, lora_folder: loras}").replace(
        'prompt: "a {calm|rough} sea"', 'prompt: "a {calm|rough} sea <lora:woodcut:0.6>"'))
    job = frame.runner.started[0][0]
    assert job.prompt in ("a calm sea", "a rough sea")
    assert job.loras == ((str(tmp_path / "loras" / "woodcut.safetensors"), 0.6),)
    assert Job.from_json(json.loads(json.dumps(job.to_json()))) == job   # as the job file keeps it


def test_a_lora_file_removed_after_the_config_was_read_is_an_error_not_a_crash(tmp_path):
    (tmp_path / "loras").mkdir()
    (tmp_path / "loras" / "woodcut.safetensors").write_bytes(b"x")
    frame = Frame(tmp_path, CONFIG.replace("preset: rpi}", "preset: rpi, lora_folder: loras}").replace(
        'prompt: "a {calm|rough} sea"', 'prompt: "a sea <lora:woodcut:0.6>"'))
    assert frame.runner.started[0][0].theme == "sea"
    (tmp_path / "loras" / "woodcut.safetensors").unlink()
    frame.daemon.handle_request({"command": "regenerate"})
    frame.daemon.step()
    assert "sea: no LoRA named 'woodcut'" in frame.daemon.last_error
    assert len(frame.runner.started) == 1 and frame.daemon.current is None
    frame.clock.advance(seconds=61)
    frame.daemon.step()
    assert frame.runner.started[-1][0].theme == "hills", "the frame goes on with the next theme"


class FakePower:
    def __init__(self, refuse: str | None = None):
        self.refuse, self.switched = refuse, []

    def switch(self, action: str) -> None:
        self.switched.append(action)
        if self.refuse:
            from frame.power import PowerError

            raise PowerError(self.refuse)


@pytest.mark.parametrize("action", ["shutdown", "reboot"])
def test_a_button_switches_the_frame_off_or_restarts_it(tmp_path, action):
    config = CONFIG.replace("buttons: {hold_time: 0.1}", f"buttons: {{hold_time: 0.1, D: {{hold: {action}}}}}")
    frame = Frame(tmp_path, config)
    frame.daemon.power = power = FakePower()
    frame.clock.advance(seconds=200)              # the panel may refresh again
    before = (tmp_path / "panel" / "panel.png").stat().st_mtime_ns if (tmp_path / "panel" / "panel.png").exists() \
        else None
    frame.press(24, held=0.3)
    frame.step()
    assert power.switched == [action]
    panel = tmp_path / "panel" / "panel.png"
    shown = panel.exists() and panel.stat().st_mtime_ns != before
    assert shown == (action == "shutdown"), "a screen says the frame is off; a restart keeps the picture"


def test_a_refused_shutdown_is_an_error_on_the_panel_and_the_frame_goes_on(tmp_path):
    frame = Frame(tmp_path, CONFIG.replace("buttons: {hold_time: 0.1}", "buttons: {hold_time: 0.1, D: {hold: shutdown}}"))
    frame.daemon.power = FakePower(refuse="`systemctl --no-ask-password poweroff` was refused: Access denied")
    frame.press(24, held=0.3)
    frame.step()
    assert "shutdown failed:" in frame.daemon.last_error and "Access denied" in frame.daemon.last_error
    assert "could not shut down" in frame.daemon._error_screen
    assert frame.runner.job is not None, "the picture being made goes on"


def drop_in(frame: Frame, name: str = "juggernaut.safetensors", data: bytes = b"x" * 1000) -> Path:
    frame.models.mkdir(exist_ok=True)
    path = frame.models / name
    with open(path, "ab") as f:
        f.write(data)
    return path


def wait_seconds(frame: Frame, seconds: float) -> None:
    frame.clock.advance(seconds=seconds)
    frame.step()


def test_a_model_dropped_onto_the_models_drive_is_imported_once_its_copy_is_done(frame):
    job = frame.runner.started[0][0]
    model = drop_in(frame)
    wait_seconds(frame, CONFIG_POLL_SECONDS + 1)
    wait_seconds(frame, 40)
    drop_in(frame)                                  # still being copied
    wait_seconds(frame, 40)                         # the change is seen here
    wait_seconds(frame, 40)
    assert frame.runner.imports == []
    wait_seconds(frame, 25)
    assert frame.runner.imports == [(model, frame.models / "juggernaut")]
    assert frame.runner.stopped == [job.id]          # the picture waits at its checkpoint
    assert frame.daemon.snapshot["message"].startswith("importing juggernaut.safetensors: starting; sea: step 0/20")
    frame.step()                                      # the panel says so (outside quiet hours)
    assert frame.display.refreshes == 1 and frame.daemon.status_text().startswith("importing juggernaut")
    frame.runner.import_progress(400, 1000)
    frame.step()
    assert frame.daemon.snapshot["import"]["bytes_done"] == 400
    assert frame.daemon.snapshot["message"].startswith("importing juggernaut.safetensors: 40%")
    frame.press(16)                                   # C: skip, while the import runs: the import goes on
    frame.step()
    assert frame.runner.importing is not None and len(frame.runner.started) == 1
    frame.runner.import_finish()
    frame.step()
    assert frame.daemon.importing is None and len(frame.runner.started) == 2
    wait_seconds(frame, 600)
    assert len(frame.runner.imports) == 1             # imported once


def test_a_picture_stopped_for_an_import_resumes_from_its_checkpoint(frame):
    job = frame.runner.started[0][0]
    frame.runner.progress(7)
    drop_in(frame)
    wait_seconds(frame, CONFIG_POLL_SECONDS + 1)
    wait_seconds(frame, 61)
    assert frame.runner.stopped == [job.id] and frame.runner.job is None
    frame.runner.import_finish()
    frame.step()
    again = frame.runner.started[-1][0]
    assert again.id == job.id and len(frame.runner.started) == 2


def test_model_path_naming_a_single_file_is_imported_before_the_first_picture(tmp_path):
    (tmp_path / "models").mkdir()
    model = tmp_path / "models" / "mine.safetensors"
    model.write_bytes(b"x" * 100)
    (tmp_path / "frame.yaml").write_text(CONFIG.replace("path: model", "path: models/mine.safetensors"))
    f = Frame(tmp_path)
    try:
        assert f.runner.started == [] and "mine.safetensors is not imported yet" in f.daemon.last_error
        wait_seconds(f, 61)
        assert f.runner.imports == [(model, tmp_path / "models" / "mine")]
        f.runner.import_finish()
        f.step()
        wait_seconds(f, 61)                              # the "not imported" retry wait is over
        assert f.runner.started[0][0].model == str(tmp_path / "models" / "mine")
    finally:
        f.close()


def test_a_failed_import_is_on_the_panel_and_tried_again_only_for_a_new_copy(frame):
    drop_in(frame)
    wait_seconds(frame, CONFIG_POLL_SECONDS + 1)
    wait_seconds(frame, 61)
    frame.runner.import_fail("juggernaut.safetensors: truncated: tensor 'x' ends at byte 9 but the file has 5 bytes")
    wait_seconds(frame, 200)                           # the status screen asked for at the start goes up first
    wait_seconds(frame, 200)
    assert "Could not import juggernaut.safetensors" in frame.daemon.last_error
    assert "Could not import juggernaut.safetensors" in frame.daemon._error_on_panel
    assert len(frame.runner.started) == 2 and frame.runner.started[1][0].id == frame.runner.started[0][0].id
    wait_seconds(frame, 600)
    assert len(frame.runner.imports) == 1
    drop_in(frame)                                    # copied again
    wait_seconds(frame, CONFIG_POLL_SECONDS + 1)
    wait_seconds(frame, 61)
    assert len(frame.runner.imports) == 2


def test_stopping_the_daemon_stops_an_import(frame):
    drop_in(frame)
    wait_seconds(frame, CONFIG_POLL_SECONDS + 1)
    wait_seconds(frame, 61)
    frame.daemon.shutdown()
    assert frame.runner.stopped[-1] == "import juggernaut.safetensors"
