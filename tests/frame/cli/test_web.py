"""`slowframe web` on the socket systemd passes (socket activation), and `slowframe web password`."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

from daemon_processes import ENV
from frame.web.auth import Credentials


def test_the_web_app_serves_on_the_socket_systemd_passes(tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]

    def as_systemd_passes_it() -> None:   # in the child: the socket as descriptor 3, as systemd does
        os.dup2(listener.fileno(), 3)

    # LISTEN_PID must be the server's own pid: the shell sets it and then becomes the server
    command = ["sh", "-c", 'LISTEN_PID=$$ LISTEN_FDS=1 exec "$@"', "sh", sys.executable, "-m", "frame.cli", "web",
               "--state-dir", str(tmp_path / "web"), "--cache-dir", str(tmp_path / "cache"),
               "--socket", str(tmp_path / "none.sock")]
    server = subprocess.Popen(command, env=ENV, pass_fds=(listener.fileno(), 3), preexec_fn=as_systemd_passes_it,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    listener.close()   # only the server holds it now
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                opener = urllib.request.build_opener(NoRedirect)
                opener.open(f"http://127.0.0.1:{port}/", timeout=5)
            except urllib.error.HTTPError as exc:
                assert exc.code == 302 and exc.headers["Location"] == "/pair"   # no password yet: pair first
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, server.stdout.read().decode()
                time.sleep(0.2)
    finally:
        server.terminate()
        server.wait(10)
    assert b"serving on the socket systemd passed" in server.stdout.read()


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def test_the_password_is_set_from_standard_input_and_refused_when_short(tmp_path):
    folder = tmp_path / "web"
    run = [sys.executable, "-m", "frame.cli", "web", "password", "--state-dir", str(folder)]
    short = subprocess.run(run, input="short\n", text=True, env=ENV, capture_output=True)
    assert short.returncode == 1 and "at least 8" in short.stderr and not Credentials(folder).is_set
    good = subprocess.run(run, input="a long password\n", text=True, env=ENV, capture_output=True)
    assert good.returncode == 0 and Credentials(folder).verify("a long password")
    assert oct((folder / "web-password.json").stat().st_mode & 0o777) == "0o600"
