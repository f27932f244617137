"""Text a user wrote (the config file, wildcard lists): read with limits, and checked to be printable text.

Anything read here may have been edited on a phone or a PC with the SD card in: it may be
a FIFO or a folder where a file belongs, megabytes long, or hold escapes YAML allows but
the rest of the frame cannot carry (an unpaired UTF-16 surrogate, a NUL). Each is refused
with a message saying what to do, before it reaches the daemon.
"""

from __future__ import annotations

import os
import stat
import unicodedata
from pathlib import Path

from engine import json_limits
from engine.png_text import SURROGATE, join_surrogate_pairs

MAX_FILE_BYTES = 1024 * 1024     # a config with hundreds of themes is ~50 KB
MAX_TEXT_CHARS = 10_000          # one value: a prompt, a name, a path


class UserFileError(Exception):
    """A user's file cannot be used; ``line`` (1-based) where the problem is, when it is in the text."""

    def __init__(self, message: str, line: int = 1):
        super().__init__(message)
        self.message = message
        self.line = line


def read_user_text(path: Path, limit: int = MAX_FILE_BYTES) -> str:
    """The UTF-8 text of the regular file ``path`` (a BOM dropped); UserFileError when it is missing, not a
    regular file, longer than ``limit`` bytes or not UTF-8. FileNotFoundError is left to the caller."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)   # a FIFO must not block the open
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise UserFileError(f"cannot read the file: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise UserFileError("this is a folder, not a file")
        if not stat.S_ISREG(info.st_mode):
            raise UserFileError("this is not a regular file (a FIFO or a device?); put a text file here")
        if info.st_size > limit:
            raise UserFileError(f"the file is {info.st_size:,} bytes; at most {limit:,} are read, so this is not "
                                "the file you meant (or split it)")
        try:
            raw = f.read(limit + 1)
        except OSError as exc:
            raise UserFileError(f"cannot read the file: {exc.strerror}") from None
    if len(raw) > limit:
        raise UserFileError(f"the file grew past {limit:,} bytes while being read")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UserFileError("the file is not UTF-8 text; save it as UTF-8", raw[:exc.start].count(b"\n") + 1) \
            from None


def read_json_object(path: Path, limit: int, depth: int) -> dict:
    """The JSON object in ``path`` (at most ``limit`` bytes, nested at most ``depth`` deep); UserFileError
    for anything else. FileNotFoundError is left to the caller."""
    text = read_user_text(path, limit)
    try:
        data = json_limits.loads(text.encode(), depth)
    except ValueError as exc:
        raise UserFileError(f"not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise UserFileError("not a JSON object")
    return data


def clean_text(value: str, limit: int = MAX_TEXT_CHARS) -> tuple[str, str | None]:
    """``value`` with UTF-16 surrogate pairs (as YAML's "\\uD83D\\uDE00" escapes give them) joined into their
    character, and the reason it is unusable (None when it is fine): an unpaired surrogate, a control
    character other than tab and newline, or more than ``limit`` characters."""
    if len(value) > limit:
        return value, f"is {len(value):,} characters long; at most {limit:,} are allowed"
    value = join_surrogate_pairs(value)
    lone = SURROGATE.search(value)
    if lone:
        return value, (f"holds an unpaired surrogate escape (\\u{ord(lone[0]):04X}), which is not a character; "
                       "write the character itself, or a \\U escape such as \\U0001F600")
    for c in value:
        if c not in "\t\n" and unicodedata.category(c) == "Cc":
            return value, (f"holds the control character U+{ord(c):04X}; remove it (in YAML, check the "
                           "\\ escapes in double-quoted text)")
    return value, None
