"""The web app's socket commands, through a real control socket to a daemon on the file display."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from PIL import Image, ImageStat

from engine.atomic import write_bytes
from frame import commands, configsave, control
from socket_frames import CONFIG, SocketFrame

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def frame(tmp_path):
    f = SocketFrame(tmp_path)
    yield f
    f.close()


def ask(frame, command: str, **fields) -> dict:
    return frame.ask(command, **fields)


def finish_one(frame) -> None:
    frame.finish_one()


def test_config_is_read_with_its_path_version_and_problems(frame):
    reply = ask(frame, "config")
    assert reply["ok"] and reply["path"] == str(frame.config_path) and reply["text"] == CONFIG
    assert reply["version"] == commands.text_version(CONFIG) and reply["problems"] == []


def test_a_config_with_errors_is_refused_with_line_and_column_and_the_file_is_unchanged(frame):
    version = ask(frame, "config")["version"]
    broken = CONFIG.replace("order: sequential", "order: sequentail")
    reply = ask(frame, "config_replace", text=broken, version=version)
    assert not reply["ok"] and "nothing was saved" in reply["message"]
    [problem] = [p for p in reply["problems"] if p["severity"] == "error"]
    assert (problem["line"], problem["column"]) == (7, 8) and "sequential" in problem["message"]
    assert frame.config_path.read_text() == CONFIG
    assert not commands.backup_path(frame.config_path).exists()


def test_a_yaml_bomb_is_refused_and_the_daemon_lives_on(frame):
    version = ask(frame, "config")["version"]
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{n}: &{n} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, n in zip("abcdefgh", "bcdefghi"))
    reply = ask(frame, "config_replace", text=bomb, version=version)
    assert not reply["ok"] and reply["problems"] and frame.config_path.read_text() == CONFIG
    assert ask(frame, "status")["ok"]


def test_a_good_edit_lands_with_the_previous_version_kept_and_is_reloaded(frame):
    version = ask(frame, "config")["version"]
    edited = CONFIG.replace("keep: 3", "keep: 5")
    reply = ask(frame, "config_replace", text=edited, version=version)
    assert reply["ok"], reply
    assert frame.config_path.read_text() == edited
    assert commands.backup_path(frame.config_path).read_text() == CONFIG
    assert not [p for p in frame.config_path.parent.iterdir() if p.name.endswith(".tmp")]
    frame.step()
    assert frame.daemon.config.history.keep == 5
    stale = ask(frame, "config_replace", text=CONFIG, version=version)   # made from the text before the edit
    assert not stale["ok"] and stale["conflict"] and frame.config_path.read_text() == edited


@pytest.mark.parametrize("fields", [{}, {"text": 5, "version": "x"}, {"text": "a: 1", "version": None},
                                    {"text": "\ud800", "version": "x"}])
def test_bad_config_replace_requests_are_refused(frame, fields):
    reply = ask(frame, "config_replace", **fields)
    assert not reply["ok"] and frame.config_path.read_text() == CONFIG


class CommitUnit:
    """What slowframe-config.path and .service do on the frame: a thread that sees the request the daemon leaves in
    its runtime folder and runs the root step on it, saving to ``target`` (the card); with ``process``, as the
    service does, `slowframe config commit` in a process of its own (the results are then its exit statuses)."""

    def __init__(self, folder, target, before=None, process=False):
        self.folder, self.target, self.before, self.process = folder, target, before, process
        self.results: list = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self):
        while not self._stop.wait(0.02):
            if os.path.lexists(self.folder / configsave.REQUEST_NAME):
                if self.before is not None:
                    self.before(self)
                self.results.append(self._commit())

    def _commit(self):
        if not self.process:
            return configsave.commit(self.folder, self.target)
        return subprocess.run([sys.executable, "-m", "frame.cli", "config", "commit", "--folder", str(self.folder),
                               "--file", str(self.target)], cwd=REPO, capture_output=True, check=False).returncode

    def close(self):
        self._stop.set()
        self._thread.join()


@pytest.fixture
def card(frame, monkeypatch, tmp_path):
    """The frame as it is on the card: the daemon may not write the config's folder, the commit unit is installed."""
    unit = tmp_path / "slowframe-config.path"
    unit.write_text("[Path]\n")
    monkeypatch.setattr(configsave, "can_write", lambda folder: folder != frame.config_path.parent)
    frame.daemon.config_writer = configsave.ConfigWriter(frame.daemon.runtime_dir, unit=unit,
                                                         target=frame.config_path, seconds=3)
    return unit


@pytest.mark.parametrize("process", [False, True], ids=["thread", "process"])
def test_on_the_card_a_good_edit_is_saved_by_the_root_step_with_the_backup_and_reloaded(frame, card, process):
    frame.daemon.config_writer.seconds = 20   # a process starts Python and imports the checker
    unit = CommitUnit(frame.daemon.runtime_dir, frame.config_path, process=process)
    try:
        version = ask(frame, "config")["version"]
        edited = CONFIG.replace("keep: 3", "keep: 5")
        reply = ask(frame, "config_replace", text=edited, version=version)
    finally:
        unit.close()
    assert reply["ok"] and reply["message"] == f"saved {frame.config_path}; the frame reloads it now", reply
    assert [0 if process else True] == [r if process else r["ok"] for r in unit.results]   # one commit, saved
    assert frame.config_path.read_text() == edited and commands.backup_path(frame.config_path).read_text() == CONFIG
    assert sorted(p.name for p in frame.daemon.runtime_dir.iterdir()) == [control.SOCKET_NAME]   # nothing left
    frame.step()
    assert frame.daemon.config.history.keep == 5
    stale = ask(frame, "config_replace", text=CONFIG, version=version)   # the version check stays the daemon's
    assert not stale["ok"] and stale["conflict"] and frame.config_path.read_text() == edited


def test_on_the_card_a_refusal_of_the_root_step_is_the_answer(frame, card, tmp_path):
    unit = CommitUnit(frame.daemon.runtime_dir, tmp_path / "unmounted" / "slowframe.yaml")
    try:
        reply = ask(frame, "config_replace", text=CONFIG.replace("keep: 3", "keep: 5"),
                    version=ask(frame, "config")["version"])
    finally:
        unit.close()
    assert not reply["ok"] and "cannot write" in reply["message"] and "nothing was changed" in reply["message"]
    assert frame.config_path.read_text() == CONFIG and not commands.backup_path(frame.config_path).exists()


def test_on_the_card_a_late_answer_to_an_earlier_edit_is_not_taken_for_this_one(frame, card):
    def earlier_answer_first(unit):
        write_bytes(unit.folder / configsave.RESULT_NAME,
                    json.dumps({"request": "0" * 16, "ok": False, "message": "an earlier edit's answer"}).encode())
        time.sleep(0.3)

    unit = CommitUnit(frame.daemon.runtime_dir, frame.config_path, before=earlier_answer_first)
    try:
        edited = CONFIG.replace("keep: 3", "keep: 4")
        reply = ask(frame, "config_replace", text=edited, version=ask(frame, "config")["version"])
    finally:
        unit.close()
    assert reply["ok"], reply
    assert frame.config_path.read_text() == edited


def test_on_the_card_with_the_root_step_not_running_the_edit_is_withdrawn_after_the_wait(frame, card):
    frame.daemon.config_writer.seconds = 0.3
    reply = ask(frame, "config_replace", text=CONFIG.replace("keep: 3", "keep: 5"),
                version=ask(frame, "config")["version"])
    assert not reply["ok"]
    assert "did not take the edit within 0.3 s; nothing was saved" in reply["message"]
    assert "systemctl enable --now slowframe-config.path" in reply["message"]
    assert not (frame.daemon.runtime_dir / configsave.REQUEST_NAME).exists()   # a late start finds nothing
    assert frame.config_path.read_text() == CONFIG


def test_on_the_card_a_root_step_that_takes_the_edit_and_never_answers_says_so(frame, card):
    frame.daemon.config_writer.seconds = 0.3
    unit = CommitUnit(frame.daemon.runtime_dir, frame.config_path,   # taken, then the step dies before answering
                      before=lambda u: (u.folder / configsave.REQUEST_NAME).unlink())
    try:
        reply = ask(frame, "config_replace", text=CONFIG.replace("keep: 3", "keep: 5"),
                    version=ask(frame, "config")["version"])
    finally:
        unit.close()
    assert not reply["ok"] and "took the edit but did not answer within 0.3 s" in reply["message"]
    assert "journalctl -u slowframe-config.service" in reply["message"]


def test_without_the_root_step_or_for_another_file_the_message_says_what_to_do(frame, card, tmp_path):
    card.unlink()
    reply = ask(frame, "config_replace", text=CONFIG, version=ask(frame, "config")["version"])
    assert not reply["ok"] and "may not write" in reply["message"] and str(card) in reply["message"]
    assert "install systemd/slowframe-config.path" in reply["message"] and "nothing was saved" in reply["message"]
    frame.daemon.config_writer.target = tmp_path / "card" / "slowframe.yaml"
    reply = ask(frame, "config_replace", text=CONFIG, version=ask(frame, "config")["version"])
    assert not reply["ok"] and f"the root step saves only {tmp_path / 'card'}" in reply["message"]
    assert frame.config_path.read_text() == CONFIG and not list(frame.daemon.runtime_dir.glob("config-*"))


def test_history_lists_sends_and_deletes_pictures_by_id_only(frame):
    finish_one(frame)
    [entry] = ask(frame, "history")["entries"]
    assert entry["theme"] == "sea" and entry["seed"] == frame.runner.started[0][0].seed
    reply, file = control.exchange("history_file", frame.daemon._control.path, id=entry["id"])
    with file:
        assert reply["ok"] and file.read() == frame.daemon.history.get(entry["id"]).image.read_bytes()
    for bad in ("../state.json", "/etc/passwd", entry["id"] + "/..", 5, None):
        reply, file = control.exchange("history_file", frame.daemon._control.path, id=bad)
        assert not reply["ok"] and file is None
        assert not ask(frame, "history_delete", id=bad)["ok"]
    assert ask(frame, "history_delete", id=entry["id"])["ok"]
    assert ask(frame, "history")["entries"] == []


def test_show_a_history_picture_by_id(frame):
    finish_one(frame)
    frame.runner.finish()
    frame.at(19, 1)
    first = ask(frame, "history")["entries"][0]["id"]
    assert ask(frame, "show", id=first)["ok"]
    frame.clock.advance(seconds=200)
    frame.step()
    assert frame.daemon.shown_id == first
    assert not ask(frame, "show", id="nope")["ok"]


def upload(frame, image: Image.Image, pin: bool) -> dict:
    with tempfile.TemporaryFile() as f:
        image.save(f, format="PNG")
        f.seek(0)
        reply, _ = control.exchange("upload", frame.daemon._control.path, send=f.fileno(), pin=pin)
    return reply


def test_an_upload_goes_on_the_panel_and_pinned_it_stays(frame):
    frame.clock.advance(seconds=200)
    assert upload(frame, Image.new("RGB", (300, 200), (0, 0, 255)), pin=True)["ok"]
    frame.step()
    red, green, blue = ImageStat.Stat(Image.open(frame.display.look_path).convert("RGB")).mean
    assert blue > 2 * red and blue > 2 * green   # the blue photo is up, in the panel's blue ink
    assert frame.daemon.pinned and ask(frame, "status")["pinned"]
    frame.runner.finish()
    frame.at(7, 30)
    assert frame.daemon.current is not None and frame.daemon.current.finished   # ready, but waits
    assert "pinned" in frame.daemon.snapshot["message"]
    assert ask(frame, "unpin")["ok"]
    frame.step()
    assert [e.theme for e in frame.daemon.history.entries()] == ["sea"]   # shown at last, the next one begun
    assert frame.daemon.current.job.theme == "hills"


def test_an_upload_that_is_not_a_picture_or_too_big_is_refused(frame):
    with tempfile.TemporaryFile() as f:
        f.write(b"not a picture")
        f.seek(0)
        reply, _ = control.exchange("upload", frame.daemon._control.path, send=f.fileno())
    assert not reply["ok"] and "not a picture" in reply["message"] and str(frame.root) not in reply["message"]
    assert not list((frame.daemon.state_dir / "uploads").iterdir())
    assert not ask(frame, "upload")["ok"]   # no file sent
    read, write = os.pipe()
    os.close(write)
    reply, _ = control.exchange("upload", frame.daemon._control.path, send=read)
    os.close(read)
    assert not reply["ok"] and "regular file" in reply["message"]


def test_preview_says_there_is_none_until_the_worker_writes_one(frame):
    assert ask(frame, "preview") == {"ok": True, "preview": False,
                                     "message": "no preview of the picture in progress yet"}
    Image.new("RGB", (8, 8)).save(commands.preview_file(frame.daemon))
    reply, file = control.exchange("preview", frame.daemon._control.path)
    with file:
        assert reply["preview"] and Image.open(file).size == (8, 8)


def test_system_reports_disk_model_and_the_recent_log(frame, monkeypatch, tmp_path):
    (tmp_path / "temp").write_text("48312\n")
    monkeypatch.setattr(commands, "THERMAL", tmp_path / "temp")
    ask(frame, "skip")
    frame.step()
    reply = ask(frame, "system")
    assert reply["temperature"] == pytest.approx(48.312) and reply["model_found"]
    assert reply["disk"]["total"] > 0 and any("skip" in line for line in reply["log"])


def test_power_asks_systemd_through_a_request_file_and_nothing_else(frame):
    assert ask(frame, "power", action="reboot")["ok"]
    frame.step()                                   # the main loop takes it as it takes a button's
    assert (frame.root / "run" / "reboot").exists()
    assert not ask(frame, "power", action="../../etc/x")["ok"]
    assert sorted(p.name for p in (frame.root / "run").iterdir()) == [control.SOCKET_NAME, "reboot"]


@pytest.mark.parametrize("fields", [{"url": "http://frame.test/", "code": "abc"},
                                    {"url": "javascript:alert(1)", "code": "ABCD2345"},
                                    {"url": "http://frame.test/\nx", "code": "ABCD2345"}, {}])
def test_a_pairing_screen_needs_an_address_and_a_code_of_the_right_form(frame, fields):
    assert not ask(frame, "pairing", **fields)["ok"]
    assert not (frame.daemon.state_dir / "uploads").exists()


def test_the_pairing_screen_goes_on_the_panel_in_its_size(frame):
    assert ask(frame, "pairing", url="http://frame.test/", code="ABCD2345")["ok"]
    [card] = (frame.daemon.state_dir / "uploads").iterdir()
    assert Image.open(card).size == frame.display.size


def test_make_again_starts_a_new_picture_of_the_entrys_theme_at_once(frame):
    finish_one(frame)
    [entry] = ask(frame, "history")["entries"]
    assert frame.daemon.current.job.theme == "hills"   # the next theme was begun
    assert ask(frame, "again", id=entry["id"])["ok"]
    frame.step()
    job = frame.daemon.current.job
    assert job.theme == "sea" and job.requested and job.id != entry["id"]
    assert not ask(frame, "again", id="../x")["ok"]
