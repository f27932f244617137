"""Prompts made safe for a PNG's text chunks: one printable line, whatever the prompt held.

The ``parameters`` chunk is read by other tools line by line: the prompt, an optional
"Negative prompt:" line, then the settings. A prompt with a line break could add a
settings line of its own, and an unpaired surrogate cannot be encoded at all (Pillow
raises while saving, after hours of work). Both are replaced, so the picture is always saved.
"""

from __future__ import annotations

import unicodedata


def one_line(text: object) -> str:
    """``text`` with line breaks and other control characters as spaces, surrogate pairs joined into their
    character and unpaired surrogates as U+FFFD."""
    text = str(text)
    if any("\ud800" <= c <= "\udfff" for c in text):
        try:
            text = text.encode("utf-16", "surrogatepass").decode("utf-16")
        except UnicodeDecodeError:
            text = "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)
    return "".join(" " if unicodedata.category(c) == "Cc" else c for c in text)
