"""Telling systemd how the daemon is doing (sd_notify), and logging to the journal.

``Notifier`` sends READY=1, STATUS=..., WATCHDOG=1, RELOADING=1 and STOPPING=1 to the
socket in $NOTIFY_SOCKET: through systemd-python when it is installed, else over the
documented datagram protocol directly (it is one sendto). Outside systemd there is no
$NOTIFY_SOCKET and every call is a no-op returning False.

``Watchdog`` pings WATCHDOG=1 every half of $WATCHDOG_USEC from its own thread, but only
while the main loop has shown a sign of life within the whole watchdog interval, so a
hung main loop lets systemd restart the service while a long generation (in a child
process) never does.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping


class Notifier:
    """sd_notify for one process; ``env`` defaults to os.environ (tests pass their own)."""

    def __init__(self, env: Mapping[str, str] | None = None, use_systemd_python: bool = True):
        env = os.environ if env is None else env
        self.address = env.get("NOTIFY_SOCKET") or None
        self._watchdog_usec = env.get("WATCHDOG_USEC")
        self._watchdog_pid = env.get("WATCHDOG_PID")
        self._systemd = None
        if self.address and use_systemd_python and env is os.environ:
            try:
                from systemd import daemon   # systemd-python; reads $NOTIFY_SOCKET itself

                self._systemd = daemon
            except ImportError:
                pass
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, message: str) -> bool:
        """Send newline-separated assignments such as "READY=1\\nSTATUS=working"; False when not delivered."""
        if not self.address:
            return False
        if self._systemd is not None:
            return bool(self._systemd.notify(message))
        address = "\0" + self.address[1:] if self.address.startswith("@") else self.address
        with self._lock:
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                    sock.setblocking(False)   # a listener that stopped reading must never stall the main loop
                    sock.sendto(message.encode("utf-8", "replace"), address)
                return True
            except OSError:   # includes BlockingIOError: its queue is full, the message is dropped
                return False

    def ready(self, status: str) -> bool:
        return self.send(f"READY=1\nSTATUS={_one_line(status)}\nMAINPID={os.getpid()}")

    def status(self, status: str) -> bool:
        return self.send(f"STATUS={_one_line(status)}")

    def reloading(self) -> bool:
        return self.send("RELOADING=1")

    def stopping(self, status: str = "stopping") -> bool:
        return self.send(f"STOPPING=1\nSTATUS={_one_line(status)}")

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def watchdog_interval(self) -> float | None:
        """Seconds systemd waits for a WATCHDOG=1 (WatchdogSec), or None when no watchdog is set for us."""
        if not self._watchdog_usec:
            return None
        if self._watchdog_pid and self._watchdog_pid != str(os.getpid()):
            return None
        try:
            usec = int(self._watchdog_usec)
        except ValueError:
            return None
        return usec / 1e6 if usec > 0 else None


class Watchdog:
    """A thread pinging WATCHDOG=1 every half interval while ``alive()`` says the main loop is not stuck."""

    def __init__(self, notifier: Notifier, interval: float, last_beat: Callable[[], float],
                 clock: Callable[[], float] = time.monotonic):
        self.notifier = notifier
        self.interval = interval
        self._last_beat = last_beat
        self._clock = clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="slowframe-watchdog", daemon=True)
        self.pings = 0

    def start(self) -> Watchdog:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval / 2):
            if self._clock() - self._last_beat() < self.interval:
                if self.notifier.watchdog():
                    self.pings += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def setup_logging(level: str = "info", env: Mapping[str, str] | None = None) -> str:
    """Journal logging with structured fields under systemd (systemd-python), else plain stderr.

    Returns "journal" or "stderr". Fields passed as ``extra={"SLOWFRAME_THEME": ...}`` reach
    the journal as fields of their own (``journalctl -u slowframe SLOWFRAME_THEME=...``).
    """
    env = os.environ if env is None else env
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_slowframe", False):
            root.removeHandler(handler)
    handler: logging.Handler | None = None
    kind = "stderr"
    if env.get("JOURNAL_STREAM") or env.get("INVOCATION_ID"):
        try:
            from systemd.journal import JournalHandler

            handler = JournalHandler(SYSLOG_IDENTIFIER="slowframe")
            kind = "journal"
        except ImportError:
            handler = None
    if handler is None:
        handler = logging.StreamHandler(sys.stderr)
        # under systemd without systemd-python the journal adds its own timestamps
        fmt = "%(levelname)s %(name)s: %(message)s" if env.get("INVOCATION_ID") else \
            "%(asctime)s %(levelname)s %(name)s: %(message)s"
        handler.setFormatter(logging.Formatter(fmt, "%Y-%m-%d %H:%M:%S"))
    handler._slowframe = True
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
    return kind
