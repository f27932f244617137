"""Few-step recipes: the sampling a kind of SDXL model was made for, and the files it needs.

    recipe = find_recipe("lightning-4")
    spec = recipe.spec()              # SamplerSpec: euler, trailing, 4 steps
    recipe.guidance                   # 0.0: distilled without classifier-free guidance
    Pipeline.load(root, loras=[("sdxl_lightning_4step_lora.safetensors", 1.0)]).generate(prompt, recipe="lightning-4")

Each recipe says which sampler, schedule (or explicit timesteps), steps and guidance its
model card's diffusers example uses, the steps it supports, and the public files that make
a model of that kind: a LoRA applied to SDXL base at run time, or a distilled UNet or whole
model to import. A LoRA recipe run without a LoRA is refused unless the model folder was
imported with that distillation (its manifest names the file), because SDXL base sampled in
4 guidance-free steps is a blur, not a slow picture.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from engine import defaults
from engine.errors import InputError
from engine.sdxl.samplers import SamplerSpec, nearest_first
from engine.sdxl.samplers.names import sampler_name
from engine.sdxl.samplers.schedules import MAX_STEPS


@dataclass(frozen=True)
class ModelFile:
    """A public file a recipe runs on: where it is published and what it is."""

    repo: str        # the Hugging Face repository, e.g. "ByteDance/SDXL-Lightning"
    name: str        # the file's name there
    kind: str        # "lora" (applied at run time or merged at import), "unet" or "model" (import it)

    def __str__(self) -> str:
        return f"{self.name} ({self.repo})"


@dataclass(frozen=True)
class Recipe:
    """The sampling settings a distilled model was made for."""

    name: str
    title: str                          # what a user knows the model as
    sampler: str
    schedule: str = "default"
    steps: int = 20
    step_range: tuple[int, int] = (1, MAX_STEPS)   # the steps the model supports (the samplers' limit for sdxl)
    guidance: float = 0.0
    timesteps: tuple[int, ...] | None = None
    eta: float | None = None
    gamma: float | None = None
    size: tuple[int, int] = (1024, 1024)    # the size the model was trained at
    files: tuple[ModelFile, ...] = ()       # any one of them makes a model of this kind

    @property
    def lora(self) -> ModelFile | None:
        """The recipe's LoRA, if one of its files is one."""
        return next((f for f in self.files if f.kind == "lora"), None)

    @property
    def needs_distillation(self) -> bool:
        """Whether SDXL base alone is the wrong model: every recipe but `sdxl` and `turbo`, whose
        models are whole models a user imports (and which we cannot tell from base by their shapes)."""
        return self.lora is not None

    def spec(self, steps: int | None = None, sampler: str | None = None, schedule: str | None = None,
             timesteps: object = None, eta: float | None = None, gamma: float | None = None) -> SamplerSpec:
        """The recipe's SamplerSpec with what the caller gives instead (a schedule or timesteps
        replace the recipe's; another sampler keeps them). Steps outside the recipe's range
        raise InputError naming the range."""
        name, shorthand = sampler_name(sampler) if sampler is not None else (self.sampler, None)
        own_schedule = schedule is None and timesteps is None and shorthand is None
        if own_schedule and self.timesteps is not None and steps not in (None, len(self.timesteps)):
            raise InputError(f"recipe {self.name} samples at timesteps {','.join(map(str, self.timesteps))}, "
                             f"which are {len(self.timesteps)} steps, not {steps}; leave the steps out"
                             + sibling_hint(self, steps))
        if own_schedule:
            schedule, timesteps = (None, self.timesteps) if self.timesteps else (self.schedule, None)
        if steps is None and timesteps is None:
            steps = self.steps
        same = name == self.sampler     # the recipe's eta and gamma are its sampler's
        spec = SamplerSpec.parse(sampler or self.sampler, schedule, steps, timesteps,
                                 eta if eta is not None or not same else self.eta,
                                 gamma if gamma is not None or not same else self.gamma)
        lo, hi = self.step_range
        if not lo <= spec.steps <= hi:
            raise InputError(f"recipe {self.name} supports {step_words(lo, hi)}, not {spec.steps}"
                             + sibling_hint(self, spec.steps))
        return spec

    def missing_file(self, model_root: Path | None, loras: list) -> str | None:
        """None when the model can run this recipe (a LoRA is given, or the model folder's
        import manifest names one of the recipe's files), else what to give instead."""
        if not self.needs_distillation or loras:
            return None
        if model_root is not None and imported_from(Path(model_root)) & {f.name for f in self.files}:
            return None
        others = [f for f in self.files if f.kind != "lora"]
        instead = f", or import a model from {' or '.join(map(str, others))}" if others else ""
        return (f"recipe {self.name} is for {self.title}: it needs the LoRA {self.lora} "
                f"(--lora FILE, or a theme's lora:){instead}")


def step_words(lo: int, hi: int) -> str:
    return f"{lo} step{'s' if lo > 1 else ''}" if lo == hi else f"{lo}-{hi} steps"


def sibling_hint(recipe: Recipe, steps: int) -> str:
    """'; for 8 steps use lightning-8' when a recipe of the same family is made for `steps`."""
    family = recipe.name.rsplit("-", 1)[0]
    for other in RECIPES.values():
        if other.name != recipe.name and other.name.rsplit("-", 1)[0] == family \
                and other.step_range[0] <= steps <= other.step_range[1] and other.lora is not None:
            return f"; for {steps} steps use {other.name} (its LoRA is {other.lora.name})"
    return ""


def imported_from(model_root: Path) -> set[str]:
    """The file names a model folder was imported from or merged with (its manifest's source and LoRAs)."""
    from engine.convert.manifest import MANIFEST   # engine.convert's package is not imported for this one name
    try:
        manifest = json.loads((model_root / MANIFEST).read_text())
        paths = [f["path"] for f in manifest["source"]["files"]] + [lora["path"] for lora in manifest["loras"]]
        return {Path(p).name for p in paths}
    except (OSError, ValueError, KeyError, TypeError):
        return set()


def _lightning(steps: int) -> Recipe:
    return Recipe(f"lightning-{steps}", f"SDXL-Lightning {steps}-step", "euler", "trailing", steps, (steps, steps),
                  files=(ModelFile("ByteDance/SDXL-Lightning", f"sdxl_lightning_{steps}step_lora.safetensors", "lora"),
                         ModelFile("ByteDance/SDXL-Lightning", f"sdxl_lightning_{steps}step_unet.safetensors",
                                   "unet")))


def _hyper(steps: int) -> Recipe:
    return Recipe(f"hyper-{steps}", f"Hyper-SDXL {steps}-step", "ddim", "trailing", steps, (steps, steps),
                  files=(ModelFile("ByteDance/Hyper-SD", f"Hyper-SDXL-{steps}steps-lora.safetensors", "lora"),))


RECIPES: dict[str, Recipe] = {r.name: r for r in (
    Recipe("sdxl", "SDXL base", "euler", steps=defaults.STEPS, guidance=defaults.GUIDANCE,
           files=(ModelFile("stabilityai/stable-diffusion-xl-base-1.0", "sd_xl_base_1.0.safetensors", "model"),)),
    Recipe("turbo", "SDXL-Turbo", "euler_a", "trailing", 1, (1, 4), size=(512, 512),
           files=(ModelFile("stabilityai/sdxl-turbo", "sd_xl_turbo_1.0_fp16.safetensors", "model"),)),
    _lightning(2), _lightning(4), _lightning(8),
    # The unified 1-step LoRA is sampled with TCD at full stochasticity (the card's eta, our gamma, 1.0);
    # it also serves 2-8 steps, lower gamma keeping more detail there.
    Recipe("hyper-1", "Hyper-SDXL 1-step", "tcd", "default", 1, (1, 8), gamma=1.0,
           files=(ModelFile("ByteDance/Hyper-SD", "Hyper-SDXL-1step-lora.safetensors", "lora"),)),
    # The 1-step UNet is sampled once at timestep 800, with LCM (the card: "set start timesteps to 800").
    Recipe("hyper-1-unet", "Hyper-SDXL 1-step UNet", "lcm", steps=1, step_range=(1, 1), timesteps=(800,),
           files=(ModelFile("ByteDance/Hyper-SD", "Hyper-SDXL-1step-Unet.safetensors", "unet"),)),
    _hyper(2), _hyper(4), _hyper(8),
    Recipe("dmd2", "DMD2 4-step", "lcm", steps=4, step_range=(4, 4), timesteps=(999, 749, 499, 249),
           files=(ModelFile("tianweiy/DMD2", "dmd2_sdxl_4step_lora_fp16.safetensors", "lora"),
                  ModelFile("tianweiy/DMD2", "dmd2_sdxl_4step_unet_fp16.bin", "unet"))),
    # guidance 1 is no CFG (one UNet evaluation a step); LCM-LoRA's card allows 1-2.
    Recipe("lcm-lora", "LCM-LoRA SDXL", "lcm", steps=4, step_range=(4, 8), guidance=1.0,
           files=(ModelFile("latent-consistency/lcm-lora-sdxl", "pytorch_lora_weights.safetensors", "lora"),)),
)}
DEFAULT_RECIPE = "sdxl"


def find_recipe(name: str) -> Recipe:
    """The recipe called `name` (case, '_' and ' ' for '-' do not matter); InputError with the
    list, nearest first, for a name that is none."""
    if not isinstance(name, str):
        raise InputError(f"the recipe must be a name such as lightning-4, got {name!r}")
    key = "-".join(name.strip().lower().replace("_", " ").replace("-", " ").split())
    if key in RECIPES:
        return RECIPES[key]
    raise InputError(f"unknown recipe '{name}'; choose one of: {', '.join(nearest_first(key, tuple(RECIPES)))}")
