"""SDXL LoRA styles: read kohya and diffusers/PEFT files, and change weights with them,
either once at import (`slowframe models import --lora`) or every time an op reads a
weight at run time (`attach_loras`), so a theme can use a style without a new model.

Each LoRA module changes one weight: W' = W + weight * scale * up @ down, where up is
(out, rank[, 1, 1]), down (rank, in[, kh, kw]) and scale = alpha / rank, as diffusers'
load_lora_weights + fuse_lora compute it:

- kohya (sd-scripts, most files on model sites): `lora_unet_<module>`, `lora_te1_<module>`,
  `lora_te2_<module>` with `.lora_down.weight`, `.lora_up.weight` and `.alpha` (scale 1
  without alpha). UNet modules are spelled with the original (SGM) block names,
  input_blocks_4_1_transformer_blocks_0_attn1_to_q, or with diffusers' names; the dots
  of the module path are underscores.
- diffusers/PEFT: `unet.<module>.lora_A.weight` / `lora_B.weight`, `text_encoder.<module>`
  and `text_encoder_2.<module>`; lora_alpha (and alpha_pattern, use_rslora) come from the
  file's `lora_adapter_metadata` when it has one, otherwise alpha = rank (scale 1).
  The older diffusers names `...attn1.processor.to_q_lora.down.weight`, `<module>.lora.down.weight`
  and `<module>.lora_linear_layer.down.weight` are read too.

LoHa, LoKr, DoRA and other LyCORIS variants are refused with a message naming them.

    loras = open_loras([("styles/ink.safetensors", 0.8)])
    attach_loras(unet, "unet", loras)     # unet's weights are patched as they stream
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.convert import sgm_keys
from engine.convert.headers import check_unique_names, metadata
from engine.errors import ModelFileError
from engine.safetensors import refuse_pickle
from engine.sdxl.unet_config import UNetConfig
from engine.weights import TensorStore

COMPONENTS = ("unet", "text_encoder", "text_encoder_2")
KOHYA_PREFIXES = {"lora_unet_": "unet", "lora_te1_": "text_encoder", "lora_te2_": "text_encoder_2"}
TEXT_PREFIX = "text_model."
METADATA_KEY = "lora_adapter_metadata"

# Pieces of key names that mark LoRA variants slowframe does not apply.
UNSUPPORTED = {
    "hada_w1": "LoHa (LyCORIS)", "lokr_w1": "LoKr (LyCORIS)", "lora_mid": "LoCon with a Tucker core (LyCORIS)",
    "dora_scale": "DoRA", "lora_magnitude_vector": "DoRA", "oft_": "OFT", "lora_embedding_": "embedding LoRA",
    ".diff": "a full weight difference (LyCORIS)", "glora": "GLoRA",
}
# Older diffusers spellings of (down, up) and the module they belong to.
OLD_SUFFIXES = ((".lora.down.weight", ".lora.up.weight"), (".lora_linear_layer.down.weight",
                                                           ".lora_linear_layer.up.weight"))
OLD_PROCESSOR = {"unet": {"to_q": "to_q", "to_k": "to_k", "to_v": "to_v", "to_out": "to_out.0"},
                 "text": {"to_q": "q_proj", "to_k": "k_proj", "to_v": "v_proj", "to_out": "out_proj"}}


@dataclass(frozen=True)
class LoraModule:
    """One low-rank update in a LoRA file."""

    component: str     # unet, text_encoder or text_encoder_2
    module: str        # the module it changes: kohya's flat name, or a dotted diffusers path
    up: str            # tensor names in the file
    down: str
    scale: float       # alpha / rank (the user's weight comes on top)
    kohya: bool


@dataclass
class LoraFile:
    path: Path
    weight: float
    format: str        # "kohya", "peft" or "diffusers"
    store: TensorStore
    modules: list[LoraModule]

    def close(self) -> None:
        self.store.close()

    def describe(self) -> dict:
        return {"path": str(self.path), "weight": self.weight, "format": self.format, "modules": len(self.modules)}


@dataclass(frozen=True)
class _Term:
    store: TensorStore
    up: str
    down: str
    scale: float


class LoraPatch:
    """Adds the bound LoRA updates to weights as they are read: patch(name, rows, r0)
    changes rows r0:r0+len(rows) of weight `name` (fp32) in place; other names pass."""

    def __init__(self, terms: dict[str, list[_Term]]):
        self.terms = terms

    def __contains__(self, name: str) -> bool:
        return name in self.terms

    def __call__(self, name: str, rows: np.ndarray, r0: int) -> None:
        for t in self.terms.get(name, ()):
            n = rows.shape[0]
            up = t.store.read_rows(t.up, r0, r0 + n).reshape(n, -1)
            down = t.store.read(t.down)
            up *= np.float32(t.scale)
            rows += (up @ down.reshape(up.shape[1], -1)).reshape(rows.shape)


# -- reading LoRA files ----------------------------------------------------------------

def parse_lora_spec(text: str) -> tuple[Path, float]:
    """'FILE[:WEIGHT]' -> (FILE, WEIGHT); the weight defaults to 1."""
    path, sep, weight = text.rpartition(":")
    if sep and path:
        try:
            return Path(path), float(weight)
        except ValueError:
            pass
    return Path(text), 1.0


def open_loras(specs: list[tuple[str | Path, float]]) -> list[LoraFile]:
    files: list[LoraFile] = []
    try:
        for path, weight in specs:
            files.append(open_lora(Path(path), float(weight)))
    except BaseException:
        for f in files:
            f.close()
        raise
    return files


def open_lora(path: Path, weight: float = 1.0) -> LoraFile:
    """Read a LoRA file's header and sort its tensors into modules (nothing else is read,
    except kohya's scalar alphas)."""
    refuse_pickle(path)
    if not path.is_file():
        raise ModelFileError(f"{path}: no such LoRA file")
    if not math.isfinite(weight):
        raise ModelFileError(f"{path}: LoRA weight {weight} is not a number")
    check_unique_names(path)
    store = TensorStore([path])
    try:
        names = list(store.tensors)
        for piece, kind in UNSUPPORTED.items():
            hit = next((n for n in names if (n.endswith(piece) if piece.startswith(".") else piece in n)), None)
            if hit:
                raise ModelFileError(f"{path}: this is a {kind} file ('{hit}'); slowframe applies plain LoRAs "
                                     "(kohya or diffusers/PEFT). Look for a LoRA version of this style")
        if any(n.startswith("lora_te_") for n in names):
            raise ModelFileError(f"{path}: a LoRA for Stable Diffusion 1.x/2.x (one text encoder, lora_te_*); it "
                                 "does not fit SDXL")
        if any(n.startswith(tuple(KOHYA_PREFIXES)) for n in names):
            fmt, modules = "kohya", _kohya_modules(store, path)
        elif any(".lora_A." in n for n in names):
            fmt, modules = "peft", _peft_modules(store, path)
        elif any(n.endswith(tuple(d for d, _ in OLD_SUFFIXES)) or "_lora.down." in n for n in names):
            fmt, modules = "diffusers", _old_diffusers_modules(store, path)
        else:
            sample = ", ".join(names[:3]) or "no tensors"
            raise ModelFileError(f"{path}: not a LoRA file slowframe knows (kohya lora_unet_*/lora_te1_*/lora_te2_* "
                                 f"or diffusers unet.*.lora_A/lora_B); found {sample}")
        if not modules:
            raise ModelFileError(f"{path}: the LoRA file has no modules")
        return LoraFile(path, weight, fmt, store, modules)
    except BaseException:
        store.close()
        raise


def _pair(store: TensorStore, path: Path, down: str, up: str) -> int:
    """Rank of a (down, up) pair, after checking both exist and agree."""
    if up not in store.tensors:
        raise ModelFileError(f"{path}: '{down}' has no matching '{up}'; the LoRA file is incomplete")
    d, u = store.shape(down), store.shape(up)
    if len(d) < 2 or len(u) < 2 or u[1] != d[0] or int(np.prod(u[2:])) != 1:
        raise ModelFileError(f"{path}: '{down}' {list(d)} and '{up}' {list(u)} are not a LoRA pair "
                             "(up must be (out, rank), down (rank, in))")
    return d[0]


def _scalar(store: TensorStore, name: str, path: Path) -> float:
    value = store.read(name).reshape(-1)
    if value.size != 1 or not np.isfinite(value[0]):
        raise ModelFileError(f"{path}: '{name}' must be one finite number")
    return float(value[0])


def _kohya_modules(store: TensorStore, path: Path) -> list[LoraModule]:
    modules, used = [], set()
    for key in store.tensors:
        if not key.endswith(".lora_down.weight"):
            continue
        base = key[: -len(".lora_down.weight")]
        prefix = next((p for p in KOHYA_PREFIXES if base.startswith(p)), None)
        if prefix is None:
            raise ModelFileError(f"{path}: '{key}' is not a kohya SDXL module (lora_unet_, lora_te1_ or lora_te2_)")
        up = base + ".lora_up.weight"
        rank = _pair(store, path, key, up)
        alpha = _scalar(store, base + ".alpha", path) if base + ".alpha" in store.tensors else float(rank)
        modules.append(LoraModule(KOHYA_PREFIXES[prefix], base[len(prefix):], up, key, alpha / rank, kohya=True))
        used |= {key, up, base + ".alpha"}
    _no_leftovers(store, used, path)
    return modules


def _peft_modules(store: TensorStore, path: Path) -> list[LoraModule]:
    config = _peft_metadata(path)
    modules, used = [], set()
    for key in store.tensors:
        if not key.endswith(".lora_A.weight"):
            continue
        component, module = _component_of(key[: -len(".lora_A.weight")], path)
        up = key.replace(".lora_A.weight", ".lora_B.weight")
        rank = _pair(store, path, key, up)
        alpha_key = key.replace(".lora_A.weight", ".alpha")
        if alpha_key in store.tensors:
            scale = _scalar(store, alpha_key, path) / rank
            used.add(alpha_key)
        else:
            scale = _peft_scale(config.get(component, {}), module, rank)
        modules.append(LoraModule(component, module, up, key, scale, kohya=False))
        used |= {key, up}
    _no_leftovers(store, used, path)
    return modules


def _peft_metadata(path: Path) -> dict[str, dict]:
    """PEFT LoraConfig fields per component from diffusers' lora_adapter_metadata."""
    raw = metadata(path).get(METADATA_KEY)
    if raw is None:
        return {}
    try:
        flat = json.loads(raw)
    except ValueError:
        raise ModelFileError(f"{path}: unreadable {METADATA_KEY} in the file's metadata") from None
    per: dict[str, dict] = {}
    for key, value in flat.items() if isinstance(flat, dict) else ():
        component, _, field = key.partition(".")
        per.setdefault(component, {})[field] = value
    return per


def _peft_scale(config: dict, module: str, rank: int) -> float:
    """PEFT's scaling for one module: lora_alpha / r (or / sqrt(r) with rslora), with
    alpha_pattern entries matching the module path's end. Without metadata alpha = rank."""
    alpha = config.get("lora_alpha", rank)
    for pattern, value in (config.get("alpha_pattern") or {}).items():
        if module == pattern or module.endswith("." + pattern):
            alpha = value
    return float(alpha) / (math.sqrt(rank) if config.get("use_rslora") else rank)


def _old_diffusers_modules(store: TensorStore, path: Path) -> list[LoraModule]:
    modules, used = [], set()
    for key in store.tensors:
        down_suffix = next((d for d, _ in OLD_SUFFIXES if key.endswith(d)), None)
        if down_suffix:
            base = key[: -len(down_suffix)]
            up = base + dict(OLD_SUFFIXES)[down_suffix]
        elif key.endswith("_lora.down.weight"):
            base = key[: -len(".down.weight")]
            up = base + ".up.weight"
        else:
            continue
        component, module = _component_of(base, path)
        if module.endswith("_lora"):   # attn.processor.to_q_lora -> attn.to_q (q_proj in text encoders)
            parent, _, proc = module[: -len("_lora")].rpartition(".")
            names = OLD_PROCESSOR["unet" if component == "unet" else "text"]
            if proc not in names:
                raise ModelFileError(f"{path}: unknown attention LoRA '{key}'")
            module = f"{parent.removesuffix('.processor')}.{names[proc]}"
        rank = _pair(store, path, key, up)
        alpha_key = base + ".alpha"
        scale = _scalar(store, alpha_key, path) / rank if alpha_key in store.tensors else 1.0
        modules.append(LoraModule(component, module, up, key, scale, kohya=False))
        used |= {key, up, alpha_key}
    _no_leftovers(store, used, path)
    return modules


def _component_of(name: str, path: Path) -> tuple[str, str]:
    component, _, module = name.partition(".")
    if component not in COMPONENTS:
        raise ModelFileError(f"{path}: '{name}' does not start with unet., text_encoder. or text_encoder_2.; "
                             "not an SDXL LoRA in diffusers format")
    return component, module


def _no_leftovers(store: TensorStore, used: set[str], path: Path) -> None:
    left = [n for n in store.tensors if n not in used]
    if left:
        raise ModelFileError(f"{path}: tensor '{left[0]}' is not part of any LoRA module (an unsupported LoRA "
                             "variant?)")


# -- binding to a model's weights ------------------------------------------------------

def bind(loras: list[LoraFile], component: str, shapes: dict[str, tuple[int, ...]],
         unet: UNetConfig | None = None) -> LoraPatch | None:
    """The patch `loras` make to one component whose weights are `shapes` (diffusers
    names, as the component's file has them); None when they do not touch it. Every
    module of the component must match a weight of the right shape."""
    flat, dotted = _module_index(component, shapes, unet)
    terms: dict[str, list[_Term]] = {}
    for lora in loras:
        for m in lora.modules:
            if m.component != component:
                continue
            target = flat.get(m.module) if m.kohya else dotted.get(_canonical(component, m.module))
            if target is None:
                raise ModelFileError(f"{lora.path}: LoRA module '{m.down.rsplit('.', 2)[0]}' matches no weight of "
                                     f"this SDXL model's {component}; the LoRA is for a different model "
                                     "(SD 1.x/2.x, or another architecture)")
            _check_fits(lora, m, target, shapes[target])
            terms.setdefault(target, []).append(_Term(lora.store, m.up, m.down, lora.weight * m.scale))
    return LoraPatch(terms) if terms else None


def attach_loras(model, component: str, loras: list[LoraFile]) -> None:
    """Apply `loras` to a loaded model (UNet, or a text encoder as "text_encoder" /
    "text_encoder_2") while its weights stream: each weight an op reads is W + s*up@down.
    Call before the model's first evaluation."""
    shapes = {name: info.shape for name, info in model.store.tensors.items()}
    model.store.patch = bind(loras, component, shapes, model.config if component == "unet" else None)


def _canonical(component: str, module: str) -> str:
    if component == "unet" or module.startswith(TEXT_PREFIX) or module == "text_projection":
        return module
    return TEXT_PREFIX + module


def _module_index(component: str, shapes: dict[str, tuple[int, ...]],
                  unet: UNetConfig | None) -> tuple[dict[str, str], dict[str, str]]:
    """kohya's flat names and dotted module paths -> weight names, for every matrix or kernel."""
    flat: dict[str, str] = {}
    dotted: dict[str, str] = {}
    for name, shape in shapes.items():
        if not name.endswith(".weight") or len(shape) < 2:
            continue
        module = _canonical(component, name[: -len(".weight")])
        dotted[module] = name
        flat[module.replace(".", "_")] = name
        if component == "unet" and unet is not None:
            try:
                flat[sgm_keys.unet_module(module, unet).replace(".", "_")] = name
            except KeyError:
                pass
    return flat, dotted


def _check_fits(lora: LoraFile, m: LoraModule, target: str, shape: tuple[int, ...]) -> None:
    up, down = lora.store.shape(m.up), lora.store.shape(m.down)
    if up[0] != shape[0] or int(np.prod(down[1:])) != int(np.prod(shape[1:])):
        raise ModelFileError(f"{lora.path}: LoRA module '{m.down}' changes a {list(up[:1]) + list(down[1:])} weight "
                             f"but this model's '{target}' is {list(shape)}; the LoRA is for a different model")
