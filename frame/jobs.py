"""The job: the picture being made, its full spec saved before it starts so a restart resumes it.

A job is everything that decides the picture (theme, expanded prompt, seed, steps, size,
model, preset...). ``JobStore`` keeps the current one in the state directory:

    job/job.json          the spec and its progress (written atomically)
    job/checkpoints/      the pipeline's checkpoints (a resumed job continues from them)
    job/result.png        the finished picture, until it is shown and moved to the history

so after a power cut, a crash or SIGKILL the daemon finds the same job, and the
pipeline resumes from its newest checkpoint to the same picture.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from engine.atomic import write_bytes


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
    requested: bool = False
    created: str = ""

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Job:
        """A job as ``to_json`` wrote it, or as an older frame did (its key "negative" is ``negative_prompt``)."""
        known = {f.name for f in fields(cls)}
        data = {"negative_prompt": data["negative"], **data} if "negative" in data else data
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class JobState:
    """The current job and how far it got."""

    job: Job
    started: str | None = None        # ISO local time the first attempt started
    finished: str | None = None       # set when result.png is complete
    seconds_per_step: float | None = None
    oom_retries: int = 0
    metadata: dict = field(default_factory=dict)   # what the pipeline reported with its result

    def to_json(self) -> dict:
        data = asdict(self)
        data["job"] = self.job.to_json()
        return data

    @classmethod
    def from_json(cls, data: dict) -> JobState:
        return cls(job=Job.from_json(data["job"]), started=data.get("started"), finished=data.get("finished"),
                   seconds_per_step=data.get("seconds_per_step"), oom_retries=int(data.get("oom_retries", 0)),
                   metadata=dict(data.get("metadata") or {}))


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

    def load(self) -> JobState | None:
        """The saved job, or None; an unreadable job.json is set aside (job.json.bad) and None returned."""
        try:
            data = json.loads(self.spec_path.read_text(encoding="utf-8"))
            state = JobState.from_json(data)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError):
            self.spec_path.replace(self.spec_path.with_suffix(".json.bad"))
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

    def clear(self) -> None:
        """Forget the current job (after it is shown, skipped or given up)."""
        self.spec_path.unlink(missing_ok=True)
        self.result_path.unlink(missing_ok=True)
        shutil.rmtree(self.checkpoint_dir, ignore_errors=True)
