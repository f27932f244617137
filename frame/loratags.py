"""LoRA tags in prompts, as AUTOMATIC1111 writes them: ``<lora:NAME:WEIGHT>`` found, checked and taken out.

People paste prompts from model sites with tags such as ``<lora:woodcut:0.8>``: apply the
LoRA file NAME (its file name without ``.safetensors``, anywhere in the LoRA folder) with
that weight (1 when left out). ``<lyco:...>`` is the same (A1111's older name for it).
The text encoders never see a tag: ``take_tags`` returns the prompt without them (as
A1111 leaves it) and the LoRAs to apply. Other ``<kind:...>`` networks (hypernetworks)
are refused with a message, as is a tag with two weights (A1111's text encoder / UNet split:
slowframe applies one weight to both).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path

TAG = re.compile(r"<(\w+):([^<>]*)>")
LORA_KINDS = ("lora", "lyco")
MAX_WEIGHT = 4.0   # as the config's lora_weight


@dataclass(frozen=True)
class TagProblem:
    """Why a tag cannot be used; ``offset`` is where it starts in the text."""

    message: str
    offset: int


@dataclass(frozen=True)
class LoraTag:
    """``<lora:name:weight>`` at ``offset`` in its text."""

    name: str
    weight: float
    offset: int


def find_tags(text: str) -> tuple[list[LoraTag], list[TagProblem]]:
    """The LoRA tags in ``text`` and the problems with the tags that cannot be used."""
    tags, problems = [], []
    for match in TAG.finditer(text):
        kind, args = match[1], match[2].split(":")
        if kind.lower() not in LORA_KINDS:
            problems.append(TagProblem(f"{match[0]!r}: slowframe applies LoRAs only (<lora:NAME:WEIGHT>), not "
                                     f"{kind} networks; remove the tag", match.start()))
            continue
        name = args[0].strip()
        if not name:
            problems.append(TagProblem(f"{match[0]!r}: no LoRA name; write <lora:NAME:WEIGHT>, e.g. "
                                     "<lora:woodcut:0.8>", match.start()))
            continue
        if len(args) > 2:
            problems.append(TagProblem(f"{match[0]!r}: one weight only (slowframe applies it to the text encoders "
                                     f"and the UNet alike), e.g. <lora:{name}:{args[1].strip()}>", match.start()))
            continue
        raw = args[1].strip() if len(args) == 2 else "1"
        try:
            weight = float(raw)
        except ValueError:
            weight = float("nan")
        if not -MAX_WEIGHT <= weight <= MAX_WEIGHT:
            problems.append(TagProblem(f"{match[0]!r}: the weight {raw!r} is not a number from {-MAX_WEIGHT:g} to "
                                     f"{MAX_WEIGHT:g}", match.start()))
            continue
        tags.append(LoraTag(name, weight, match.start()))
    return tags, problems


def without_tags(text: str) -> str:
    """``text`` with every ``<kind:...>`` tag removed, exactly as A1111 removes them (the commas around a tag
    stay: they are tokens of the prompt there too), runs of spaces made one."""
    return " ".join(TAG.sub("", text).split())


def lora_files(folder: Path) -> dict[str, Path]:
    """The LoRA files in ``folder`` and its subfolders by name (file name without .safetensors); empty when the
    folder is not there."""
    try:
        found = sorted(folder.rglob("*.safetensors"))
    except OSError:
        return {}
    files: dict[str, Path] = {}
    for path in found:
        files.setdefault(path.stem, path)
    return files


def unknown_name(name: str, folder: Path, files: dict[str, Path]) -> str:
    """The message for a tag naming no file of ``files`` (the contents of ``folder``)."""
    if not files:
        return (f"no LoRA named {name!r}: {folder} has no .safetensors files (copy {name}.safetensors there, or "
                "set model.lora_folder)")
    close = difflib.get_close_matches(name, files, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"no LoRA named {name!r} in {folder}; {hint}the folder has: {', '.join(sorted(files)[:12])}"


def take_tags(text: str, folder: Path) -> tuple[str, list[tuple[Path, float]]]:
    """``text`` without its tags (as it is when it has none), and the (file, weight) of each LoRA tag;
    ValueError (the first problem's message) for a tag that cannot be used or names no file in ``folder``."""
    tags, problems = find_tags(text)
    if problems:
        raise ValueError(problems[0].message)
    files = lora_files(folder) if tags else {}
    loras = []
    for tag in tags:
        if tag.name not in files:
            raise ValueError(unknown_name(tag.name, folder, files))
        loras.append((files[tag.name], tag.weight))
    return (without_tags(text) if tags else text), loras
