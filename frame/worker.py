"""Generation in a child process: the daemon stays responsive and survives whatever happens to it.

``ChildRunner`` (in the daemon) starts ``python -m frame.worker`` for one job, feeds it the
job as JSON on stdin and turns its output into events: JobProgress, Finished, Failed. It
also imports single-file models there (``start_import``: ImportProgress, Imported,
ImportFailed), so that the import's few hundred MB and hours of reading never touch the
daemon and run at the same low priority.

The worker (this module's ``main``):

- lowers its CPU and I/O priority (nice 19, idle I/O class) and volunteers for the OOM
  killer (oom_score_adj 1000), so buttons, the watchdog and refreshes stay responsive
  and a memory shortage kills the worker, never the daemon;
- dies with the daemon (PR_SET_PDEATHSIG), and takes a lock on the job so a worker
  left over from a killed daemon finishes checkpointing before the next one starts;
- loads the generator named "module:callable" (default: the SDXL pipeline), calls
  ``generate(..., checkpoint_dir=..., on_progress=...)`` and writes the picture;
- when the request asks for previews (PreviewRequest), turns the progress reports'
  ``denoised`` estimate into a preview picture when one is due, writes it atomically
  over the request's preview file and says so with a "preview" line (JobPreview);
- on SIGTERM asks the generator to stop (``cancel`` event, or ``on_progress`` returning
  False) and otherwise stops it where it is: checkpoints are written atomically, so
  the job resumes from the newest one.

Its stdout carries one JSON object per line for the daemon (anything the generator
prints goes to stderr, which the daemon logs). Exit status: 0 done, 1 a problem the user
can fix (message in the "error" line), 3 an internal error, 75 cancelled, 137 out of
memory (MemoryError; the kernel's OOM killer shows as SIGKILL).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import importlib
import inspect
import json
import logging
import os
import platform
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from engine.atomic import atomic_write
from engine.errors import Cancelled, CheckpointMismatch, EngineError, StorageError
from frame.jobs import Job, picture_path

DEFAULT_GENERATOR = "frame.worker:load_sdxl"
EXIT_OK, EXIT_USER, EXIT_INTERNAL, EXIT_CANCELLED, EXIT_OOM = 0, 1, 3, 75, 137
_IOPRIO_SET = {"x86_64": 251, "aarch64": 30, "armv7l": 314, "armv6l": 314, "i686": 289}

log = logging.getLogger("slowframe.worker")


def load_sdxl(model: str, preset: str, loras: list[tuple[str, float]]):
    """The default generator: the in-tree SDXL pipeline."""
    from engine.sdxl import Pipeline

    if loras:
        return Pipeline.load(model, preset=preset, loras=loras)
    return Pipeline.load(model, preset=preset)


# ---------------------------------------------------------------- events for the daemon

@dataclass(frozen=True)
class JobProgress:
    """The running job finished a step (the child's report of the pipeline's StepProgress)."""

    job_id: str
    step: int
    steps: int
    seconds_per_step: float | None
    resumed_from: int | None = None


@dataclass(frozen=True)
class JobPreview:
    """The running job's preview file holds a new picture of its denoised estimate after ``step`` steps."""

    job_id: str
    path: Path
    step: int
    steps: int


@dataclass(frozen=True)
class PreviewRequest:
    """Previews the daemon asks of the worker: written to ``path`` (replaced each time), one at the first step
    with an estimate, then after ``every_steps`` steps or ``every_seconds`` seconds since the last one, whichever
    comes first (None: not by that measure); never for the last step, whose picture follows at once."""

    path: Path
    every_steps: int | None = None
    every_seconds: float | None = None
    decoder: str = "linear"   # engine.sdxl.preview's PREVIEW_DECODERS; the linear map when it cannot load

    def to_json(self) -> dict:
        return {"path": str(self.path), "every_steps": self.every_steps, "every_seconds": self.every_seconds,
                "decoder": self.decoder}

    @classmethod
    def from_json(cls, data: dict) -> PreviewRequest:
        return cls(Path(data["path"]), data.get("every_steps"), data.get("every_seconds"),
                   data.get("decoder") or "linear")

    def due(self, step: int, steps: int, since: tuple[int, float] | None, now: float) -> bool:
        """Whether a preview is due at ``step`` of ``steps``; ``since``: (step, time) of the last one, if any."""
        if step >= steps:
            return False
        if since is None:
            return True
        return (self.every_steps is not None and step - since[0] >= self.every_steps) or \
            (self.every_seconds is not None and now - since[1] >= self.every_seconds)


@dataclass(frozen=True)
class Finished:
    job_id: str
    output: Path
    metadata: dict
    seconds_per_step: float | None


@dataclass(frozen=True)
class Failed:
    job_id: str
    message: str
    exit_code: int | None
    oom: bool = False
    cancelled: bool = False
    user_error: bool = False
    retry_later: bool = False   # the disk was full or failing: the same job can go on once it is not


@dataclass(frozen=True)
class ImportProgress:
    """The import of a single-file model wrote another part of its folder."""

    source: Path
    bytes_done: int
    bytes_total: int


@dataclass(frozen=True)
class Imported:
    source: Path
    dest: Path


@dataclass(frozen=True)
class ImportFailed:
    source: Path
    message: str
    cancelled: bool = False     # stopped by the daemon (it resumes when started again)


def oom_kills() -> int | None:
    """How many processes the kernel's OOM killer has killed since boot (/proc/vmstat), None if unknown."""
    try:
        with open("/proc/vmstat", encoding="ascii") as f:
            return next((int(line.split()[1]) for line in f if line.startswith("oom_kill ")), None)
    except OSError:
        return None


class ChildRunner:
    """Runs one job at a time in ``python -m frame.worker``; events go to ``post``."""

    def __init__(self, post: Callable[[object], None], generator: str = DEFAULT_GENERATOR,
                 python: str = sys.executable, env: Mapping[str, str] | None = None, term_timeout: float = 10.0):
        self.post = post
        self.generator = generator
        self.python = python
        self.env = dict(os.environ if env is None else env)
        self.term_timeout = term_timeout
        self._proc: subprocess.Popen | None = None
        self._job: Job | None = None
        self._stopping = False

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def job_id(self) -> str | None:
        return self._job.id if self._job is not None and self._proc is not None else None

    def start(self, job: Job, checkpoint_dir: Path, output: Path, lock: Path,
              preview: PreviewRequest | None = None) -> None:
        self._job = job
        proc = self._spawn({"generator": self.generator, "job": job.to_json(), "checkpoint_dir": str(checkpoint_dir),
                            "output": str(output), "lock": str(lock), "parent": os.getpid(),
                            "preview": preview.to_json() if preview is not None else None}, job.id)
        threading.Thread(target=self._read, args=(proc, job), daemon=True, name="slowframe-worker-read").start()

    def start_import(self, source: Path, dest: Path, lock: Path) -> None:
        """Import the single-file model `source` into the model folder `dest` (resuming an
        interrupted import of it)."""
        self._job = None
        proc = self._spawn({"import": {"source": str(source), "dest": str(dest)}, "lock": str(lock),
                            "parent": os.getpid()}, f"import {source.name}")
        threading.Thread(target=self._read_import, args=(proc, Path(source)), daemon=True,
                         name="slowframe-import-read").start()

    def _spawn(self, request: dict, label: str) -> subprocess.Popen:
        if self.running:
            raise RuntimeError("a job is already running")
        self._stopping = False
        self._oom_kills = oom_kills()
        self._proc = subprocess.Popen([self.python, "-m", "frame.worker"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env,
                                      start_new_session=True, close_fds=True)
        proc = self._proc
        proc.stdin.write(json.dumps(request).encode())
        proc.stdin.close()
        threading.Thread(target=self._log_stderr, args=(proc, label), daemon=True,
                         name="slowframe-worker-log").start()
        return proc

    def stop(self) -> None:
        """Stop the job (it keeps its checkpoints): SIGTERM, then SIGKILL after ``term_timeout`` s."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        self._stopping = True
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(self.term_timeout)
        except subprocess.TimeoutExpired:
            log.warning("the worker did not stop within %.0f s of SIGTERM; killing it", self.term_timeout)
            proc.kill()
            proc.wait()

    def _log_stderr(self, proc: subprocess.Popen, job_id: str) -> None:
        for raw in proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip()
            if line:
                log.info("%s", line, extra={"SLOWFRAME_JOB": job_id})

    def _read_import(self, proc: subprocess.Popen, source: Path) -> None:
        done, error, code = _outcome(proc, "imported", {"import": lambda event: self.post(
            ImportProgress(source, int(event["done"]), int(event["total"])))})
        if done is not None and code == EXIT_OK:
            self.post(Imported(source, Path(done["dest"])))
        elif self._stopping or code == EXIT_CANCELLED:
            self.post(ImportFailed(source, "stopped", cancelled=True))
        elif code in (-signal.SIGKILL, EXIT_OOM):
            self.post(ImportFailed(source, "the import ran out of memory"))
        else:
            self.post(ImportFailed(source, str(error.get("message")) if error is not None else
                                   f"the import exited with status {code}"))

    def _read(self, proc: subprocess.Popen, job: Job) -> None:
        done, error, code = _outcome(proc, "done", {
            "progress": lambda event: self.post(JobProgress(job.id, int(event["step"]), int(event["steps"]),
                                                            event.get("seconds_per_step"), event.get("resumed_from"))),
            "preview": lambda event: self.post(JobPreview(job.id, Path(event["path"]), int(event["step"]),
                                                          int(event["steps"])))})
        if done is not None and code == EXIT_OK:
            self.post(Finished(job.id, Path(done["output"]), dict(done.get("metadata") or {}),
                               done.get("seconds_per_step")))
            return
        if self._stopping or code == EXIT_CANCELLED:   # asked by us, or SIGTERM from outside (it resumes)
            self.post(Failed(job.id, "stopped", code, cancelled=True))
        elif code == -signal.SIGKILL and self._oom_kills is not None and oom_kills() == self._oom_kills:
            # killed by someone, not by the OOM killer: a crash, not a reason for a smaller preset
            self.post(Failed(job.id, "the generator was killed by SIGKILL (not by the kernel's OOM killer)", code))
        elif code in (-signal.SIGKILL, EXIT_OOM):
            self.post(Failed(job.id, "the generator ran out of memory" + (
                " (killed by the kernel's OOM killer)" if code == -signal.SIGKILL else ""), code, oom=True))
        elif error is not None:
            self.post(Failed(job.id, str(error.get("message")), code, user_error=code == EXIT_USER,
                             retry_later=bool(error.get("retry_later"))))
        elif code is not None and code < 0:
            self.post(Failed(job.id, f"the generator was killed by signal {signal.Signals(-code).name}", code))
        else:
            self.post(Failed(job.id, f"the generator exited with status {code} without a picture", code))


def _outcome(proc: subprocess.Popen, success: str,
             on_event: dict[str, Callable[[dict], None]]) -> tuple[dict | None, dict | None, int]:
    """Read the worker's JSON lines to its end, handing each event of a kind in `on_event` to
    its handler; returns its `success` event, its "error" event (each None if it sent none)
    and its exit status."""
    done = error = None
    for raw in proc.stdout:
        try:
            event = json.loads(raw)
        except ValueError:
            log.warning("worker: unreadable line %r", raw[:200])
            continue
        kind = event.get("event") if isinstance(event, dict) else None
        if kind in on_event:
            on_event[kind](event)
        elif kind == success:
            done = event
        elif kind == "error":
            error = event
    return done, error, proc.wait()


# ---------------------------------------------------------------- the child process

def _protocol_stream():
    """The real stdout for our JSON lines; fd 1 becomes stderr so stray prints cannot corrupt them."""
    out = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


def _die_with_parent(parent: int) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:   # the daemon died before prctl took effect
        raise Cancelled()


def _lower_priority() -> None:
    try:
        os.setpriority(os.PRIO_PROCESS, 0, 19)
    except OSError:
        pass
    number = _IOPRIO_SET.get(platform.machine())
    if number is not None:
        try:
            ctypes.CDLL(None, use_errno=True).syscall(number, 1, 0, 3 << 13)   # IOPRIO_WHO_PROCESS, self, CLASS_IDLE
        except (OSError, AttributeError):
            pass
    try:
        Path("/proc/self/oom_score_adj").write_text("1000")
    except OSError:
        pass


def _load_generator(spec: str) -> Callable:
    module_name, _, attr = spec.partition(":")
    obj = importlib.import_module(module_name)
    for part in attr.split(".") if attr else ():
        obj = getattr(obj, part)
    return obj


def _field(progress, *names):
    for name in names:
        value = progress.get(name) if isinstance(progress, Mapping) else getattr(progress, name, None)
        if value is not None:
            return value
    return None


class Previews:
    """The child's side of a PreviewRequest: decodes a due ``denoised`` estimate and writes the preview file."""

    def __init__(self, request: PreviewRequest, model: str):
        from engine.sdxl.preview import open_preview_decoder

        self.request = request
        self.last: tuple[int, float] | None = None
        self.decode = open_preview_decoder(request.decoder, Path(model),
                                           on_fallback=lambda why: log.warning("previews: %s", why))

    def offer(self, progress, emit: Callable[[dict], None]) -> None:
        """Make a preview from ``progress`` when it carries an estimate and one is due."""
        denoised = _field(progress, "denoised")
        step, steps = int(_field(progress, "step", "index")), int(_field(progress, "steps", "total"))
        now = time.monotonic()
        if denoised is None or not self.request.due(step, steps, self.last, now):
            return
        self.last = (step, now)   # a failed preview is not retried at once either: the picture comes first
        try:
            image = self.decode(denoised)
            with atomic_write(self.request.path) as f:
                # level 1: 0.25 s at 1024x1024 against level 6's 0.61 s (bench/RESULTS.md#previews)
                image.save(f, format="PNG", compress_level=1)
        except (EngineError, OSError) as exc:
            log.warning("previews: no preview at step %d: %s", step, exc)
            return
        emit({"event": "preview", "path": str(self.request.path), "step": step, "steps": steps})


class StopRequest:
    """SIGTERM's flag; ``graceful`` once the generator takes ``cancel`` and will stop by itself."""

    def __init__(self):
        self.event = threading.Event()
        self.graceful = False


def run_job(request: dict, emit: Callable[[dict], None], stop: StopRequest) -> int:
    """Run one job; the whole child process's work, separate from process set-up for testing."""
    cancel = stop.event
    job = Job.from_json(request["job"])
    checkpoint_dir = Path(request["checkpoint_dir"])
    output = Path(request["output"])
    loras = ([(job.lora, job.lora_weight)] if job.lora else []) + list(job.loras)
    generator = _load_generator(request["generator"])(job.model, job.preset, loras)
    generate = generator.generate
    params = inspect.signature(generate).parameters
    timing = {"last": None, "per_step": None, "first": True}
    previews = Previews(PreviewRequest.from_json(request["preview"]), job.model) if request.get("preview") else None

    def on_progress(progress) -> bool:
        step = int(_field(progress, "step", "index"))
        steps = int(_field(progress, "steps", "total"))
        now = time.monotonic()
        resumed = _field(progress, "resumed_from")
        if timing["last"] is not None and not timing["first"]:
            delta = now - timing["last"]
            timing["per_step"] = delta if timing["per_step"] is None else 0.7 * timing["per_step"] + 0.3 * delta
        timing["first"] = timing["last"] is None
        timing["last"] = now
        per_step = _field(progress, "seconds_per_step") or timing["per_step"]
        emit({"event": "progress", "step": step, "steps": steps, "seconds_per_step": per_step,
              "resumed_from": resumed})
        if previews is not None and not cancel.is_set():
            previews.offer(progress, emit)
        return not cancel.is_set()

    kwargs = dict(negative_prompt=job.negative_prompt or None, steps=job.steps, guidance=job.guidance, seed=job.seed,
                  width=job.width, height=job.height, sampler=job.sampler, checkpoint_dir=str(checkpoint_dir),
                  on_progress=on_progress)
    if job.sampler == "turbo":   # a job written before recipes: the turbo recipe's own sampling
        kwargs.update(sampler=None, recipe="turbo")
    elif "recipe" in params:
        kwargs["recipe"] = job.recipe
    # "explicit" is the recipe's own timesteps (the job's sampler keeps them); any other schedule is the job's
    if "schedule" in params and job.sampler != "turbo" and job.schedule != "explicit":
        kwargs["schedule"] = job.schedule
    if job.decoder != "full":   # only then: a generator without the choice still runs the default
        kwargs["decoder"] = job.decoder
    if "cancel" in params:
        kwargs["cancel"] = cancel
        stop.graceful = True
    started = time.monotonic()
    def make(**extra) -> list:
        if job.pictures > 1:     # one pass over the weights for all of them (engine.sdxl.Pipeline.generate_batch)
            return generator.generate_batch(job.prompt, num=job.pictures, **kwargs, **extra)
        return [generate(job.prompt, **kwargs, **extra)]

    try:
        results = make()
    except CheckpointMismatch as exc:   # the job's own folder: checkpoints of an older slowframe or model
        if "restart" not in params:
            raise
        log.warning("the job's checkpoints are of other settings (%s); starting it over", "; ".join(exc.differences))
        results = make(restart=True)
    if cancel.is_set():
        raise Cancelled()
    for i, result in enumerate(results):
        with atomic_write(picture_path(output, i), durable=True) as f:
            getattr(result, "image", result).save(f, format="PNG")
    metadata = dict(getattr(results[0], "metadata", None) or {})
    parameters = getattr(results[0], "parameters", None)   # the pipeline's own A1111 text: its sampler labels
    if isinstance(parameters, str):
        metadata["parameters"] = parameters
    per_step = timing["per_step"] or (time.monotonic() - started) / max(1, job.steps)
    emit({"event": "done", "output": str(output), "seconds_per_step": per_step,
          "metadata": json.loads(json.dumps(dict(metadata), default=str))})
    return EXIT_OK


def run_import(request: dict, emit: Callable[[dict], None]) -> int:
    """Import one single-file model (frame/models.py), telling its progress every percent."""
    from engine.convert.importer import import_model

    source, dest = Path(request["import"]["source"]), Path(request["import"]["dest"])
    told = {"percent": -1}

    def progress(p) -> None:
        percent = 100 * p.bytes_done // max(1, p.bytes_total)
        if percent != told["percent"]:
            told["percent"] = percent
            emit({"event": "import", "done": p.bytes_done, "total": p.bytes_total})

    report = import_model(source, dest, log=lambda line: log.info("import %s: %s", source.name, line),
                          progress=progress)
    emit({"event": "imported", "dest": str(report.dest)})
    return EXIT_OK


def main() -> int:
    request = json.load(sys.stdin)
    protocol = _protocol_stream()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    stop = StopRequest()

    def emit(event: dict) -> None:
        protocol.write(json.dumps(event) + "\n")

    def on_term(signum, frame) -> None:
        if stop.event.is_set() or not stop.graceful:
            raise Cancelled()          # not (yet) in a generator that stops by itself, or a second SIGTERM
        stop.event.set()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C in the daemon's terminal is the daemon's business
    try:
        _die_with_parent(int(request.get("parent", os.getppid())))
        _lower_priority()
        with open(request["lock"], "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)   # a worker left over from a killed daemon finishes first
            return run_import(request, emit) if "import" in request else run_job(request, emit, stop)
    except Cancelled:
        return EXIT_CANCELLED
    except MemoryError:
        emit({"event": "error", "message": "out of memory"})
        return EXIT_OOM
    except Exception as exc:   # reported to the daemon, which logs it and moves on
        if stop.event.is_set():
            return EXIT_CANCELLED      # the generator's own way of stopping on ``cancel``
        user = isinstance(exc, (EngineError, OSError))   # bad or missing model files, paths, permissions
        if not user:
            traceback.print_exc()
        disk = isinstance(exc, StorageError) or \
            (isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT))
        emit({"event": "error", "message": str(exc) or type(exc).__name__, "retry_later": disk})
        return EXIT_USER if user else EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
