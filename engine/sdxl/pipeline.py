"""Prompt -> picture: text encoders, the sampling loop over the UNet, the VAE; resumable.

    from engine.sdxl import Pipeline
    pipe = Pipeline.load("models/sdxl-base", preset="rpi-lowmem")
    result = pipe.generate("a lighthouse at dusk", steps=10, seed=42, checkpoint_dir="run/")
    result.save("out.png")

Stages run one after another and each releases its weights before the next loads,
so peak memory is that of the largest stage. With a checkpoint folder, every UNet
evaluation (each half of a split CFG step too) ends with a durable checkpoint of
everything the rest of the run depends on: latents, sampler state, RNG state, the
step and half-step. Calling `generate` again with the same settings and folder resumes
from there and gives byte-identical latents and PNG (same machine, same threads).

Randomness: numpy's PCG64 seeded with the 64-bit seed draws the initial noise
(standard normal, float32, latent shape) and then the noise of every step that adds
some (ancestral and SDE samplers, ddpm, lcm, tcd; the order: engine/sdxl/samplers/sampler.py);
numpy guarantees the same stream on every platform. `init_noise` replaces the initial
draw (the steps' noise still comes from the seed), exactly as diffusers treats `latents=`.

Sampling: `recipe` (engine.sdxl.recipes: sdxl, turbo, lightning-4, dmd2, ...) sets the
sampler, schedule, steps, guidance and size a kind of model was made for; `sampler` names
one of engine.sdxl.samplers.SAMPLERS instead (or is a whole SamplerSpec), `schedule` one of
SCHEDULES, `timesteps` an explicit list, `eta`/`gamma` the stochastic samplers' amount of
fresh noise. All of it is in RunSettings, so a checkpoint of another setting is refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import inspect
import json
import logging
import math
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, PngImagePlugin

import engine
from engine.atomic import atomic_write
from engine.checkpoint import CheckpointDir, CorruptCheckpoint, read_file, write_file
from engine.errors import Cancelled, CheckpointMismatch, InputError, ModelFileError
from engine.memory import release_free_memory
from engine.options import resolve
from engine.png_text import one_line
from engine.sdxl.conditioning import Conditioning, TextEncoders
from engine.sdxl.recipes import DEFAULT_RECIPE, Recipe, find_recipe
from engine.sdxl.samplers import (SAMPLER_LABELS, SCHEDULE_LABELS, NoiseSchedule, Sampler, SamplerSpec,
                                  SamplerState, draw_noise)
from engine.sdxl.tiny_vae import TINY_VAE, TinyVAEDecoder, tiny_vae_problem
from engine.sdxl.unet import UNet
from engine.sdxl.vae import VAEDecoder
from engine.weights import find_weight_files

log = logging.getLogger(__name__)

COMPONENTS = ("unet", "vae", "text_encoder", "text_encoder_2")
DECODERS = ("full", "tiny")
CONDITIONING_FILE = "conditioning.ckpt"
MAX_SEED = 2 ** 64 - 1


@dataclass(frozen=True)
class RunSettings:
    """Everything that decides the picture; a checkpoint resumes only a run with the same settings."""

    prompt: str
    negative_prompt: str | None
    seed: int
    steps: int
    sampler: str
    recipe: str                     # engine.sdxl.recipes: the kind of model the sampling was made for
    width: int
    height: int
    guidance: float
    model: str
    preset: str
    engine_version: str
    init_noise: str | None = None   # sha256 of the injected initial noise
    loras: tuple = ()               # ((file name, weight, content fingerprint), ...) applied at run time
    schedule: str = "default"       # engine.sdxl.samplers.SCHEDULES, or "explicit" with `timesteps`
    timesteps: tuple[int, ...] | None = None   # explicit training timesteps
    eta: float | None = None        # the sampler's amount of fresh noise (None: it takes none)
    gamma: float | None = None      # tcd's

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["loras"] = [list(x) for x in self.loras]    # as JSON gives it back from a checkpoint
        d["timesteps"] = None if self.timesteps is None else list(self.timesteps)
        return d

    def differences(self, other: dict) -> list[str]:
        mine = self.to_dict()
        return [f"{k}: {other.get(k)!r} there, {mine[k]!r} now" for k in mine if other.get(k) != mine[k]]


@dataclass
class StepProgress:
    """Reported after every UNet evaluation (each half of a split CFG evaluation too)."""

    step: int                 # steps completed (0..steps)
    steps: int
    evaluation: int           # UNet evaluations completed in this run (a step may take two, CFG halves count)
    evaluations: int          # in the whole run
    seconds_per_step: float   # measured in this process, None before the first whole step
    eta_seconds: float | None
    resumed_from: int | None
    denoised: np.ndarray | None = None
    """The sampler's estimate of the final latents (x0: float32, the latents' shape, before VAE
    scaling) after the step just completed; None on reports within a step (a CFG half, the
    first evaluation of a two-evaluation step) and right after a resume."""


@dataclass
class Result:
    image: Image.Image
    latents: np.ndarray       # the final latents, before VAE scaling, (1, 4, h/8, w/8)
    metadata: dict = field(default_factory=dict)   # the run settings: what made this picture (goes into the PNG)
    timings: dict = field(default_factory=dict)    # seconds per step, checkpoint seconds (not in the PNG)
    resumed_from: int | None = None

    @property
    def parameters(self) -> str:
        """The picture's settings in the text format other Stable Diffusion tools read."""
        return parameters_text(self.metadata)

    def save(self, path: str | Path) -> Path:
        """Write the PNG (with a `parameters` text chunk) atomically."""
        path = Path(path)
        info = PngImagePlugin.PngInfo()
        info.add_text("parameters", self.parameters)
        info.add_text("slowframe", json.dumps(self.metadata, sort_keys=True))
        try:
            with atomic_write(path, durable=True) as f:
                self.image.save(f, format="PNG", pnginfo=info)
        except OSError as e:
            raise InputError(f"cannot write {path}: {e.strerror or e}") from None
        return path


def parameters_text(meta: dict) -> str:
    """The A1111-style ``parameters`` text: prompt, negative prompt, then 'Steps: 20, Sampler: ...'."""
    lines = [one_line(meta.get("prompt", ""))]
    if meta.get("negative_prompt"):
        lines.append(f"Negative prompt: {one_line(meta['negative_prompt'])}")
    timesteps, schedule = meta.get("timesteps"), meta.get("schedule")
    fields = [("Steps", meta.get("steps")), ("Sampler", SAMPLER_LABELS.get(meta.get("sampler"), meta.get("sampler"))),
              ("Schedule type", SCHEDULE_LABELS.get(schedule, schedule) if schedule not in (None, "default") else None),
              ("Timesteps", f'"{",".join(map(str, timesteps))}"' if timesteps else None),
              ("Eta", meta.get("eta")), ("Gamma", meta.get("gamma")),
              ("CFG scale", meta.get("guidance")), ("Seed", meta.get("seed")),
              ("Size", f"{meta.get('width')}x{meta.get('height')}"), ("Model", meta.get("model_name")),
              ("Model hash", (meta.get("model") or "")[:10]),
              ("Recipe", meta.get("recipe") if meta.get("recipe") != DEFAULT_RECIPE else None),
              ("Version", f"slowframe {meta.get('engine_version')}")]
    lines.append(", ".join(f"{k}: {v}" for k, v in fields if v is not None))
    return "\n".join(lines)


class Pipeline:
    """An SDXL model folder (diffusers layout) ready to generate; loads weights per stage."""

    def __init__(self, root: Path, preset: str, overrides: dict, schedule: NoiseSchedule, model_id: str,
                 loras: list[tuple[Path, float]] = (), tiny_vae: Path | None = None):
        self.root = root
        self.tiny_vae = tiny_vae if tiny_vae is not None else root / TINY_VAE
        """The tiny decoder's folder: the model's vae_tiny/ unless load() named another."""
        self.loras = list(loras)
        self.lora_ids = tuple((p.name, w, file_fingerprint(p)) for p, w in self.loras)
        self.preset = preset
        self.overrides = overrides
        self.options = resolve(preset, **overrides)
        self.schedule = schedule
        self.model_id = model_id

    @classmethod
    def load(cls, model_root: str | Path, preset: str = "default", loras: list[tuple[str | Path, float]] = (),
             tiny_vae: str | Path | None = None, **overrides: object) -> "Pipeline":
        """Check a model folder (unet/, vae/, text_encoder/, text_encoder_2/, tokenizers,
        optional scheduler/ and vae_tiny/) without reading its weights. `loras` [(file, weight), ...] are
        style LoRAs applied while the weights stream (no new model needed). `tiny_vae`: the
        tiny decoder's folder when it is not the model's vae_tiny/."""
        root = Path(model_root)
        if not root.is_dir():
            raise ModelFileError(f"{root}: no such model folder; expected an SDXL model in diffusers layout "
                                 f"({', '.join(COMPONENTS)}, ...) such as `slowframe models import` writes")
        missing = [c for c in COMPONENTS if not (root / c / "config.json").is_file()]
        if missing:
            raise ModelFileError(f"{root}: missing {', '.join(f'{c}/' for c in missing)} (each with a config.json); "
                                 "is this an SDXL model folder? `slowframe models import` makes one from a "
                                 "single-file .safetensors model")
        resolve(preset, **overrides)   # bad options fail now, not after the text encoders ran
        loras = [(Path(path), float(weight)) for path, weight in loras]
        if loras:    # engine.convert is imported for LoRAs only: without them its code never loads
            from engine.convert.lora import open_loras
            for lora in open_loras(loras):  # unreadable or foreign LoRA files fail now too
                lora.close()
        return cls(root, preset, dict(overrides), NoiseSchedule.from_model(root), model_fingerprint(root), loras,
                   Path(tiny_vae) if tiny_vae is not None else None)

    # -- generation ----------------------------------------------------------

    def generate(self, prompt: str, negative_prompt: str | None = None, steps: int | None = None,
                 guidance: float | None = None, seed: int | None = None, width: int | None = None,
                 height: int | None = None, sampler: str | SamplerSpec | None = None, recipe: str | None = None,
                 init_noise: np.ndarray | None = None,
                 checkpoint_dir: str | Path | None = None, restart: bool = False,
                 on_progress: Callable[[StepProgress], object] | None = None, cancel: threading.Event | None = None,
                 tiled: bool = True, schedule: str | None = None, timesteps: object = None,
                 eta: float | None = None, gamma: float | None = None, decoder: str = "full") -> Result:
        """Generate one picture. `recipe` (default sdxl: euler, 20 steps, guidance 5, 1024x1024)
        names the kind of model (engine.sdxl.recipes) and gives the defaults for everything
        below; a recipe made for a LoRA needs one (Pipeline.load's `loras`) or a model imported
        with it. `sampler` and `schedule` are names as engine.sdxl.samplers lists them;
        `timesteps` (a list, or "999,749,...") replaces the schedule and sets the steps;
        `eta`/`gamma` set a stochastic sampler's fresh noise. `sampler` may instead be a whole
        SamplerSpec (then leave steps, schedule, timesteps, eta and gamma out). Steps outside
        what the recipe supports are refused. With `checkpoint_dir` the run
        checkpoints after every UNet evaluation and resumes a run with the same settings from
        there; `restart` discards what is there. Returning False from `on_progress`, or
        setting `cancel`, stops the run with Cancelled (within one op; the last checkpoint is kept).
        `decoder`: how the final latents become the picture (see decode); it does not change the
        latents, so a run resumes whichever decoder it ends with."""
        return self._generate(1, **{k: v for k, v in locals().items() if k != "self"})[0]

    def generate_batch(self, prompt: str, num: int = 2, **options: object) -> list[Result]:
        """`num` pictures in one pass over the weights, seeds seed, seed+1, ... (`options` are
        generate's): each the picture a run of its own with that seed gives (its own noise
        stream, to float32 rounding: README), evaluated by the UNet as one batch so each weight
        is read once a step for all of them, checkpointed together and decoded one after another.
        The preset's memory budget limits `num` (check_pictures)."""
        try:
            bound = inspect.signature(self.generate).bind(prompt, **options)
        except TypeError as e:
            raise InputError(f"generate_batch: {e}") from None
        bound.apply_defaults()
        return self._generate(num, **bound.arguments)

    def _generate(self, num, prompt, negative_prompt, steps, guidance, seed, width, height, sampler, recipe,
                  init_noise, checkpoint_dir, restart, on_progress, cancel, tiled, schedule, timesteps, eta,
                  gamma, decoder) -> list[Result]:
        recipe = find_recipe(DEFAULT_RECIPE if recipe is None else recipe)
        missing = recipe.missing_file(self.root, self.loras)
        if missing:
            raise InputError(missing)
        spec = sampler_spec(recipe, sampler, steps, schedule, timesteps, eta, gamma)
        sampler = spec.build(self.schedule)     # a schedule the model cannot do fails here
        guidance = recipe.guidance if guidance is None else guidance
        width = recipe.size[0] if width is None else width
        height = recipe.size[1] if height is None else height
        request = (prompt, negative_prompt, spec, recipe.name, width, height, guidance, init_noise)
        self._settings(0 if seed is None else seed, *request)   # refuse bad requests before touching checkpoints
        check_pictures(num, width, height, self.options, init_noise is not None)
        decoder = self._usable_decoder(decoder)    # a missing tiny decoder is said before the hours of sampling
        if seed is not None and seed + num - 1 > MAX_SEED:
            raise InputError(f"seeds {seed} to {seed + num - 1} go past {MAX_SEED}; choose a smaller seed")
        store = CheckpointDir(checkpoint_dir, log=log.warning) if checkpoint_dir is not None else None
        if store is not None and restart:
            store.clear()
            (store.path / CONDITIONING_FILE).unlink(missing_ok=True)
        latest = store.latest() if store is not None else None
        if seed is None:
            seed = latest.meta["job"].get("seed") if latest is not None else secrets.randbits(63)
        batch = [self._settings(seed + i, *request) for i in range(num)]
        job = batch_job(batch)
        if latest is not None and latest.meta.get("job") != job:
            theirs = latest.meta.get("job") or {}
            differences = batch[0].differences(theirs)
            if theirs.get("pictures", 1) != num:
                differences.append(f"pictures: {theirs.get('pictures', 1)} there, {num} now")
            raise CheckpointMismatch(store.path, differences)
        run = _Run(self, batch, sampler, store, on_progress, cancel)
        finals = run.sample(latest, init_noise)
        release_free_memory()        # each stage's peak, not the sum: the UNet is gone, the VAE comes
        timings = {"seconds_per_step": run.seconds_per_step(), "checkpoint_seconds": round(run.checkpoint_seconds, 4)}
        results = []
        for settings, latents in zip(batch, finals):
            meta = {**settings.to_dict(), "model_name": self.root.name}
            if decoder == "tiny":        # the full VAE's pictures keep the metadata they always had
                meta["decoder"] = "tiny"
            image = self.decode(latents, tiled=tiled, cancel=cancel, decoder=decoder)
            results.append(Result(image, latents, meta, timings, run.resumed_from))
        return results

    def decode(self, latents: np.ndarray, tiled: bool = True, cancel: threading.Event | None = None,
               decoder: str = "full") -> Image.Image:
        """Final latents (before VAE scaling) -> RGB picture. decoder="full": the model's VAE,
        in tiles unless `tiled` is False; "tiny": the tiny decoder (TAESDXL, engine/sdxl/tiny_vae.py)
        from the `tiny_vae` folder, in bands: seconds instead of minutes, softer detail. If the
        tiny decoder is missing or not one, the log says so once and the full VAE decodes."""
        latents = np.asarray(latents, dtype=np.float32)
        if latents.ndim != 4 or latents.shape[0] != 1:
            raise InputError(f"latents must have shape (1, 4, h, w), got {list(latents.shape)}")
        tiny = self._usable_decoder(decoder) == "tiny"
        model, folder = (TinyVAEDecoder, self.tiny_vae) if tiny else (VAEDecoder, self.root / "vae")
        with model.load(folder, self.preset, **self.overrides) as vae:
            vae.cancel = cancel
            z = latents / np.float32(vae.scaling_factor)
            return vae.to_image(vae.decode(z) if tiny else vae.decode(z, tiled=tiled))

    def _usable_decoder(self, decoder: str) -> str:
        """`decoder`, or "full" (said in the log) where it is "tiny" and the tiny decoder's
        folder is missing or holds something else."""
        if decoder not in DECODERS:
            raise InputError(f"unknown decoder {decoder!r}; choose one of: {', '.join(DECODERS)}")
        problem = tiny_vae_problem(self.tiny_vae) if decoder == "tiny" else None
        if problem is not None:
            log.warning("decoder: tiny, but %s. Decoding with the full VAE instead; `slowframe models import "
                        "--tiny-vae PATH %s` puts a tiny decoder in place", problem, self.root)
            return "full"
        return decoder

    def conditioning(self, settings: RunSettings, store: CheckpointDir | None,
                     cancel: threading.Event | None) -> Conditioning:
        """The prompt's conditioning, kept beside the checkpoints so a resume skips the text encoders."""
        path = store.path / CONDITIONING_FILE if store is not None else None
        if path is not None and path.is_file():
            try:
                saved = read_file(path)
                if saved.meta.get("job") == settings.to_dict():
                    return Conditioning(**saved.arrays)
            except (CorruptCheckpoint, TypeError) as e:
                log.warning("saved conditioning %s is unusable (%s); encoding the prompt again", path, e)
        standard = not (self.root / "tokenizer").is_dir()   # a folder with bad files is named, not replaced
        if standard:
            log.info("%s has no tokenizer/ folder: using the standard CLIP vocabulary bundled with slowframe",
                     self.root)
        # The encoders' own prompt cache knows nothing of LoRAs: off when they change the encoders.
        with TextEncoders.load(self.root, self.preset, standard_vocabulary=standard, cache=not self.loras,
                               **self.overrides) as encoders, self._styles() as loras:
            for model, component in zip(encoders.encoders, ("text_encoder", "text_encoder_2")):
                model.cancel = cancel
                if loras:
                    from engine.convert.lora import attach_loras
                    attach_loras(model, component, loras)
            cond = encoders.encode(settings.prompt, settings.negative_prompt)
        if path is not None:
            write_file(path, {"job": settings.to_dict()}, dataclasses.asdict(cond))
        return cond

    @contextlib.contextmanager
    def _styles(self) -> Iterator[list]:
        """The LoRA files, open for one stage."""
        if not self.loras:
            yield []
            return
        from engine.convert.lora import open_loras
        files = open_loras(self.loras)
        try:
            yield files
        finally:
            for f in files:
                f.close()

    def _settings(self, seed, prompt, negative_prompt, spec: SamplerSpec, recipe: str, width, height, guidance,
                  init_noise) -> RunSettings:
        if not isinstance(prompt, str):
            raise InputError(f"prompt must be text, got {type(prompt).__name__}")
        if negative_prompt is not None and not isinstance(negative_prompt, str):
            raise InputError(f"negative prompt must be text, got {type(negative_prompt).__name__}")
        if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= MAX_SEED:
            raise InputError(f"seed must be a whole number from 0 to {MAX_SEED}, got {seed!r}")
        if not isinstance(guidance, (int, float)) or isinstance(guidance, bool) or not math.isfinite(guidance) \
                or not 0 <= guidance <= 50:
            raise InputError(f"guidance must be a number from 0 to 50 (SDXL works best around 5-8), got {guidance!r}")
        check_size(width, height)
        noise_hash = None
        if init_noise is not None:
            expected = (1, 4, height // 8, width // 8)
            noise = np.asarray(init_noise)
            if noise.shape != expected or not np.issubdtype(noise.dtype, np.floating) or not np.isfinite(noise).all():
                raise InputError(f"init noise must be finite floats of shape {list(expected)} for {width}x{height}, "
                                 f"got {noise.dtype} {list(noise.shape)}")
            noise_hash = hashlib.sha256(np.ascontiguousarray(noise, dtype=np.float32).tobytes()).hexdigest()
        return RunSettings(prompt, negative_prompt, seed, spec.steps, spec.sampler, recipe, width, height,
                           float(guidance), self.model_id, self.preset, engine.__version__, noise_hash, self.lora_ids,
                           spec.schedule, spec.timesteps, spec.eta, spec.gamma)


def sampler_spec(recipe: Recipe, sampler: str | SamplerSpec | None, steps: int | None, schedule: str | None,
                 timesteps: object, eta: float | None, gamma: float | None) -> SamplerSpec:
    """The run's SamplerSpec from generate()'s arguments: the recipe's, with what is given instead."""
    if isinstance(sampler, SamplerSpec):
        given = [k for k, v in (("steps", steps), ("schedule", schedule), ("timesteps", timesteps), ("eta", eta),
                                ("gamma", gamma)) if v is not None]
        if given:
            raise InputError(f"a SamplerSpec already holds the sampling settings; leave out {', '.join(given)}")
        # read again, so a spec made field by field (not by SamplerSpec.parse) is checked too
        return recipe.spec(sampler.steps if sampler.timesteps is None else None, sampler.sampler,
                           None if sampler.timesteps else sampler.schedule, sampler.timesteps, sampler.eta,
                           sampler.gamma)
    return recipe.spec(steps, sampler, schedule, timesteps, eta, gamma)


class _Run:
    """One run's sampling loop over a batch of pictures (one sampler state and noise stream
    each, evaluated as one UNet batch), with its checkpoints."""

    def __init__(self, pipe: Pipeline, batch: list[RunSettings], sampler: Sampler, store: CheckpointDir | None,
                 on_progress: Callable[[StepProgress], object] | None, cancel: threading.Event | None):
        self.pipe, self.batch, self.sampler, self.store = pipe, batch, sampler, store
        self.settings = batch[0]     # what the pictures share (all but the seed)
        self.job = batch_job(batch)
        self.on_progress, self.cancel = on_progress, cancel
        self.cfg = self.settings.guidance > 1.0
        self.split = self.cfg and not pipe.options.cfg_batch
        self.per_evaluation = 2 if self.split else 1       # UNet calls per sampler evaluation
        self.resumed_from: int | None = None
        self.step_seconds: list[float] = []
        self.checkpoint_seconds = 0.0
        self._step_pending: float | None = 0.0   # seconds of the current step so far; None: it began before a resume
        self._measured_seconds, self._measured_calls = 0.0, 0   # of the UNet calls in this process
        self.evaluations = sampler.evaluations * self.per_evaluation

    def seconds_per_step(self) -> float | None:
        return round(sum(self.step_seconds) / len(self.step_seconds), 3) if self.step_seconds else None

    def sample(self, latest, init_noise: np.ndarray | None) -> list[np.ndarray]:
        """Each picture's final latents."""
        settings, sampler, n = self.settings, self.sampler, len(self.batch)
        rngs = [np.random.Generator(np.random.PCG64(s.seed)) for s in self.batch]
        shape = (1, 4, settings.height // 8, settings.width // 8)
        if latest is not None:
            states = [SamplerState.restore(picture_arrays(latest.arrays, i), latest.meta) for i in range(n)]
            half, eps_first = latest.meta["half"], latest.arrays.get("eps_first")
            for rng, saved in zip(rngs, latest.meta["rng"]):
                rng.bit_generator.state = saved
            self.resumed_from = states[0].step
            if states[0].stage or half:
                self._step_pending = None
            log.info("resumed from step %d of %d, %d evaluations in (%s)", states[0].step, sampler.steps,
                     self.done(states[0], half), latest.path.name)
        else:
            half, eps_first = 0, None
            states = [sampler.start(draw_noise(rng, shape) if init_noise is None
                                    else np.asarray(init_noise, dtype=np.float32)) for rng in rngs]
        if sampler.finished(states[0]):
            return [state.x for state in states]
        self._cancel_check()
        cond = self.pipe.conditioning(settings, self.store, self.cancel)
        release_free_memory()        # the text encoders are gone; the UNet comes
        h, w = settings.height, settings.width
        time_ids = np.repeat(np.array([[h, w, 0, 0, h, w]], dtype=np.float32), n, 0)
        negative = (np.repeat(cond.negative_embeds, n, 0), np.repeat(cond.negative_pooled, n, 0)) if self.cfg else ()
        positive = (np.repeat(cond.prompt_embeds, n, 0), np.repeat(cond.pooled, n, 0))
        with UNet.load(self.pipe.root / "unet", self.pipe.preset, **self.pipe.overrides) as unet, \
                self.pipe._styles() as loras:
            unet.cancel = self.cancel
            if loras:
                from engine.convert.lora import attach_loras
                attach_loras(unet, "unet", loras)
            while not sampler.finished(states[0]):
                started = time.perf_counter()
                inputs = [sampler.model_input(state) for state in states]
                x_in, t = np.concatenate([x for x, _ in inputs]), inputs[0][1]   # one step: one timestep
                if not self.cfg:
                    eps = unet(x_in, t, *positive, time_ids)
                elif not self.split:
                    both = unet(np.concatenate([x_in, x_in]), t, *(np.concatenate(pair) for pair in
                                                                   zip(negative, positive)), np.concatenate(
                        [time_ids, time_ids]))
                    eps = guided(both[:n], both[n:], settings.guidance)
                else:
                    # Split CFG: two evaluations of the batch. Their order alternates with the sampler's
                    # evaluations, so each starts with the conditioning the last one ended with and
                    # a single cached K/V entry (kv_cache_entries=1) is reused every other evaluation.
                    flip = (sampler.evaluations_before(states[0].step) + states[0].stage) % 2
                    halves = [negative, positive]
                    if flip:
                        halves.reverse()
                    if half == 0:
                        eps_first = unet(x_in, t, *halves[0], time_ids)
                        half = 1
                        self._evaluated(states, half, rngs, eps_first, time.perf_counter() - started)
                        continue
                    eps_second = unet(x_in, t, *halves[1], time_ids)
                    uncond, cond_eps = (eps_second, eps_first) if flip else (eps_first, eps_second)
                    eps = guided(uncond, cond_eps, settings.guidance)
                for i, (state, rng) in enumerate(zip(states, rngs)):
                    sampler.advance(state, eps[i:i + 1], rng)
                half, eps_first = 0, None
                self._evaluated(states, half, rngs, None, time.perf_counter() - started)
        return [state.x for state in states]

    def done(self, state: SamplerState, half: int) -> int:
        """UNet calls done by the time the run is at `state` and `half`."""
        return (self.sampler.evaluations_before(state.step) + state.stage) * self.per_evaluation + half

    def _evaluated(self, states: list[SamplerState], half: int, rngs: list[np.random.Generator],
                   eps_first: np.ndarray | None, seconds: float) -> None:
        """Checkpoint, then report progress; stop here if asked."""
        state = states[0]     # the pictures are at the same step and stage
        if self.store is not None:
            started = time.perf_counter()
            arrays = {picture_key(i, k): v for i, s in enumerate(states) for k, v in s.arrays().items()}
            if eps_first is not None:
                arrays["eps_first"] = eps_first
            self.store.save({"job": self.job, **state.scalars(), "half": half,
                             "rng": [rng.bit_generator.state for rng in rngs]}, arrays)
            self.checkpoint_seconds += time.perf_counter() - started
        self._measured_seconds += seconds
        self._measured_calls += 1
        step_done = state.stage == 0 and half == 0
        if self._step_pending is not None:
            self._step_pending += seconds
        if step_done:
            if self._step_pending is not None:
                self.step_seconds.append(self._step_pending)
            self._step_pending = 0.0
        done = self.done(state, half)
        per_call = self._measured_seconds / self._measured_calls
        progress = StepProgress(state.step, self.sampler.steps, done, self.evaluations, self.seconds_per_step(),
                                round(per_call * (self.evaluations - done), 1), self.resumed_from,
                                state.denoised if step_done else None)
        if self.on_progress is not None and self.on_progress(progress) is False:
            raise Cancelled(f"stopped after step {state.step} of {self.sampler.steps}")
        self._cancel_check()

    def _cancel_check(self) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise Cancelled("stopped on request")


def batch_job(batch: list[RunSettings]) -> dict:
    """What a batch's checkpoints are of: the first picture's settings (the others differ by
    their seed only) and, for more than one, how many."""
    job = batch[0].to_dict()
    return job if len(batch) == 1 else {**job, "pictures": len(batch)}


def picture_key(i: int, key: str) -> str:
    """Picture i's name for a checkpoint array (picture 0's are the plain names)."""
    return key if i == 0 else f"picture{i}.{key}"


def picture_arrays(arrays: dict[str, np.ndarray], i: int) -> dict[str, np.ndarray]:
    """Picture i's arrays from a checkpoint, under their plain names."""
    if i == 0:
        return {k: v for k, v in arrays.items() if not k.startswith("picture") and k != "eps_first"}
    prefix = f"picture{i}."
    return {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)}


# Peak RSS of one full-size UNet evaluation in rpi-lowmem (bench/unet_batch_memory.py,
# bench/RESULTS.md#several-pictures-per-pass): at batch 1 by latent area, and what each picture
# more adds (its activations and its cross-attention K/V; faster than the area: attention).
BATCH1_PEAK = ((64 * 64, 150.0e6), (96 * 96, 166.2e6), (128 * 128, 208.0e6))
PICTURE_MORE = ((64 * 64, 33.7e6), (96 * 96, 83.8e6), (128 * 128, 139.6e6))


def along(points: tuple[tuple[int, float], ...], x: float) -> float:
    """The straight lines through `points` at x, the outer ones carried on beyond them."""
    i = min(max(1, sum(px <= x for px, _ in points)), len(points) - 1)
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def pictures_within(budget: int, width: int, height: int) -> int:
    """How many pictures of this size one UNet batch holds within `budget` bytes (at least 1)."""
    area = (width // 8) * (height // 8)
    more = max(along(PICTURE_MORE, area), 1e6)
    return max(1, 1 + int((budget - along(BATCH1_PEAK, area)) // more))


def check_pictures(num: int, width: int, height: int, options, init_noise: bool) -> None:
    """Refuse a number of pictures that is not one, or a batch the preset's memory budget does not hold."""
    if not isinstance(num, int) or isinstance(num, bool) or num < 1:
        raise InputError(f"the number of pictures must be a whole number from 1, got {num!r}")
    if init_noise and num > 1:
        raise InputError("init noise is one picture's; give it with one picture, or leave it out")
    if options.memory_budget and num > 1:
        fits = pictures_within(options.memory_budget, width, height)
        if num > fits:
            raise InputError(f"{num} pictures of {width}x{height} at once do not fit the preset's "
                             f"{options.memory_budget / 1e6:.0f} MB budget; at most {fits} at that size "
                             f"(see the README: several pictures per pass)")


def guided(eps_uncond: np.ndarray, eps_cond: np.ndarray, guidance: float) -> np.ndarray:
    """Classifier-free guidance, as diffusers computes it."""
    return (eps_uncond + np.float32(guidance) * (eps_cond - eps_uncond)).astype(np.float32)


def check_size(width: int, height: int) -> None:
    for name, v in (("width", width), ("height", height)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 64 or v > 4096:
            raise InputError(f"{name} must be a whole number of pixels from 64 to 4096, got {v!r}")
        if v % 8:
            raise InputError(f"{name} {v} is not a multiple of 8 (the VAE works in 8-pixel cells); "
                             f"try {v // 64 * 64 or 64} or {(v // 64 + 1) * 64}")
        if v % 64:
            log.warning("%s %d is not a multiple of 64; SDXL was trained on multiples of 64 and may draw worse "
                        "(try %d or %d)", name, v, v // 64 * 64, (v // 64 + 1) * 64)


def file_fingerprint(path: Path, sample_bytes: int = 1 << 16, samples: int = 8) -> str:
    """Size and sampled bytes (header and evenly spaced blocks) of one file, hashed."""
    h = hashlib.sha256()
    size = path.stat().st_size
    h.update(f"{size}\0".encode())
    with open(path, "rb") as f:
        for i in range(samples + 1):
            f.seek((size - sample_bytes) * i // samples if size > sample_bytes else 0)
            h.update(f.read(sample_bytes))
    return h.hexdigest()[:32]


def model_fingerprint(root: Path, sample_bytes: int = 1 << 16, samples: int = 8) -> str:
    """Identity of a model folder's contents: configs, weight file sizes, and sampled bytes of
    each weight file (its header and evenly spaced blocks), so a different fine-tune of the
    same shapes is told apart without reading gigabytes."""
    h = hashlib.sha256()
    for component in COMPONENTS:
        folder = root / component
        h.update(component.encode() + b"\0" + (folder / "config.json").read_bytes())
        stem = "diffusion_pytorch_model" if component in ("unet", "vae") else "model"
        for path in find_weight_files(folder, stem):
            h.update(f"{path.name}\0{file_fingerprint(path, sample_bytes, samples)}\0".encode())
    return h.hexdigest()[:32]
