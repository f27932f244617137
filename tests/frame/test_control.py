"""The control socket survives hostile clients: bounded requests, slow and many clients, buggy handlers."""

from __future__ import annotations

import json
import os
import socket
import stat
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from frame import control


@pytest.fixture
def server(tmp_path):
    replies = {"status": lambda r: {"ok": True, "state": "idle"},
               "boom": lambda r: 1 / 0,
               "unserialisable": lambda r: {"ok": True, "value": object()}}
    srv = control.ControlServer(tmp_path / "run" / control.SOCKET_NAME,
                                lambda request: replies.get(request["command"], lambda r: {"ok": False})(request))
    srv.start()
    yield srv
    srv.close()


def send_raw(path, payload: bytes, timeout: float = 10.0) -> dict:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(str(path))
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)   # a request without a newline ends where the client stops writing
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    return json.loads(data)


def status(server) -> dict:
    return control.request("status", server.path, timeout=10)


def test_deeply_nested_json_is_a_bad_request_and_the_server_lives_on(server):
    reply = send_raw(server.path, b"[" * 60000 + b"\n")
    assert reply["ok"] is False and "nested" in reply["message"]
    assert status(server)["state"] == "idle"


def test_an_oversized_request_is_refused_by_its_size(server):
    reply = send_raw(server.path, b'{"command": "' + b"x" * (control.MAX_REQUEST + 10) + b'"}\n')
    assert reply == {"ok": False, "message": f"bad request: longer than {control.MAX_REQUEST} bytes"}
    assert status(server)["ok"]


@pytest.mark.parametrize("payload", [b"\xff\xfe\n", b"null\n", b'{"command": 5}\n', b"\n", b'{"command": "status"'])
def test_malformed_requests_get_a_reply_not_a_dead_server(server, payload):
    reply = send_raw(server.path, payload)
    assert reply["ok"] is False and reply["message"].startswith("bad request")
    assert status(server)["ok"]


def test_a_handler_bug_is_an_internal_error_reply(server):
    assert send_raw(server.path, b'{"command": "boom"}\n')["message"].startswith("internal error")
    assert send_raw(server.path, b'{"command": "unserialisable"}\n')["message"].startswith("internal error")
    assert status(server)["ok"]


def test_a_client_trickling_bytes_does_not_block_others(server):
    slow = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    slow.connect(str(server.path))
    slow.sendall(b'{"comm')
    try:
        assert status(server)["state"] == "idle"   # answered while the slow client still holds its line open
    finally:
        slow.close()


def test_a_silent_client_is_dropped_at_its_deadline(server, monkeypatch):
    monkeypatch.setattr(control, "CLIENT_SECONDS", 0.3)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as silent:
        silent.settimeout(10)
        silent.connect(str(server.path))
        assert silent.recv(100) == b""      # closed by the server, without a reply


def test_more_clients_than_slots_get_a_busy_reply_then_service_resumes(server):
    held = []
    try:
        for _ in range(control.MAX_CLIENTS):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(str(server.path))
            held.append(sock)
        busy = None
        for _ in range(50):    # the slots fill as the server accepts the held connections
            reply = send_raw(server.path, b'{"command": "status"}\n')
            if not reply["ok"]:
                busy = reply
                break
            threading.Event().wait(0.05)
        assert busy is not None and "busy" in busy["message"]
    finally:
        for sock in held:
            sock.close()
    for _ in range(100):
        if send_raw(server.path, b'{"command": "status"}\n')["ok"]:
            break
        threading.Event().wait(0.05)
    else:
        pytest.fail("the slots were not given back when the clients left")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(line=st.binary(max_size=300) | st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_fuzzed_lines_always_get_a_json_reply(server, line):
    reply = send_raw(server.path, line.replace(b"\n", b" ") + b"\n")
    assert isinstance(reply, dict) and isinstance(reply.get("ok"), bool)


def test_the_socket_folder_is_made_private(tmp_path):
    folder = tmp_path / "new" / "run"
    srv = control.ControlServer(folder / control.SOCKET_NAME, lambda r: {"ok": True})
    try:
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    finally:
        srv.close()


def test_a_folder_others_may_write_is_refused(tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o777)
    with pytest.raises(PermissionError, match="writable by other users"):
        control.ControlServer(folder / control.SOCKET_NAME, lambda r: {"ok": True})
    assert not (folder / control.SOCKET_NAME).exists()


def test_a_symlinked_folder_is_refused(tmp_path):
    (tmp_path / "real").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(PermissionError, match="not a folder"):
        control.ControlServer(tmp_path / "link" / control.SOCKET_NAME, lambda r: {"ok": True})


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_a_folder_owned_by_someone_else_is_refused(tmp_path):
    folder = tmp_path / "theirs"
    folder.mkdir(mode=0o700)
    os.chown(folder, 65534, 65534)
    with pytest.raises(PermissionError, match="belongs to user id 65534"):
        control.ControlServer(folder / control.SOCKET_NAME, lambda r: {"ok": True})
