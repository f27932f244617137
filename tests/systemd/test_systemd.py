"""systemd/: the service unit is hardened, and agrees with what the daemon does.

The exposure score and the syscall groups come from `systemd-analyze` (skipped where it
is not installed); everything else reads the unit files and asks the daemon's own code.
"""

from __future__ import annotations

import inspect
import re
import shlex
import shutil
import signal
import stat
import subprocess
from pathlib import Path

import pytest

from engine.sdxl.conditioning_cache import default_cache_dir
from frame import control
from frame.cli import build_parser
from frame.cli.daemon import cmd_run
from frame.daemon import Daemon
from frame.display.config import DisplayConfig
from frame.paths import DEFAULT_MODEL_PATH, SEARCH_PATH, default_runtime_dir, default_state_dir
from frame.worker import _IOPRIO_SET, ChildRunner

SYSTEMD = Path(__file__).resolve().parents[2] / "systemd"
UNIT = SYSTEMD / "slowframe.service"
MAX_EXPOSURE = 2.0
REFRESH_SECONDS = 45          # one refresh of the slowest Inky panel (its BUSY wait), measured by Pimoroni
WORKER_SYSCALLS = {"setpriority", "ioprio_set", "prctl"}   # frame/worker.py: _lower_priority, _die_with_parent

needs_analyze = pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                                   reason="systemd-analyze is not installed (Debian package systemd)")


def read_unit(path: Path) -> dict[str, list[str]]:
    """'Section.Key' -> every value given, in order (systemd keys may repeat)."""
    values: dict[str, list[str]] = {}
    section = None
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        values.setdefault(f"{section}.{key.strip()}", []).append(value.strip())
    return values


def one(unit: dict[str, list[str]], key: str) -> str:
    assert key in unit, f"{key} missing"
    return unit[key][-1]


def seconds(value: str) -> float:
    """A systemd time span such as 10min, 3min 30s, 90, 1h."""
    units = {"": 1, "s": 1, "sec": 1, "min": 60, "m": 60, "h": 3600, "hr": 3600}
    total = 0.0
    for number, unit in re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", value):
        total += float(number) * units[unit]
    return total


@pytest.fixture(scope="module")
def unit() -> dict[str, list[str]]:
    return read_unit(UNIT)


def exposure(service: Path) -> float:
    """`systemd-analyze security`'s overall exposure level of the unit file ``service``."""
    out = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--no-pager", str(service)],
                         capture_output=True, text=True, check=False)
    match = re.search(rf"Overall exposure level for {re.escape(service.name)}: ([0-9.]+)", out.stdout)
    assert match, out.stdout + out.stderr
    return float(match[1])


@needs_analyze
@pytest.mark.parametrize("service", [UNIT, SYSTEMD / "slowframe-web.service", SYSTEMD / "slowframe-config.service"],
                         ids=lambda path: path.name)
def test_security_exposure_is_at_most_2(service):
    assert exposure(service) <= MAX_EXPOSURE


@needs_analyze
def test_units_have_no_unknown_settings(tmp_path):
    out = subprocess.run(["systemd-analyze", "verify", str(UNIT), str(SYSTEMD / "slowframe-devices.service")],
                         capture_output=True, text=True, check=False, cwd=tmp_path)
    # the test machine may not have slowframe in /usr/local/bin or udevadm; anything else is a mistake
    problems = [line for line in (out.stdout + out.stderr).splitlines()
                if line.strip() and "is not executable" not in line]
    assert problems == []


def test_notify_watchdog_and_stop_fit_the_daemon(unit):
    assert one(unit, "Service.Type") == "notify"
    assert one(unit, "Service.NotifyAccess") == "main"       # READY/STATUS/WATCHDOG come from the main process
    worst_refresh = (DisplayConfig().busy_retries + 1) * REFRESH_SECONDS   # the main loop's longest block
    assert seconds(one(unit, "Service.WatchdogSec")) >= 2 * worst_refresh
    term_timeout = inspect.signature(ChildRunner).parameters["term_timeout"].default
    stop = seconds(one(unit, "Service.TimeoutStopSec"))
    assert stop >= 90 and stop >= worst_refresh + term_timeout   # a refresh is never cut, the worker checkpoints
    assert one(unit, "Service.KillMode") == "mixed"          # SIGTERM to the daemon only; it stops the worker
    assert one(unit, "Service.OOMPolicy") == "continue"      # a worker killed for memory is retried, not fatal
    assert one(unit, "Service.Restart") == "on-failure"
    assert "Unit.StartLimitBurst" in unit and "Unit.StartLimitIntervalSec" in unit


def test_exec_start_and_reload_are_what_the_daemon_handles(unit, monkeypatch):
    argv = shlex.split(one(unit, "Service.ExecStart"))
    assert Path(argv[0]).name == "slowframe"
    assert build_parser().parse_args(argv[1:]).func is cmd_run
    assert shlex.split(one(unit, "Service.ExecReload")) == ["/bin/kill", "-HUP", "$MAINPID"]

    class Noted:
        _signals: list[int] = []

    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        Daemon.install_signal_handlers(Noted)
        signal.getsignal(signal.SIGHUP)(signal.SIGHUP, None)
        signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
    assert Noted._signals == [signal.SIGHUP, signal.SIGTERM]   # the main loop reloads / stops on them


def test_directories_are_where_the_daemon_looks(unit, monkeypatch, tmp_path):
    assert one(unit, "Service.StateDirectory") == "slowframe"
    monkeypatch.setenv("STATE_DIRECTORY", "/var/lib/slowframe")
    assert default_state_dir() == Path("/var/lib/slowframe")
    assert DEFAULT_MODEL_PATH.is_relative_to("/var/lib/slowframe")      # the image mounts models there
    assert one(unit, "Service.WorkingDirectory") == "%S/slowframe"      # writable, for lgpio's pipe

    assert one(unit, "Service.ConfigurationDirectory") == "slowframe"
    assert Path("/etc/slowframe/config.yaml") in SEARCH_PATH

    assert one(unit, "Service.CacheDirectory") == "slowframe"
    assert "XDG_CACHE_HOME=%C" in unit["Service.Environment"]
    monkeypatch.setenv("XDG_CACHE_HOME", "/var/cache")
    assert default_cache_dir().is_relative_to("/var/cache/slowframe")

    assert one(unit, "Service.RuntimeDirectory") == "slowframe"
    monkeypatch.setenv("RUNTIME_DIRECTORY", "/run/slowframe")
    assert default_runtime_dir() == Path("/run/slowframe")
    monkeypatch.delenv("RUNTIME_DIRECTORY")
    monkeypatch.setattr(Path, "is_dir", lambda self: str(self) == "/run/slowframe")
    assert default_runtime_dir() == Path("/run/slowframe")      # `slowframe status` from a shell
    monkeypatch.undo()

    # members of the service's group reach the socket: the directory lets the group in, the socket is 0660
    mode = int(one(unit, "Service.RuntimeDirectoryMode"), 8)
    assert mode & stat.S_IXGRP and not mode & stat.S_IRWXO
    server = control.ControlServer(tmp_path / control.SOCKET_NAME, lambda request: {"ok": True}).start()
    try:
        assert stat.S_IMODE((tmp_path / control.SOCKET_NAME).stat().st_mode) == 0o660
        assert stat.S_ISSOCK((tmp_path / control.SOCKET_NAME).stat().st_mode)
    finally:
        server.close()


def test_device_access_is_the_hat_and_nothing_else(unit):
    assert one(unit, "Service.DevicePolicy") == "closed"
    assert "Service.PrivateDevices" not in unit               # it would hide the HAT's devices
    allowed = dict(v.split() for v in unit["Service.DeviceAllow"])
    assert allowed == {"/dev/gpiochip0": "rw", "/dev/spidev0.0": "rw", "/dev/spidev0.1": "rw", "/dev/i2c-1": "rw"}

    waiter = read_unit(SYSTEMD / "slowframe-devices.service")
    assert "slowframe-devices.service" in one(unit, "Unit.Wants") and "slowframe-devices.service" in \
        one(unit, "Unit.After")
    waited = [a for a in shlex.split(one(waiter, "Service.ExecStart").lstrip("-")) if a.startswith("/dev/")]
    assert waited and set(waited) <= set(allowed)


def test_service_user_groups_and_device_rules_agree(unit):
    lines = [line.split() for line in (SYSTEMD / "slowframe.sysusers").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    users = {fields[1] for fields in lines if fields[0] == "u"}
    groups = {fields[1] for fields in lines if fields[0] in "gu"}
    assert one(unit, "Service.User") in users and one(unit, "Service.Group") in groups
    supplementary = set(one(unit, "Service.SupplementaryGroups").split())
    assert supplementary <= groups

    rules = (SYSTEMD / "60-slowframe.rules").read_text()
    owner = {}
    for kernel, group in re.findall(r'KERNEL=="([^"]+)".*GROUP="([^"]+)", MODE="0660"', rules):
        owner[kernel] = group
    for device in dict(v.split() for v in unit["Service.DeviceAllow"]):
        name = Path(device).name
        groups_of = [g for pattern, g in owner.items() if re.fullmatch(_glob_to_regex(pattern), name)]
        assert groups_of and set(groups_of) <= supplementary, device


def _glob_to_regex(pattern: str) -> str:
    return re.escape(pattern).replace(r"\*", ".*").replace(r"\[0\-9\]", "[0-9]")


@needs_analyze
def test_syscall_filter_allows_what_the_worker_calls(unit):
    assert _IOPRIO_SET   # the worker lowers its I/O priority with a raw ioprio_set
    allowed: set[str] = set()
    for entry in unit["Service.SystemCallFilter"]:
        deny = entry.startswith("~")
        names = set()
        for item in entry.lstrip("~").split():
            names |= _expand(item)
        allowed = allowed - names if deny else allowed | names
    assert WORKER_SYSCALLS <= allowed
    assert "reboot" not in allowed and "mount" not in allowed


def _expand(item: str) -> set[str]:
    if not item.startswith("@"):
        return {item}
    out = subprocess.run(["systemd-analyze", "syscall-filter", "--no-pager", item], capture_output=True,
                         text=True, check=True).stdout
    names = set()
    for line in out.splitlines()[1:]:
        name = line.strip()
        if not name or name.startswith("#"):
            continue
        names |= _expand(name) if name.startswith("@") else {name}
    return names


# `slowframe models download`, a command people run, not the service, is the one user of the network.
DOWNLOAD_MODULES = {"engine/convert/fetch.py", "engine/convert/hub.py", "engine/convert/download.py"}
DOWNLOAD_COMMAND = "frame/cli/models.py"


def test_only_local_sockets(unit):
    assert one(unit, "Service.RestrictAddressFamilies") == "AF_UNIX"   # sd_notify, the control socket, journal
    assert one(unit, "Service.PrivateNetwork") == "yes"
    root = Path(__file__).resolve().parents[2]
    for source in [*root.glob("frame/**/*.py"), *root.glob("engine/**/*.py")]:
        name, text = source.relative_to(root).as_posix(), source.read_text()
        if name not in DOWNLOAD_MODULES:
            assert not re.search(r"AF_INET|create_connection|urlopen|import (?:requests|http)", text), source
        if name not in DOWNLOAD_MODULES | {DOWNLOAD_COMMAND}:
            assert not re.search(r"engine\.convert(?:\.| import )(?:fetch|hub|download)\b", text), source


