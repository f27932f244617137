"""A local stand-in for the Hugging Face hub (and a plain file server), in a thread, for the download tests.

It serves model folders as repositories the way the hub does: the tree API
(/api/models/ORG/NAME/tree/REV[/FOLDER][?recursive=true], paged by Link headers) with
sizes, git blob ids and LFS sha256s; /ORG/NAME/resolve/REV/PATH, where .safetensors files
(LFS) redirect to /cdn/... with X-Linked-Size and X-Linked-Etag as the hub does; and
/files/NAME for plain links (at `plain_url`, a host name other than the hub's). Range requests are answered with 206. Faults to inject:
`cut` (close the connection after N bytes of a file, once; a list: once each, in turn), `corrupt` (flip the middle byte
of a file in its next N downloads that include it), `poison` (one byte of a file replaced, once), `hold` (stop before byte N of a file until
an event is set, once: a slow network, seen from the client) and `ignore_range`; `rate` paces
every download (bench/models_download.py's stand-in for WiFi). Every request
is logged in `requests`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PAGE = 4     # tree entries per page, so that paging is exercised


class HubServer:
    def __init__(self) -> None:
        self.repos: dict[str, Path] = {}
        self.files: dict[str, Path] = {}
        self.cut: dict[str, int | list[int]] = {}        # name in the URL -> bytes sent before the connection drops (once, on a
                                             # download to the end of the file)
        self.corrupt: dict[str, int] = {}    # name in the URL -> downloads still to corrupt
        self.hold: dict[str, tuple[int, threading.Event]] = {}   # name in the URL -> (byte to stop before, go on)
        self.poison: dict[str, tuple[int, int]] = {}             # name in the URL -> (offset, byte sent there once)
        self.ignore_range = False
        self.rate: float | None = None       # bytes per second each download is paced to (None: as fast as it goes)
        self.storage: str | None = None      # the host LFS files redirect to (None: this one)
        self.requests: list[tuple[str, str | None]] = []   # (path, Range header)
        self.authorized: list[str] = []                    # paths asked for with an Authorization header
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def plain_url(self) -> str:
        """The same server under another name, for links that are not the hub's."""
        return f"http://localhost:{self._server.server_address[1]}"

    def __enter__(self) -> "HubServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def downloads(self, name: str) -> list[str | None]:
        """The Range header (None: the whole file) of each download of the files named `name`."""
        return [r for p, r in self.requests if p.endswith("/" + name) and not p.startswith("/api/")
                and not (p.split("/")[3:4] == ["resolve"] and name.endswith(".safetensors"))]

    def tree(self, repo: str, folder: str, recursive: bool) -> list[dict]:
        root = self.repos[repo]
        base = root / folder if folder else root
        paths = sorted(base.rglob("*") if recursive else base.iterdir())
        entries = []
        for path in paths:
            rel = path.relative_to(root).as_posix()
            if path.is_dir():
                entries.append({"type": "directory", "oid": "0" * 40, "size": 0, "path": rel})
                continue
            size = path.stat().st_size
            if path.suffix == ".safetensors":     # in LFS: the listing gives the content's sha256
                entries.append({"type": "file", "size": size, "path": rel, "oid": hashlib.sha1(b"pointer of " + rel.encode()).hexdigest(),
                                "lfs": {"oid": _digest(path, "sha256"), "size": size, "pointerSize": 134}})
            else:                                 # in git: the listing gives the blob id
                entries.append({"type": "file", "size": size, "path": rel,
                                "oid": _digest(path, "git")})
        return entries


def _digest(path: Path, kind: str) -> str:
    """sha256, sha1 or git blob id of a file, remembered while it is unchanged (full-size models in bench/)."""
    st = path.stat()
    return _cached_digest(str(path), st.st_size, st.st_mtime_ns, kind)


@functools.lru_cache(maxsize=256)
def _cached_digest(path: str, size: int, mtime_ns: int, kind: str) -> str:
    hasher = hashlib.sha1(b"blob %d\0" % size) if kind == "git" else hashlib.new(kind)
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            hasher.update(block)
    return hasher.hexdigest()


def _handler(hub: HubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            path = urllib.parse.unquote(url.path)
            hub.requests.append((path, self.headers.get("Range")))
            if self.headers.get("Authorization"):
                hub.authorized.append(path)
            parts = path.strip("/").split("/")
            if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] == "tree":
                return self._tree("/".join(parts[2:4]), "/".join(parts[6:]), urllib.parse.parse_qs(url.query))
            if len(parts) >= 5 and parts[2] == "resolve" and "/".join(parts[:2]) in hub.repos:
                file = hub.repos["/".join(parts[:2])] / "/".join(parts[4:])
                if not file.is_file():
                    return self._status(404)
                if file.suffix == ".safetensors":
                    self.send_response(302)
                    self.send_header("Location", (hub.storage or "") + "/cdn/" + "/".join(parts[:2] + parts[4:]))
                    self.send_header("X-Linked-Size", str(file.stat().st_size))
                    self.send_header("X-Linked-Etag", f'"{_digest(file, "sha256")}"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                return self._file(file)
            if parts[0] == "cdn" and "/".join(parts[1:3]) in hub.repos:
                return self._file(hub.repos["/".join(parts[1:3])] / "/".join(parts[3:]))
            if parts[0] == "files" and parts[-1] in hub.files:
                return self._file(hub.files[parts[-1]])
            self._status(404)

        def _status(self, code: int) -> None:
            body = b'{"error": "not found"}'
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _tree(self, repo: str, folder: str, query: dict) -> None:
            if repo not in hub.repos:
                return self._status(404)
            entries = hub.tree(repo, folder, query.get("recursive") == ["true"])
            start = int(query.get("cursor", ["0"])[0])
            body = json.dumps(entries[start:start + PAGE]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            if start + PAGE < len(entries):
                self.send_header("Link", f'<{hub.url}{urllib.parse.quote(urllib.parse.urlsplit(self.path).path)}'
                                         f'?recursive=true&cursor={start + PAGE}>; rel="next"')
            self.end_headers()
            self.wfile.write(body)

        def _file(self, file: Path) -> None:
            """The file (or the asked range of it), streamed; corrupt and cut as the hub's faults say."""
            name = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path).rpartition("/")[2]
            if not file.is_file():
                return self._status(404)
            size = file.stat().st_size
            start, end = 0, size
            wanted = self.headers.get("Range")
            if wanted and not hub.ignore_range:
                first, _, last = wanted.removeprefix("bytes=").partition("-")
                start, end = int(first), min(size, int(last) + 1 if last else size)
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
            else:
                self.send_response(200)
            self.send_header("Content-Length", str(end - start))
            self.end_headers()
            flip = None
            if hub.corrupt.get(name, 0) > 0 and start <= size // 2 < end:
                hub.corrupt[name] -= 1
                flip = size // 2
            poison = hub.poison.get(name)
            if poison is not None and start <= poison[0] < end:
                del hub.poison[name]
            else:
                poison = None
            held = hub.hold.get(name)
            if held is not None and start < held[0] < end:
                del hub.hold[name]
            else:
                held = None
            cut = hub.cut.get(name) if not wanted or wanted.endswith("-") else None
            if isinstance(cut, list):
                cut = cut[0] if cut else None
            if cut is not None and cut < end - start:
                if isinstance(hub.cut[name], list) and len(hub.cut[name]) > 1:
                    hub.cut[name].pop(0)
                else:
                    del hub.cut[name]
                end = start + cut
                self.close_connection = True
            began = time.monotonic()
            with open(file, "rb") as f:
                f.seek(start)
                at = start
                while at < end:
                    if hub.rate:
                        time.sleep(max(0.0, began + (at - start) / hub.rate - time.monotonic()))
                    if held is not None and at == held[0]:
                        self.wfile.flush()
                        held[1].wait()
                    stop = held[0] if held is not None and at < held[0] else end
                    block = bytearray(f.read(min(1 << 20, stop - at)))
                    if flip is not None and at <= flip < at + len(block):
                        block[flip - at] ^= 0xFF
                    if poison is not None and at <= poison[0] < at + len(block):
                        block[poison[0] - at] = poison[1]
                    self.wfile.write(block)
                    at += len(block)

    return Handler
