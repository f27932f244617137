"""One file over HTTP for `slowframe models download`: resumed where it stopped, checked
against the size and sha256 the server gives, published under its name only when whole.

Plain urllib (the standard library): a download is one GET with a Range header and a loop
of 1 MB reads, which fits the Pi's 512 MB with room to spare; the hub's own client
(huggingface_hub) would add a dependency tree and its own cache layout for nothing we need.

On disk, beside the final name NAME:
- NAME.part: the bytes received so far;
- NAME.part.json: how many of them are durable (fsynced), and what the whole file should be
  (URL, size, sha256), with the sha256's running state at that point (sha256_state.py) and an
  attempt id, new whenever NAME.part starts over from its first byte. A power cut loses at
  most DURABLE_BYTES; the next run truncates NAME.part to the durable length, continues the
  sha256 from the saved state (without reading the bytes before: they may be given back
  already, see download.py) and asks the server for the rest (Range: bytes=N-).
NAME appears (renamed from NAME.part) only after its size and sha256 were checked. A file
followed as it arrives (`arrival`) stays NAME.part, its record saying it was checked.
"""

from __future__ import annotations

import errno
import hashlib
import http.client
import json
import os
import re
import struct
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engine.atomic import publish, write_bytes
from engine.convert import sha256_state
from engine.errors import ModelFileError, NetworkError, StorageError
from engine.safetensors import MAX_HEADER_BYTES

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
    sha256: str | None = None       # the content's, as received


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


class Arrival:
    """Told about one file while it arrives, for a reader that follows it (the import); this
    base class listens to nothing."""

    def started(self, attempt: str, durable: int) -> None:
        """NAME.part holds `durable` bytes of `attempt`; a new attempt means every byte read
        from an earlier one is void (the file failed its check, or the server restarted it)."""

    def durable(self, n: int) -> None:
        """Bytes 0..n are on disk and fsynced."""

    def checked(self, sha256: str) -> None:
        """The whole file passed its checks; `sha256` is its content's."""


def fetch(remote: Remote, dest: Path, log: Callable[[str], object] = print,
          headers: dict[str, str] | None = None, retries: int = RETRIES,
          sleep: Callable[[float], object] = time.sleep, arrival: Arrival | None = None) -> Fetched:
    """Make `dest` the file at remote.url, resuming NAME.part; a file that does not match
    its size or sha256 once whole is fetched once more, then refused.

    With `arrival` (the size must be known), the file is followed as it arrives: NAME.part
    has its full size from the start (sparse until received), keeps its inode (a reader's
    open descriptors stay valid through a restart) and, once checked, stays NAME.part with
    its record saying so instead of being renamed to NAME."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if arrival is not None and remote.size is None:
        raise ValueError("following a file as it arrives needs its size")
    if dest.is_file():
        earlier = _check_whole(remote, dest)
        if earlier is None:
            dest.unlink()                           # another revision of the file: fetch this one
        elif arrival is None:
            return earlier
        else:                                       # whole from an earlier run that did not follow it
            os.replace(dest, _part(dest))
            with open(_part(dest), "r+b") as f:
                part = _PartFile(remote, dest, f, log, None)
                part.attempt = uuid.uuid4().hex
                part.record(earlier.bytes, checked=earlier.checked, content_sha256=earlier.sha256)
    restart = False
    for attempt in (1, 2):
        got, problem = _fetch_once(remote, dest, log, headers or {}, retries, sleep, arrival, restart)
        if problem is None:
            if arrival is None:
                publish(_part(dest), dest, durable=True)
                _progress(dest).unlink(missing_ok=True)
            return got
        if attempt == 1:
            log(f"{dest.name}: {problem}; fetching it again")
        restart = True                              # from its first byte, in place (its readers keep their file)
    _forget(dest)
    raise ModelFileError(f"{remote.url}: {problem}, twice in a row. The server sends something other than the "
                         "file it lists (a proxy or a WiFi login page in the way?); nothing was kept")


def fetch_header(remote: Remote, dest: Path, log: Callable[[str], object] = print,
                 headers: dict[str, str] | None = None) -> tuple[int, int]:
    """Make NAME.part (followed, see `fetch`) start with the safetensors header of the file:
    its first 8 + n bytes, durable, so the file can be planned from before the rest comes.
    Returns 8 + n and how many bytes came over the network for it."""
    part_path = _part(Path(dest))
    with open(part_path, "r+b" if part_path.exists() else "w+b") as f:
        part = _PartFile(remote, Path(dest), f, log, Arrival())
        have = part.open(restart=False)
        earlier, attempt = have, part.attempt
        want = 8
        for _ in range(2):
            if have < want:
                _receive(remote, part, headers or {}, want)
                part.header_bytes = f.tell()
                part.record()
                have = f.tell()
            f.seek(0)
            (n,) = struct.unpack("<Q", f.read(8))
            f.seek(have)
            if n > MAX_HEADER_BYTES or 8 + n > (remote.size or 0):
                raise ModelFileError(f"{remote.url}: not a .safetensors file (its first bytes are no safetensors "
                                     "header); the server sends something other than the file it lists")
            want = 8 + n
        return want, have - earlier if part.attempt == attempt else have


def _check_whole(remote: Remote, dest: Path) -> Fetched | None:
    """A file fetched by an earlier run, if it is still the one listed (hashed again: the
    listing may name a newer revision now)."""
    digest = _Digest(remote)
    size = dest.stat().st_size
    with open(dest, "rb") as f:
        _hash_prefix(f, size, digest)
    if digest.mismatch(size) is not None:
        return None
    return Fetched(dest, size, 0, size, digest.checked(), digest.sha256.hexdigest())


class _Digest:
    """The checks a whole file must pass: its size, and its sha256 or git blob id, hashed as
    bytes arrive. The sha256 goes on from a saved state where that works (sha256_state.py),
    so a resumed file need not be read again."""

    def __init__(self, remote: Remote):
        self.remote = remote
        self.reset()

    def reset(self) -> None:
        self.sha256 = sha256_state.Sha256() if sha256_state.available() else hashlib.sha256()
        size = self.remote.size
        self.git = hashlib.sha1(f"blob {size}\0".encode()) if self.remote.git_sha1 and size is not None else None

    def update(self, block: bytes) -> None:
        self.sha256.update(block)
        if self.git is not None:
            self.git.update(block)

    def state(self) -> str | None:
        """The sha256's running state, or None where it cannot be continued from one."""
        if self.git is not None or not isinstance(self.sha256, sha256_state.Sha256):
            return None
        return self.sha256.state().hex()

    def restore(self, state: object) -> bool:
        """Continue from a saved state (True), or say the prefix must be hashed again (False)."""
        if self.git is not None or not sha256_state.available() or not isinstance(state, str):
            return False
        try:
            self.sha256 = sha256_state.Sha256(bytes.fromhex(state))
        except ValueError:
            return False
        return True

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


class _PartFile:
    """NAME.part being received, and its progress record NAME.part.json."""

    def __init__(self, remote: Remote, dest: Path, f, log, arrival: Arrival | None):
        self.remote, self.dest, self.f, self.log, self.arrival = remote, dest, f, log, arrival
        self.digest = _Digest(remote)
        self.attempt = ""
        self.header_bytes = 0               # the first bytes, fetched ahead (fetch_header)
        self.checked_before: dict = {}      # the record of a followed file an earlier run checked

    def open(self, restart: bool) -> int:
        """Resume the durable bytes of an earlier run (unless `restart`); returns how many."""
        record = {} if restart else _resumable_record(self.remote, self.dest)
        durable = record.get("durable_bytes", 0)
        if not durable:
            self.start_over()
            return 0
        self.attempt = record.get("attempt") or uuid.uuid4().hex
        self.header_bytes = min(durable, record.get("header_bytes") or 0)
        if record.get("checked") and self.arrival is not None and durable == self.remote.size:
            self.checked_before = record
            self.f.seek(durable)
        else:
            self.f.truncate(durable)                # bytes past the last fsync may be garbage after a power cut
            if not self.digest.restore(record.get("sha256_state")):
                _hash_prefix(self.f, durable, self.digest)
            self._presize()
            self.f.seek(durable)
        if self.arrival is not None:
            self.arrival.started(self.attempt, durable)
        return durable

    def start_over(self) -> None:
        """Drop every byte: a new attempt, recorded before the old bytes go (so that a power
        cut never pairs stale bytes with a record that vouches for them)."""
        self.attempt = uuid.uuid4().hex
        self.header_bytes = 0
        self.digest.reset()
        self.record(0)
        self.f.seek(0)
        if self.arrival is None:
            self.f.truncate(0)
        else:       # overwritten in place: a reader's read under way never meets the end of the file
            self.arrival.started(self.attempt, 0)
            self._presize()

    def _presize(self) -> None:
        if self.arrival is not None:
            self.f.truncate(self.remote.size)       # sparse: no blocks until the bytes come

    def record(self, durable: int | None = None, **extra) -> None:
        """Make the bytes received durable and say how many there are."""
        durable = self.f.tell() if durable is None else durable
        self.f.flush()
        os.fsync(self.f.fileno())
        remote = self.remote
        record = {"url": remote.url, "size": remote.size, "sha256": remote.sha256, "git_sha1": remote.git_sha1,
                  "durable_bytes": durable, "attempt": self.attempt, "header_bytes": self.header_bytes,
                  "sha256_state": self.digest.state(), **extra}
        write_bytes(_progress(self.dest), json.dumps(record).encode(), durable=True)
        if self.arrival is not None and durable:
            self.arrival.durable(durable)


def _fetch_once(remote: Remote, dest: Path, log, headers: dict[str, str], retries: int, sleep,
                arrival: Arrival | None, restart: bool) -> tuple[Fetched, str | None]:
    """Receive the file into NAME.part; returns it and what is wrong with it (None: nothing)."""
    part_path = _part(dest)
    with open(part_path, "r+b" if part_path.exists() else "w+b") as f:
        part = _PartFile(remote, dest, f, log, arrival)
        resumed_from = part.open(restart)
        earlier = part.checked_before
        if earlier:                                 # followed and checked by an earlier run
            arrival.durable(resumed_from)
            arrival.checked(earlier.get("content_sha256"))
            return Fetched(dest, resumed_from, 0, resumed_from, earlier["checked"], earlier.get("content_sha256")), None
        if resumed_from > part.header_bytes:
            log(f"{dest.name}: resuming at {resumed_from / 1e6:.1f} MB")
        failures, at_failure = 0, -1
        while True:
            try:
                _receive(remote, part, headers)
                break
            except NetworkError:
                part.record()
                # failures in a row without progress: a long file over a flaky link, or one that waited for the
                # import to catch up (an idle connection the server closed), may be cut many times
                failures = failures + 1 if f.tell() == at_failure else 1
                at_failure = f.tell()
                if failures > retries:
                    raise NetworkError(f"{remote.url}: the connection failed {failures} times in a row; the "
                                       f"{f.tell() / 1e6:.1f} MB received are kept: run the same command again "
                                       "to resume") from None
                wait = min(60.0, 2.0 ** failures)
                log(f"{dest.name}: connection lost at {f.tell() / 1e6:.1f} MB; resuming in {wait:.0f} s")
                sleep(wait)
        size = f.tell()
        digest = part.digest
        got = Fetched(dest, size, size - resumed_from, resumed_from, digest.checked(), digest.sha256.hexdigest())
        problem = digest.mismatch(size)
        if problem is None and arrival is not None:
            part.record(size, checked=got.checked, content_sha256=got.sha256)
        else:
            part.record()
    if problem is None and arrival is not None:
        arrival.checked(got.sha256)
    return got, problem


def _receive(remote: Remote, part: _PartFile, headers: dict[str, str], end: int | None = None) -> None:
    """One GET from the end of what `part` holds to byte `end` (None: the end of the file)."""
    f, dest = part.f, part.dest
    start = f.tell()
    if (remote.size is not None and start == remote.size) or (end is not None and start >= end):
        return
    wanted = f"bytes={start}-{end - 1}" if end is not None else f"bytes={start}-" if start else None
    response, _ = open_url(remote.url, dict(headers, **({"Range": wanted} if wanted else {})))
    with response:
        if start and (response.status != 206 or not _starts_at(response, start)):
            part.start_over()                       # the server sends the whole file
        since = 0
        try:
            while end is None or f.tell() < end:
                block = response.read(PIECE if end is None else min(PIECE, end - f.tell()))
                if not block:
                    break
                f.write(block)
                part.digest.update(block)
                since += len(block)
                if since >= DURABLE_BYTES:
                    part.record()
                    since = 0
        except (OSError, http.client.HTTPException) as e:
            if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise StorageError(f"{dest.parent}: the card is full after {f.tell() / 1e9:.2f} GB of "
                                   f"{dest.name}. Free some space and run the same command again: the download "
                                   "resumes") from None
            raise NetworkError(f"{remote.url}: the connection broke ({e or type(e).__name__})") from None
    want = end if end is not None else remote.size
    if want is not None and f.tell() < want:
        raise NetworkError(f"{remote.url}: the connection closed after {f.tell()} of {want} bytes")


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


def _resumable_record(remote: Remote, dest: Path) -> dict:
    """The progress record of NAME.part from an earlier run if its bytes belong to this same
    file, with durable_bytes cut to what NAME.part holds; else {}."""
    part = _part(dest)
    if not part.is_file():
        return {}
    try:
        record = json.loads(_progress(dest).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(record, dict):
        return {}
    same = all(record.get(k) == getattr(remote, k) for k in ("size", "sha256", "git_sha1"))
    if not same or (remote.sha256 is None and record.get("url") != remote.url):
        return {}                                   # another file (a new revision): start over
    durable = record.get("durable_bytes")
    if not isinstance(durable, int) or isinstance(durable, bool) or durable < 0:
        return {}
    return dict(record, durable_bytes=min(durable, part.stat().st_size))


def _forget(dest: Path) -> None:
    _part(dest).unlink(missing_ok=True)
    _progress(dest).unlink(missing_ok=True)
