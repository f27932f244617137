"""Sampler and schedule names: the ones people know from AUTOMATIC1111/ComfyUI, OnnxStream's as aliases, labels.

Names are read forgivingly: case, spaces, '-' and '++' do not matter ("DPM++ 2M" is
dpmpp_2m, "Euler a" is euler_a). A sampler name ending in a schedule's name is the
shorthand A1111 used to write ("DPM++ 2M Karras"): dpmpp_2m_karras is dpmpp_2m with the
karras schedule. A name that is none of these gets the list of valid ones, nearest first.
"""

from __future__ import annotations

import difflib

from engine.errors import InputError
from engine.sdxl.samplers.schedules import EXPLICIT, SCHEDULES

SAMPLERS = ("euler", "euler_a", "heun", "dpm2", "dpm2_a", "dpmpp_2m", "dpmpp_2m_sde", "dpmpp_2s_a", "dpmpp_3m_sde",
            "lms", "ddim", "ddpm", "ipndm", "unipc", "lcm", "tcd")

# OnnxStream's names (after normalising: "dpm++2m" reads "dpmpp2m") and k-diffusion's function names.
ALIASES = {"dpmpp2m": "dpmpp_2m", "dpmpp2s_a": "dpmpp_2s_a", "dpmpp3msde": "dpmpp_3m_sde", "dpmpp2msde": "dpmpp_2m_sde",
           "dpmpp_2s_ancestral": "dpmpp_2s_a", "euler_ancestral": "euler_a", "dpm_2": "dpm2",
           "dpm_2_ancestral": "dpm2_a", "uni_pc": "unipc"}

SAMPLER_LABELS = {"euler": "Euler", "euler_a": "Euler a", "heun": "Heun", "dpm2": "DPM2", "dpm2_a": "DPM2 a",
                  "dpmpp_2m": "DPM++ 2M", "dpmpp_2m_sde": "DPM++ 2M SDE", "dpmpp_2s_a": "DPM++ 2S a",
                  "dpmpp_3m_sde": "DPM++ 3M SDE", "lms": "LMS", "ddim": "DDIM", "ddpm": "DDPM", "ipndm": "iPNDM",
                  "unipc": "UniPC", "lcm": "LCM", "tcd": "TCD"}
SCHEDULE_LABELS = {"default": "Automatic", "normal": "Normal", "karras": "Karras", "exponential": "Exponential",
                   "sgm_uniform": "SGM Uniform", "simple": "Simple", "trailing": "Trailing", EXPLICIT: "Explicit"}


def nearest_first(word: str, choices: tuple[str, ...]) -> list[str]:
    """All `choices`, the most similar to `word` first (difflib's ratio; ties keep their order)."""
    ratio = {c: difflib.SequenceMatcher(None, word, c).ratio() for c in choices}
    return sorted(choices, key=lambda c: -ratio[c])


def normalised(name: str) -> str:
    return "_".join(name.strip().lower().replace("++", "pp").replace("-", " ").replace("_", " ").split())


def sampler_name(name: str) -> tuple[str, str | None]:
    """(canonical sampler, schedule or None) for a name as a user writes it."""
    if not isinstance(name, str):
        raise InputError(f"the sampler must be a name such as euler or dpmpp_2m, got {name!r}")
    key = normalised(name)
    key = ALIASES.get(key, key)
    if key in SAMPLERS:
        return key, None
    for schedule in SCHEDULES:
        stem = key[:-len(schedule) - 1]
        if key.endswith("_" + schedule) and ALIASES.get(stem, stem) in SAMPLERS and schedule != "default":
            return ALIASES.get(stem, stem), schedule
    raise InputError(f"unknown sampler '{name}'; choose one of: {', '.join(nearest_first(key, SAMPLERS))}")


def schedule_name(name: str) -> str:
    """The canonical schedule for a name as a user writes it."""
    if not isinstance(name, str):
        raise InputError(f"the schedule must be a name such as karras, got {name!r}")
    key = normalised(name)
    if key in SCHEDULES:
        return key
    raise InputError(f"unknown schedule '{name}'; choose one of: {', '.join(nearest_first(key, SCHEDULES))} "
                     "(or give explicit timesteps)")
