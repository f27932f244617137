"""Real slowframe processes for the tests: the environment that finds the tests' fakes, and `slowframe run`."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(REPO), os.environ.get("PYTHONPATH", "")])}


class Daemon:
    """`python -m frame.cli run` in a temporary folder, with a notify socket and the fake generator."""

    def __init__(self, root: Path, config: str, watchdog_usec: int | None = None,
                 generator: str = "frame_fakes:load_fake", state_dir: Path | None = None):
        self.root = root
        self.notify_path = root / "notify.sock"
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notify.bind(str(self.notify_path))
        self.notify.settimeout(0.2)
        (root / "frame.yaml").write_text(config)
        self.messages: list[str] = []
        self.log = open(root / "daemon.log", "ab")
        env = {**ENV, "NOTIFY_SOCKET": str(self.notify_path)}
        if watchdog_usec:
            env["WATCHDOG_USEC"] = str(watchdog_usec)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "frame.cli", "run", "--config", str(root / "frame.yaml"),
             "--state-dir", str(state_dir or root / "state"), "--runtime-dir", str(root / "run"),
             "--generator", generator], env=env, stdout=self.log, stderr=self.log, cwd=root)

    def wait_for(self, predicate, what: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                message = self.notify.recv(4096).decode()
            except TimeoutError:
                if self.proc.poll() is not None:
                    break
                continue
            self.messages.append(message)
            if predicate(message):
                return message
        raise AssertionError(f"no {what} within {timeout} s; messages {self.messages[-8:]}; log:\n{self.logtext()}")

    def logtext(self) -> str:
        return (self.root / "daemon.log").read_text(errors="replace")[-4000:]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.notify.close()
        self.log.close()
