"""JSON from outside (model headers, control requests, job files) parsed with a nesting limit.

json.loads recurses once per level: a few kilobytes of "[" reach Python's recursion
limit, and the RecursionError that follows is not a ValueError, so a caller expecting
bad JSON to be a ValueError would let it through. The depth is counted before parsing.
"""

from __future__ import annotations

import json

_OPEN = frozenset(b"[{")
_CLOSE = frozenset(b"]}")
_QUOTE, _BACKSLASH = 0x22, 0x5C


def check_depth(raw: bytes, limit: int) -> None:
    """ValueError if the JSON text in `raw` nests arrays and objects more than `limit` deep."""
    depth = 0
    in_string = escaped = False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == _BACKSLASH:
                escaped = True
            elif byte == _QUOTE:
                in_string = False
        elif byte == _QUOTE:
            in_string = True
        elif byte in _OPEN:
            depth += 1
            if depth > limit:
                raise ValueError(f"JSON nested more than {limit} deep")
        elif byte in _CLOSE:
            depth -= 1


def loads(raw: bytes, limit: int) -> object:
    """json.loads of UTF-8 `raw` nested at most `limit` deep; every failure is a ValueError."""
    check_depth(raw, limit)
    try:
        return json.loads(raw.decode("utf-8"))
    except RecursionError:   # cannot happen within the limit; kept a ValueError all the same
        raise ValueError("JSON nested too deep") from None
