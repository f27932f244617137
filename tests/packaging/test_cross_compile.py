"""Every C kernel (the engine's and the dithering one) compiles for the Pi's aarch64 with the
build's own flags and no warning, where the cross-compiler is installed."""

import runpy
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CROSS_CC = "aarch64-linux-gnu-gcc"
COMPILE_ARGS = runpy.run_path(str(ROOT / "engine" / "kernels" / "cbuild.py"))["COMPILE_ARGS"]
SOURCES = [ROOT / "engine" / "kernels" / name
           for name in runpy.run_path(str(ROOT / "engine" / "kernels" / "build.py"))["SOURCES"]]
SOURCES.append(ROOT / "frame" / "display" / "dither.c")


@pytest.mark.skipif(shutil.which(CROSS_CC) is None, reason=f"{CROSS_CC} is not installed")
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_the_kernel_cross_compiles_for_aarch64_without_warnings(source, tmp_path):
    cmd = [CROSS_CC, *COMPILE_ARGS, "-Wall", "-Wextra", "-Werror", "-fPIC", "-c", str(source),
           "-o", str(tmp_path / "kernel.o")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
