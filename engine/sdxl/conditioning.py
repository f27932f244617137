"""Prompts -> SDXL conditioning: diffusers' StableDiffusionXLPipeline.encode_prompt on
the streaming engine, with emphasis, long prompts and an on-disk cache.

    from engine.sdxl import TextEncoders

    with TextEncoders.load("path/to/model_root", preset="rpi-lowmem") as te:
        c = te.encode("a lighthouse at dusk, (oil painting:1.2)", negative_prompt="blurry")

    # The UNet's inputs for classifier-free guidance (batch order [uncond, cond]):
    encoder_hidden_states = np.concatenate([c.negative_embeds, c.prompt_embeds])   # (2, 77*k, 2048)
    text_embeds = np.concatenate([c.negative_pooled, c.pooled])                    # (2, 1280)

`model_root` is a diffusers SDXL folder: tokenizer/ and tokenizer_2/ (tokenizer.json, or
vocab.json and merges.txt), text_encoder/ (CLIP ViT-L) and text_encoder_2/ (OpenCLIP ViT-bigG with
text_projection), weights as model[.fp16].safetensors. Models without tokenizer
folders load with `standard_vocabulary=True` (the CLIP vocabulary bundled with
slowframe). `preset` and keyword overrides are the engine options (engine/options.py);
in rpi-lowmem the weights stream from disk and the 2.8 GB of fp32 weights are never
resident.

What `encode` returns, all numpy float32 (C = 768 + 1280 = 2048, P = 1280 for SDXL):

- prompt_embeds (1, 77*k, C): both encoders' hidden_states[-2] (no final layer norm),
  concatenated on the last axis; k = 1 for prompts up to 75 tokens, exactly as
  diffusers, and up to 3 for longer ones (75-token chunks, see engine/sdxl/prompt.py).
- pooled (1, P): text_encoder_2's projected EOS state of the prompt's first chunk.
- negative_embeds (1, 77*k, C), negative_pooled (1, P): the same for negative_prompt,
  padded to the prompt's chunk count (or the prompt to its); with negative_prompt=None
  both are zeros (SDXL's force_zeros_for_empty_prompt), while "" is encoded.

Options of `encode`: `emphasis` (default on) reads (text:1.3)-style weights; with
`emphasis=False` the prompt is taken literally, exactly as diffusers does.
`clip_skip=n` takes hidden_states[-(n + 2)] of both encoders, for the prompt and the
negative prompt alike (diffusers applies it to the prompt only).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.errors import ModelFileError
from engine.sdxl.conditioning_cache import FIELDS, ConditioningCache, default_cache_dir, files_fingerprint
from engine.sdxl.prompt import (MAX_CHUNKS, Segment, WeightedTokens, apply_weights, chunks_needed,
                                clean_prompt, limit_length, parse_emphasis, to_chunks, weighted_tokens)
from engine.sdxl.text_encoder import ClipTextEncoder
from engine.sdxl.tokenizer import SAVED_TOKENIZER, ClipTokenizer, sdxl_tokenizers
from engine.weights import find_weight_files

log = logging.getLogger(__name__)

TOKENIZER_FILES = (SAVED_TOKENIZER, "vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json")


@dataclass(frozen=True)
class Conditioning:
    prompt_embeds: np.ndarray     # (1, 77*k, C)
    pooled: np.ndarray            # (1, P)
    negative_embeds: np.ndarray   # (1, 77*k, C); zeros when no negative prompt was given
    negative_pooled: np.ndarray   # (1, P)

    @property
    def chunks(self) -> int:
        return self.prompt_embeds.shape[1] // 77


class TextEncoders:
    """Both SDXL tokenizers and text encoders; `encode(prompt, negative_prompt)` -> Conditioning."""

    def __init__(self, tokenizers: tuple[ClipTokenizer, ClipTokenizer],
                 encoders: tuple[ClipTextEncoder, ClipTextEncoder], model_id: str,
                 cache: ConditioningCache | None = None):
        self.tokenizers = tokenizers
        self.encoders = encoders
        self.model_id = model_id
        self.cache = cache

    @classmethod
    def load(cls, model_root: str | Path, preset: str = "default", *, standard_vocabulary: bool = False,
             cache: bool = True, cache_dir: str | Path | None = None, **overrides: object) -> "TextEncoders":
        """Open tokenizer/, tokenizer_2/, text_encoder/ and text_encoder_2/ of an SDXL model
        folder without reading the weights. The conditioning cache lives in `cache_dir`
        (default ~/.cache/slowframe/conditioning); cache=False turns it off."""
        root = Path(model_root)
        if not root.is_dir():
            raise ModelFileError(f"{root}: not a folder; expected an SDXL model folder with tokenizer/, "
                                 "tokenizer_2/, text_encoder/ and text_encoder_2/")
        tokenizers = sdxl_tokenizers(None if standard_vocabulary else root)
        files = [] if standard_vocabulary else [root / name / f for name in ("tokenizer", "tokenizer_2")
                                                for f in TOKENIZER_FILES if (root / name / f).is_file()]
        encoders: list[ClipTextEncoder] = []
        try:
            for name in ("text_encoder", "text_encoder_2"):
                folder = root / name
                if not (folder / "config.json").is_file():
                    raise ModelFileError(f"{folder}: missing (or has no config.json); an SDXL model folder needs "
                                         "text_encoder/ and text_encoder_2/ from the model's download")
                encoders.append(ClipTextEncoder.load(folder, preset, **overrides))
                files += [folder / "config.json", *find_weight_files(folder, "model")]
            _check_pair(root, tokenizers, encoders)
        except BaseException:
            for encoder in encoders:
                encoder.close()
            raise
        model_id = files_fingerprint(files) + ("+standard-vocabulary" if standard_vocabulary else "")
        store = ConditioningCache(cache_dir or default_cache_dir()) if cache else None
        return cls(tokenizers, (encoders[0], encoders[1]), model_id, store)

    def close(self) -> None:
        for encoder in self.encoders:
            encoder.close()

    def __enter__(self) -> "TextEncoders":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def encode(self, prompt: str | bytes, negative_prompt: str | bytes | None = None, emphasis: bool = True,
               clip_skip: int = 0) -> Conditioning:
        """The SDXL conditioning of a prompt and an optional negative prompt."""
        text = clean_prompt(prompt, "prompt")
        negative = None if negative_prompt is None else clean_prompt(negative_prompt, "negative prompt")
        for encoder in self.encoders:
            encoder.hidden_depth(clip_skip)    # an invalid clip_skip fails before any work
        if self.cache is None:
            return self._encode(text, negative, bool(emphasis), clip_skip)
        key = self.cache.key(self.model_id, text, negative, clip_skip, bool(emphasis))
        arrays = self.cache.load(key)
        if arrays is not None:
            log.info("conditioning of this prompt read from the cache (%s)", self.cache.folder)
            return Conditioning(**arrays)
        result = self._encode(text, negative, bool(emphasis), clip_skip)
        self.cache.save(key, {name: getattr(result, name) for name in FIELDS})
        return result

    def _encode(self, text: str, negative: str | None, emphasis: bool, clip_skip: int) -> Conditioning:
        prompt_tokens = self._tokens(text, "prompt", emphasis)
        negative_tokens = None if negative is None else self._tokens(negative, "negative prompt", emphasis)
        chunks = max(chunks_needed(tok, t) for tokens in (prompt_tokens, negative_tokens or [])
                     for tok, t in zip(self.tokenizers, tokens))
        states, pooled = [], None
        for i, (tokenizer, encoder) in enumerate(zip(self.tokenizers, self.encoders)):
            ids, weights = to_chunks(tokenizer, prompt_tokens[i], chunks)
            if negative_tokens is not None:
                neg_ids, neg_weights = to_chunks(tokenizer, negative_tokens[i], chunks)
                ids, weights = np.concatenate([ids, neg_ids]), np.concatenate([weights, neg_weights])
            out = encoder(ids, clip_skip=clip_skip, pooled=i == 1)
            states.append(apply_weights(out.hidden_states, weights))
            pooled = out.pooled
        embeds = np.concatenate(states, axis=-1)          # (sequences, 77, C): prompt chunks, then negative's
        width = embeds.shape[-1]
        prompt_embeds = embeds[:chunks].reshape(1, -1, width)
        if negative_tokens is None:
            negative_embeds, negative_pooled = np.zeros_like(prompt_embeds), np.zeros_like(pooled[:1])
        else:
            negative_embeds, negative_pooled = embeds[chunks:].reshape(1, -1, width), pooled[chunks:chunks + 1]
        return Conditioning(np.ascontiguousarray(prompt_embeds), np.ascontiguousarray(pooled[:1]),
                            np.ascontiguousarray(negative_embeds), np.ascontiguousarray(negative_pooled))

    def _tokens(self, text: str, what: str, emphasis: bool) -> list[WeightedTokens]:
        """The text's tokens through each tokenizer, limited to MAX_CHUNKS chunks; what is
        dropped is logged once, in the first tokenizer's words."""
        segments = parse_emphasis(text, what) if emphasis else [Segment(text, 1.0)]
        limited = [limit_length(tok, weighted_tokens(tok, segments)) for tok in self.tokenizers]
        for tokenizer, (tokens, dropped) in zip(self.tokenizers, limited):
            if dropped:
                log.warning("%s is %d tokens long; the text encoders read at most %d (%d chunks of %d), so this "
                            "was dropped: %r", what, len(tokens.ids) + len(dropped), len(tokens.ids), MAX_CHUNKS,
                            tokenizer.content_length, _shorten(tokenizer.decode(dropped)))
                break
        return [tokens for tokens, _ in limited]


def _shorten(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _check_pair(root: Path, tokenizers: list[ClipTokenizer], encoders: list[ClipTextEncoder]) -> None:
    for name, tokenizer, encoder in zip(("text_encoder", "text_encoder_2"), tokenizers, encoders):
        cfg = encoder.config
        if tokenizer.max_length > cfg.positions or tokenizer.backend.get_vocab_size() > cfg.vocab:
            raise ModelFileError(f"{root / name}: the encoder takes {cfg.positions} positions of a {cfg.vocab}-token "
                                 f"vocabulary, its tokenizer gives {tokenizer.max_length} of "
                                 f"{tokenizer.backend.get_vocab_size()}; the folders belong to different models")
    if not encoders[1].config.projection:
        raise ModelFileError(f"{root / 'text_encoder_2'}: no text_projection; SDXL's second text encoder is a "
                             "CLIPTextModelWithProjection (is this an SD 1.x/2.x model?)")
