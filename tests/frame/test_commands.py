"""The web app's socket commands, through a real control socket to a daemon on the file display."""

from __future__ import annotations

import os
import tempfile

import pytest
from PIL import Image, ImageStat

from frame import commands, control
from socket_frames import CONFIG, SocketFrame


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
