"""engine/convert/sha256_state.py: a sha256 saved mid-way and continued gives hashlib's digest."""

from __future__ import annotations

import hashlib
import os

import pytest

from engine.convert import sha256_state

pytestmark = pytest.mark.skipif(not sha256_state.available(), reason="libcrypto's SHA256_* are not available here")


@pytest.mark.parametrize("split", [0, 1, 63, 64, 65, 1000, 4095])
def test_a_state_saved_at_any_byte_continues_to_the_same_digest(split):
    data = os.urandom(4096)
    first = sha256_state.Sha256()
    first.update(data[:split])
    saved = first.state()
    assert len(saved) == sha256_state.CTX_BYTES
    second = sha256_state.Sha256(saved)
    second.update(memoryview(bytearray(data[split:])))
    assert second.hexdigest() == hashlib.sha256(data).hexdigest()
    assert first.hexdigest() == hashlib.sha256(data[:split]).hexdigest()   # hexdigest leaves the state alone


def test_a_damaged_state_is_refused():
    with pytest.raises(ValueError, match="112 bytes"):
        sha256_state.Sha256(b"\0" * 5)
