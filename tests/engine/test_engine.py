"""The engine limits OpenBLAS's idle-thread spinning, which it must do before numpy loads."""

import os
import subprocess
import sys

import engine

PRINT_TIMEOUT = "import os; print(os.environ.get('OPENBLAS_THREAD_TIMEOUT', 'unset'))"


def _run(code: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    clean.update(env)
    done = subprocess.run([sys.executable, "-c", code], env=clean, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_importing_engine_before_numpy_sets_the_openblas_thread_timeout():
    assert _run("import engine; " + PRINT_TIMEOUT) == engine.OPENBLAS_THREAD_TIMEOUT


def test_the_slowframe_cli_imports_engine_before_numpy():
    assert _run("import frame.cli; " + PRINT_TIMEOUT) \
        == engine.OPENBLAS_THREAD_TIMEOUT


def test_a_users_own_openblas_thread_timeout_is_kept():
    assert _run("import engine; " + PRINT_TIMEOUT, OPENBLAS_THREAD_TIMEOUT="20") == "20"


def test_after_numpy_is_loaded_engine_leaves_the_environment_alone():
    # too late to take effect in this process then
    assert _run("import numpy, engine; " + PRINT_TIMEOUT) == "unset"
