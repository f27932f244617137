""".ci/arm64, the arm64 part of the test suite, checked without emulating anything: it refuses to be
skipped under CI and says so when a developer skips it, its test list and pins are real, and it passes
shellcheck. (The arm64 run itself is .ci/run's; its figures are in bench/RESULTS.md#arm64-ci.)"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / ".ci" / "arm64"
TEXT = SCRIPT.read_text()


def run(**env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("CI", "SLOWFRAME_SKIP_ARM64")}
    return subprocess.run(["bash", str(SCRIPT)], env={**clean, **env}, capture_output=True, text=True,
                          timeout=60)


def test_a_developer_can_skip_it_and_is_told_it_did_not_run():
    r = run(SLOWFRAME_SKIP_ARM64="1")
    assert r.returncode == 0, r.stderr
    assert "SKIPPED: the arm64 tests did not run" in r.stderr


def test_ci_refuses_to_skip_it():
    r = run(SLOWFRAME_SKIP_ARM64="1", CI="true")
    assert r.returncode == 1
    assert "CI must run the arm64 tests" in r.stderr and "did NOT run" in r.stderr


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_without_root_it_fails_saying_why():
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "SLOWFRAME_SKIP_ARM64")}
    # a copy anybody can read: the clone itself may sit in a folder only root enters (mktemp -d)
    with tempfile.TemporaryDirectory(dir="/tmp") as folder:
        os.chmod(folder, 0o755)
        script = Path(folder) / ".ci" / "arm64"
        script.parent.mkdir(mode=0o755)
        shutil.copy(SCRIPT, script)
        script.chmod(0o755)
        r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", str(script)],
                           env=env, capture_output=True, text=True, timeout=60, cwd=folder)
    assert r.returncode == 1
    assert "needs root" in r.stderr and "did NOT run" in r.stderr


def test_every_listed_test_path_exists():
    listed = [path for group in ("PI_CORE_TESTS", "REFERENCE_TESTS")
              for path in re.search(rf"^{group}=\((.*?)^\)", TEXT, re.S | re.M)[1].split()]
    assert listed
    for path in listed:
        file = path.strip('"').split("::")[0]
        assert (REPO / file).exists(), f".ci/arm64 lists {path}, whose file does not exist"


def test_every_pypi_package_is_pinned_to_one_version():
    lines = [line.split("#")[0].strip() for line in (REPO / ".ci" / "arm64-requirements.txt").read_text().splitlines()]
    pins = [line for line in lines if line]
    assert any(pin.startswith("torch==") for pin in pins)
    for pin in pins:
        assert re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][0-9A-Za-z.+]*", pin), f"not pinned to one version: {pin}"


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed (Debian package shellcheck)")
def test_passes_shellcheck():
    r = subprocess.run(["shellcheck", "-x", str(SCRIPT)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout
