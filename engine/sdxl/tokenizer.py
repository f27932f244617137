"""The CLIP tokenizer of both SDXL text encoders, on the `tokenizers` library.

`ClipTokenizer.from_folder(model / "tokenizer_2")` reads a diffusers tokenizer folder
(tokenizer.json as current transformers saves it, or vocab.json and merges.txt as SDXL
base has them; the special tokens of tokenizer_config.json / special_tokens_map.json)
and gives ids identical to transformers' CLIPTokenizer: the
same normalizer (NFC, collapsed whitespace, lowercase), pre-tokenizer (CLIP's regex,
then byte-level), BPE with the "</w>" word suffix, and the same added tokens with the
same `normalized` flags. That includes SDXL's tokenizer_2, whose pad token "!" is a
special token, so every literal "!" in a prompt becomes id 0 there (diffusers issue
#4153); SDXL was trained that way, so it is kept.

`ClipTokenizer.standard(pad_token)` builds the same tokenizer from the BPE file that
ships with slowframe (engine/data), for models that come without tokenizer folders.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import BPE

from engine.errors import ModelFileError

BOS_TOKEN = "<|startoftext|>"
EOS_TOKEN = "<|endoftext|>"
WORD_SUFFIX = "</w>"
SPLIT_PATTERN = r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""
STANDARD_BPE = Path(__file__).resolve().parent.parent / "data" / "bpe_simple_vocab_16e6.txt.gz"
STANDARD_MERGES = 49152 - 256 - 2   # merge lines CLIP uses from the BPE file: 48,894
STANDARD_MAX_LENGTH = 77
SAVED_TOKENIZER = "tokenizer.json"


class ClipTokenizer:
    """Text -> CLIP token ids. `max_length` counts BOS and EOS (77 for SDXL)."""

    def __init__(self, tokenizer: Tokenizer, pad_token: str, max_length: int = STANDARD_MAX_LENGTH,
                 where: str = "tokenizer"):
        self.backend = tokenizer
        self.max_length = max_length
        self.bos_id = _token_id(tokenizer, BOS_TOKEN, where)
        self.eos_id = _token_id(tokenizer, EOS_TOKEN, where)
        self.pad_id = _token_id(tokenizer, pad_token, where)

    @property
    def content_length(self) -> int:
        """Tokens of text that fit between BOS and EOS (75)."""
        return self.max_length - 2

    @classmethod
    def from_folder(cls, folder: str | Path, bpe: BPE | None = None) -> "ClipTokenizer":
        """A diffusers tokenizer folder: tokenizer.json, or vocab.json and merges.txt, and
        optional configs. As in transformers, tokenizer.json gives only the vocabulary, merges
        and added tokens; the rest is CLIP's. `bpe`: the model another tokenizer read from
        identical vocab.json and merges.txt, to share (unused with tokenizer.json)."""
        folder = Path(folder)
        config = _read_json(folder / "tokenizer_config.json")
        specials = {**_read_json(folder / "special_tokens_map.json"), **config}
        options = _bpe_options(specials)
        if (folder / SAVED_TOKENIZER).is_file():
            bpe, added = _read_saved_tokenizer(folder / SAVED_TOKENIZER, options)
            # an entry of tokenizer_config.json wins over the file's for the same id
            specials["added_tokens_decoder"] = {**added, **(specials.get("added_tokens_decoder") or {})}
        else:
            bpe = _read_vocabulary(folder, options, bpe)
        pad = _content(specials.get("pad_token")) or EOS_TOKEN
        max_length = config.get("model_max_length", STANDARD_MAX_LENGTH)
        if not isinstance(max_length, int) or not 2 < max_length <= 1024:
            raise ModelFileError(f"{folder / 'tokenizer_config.json'}: model_max_length {max_length!r} is not a "
                                 f"CLIP text length (SDXL uses {STANDARD_MAX_LENGTH})")
        return cls(_pipeline(bpe, _added_tokens(specials)), pad, max_length, str(folder))

    @classmethod
    def standard(cls, pad_token: str = EOS_TOKEN, bpe: BPE | None = None) -> "ClipTokenizer":
        """The standard CLIP vocabulary from the BPE file bundled with slowframe, set up as
        SDXL's tokenizer (pad_token EOS) or tokenizer_2 (pad_token "!"). `bpe`: the model
        of another standard tokenizer, to share."""
        if bpe is None:
            vocab, merges = standard_vocabulary()
            bpe = BPE(vocab=vocab, merges=merges, **_bpe_options({}))
        specials: dict = {"bos_token": {"content": BOS_TOKEN, "normalized": True},
                          "eos_token": {"content": EOS_TOKEN, "normalized": True},
                          "unk_token": {"content": EOS_TOKEN, "normalized": True},
                          "pad_token": pad_token}
        return cls(_pipeline(bpe, _added_tokens(specials)), pad_token, STANDARD_MAX_LENGTH, str(STANDARD_BPE))

    def tokenize(self, text: str) -> list[int]:
        """The ids of `text` alone: no BOS/EOS, no padding, no truncation."""
        return self.backend.encode(text, add_special_tokens=False).ids

    def wrap(self, ids: list[int]) -> list[int]:
        """BOS + ids + EOS, padded to max_length; ids must fit (content_length at most)."""
        if len(ids) > self.content_length:
            raise ValueError(f"{len(ids)} tokens do not fit in one {self.max_length}-token sequence")
        return [self.bos_id, *ids, self.eos_id] + [self.pad_id] * (self.content_length - len(ids))

    def __call__(self, text: str) -> np.ndarray:
        """(max_length,) int64 ids exactly as transformers' tokenizer(text, padding="max_length",
        truncation=True) gives them."""
        return np.array(self.wrap(self.tokenize(text)[:self.content_length]), dtype=np.int64)

    def decode(self, ids: list[int]) -> str:
        """Text of `ids` (for messages): words separated by spaces, BOS and EOS dropped."""
        text = [i for i in ids if i not in (self.bos_id, self.eos_id)]
        return self.backend.decode(text, skip_special_tokens=False).replace(WORD_SUFFIX, " ").strip()


def sdxl_tokenizers(root: Path | None) -> tuple[ClipTokenizer, ClipTokenizer]:
    """SDXL's tokenizer and tokenizer_2 from root/tokenizer and root/tokenizer_2, or from
    the bundled vocabulary when root is None. They share one BPE model (~10 MB) when
    their vocab.json and merges.txt are the same files byte for byte, as in SDXL."""
    if root is None:
        first = ClipTokenizer.standard(EOS_TOKEN)
        return first, ClipTokenizer.standard("!", bpe=first.backend.model)
    a, b = Path(root) / "tokenizer", Path(root) / "tokenizer_2"
    first = ClipTokenizer.from_folder(a)
    same = all((b / f).is_file() and (a / f).read_bytes() == (b / f).read_bytes() for f in ("vocab.json", "merges.txt"))
    return first, ClipTokenizer.from_folder(b, bpe=first.backend.model if same else None)


def _read_vocabulary(folder: Path, options: dict, shared: BPE | None) -> BPE:
    """The BPE model of vocab.json and merges.txt (`shared` when it was read from the same files)."""
    vocab, merges = folder / "vocab.json", folder / "merges.txt"
    missing = [p.name for p in (vocab, merges) if not p.is_file()]
    if missing:
        raise ModelFileError(
            f"{folder}: tokenizer file(s) missing: {', '.join(missing)}. An SDXL model folder needs tokenizer/ "
            f"and tokenizer_2/ with {SAVED_TOKENIZER}, or vocab.json and merges.txt; copy them from the model's "
            "download, or load with standard_vocabulary=True to use the CLIP vocabulary built into slowframe")
    if shared is not None and shared.unk_token == options["unk_token"]:
        return shared
    try:
        return BPE.from_file(str(vocab), str(merges), **options)
    except Exception as e:  # the Rust side raises plain Exceptions for unreadable files
        raise ModelFileError(f"{folder}: cannot read vocab.json / merges.txt ({e}); copy them again") from None


def _read_saved_tokenizer(path: Path, options: dict) -> tuple[BPE, dict[str, dict]]:
    """The BPE model of a tokenizer.json with CLIP's options, and its added tokens as
    tokenizer_config.json's added_tokens_decoder has them."""
    try:
        saved = Tokenizer.from_file(str(path))
    except Exception as e:  # the Rust side raises plain Exceptions for unreadable files
        raise ModelFileError(f"{path}: cannot read it ({e}); copy it again") from None
    bpe = saved.model
    if not isinstance(bpe, BPE):
        raise ModelFileError(f"{path}: a {type(bpe).__name__} tokenizer; SDXL's text encoders need CLIP's BPE "
                             "tokenizer: copy tokenizer/ and tokenizer_2/ from the model's download")
    for name, value in options.items():
        setattr(bpe, name, value)
    added = {str(i): {"content": t.content, "single_word": t.single_word, "lstrip": t.lstrip, "rstrip": t.rstrip,
                      "normalized": t.normalized, "special": t.special}
             for i, t in saved.get_added_tokens_decoder().items()}
    return bpe, added


def standard_vocabulary() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """CLIP's vocabulary and merges, built from the bundled BPE file as OpenAI's CLIP does:
    the 256 byte symbols, the same with "</w>", one token per merge, then BOS and EOS."""
    try:
        lines = gzip.decompress(STANDARD_BPE.read_bytes()).decode("utf-8").split("\n", STANDARD_MERGES + 1)
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise ModelFileError(f"{STANDARD_BPE}: the bundled CLIP vocabulary is unreadable ({e}); "
                             "reinstall slowframe") from None
    merges = [tuple(line.split()) for line in lines[1:STANDARD_MERGES + 1]]
    if len(merges) != STANDARD_MERGES or any(len(m) != 2 for m in merges):
        raise ModelFileError(f"{STANDARD_BPE}: expected {STANDARD_MERGES} merge lines; the file is damaged, "
                             "reinstall slowframe")
    symbols = list(_bytes_to_unicode().values())
    tokens = symbols + [s + WORD_SUFFIX for s in symbols] + ["".join(m) for m in merges] + [BOS_TOKEN, EOS_TOKEN]
    return {t: i for i, t in enumerate(tokens)}, merges


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2/CLIP's reversible map from bytes to printable characters (byte-level BPE)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars)}


def _bpe_options(specials: dict) -> dict:
    return dict(dropout=None, continuing_subword_prefix="", end_of_word_suffix=WORD_SUFFIX, fuse_unk=False,
                unk_token=_content(specials.get("unk_token")) or EOS_TOKEN)


def _pipeline(bpe: BPE, added: list[AddedToken]) -> Tokenizer:
    """transformers' CLIPTokenizer pipeline around a BPE model."""
    tok = Tokenizer(bpe)
    tok.normalizer = normalizers.Sequence(
        [normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="removed", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(added)
    return tok


def _added_tokens(config: dict) -> list[AddedToken]:
    """The special tokens transformers registers for this config, with its `normalized`
    flags: entries of added_tokens_decoder first, then the bos/eos/unk/pad tokens (a
    token given as a plain string is matched before normalisation)."""
    tokens: dict[str, AddedToken] = {}
    decoder = config.get("added_tokens_decoder")
    if isinstance(decoder, dict):
        for entry in decoder.values():
            if isinstance(entry, dict) and isinstance(entry.get("content"), str):
                tokens.setdefault(entry["content"], AddedToken(
                    entry["content"], single_word=bool(entry.get("single_word", False)),
                    lstrip=bool(entry.get("lstrip", False)), rstrip=bool(entry.get("rstrip", False)),
                    normalized=bool(entry.get("normalized", False)), special=True))
    for key in ("bos_token", "eos_token", "unk_token", "pad_token"):
        value = config.get(key)
        if isinstance(value, dict) and isinstance(value.get("content"), str):
            tokens.setdefault(value["content"], AddedToken(value["content"], normalized=bool(value.get(
                "normalized", True)), special=True))
    for key in ("bos_token", "eos_token", "unk_token", "pad_token"):
        value = config.get(key, EOS_TOKEN if key != "bos_token" else BOS_TOKEN)
        if isinstance(value, str):
            tokens.setdefault(value, AddedToken(value, normalized=False, special=True))
    return list(tokens.values())


def _content(value: object) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _token_id(tokenizer: Tokenizer, token: str, where: str) -> int:
    i = tokenizer.token_to_id(token)
    if i is None:
        raise ModelFileError(f"{where}: the vocabulary has no token {token!r}; this is not a CLIP tokenizer")
    return i


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ModelFileError(f"{path}: not valid JSON ({e}); copy the file again") from None
    if not isinstance(data, dict):
        raise ModelFileError(f"{path}: expected a JSON object")
    return data
