"""A sha256 whose running state can be saved and restored: OpenSSL's SHA256_CTX through ctypes.

A download imported as it arrives gives the disk space of the bytes the import has taken in
back as it goes (engine/convert/holes.py), before the file's sha256 can be checked at its end.
After a power cut those bytes are gone, so the hash cannot be recomputed from the file: the
state is saved beside the progress record instead and the next run continues from it.
`available()` is False where libcrypto or its SHA256_* functions are missing (or disagree
with hashlib): the download then keeps every byte until the file is checked.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
from functools import lru_cache

CTX_BYTES = 112     # sizeof(SHA256_CTX): h[8], Nl, Nh, data[16], num, md_len (32-bit each), the same everywhere


@lru_cache(maxsize=1)
def _libcrypto():
    name = ctypes.util.find_library("crypto")
    if name is None:
        return None
    try:
        lib = ctypes.CDLL(name)
        functions = (lib.SHA256_Init, lib.SHA256_Update, lib.SHA256_Final)
    except (OSError, AttributeError):
        return None
    for function in functions:
        function.restype = ctypes.c_int
    lib.SHA256_Update.argtypes = (ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t)
    return lib


@lru_cache(maxsize=1)
def available() -> bool:
    """Whether saved states work here: the library is there and a hash split by a save and a
    restore matches hashlib's."""
    if _libcrypto() is None:
        return False
    data = bytes(range(256)) * 5
    first = Sha256()
    first.update(data[:77])
    second = Sha256(first.state())
    second.update(data[77:])
    return second.hexdigest() == hashlib.sha256(data).hexdigest()


class Sha256:
    """hashlib.sha256's update/hexdigest, plus state() and construction from a saved state."""

    def __init__(self, state: bytes | None = None):
        self._lib = _libcrypto()
        if self._lib is None:
            raise RuntimeError("libcrypto is not available (check sha256_state.available() first)")
        if state is not None and len(state) != CTX_BYTES:
            raise ValueError(f"a saved sha256 state has {CTX_BYTES} bytes, got {len(state)}")
        self._ctx = ctypes.create_string_buffer(state, CTX_BYTES) if state else ctypes.create_string_buffer(CTX_BYTES)
        if state is None:
            self._lib.SHA256_Init(self._ctx)

    def update(self, data) -> None:
        view = memoryview(data).cast("B")
        if view.nbytes:
            buffer = (ctypes.c_char * view.nbytes).from_buffer_copy(view) if view.readonly else \
                (ctypes.c_char * view.nbytes).from_buffer(view)
            self._lib.SHA256_Update(self._ctx, buffer, view.nbytes)

    def state(self) -> bytes:
        return self._ctx.raw

    def hexdigest(self) -> str:
        ctx = ctypes.create_string_buffer(self._ctx.raw, CTX_BYTES)    # Final changes the context: a copy
        out = ctypes.create_string_buffer(32)
        self._lib.SHA256_Final(out, ctx)
        return out.raw.hex()
