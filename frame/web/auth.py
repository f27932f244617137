"""Who may use the web app: the owner's password (scrypt), the pairing code the panel shows, login throttling.

There is no default password. The owner sets one either with a one-time code the panel
shows (the web app makes the code and asks the daemon to show it with the address and a
QR code, frame.pairing), or at first boot from ``web_password=`` in setup.txt (slowframe-firstboot runs
``slowframe web password``). Setting it again (a new pairing) logs every phone out.

The password is kept as ``scrypt$N$r$p$salt$hash`` in ``web-password.json`` in the web
app's state folder, beside ``web-secret`` (the key signing the session cookie). N=2**14,
r=8 takes 16 MiB and ~0.1 s on a Pi Zero 2 W: the most its memory allows, so guessing is
slowed by the throttle as well (5 failures per address and 30 in all per 15 minutes).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from engine.atomic import write_bytes
from frame.pairing import CODE_ALPHABET, CODE_LENGTH

SCRYPT_N, SCRYPT_R, SCRYPT_P = 2 ** 14, 8, 1
MIN_PASSWORD = 8
MAX_PASSWORD = 1024
CODE_SECONDS = 600
CODE_TRIES = 5
PASSWORD_FILE = "web-password.json"
SECRET_FILE = "web-secret"


class PasswordRefused(ValueError):
    """A new password that cannot be used (the message says why)."""


def hash_password(password: str) -> str:
    salt = os.urandom(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, maxmem=64 << 20)
    return "$".join(["scrypt", str(SCRYPT_N), str(SCRYPT_R), str(SCRYPT_P), _b64(salt), _b64(digest)])


def verify_password(password: str, stored: str) -> bool:
    try:
        kind, n, r, p, salt, digest = stored.split("$")
        if kind != "scrypt":
            return False
        expected = base64.b64decode(digest)
        got = hashlib.scrypt(password.encode(), salt=base64.b64decode(salt), n=int(n), r=int(r), p=int(p),
                             maxmem=64 << 20, dklen=len(expected))
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(got, expected)


def check_new_password(password: str, repeated: str) -> None:
    if password != repeated:
        raise PasswordRefused("the two passwords differ; type the same one twice")
    if len(password) < MIN_PASSWORD:
        raise PasswordRefused(f"the password is {len(password)} characters long; use at least {MIN_PASSWORD}")
    if len(password) > MAX_PASSWORD:
        raise PasswordRefused(f"the password is longer than {MAX_PASSWORD} characters")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class Credentials:
    """The owner's password hash and the session epoch (raised to log every session out) in the state folder."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.path = self.folder / PASSWORD_FILE

    def _read(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError):
            return {}   # a damaged file: the owner pairs again, as with none
        return data if isinstance(data, dict) and isinstance(data.get("password"), str) else {}

    @property
    def is_set(self) -> bool:
        return bool(self._read())

    @property
    def epoch(self) -> int | None:
        value = self._read().get("epoch")
        return value if isinstance(value, int) else None

    def verify(self, password: str) -> bool:
        stored = self._read().get("password")
        return isinstance(stored, str) and verify_password(password, stored)

    def set(self, password: str) -> int:
        """Store a new password (already checked); the new epoch, which ends every older session."""
        epoch = (self.epoch or 0) + 1
        self.folder.mkdir(parents=True, exist_ok=True)
        write_bytes(self.path, json.dumps({"password": hash_password(password), "epoch": epoch}).encode(),
                    durable=True)
        os.chmod(self.path, 0o600)
        return epoch


def secret_key(folder: Path) -> bytes:
    """The key signing session cookies: made once (mode 0600), so sessions outlive restarts of the app."""
    path = Path(folder) / SECRET_FILE
    try:
        key = path.read_bytes()
        if len(key) >= 32:
            return key
    except FileNotFoundError:
        pass
    key = secrets.token_bytes(32)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key)
    return key


class Throttle:
    """At most ``per_key`` failures per key (a client's address) and ``overall`` in all within ``window`` s."""

    def __init__(self, per_key: int = 5, overall: int = 30, window: float = 900.0, clock=time.monotonic):
        self.per_key, self.overall, self.window, self.clock = per_key, overall, window, clock
        self._failures: list[tuple[float, str]] = []
        self._lock = threading.Lock()

    def _recent(self) -> list[tuple[float, str]]:
        cutoff = self.clock() - self.window
        self._failures = [f for f in self._failures if f[0] > cutoff]
        return self._failures

    def wait_seconds(self, key: str) -> float:
        """0 when ``key`` may try now, else how long until it may."""
        with self._lock:
            recent = self._recent()
            mine = [t for t, k in recent if k == key]
            blocking = mine[-self.per_key:] if len(mine) >= self.per_key else \
                [t for t, _ in recent][-self.overall:] if len(recent) >= self.overall else []
            return max(0.0, blocking[0] + self.window - self.clock()) if blocking else 0.0

    def failed(self, key: str) -> None:
        with self._lock:
            self._recent().append((self.clock(), key))


@dataclass
class _Code:
    digest: bytes
    expires: float
    tries: int = 0


class PairingCode:
    """The one-time code the panel shows: one at a time, for CODE_SECONDS and CODE_TRIES tries."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self._code: _Code | None = None
        self._lock = threading.Lock()

    def new(self) -> str:
        code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
        with self._lock:
            self._code = _Code(hashlib.sha256(code.encode()).digest(), self.clock() + CODE_SECONDS)
        return code

    @property
    def active(self) -> bool:
        return self._code is not None and self.clock() < self._code.expires

    def use(self, typed: str) -> bool:
        """True (and the code is spent) when ``typed`` is the code; each wrong try counts."""
        typed = "".join(typed.split()).upper().replace("-", "")
        with self._lock:
            code = self._code
            if code is None or self.clock() >= code.expires or code.tries >= CODE_TRIES:
                self._code = None
                return False
            if hmac.compare_digest(hashlib.sha256(typed.encode()).digest(), code.digest):
                self._code = None
                return True
            code.tries += 1
            return False
