"""Fakes for the frame's tests: a generator honouring the Pipeline contract, a clock, a runner, and jobs for them.

``FakePipeline`` behaves like engine.sdxl.Pipeline where the daemon can tell: it reports
progress after every step, writes an atomic checkpoint after every step into
``checkpoint_dir`` and resumes from it to the same picture, stops within a step when
``cancel`` is set (raising engine.errors.Cancelled), and returns an image of the asked
size with metadata. Its behaviour comes from ``fake.json`` in the "model" folder:
``step_seconds`` (time per step), ``oom_presets`` (presets under which it dies as the
kernel's OOM killer would make it, or with ``oom_kind: memoryerror`` of a MemoryError),
``fail`` (an error message to raise; a ModelFileError, or with ``fail_kind: storage`` a
StorageError, as a full disk gives), ``no_denoised`` (progress without the ``denoised``
estimate, as a pipeline without one reports). Every call is appended to ``calls.log`` there, so
tests can see presets, resumes and finishes. ``make_job`` and ``uninterrupted_state`` give
a job for it and the state it ends in when nothing disturbs it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import signal
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from engine.errors import Cancelled, ModelFileError, StorageError
from frame.jobs import Job


def write_fake_model(folder: Path, **behaviour) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "fake.json").write_text(json.dumps(behaviour))
    return folder


def calls(folder: Path) -> list[dict]:
    path = Path(folder) / "calls.log"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@dataclass
class FakeStepProgress:
    step: int
    steps: int
    seconds_per_step: float | None = None
    resumed_from: int | None = None
    denoised: np.ndarray | None = None   # the estimate of the final latents, (1, 4, height/8, width/8) float32


@dataclass
class FakeResult:
    image: Image.Image
    metadata: dict = field(default_factory=dict)
    parameters: str | None = None   # the pipeline's A1111 text, when the fake model gives one


class FakePipeline:
    def __init__(self, model: str, preset: str, loras):
        self.model = Path(model)
        self.preset = preset
        config = self.model / "fake.json"
        if not config.exists():
            raise ModelFileError(f"{self.model}: not a model folder (no fake.json)")
        self.behaviour = json.loads(config.read_text())

    def _log(self, **entry) -> None:
        with open(self.model / "calls.log", "a") as f:
            f.write(json.dumps(entry) + "\n")

    def generate(self, prompt, negative_prompt=None, steps=20, guidance=5.0, seed=0, width=1024, height=1024,
                 sampler="euler", recipe=None, init_noise=None, checkpoint_dir=None, restart=False,
                 on_progress=None, cancel: threading.Event | None = None, decoder: str = "full",
                 schedule=None) -> FakeResult:
        if self.behaviour.get("fail"):
            kind = StorageError if self.behaviour.get("fail_kind") == "storage" else ModelFileError
            raise kind(self.behaviour["fail"])
        spec = {"prompt": prompt, "negative_prompt": negative_prompt, "seed": seed, "steps": steps,
                "size": [width, height], "sampler": sampler, "guidance": guidance, "preset": self.preset}
        ckpt = Path(checkpoint_dir) / "fake.ckpt.json" if checkpoint_dir else None
        state = np.frombuffer(hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).digest(), np.uint8)
        state = state.astype(np.float64) / 255.0
        start = 0
        if ckpt is not None and ckpt.exists() and not restart:
            saved = json.loads(ckpt.read_text())
            if saved["spec"] != spec:
                raise ModelFileError(f"{ckpt}: a checkpoint of another job")
            start, state = saved["step"], np.array(saved["state"])
        self._log(event="start", prompt=prompt, seed=seed, preset=self.preset, resumed_from=start, pid=os.getpid(),
                  decoder=decoder, sampler=sampler, schedule=schedule, recipe=recipe)
        if self.preset in self.behaviour.get("oom_presets", []):
            if self.behaviour.get("oom_kind") == "memoryerror":
                raise MemoryError()   # Python's own out of memory, which the worker reports as such
            os.kill(os.getpid(), signal.SIGKILL)
        for step in range(start, steps):
            if cancel is not None and cancel.wait(self.behaviour.get("step_seconds", 0.0)):
                raise Cancelled("cancelled")
            state = np.sin(state * 3.1 + step) * 0.5 + 0.5
            if ckpt is not None:
                tmp = ckpt.with_name(".fake.ckpt.tmp")
                tmp.write_text(json.dumps({"spec": spec, "step": step + 1, "state": state.tolist()}))
                os.replace(tmp, ckpt)
            if on_progress is not None:
                progress = FakeStepProgress(step + 1, steps, resumed_from=start if start and step == start else None,
                                            denoised=None if self.behaviour.get("no_denoised") else
                                            denoised(state, width, height))
                if on_progress(progress) is False:
                    raise Cancelled("on_progress returned False")
        self._log(event="done", prompt=prompt, seed=seed, state=state.tolist())
        return FakeResult(picture(state, width, height), {"prompt": prompt, "seed": seed, "model": "fake"},
                          self.behaviour.get("parameters"))

    def generate_batch(self, prompt, num=1, seed=0, checkpoint_dir=None, **kwargs) -> list[FakeResult]:
        """The pictures of seeds seed, seed+1, ... one after another (each checkpointed in its own folder)."""
        results = []
        for i in range(num):
            folder = None if checkpoint_dir is None else Path(checkpoint_dir) / str(i)
            if folder is not None:
                folder.mkdir(parents=True, exist_ok=True)
            results.append(self.generate(prompt, seed=seed + i, checkpoint_dir=folder, **kwargs))
        return results


def load_fake(model: str, preset: str, loras) -> FakePipeline:
    return FakePipeline(model, preset, loras)


def denoised(state: np.ndarray, width: int, height: int) -> np.ndarray:
    """A latent-shaped estimate decided by ``state``: what the real pipeline reports as ``denoised``."""
    return np.resize((state * 4.0 - 2.0).astype(np.float32), (1, 4, height // 8, width // 8))


def picture(state: np.ndarray, width: int, height: int) -> Image.Image:
    """Smooth colour gradients decided by ``state`` (small PNGs, different per job)."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    r = 255 * (0.5 + 0.5 * np.sin(x / width * 6 * state[0] + state[1] * 6))
    g = 255 * (0.5 + 0.5 * np.sin(y / height * 6 * state[2] + state[3] * 6))
    b = 255 * (0.5 + 0.5 * np.sin((x + y) / (width + height) * 6 * state[4] + state[5] * 6))
    return Image.fromarray(np.stack([r, g, b], -1).astype(np.uint8), "RGB")


class FakeClock:
    """Local wall-clock time and monotonic seconds that move only when told."""

    def __init__(self, start: dt.datetime):
        self.t = start
        self.mono = 1000.0

    def now(self) -> dt.datetime:
        return self.t

    def monotonic(self) -> float:
        return self.mono

    def advance(self, **delta) -> None:
        step = dt.timedelta(**delta)
        self.t += step
        self.mono += step.total_seconds()

    def set(self, when: dt.datetime) -> None:
        self.advance(seconds=(when - self.t).total_seconds())


class ManualRunner:
    """A runner the test drives: it records each start and stop; the test posts the job's (or import's) events."""

    def __init__(self, post):
        self.post = post
        self.started: list = []       # (job, checkpoint_dir, output)
        self.stopped: list[str] = []  # job ids, or "import NAME"
        self.imports: list = []       # (source, dest)
        self.job = None
        self.importing = None         # (source, dest) while an import runs

    @property
    def running(self) -> bool:
        return self.job is not None or self.importing is not None

    def start_import(self, source, dest, lock) -> None:
        assert not self.running, "the worker is busy"
        self.importing = (Path(source), Path(dest))
        self.imports.append(self.importing)

    def import_progress(self, done: int, total: int) -> None:
        from frame.worker import ImportProgress

        self.post(ImportProgress(self.importing[0], done, total))

    def import_finish(self) -> None:
        """The import succeeded: its model folder appears."""
        from frame.worker import Imported

        (source, dest), self.importing = self.importing, None
        dest.mkdir()
        self.post(Imported(source, dest))

    def import_fail(self, message: str) -> None:
        from frame.worker import ImportFailed

        (source, _), self.importing = self.importing, None
        self.post(ImportFailed(source, message))

    def start(self, job, checkpoint_dir, output, lock, preview=None) -> None:
        assert not self.running, "the worker is busy"
        self.job = job
        self.output = Path(output)
        self.preview_request = preview
        self.started.append((job, Path(checkpoint_dir), Path(output)))

    def stop(self) -> None:
        if self.job is not None:
            self.stopped.append(self.job.id)
            self.job = None
        if self.importing is not None:
            self.stopped.append(f"import {self.importing[0].name}")
            self.importing = None

    # what the worker would report
    def progress(self, step: int, seconds_per_step: float = 60.0) -> None:
        from frame.worker import JobProgress

        self.post(JobProgress(self.job.id, step, self.job.steps, seconds_per_step))

    def preview(self, step: int, colour=(40, 120, 200)) -> None:
        """A preview after ``step`` steps, written where the daemon asked, as the worker would."""
        from frame.worker import JobPreview

        assert self.preview_request is not None, "the daemon asked for no previews"
        Image.new("RGB", (self.job.width // 8, self.job.height // 8), colour).save(self.preview_request.path)
        self.post(JobPreview(self.job.id, self.preview_request.path, step, self.job.steps))

    def finish(self, colour=(200, 120, 40)) -> None:
        from frame.worker import Finished

        # an eighth of the size: the daemon does not mind, and small PNGs keep the tests fast
        Image.new("RGB", (self.job.width // 8, self.job.height // 8), colour).save(self.output)
        job, self.job = self.job, None
        self.post(Finished(job.id, self.output, {"model": "fake"}, 60.0))

    def fail(self, message: str = "boom", oom: bool = False, user_error: bool = False, code: int = 3,
             retry_later: bool = False) -> None:
        from frame.worker import Failed

        job, self.job = self.job, None
        self.post(Failed(job.id, message, -9 if oom else code, oom=oom, user_error=user_error,
                         retry_later=retry_later))


def make_job(model: Path, preset: str = "rpi", steps: int = 6, **changes) -> Job:
    fields = dict(id="20250301-060000-abcdef", theme="sea", prompt="a calm sea", negative_prompt="", seed=1234,
                  steps=steps, guidance=7.0, sampler="euler", width=64, height=48, model=str(model), preset=preset)
    return Job(**{**fields, **changes})


def uninterrupted_state(job: Job) -> list[float]:
    """The fake's final state for ``job`` computed in one go, in this process, in a model
    folder of its own: a daemon still running may be logging its next job to the job's."""
    with tempfile.TemporaryDirectory() as folder:
        shutil.copy(Path(job.model) / "fake.json", folder)
        pipe = FakePipeline(folder, job.preset, [])
        pipe.generate(job.prompt, negative_prompt=job.negative_prompt or None, steps=job.steps, guidance=job.guidance, seed=job.seed,
                      width=job.width, height=job.height, sampler=job.sampler)
        return calls(Path(folder))[-1]["state"]
