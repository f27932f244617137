"""`slowframe status`: what the daemon's status reply says, as lines for people."""

from __future__ import annotations

from frame import control
from frame.cli import main

REPLY = {"message": "importing juggernaut.safetensors: 40%; sea: step 3/20 (waits for it)", "config_errors": [],
         "last_error": None,
         "import": {"source": "/models/juggernaut.safetensors", "dest": "/models/juggernaut",
                    "bytes_done": 2_000_000_000, "bytes_total": 5_000_000_000, "started": "2025-03-01T06:02:00"},
         "job": {"id": "j1", "prompt": "a calm sea", "seed": 1, "steps": 20, "size": "1280x768", "preset": "rpi"}}


def test_status_shows_a_running_import(monkeypatch, capsys):
    monkeypatch.setattr(control, "request", lambda command, socket=None: REPLY)
    assert main(["status"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == REPLY["message"]
    assert lines[1] == ("  importing /models/juggernaut.safetensors into /models/juggernaut: 2.00 of 5.00 GB written "
                        "(since 2025-03-01T06:02:00)")
