"""Tiny random SDXL text encoders and the real CLIP tokenizers, in diffusers layout.

`make_text_model(root)` writes root/text_encoder (CLIPTextModel, quick_gelu) and
root/text_encoder_2 (CLIPTextModelWithProjection, exact gelu, a different width) as
fp16 safetensors like real SDXL files, plus root/tokenizer and root/tokenizer_2 with
the real 49,408-token CLIP vocabulary in the hub's file format (tokenizer_2 pads with
"!"), and returns fp32 transformers models loaded back from those files. The
vocabulary is built here independently of engine/sdxl/tokenizer.py, from the BPE
file slowframe bundles. Nothing is downloaded.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import torch
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection, CLIPTokenizer

from tiny_models import perturb_parameters

BPE_FILE = Path(__file__).resolve().parent.parent / "engine" / "data" / "bpe_simple_vocab_16e6.txt.gz"

# Like SDXL's configs (eos_token_id 2: the pooled EOS is found by argmax of the ids),
# at a tiny size; the widths fit tests/tiny_models.py's "tiny" UNet (96 = 32 + 64).
ENCODER_CONFIGS = {
    "text_encoder": dict(hidden_size=32, num_attention_heads=4, num_hidden_layers=3, intermediate_size=64,
                         hidden_act="quick_gelu", projection_dim=32),
    "text_encoder_2": dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=4, intermediate_size=160,
                           hidden_act="gelu", projection_dim=64),
}
SDXL_TOKEN_IDS = dict(vocab_size=49408, max_position_embeddings=77, bos_token_id=0, eos_token_id=2, pad_token_id=1)


def make_text_model(root: Path, seed: int = 0, eos_token_id: int = 2) -> tuple[CLIPTextModel,
                                                                              CLIPTextModelWithProjection]:
    """Write the encoders and tokenizers under `root` (once) and return the fp32 encoders."""
    root = Path(root)
    for name in ("tokenizer", "tokenizer_2"):
        if not (root / name / "vocab.json").exists():
            write_tokenizer(root / name, pad_token="!" if name == "tokenizer_2" else "<|endoftext|>")
    classes = {"text_encoder": CLIPTextModel, "text_encoder_2": CLIPTextModelWithProjection}
    models = []
    for i, (name, cls) in enumerate(classes.items()):
        folder = root / name
        if not (folder / "config.json").exists():
            torch.manual_seed(seed + i)
            config = CLIPTextConfig(**ENCODER_CONFIGS[name], **{**SDXL_TOKEN_IDS, "eos_token_id": eos_token_id})
            model = cls(config)
            perturb_parameters(model, seed + i + 100, embeddings=True)
            model.half().save_pretrained(folder, variant="fp16")
        models.append(cls.from_pretrained(folder, variant="fp16", dtype=torch.float16).float().eval())
    return models[0], models[1]


def clip_vocabulary() -> tuple[dict[str, int], list[str]]:
    """OpenAI CLIP's vocabulary (simple_tokenizer.py's recipe) and merge lines."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    codes = list(printable)
    for b in range(256):
        if b not in printable:
            printable.append(b)
            codes.append(256 + len(codes) - 188)   # 188 printable bytes map to themselves
    chars = [chr(c) for c in codes]
    merges = gzip.open(BPE_FILE).read().decode("utf-8").split("\n")[1:49152 - 256 - 2 + 1]
    tokens = chars + [c + "</w>" for c in chars] + ["".join(m.split()) for m in merges]
    tokens += ["<|startoftext|>", "<|endoftext|>"]
    return {t: i for i, t in enumerate(tokens)}, merges


def write_tokenizer(folder: Path, pad_token: str, legacy_format: bool = True) -> None:
    """A tokenizer folder as the hub has them: legacy_format as stabilityai's SDXL base
    (special tokens as AddedToken dicts, normalized), otherwise as newer transformers
    write them (added_tokens_decoder; EOS not normalized)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vocab, merges = clip_vocabulary()
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
    config: dict = {"add_prefix_space": False, "clean_up_tokenization_spaces": True, "do_lower_case": True,
                    "errors": "replace", "model_max_length": 77, "pad_token": pad_token,
                    "tokenizer_class": "CLIPTokenizer"}
    if legacy_format:
        def added(content: str) -> dict:
            return {"__type": "AddedToken", "content": content, "lstrip": False, "normalized": True,
                    "rstrip": False, "single_word": False}
        config.update(bos_token=added("<|startoftext|>"), eos_token=added("<|endoftext|>"),
                      unk_token=added("<|endoftext|>"))
        specials = {k: config[k] for k in ("bos_token", "eos_token", "unk_token")}
        specials["pad_token"] = pad_token if pad_token == "!" else added(pad_token)
    else:
        def entry(content: str, normalized: bool, special: bool) -> dict:
            return {"content": content, "lstrip": False, "normalized": normalized, "rstrip": False,
                    "single_word": False, "special": special}
        decoder = {"49406": entry("<|startoftext|>", True, False), "49407": entry("<|endoftext|>", False, False)}
        if pad_token == "!":
            decoder["0"] = entry("!", False, True)
        config.update(added_tokens_decoder=decoder, bos_token="<|startoftext|>", eos_token="<|endoftext|>",
                      unk_token="<|endoftext|>", additional_special_tokens=[])
        specials = {k: config[k] for k in ("bos_token", "eos_token", "unk_token", "pad_token")}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    (folder / "special_tokens_map.json").write_text(json.dumps(specials, indent=2))


def reference_tokenizers(root: Path) -> tuple[CLIPTokenizer, CLIPTokenizer]:
    return CLIPTokenizer.from_pretrained(root / "tokenizer"), CLIPTokenizer.from_pretrained(root / "tokenizer_2")
