"""`slowframe show next|previous|latest` asks the running frame, which owns the panel, at the socket its help names."""

from __future__ import annotations

import pytest

import frame.control
from frame.cli import main


def test_history_words_go_to_the_running_daemon(monkeypatch, capsys):
    asked = []

    def fake_request(command, socket_path=None, **fields):
        asked.append((command, fields))
        return {"ok": True, "message": "showing picture 3 of 7"}
    monkeypatch.setattr(frame.control, "request", fake_request)
    for which in ("next", "previous", "latest"):
        assert main(["show", which]) == 0
    assert asked == [("show", {"which": "next"}), ("show", {"which": "previous"}), ("show", {"which": "latest"})]
    assert "showing picture 3 of 7" in capsys.readouterr().out


def test_a_refusal_from_the_daemon_is_exit_status_1(monkeypatch, capsys):
    monkeypatch.setattr(frame.control, "request", lambda *a, **k: {"ok": False, "message": "no older picture"})
    assert main(["show", "previous"]) == 1
    assert "no older picture" in capsys.readouterr().out


def test_show_takes_the_socket_of_the_frame_to_ask(monkeypatch):
    asked = []
    monkeypatch.setattr(frame.control, "request",
                        lambda command, socket_path=None, **fields: asked.append(socket_path) or {"ok": True})
    assert main(["show", "next", "--socket", "/run/other/control.sock"]) == 0
    assert asked == ["/run/other/control.sock"]


@pytest.mark.parametrize("command", [["status"], ["skip"], ["regenerate"], ["reload"], ["show", "next"]])
def test_help_names_the_socket_the_error_names(command, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(tmp_path / "runtime"))
    with pytest.raises(SystemExit):
        main([command[0], "--help"])
    help_text = "".join(capsys.readouterr().out.split())   # argparse wraps long paths at their hyphens
    assert main(command) == 1
    error = capsys.readouterr().err
    socket = tmp_path / "runtime" / "control.sock"
    assert f"no socket at {socket}" in error
    assert f"defaulthere:{socket}" in help_text
