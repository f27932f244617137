"""Prompt text -> weighted token chunks: cleaning, emphasis syntax, long prompts.

Emphasis (the syntax of AUTOMATIC1111's web UI, used across SD tools):
`(text)` weighs text x1.1, `((text))` x1.21, `(text:1.3)` x1.3, `[text]` /1.1; brackets
nest and multiply; `\\(`, `\\)`, `\\[`, `\\]` and `\\\\` are literal characters. A bracket
without its partner is kept as literal text, with a warning.

Long prompts (NovelAI's method): the tokens are cut into chunks of 75, each wrapped
BOS ... EOS and padded to 77, encoded separately and concatenated along the sequence
(77*k tokens); at most MAX_CHUNKS chunks (225 tokens), what does not fit is dropped
and the dropped words are logged.
"""

from __future__ import annotations

import logging
import math
import re
import unicodedata
from dataclasses import dataclass

import numpy as np

from engine.errors import InputError
from engine.sdxl.tokenizer import ClipTokenizer

log = logging.getLogger(__name__)

MAX_CHUNKS = 3
ROUND_WEIGHT = 1.1
# An escape, an opening bracket, a closing round bracket with its weight, a closing
# bracket, a run of plain text, or a colon that is not part of a weight.
_EMPHASIS_TOKENS = re.compile(
    r"\\[()\[\]\\]|\(|\[|:\s*([+-]?(?:\d+\.?\d*|\.\d+))\s*\)|\)|\]|[^\\()\[\]:]+|:|\\")


@dataclass(frozen=True)
class Segment:
    text: str
    weight: float


@dataclass(frozen=True)
class WeightedTokens:
    """A prompt's tokens (no BOS/EOS) through one tokenizer, and each token's weight."""

    ids: list[int]
    weights: list[float]


def clean_prompt(prompt: object, what: str = "prompt") -> str:
    """The prompt as text a tokenizer can take: bytes are decoded as UTF-8 (invalid
    sequences become U+FFFD), lone surrogates likewise, and control characters become
    spaces; each repair is logged. Anything other than str or bytes is an InputError."""
    if isinstance(prompt, (bytes, bytearray)):
        raw = bytes(prompt)
    elif isinstance(prompt, str):
        try:
            prompt.encode("utf-8")
            raw = None
        except UnicodeEncodeError:
            try:
                raw = prompt.encode("utf-8", "surrogateescape")
            except UnicodeEncodeError:
                raw = prompt.encode("utf-8", "replace")
    else:
        raise InputError(f"{what} must be text, got {type(prompt).__name__} {prompt!r}")
    if raw is not None:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            log.warning("%s: invalid UTF-8 at byte %d (%r); the broken bytes are read as U+FFFD", what, e.start,
                        raw[e.start:e.end])
            text = raw.decode("utf-8", "replace")
    else:
        text = prompt
    controls = sorted({c for c in text if unicodedata.category(c) == "Cc" and not c.isspace()})
    if controls:
        log.warning("%s: control character(s) %s read as spaces", what, ", ".join(f"U+{ord(c):04X}" for c in controls))
        text = "".join(" " if c in controls else c for c in text)
    return text


def parse_emphasis(text: str, what: str = "prompt") -> list[Segment]:
    """Split text into runs of equal weight, e.g. "a (b:1.3) c" -> a 1.0, b 1.3, c 1.0."""
    items = list(_emphasis_items(text))
    partner: dict[int, int] = {}          # opening item -> closing item, and back
    open_items: list[int] = []
    for i, (kind, _, _) in enumerate(items):
        if kind in ("(", "["):
            open_items.append(i)
        elif kind in (")", "]"):
            if open_items and items[open_items[-1]][0] == ("(" if kind == ")" else "["):
                j = open_items.pop()
                partner[i], partner[j] = j, i
    unbalanced = [raw for i, (kind, raw, _) in enumerate(items) if kind != "text" and i not in partner]
    if unbalanced:
        log.warning("%s: unbalanced bracket(s) %s kept as literal text (write \\( \\) \\[ \\] for literal "
                    "brackets)", what, " ".join(repr(raw) for raw in unbalanced))
    segments: list[Segment] = []
    weights = [1.0]
    for i, (kind, raw, _) in enumerate(items):
        if i in partner:
            if kind in ("(", "["):
                weight = items[partner[i]][2]
                weights.append(weights[-1] * (weight if weight is not None else
                                              ROUND_WEIGHT if kind == "(" else 1 / ROUND_WEIGHT))
            else:
                weights.pop()
        elif segments and segments[-1].weight == weights[-1]:
            segments[-1] = Segment(segments[-1].text + raw, weights[-1])
        else:
            segments.append(Segment(raw, weights[-1]))
    return segments


def _emphasis_items(text: str):
    """(kind, literal text, weight) for each piece: kind is "(", "[", ")", "]" or "text";
    a ")" may carry an explicit weight (the ":1.3)" form)."""
    for m in _EMPHASIS_TOKENS.finditer(text):
        tok, weight = m.group(0), m.group(1)
        if tok in ("(", "[", "]"):
            yield tok, tok, None
        elif tok == ")" or weight is not None:
            yield ")", tok, None if weight is None else float(weight)
        elif len(tok) == 2 and tok[0] == "\\":
            yield "text", tok[1], None
        else:
            yield "text", tok, None


def weighted_tokens(tokenizer: ClipTokenizer, segments: list[Segment]) -> WeightedTokens:
    """Each segment tokenized on its own (as A1111 does), with its weight on every token."""
    ids: list[int] = []
    weights: list[float] = []
    for seg in segments:
        seg_ids = tokenizer.tokenize(seg.text)
        ids += seg_ids
        weights += [seg.weight] * len(seg_ids)
    return WeightedTokens(ids, weights)


def limit_length(tokenizer: ClipTokenizer, tokens: WeightedTokens,
                 max_chunks: int = MAX_CHUNKS) -> tuple[WeightedTokens, list[int]]:
    """The tokens that fit in max_chunks chunks, and the ids that do not."""
    limit = max_chunks * tokenizer.content_length
    return WeightedTokens(tokens.ids[:limit], tokens.weights[:limit]), tokens.ids[limit:]


def chunks_needed(tokenizer: ClipTokenizer, tokens: WeightedTokens) -> int:
    """Chunks of 75 tokens the prompt fills (an empty prompt still takes one)."""
    return max(1, math.ceil(len(tokens.ids) / tokenizer.content_length))


def to_chunks(tokenizer: ClipTokenizer, tokens: WeightedTokens, chunks: int) -> tuple[np.ndarray, np.ndarray]:
    """(chunks, 77) int64 ids, each chunk BOS + up to 75 tokens + EOS + padding, and
    (chunks, 77) float32 weights (1.0 for BOS, EOS and padding). Chunks past the end of
    the prompt are empty ones (BOS EOS padding), so prompts of different lengths line up."""
    n = tokenizer.content_length
    ids = np.empty((chunks, tokenizer.max_length), dtype=np.int64)
    weights = np.ones((chunks, tokenizer.max_length), dtype=np.float32)
    for c in range(chunks):
        part = tokens.ids[c * n:(c + 1) * n]
        ids[c] = tokenizer.wrap(part)
        weights[c, 1:1 + len(part)] = tokens.weights[c * n:(c + 1) * n]
    return ids, weights


def apply_weights(hidden: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Emphasis on encoded chunks (n, 77, C) with per-token weights (n, 77), in place:
    each token's state is scaled by its weight, then the chunk's mean is restored (A1111's
    convention, so emphasis shifts attention between tokens, not the overall level).
    Chunks whose weights are all 1 are left bit for bit as they are."""
    for c in range(hidden.shape[0]):
        if np.all(weights[c] == 1.0):
            continue
        before = hidden[c].mean(dtype=np.float64)
        hidden[c] *= weights[c][:, None]
        after = hidden[c].mean(dtype=np.float64)
        ratio = before / after if after != 0 else 0.0
        if ratio > 0 and math.isfinite(ratio):      # a mean near zero or changing sign has no level to restore
            hidden[c] *= np.float32(ratio)
    return hidden
