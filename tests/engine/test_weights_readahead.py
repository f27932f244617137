"""nocache asks the kernel to read the next ops' weights ahead, in plan order, within a window."""

from __future__ import annotations

import os

import numpy as np
import pytest

from engine import weights
from engine.weights import NoCacheProvider, TensorStore


def hinted_names(store: TensorStore, calls: list[tuple[int, int, int, int]]) -> list[str]:
    """The tensors hinted, in order (a tensor hinted in several pieces counts once)."""
    names = []
    for _fd, offset, _n, advice in calls:
        if advice != os.POSIX_FADV_WILLNEED:
            continue
        name = next(n for n, i in store.tensors.items() if i.offset <= offset < i.offset + max(1, i.nbytes))
        if not names or names[-1] != name:
            names.append(name)
    return names


def recording_fadvise(monkeypatch) -> list[tuple[int, int, int, int]]:
    calls = []
    real = os.posix_fadvise
    monkeypatch.setattr(os, "posix_fadvise", lambda *a: (calls.append(a), real(*a))[1])
    return calls


def test_readahead_follows_the_plan_and_stays_within_its_window(tiny_unet, monkeypatch):
    calls = recording_fadvise(monkeypatch)
    store = TensorStore.open(tiny_unet.folder)
    names = list(store.tensors)[:12]
    provider = NoCacheProvider(store, readahead_bytes=1)  # one group ahead at a time
    provider.begin([(n,) for n in names])
    for n in names[:5]:
        assert np.array_equal(provider.get((n,))[0], store.read(n))
    provider.close()                                      # joins the readahead thread
    assert hinted_names(store, calls) == names[:6]        # the first, then one more per op


def test_readahead_of_a_wide_window_covers_the_whole_plan_in_order(tiny_unet, monkeypatch):
    calls = recording_fadvise(monkeypatch)
    store = TensorStore.open(tiny_unet.folder)
    names = list(store.tensors)
    provider = NoCacheProvider(store)
    provider.begin([tuple(names[i:i + 3]) for i in range(0, len(names), 3)])
    provider.close()
    assert hinted_names(store, calls) == names            # the tiny model is far below 32 MB


def test_a_request_off_the_plan_is_still_served_and_hints_nothing_new(tiny_unet, monkeypatch):
    calls = recording_fadvise(monkeypatch)
    store = TensorStore.open(tiny_unet.folder)
    names = list(store.tensors)[:6]
    provider = NoCacheProvider(store, readahead_bytes=1)
    provider.begin([(n,) for n in names])
    assert np.array_equal(provider.get((names[4],))[0], store.read(names[4]))
    provider.close()
    assert hinted_names(store, calls) == names[:1]


def test_a_large_tensor_is_hinted_whole_in_pieces_the_kernel_does_not_truncate(tiny_unet, monkeypatch):
    # Linux reads at most read_ahead_kb of one WILLNEED hint; a bigger range is cut short silently
    calls = recording_fadvise(monkeypatch)
    monkeypatch.setattr(weights, "WILLNEED_PIECE", 1000)
    store = TensorStore.open(tiny_unet.folder)
    name = max(store.tensors, key=lambda n: store.tensors[n].nbytes)
    info = store.tensors[name]
    assert info.nbytes > 3000
    store.will_need(name)
    store.close()
    pieces = [(offset, n) for _fd, offset, n, advice in calls if advice == os.POSIX_FADV_WILLNEED]
    assert all(n <= 1000 for _, n in pieces)
    assert pieces[0][0] == info.offset
    assert all(a + n == b for (a, n), (b, _) in zip(pieces, pieces[1:]))       # contiguous, in order
    assert pieces[-1][0] + pieces[-1][1] == info.offset + info.nbytes


def test_the_readahead_window_is_an_engine_option(tiny_unet, monkeypatch):
    calls = recording_fadvise(monkeypatch)
    from engine.sdxl.unet import UNet

    with UNet.load(tiny_unet.folder, weights="nocache", readahead_bytes=1) as unet:
        assert unet.provider.readahead_bytes == 1
        unet.provider.begin([(n,) for n in list(unet.store.tensors)[:4]])
        unet.provider.end()
    assert len(hinted_names(unet.store, calls)) == 1      # a window of one group


def test_an_empty_readahead_window_is_refused_with_the_option_named():
    from engine.errors import InputError
    from engine.options import resolve

    with pytest.raises(InputError, match="readahead_bytes"):
        resolve("rpi-lowmem", readahead_bytes=0)
