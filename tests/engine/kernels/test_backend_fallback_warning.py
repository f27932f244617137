"""A missing C build is reported, once: the engine works without it, only slower."""

from __future__ import annotations

import logging

import pytest

from engine import model
from engine.kernels import backend
from engine.sdxl import UNet


@pytest.fixture
def unbuilt_kernels(monkeypatch):
    monkeypatch.setattr(backend, "BACKEND", "numpy")
    monkeypatch.setattr(backend, "_CHOICE", "")
    monkeypatch.setattr(model, "_fallback_reported", False)


def test_the_fallback_warning_says_how_to_build_the_kernels(unbuilt_kernels):
    message = backend.fallback_warning()
    assert "pip install -e ." in message and "SLOWFRAME_KERNELS=numpy" in message


def test_no_warning_with_the_c_kernels_or_when_numpy_was_asked_for(monkeypatch):
    monkeypatch.setattr(backend, "BACKEND", "c")
    assert backend.fallback_warning() is None
    monkeypatch.setattr(backend, "BACKEND", "numpy")
    monkeypatch.setattr(backend, "_CHOICE", "numpy")
    assert backend.fallback_warning() is None


def test_loading_a_model_on_the_fallback_warns_once_per_process(unbuilt_kernels, tiny_unet, caplog):
    with caplog.at_level(logging.WARNING, logger="engine.model"):
        for _ in range(2):
            UNet.load(tiny_unet.folder).close()
    warnings = [r for r in caplog.records if "C kernels are not built" in r.getMessage()]
    assert len(warnings) == 1
