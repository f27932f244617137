"""Switching the frame off and restarting it (the ``shutdown`` and ``reboot`` actions): a request file that systemd acts on.

The daemon runs as the unprivileged ``slowframe`` user. To switch the frame off it makes the file
``poweroff`` (or ``reboot``) in its runtime folder, /run/slowframe, which only its user can write;
systemd/slowframe-power@.path sees it and starts slowframe-power@.service, which removes the file
and runs ``systemctl --no-block poweroff|reboot`` as root. So no polkit daemon (~8 MB) sits in a
512 MB Pi's memory and no process of ours holds a privilege. systemd then stops the service first,
so the job is checkpointed as on any stop and resumes at the next start.

Buttons and the web app (through the control socket) take this one way alike.
"""

from __future__ import annotations

from pathlib import Path

from engine.atomic import write_bytes

REQUEST_FILES = {"shutdown": "poweroff", "reboot": "reboot"}


class PowerError(Exception):
    """The frame cannot ask to be shut down or restarted (the message says why)."""


class SystemPower:
    """``switch("shutdown" | "reboot")``: the request file in ``runtime_dir``; PowerError when it cannot be made."""

    def __init__(self, runtime_dir: Path | None):
        self.runtime_dir = Path(runtime_dir) if runtime_dir is not None else None

    def switch(self, action: str) -> Path:
        if action not in REQUEST_FILES:
            raise PowerError(f"no such power action '{action}'; choose one of: {', '.join(REQUEST_FILES)}")
        if self.runtime_dir is None:
            raise PowerError("this daemon has no runtime folder (the service's /run/slowframe) to ask systemd "
                             "through; on a PC, shut down as you usually do")
        path = self.runtime_dir / REQUEST_FILES[action]
        try:
            write_bytes(path, b"")
        except OSError as exc:
            raise PowerError(f"cannot make {path}: {exc.strerror or exc}") from None
        return path
