"""Prompts made safe for a PNG's text chunks: one printable line, whatever the prompt held.

The ``parameters`` chunk is read by other tools line by line: the prompt, an optional
"Negative prompt:" line, then the settings. A prompt with a line break could add a
settings line of its own, and an unpaired surrogate cannot be encoded at all (Pillow
raises while saving, after hours of work). Both are replaced, so the picture is always saved.
"""

from __future__ import annotations

import re
import unicodedata


SURROGATE = re.compile("[\ud800-\udfff]")
_PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")


def join_surrogate_pairs(text: str) -> str:
    """``text`` with each UTF-16 surrogate pair (as "\\uD83D\\uDE00" escapes in YAML or JSON give them)
    joined into the character it spells; unpaired surrogates are left where they are."""
    return _PAIR.sub(lambda m: m[0].encode("utf-16-le", "surrogatepass").decode("utf-16-le"), text)


def one_line(text: object) -> str:
    """``text`` with line breaks and other control characters as spaces, surrogate pairs joined into their
    character and unpaired surrogates as U+FFFD."""
    text = SURROGATE.sub("\ufffd", join_surrogate_pairs(str(text)))
    return "".join(" " if unicodedata.category(c) == "Cc" else c for c in text)
