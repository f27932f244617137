"""The web app's memory and speed while serving: RSS after N requests, and the Now page's latency.

    nice -n 10 python3 bench/web.py              # 1000 requests (about a minute on 2 cores)
    nice -n 10 python3 bench/web.py --requests 200

Starts `slowframe run` (the tests' fake generator: it paints a picture in a few seconds with no model,
so the daemon costs nothing here) with the file display, and `slowframe web` on a local port, sets a
password with `slowframe web password`, signs in over HTTP, then makes N requests in a bounded loop,
cycling through the pages a phone loads (Now, History with its thumbnails, Themes, a theme's form,
Settings, YAML, Upload, System; every fifth a POST of the unchanged settings). Prints the web
process's RSS (VmRSS) and peak (VmHWM) from /proc before and after, and the Now page's p50/p95/max.
Issue 29's targets: RSS <= 40 MB after 1000 requests.
"""

from __future__ import annotations

import argparse
import http.cookiejar
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from daemon_processes import ENV, Daemon  # noqa: E402
from frame_fakes import write_fake_model  # noqa: E402

CONFIG = """\
model: {path: model, preset: default}
display: {backend: file, panel: spectra6-7.3, output: panel, min_interval: 0}
themes:
  - {name: harbour, prompt: "a {quiet|misty} harbour", steps: 4}
  - {name: hills, prompt: "green hills", steps: 4}
buttons: {enabled: false}
history: {keep: 30}
"""
UNIT_ENVIRONMENT = dict(line.split("=", 1)[1].split("=", 1) for line in (REPO / "systemd" / "slowframe-web.service")
                        .read_text().splitlines() if line.startswith("Environment="))   # as the service runs it
PAGES = ["/", "/history", "/themes", "/themes/0", "/settings", "/config", "/upload", "/system"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def memory(pid: int) -> dict[str, float]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0]) * 1024 / 1e6
    return fields


class Phone:
    """A signed-in HTTP client with the session cookie, like a phone's browser."""

    def __init__(self, base: str):
        self.base = base
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        self.token = ""

    def get(self, path: str) -> tuple[int, bytes]:
        with self.opener.open(self.base + path, timeout=30) as response:
            body = response.read()
        match = re.search(rb'name="csrf_token" value="([^"]+)"', body)
        if match:
            self.token = match[1].decode()
        return response.status, body

    def post(self, path: str, fields: dict) -> int:
        data = urllib.parse.urlencode({**fields, "csrf_token": self.token}).encode()
        request = urllib.request.Request(self.base + path, data=data, headers={"Origin": self.base})
        with self.opener.open(request, timeout=30) as response:
            response.read()
            return response.status


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        write_fake_model(root / "model")
        daemon = Daemon(root, CONFIG)
        port = free_port()
        password = "bench password"
        subprocess.run([sys.executable, "-m", "frame.cli", "web", "password", "--state-dir", str(root / "web")],
                       input=password + "\n", text=True, env=ENV, check=True, capture_output=True)
        log = open(root / "web.log", "ab")
        web = subprocess.Popen([sys.executable, "-m", "frame.cli", "web", "--listen", f"127.0.0.1:{port}",
                                "--socket", str(root / "run" / "control.sock"), "--state-dir", str(root / "web"),
                                "--cache-dir", str(root / "web-cache")], env={**ENV, **UNIT_ENVIRONMENT},
                               stdout=log, stderr=log)
        try:
            daemon.wait_for(lambda m: "READY=1" in m, "the daemon", 60)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.2)
            while len(list((root / "state" / "history").glob("*.json"))) < 6:   # pictures for History to show
                time.sleep(0.5)
            phone = Phone(f"http://127.0.0.1:{port}")
            phone.get("/login")
            assert phone.post("/login", {"password": password}) == 200   # followed to the Now page
            started = memory(web.pid)
            now_seconds: list[float] = []
            thumbs: list[str] = []
            t0 = time.perf_counter()
            for n in range(args.requests):
                if n % 5 == 4:
                    phone.get("/settings")
                    status = phone.post("/settings", {"times": "", "quiet_hours": "", "order": "shuffle",
                                                      "panel": "spectra6-7.3", "orientation": "landscape",
                                                      "keep": "30"})
                elif thumbs and n % 7 == 3:
                    status, _ = phone.get(thumbs[n % len(thumbs)])
                else:
                    page = PAGES[n % len(PAGES)]
                    began = time.perf_counter()
                    status, body = phone.get(page)
                    if page == "/":
                        now_seconds.append(time.perf_counter() - began)
                    if page == "/history":
                        thumbs = sorted(set(re.findall(r'src="(/history/[^"]+/thumb\.jpg)"', body.decode())))
                assert status == 200, (n, status)
            total = time.perf_counter() - t0
            after = memory(web.pid)
        finally:
            web.terminate()
            web.wait(10)
            log.close()
            daemon.close()
    now_seconds.sort()
    p = lambda q: now_seconds[min(len(now_seconds) - 1, int(q * len(now_seconds)))] * 1000  # noqa: E731
    print(f"requests: {args.requests} in {total:.1f} s ({args.requests / total:.0f}/s, threads: 2)")
    print(f"web process RSS: {started['VmRSS']:.1f} MB after sign-in, {after['VmRSS']:.1f} MB after "
          f"{args.requests} requests (peak {after['VmHWM']:.1f} MB); target <= 40 MB")
    print(f"Now page ({len(now_seconds)} loads): p50 {p(0.5):.1f} ms, p95 {p(0.95):.1f} ms, max {p(1.0):.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
