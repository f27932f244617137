"""The daemon behind `slowframe run`: the frame itself, unattended for months.

One main loop owns all decisions; everything else only posts to its queue:

- the generation runner (a child process, frame.worker) posts JobProgress / Finished / Failed;
- the buttons (gpiozero's pin thread) and the control socket post actions;
- signal handlers only set flags (SIGTERM/SIGINT: stop; SIGHUP: reload), read within a second.

Each ``step`` reads the queue, reloads the config when it changed (a broken edit keeps
the last good config running and logs every problem), starts the next job or resumes
the saved one, and puts a finished picture on the panel when the schedule says it is due
(then into the history). Refreshes happen only here, one at a time, never sooner than
the display's ``min_interval`` after the previous one; presses during a refresh wait in
the queue. A separate thread pings the systemd watchdog while this loop is alive.

What else goes on the panel, never into the history:

- the first screen: started with nothing to show (an empty history), the frame says at
  once what it is doing (making its first picture: theme, ready time) or what it needs
  (no model yet: where to copy one), quiet hours or not;
- previews (``display.preview``): the picture being made, from the worker's preview file,
  with a status strip (theme, step k/n, ready about HH:MM), every N minutes or, on
  ``auto``, every quarter of the picture's making time; only outside quiet hours, never
  sooner than ``min_interval``, only for a picture that goes up as soon as it is ready
  (not one made ahead for a later ``schedule.times`` slot), and not within
  ``display.browse_timeout`` minutes of a screen a person asked for (browsing the
  history, the status screen, ``slowframe show``). Browsing from a preview starts at the
  newest picture in the history.

Models: a single-file .safetensors model dropped onto the models drive, or named by model.path,
is imported in the worker process (frame/models.py) once it has stopped changing; a picture
being made meanwhile stops at its checkpoint and goes on once the import is done.

Failures: a worker killed for memory is retried once with the next lower-memory preset;
any other failure is logged and the frame moves on to the next theme, backing off when
failures repeat and putting the error on the panel after FAILURES_ON_PANEL of them (or
at once for problems only the user can fix, such as a missing model folder).
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import logging
import os
import random
import queue
import signal
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path


from engine.atomic import write_bytes
from frame import commands
from frame.buttons import ButtonEvent, Buttons, ButtonsUnavailable
from frame.config import (Config, ConfigError, Problem, ScheduleSettings, Theme, default_config, find_config,
                          load_config)
from frame.configsave import ConfigWriter
from frame.control import SOCKET_NAME, ControlServer
from frame.display.config import DisplayConfig
from frame.display.errors import DisplayError
from frame.history import History
from frame.jobs import CRASHES_TO_SET_ASIDE, Job, JobStore, picture_path
from frame.loratags import take_tags
from frame.notify import Notifier, Watchdog
from frame.models import DropIns, imported_folder, is_single_file, model_folder
from frame.paths import MODELS_DIR, SEARCH_PATH, on_models_drive
from frame.power import PowerError, SystemPower
from frame.pictures import PictureError, open_picture
from frame.userfiles import MAX_FILE_BYTES, UserFileError, read_json_object
from frame.scheduler import Clock, SystemClock, describe_wait, due_at, next_time, quiet_hours_at, quiet_until
from frame.themes import ThemePicker, choose_prompt
from frame.worker import (DEFAULT_GENERATOR, ChildRunner, Failed, Finished, ImportFailed, Imported,
                          ImportProgress, JobPreview, JobProgress, PreviewRequest)

log = logging.getLogger("slowframe.daemon")

LOWER_PRESET = {"default": "rpi", "rpi": "rpi-lowmem"}
CONFIG_POLL_SECONDS = 5.0
RETRY_SECONDS = 60.0            # display that cannot be opened, model folder that is missing
FAILURES_ON_PANEL = 3
MAX_LOOP_ERRORS = 5              # unexpected errors in a row before the daemon gives up and exits
BACKOFF_SECONDS = (0, 300, 1800, 7200, 21600)   # after 1, 2, 3, 4, 5+ failures in a row
BROWSE = ("previous", "next", "latest")
AUTO_PREVIEWS = 4        # display.preview "auto": a preview every quarter of the picture's making time
PREVIEW_FILES = 2        # preview files the worker writes per preview shown, so a fresh one is at hand


class AlreadyRunning(Exception):
    """Another daemon holds the state directory (two would fight over the panel and the job)."""


@dataclass(frozen=True)
class Action:
    """Something a person asked for: a button action or a control command."""

    name: str            # skip, regenerate, previous, next, latest, status, shutdown, reboot, reload, image, entry,
                         # again, pin, unpin
    source: str          # "button C (press)", "control socket"
    image: str | None = None
    entry: str | None = None


class Daemon:
    """The frame's main loop and everything it owns. ``run()`` for real; tests drive ``step()``."""

    def __init__(self, config_path: Path | None, state_dir: Path, runtime_dir: Path | None = None, *,
                 clock: Clock | None = None, rng: random.Random | None = None,
                 runner_factory: Callable[[Callable[[object], None]], object] | None = None,
                 generator: str = DEFAULT_GENERATOR,
                 display_factory: Callable | None = None,
                 buttons_factory: Callable | None = Buttons,
                 notifier: Notifier | None = None, power: SystemPower | None = None,
                 config_writer: ConfigWriter | None = None, models_dir: Path | None = MODELS_DIR):
        self.config_path = Path(config_path) if config_path is not None else None
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.runtime_dir = Path(runtime_dir) if runtime_dir is not None else None
        self.clock = clock or SystemClock()
        self.rng = rng or random.Random()
        self.events: queue.Queue = queue.Queue()
        self.runner = (runner_factory or (lambda post: ChildRunner(post, generator=generator)))(self.events.put)
        if display_factory is None:
            from frame.display import open_display

            display_factory = open_display
        self.display_factory = display_factory
        self.buttons_factory = buttons_factory
        self.notifier = notifier or Notifier()
        self.power = power     # None: SystemPower in the runtime folder, as it is when the action comes
        self.config_writer = config_writer   # None: ConfigWriter in the runtime folder, as it is when an edit comes
        self.jobs = JobStore(self.state_dir)
        self.drop_ins = DropIns(Path(models_dir) if models_dir is not None else None)
        self.importing: dict | None = None  # the single-file model being imported: source, dest, done, total

        self.config: Config | None = None
        self.config_problems: list[Problem] = []
        self.display = None
        self.buttons = None
        self.history: History | None = None
        self.picker: ThemePicker | None = None
        self.current = None                 # JobState
        self.progress: JobProgress | None = None
        self.last_error: str | None = None
        self.failures = 0
        self.snapshot: dict = {}
        self._launched: str | None = None   # the job id the runner is working on
        self._retry_at: dt.datetime | None = None
        self._wanted: tuple | None = None   # a screen a person asked for: ("entry", id) / ("status",) / ("image", p)
        self._error_screen: str | None = None   # an error to put on the panel (automatic, respects quiet hours)
        self._error_on_panel: str | None = None
        self._display_failed_at: float | None = None
        self._fingerprint: tuple | None = None
        self._next_poll = 0.0
        self._beat = self.clock.monotonic()
        self._signals: list[int] = []
        self._stop = False
        self._status_line = ""
        self._control: ControlServer | None = None
        self._watchdog: Watchdog | None = None
        self._lock = None
        self._loop_errors = 0
        self._disk_error: str | None = None
        self._preview: JobPreview | None = None     # the newest preview of the current job not yet shown
        self._preview_on_panel = False
        self._last_refresh = self.clock.monotonic()   # previews wait one interval from the start, too
        self._chosen_until: float | None = None      # previews wait for a screen a person asked for until then
        self._first_screen = True                    # still to decide whether the panel needs a first screen
        state = self._load_state()
        self.last_new: dt.datetime | None = self._plausible(_parse_time(state.get("last_new")))
        self.shown_id: str | None = state.get("shown") if isinstance(state.get("shown"), str) else None
        self.cursor: str | None = state.get("cursor") if isinstance(state.get("cursor"), str) else None
        self._picker_state = state.get("picker") if isinstance(state.get("picker"), dict) else {}
        self.pinned = state.get("pinned") is True   # what is on the panel stays: new pictures wait
        self.recent_log = commands.RecentLog()

    # ---------------------------------------------------------------- life cycle

    def run(self) -> int:
        """Run until SIGTERM/SIGINT; the exit status."""
        self.install_signal_handlers()
        self.start()
        try:
            while not self._stop:
                self.step(timeout=1.0)
        finally:
            self.shutdown()
        return 0

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT stop, SIGHUP reloads; the handlers only note the signal for the main loop."""
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, lambda n, _frame: self._signals.append(n))

    def start(self, control: bool = True) -> None:
        """Load the config, pick up a saved job, open the socket and tell systemd we are ready."""
        self._lock = open(self.state_dir / "daemon.lock", "a")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise AlreadyRunning(f"another slowframe daemon is using {self.state_dir}; stop it first "
                                 "(`systemctl stop slowframe`) or give this one its own --state-dir") from None
        self.reload(initial=True)
        saved = self.jobs.load()
        if saved is not None and saved.handling:
            saved.crashes += 1   # the daemon stopped while handling this job: a crash, or a power cut then
            log.warning("job %s: the daemon stopped while %s it (%d time(s))", saved.job.id, saved.handling,
                        saved.crashes, extra=_fields(saved.job))
            saved.handling = None
            self.jobs.save(saved)
            if saved.crashes >= CRASHES_TO_SET_ASIDE:
                self._set_aside(saved, f"the daemon stopped {saved.crashes} times while handling it")
                saved = None
        if saved is not None:
            self.current = saved
            state = "finished, waiting to be shown" if saved.finished else "resuming from its checkpoints"
            log.info("found the unfinished job %s (%s: %r, seed %d): %s", saved.job.id, saved.job.theme,
                     saved.job.prompt, saved.job.seed, state, extra=_fields(saved.job))
        logging.getLogger("slowframe").addHandler(self.recent_log)
        if control and self.runtime_dir is not None:
            try:
                self._control = ControlServer(self.runtime_dir / SOCKET_NAME, self.handle_request).start()
            except OSError as exc:
                log.error("cannot open the control socket in %s: %s; `slowframe status` will not work",
                          self.runtime_dir, exc)
        interval = self.notifier.watchdog_interval()
        if interval:
            self._watchdog = Watchdog(self.notifier, interval, lambda: self._beat, self.clock.monotonic).start()
            log.info("systemd watchdog: pinging every %.0f s while the main loop is alive", interval / 2)
        self._publish()
        self.notifier.ready(self._status_line)

    def shutdown(self) -> None:
        """Stop cleanly: the worker checkpoints and exits, the pins and socket are freed."""
        self.notifier.stopping("stopping: saving the job's progress")
        if self._launched is not None or self.importing is not None:
            log.info("stopping the worker; the %s resumes on the next start", "import" if self.importing else "job")
            self.runner.stop()
            self._launched = None
        if self._watchdog is not None:
            self._watchdog.stop()
        if self._control is not None:
            self._control.close()
        if self.buttons is not None:
            self.buttons.close()
        if self.display is not None:
            self.display.close()
        self._save_state()
        logging.getLogger("slowframe").removeHandler(self.recent_log)
        if self._lock is not None:
            self._lock.close()

    # ---------------------------------------------------------------- one turn of the loop

    def step(self, timeout: float = 0.0) -> None:
        """Handle what arrived (waiting up to ``timeout`` s for something), then move the frame on."""
        self._beat = self.clock.monotonic()
        self._handle_signals()
        if self._stop:
            return
        if self.clock.monotonic() >= self._next_poll:
            self._next_poll = self.clock.monotonic() + CONFIG_POLL_SECONDS
            if self._config_changed():
                self.reload()
            self._look_for_models()
        try:
            first = self.events.get(timeout=timeout) if timeout > 0 else self.events.get_nowait()
        except queue.Empty:
            first = None
        try:
            if first is not None:
                self._handle(first)
                while True:
                    try:
                        self._handle(self.events.get_nowait())
                    except queue.Empty:
                        break
            if not self._stop:
                self._advance()
            self._loop_errors = 0
            self._disk_error = None
        except Exception as exc:
            self._contain(exc)
        self._publish()

    def _contain(self, exc: Exception) -> None:
        """An unexpected error in the loop: the job it happened with gets a strike (set aside at the second);
        with no job to blame, or one error after another, it is a bug, and the daemon exits for systemd."""
        if isinstance(exc, OSError):   # the disk (full, failing), not the job: the next turn tries again
            if self._disk_error != str(exc):
                log.error("cannot use the state folder: %s; the frame keeps trying", exc)
            self._disk_error = str(exc)
            return
        self._loop_errors += 1
        log.exception("unexpected error (%d in a row): %s", self._loop_errors, exc)
        state = self.current
        if state is None or self._loop_errors > MAX_LOOP_ERRORS:
            raise exc
        state.crashes += 1
        state.handling = None
        try:
            if state.crashes >= CRASHES_TO_SET_ASIDE:
                self._set_aside(state, f"the daemon failed on it {state.crashes} times: {type(exc).__name__}: {exc}")
            else:
                self.jobs.save(state)
        except OSError as disk:
            log.error("cannot record the failure on the disk: %s", disk)

    def _set_aside(self, state, reason: str) -> None:
        """Give up on ``state``'s job for good: its folder kept aside, the reason on the panel once, and the
        frame moves on."""
        if self._launched is not None:
            self.runner.stop()
            self._launched = None
        job = state.job
        folder = self.jobs.set_aside(reason, job.id)
        if self.current is state:
            self.current = None
            self.progress = None
        self._error_screen = (f"A picture was set aside ({job.theme}: {job.prompt[:80]}).\nWhy: {reason}.\n"
                              f"The frame goes on with the next picture; the job's files are kept in {folder}.")
        self._save_state()

    def _handle_signals(self) -> None:
        while self._signals:
            signum = self._signals.pop(0)
            if signum == signal.SIGHUP:
                log.info("SIGHUP: reloading the config")
                self.reload()
            else:
                log.info("%s: stopping", signal.Signals(signum).name)
                self._stop = True

    def _handle(self, event) -> None:
        if isinstance(event, ButtonEvent):
            event = Action(event.action, f"button {event.button} ({event.kind})")
        if isinstance(event, Action):
            self._act(event)
        elif isinstance(event, JobProgress):
            if self.current is not None and event.job_id == self.current.job.id:
                if event.resumed_from and self.progress is None:
                    log.info("job %s resumed from step %d of %d", event.job_id, event.resumed_from, event.steps,
                             extra=_fields(self.current.job))
                self.progress = event
                if event.seconds_per_step:
                    known = self.current.seconds_per_step
                    self.current.seconds_per_step = event.seconds_per_step
                    if not known or abs(event.seconds_per_step - known) > 0.1 * known:
                        self.jobs.save(self.current)   # a restarted daemon knows the step time (auto previews)
        elif isinstance(event, JobPreview):
            if self.current is not None and event.job_id == self.current.job.id:
                self._preview = event
        elif isinstance(event, Finished):
            self._finished(event)
        elif isinstance(event, Failed):
            self._failed(event)
        elif isinstance(event, (ImportProgress, Imported, ImportFailed)):
            self._import_event(event)

    # ---------------------------------------------------------------- the config

    def reload(self, initial: bool = False) -> bool:
        """Load the config again; on errors keep the last good one and log every problem."""
        if not initial:
            self.notifier.reloading()
        try:
            path = find_config(self.config_path)
            config = load_config(path) if path is not None else default_config()
        except ConfigError as exc:
            self.config_problems = exc.problems
            errors = [p for p in exc.problems if p.severity == "error"]
            keeping = "keeping the last good config" if self.config is not None else "waiting for a fix"
            log.error("the config has %d error(s); %s:", len(errors), keeping)
            for problem in exc.problems:
                (log.error if problem.severity == "error" else log.warning)("%s", problem)
            if self.config is None:
                self._show_config_errors(errors)
            self._fingerprint = self._current_fingerprint()
            if not initial:
                self.notifier.ready(self._status_line)
            return False
        if path is None:
            log.warning("no config file at %s; running on the built-in defaults",
                        " or ".join(str(p) for p in SEARCH_PATH))
        for problem in config.warnings:
            log.warning("%s", problem)
        self.config_problems = []
        self._apply(config)
        self._fingerprint = self._current_fingerprint()
        log.info("config %s: %d theme(s), %s", path or "<built-in>", len(config.themes),
                 "continuous" if not config.schedule.times
                 else "new pictures at " + ", ".join(f"{t:%H:%M}" for t in config.schedule.times))
        if not initial:
            self.notifier.ready(self._status_line)
        return True

    def _apply(self, config: Config) -> None:
        old, self.config = self.config, config
        logging.getLogger().setLevel(config.log_level.upper())
        panel_changed = old is None or _panel_settings(old.display) != _panel_settings(config.display)
        if panel_changed:
            if self.display is not None:
                self.display.close()
                self.display = None
            self._display_failed_at = None
            self._open_display()
        if old is None or old.buttons != config.buttons or panel_changed:
            self._open_buttons()
        if old is None or old.history != config.history:
            self.history = History(config.history.folder or self.state_dir / "history",
                                   config.history.keep, config.history.max_mb)
            self.history.prune()
        if old is None or old.order != config.order:
            self.picker = ThemePicker(config.order, self._picker_state if old is None else self.picker.state)
        if self._error_on_panel and self._error_on_panel.startswith("config"):
            self._error_on_panel = None
        if self._error_screen and self._error_screen.startswith("config"):
            self._error_screen = None
        self._retry_at = None   # a changed config deserves a fresh try

    def _watched(self) -> list[Path]:
        if self.config is not None and self.config.watched_files:
            files = list(self.config.watched_files)
        else:
            files = []
        if self.config_path is not None:
            files.append(self.config_path)
        else:
            files.extend(SEARCH_PATH)
        return files

    def _current_fingerprint(self) -> tuple:
        import hashlib

        prints = []
        for path in dict.fromkeys(self._watched()):
            try:
                prints.append((str(path), hashlib.sha256(Path(path).read_bytes()).hexdigest()))
            except OSError:
                prints.append((str(path), None))
        return tuple(prints)

    def _config_changed(self) -> bool:
        return self._fingerprint is not None and self._current_fingerprint() != self._fingerprint

    def _show_config_errors(self, errors: list[Problem]) -> None:
        if self.display is None:
            try:
                self.display = self.display_factory(DisplayConfig())
            except (DisplayError, OSError) as exc:
                log.warning("cannot show the config errors on the panel: %s", exc)
                return
        lines = [f"line {p.line}: {p.message}" for p in errors[:6]]
        more = f"\n... and {len(errors) - 6} more (slowframe config check)" if len(errors) > 6 else ""
        self._error_screen = f"config: {errors[0].file} has errors:\n" + "\n".join(lines) + more

    # ---------------------------------------------------------------- hardware

    def _open_display(self) -> None:
        if self.display is not None or self.config is None:
            return
        now = self.clock.monotonic()
        if self._display_failed_at is not None and now - self._display_failed_at < RETRY_SECONDS:
            return
        try:
            self.display = self.display_factory(self.config.display)
            self._display_failed_at = None
            log.info("display: %s, pictures generated at %dx%d", self.display.panel.title,
                     *self.display.generation_size())
        except (DisplayError, OSError, RuntimeError) as exc:
            if self._display_failed_at is None:
                log.error("display: %s (trying again every %.0f s)", exc, RETRY_SECONDS)
            self._display_failed_at = now

    def _open_buttons(self) -> None:
        if self.buttons is not None:
            self.buttons.close()
            self.buttons = None
        settings = self.config.buttons
        if not settings.enabled or self.buttons_factory is None:
            return
        panel = self.display.panel.name if self.display is not None else (
            self.config.display.panel if self.config.display.panel != "auto" else None)
        pins = settings.pins_for(panel)
        try:
            self.buttons = self.buttons_factory(settings, pins, self.events.put)
            log.info("buttons: %s", ", ".join(f"{s.name} (GPIO {pins[s.name]}) press={s.press} hold={s.hold}"
                                              for s in settings.buttons))
        except ButtonsUnavailable as exc:
            log.warning("buttons: %s; running without them (`slowframe skip` etc. still work)", exc)

    # ---------------------------------------------------------------- actions

    def handle_request(self, request: dict) -> dict | commands.WithFile:
        """A control-socket request (runs on the socket's thread: only reads the snapshot or queues; the
        commands of frame.commands touch only files the main loop leaves alone)."""
        command = request["command"]
        fd = request.pop("_fd", None)
        if command == "upload":
            request["_fd"] = fd
        elif fd is not None:
            os.close(fd)   # a descriptor no other command takes
        if command in commands.COMMANDS:
            return commands.COMMANDS[command](self, request)
        if command == "unpin":
            self.post("unpin")
            return {"ok": True, "message": "unpinned: the next picture replaces this one"}
        if command == "again":   # a new picture of a history picture's theme, made next
            entry = request.get("id")
            if not isinstance(entry, str) or self.history is None or self.history.get(entry) is None:
                return {"ok": False, "message": f"again: no picture {entry!r} in the history"}
            self.post("again", entry=entry)
            return {"ok": True, "message": "a new picture of its theme is made next"}
        if command == "status":
            return {"ok": True, **self.snapshot}
        if command in ("skip", "regenerate", "reload"):
            self.events.put(Action(command, "control socket"))
            return {"ok": True, "message": f"{command}: queued"}
        if command == "show":
            which, image, entry = request.get("which"), request.get("image"), request.get("id")
            if image is not None and not isinstance(image, str):
                return {"ok": False, "message": "show: \"image\" must be the path of a picture file"}
            if entry is not None:
                if not isinstance(entry, str) or self.history is None or self.history.get(entry) is None:
                    return {"ok": False, "message": f"show: no picture {entry!r} in the history"}
                self.post("entry", entry=entry)
                return {"ok": True, "message": f"showing {entry} next"}
            if image is not None:
                self.events.put(Action("image", "control socket", image=str(image)))
                return {"ok": True, "message": f"showing {image} next"}
            if which in BROWSE or which == "status":
                self.events.put(Action(which, "control socket"))
                return {"ok": True, "message": f"show {which}: queued"}
            return {"ok": False, "message": f"show what? use one of {', '.join(BROWSE)} or an image path"}
        return {"ok": False, "message": f"unknown command {command!r}; use status, skip, regenerate, show, reload, "
                                        f"unpin, again, {', '.join(commands.COMMANDS)}"}

    def post(self, name: str, image: str | None = None, entry: str | None = None) -> None:
        """Queue an action for the main loop (any thread)."""
        self.events.put(Action(name, "control socket", image=image, entry=entry))

    def editable_config_path(self) -> Path:
        """The config file in use, or where a first one goes: ``--config``, else the first file of SEARCH_PATH
        that exists, else the first place there (the SD card's boot partition)."""
        return self.config_path or find_config(None) or SEARCH_PATH[0]

    def _act(self, action: Action) -> None:
        log.info("%s: %s", action.source, action.name)
        if action.name == "none":
            return
        if action.name in ("skip", "regenerate", "again", "entry", "status", "unpin") or action.name in BROWSE:
            self.pinned = False   # a person asked for something else than the pinned picture
        if action.name == "reload":
            self.reload()
        elif action.name == "pin":
            self.pinned = True
            self._save_state()
        elif action.name == "unpin":
            self._save_state()
        elif action.name == "entry":
            self.cursor = action.entry
            self._wanted = ("entry", action.entry)
            self._save_state()
        elif action.name == "skip":
            self._abandon("skipped")
        elif action.name == "regenerate":
            self._remake(self._theme_on_panel())
        elif action.name == "again":
            entry = self.history.get(action.entry) if self.history is not None else None
            self._remake(self._theme_named(entry.theme) if entry is not None else None)
        elif action.name in BROWSE:
            self._browse(action.name)
        elif action.name == "status":
            self._wanted = ("status",)
        elif action.name == "image":
            self._wanted = ("image", action.image)
        elif action.name in ("shutdown", "reboot"):
            self._switch(action.name)

    def _switch(self, action: str) -> None:
        """Shut the frame down (a screen saying so first, when the panel may refresh now: e-ink keeps it while
        the power is off) or restart it; systemd then stops this service, which checkpoints the job."""
        if action == "shutdown" and self.display is not None and self.display.seconds_until_ready() <= 0:
            from frame.display.text import error_screen

            screen = error_screen("The frame is shutting down. Unplug it once the green light on the Pi has "
                                  "stopped flashing; plugged in again, it goes on with the picture it was making.",
                                  self.display.size, title="slowframe is switched off",
                                  footer=f"{self.clock.now():%Y-%m-%d %H:%M}")
            if self._refresh(lambda: self.display.show(screen), "the shutdown screen"):
                self.shown_id = None
                self._save_state()
        self.notifier.status("shutting down" if action == "shutdown" else "restarting")
        try:
            (self.power or SystemPower(self.runtime_dir)).switch(action)
        except PowerError as exc:
            log.error("%s: %s", action, exc)
            self.last_error = f"{action} failed: {exc}"
            self._error_screen = (f"The frame could not {'shut down' if action == 'shutdown' else 'restart'}: "
                                  f"{exc}")

    def _theme_on_panel(self) -> Theme | None:
        if self.config is None:
            return None
        entry = self.history.get(self.shown_id) if self.shown_id and self.history else None
        return self._theme_named(entry.theme if entry is not None else
                                 (self.current.job.theme if self.current else None))

    def _theme_named(self, name: str | None) -> Theme | None:
        theme = self.config.theme(name) if name and self.config is not None else None
        if theme is None:
            log.info("theme %r is no longer in the config; making the next theme instead", name)
        return theme

    def _remake(self, theme: Theme | None) -> None:
        """Drop the job in progress for a new picture of ``theme`` (requested: shown as soon as it is ready)."""
        self._abandon("replaced by a new picture of the same theme")
        if theme is not None and self.config is not None:
            self._new_job(theme, requested=True)

    def _abandon(self, why: str) -> None:
        """Drop the current job; a finished but unshown picture still goes into the history."""
        if self.current is None:
            return
        job = self.current.job
        if self._launched is not None:
            self.runner.stop()
            self._launched = None
        if self.current.finished and self.jobs.result_path.exists() and self.history is not None:
            self._store(self.current, shown=False)
        log.info("job %s (%s: %r) %s", job.id, job.theme, job.prompt, why, extra=_fields(job))
        self.jobs.clear()
        self.current = None
        self.progress = None
        self._preview = None

    def _browse(self, which: str) -> None:
        entries = self.history.entries() if self.history is not None else []
        if not entries:
            log.info("show %s: there are no pictures in the history yet", which)
            return
        ids = [e.id for e in entries]
        # from a preview (the picture after the newest), "previous" is the newest picture
        at = len(ids) if self._preview_on_panel else ids.index(self.cursor) if self.cursor in ids else len(ids) - 1
        target = {"previous": max(0, at - 1), "next": min(len(ids) - 1, at + 1), "latest": len(ids) - 1}[which]
        if self.cursor in ids and target == at and self.shown_id == ids[target] and self._wanted is None:
            log.info("show %s: already at the %s picture", which, "oldest" if which == "previous" else "newest")
            return
        self.cursor = ids[target]
        self._wanted = ("entry", ids[target])
        self._save_state()

    # ---------------------------------------------------------------- moving the frame on

    def _advance(self) -> None:
        if self.config is None:
            self._show_pending_error()
            return
        self._open_display()
        if self._wanted is not None:
            self._show_wanted()
        if self.current is not None and self.current.finished:
            self._show_when_due()
        if self.importing is not None or self._start_import():
            pass                    # the worker is importing a model; pictures wait for it
        elif self.current is None:
            self._start_next()      # straight after a picture went up: the next one is made ahead
        elif self.current.finished is None and self._launched is None and \
                (self._retry_at is None or self.clock.now() >= self._retry_at):
            self._launch()          # a job found at start-up, retried with another preset, or after a full disk
        self._show_first_screen()
        self._show_preview_when_due()
        self._show_pending_error()

    def _start_next(self) -> None:
        now = self.clock.now()
        if self._retry_at is not None and now < self._retry_at:
            return
        model = self.config.model.path
        if not model_folder(model).exists():
            if is_single_file(model) and model.is_file():
                message = (f"{model.name} is not imported yet.\nThe frame imports it once the file has stopped "
                           f"changing (a copy still running, or an import that failed: see the log). "
                           f"The frame looks again every minute.")
            else:
                message = (f"No model at {model}.\nCopy an SDXL model folder there, or a single-file .safetensors "
                           f"model onto the models drive (the frame imports it), or set model.path in "
                           f"{self.config.source or 'the config'}. The frame looks again every minute.")
            if self.last_error != message:
                log.error("%s", " ".join(message.split()))
                self.last_error = message
                self._error_screen = message
            self._retry_at = now + dt.timedelta(seconds=RETRY_SECONDS)
            return
        if self.display is None:
            return   # the picture's size depends on the panel; the display is retried
        self._new_job(None, requested=False)

    def _new_job(self, theme: Theme | None, requested: bool) -> None:
        config = self.config
        if theme is None:
            name = self.picker.next([t.name for t in config.themes], [t.weight for t in config.themes], self.rng)
            theme = config.theme(name)
        if theme.size is None and self.display is None:
            return   # the panel decides the size; the next turn tries again once the display works
        recent = self.history.recent_prompts(config.no_repeat)
        prompt, seed = choose_prompt(theme.templates, config.wildcards, recent, self.rng)
        try:
            prompt, loras = take_tags(prompt, config.model.lora_folder)
        except ValueError as exc:   # checked with the config; a file removed since
            self.last_error = self._error_screen = f"{theme.name}: {exc}"
            log.error("%s", self.last_error)
            self._retry_at = self.clock.now() + dt.timedelta(seconds=RETRY_SECONDS)
            return
        width, height = theme.size or self.display.generation_size()
        now = self.clock.now()
        job = Job(id=f"{now:%Y%m%d-%H%M%S}-{self.rng.getrandbits(24):06x}", theme=theme.name, prompt=prompt,
                  negative_prompt=theme.negative, seed=seed, steps=theme.steps, guidance=theme.guidance,
                  sampler=theme.sampler, schedule=theme.schedule, recipe=theme.recipe, width=width, height=height,
                  pictures=theme.images_per_pass,
                  model=str(model_folder(config.model.path)),
                  preset=config.model.preset, decoder=config.model.decoder,
                  lora=str(theme.lora) if theme.lora else None,
                  lora_weight=theme.lora_weight, loras=tuple((str(p), w) for p, w in loras), requested=requested,
                  created=_iso(now))
        self.current = self.jobs.begin(job, started=_iso(now))
        self._save_state()
        log.info("new job %s: %s: %r (seed %d, %d steps, %dx%d, %s)", job.id, job.theme, job.prompt, job.seed,
                 job.steps, job.width, job.height, job.sampler, extra=_fields(job))
        if self.importing is None:
            self._launch()          # else once the import is done

    def _launch(self) -> None:
        job = self.current.job
        self.progress = None
        self._preview = None
        self._retry_at = None
        self.runner.start(job, self.jobs.checkpoint_dir, self.jobs.result_path, self.jobs.folder / "worker.lock",
                          self._preview_request(job))
        self._launched = job.id

    def _preview_request(self, job: Job) -> PreviewRequest | None:
        """What to ask the worker for: preview files often enough that a fresh one is at hand whenever a preview
        is due (PREVIEW_FILES per preview shown), none when previews are off."""
        every = self.config.display.preview
        if every == "off":
            return None
        decoder = "tiny" if job.decoder == "tiny" else "linear"   # the model's tiny decoder serves previews too
        if every == "auto":   # the step time is not known yet: count in steps
            return PreviewRequest(self.jobs.preview_path, every_steps=max(1, job.steps // (AUTO_PREVIEWS *
                                                                                            PREVIEW_FILES)),
                                  decoder=decoder)
        return PreviewRequest(self.jobs.preview_path, every_seconds=every * 60 / PREVIEW_FILES, decoder=decoder)

    def _finished(self, event: Finished) -> None:
        if self.current is None or event.job_id != self.current.job.id:
            return
        self._launched = None
        state = self.current
        state.finished = _iso(self.clock.now())
        state.seconds_per_step = event.seconds_per_step or state.seconds_per_step
        state.metadata = event.metadata
        self.jobs.save(state)
        self.failures = 0
        self._retry_at = None
        self._preview = None
        self.last_error = None
        if self._error_on_panel is not None and not self._error_on_panel.startswith("config"):
            self._error_on_panel = None
        log.info("job %s finished (%s s per step)", state.job.id,
                 f"{state.seconds_per_step:.1f}" if state.seconds_per_step else "?", extra=_fields(state.job))

    def _failed(self, event: Failed) -> None:
        if self.current is None or event.job_id != self.current.job.id or self._launched != event.job_id:
            return
        self._launched = None
        state = self.current
        job = state.job
        if event.cancelled:
            return
        if event.oom and state.oom_retries == 0 and job.preset in LOWER_PRESET:
            lower = LOWER_PRESET[job.preset]
            log.warning("job %s: %s with preset %s; trying once more with %s (starting over)", job.id,
                        event.message, job.preset, lower, extra=_fields(job))
            self.current = self.jobs.change_preset(state, lower)
            return
        if event.retry_later:   # a full or failing disk: the job and its checkpoints wait for it
            self.last_error = f"{job.theme}: {event.message}"
            self._retry_at = self.clock.now() + dt.timedelta(seconds=RETRY_SECONDS)
            log.error("job %s: %s; trying again %s", job.id, event.message,
                      describe_wait(self._retry_at, self.clock.now()), extra=_fields(job))
            return
        if not event.user_error and not event.oom:   # the worker crashed: a bug, or a flaky card or memory
            state.crashes += 1
            if state.crashes < CRASHES_TO_SET_ASIDE:
                log.warning("job %s: %s (exit status %s); trying once more from its checkpoint", job.id,
                            event.message, event.exit_code, extra=_fields(job))
                self.jobs.save(state)
                return   # _advance launches it again
            self._set_aside(state, f"the generator crashed on it {state.crashes} times; the last time: "
                                   f"{event.message}")
            return
        self.failures += 1
        self.last_error = f"{job.theme}: {event.message}"
        log.error("job %s (%s: %r) failed: %s (exit status %s); moving on to the next theme", job.id, job.theme,
                  job.prompt, event.message, event.exit_code, extra=_fields(job))
        self.jobs.clear()
        self.current = None
        self.progress = None
        wait = BACKOFF_SECONDS[min(self.failures, len(BACKOFF_SECONDS)) - 1]
        self._retry_at = self.clock.now() + dt.timedelta(seconds=wait) if wait else None
        if self.failures >= FAILURES_ON_PANEL or event.user_error:
            self._error_screen = (f"{self.failures} picture(s) in a row failed. The last error:\n{event.message}"
                                  + (f"\nNext try {describe_wait(self._retry_at, self.clock.now())}."
                                     if self._retry_at else ""))

    # ---------------------------------------------------------------- single-file models

    def _look_for_models(self) -> None:
        model = self.config.model.path if self.config is not None else None
        self.drop_ins.extra = model if model is not None and is_single_file(model) else None
        self.drop_ins.look(self.clock.monotonic())

    def _start_import(self) -> bool:
        """Start importing a dropped-in model that has stopped changing (the config's own first);
        a picture being made stops at its checkpoint and resumes after."""
        ready = self.drop_ins.ready(self.clock.monotonic())
        if not ready:
            return False
        source = self.drop_ins.extra if self.drop_ins.extra in ready else ready[0]
        if self._launched is not None:
            log.info("job %s waits at its checkpoint while %s is imported", self._launched, source.name)
            self.runner.stop()
            self._launched = None
        dest = imported_folder(source)
        self.importing = {"source": source, "dest": dest, "done": 0, "total": None, "started": _iso(self.clock.now())}
        log.info("importing the single-file model %s into %s (in the worker, at low priority)", source, dest)
        self.runner.start_import(source, dest, self.jobs.folder / "worker.lock")
        if self._wanted is None and not quiet_hours_at(self._schedule(), self.clock.now()):
            self._wanted = ("status",)      # the panel says why no new picture comes while it runs
        return True

    def _import_event(self, event) -> None:
        if self.importing is None or event.source != self.importing["source"]:
            return
        if isinstance(event, ImportProgress):
            self.importing.update(done=event.bytes_done, total=event.bytes_total)
            return
        source, self.importing = self.importing["source"], None
        if isinstance(event, Imported):
            named = self.config is not None and self.config.model.path == source
            log.info("imported %s into %s; %s", source.name, event.dest,
                     "model.path names it: the next picture uses it" if named else f"use it with model.path: {event.dest}")
            if self.last_error and source.name in self.last_error:
                self.last_error = None
        elif not event.cancelled:
            self.drop_ins.failed(source)
            message = (f"Could not import {source.name}:\n{event.message}\nCopy the file again to retry.")
            log.error("%s", " ".join(message.split()))
            self.last_error = message
            self._error_screen = message

    def _show_when_due(self) -> None:
        state = self.current
        now = self.clock.now()
        ready = _parse_time(state.finished) or now
        due = quiet_until(self.config.schedule, ready) if state.job.requested else \
            due_at(self.config.schedule, ready, self.last_new)
        if now < due or self.pinned or self.display is None or self.display.seconds_until_ready() > 0:
            return
        try:
            image = open_picture(self.jobs.result_path)
        except PictureError as exc:
            log.error("job %s: its picture cannot be read (%s); making it again", state.job.id, exc)
            state.finished = None
            self.jobs.save(state)
            return
        state.handling = "showing"   # cleared with the job below; still set after a crash in between
        self.jobs.save(state)
        if self._refresh(lambda: self.display.show(image, caption=state.job.prompt), f"the new picture {state.job.id}"):
            self.last_new = now
            self._chosen_until = None
        entry = self._store(state, shown=True)
        self.shown_id = self.cursor = entry.id
        self._error_on_panel = None
        self.jobs.clear()
        self.current = None
        self.progress = None
        self._save_state()

    def _store(self, state, shown: bool):
        """Put the job's pictures in the history (the first is the one shown; the others of a
        batch follow with the next seeds, as job id-2, id-3, ...); the first's entry."""
        job = state.job
        record = {**job.to_json(), "started": state.started, "finished": state.finished,
                  "seconds_per_step": state.seconds_per_step, "shown": _iso(self.clock.now()) if shown else None,
                  "pipeline": state.metadata}
        record.pop("requested", None)
        record.pop("created", None)
        finished = _parse_time(state.finished) or self.clock.now()
        stored = {e.record.get("id"): e for e in self.history.entries()}
        entry = None
        for i in reversed(range(job.pictures)):   # the first last: once it is there, all are
            path = picture_path(self.jobs.result_path, i)
            picture_id = job.id if i == 0 else f"{job.id}-{i + 1}"
            if picture_id in stored:   # stored just before the daemon stopped, which then kept the job
                entry = stored[picture_id]
                continue
            if i and not path.exists():
                continue
            extra = {} if i == 0 else {"id": picture_id, "seed": job.seed + i, "shown": None,
                                       "pipeline": {**state.metadata, "seed": job.seed + i}}
            entry = self.history.add(open_picture(path), {**record, **extra}, f"{finished:%Y%m%d-%H%M%S}")
            log.info("history: %s%s", entry.id, "" if shown and i == 0 else " (not shown)", extra=_fields(job))
        return entry

    def _show_wanted(self) -> None:
        if self.display is None or self.display.seconds_until_ready() > 0:
            return
        wanted, self._wanted = self._wanted, None
        shown = False
        if wanted[0] == "entry":
            entry = self.history.get(wanted[1])
            if entry is None:
                return
            try:
                image = open_picture(entry.image)
            except PictureError as exc:
                log.error("history: %s", exc)
                self._error_screen = f"picture {entry.id} in the history cannot be read"
                return
            shown = self._refresh(lambda: self.display.show(image, caption=entry.prompt), f"picture {entry.id}")
            if shown:
                self.shown_id = entry.id
        elif wanted[0] == "status":
            from frame.display.text import error_screen

            screen = error_screen(self.status_text(), self.display.size, title="slowframe status",
                                  footer=f"{self.clock.now():%Y-%m-%d %H:%M} - the next picture replaces this")
            shown = self._refresh(lambda: self.display.show(screen), "the status screen")
            if shown:
                self.shown_id = None
        elif wanted[0] == "image":
            try:
                image = open_picture(wanted[1])
            except PictureError as exc:
                log.error("show: %s", exc)
                return
            shown = self._refresh(lambda: self.display.show(image), wanted[1])
            if shown:
                self.shown_id = None
        self._error_on_panel = None
        if shown:   # a screen the person chose: previews hold back for a while
            self._chosen_until = self.clock.monotonic() + self.config.display.browse_timeout * 60
        self._save_state()

    def _show_first_screen(self) -> None:
        """Started with nothing to show: say at once what the frame is doing, or what it needs."""
        if not self._first_screen or self.display is None or self.display.seconds_until_ready() > 0:
            return
        if (self.history is not None and self.history.entries()) or self._error_on_panel is not None or \
                (self.current is not None and self.current.finished):
            self._first_screen = False   # a picture, or something the person must read, goes up instead
            return
        now = self.clock.now()
        model = self.config.model.path
        if not model.exists():
            place = on_models_drive(model)
            where = (f"Copy an SDXL model folder onto the card's \u201cmodels\u201d drive as {place} "
                     f"(on the frame: {model})." if place is not None else f"Copy an SDXL model folder to {model}.")
            title, lines = "No model yet", [where, f"Or set model.path in {self.config.source or 'the config'}.",
                                            "The frame looks again every minute."]
        elif self.current is not None:
            job = self.current.job
            title = "Making the first picture"
            ready = self._ready_text(now) if self._eta(now) else "ready time: known after the first step"
            lines = [f"Theme: {job.theme}", ready[0].upper() + ready[1:]]
            if self.config.display.preview != "off":
                lines.append("It shows here as it develops.")
        else:
            return   # neither: a failure or a wait, which the error screen explains
        self._first_screen = False
        if self._refresh(lambda: self.display.show_notice(title, lines, f"slowframe \u00b7 {now:%Y-%m-%d %H:%M} "
                                                                       "\u00b7 `slowframe status` for more"),
                         f"the first screen ({title.lower()})"):
            self.shown_id = None
            if self._error_screen is not None and not model.exists():
                self._error_on_panel, self._error_screen = self._error_screen, None   # said already, in large type

    def _eta(self, now: dt.datetime) -> dt.datetime | None:
        """When the current job's picture should be finished, from its step time; None before that is known."""
        state = self.current
        per_step = (self.progress.seconds_per_step if self.progress else None) or state.seconds_per_step
        if not per_step:
            return None
        step = self.progress.step if self.progress else 0
        return now + dt.timedelta(seconds=(state.job.steps - step) * per_step)

    def _ready_text(self, now: dt.datetime) -> str:
        """'ready about 14:35' (or 'tomorrow about 07:10'): when the current picture goes up on the panel."""
        eta = self._eta(now)
        job = self.current.job
        due = quiet_until(self._schedule(), eta) if job.requested else due_at(self._schedule(), eta, self.last_new)
        days = (due.date() - now.date()).days
        return f"ready {'' if days <= 0 else 'tomorrow ' if days == 1 else f'on {due:%a} '}about {due:%H:%M}"

    def _show_preview_when_due(self) -> None:
        """Put the newest preview up when ``display.preview`` says one is due (see the module's docstring)."""
        state, preview = self.current, self._preview
        if state is None or state.finished or preview is None or self.display is None or self._wanted is not None \
                or self._error_screen is not None:
            return
        interval = self._preview_interval()
        mono, now = self.clock.monotonic(), self.clock.now()
        if interval is None or mono < self._last_refresh + interval or \
                (self._chosen_until is not None and mono < self._chosen_until):
            return
        schedule = self._schedule()
        if quiet_hours_at(schedule, now) or self.display.seconds_until_ready() > 0:
            return
        slot = next_time(schedule, self.last_new) if self.last_new is not None else None
        if not state.job.requested and slot is not None and slot > now:
            return   # made ahead for a later slot: the picture on the panel stays until then
        try:
            image = open_picture(preview.path)
        except PictureError as exc:
            log.warning("preview: %s", exc)
            self._preview = None
            return
        job = state.job
        status = " \u00b7 ".join([job.theme, f"step {preview.step}/{preview.steps}"] +
                                 ([self._ready_text(now)] if self._eta(now) else []))
        self._preview = None
        if self._refresh(lambda: self.display.show_developing(image, status, preview.step / preview.steps),
                         f"a preview of {job.id} ({status})"):
            self.shown_id = None
            self._error_on_panel = None
            self._preview_on_panel = True

    def _preview_interval(self) -> float | None:
        """Seconds from one refresh to the next preview: display.preview's minutes, or on "auto" a quarter of the
        picture's making time (None until the step time is known); never less than min_interval; None: off."""
        every = self.config.display.preview
        if every == "off":
            return None
        if every == "auto":
            per_step = (self.progress.seconds_per_step if self.progress else None) or self.current.seconds_per_step
            if not per_step:
                return None
            seconds = self.current.job.steps * per_step / AUTO_PREVIEWS
        else:
            seconds = every * 60
        return max(seconds, self.config.display.min_interval)

    def _show_pending_error(self) -> None:
        message = self._error_screen
        if message is None or message == self._error_on_panel or self.display is None:
            return
        if quiet_hours_at(self._schedule(), self.clock.now()) or self.display.seconds_until_ready() > 0:
            return
        self._error_screen = None
        if self._refresh(lambda: self.display.show_error(message), "an error screen"):
            self._error_on_panel = message
            self.shown_id = None

    def _schedule(self) -> ScheduleSettings:
        return self.config.schedule if self.config is not None else ScheduleSettings()

    def _refresh(self, show: Callable[[], object], what: str) -> bool:
        """Run one refresh; a panel that fails is logged, never fatal. True when it worked."""
        self.notifier.status(f"refreshing the panel: {what}")
        try:
            show()
        except (DisplayError, OSError) as exc:
            log.error("display: could not show %s: %s", what, exc)
            return False
        log.info("display: showing %s", what)
        self._last_refresh = self.clock.monotonic()
        self._preview_on_panel = False
        return True

    # ---------------------------------------------------------------- status

    def _publish(self) -> None:
        snapshot = self._snapshot()
        self.snapshot = snapshot
        if snapshot["message"] != self._status_line:
            self._status_line = snapshot["message"]
            self.notifier.status(self._status_line)

    def _snapshot(self) -> dict:
        now = self.clock.now()
        out: dict = {"config": str(self.config.source) if self.config and self.config.source else None,
                     "config_errors": [str(p) for p in self.config_problems if p.severity == "error"],
                     "last_error": self.last_error, "shown": self.shown_id, "pinned": self.pinned, "job": None}
        entries = self.history.entries() if self.history is not None else []
        if entries:
            last = entries[-1]
            out["last_picture"] = {"id": last.id, "theme": last.theme, "prompt": last.prompt,
                                   "image": str(last.image), "finished": last.record.get("finished")}
        if self.current is not None:
            job = self.current.job
            info = {"id": job.id, "theme": job.theme, "prompt": job.prompt, "seed": job.seed, "steps": job.steps,
                    "size": f"{job.width}x{job.height}", "preset": job.preset,
                    "seconds_per_step": self.current.seconds_per_step}
            if self.current.finished:
                ready = _parse_time(self.current.finished) or now
                due = quiet_until(self._schedule(), ready) if job.requested else \
                    due_at(self._schedule(), ready, self.last_new)
                info.update(state="ready", due=_iso(due))
                message = f"{job.theme}: ready, " + ("waiting while the panel is pinned" if self.pinned else
                                                     f"shown {describe_wait(due, now) if due > now else 'now'}")
            else:
                step = self.progress.step if self.progress else 0
                per_step = (self.progress.seconds_per_step if self.progress else None) or \
                    self.current.seconds_per_step
                eta = (job.steps - step) * per_step if per_step else None
                info.update(state="generating", step=step, eta_seconds=eta)
                message = f"{job.theme}: step {step}/{job.steps}" + (f", {_duration(eta)} left" if eta else "")
            out["job"] = info
        elif self.importing is not None:
            message = ""
        elif self.config is None:
            message = "config has errors: " + (self.config_problems[0].message if self.config_problems else "?")
        elif self.last_error and self._retry_at:
            message = f"error: {self.last_error}; next try {describe_wait(self._retry_at, now)}"
        else:
            message = "idle"
        if self.importing is not None:
            imp = self.importing
            percent = f"{100 * imp['done'] / imp['total']:.0f}%" if imp["total"] else "starting"
            out["import"] = {"source": str(imp["source"]), "dest": str(imp["dest"]), "bytes_done": imp["done"],
                             "bytes_total": imp["total"], "started": imp["started"]}
            message = f"importing {imp['source'].name}: {percent}" + (f"; {message} (waits for it)" if message else "")
        if self.config_problems and self.config is not None:
            message += f" (config has {len(out['config_errors'])} error(s); running the last good one)"
        out["message"] = message
        return out

    def status_text(self) -> str:
        """The status as lines for people (the status screen)."""
        s = self.snapshot or self._snapshot()
        lines = [s["message"]]
        if s.get("job"):
            lines.append(f"prompt: {s['job']['prompt']} (seed {s['job']['seed']})")
        if s.get("last_picture"):
            lines.append(f"last picture: {s['last_picture']['id']}: {s['last_picture']['prompt']}")
        lines.append(f"pictures kept: {len(self.history.entries()) if self.history else 0}")
        if s.get("last_error"):
            lines.append(f"last error: {s['last_error']}")
        lines += [f"config: {e}" for e in s["config_errors"][:3]]
        if self.config is not None:
            lines.append(f"model: {self.config.model.path} ({self.config.model.preset})")
        return "\n".join(lines)

    # ---------------------------------------------------------------- saved state

    @property
    def _state_path(self) -> Path:
        return self.state_dir / "state.json"

    def _load_state(self) -> dict:
        try:
            return read_json_object(self._state_path, MAX_FILE_BYTES, 8)
        except FileNotFoundError:
            return {}
        except UserFileError as exc:
            log.warning("%s is unusable (%s); the schedule and the theme order start afresh", self._state_path,
                        exc.message)
            return {}

    def _plausible(self, last_new: dt.datetime | None) -> dt.datetime | None:
        """``last_new`` unless it is more than a day away from now: a clock set right after a wrong one (no
        network time yet, a dead RTC battery) must not park the next picture for months. None means the next
        picture is due as soon as it is ready, which is also what a day-old time gives."""
        if last_new is None:
            return None
        now = self.clock.now()
        if abs(last_new - now) > dt.timedelta(days=1):
            log.warning("the last new picture went up at %s by the saved state, more than a day from now (%s); "
                        "the clock was wrong then or is now, so the schedule starts from now", _iso(last_new),
                        _iso(now))
            return None
        return last_new

    def _save_state(self) -> None:
        state = {"last_new": _iso(self.last_new) if self.last_new else None, "shown": self.shown_id,
                 "cursor": self.cursor, "picker": self.picker.state if self.picker else self._picker_state,
                 "pinned": self.pinned}
        write_bytes(self._state_path, (json.dumps(state, indent=2) + "\n").encode())


def _panel_settings(display: DisplayConfig) -> DisplayConfig:
    """The display settings the panel itself uses: a change to the others (when previews come) reopens nothing,
    so the panel's rest between refreshes is kept."""
    return replace(display, preview=DisplayConfig.preview, browse_timeout=DisplayConfig.browse_timeout)


def _iso(t: dt.datetime) -> str:
    return t.isoformat(timespec="seconds")


def _parse_time(text: object) -> dt.datetime | None:
    """A naive local time written by _iso; None for anything else (a damaged or hand-edited file)."""
    try:
        parsed = dt.datetime.fromisoformat(text) if isinstance(text, str) and text else None
    except ValueError:
        return None
    return parsed.replace(tzinfo=None) if parsed is not None else None


def _duration(seconds: float) -> str:
    minutes = int(seconds // 60)
    if minutes < 1:
        return f"{int(seconds)} s"
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def _fields(job: Job) -> dict:
    """Journal fields for log lines about a job."""
    return {"SLOWFRAME_JOB": job.id, "SLOWFRAME_THEME": job.theme, "SLOWFRAME_SEED": str(job.seed)}
