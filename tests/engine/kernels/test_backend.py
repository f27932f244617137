"""engine.kernels.backend: which version of each kernel runs, SLOWFRAME_KERNELS, and a C
module built from older sources."""

import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

from engine import kernels
from engine.kernels import backend
from engine.kernels.cbuild import functions
from kernel_testing import C_BUILT, FAMILY, NAMES, needs_c, version

KERNELS = Path(kernels.__file__).parent


def test_backend_and_dispatch():
    assert backend.BACKEND in ("c", "numpy")
    for name in NAMES:
        want = version("c_" if backend.BACKEND == "c" else "np_", name)
        assert getattr(kernels, name) is want, name
        assert getattr(FAMILY[name], name) is want, name
        assert callable(version("np_", name))
        assert (version("c_", name) is None) == (not C_BUILT)
    if os.environ.get("SLOWFRAME_KERNELS", "").lower() == "numpy":
        assert backend.BACKEND == "numpy"


def test_the_list_of_c_functions_is_what_the_build_compiles():
    build = runpy.run_path(str(KERNELS / "build.py"))
    defined = set()
    for name in build["SOURCES"]:
        defined |= set(re.findall(r"^(?:int|void|size_t) (sf_\w+)\(", (KERNELS / name).read_text(), re.M))
    assert set(backend.C_FUNCTIONS) == defined
    assert backend.C_FUNCTIONS == functions((KERNELS / "kernels.h").read_text())


def test_a_kernels_module_built_from_older_sources_counts_as_missing_functions():
    class Stale:
        sf_f16_to_f32 = sf_layer_norm = object()
    missing = backend.missing_functions(Stale())
    assert "sf_attention_head" in missing and "sf_f16_to_f32" not in missing
    if C_BUILT:
        assert backend.missing_functions(backend.lib) == []


def _backend_with(env_value):
    env = dict(os.environ, SLOWFRAME_KERNELS=env_value)
    code = ("import engine.kernels as k; from engine.kernels import activations as a; "
            "print(k.BACKEND, k.gelu_erf is a.np_gelu_erf)")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)


def test_env_forces_numpy():
    r = _backend_with("numpy")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["numpy", "True"]


def test_env_bad_value():
    r = _backend_with("fortran")
    assert r.returncode != 0 and "SLOWFRAME_KERNELS" in r.stderr


@needs_c
def test_env_c_uses_c():
    r = _backend_with("c")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["c", "False"]
