"""A daemon with its control socket open, for the tests of the socket's commands and of the web app.

It is the daemon tests' Frame (tests/daemon_frames.py: the file display, a fake clock, a runner
the test drives) with the real control socket in ``root/run``.
"""

from __future__ import annotations

from pathlib import Path

from daemon_frames import CONFIG, Frame
from frame import control

__all__ = ["CONFIG", "SocketFrame"]


class SocketFrame(Frame):
    def __init__(self, tmp_path: Path, **kwargs):
        super().__init__(tmp_path, **kwargs)
        self.daemon.runtime_dir = tmp_path / "run"
        self.daemon._control = control.ControlServer(tmp_path / "run" / control.SOCKET_NAME,
                                                     self.daemon.handle_request).start()
        self.socket = self.daemon._control.path

    def ask(self, command: str, **fields) -> dict:
        return control.request(command, self.socket, **fields)

    def finish_one(self, hour: int = 7) -> None:
        """The runner finishes the job, and the clock reaches its time: it goes up and into the history."""
        self.runner.finish()
        self.step()
        self.at(hour, 1)
