"""A short soak of a real `slowframe run` under random disturbance (tests/soak.py has the whole story)."""

from __future__ import annotations

import os

import pytest

from small_disk import small_disk
from soak import Soak, undisturbed

SECONDS = float(os.environ.get("SLOWFRAME_SOAK_SECONDS", "90"))


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from engine.sdxl.random_model import write_random_model

    return write_random_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture
def state_disk(tmp_path):
    """The state folder on a 48 MB disk of its own, so the soak can fill it; None where that cannot be mounted."""
    with small_disk(tmp_path / "state", "48m") as mounted:
        yield tmp_path / "state" if mounted else None


def test_a_disturbed_daemon_keeps_answering_and_loses_no_picture(tmp_path, tiny_model, state_disk):
    soak = Soak(tmp_path, tiny_model, state_disk or tmp_path / "state", seed=2026, disk_full=state_disk is not None)
    counts = soak.run(SECONDS)
    counts = soak.check(compare=4, regenerate=undisturbed(tiny_model))
    print(counts.summary())
    assert not counts.failures, "\n".join(counts.failures) + "\n" + (tmp_path / "daemon.log").read_text()[-3000:]
    assert counts.pictures >= 1 and counts.compared >= 1 and counts.status_checks >= 20
