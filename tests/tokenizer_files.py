"""CLIP tokenizer folders as the hub has them, with the real 49,408-token vocabulary, and transformers' reading.

The vocabulary is built here independently of engine/sdxl/tokenizer.py, from the BPE
file slowframe bundles, so tests can hold the engine's tokenizer against it. Nothing
is downloaded.
"""

from __future__ import annotations

import gzip
import json
import tempfile
from pathlib import Path

from transformers import CLIPTokenizer

BPE_FILE = Path(__file__).resolve().parent.parent / "engine" / "data" / "bpe_simple_vocab_16e6.txt.gz"

# SDXL's tokenizer pads with EOS, tokenizer_2 with "!".
PAD_TOKENS = {"tokenizer": "<|endoftext|>", "tokenizer_2": "!"}


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


def write_saved_tokenizer(folder: Path, pad_token: str) -> None:
    """A tokenizer folder as the installed transformers saves one: tokenizer.json and
    tokenizer_config.json, no vocab.json or merges.txt (checked, so the tests that rely on
    it notice when transformers changes its mind)."""
    with tempfile.TemporaryDirectory() as legacy:
        write_tokenizer(Path(legacy), pad_token)
        CLIPTokenizer.from_pretrained(legacy).save_pretrained(folder)
    saved = {p.name for p in Path(folder).iterdir()}
    assert "tokenizer.json" in saved and not saved & {"vocab.json", "merges.txt"}, saved


def write_tokenizers(root: Path) -> None:
    """root/tokenizer and root/tokenizer_2 as SDXL base has them, unless already there."""
    for name, pad_token in PAD_TOKENS.items():
        if not (Path(root) / name / "vocab.json").exists():
            write_tokenizer(Path(root) / name, pad_token)


def reference_tokenizers(root: Path) -> tuple[CLIPTokenizer, CLIPTokenizer]:
    """transformers' tokenizers on root/tokenizer and root/tokenizer_2."""
    return CLIPTokenizer.from_pretrained(root / "tokenizer"), CLIPTokenizer.from_pretrained(root / "tokenizer_2")
