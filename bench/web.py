"""The web app's memory and speed while serving: RSS after N requests, and the Now page's latency.

    nice -n 10 python3 bench/web.py              # 1000 requests (about a minute on 2 cores)
    nice -n 10 python3 bench/web.py --requests 200
    sudo python3 bench/web.py --appliance        # the whole frame in a 384 MiB cgroup (~5 min, root)

Starts `slowframe run` (the tests' fake generator: it paints a picture in a few seconds with no model,
so the daemon costs nothing here) with the file display, and `slowframe web` on a local port, sets a
password with `slowframe web password`, signs in over HTTP, then makes N requests in a bounded loop,
cycling through the pages a phone loads (Now, History with its thumbnails, Themes, a theme's form,
Settings, YAML, Upload, System; every fifth a POST of the unchanged settings). Prints the web
process's RSS (VmRSS) and peak (VmHWM) from /proc before and after, and the Now page's p50/p95/max.
Issue 29's targets: RSS <= 40 MB after 1000 requests.

--appliance: the whole frame as on a Pi, in one 384 MiB cgroup v1 memory limit (page cache charged):
`slowframe run` with the real generator making a 1024x1024 picture in `rpi-lowmem` (1 step, full-size
random SDXL weights from bench/pipeline_full.py's cache, dropped from the page cache first) and
`slowframe web` serving a request every second meanwhile, until the picture is in the history. Prints
each process's peak RSS (sampled from /proc every 0.5 s), the cgroup's peak usage, fail count and OOM kills.
"""

from __future__ import annotations

import argparse
import http.cookiejar
import os
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

sys.path.insert(0, str(REPO / "bench"))
APPLIANCE_LIMIT = 384 * 1024 * 1024
APPLIANCE_CONFIG = """\
model: {{path: {model}, preset: rpi-lowmem}}
display: {{backend: file, panel: spectra6-7.3, output: panel, min_interval: 0}}
themes:
  - {{name: lighthouse, prompt: "a lighthouse on a rocky coast at dusk, oil painting", steps: 1, size: 1024x1024}}
buttons: {{enabled: false}}
"""

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


PASSWORD = "bench password"


def start_web(root: Path, wrap=lambda argv: argv) -> tuple[subprocess.Popen, int]:
    """`slowframe web` for the daemon in ``root``, its password set, listening on a free local port."""
    port = free_port()
    subprocess.run([sys.executable, "-m", "frame.cli", "web", "password", "--state-dir", str(root / "web")],
                   input=PASSWORD + "\n", text=True, env=ENV, check=True, capture_output=True)
    log = open(root / "web.log", "ab")
    web = subprocess.Popen(wrap([sys.executable, "-m", "frame.cli", "web", "--listen", f"127.0.0.1:{port}",
                                 "--socket", str(root / "run" / "control.sock"), "--state-dir", str(root / "web"),
                                 "--cache-dir", str(root / "web-cache")]), env={**ENV, **UNIT_ENVIRONMENT},
                           stdout=log, stderr=log)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.2)
    return web, port


def signed_in(port: int) -> Phone:
    phone = Phone(f"http://127.0.0.1:{port}")
    phone.get("/login")
    assert phone.post("/login", {"password": PASSWORD}) == 200   # followed to the Now page
    return phone


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--appliance", action="store_true", help="the whole frame in a 384 MiB cgroup (root)")
    args = parser.parse_args()
    if args.appliance:
        return appliance()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        write_fake_model(root / "model")
        daemon = Daemon(root, CONFIG)
        web, port = start_web(root)
        try:
            daemon.wait_for(lambda m: "READY=1" in m, "the daemon", 60)
            while len(list((root / "state" / "history").glob("*.json"))) < 6:   # pictures for History to show
                time.sleep(0.5)
            phone = signed_in(port)
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
            daemon.close()
    now_seconds.sort()
    p = lambda q: now_seconds[min(len(now_seconds) - 1, int(q * len(now_seconds)))] * 1000  # noqa: E731
    print(f"requests: {args.requests} in {total:.1f} s ({args.requests / total:.0f}/s, threads: 2)")
    print(f"web process RSS: {started['VmRSS']:.1f} MB after sign-in, {after['VmRSS']:.1f} MB after "
          f"{args.requests} requests (peak {after['VmHWM']:.1f} MB); target <= 40 MB")
    print(f"Now page ({len(now_seconds)} loads): p50 {p(0.5):.1f} ms, p95 {p(0.95):.1f} ms, max {p(1.0):.1f} ms")
    return 0


def appliance() -> int:
    import harness
    import pipeline_full

    reason = harness.cgroup_unavailable_reason()
    if reason:
        print(f"cannot run the appliance check: {reason}")
        return 1
    pipeline_full.ensure_model()
    for path in pipeline_full.weight_files():
        harness.drop_page_cache(path)
    cgroup = harness.CGROUP_ROOT / "slowframe-appliance-bench"
    harness.cgroup_create(cgroup)
    harness.cg_write(cgroup, "memory.limit_in_bytes", APPLIANCE_LIMIT)
    procs = cgroup / "cgroup.procs"
    peaks: dict[str, float] = {}
    requests = 0
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        started = time.monotonic()
        with open(procs, "w") as f:   # this process joins first, so the daemon it starts is charged too
            f.write(str(os.getpid()))
        daemon = Daemon(root, APPLIANCE_CONFIG.format(model=pipeline_full.ROOT), generator="frame.worker:load_sdxl")
        web, port = start_web(root)
        with open(harness.CGROUP_ROOT / "cgroup.procs", "w") as f:   # the bench itself leaves again
            f.write(str(os.getpid()))
        try:
            phone = signed_in(port)
            while not list((root / "state" / "history").glob("*.json")):
                if daemon.proc.poll() is not None or time.monotonic() - started > 3600:
                    break
                status, _ = phone.get(PAGES[requests % len(PAGES)])
                requests += 1
                for name, pid in [("daemon", daemon.proc.pid), ("web", web.pid)] + \
                        [("worker", pid) for pid in children(daemon.proc.pid)]:
                    try:
                        peaks[name] = max(peaks.get(name, 0.0), memory(pid)["VmHWM"])
                    except (OSError, KeyError):
                        pass
                time.sleep(0.5)
            done = bool(list((root / "state" / "history").glob("*.json")))
            log_text = (root / "daemon.log").read_text(errors="replace")
        finally:
            web.terminate()
            web.wait(10)
            daemon.close()
            stats = harness.cgroup_stats(cgroup)
            harness.cgroup_remove(cgroup)
    minutes = (time.monotonic() - started) / 60
    print(f"appliance in a {APPLIANCE_LIMIT // 2 ** 20} MiB cgroup: picture {'completed' if done else 'NOT completed'} "
          f"in {minutes:.1f} min, {requests} web requests meanwhile")
    print("peak RSS: " + ", ".join(f"{name} {mb:.1f} MB" for name, mb in sorted(peaks.items())))
    print(f"cgroup: max_usage {int(stats.get('max_usage_in_bytes') or 0) / 1e6:.1f} MB, failcnt {stats.get('failcnt')}, "
          f"under_oom {stats.get('oom_under_oom', stats.get('under_oom'))}, oom_kill {stats.get('oom_kill', 'n/a')}")
    if not done:
        print(log_text[-3000:])
    return 0 if done else 1


def children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


if __name__ == "__main__":
    sys.exit(main())
