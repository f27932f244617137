"""Prompt text -> weighted token chunks: cleaning, emphasis syntax, long prompts.

Emphasis (the syntax of AUTOMATIC1111's web UI, used across SD tools):
`(text)` weighs text x1.1, `((text))` x1.21, `(text:1.3)` x1.3, `[text]` /1.1; brackets
nest and multiply; `\\(`, `\\)`, `\\[`, `\\]` and `\\\\` are literal characters. A bracket
without its partner is kept as literal text, with a warning.

Long prompts (NovelAI's method): the tokens are cut into chunks of 75, each wrapped
BOS ... EOS and padded to 77, encoded separately and concatenated along the sequence
(77*k tokens); at most MAX_CHUNKS chunks (225 tokens), what does not fit is dropped
and the dropped words are logged. `BREAK` (the word in capitals, as in A1111) ends the
chunk there: what follows starts a new one, the current one is padded to 75 tokens
(A1111's tokenize_line; at the start of the prompt, or twice in a row, it makes an empty
chunk, and at the end it adds none).
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
_BREAK = re.compile(r"\s*\bBREAK\b\s*")   # A1111's re_break


@dataclass(frozen=True)
class Segment:
    text: str
    weight: float
    chunk_break: bool = False   # a BREAK: no text, the next segment starts a new chunk


@dataclass(frozen=True)
class WeightedTokens:
    """A prompt's tokens (no BOS/EOS) through one tokenizer, each token's weight, and where a BREAK
    stood (the number of tokens before it)."""

    ids: list[int]
    weights: list[float]
    breaks: tuple[int, ...] = ()


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
        else:
            for j, part in enumerate(_BREAK.split(raw) if kind == "text" else [raw]):
                if j:
                    segments.append(Segment("", weights[-1], chunk_break=True))
                if not part:
                    continue
                if segments and segments[-1].weight == weights[-1] and not segments[-1].chunk_break:
                    segments[-1] = Segment(segments[-1].text + part, weights[-1])
                else:
                    segments.append(Segment(part, weights[-1]))
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
    breaks: list[int] = []
    for seg in segments:
        if seg.chunk_break:
            breaks.append(len(ids))
            continue
        seg_ids = tokenizer.tokenize(seg.text)
        ids += seg_ids
        weights += [seg.weight] * len(seg_ids)
    return WeightedTokens(ids, weights, tuple(breaks))


def split_chunks(tokenizer: ClipTokenizer, tokens: WeightedTokens) -> list[WeightedTokens]:
    """The tokens cut into chunks of at most 75, as A1111 cuts them: a chunk ends when it is full or at a
    BREAK (even an empty one); the prompt's end adds a last chunk when it has tokens or none came before."""
    n = tokenizer.content_length
    chunks: list[WeightedTokens] = []
    start = 0
    for end in (*tokens.breaks, None):
        stop = len(tokens.ids) if end is None else end
        while stop - start > n:                    # full chunks before the BREAK (or the end)
            chunks.append(WeightedTokens(tokens.ids[start:start + n], tokens.weights[start:start + n]))
            start += n
        if end is not None or stop > start or not chunks:
            chunks.append(WeightedTokens(tokens.ids[start:stop], tokens.weights[start:stop]))
        start = stop
    return chunks


def join_chunks(chunks: list[WeightedTokens]) -> WeightedTokens:
    """Chunks back as one run of tokens that split_chunks cuts into the same chunks."""
    ids: list[int] = []
    weights: list[float] = []
    breaks: list[int] = []
    for chunk in chunks:
        ids += chunk.ids
        weights += chunk.weights
        breaks.append(len(ids))   # a BREAK after each: at the end it adds no chunk, after an empty one it keeps it
    return WeightedTokens(ids, weights, tuple(breaks))


def limit_length(tokenizer: ClipTokenizer, tokens: WeightedTokens,
                 max_chunks: int = MAX_CHUNKS) -> tuple[WeightedTokens, list[int]]:
    """The tokens that fit in max_chunks chunks, and the ids that do not."""
    chunks = split_chunks(tokenizer, tokens)
    return join_chunks(chunks[:max_chunks]), [i for chunk in chunks[max_chunks:] for i in chunk.ids]


def chunks_needed(tokenizer: ClipTokenizer, tokens: WeightedTokens) -> int:
    """Chunks of 75 tokens the prompt fills (an empty prompt still takes one)."""
    return len(split_chunks(tokenizer, tokens))


def to_chunks(tokenizer: ClipTokenizer, tokens: WeightedTokens, chunks: int) -> tuple[np.ndarray, np.ndarray]:
    """(chunks, 77) int64 ids, each chunk BOS + up to 75 tokens + EOS + padding, and
    (chunks, 77) float32 weights (1.0 for BOS, EOS and padding). Chunks past the end of
    the prompt are empty ones (BOS EOS padding), so prompts of different lengths line up."""
    ids = np.empty((chunks, tokenizer.max_length), dtype=np.int64)
    weights = np.ones((chunks, tokenizer.max_length), dtype=np.float32)
    parts = split_chunks(tokenizer, tokens)
    for c in range(chunks):
        part = parts[c] if c < len(parts) else WeightedTokens([], [])
        ids[c] = tokenizer.wrap(part.ids)
        weights[c, 1:1 + len(part.ids)] = part.weights
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
