"""`slowframe show next|previous|latest` asks the running frame, which owns the panel."""

from __future__ import annotations

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
