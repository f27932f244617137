"""systemd supervision without systemd: sd_notify over a test socket, the watchdog thread, logging."""

from __future__ import annotations

import logging
import os
import socket
import threading

import pytest

from frame.notify import Notifier, Watchdog, setup_logging


@pytest.fixture
def sink(tmp_path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(str(tmp_path / "notify"))
    s.settimeout(5)
    yield s
    s.close()


def test_messages_arrive_as_systemd_expects_them(tmp_path, sink):
    notifier = Notifier(env={"NOTIFY_SOCKET": str(tmp_path / "notify")})
    assert notifier.ready("sea: step 0/20")
    assert sink.recv(4096).decode() == f"READY=1\nSTATUS=sea: step 0/20\nMAINPID={os.getpid()}"
    assert notifier.status("two\nlines")
    assert sink.recv(4096).decode() == "STATUS=two lines"
    assert notifier.reloading() and sink.recv(4096) == b"RELOADING=1"
    assert notifier.stopping() and sink.recv(4096) == b"STOPPING=1\nSTATUS=stopping"


def test_abstract_socket_addresses_work():
    name = f"slowframe-test-{os.getpid()}"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind("\0" + name)
    s.settimeout(5)
    try:
        assert Notifier(env={"NOTIFY_SOCKET": "@" + name}).watchdog()
        assert s.recv(64) == b"WATCHDOG=1"
    finally:
        s.close()


def test_outside_systemd_every_call_is_a_harmless_no_op():
    notifier = Notifier(env={})
    assert not notifier.enabled
    assert notifier.ready("x") is False and notifier.watchdog() is False
    assert notifier.watchdog_interval() is None


def test_a_listener_that_stopped_reading_never_blocks_the_sender(tmp_path, sink):
    notifier = Notifier(env={"NOTIFY_SOCKET": str(tmp_path / "notify")})
    results = [notifier.status(f"message {i}") for i in range(2000)]
    assert results[0] is True and results[-1] is False   # the queue filled up; the rest were dropped


def test_watchdog_interval_comes_from_the_environment():
    env = {"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "300000000"}
    assert Notifier(env=env).watchdog_interval() == 300.0
    assert Notifier(env={**env, "WATCHDOG_PID": str(os.getpid())}).watchdog_interval() == 300.0
    assert Notifier(env={**env, "WATCHDOG_PID": "1"}).watchdog_interval() is None   # meant for another process
    assert Notifier(env={**env, "WATCHDOG_USEC": "0"}).watchdog_interval() is None


def test_watchdog_pings_only_while_the_main_loop_is_alive():
    class Counting(Notifier):
        def __init__(self):
            super().__init__(env={})
            self.pings = threading.Semaphore(0)

        def watchdog(self) -> bool:
            self.pings.release()
            return True

    notifier = Counting()
    now = [100.0]
    beat = [100.0]
    dog = Watchdog(notifier, interval=0.1, last_beat=lambda: beat[0], clock=lambda: now[0]).start()
    try:
        assert notifier.pings.acquire(timeout=5)     # alive: pings every 0.05 s
        now[0] = 100.2                               # the main loop has not beaten for 2 intervals
        while notifier.pings.acquire(timeout=0.2):   # let pings in flight drain
            pass
        assert not notifier.pings.acquire(timeout=0.3)
        beat[0] = 100.2                              # it beats again
        assert notifier.pings.acquire(timeout=5)
    finally:
        dog.stop()


def test_logging_goes_to_stderr_outside_systemd():
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        assert setup_logging("debug", env={}) == "stderr"
        ours = [h for h in root.handlers if getattr(h, "_slowframe", False)]
        assert len(ours) == 1 and root.level == logging.DEBUG
        assert setup_logging("info", env={}) == "stderr"      # set up twice: still one handler
        assert len([h for h in root.handlers if getattr(h, "_slowframe", False)]) == 1
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
