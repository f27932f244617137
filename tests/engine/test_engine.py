"""The engine limits OpenBLAS's idle-thread spinning whatever a script imports first."""

import os
import subprocess
import sys

import pytest

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


# The CPU time OpenBLAS's own threads (all but the main one) use in the 0.2 s after each of
# five threaded GEMMs: spinning for 2^28 cycles, or asleep at once.
IDLE_SPIN_MS = """
import os, threading, time
import numpy as np
a = np.ones((768, 768), np.float32)
a @ a                      # OpenBLAS's threads start, with the timeout it read at load
import engine
def others_ns():
    tasks = [t for t in os.listdir('/proc/self/task') if int(t) != threading.get_native_id()]
    return sum(int(open(f'/proc/self/task/{t}/schedstat').read().split()[0]) for t in tasks), len(tasks)
spin = []
for _ in range(5):
    a @ a
    before, threads = others_ns()
    time.sleep(0.2)
    spin.append((others_ns()[0] - before) / 1e6)
print(threads, max(spin))
"""


def test_openblas_threads_sleep_after_a_gemm_even_when_numpy_was_imported_first():
    if (os.cpu_count() or 1) < 2:
        pytest.skip("OpenBLAS starts no thread of its own on one CPU: nothing spins")
    threads, spin_ms = _run(IDLE_SPIN_MS, OPENBLAS_NUM_THREADS="2").split()
    assert int(threads) >= 1    # OpenBLAS's thread is there to be measured
    assert float(spin_ms) < 2.0


def test_importing_engine_after_numpy_sets_the_timeout_for_child_processes_too():
    assert _run("import numpy, engine; " + PRINT_TIMEOUT) == engine.OPENBLAS_THREAD_TIMEOUT
