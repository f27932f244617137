"""The control socket's commands for the web app: the config's text, the history's files, uploads, the system, power.

``Daemon.handle_request`` hands each command of COMMANDS to its function here (status and the
actions stay in the daemon). They run on the control socket's thread, so they read files,
write only files the main loop never writes (the config, the uploads folder, power requests),
and leave everything else to the main loop through ``Daemon.post``:

- ``config``: the config file's path, text, version (a hash) and current problems;
- ``config_replace`` ``{"text", "version"}``: checked by the checker of ``slowframe config check``,
  refused with every problem (line and column) when it has errors or when the file changed
  since ``version`` was read; else the old file is kept as ``NAME.bak``, the new one written
  atomically (on the card by the root step of frame.configsave: the daemon may not write the
  boot partition), and the daemon reloads;
- ``history``: every picture's record; ``history_file`` ``{"id"}``: the PNG as a descriptor (only
  pictures the history lists, so no name reaches any other file); ``history_delete`` ``{"id"}``;
- ``upload`` ``{"pin"}`` with a picture's descriptor: checked like every picture the frame opens,
  kept in ``uploads/`` and shown next, pinned (no new picture replaces it) when asked;
- ``preview``: the worker's latest preview of the picture in progress, as a descriptor;
- ``pairing`` ``{"url", "code"}``: the pairing screen (frame.pairing) on the panel next;
- ``system``: disk, temperature, under-voltage, uptime, the daemon's recent log lines;
- ``power`` ``{"action": "reboot" | "poweroff"}``: queued as the buttons' ``reboot`` / ``shutdown``
  action (frame.power: a request file that systemd acts on as root).
"""

from __future__ import annotations

import collections
import hashlib
import io
import logging
import os
import shutil
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from engine.atomic import write_bytes
from engine.sdxl.recipes import RECIPES
from frame.config import ConfigError, HistorySettings, check_text
from frame.config.prompts import SAMPLERS
from frame.config.reader import compose
from frame.config.settings import Config
from frame.configsave import ConfigWriter, SaveError, backup_path, problem_json
from frame.control import WithFile
from frame.display.config import AUTO_PANEL, ORIENTATIONS, DisplayConfig
from frame.display.panels import PANELS
from frame.pairing import ADDRESS, CODE, pairing_card
from frame.pictures import PictureError, open_picture
from frame.themes import ORDERS
from frame.userfiles import MAX_FILE_BYTES, UserFileError, read_user_text

if TYPE_CHECKING:
    from frame.daemon import Daemon

log = logging.getLogger("slowframe.commands")

MAX_UPLOAD_BYTES = 32 * 1024 * 1024   # the web app sends a PNG of at most the largest panel's size (~6 MB)
KEEP_UPLOADS = 3
LOG_LINES = 200
POWER_ACTIONS = ("reboot", "poweroff")
THERMAL = Path("/sys/class/thermal/thermal_zone0/temp")
HWMON = Path("/sys/class/hwmon")       # the Pi firmware's "rpi_volt" sensor flags under-voltage
UPTIME = Path("/proc/uptime")

_config_lock = threading.Lock()       # two phones saving at once: one write at a time
# what the web app's forms offer, and what the frame uses for a key the file leaves out
CHOICES = {"recipe": list(RECIPES), "sampler": list(SAMPLERS), "panel": [AUTO_PANEL, *PANELS],
           "orientation": list(ORIENTATIONS), "order": list(ORDERS)}
DEFAULTS = {"schedule.times": [], "schedule.quiet_hours": [], "display.panel": DisplayConfig().panel,
            "display.orientation": DisplayConfig().orientation, "display.caption": DisplayConfig().caption,
            "display.preview": DisplayConfig().preview,
            "order": next(f.default for f in fields(Config) if f.name == "order"),
            "history.keep": HistorySettings().keep}


class RecentLog(logging.Handler):
    """The daemon's last LOG_LINES log lines, for the web app's System page (no journal access needed)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: collections.deque[str] = collections.deque(maxlen=LOG_LINES)
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%Y-%m-%d %H:%M:%S"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(self.format(record))
        except Exception:   # a log line must never break what logged it
            self.handleError(record)


def preview_file(daemon: Daemon) -> Path:
    """The worker's latest preview of the picture in progress (written beside the job, never in the history)."""
    return daemon.jobs.preview_path


def text_version(text: str) -> str:
    """What ``config_replace`` compares to know the file is still the one the editor started from."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _current_text(path: Path) -> str | None:
    """The config file's text; None when there is no file; UserFileError when it cannot be read."""
    try:
        return read_user_text(path)
    except FileNotFoundError:
        return None


def config_text(daemon: Daemon, request: dict) -> dict:
    """The file's text and version for the editor, and for the forms its values (``data``, or ``data_error`` when
    it is not YAML the checker can read: a YAML bomb is refused here, never expanded), the values each setting
    may take and what the frame uses when a key is missing."""
    path = daemon.editable_config_path()
    try:
        text = _current_text(path)
    except UserFileError as exc:
        return {"ok": False, "message": f"{path}: {exc.message}"}
    data, data_error = None, None
    try:
        compose(text or "", str(path))
        data = _plain(yaml.safe_load(text or "")) or {}
    except ConfigError as exc:
        data_error = str(exc.problems[0])
    return {"ok": True, "path": str(path), "exists": text is not None, "text": text or "",
            "version": text_version(text or ""), "backup": str(backup_path(path)),
            "problems": [problem_json(p) for p in daemon.config_problems], "data": data, "data_error": data_error,
            "choices": CHOICES, "defaults": DEFAULTS}


def _plain(value: object) -> object:
    """YAML values as JSON carries them: keys as text, dates and other scalars as their text."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value if value is None or isinstance(value, (str, int, float, bool)) else str(value)


def config_replace(daemon: Daemon, request: dict) -> dict:
    text, version = request.get("text"), request.get("version")
    if not isinstance(text, str) or not isinstance(version, str):
        return {"ok": False, "message": "config_replace: send \"text\" (the new config) and \"version\" "
                                        "(from the config command)"}
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        return {"ok": False, "message": "the text holds an unpaired surrogate, which is not a character; "
                                        "nothing was saved"}
    if len(data) > MAX_FILE_BYTES:
        return {"ok": False, "message": f"the text is {len(data):,} bytes; a config is at most "
                                        f"{MAX_FILE_BYTES:,}; nothing was saved"}
    path = daemon.editable_config_path()
    problems = check_text(text, path)
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        return {"ok": False, "message": f"the config has {len(errors)} error(s); nothing was saved",
                "problems": [problem_json(p) for p in problems]}
    with _config_lock:
        try:
            current = _current_text(path)
        except UserFileError as exc:
            return {"ok": False, "message": f"{path}: {exc.message}; nothing was saved"}
        if text_version(current or "") != version:
            return {"ok": False, "message": f"{path} changed since you opened it (edited on the card or from "
                                            "another phone); load it again and redo your change",
                    "conflict": True}
        try:
            (daemon.config_writer or ConfigWriter(daemon.runtime_dir)).save(path, data)
        except SaveError as exc:
            return {"ok": False, "message": exc.message, "problems": exc.problems}
    daemon.post("reload")
    log.info("config: %s replaced from the control socket (the previous version is %s)", path, backup_path(path))
    return {"ok": True, "message": f"saved {path}; the frame reloads it now", "version": text_version(text),
            "problems": [problem_json(p) for p in problems]}


def history_list(daemon: Daemon, request: dict) -> dict:
    entries = daemon.history.entries() if daemon.history is not None else []
    return {"ok": True, "entries": [{**e.record, "id": e.id} for e in entries], "shown": daemon.shown_id}


def _entry(daemon: Daemon, request: dict):
    entry_id = request.get("id")
    if not isinstance(entry_id, str) or daemon.history is None:
        return None
    return daemon.history.get(entry_id)   # only names the listing holds: no path of the client's making


def history_file(daemon: Daemon, request: dict) -> dict | WithFile:
    entry = _entry(daemon, request)
    if entry is None:
        return {"ok": False, "message": f"no picture {request.get('id')!r} in the history"}
    try:
        file = open(entry.image, "rb")
    except OSError as exc:
        return {"ok": False, "message": f"picture {entry.id}: cannot read it ({exc.strerror})"}
    return WithFile({"ok": True, "id": entry.id, "name": entry.image.name}, file)


def history_delete(daemon: Daemon, request: dict) -> dict:
    entry = _entry(daemon, request)
    if entry is None or not daemon.history.delete(entry.id):
        return {"ok": False, "message": f"no picture {request.get('id')!r} in the history"}
    return {"ok": True, "message": f"deleted {entry.id}"}


def upload(daemon: Daemon, request: dict) -> dict:
    fd = request.get("_fd")
    if fd is None:
        return {"ok": False, "message": "upload: send the picture's file with the request"}
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_UPLOAD_BYTES:
            return {"ok": False, "message": f"upload: send a regular file of at most {MAX_UPLOAD_BYTES:,} bytes"}
        data = f.read(MAX_UPLOAD_BYTES + 1)
    if len(data) > MAX_UPLOAD_BYTES:
        return {"ok": False, "message": f"upload: at most {MAX_UPLOAD_BYTES:,} bytes"}
    try:
        path = _keep_upload(daemon, data)
    except PictureError as exc:
        return {"ok": False, "message": str(exc)}
    pin = request.get("pin") is True
    daemon.post("pin" if pin else "unpin")   # first: once the picture is up, the page shows it pinned
    daemon.post("image", image=str(path))
    return {"ok": True, "message": "the picture goes on the panel next" + (", pinned" if pin else "")}


def _keep_upload(daemon: Daemon, data: bytes) -> Path:
    """``data`` as a file in ``uploads/`` (the newest KEEP_UPLOADS are kept), checked with the limits every picture
    the frame opens has before the main loop sees it; PictureError when it is not a usable picture."""
    folder = daemon.state_dir / "uploads"
    folder.mkdir(exist_ok=True)
    path = folder / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.urandom(3).hex()}.upload"
    write_bytes(path, data)
    try:
        open_picture(path).close()
    except PictureError as exc:
        path.unlink(missing_ok=True)
        raise PictureError(str(exc).replace(str(path), "the upload")) from None
    for old in sorted(folder.glob("*.upload"))[:-KEEP_UPLOADS]:
        old.unlink(missing_ok=True)
    return path


def pairing(daemon: Daemon, request: dict) -> dict:
    url, code = request.get("url"), request.get("code")
    if not isinstance(url, str) or not ADDRESS.fullmatch(url) or not isinstance(code, str) or \
            not CODE.fullmatch(code):
        return {"ok": False, "message": "pairing: send \"url\" (http://HOST/) and \"code\" (8 letters and digits)"}
    if daemon.display is None:
        return {"ok": False, "message": "pairing: the panel is not working, so it cannot show a code; set the "
                                        "password with web_password= in setup.txt instead"}
    buffer = io.BytesIO()
    pairing_card(url, code, daemon.display.size).save(buffer, format="PNG")
    daemon.post("image", image=str(_keep_upload(daemon, buffer.getvalue())))
    daemon.post("unpin")
    return {"ok": True, "message": "the panel shows the pairing code next"}


def preview(daemon: Daemon, request: dict) -> dict | WithFile:
    try:
        return WithFile({"ok": True, "preview": True}, open(preview_file(daemon), "rb"))
    except FileNotFoundError:
        return {"ok": True, "preview": False, "message": "no preview of the picture in progress yet"}
    except OSError as exc:
        return {"ok": False, "message": f"cannot read the preview: {exc.strerror}"}


def system(daemon: Daemon, request: dict) -> dict:
    disk = shutil.disk_usage(daemon.state_dir)
    model = daemon.config.model if daemon.config is not None else None
    return {"ok": True, "model": str(model.path) if model else None, "preset": model.preset if model else None,
            "model_found": bool(model and model.path.exists()),
            "disk": {"free": disk.free, "total": disk.total, "folder": str(daemon.state_dir)},
            "temperature": _temperature(), "undervoltage": _undervoltage(), "uptime_seconds": _uptime(),
            "log": list(daemon.recent_log.lines)}


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _temperature() -> float | None:
    text = _read(THERMAL)
    return int(text) / 1000 if text and text.lstrip("-").isdigit() else None


def _undervoltage() -> bool | None:
    """True while the supply is too weak (the Pi then slows itself down), None where there is no sensor."""
    for sensor in sorted(HWMON.glob("hwmon*")):
        if _read(sensor / "name") == "rpi_volt":
            return _read(sensor / "in0_lcrit_alarm") == "1"
    return None


def _uptime() -> float | None:
    text = _read(UPTIME)
    try:
        return float(text.split()[0]) if text else None
    except ValueError:
        return None


def power(daemon: Daemon, request: dict) -> dict:
    action = request.get("action")
    if action not in POWER_ACTIONS:
        return {"ok": False, "message": f"power: \"action\" must be one of {', '.join(POWER_ACTIONS)}"}
    if daemon.runtime_dir is None:
        return {"ok": False, "message": "power: this daemon has no runtime folder to ask systemd through"}
    log.warning("power: %s asked for from the control socket", action)
    daemon.post("shutdown" if action == "poweroff" else "reboot")   # as the buttons do: a screen first, then frame.power
    return {"ok": True, "message": "the frame restarts now" if action == "reboot" else "the frame switches off now; "
            "wait a minute before unplugging it"}


COMMANDS: dict[str, Callable[[Daemon, dict], dict | WithFile]] = {
    "config": config_text, "config_replace": config_replace, "history": history_list,
    "history_file": history_file, "history_delete": history_delete, "upload": upload, "pairing": pairing,
    "preview": preview,
    "system": system, "power": power,
}
