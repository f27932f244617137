"""systemd/: the root step that saves the web app's config edit watches the file the daemon makes, runs
`slowframe config commit` on the files the daemon uses, and can write nothing but the boot partition and the
daemon's runtime folder; the daemon itself can no longer write the boot partition.

The verification and the exposure come from `systemd-analyze` (skipped where it is not installed).
"""

from __future__ import annotations

import importlib.util
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from frame.cli import build_parser
from frame.cli.config import cmd_config_commit
from frame.cli.web import WEB_STATE_DIR
from frame.configsave import COMMIT_SECONDS, REQUEST_NAME
from frame.paths import BOOT_PARTITION, CONFIG_COMMIT_UNIT, SEARCH_PATH, SYSTEM_RUNTIME_DIR
from frame.web.configfile import SAVE_SECONDS

SYSTEMD = Path(__file__).resolve().parents[2] / "systemd"
PATH_UNIT, SERVICE = SYSTEMD / "slowframe-config.path", SYSTEMD / "slowframe-config.service"
MAX_EXPOSURE = 1.0   # root with one capability and two writable folders (the daemon's unit: 2.0)

_spec = importlib.util.spec_from_file_location("unit_tests", Path(__file__).with_name("test_systemd.py"))
_unit_tests = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_unit_tests)
read_unit, one, seconds, exposure = _unit_tests.read_unit, _unit_tests.one, _unit_tests.seconds, _unit_tests.exposure

needs_analyze = pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                                   reason="systemd-analyze is not installed (Debian package systemd)")


@needs_analyze
def test_the_config_units_verify(tmp_path):
    out = subprocess.run(["systemd-analyze", "verify", str(PATH_UNIT), str(SERVICE)], capture_output=True,
                         text=True, check=False, cwd=tmp_path)
    problems = [line for line in (out.stdout + out.stderr).splitlines()
                if line.strip() and "is not executable" not in line]   # /usr/local/bin/slowframe on the frame
    assert problems == []


@needs_analyze
def test_the_root_step_is_at_least_as_locked_down_as_practical():
    assert exposure(SERVICE) <= MAX_EXPOSURE


def test_the_path_unit_watches_the_request_the_daemon_makes_and_is_where_the_daemon_looks():
    path = read_unit(PATH_UNIT)
    assert Path(one(path, "Path.PathExists")) == SYSTEM_RUNTIME_DIR / REQUEST_NAME
    assert "Path.Unit" not in path and SERVICE.stem == PATH_UNIT.stem   # it starts the service of its name
    assert one(path, "Install.WantedBy") == "paths.target"
    assert CONFIG_COMMIT_UNIT.name == PATH_UNIT.name     # the file whose presence tells the daemon to use it


def test_the_service_commits_the_daemons_request_to_the_card_config():
    service = read_unit(SERVICE)
    assert one(service, "Service.Type") == "oneshot"
    argv = shlex.split(one(service, "Service.ExecStart"))
    args = build_parser().parse_args(argv[1:])
    assert Path(argv[0]).name == "slowframe" and args.func is cmd_config_commit
    assert (args.folder, args.file) == (SYSTEM_RUNTIME_DIR, SEARCH_PATH[0])
    assert seconds(one(service, "Service.TimeoutStartSec")) > COMMIT_SECONDS   # the daemon gives up first
    assert COMMIT_SECONDS < SAVE_SECONDS < 60          # the web app waits longer, within waitress's channel_timeout


def test_the_service_may_write_the_boot_partition_and_the_runtime_folder_and_nothing_else():
    service = read_unit(SERVICE)
    assert "Service.User" not in service                     # root: the boot partition is root's alone
    assert one(service, "Service.CapabilityBoundingSet") == "CAP_DAC_OVERRIDE"   # into the daemon's 0750 folder
    assert one(service, "Service.ProtectSystem") == "strict" and one(service, "Service.NoNewPrivileges") == "yes"
    writable = {Path(p.lstrip("-")) for line in service["Service.ReadWritePaths"] for p in line.split()}
    assert writable == {BOOT_PARTITION, SYSTEM_RUNTIME_DIR} and SEARCH_PATH[0].parent == BOOT_PARTITION
    assert one(service, "Service.PrivateNetwork") == "yes" and one(service, "Service.RestrictAddressFamilies") == \
        "none"
    assert one(service, "Service.PrivateDevices") == "yes" and one(service, "Service.ProtectHome") == "yes"


def test_the_secrets_a_config_could_name_are_hidden_from_the_root_step():
    hidden = {Path(p.lstrip("-")) for line in read_unit(SERVICE)["Service.InaccessiblePaths"] for p in line.split()}
    assert {WEB_STATE_DIR, Path("/etc/wpa_supplicant"), Path("/etc/ssh"), Path("/etc/shadow")} <= hidden
    assert not any(p == BOOT_PARTITION or p.is_relative_to(BOOT_PARTITION) for p in hidden)


def test_the_daemon_cannot_write_the_boot_partition():
    daemon = read_unit(SYSTEMD / "slowframe.service")
    assert one(daemon, "Service.ProtectSystem") == "strict"
    writable = [Path(p.lstrip("-")) for line in daemon.get("Service.ReadWritePaths", []) for p in line.split()]
    assert not [p for p in writable if p == BOOT_PARTITION or p.is_relative_to(BOOT_PARTITION)
                or BOOT_PARTITION.is_relative_to(p)]
