"""One file over HTTP for `slowframe models download`: resumed where it stopped, checked
against the size and sha256 the server gives, published under its name only when whole.

Plain urllib (the standard library): a download is one GET with a Range header and a loop
of 1 MB reads, which fits the Pi's 512 MB with room to spare; the hub's own client
(huggingface_hub) would add a dependency tree and its own cache layout for nothing we need.

On disk, beside the final name NAME:
- NAME.part: the bytes received so far;
- NAME.part.json: how many of them are durable (fsynced), and what the whole file should be
  (URL, size, sha256). A power cut loses at most DURABLE_BYTES; the next run truncates
  NAME.part to the durable length and asks the server for the rest (Range: bytes=N-).
NAME appears (renamed from NAME.part) only after its size and sha256 were checked.
"""

from __future__ import annotations

import errno
import hashlib
import http.client
import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engine.atomic import publish, write_bytes
from engine.errors import ModelFileError, NetworkError, StorageError

PIECE = 1 << 20                 # bytes read from the socket at once
DURABLE_BYTES = 64 << 20        # progress is fsynced and recorded after this much
TIMEOUT_SECONDS = 60.0          # a silent connection is given up (then retried) after this
RETRIES = 4                     # a dropped connection is resumed this often in one run
USER_AGENT = "slowframe (https://github.com/slowframe)"
PART = ".part"
PROGRESS = ".part.json"
SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Remote:
    """A file to fetch: its URL, and what it must be when whole (None: not known)."""

    url: str
    size: int | None = None
    sha256: str | None = None       # the content's sha256 (the hub's LFS files)
    git_sha1: str | None = None     # the git blob id (the hub's small files, not in LFS)


@dataclass
class Fetched:
    path: Path
    bytes: int
    received: int                   # bytes that came over the network in this run
    resumed_from: int               # bytes already there from an earlier run
    checked: str                    # what was verified: "sha256", "git sha1", "size" or "nothing"


def open_url(url: str, headers: dict[str, str] | None = None, method: str = "GET",
             timeout: float = TIMEOUT_SECONDS) -> tuple[http.client.HTTPResponse, dict[str, str]]:
    """Open `url`, following redirects; returns the response and the X-Linked-* headers the
    hub sets on its redirect to the file's storage (its size and sha256). HTTP and network
    failures become NetworkError with a message for people."""
    linked: dict[str, str] = {}

    class KeepLinked(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, req, fp, code, msg, hdrs, newurl):
            for name in ("X-Linked-Size", "X-Linked-Etag"):
                if hdrs.get(name):
                    linked[name] = hdrs[name]
            new = super().redirect_request(req, fp, code, msg, hdrs, newurl)
            if new is not None and urllib.parse.urlsplit(newurl).netloc != urllib.parse.urlsplit(req.full_url).netloc:
                new.remove_header("Authorization")     # the hub's token is for the hub, not its storage's host
            return new

    request = urllib.request.Request(url, method=method, headers={"User-Agent": USER_AGENT, **(headers or {})})
    try:
        response = urllib.request.build_opener(KeepLinked).open(request, timeout=timeout)
    except urllib.error.HTTPError as e:
        e.close()
        raise NetworkError(http_problem(url, e.code)) from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
        reason = getattr(e, "reason", e)
        raise NetworkError(f"{url}: cannot reach the server ({reason}). Check the frame's network "
                           "(is it on WiFi? `ip addr show wlan0`) and run the same command again") from None
    for name in ("X-Linked-Size", "X-Linked-Etag"):
        if response.headers.get(name):
            linked[name] = response.headers[name]
    return response, linked


def http_problem(url: str, code: int) -> str:
    if code == 404:
        return (f"{url}: not found (HTTP 404). Check the repository or file name (they are case-sensitive) "
                "and the revision")
    if code in (401, 403):
        return (f"{url}: the server refused access (HTTP {code}). Gated or private repositories need an access "
                "token: accept the model's licence on its page, then set HF_TOKEN=... for this command")
    if code == 416:
        return f"{url}: the server cannot resume this file (HTTP 416)"
    if code >= 500:
        return f"{url}: the server failed (HTTP {code}); try again later (the download resumes)"
    return f"{url}: the server answered HTTP {code}"


def linked_remote(url: str, linked: dict[str, str], size: int | None = None) -> Remote:
    """A Remote from the hub's X-Linked-Size / X-Linked-Etag headers (sha256 in quotes)."""
    etag = linked.get("X-Linked-Etag", "").strip().strip('"').lower()
    if linked.get("X-Linked-Size", "").isdigit():
        size = int(linked["X-Linked-Size"])
    return Remote(url, size, etag if SHA256.match(etag) else None)


def fetch(remote: Remote, dest: Path, log: Callable[[str], object] = print,
          headers: dict[str, str] | None = None, retries: int = RETRIES,
          sleep: Callable[[float], object] = time.sleep) -> Fetched:
    """Make `dest` the file at remote.url, resuming NAME.part; a file that does not match
    its size or sha256 once whole is deleted and fetched once more, then refused."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.is_file():
        earlier = _check_whole(remote, dest)
        if earlier is not None:
            return earlier
        dest.unlink()                               # another revision of the file: fetch this one
    for attempt in (1, 2):
        got, digest = _fetch_once(remote, dest, log, headers or {}, retries, sleep)
        problem = digest.mismatch(got.bytes)
        if problem is None:
            publish(_part(dest), dest, durable=True)
            _progress(dest).unlink(missing_ok=True)
            return got
        _forget(dest)
        if attempt == 1:
            log(f"{dest.name}: {problem}; fetching it again")
    raise ModelFileError(f"{remote.url}: {problem}, twice in a row. The server sends something other than the "
                         "file it lists (a proxy or a WiFi login page in the way?); nothing was kept")


def _check_whole(remote: Remote, dest: Path) -> Fetched | None:
    """A file fetched by an earlier run, if it is still the one listed (hashed again: the
    listing may name a newer revision now)."""
    digest = _Digest(remote)
    size = dest.stat().st_size
    if digest.checked() in ("sha256", "git sha1"):
        with open(dest, "rb") as f:
            _hash_prefix(f, size, digest)
    if digest.mismatch(size) is not None:
        return None
    return Fetched(dest, size, 0, size, digest.checked())


class _Digest:
    """The checks a whole file must pass: its size, and its sha256 or git blob id, hashed as bytes arrive."""

    def __init__(self, remote: Remote):
        self.remote = remote
        self.reset()

    def reset(self) -> None:
        self.sha256 = hashlib.sha256()
        size = self.remote.size
        self.git = hashlib.sha1(f"blob {size}\0".encode()) if self.remote.git_sha1 and size is not None else None

    def update(self, block: bytes) -> None:
        self.sha256.update(block)
        if self.git is not None:
            self.git.update(block)

    def checked(self) -> str:
        if self.remote.sha256:
            return "sha256"
        if self.git is not None:
            return "git sha1"
        return "size" if self.remote.size is not None else "nothing"

    def mismatch(self, size: int) -> str | None:
        """What is wrong with the whole file, or None."""
        want = self.remote
        if want.size is not None and size != want.size:
            return f"got {size} bytes where the server lists {want.size}"
        if want.sha256 and self.sha256.hexdigest() != want.sha256:
            return f"sha256 {self.sha256.hexdigest()} differs from the listed {want.sha256}"
        if self.git is not None and self.git.hexdigest() != want.git_sha1:
            return f"git blob id {self.git.hexdigest()} differs from the listed {want.git_sha1}"
        return None


def _part(dest: Path) -> Path:
    return dest.with_name(dest.name + PART)


def _progress(dest: Path) -> Path:
    return dest.with_name(dest.name + PROGRESS)


def _fetch_once(remote: Remote, dest: Path, log, headers: dict[str, str], retries: int,
                sleep) -> tuple[Fetched, _Digest]:
    part = _part(dest)
    resumed_from = _durable_length(remote, dest)
    if resumed_from:
        log(f"{dest.name}: resuming at {resumed_from / 1e6:.1f} MB")
    digest = _Digest(remote)
    with open(part, "r+b" if part.exists() else "wb") as f:
        f.truncate(resumed_from)
        _hash_prefix(f, resumed_from, digest)
        failures = 0
        while True:
            try:
                _receive(remote, dest, f, digest, headers)
                break
            except NetworkError:
                _record(remote, dest, f)
                failures += 1
                if failures > retries:
                    raise NetworkError(f"{remote.url}: the connection failed {failures} times; the "
                                       f"{f.tell() / 1e6:.1f} MB received are kept: run the same command again "
                                       "to resume") from None
                wait = min(60.0, 2.0 ** failures)
                log(f"{dest.name}: connection lost at {f.tell() / 1e6:.1f} MB; resuming in {wait:.0f} s")
                sleep(wait)
        _record(remote, dest, f)
        size = f.tell()
    return Fetched(dest, size, size - resumed_from, resumed_from, digest.checked()), digest


def _receive(remote: Remote, dest: Path, f, digest: _Digest, headers: dict[str, str]) -> None:
    """One GET from the end of `f` to the end of the file."""
    start = f.tell()
    if remote.size is not None and start == remote.size:
        return
    response, _ = open_url(remote.url, dict(headers, **({"Range": f"bytes={start}-"} if start else {})))
    with response:
        if start and (response.status != 206 or not _starts_at(response, start)):
            f.seek(0)                               # the server sends the whole file: start over
            f.truncate(0)
            digest.reset()
        since = 0
        try:
            while True:
                block = response.read(PIECE)
                if not block:
                    break
                f.write(block)
                digest.update(block)
                since += len(block)
                if since >= DURABLE_BYTES:
                    _record(remote, dest, f)
                    since = 0
        except (OSError, http.client.HTTPException) as e:
            if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise StorageError(f"{dest.parent}: the card is full after {f.tell() / 1e9:.2f} GB of "
                                   f"{dest.name}. Free some space and run the same command again: the download "
                                   "resumes") from None
            raise NetworkError(f"{remote.url}: the connection broke ({e or type(e).__name__})") from None
    if remote.size is not None and f.tell() < remote.size:
        raise NetworkError(f"{remote.url}: the connection closed after {f.tell()} of {remote.size} bytes")


def _starts_at(response, start: int) -> bool:
    match = re.match(r"bytes (\d+)-", response.headers.get("Content-Range", ""))
    return bool(match) and int(match.group(1)) == start


def _hash_prefix(f, n: int, digest: _Digest) -> None:
    f.seek(0)
    left = n
    while left:
        block = f.read(min(left, PIECE))
        if not block:
            break
        digest.update(block)
        left -= len(block)
    f.seek(n)


def _record(remote: Remote, dest: Path, f) -> None:
    """Make the bytes in `f` durable and say how many there are."""
    f.flush()
    os.fsync(f.fileno())
    record = {"url": remote.url, "size": remote.size, "sha256": remote.sha256, "git_sha1": remote.git_sha1,
              "durable_bytes": f.tell()}
    write_bytes(_progress(dest), json.dumps(record).encode(), durable=True)


def _durable_length(remote: Remote, dest: Path) -> int:
    """Bytes of NAME.part from an earlier run that are durable and belong to this same file."""
    part = _part(dest)
    if not part.is_file():
        return 0
    try:
        record = json.loads(_progress(dest).read_text())
    except (OSError, ValueError):
        return 0
    same = all(record.get(k) == getattr(remote, k) for k in ("size", "sha256", "git_sha1"))
    if not same or (remote.sha256 is None and record.get("url") != remote.url):
        return 0                                    # another file (a new revision): start over
    durable = record.get("durable_bytes")
    return min(durable, part.stat().st_size) if isinstance(durable, int) and durable >= 0 else 0


def _forget(dest: Path) -> None:
    _part(dest).unlink(missing_ok=True)
    _progress(dest).unlink(missing_ok=True)
