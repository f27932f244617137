"""A daemon with its control socket open, for the tests of the socket's commands and of the web app.

It is the daemon tests' Frame (tests/frame/test_daemon.py: the file display, a fake clock, a runner
the test drives) with the real control socket in ``root/run``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from frame import control

_spec = importlib.util.spec_from_file_location("daemon_tests", Path(__file__).parent / "frame" / "test_daemon.py")
_daemon_tests = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_daemon_tests)
CONFIG = _daemon_tests.CONFIG


class SocketFrame(_daemon_tests.Frame):
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
