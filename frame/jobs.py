"""The job: the picture being made, its full spec saved before it starts so a restart resumes it.

A job is everything that decides the picture (theme, expanded prompt, seed, steps, size,
model, preset...). ``JobStore`` keeps the current one in the state directory:

    job/job.json          the spec and its progress (written atomically)
    job/checkpoints/      the pipeline's checkpoints (a resumed job continues from them)
    job/result.png        the finished picture, until it is shown and moved to the history
    job/preview.png       the newest preview of the picture being made (never in the history)

so after a power cut, a crash or SIGKILL the daemon finds the same job, and the
pipeline resumes from its newest checkpoint to the same picture.

A job that crashes the worker or the daemon twice (``JobState.crashes``) is set aside:
its folder moves to ``set-aside/<job id>/`` with a ``reason.txt``, so the frame moves on
and the job can still be looked at. A job file that cannot be a job is set aside too.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from engine.atomic import write_bytes
from frame.userfiles import UserFileError, clean_text, read_json_object

log = logging.getLogger("slowframe.jobs")
CRASHES_TO_SET_ASIDE = 2
KEEP_SET_ASIDE = 5            # the newest set-aside jobs kept for a look; older ones are deleted
MAX_JOB_FILE_BYTES = 1024 * 1024


_FIELD_TYPES = {"str": (str,), "str | None": (str, type(None)), "int": (int,), "float": (int, float), "bool": (bool,),
                "tuple[tuple[str, float], ...]": (list, tuple)}


@dataclass(frozen=True)
class Job:
    """One picture to make. ``requested``: made at the user's request (shown as soon as it is ready)."""

    id: str
    theme: str
    prompt: str
    negative_prompt: str
    seed: int
    steps: int
    guidance: float
    sampler: str
    width: int
    height: int
    model: str
    preset: str
    lora: str | None = None
    lora_weight: float = 1.0
    schedule: str = "default"        # or "explicit": the recipe's timesteps
    recipe: str = "sdxl"             # engine.sdxl.recipes; an older job's sampler "turbo" is the turbo recipe
    pictures: int = 1                # made together, seeds seed, seed+1, ...: result.png, result-2.png, ...
    loras: tuple[tuple[str, float], ...] = ()   # (file, weight) of each <lora:NAME:WEIGHT> the prompt had
    decoder: str = "full"     # "tiny": the model's vae_tiny/ decodes the picture (config model.decoder)
    requested: bool = False
    created: str = ""

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Job:
        """A job as ``to_json`` wrote it, or as an older frame did (its key "negative" is ``negative_prompt``);
        ValueError naming the field when one has the wrong type or text the frame cannot carry."""
        known = {f.name: f for f in fields(cls)}
        data = {"negative_prompt": data["negative"], **data} if "negative" in data else data
        values = {k: v for k, v in data.items() if k in known}
        for name, value in values.items():
            allowed = _FIELD_TYPES[known[name].type]
            if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
                raise ValueError(f"{name} has the wrong type ({type(value).__name__})")
            if isinstance(value, str) and (why := clean_text(value)[1]):
                raise ValueError(f"{name} {why}")
        if "loras" in values:
            values["loras"] = _loras(values["loras"])
        return cls(**values)


def _loras(value: list | tuple) -> tuple[tuple[str, float], ...]:
    """A job file's ``loras``: [file, weight] pairs; ValueError otherwise."""
    pairs = []
    for item in value:
        if not (isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], str)
                and isinstance(item[1], (int, float)) and not isinstance(item[1], bool)):
            raise ValueError(f"loras holds {item!r}, not a [file, weight] pair")
        if why := clean_text(item[0])[1]:
            raise ValueError(f"loras {why}")
        pairs.append((item[0], float(item[1])))
    return tuple(pairs)


@dataclass
class JobState:
    """The current job and how far it got."""

    job: Job
    started: str | None = None        # ISO local time the first attempt started
    finished: str | None = None       # set when result.png is complete
    seconds_per_step: float | None = None
    oom_retries: int = 0
    metadata: dict = field(default_factory=dict)   # what the pipeline reported with its result
    crashes: int = 0                  # worker or daemon crashes while this job was worked on
    handling: str | None = None       # what the daemon was doing with it, while it was doing it

    def to_json(self) -> dict:
        data = asdict(self)
        data["job"] = self.job.to_json()
        return data

    @classmethod
    def from_json(cls, data: dict) -> JobState:
        def text(key: str) -> str | None:
            return data.get(key) if isinstance(data.get(key), str) else None

        def number(key: str) -> float | None:
            value = data.get(key)
            return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None

        if not isinstance(data.get("job"), dict):
            raise ValueError("no job in it")
        return cls(job=Job.from_json(data["job"]), started=text("started"), finished=text("finished"),
                   seconds_per_step=number("seconds_per_step"), oom_retries=int(number("oom_retries") or 0),
                   metadata=data["metadata"] if isinstance(data.get("metadata"), dict) else {},
                   crashes=int(number("crashes") or 0), handling=text("handling"))


def picture_path(result_path: Path, i: int) -> Path:
    """Where a job's picture i goes: result.png for the first, result-2.png, result-3.png, ... for the others."""
    return result_path if i == 0 else result_path.with_name(f"{result_path.stem}-{i + 1}{result_path.suffix}")


class JobStore:
    """The state directory's ``job/`` folder."""

    def __init__(self, state_dir: Path):
        self.folder = Path(state_dir) / "job"
        self.folder.mkdir(parents=True, exist_ok=True)

    @property
    def spec_path(self) -> Path:
        return self.folder / "job.json"

    @property
    def checkpoint_dir(self) -> Path:
        return self.folder / "checkpoints"

    @property
    def result_path(self) -> Path:
        return self.folder / "result.png"

    @property
    def preview_path(self) -> Path:
        return self.folder / "preview.png"

    def load(self) -> JobState | None:
        """The saved job, or None; a job.json that cannot be a job is set aside (its reason logged) and None
        returned."""
        try:
            state = JobState.from_json(read_json_object(self.spec_path, MAX_JOB_FILE_BYTES, 16))
        except FileNotFoundError:
            return None
        except (UserFileError, ValueError, KeyError, TypeError) as exc:
            self.set_aside(f"its job.json cannot be a job: {exc}")
            return None
        if state.finished and not self.result_path.exists():
            state.finished = None   # the picture was lost (e.g. a power cut before it reached the disk)
        return state

    def save(self, state: JobState) -> None:
        write_bytes(self.spec_path, (json.dumps(state.to_json(), indent=2) + "\n").encode())

    def begin(self, job: Job, started: str) -> JobState:
        """Start ``job`` afresh: old checkpoints and results cleared, the spec saved before any work."""
        self.clear()
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        state = JobState(job=job, started=started)
        self.save(state)
        return state

    def change_preset(self, state: JobState, preset: str) -> JobState:
        """Retry with another preset; its checkpoints are of a different computation, so they go."""
        shutil.rmtree(self.checkpoint_dir, ignore_errors=True)
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        state = JobState(**{**state.__dict__, "job": replace(state.job, preset=preset),
                            "oom_retries": state.oom_retries + 1})
        self.save(state)
        return state

    def set_aside(self, reason: str, job_id: str | None = None) -> Path:
        """Move the job's folder to ``set-aside/<job id>/`` with ``reason.txt``; keep the newest KEEP_SET_ASIDE."""
        aside = self.folder.parent / "set-aside"
        aside.mkdir(exist_ok=True)
        name = job_id if job_id and job_id.replace("-", "").isalnum() else "job"
        target, n = aside / name, 1
        while target.exists():
            n += 1
            target = aside / f"{name}~{n}"
        self.folder.rename(target)
        (target / "reason.txt").write_text(reason + "\n", encoding="utf-8", errors="backslashreplace")
        self.folder.mkdir()
        log.error("job %s set aside in %s: %s", job_id or "?", target, reason)
        for old in sorted(aside.iterdir(), key=lambda p: p.stat().st_mtime)[:-KEEP_SET_ASIDE]:
            shutil.rmtree(old, ignore_errors=True)
        return target

    def clear(self) -> None:
        """Forget the current job (after it is shown, skipped or given up)."""
        self.spec_path.unlink(missing_ok=True)
        for path in self.folder.glob("result*.png"):    # result.png, and result-2.png, ... of a batch
            path.unlink(missing_ok=True)
        self.preview_path.unlink(missing_ok=True)
        shutil.rmtree(self.checkpoint_dir, ignore_errors=True)
