"""The benchmarks' shared harness: each case in a fresh child process, its peak RSS, the
weights' page cache, a cgroup v1 memory limit, and the result tables and PASS lines.

A benchmark script runs a case as `python SCRIPT _child SPEC`: SPEC is JSON naming the
child's kind and where it writes its JSON result (spec["result"]); the script's
`__main__` hands it to child_main with the script's kinds. Only the children import
torch, diffusers or engine.sdxl, so each case's peak RSS (VmHWM) is its own.

The memory cgroup (run_in_cgroup) needs root and a cgroup v1 memory controller at
CGROUP_ROOT; its limit, 256 MiB with the page cache included, is what a Pi Zero 2 W
leaves us. Not run in CI.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the repo's engine, if not installed
import engine  # noqa: E402,F401  (it sets OpenBLAS's thread spin: bench/RESULTS.md#threads)
import numpy as np  # noqa: E402

from engine.atomic import atomic_write  # noqa: E402

CACHE = Path(os.environ.get("SLOWFRAME_BENCH_CACHE", "~/.cache/slowframe-bench")).expanduser()
MB = 1e6
PAGE = mmap.PAGESIZE

CGROUP_ROOT = Path("/sys/fs/cgroup/memory")
CGROUP_NAME = "slowframe-bench"
CGROUP_LIMIT = 256 * 1024 * 1024  # 268435456


# ----------------------------------------------------------------------------- small helpers


def log(msg: str = "") -> None:
    print(msg, flush=True)


def write_json(path: Path, obj) -> None:
    """Write JSON atomically, so a reader never sees half a file; its folder is made if missing
    (a child's result file may be the first thing written in a fresh cache)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path, "w") as f:
        f.write(json.dumps(obj, indent=1, sort_keys=True))


def read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def proc_status_kb(field: str) -> int | None:
    """A 'kB' field of /proc/self/status (VmHWM, VmRSS...), or None where there is no /proc."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def proc_io() -> dict:
    """/proc/self/io: read_bytes counts what this process actually read from the block device."""
    out = {}
    try:
        with open("/proc/self/io") as f:
            for line in f:
                k, v = line.split(":")
                out[k.strip()] = int(v)
    except (OSError, ValueError):
        pass
    return out


def memory_figures() -> dict:
    import resource

    hwm = proc_status_kb("VmHWM")
    rss = proc_status_kb("VmRSS")
    return {
        "vmhwm_bytes": None if hwm is None else hwm * 1024,
        "vmrss_bytes": None if rss is None else rss * 1024,
        # ru_maxrss is in kB on Linux
        "ru_maxrss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }


def reset_peak_rss() -> bool:
    """Reset this process's VmHWM to its current RSS (Linux: write 5 to /proc/self/clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def fmt(x, spec=".2f", none="-"):
    if x is None:
        return none
    try:
        return format(x, spec)
    except (TypeError, ValueError):
        return str(x)


# ----------------------------------------------------------------------------- page cache


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    return libc


def page_cache_fraction(path: Path) -> float | None:
    """Fraction of the file's pages that are in the page cache (mincore on a throwaway mapping)."""
    try:
        size = os.path.getsize(path)
        if size == 0:
            return 0.0
        libc = _libc()
        fd = os.open(path, os.O_RDONLY)
        try:
            addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            if addr is None or addr == ctypes.c_void_p(-1).value:
                return None
            try:
                pages = (size + PAGE - 1) // PAGE
                vec = (ctypes.c_ubyte * pages)()
                if libc.mincore(addr, size, vec) != 0:
                    return None
                resident = int((np.frombuffer(vec, dtype=np.uint8) & 1).sum())
                return resident / pages
            finally:
                libc.munmap(addr, size)
        finally:
            os.close(fd)
    except OSError:
        return None


def drop_page_cache(path: Path) -> dict:
    """posix_fadvise(DONTNEED) on the whole file; returns the cached fraction before and after."""
    before = page_cache_fraction(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    after = page_cache_fraction(path)
    return {"cached_before": before, "cached_after": after}


def describe_drop(d: dict) -> str:
    def pct(x):
        return "?" if x is None else f"{100 * x:.1f}%"

    s = f"page cache of weights: {pct(d.get('cached_before'))} -> {pct(d.get('cached_after'))} after POSIX_FADV_DONTNEED"
    after = d.get("cached_after")
    if after is not None and after > 0.01:
        s += " (some pages stayed: mapped by another process?) - 1st eval is NOT fully cold"
    else:
        s += " - 1st eval is a cold read"
    return s


# ----------------------------------------------------------------------------- subprocesses


def run_child(script: Path, spec: dict, *, cgroup_procs: Path | list[Path] | None = None,
              nice: int = 0) -> tuple[int, dict | None, float]:
    """Run one child case, `python script _child SPEC`; returns (returncode, result json or None, wall seconds).

    With cgroup_procs (one cgroup.procs file, or several of different controllers), the
    child joins those cgroups before python starts (in_cgroup), so everything the child
    does (imports included) is charged to them.
    """
    result_path = Path(spec["result"])
    try:
        result_path.unlink()
    except FileNotFoundError:
        pass
    cmd = [sys.executable, str(script), "_child", json.dumps(spec)]
    if cgroup_procs is not None:
        cmd = in_cgroup(cmd, cgroup_procs)
    preexec = (lambda: os.nice(nice)) if nice else None
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=str(REPO), preexec_fn=preexec)
    try:
        rc = proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        proc.wait()
        raise
    return rc, read_json(result_path), time.perf_counter() - t0


def in_cgroup(cmd: list[str], cgroup_procs: Path | list[Path]) -> list[str]:
    """`cmd` started through a tiny sh wrapper that writes its own pid to the cgroup.procs
    file(s) and then execs it."""
    for procs in reversed([cgroup_procs] if isinstance(cgroup_procs, Path) else cgroup_procs):
        cmd = ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(procs)] + cmd
    return cmd


def child_main(spec_json: str, kinds: dict[str, Callable[[dict], dict]]) -> int:
    """The child's side of run_child: run the spec's kind and write its result, or the
    traceback as "error" (added to whatever partial result the child wrote)."""
    spec = json.loads(spec_json)
    result_path = Path(spec["result"])
    try:
        if spec["kind"] not in kinds:
            raise ValueError(f"unknown child kind {spec['kind']!r}")
        res = kinds[spec["kind"]](spec)
    except BaseException:
        prev = read_json(result_path) or {}
        prev["error"] = traceback.format_exc()
        write_json(result_path, prev)
        traceback.print_exc()
        return 1
    write_json(result_path, res)
    return 0


def describe_rc(rc: int) -> str:
    if rc == 0:
        return "exit 0"
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit {rc}"


def compare(out_path, ref_path) -> dict:
    a = np.load(out_path).astype(np.float64).ravel()
    b = np.load(ref_path).astype(np.float64).ravel()
    if a.shape != b.shape:
        return {"pcc": None, "max_abs": None, "note": f"shape {a.shape} vs reference {b.shape}"}
    finite = np.isfinite(a).all() and np.isfinite(b).all()
    if not finite:
        return {"pcc": float("nan"), "max_abs": float("nan"),
                "note": f"non-finite values: engine {int((~np.isfinite(a)).sum())}, reference {int((~np.isfinite(b)).sum())}"}
    da, db = a - a.mean(), b - b.mean()
    denom = np.sqrt(np.dot(da, da) * np.dot(db, db))
    pcc = float(np.dot(da, db) / denom) if denom > 0 else float("nan")
    return {"pcc": pcc, "max_abs": float(np.abs(a - b).max()), "ref_max_abs": float(np.abs(b).max())}


# ----------------------------------------------------------------------------- memory cgroup


def cgroup_unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "not root (the memory cgroup check needs root to create a cgroup)"
    if not (CGROUP_ROOT / "cgroup.procs").is_file() or not (CGROUP_ROOT / "memory.limit_in_bytes").is_file():
        return f"no cgroup v1 memory controller mounted at {CGROUP_ROOT}"
    return None


def cg_read(cgroup: Path, name: str) -> str | None:
    try:
        return (cgroup / name).read_text().strip()
    except OSError:
        return None


def cg_write(cgroup: Path, name: str, value) -> None:
    (cgroup / name).write_text(str(value))


def cgroup_remove(cgroup: Path) -> None:
    if not cgroup.exists():
        return
    for _ in range(50):
        try:
            cgroup.rmdir()
            return
        except OSError:
            time.sleep(0.1)  # a killed child may take a moment to leave
    log(f"[cgroup] WARNING: could not remove {cgroup} (procs: {cg_read(cgroup, 'cgroup.procs')!r})")


def swap_total_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("SwapTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def cgroup_create(cgroup: Path) -> None:
    if cgroup.exists():  # left over from an interrupted run
        procs = cg_read(cgroup, "cgroup.procs")
        if procs:
            raise SystemExit(f"[cgroup] {cgroup} exists and holds processes {procs.split()}; remove it first")
        cgroup_remove(cgroup)
    cgroup.mkdir()
    cg_write(cgroup, "memory.limit_in_bytes", CGROUP_LIMIT)
    # memory+swap limit too, so the case cannot escape to swap. Only where there is swap:
    # without swap it changes nothing, and with memsw.limit == limit the memsw counter fails
    # first and memory.failcnt stays 0 even when the child is OOM-killed (seen on 6.18).
    if (cgroup / "memory.memsw.limit_in_bytes").exists() and swap_total_bytes() > 0:
        cg_write(cgroup, "memory.memsw.limit_in_bytes", CGROUP_LIMIT)


def cgroup_stats(cgroup: Path) -> dict:
    out = {"failcnt": cg_read(cgroup, "memory.failcnt"),
           "max_usage_in_bytes": cg_read(cgroup, "memory.max_usage_in_bytes"),
           "limit_in_bytes": cg_read(cgroup, "memory.limit_in_bytes"),
           "memsw_limit_in_bytes": cg_read(cgroup, "memory.memsw.limit_in_bytes"),
           "memsw_failcnt": cg_read(cgroup, "memory.memsw.failcnt")}
    oom = cg_read(cgroup, "memory.oom_control") or ""
    for line in oom.splitlines():
        k, _, v = line.partition(" ")
        out[f"oom_{k}" if not k.startswith("oom") else k] = v
    for k in ("failcnt", "max_usage_in_bytes", "limit_in_bytes", "memsw_limit_in_bytes", "memsw_failcnt",
              "under_oom", "oom_under_oom", "oom_kill", "oom_kill_disable"):
        if out.get(k) is not None and str(out[k]).isdigit():
            out[k] = int(out[k])
    stat = cg_read(cgroup, "memory.stat") or ""
    for line in stat.splitlines():
        k, _, v = line.partition(" ")
        if k in ("total_cache", "total_rss", "total_mapped_file", "cache", "rss", "mapped_file"):
            out[f"stat_{k}"] = int(v)
    return out


def describe_cgroup(st: dict, rc: int) -> str:
    under = st.get("oom_under_oom", st.get("under_oom"))
    return (f"{'completed' if rc == 0 else 'KILLED' if rc < 0 else 'FAILED'} ({describe_rc(rc)}), "
            f"memory.failcnt {st.get('failcnt')}, max_usage {int(st.get('max_usage_in_bytes') or 0) / MB:.1f} MB "
            f"(limit {CGROUP_LIMIT / MB:.1f} MB = 256 MiB), under_oom {under}, oom_kill {st.get('oom_kill', 'n/a')}")


def run_in_cgroup(fn, name: str = CGROUP_NAME):
    """Create the cgroup `name`, run fn(procs_path) -> (rc, result), collect the counters, remove the cgroup."""
    cgroup = CGROUP_ROOT / name
    cgroup_create(cgroup)
    try:
        rc, res = fn(cgroup / "cgroup.procs")
        st = cgroup_stats(cgroup)
    finally:
        cgroup_remove(cgroup)
    return rc, res, st


def cgroup_selftest(script: Path, sizes_mb: list[int]) -> list[dict]:
    """Check the cgroup machinery with dummy children (kind "alloc": child_alloc) of `script`."""
    out = []
    for mb in sizes_mb:
        def fn(procs):
            spec = {"kind": "alloc", "mb": mb, "result": str(CACHE / f"alloc-{mb}.json")}
            rc, res, _ = run_child(script, spec, cgroup_procs=procs)
            return rc, res

        rc, res, st = run_in_cgroup(fn)
        Path(CACHE / f"alloc-{mb}.json").unlink(missing_ok=True)
        completed = rc == 0 and bool(res) and res.get("stage") == "done"
        log(f"[cgroup selftest] allocate+touch {mb} MB: {describe_cgroup(st, rc)}"
            + (f", child VmHWM {res['mem']['vmhwm_bytes'] / MB:.0f} MB" if completed else ""))
        out.append({"mb": mb, "rc": rc, "completed": completed, "cgroup": st, "result": res})
    return out


def child_alloc(spec: dict) -> dict:
    """Dummy for the cgroup machinery: allocate and touch spec['mb'] MB, without numpy."""
    write_json(Path(spec["result"]), {"stage": "start", "pid": os.getpid()})
    n = int(spec["mb"] * MB)
    buf = bytearray(n)
    buf[::PAGE] = b"\x01" * len(range(0, n, PAGE))  # touch every page
    time.sleep(0.2)
    return {"stage": "done", "bytes": n, "mem": memory_figures()}


# ----------------------------------------------------------------------------- results


def print_table(cols: list[str], rows: list[dict]) -> None:
    """Rows under column headings: the first two and the last column left-aligned, the figures right-aligned."""
    lines = [cols]
    for r in rows:
        lines.append([str(r.get(c, "")) for c in cols])
    widths = [max(len(l[i]) for l in lines) for i in range(len(cols))]
    sep = "  "
    log(sep.join(c.ljust(widths[i]) for i, c in enumerate(cols)))
    log(sep.join("-" * widths[i] for i in range(len(cols))))
    for l in lines[1:]:
        log(sep.join(v.ljust(widths[i]) if i in (0, 1, len(cols) - 1) else v.rjust(widths[i]) for i, v in enumerate(l)))


def listed_rounds(values: list[float], spec: str, unit: str = "") -> str | None:
    """Each round's figure, for a note: None with a single round."""
    return f"rounds {', '.join(format(v, spec) for v in values)}{unit}" if len(values) > 1 else None


def verdict(ok: bool | None) -> str:
    """A target's verdict, as the PASS lines print it."""
    return "n/a " if ok is None else ("PASS" if ok else "FAIL")
