"""A CLIP text encoder (transformers' CLIPTextModel / CLIPTextModelWithProjection),
streamed from disk: SDXL's text_encoder (CLIP ViT-L) and text_encoder_2 (OpenCLIP ViT-bigG).

Read top to bottom: __call__ -> embeddings -> encoder layers (pre-LN, causal
self-attention, MLP with quick_gelu or exact gelu) -> pooled output. Weight names are
the model files': transformers 5 writes CLIPTextModel without the "text_model." prefix,
hub files and CLIPTextModelWithProjection have it; both are read as they are.

Only the token-embedding rows a prompt uses are read (a few KB of the 49408-row table),
and only the layers the requested hidden state needs are run, unless the pooled output
(which needs the last layer) is asked for too.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine import flops, ops
from engine.errors import InputError, ModelFileError
from engine.model import StreamedModel
from engine.options import Options, resolve
from engine.weights import Group, TensorStore, find_weight_files, read_config

ACTIVATIONS = ("quick_gelu", "gelu")
LEGACY_EOS_TOKEN_ID = 2   # configs written before transformers PR #24773: the EOS is the largest id


@dataclass(frozen=True)
class ClipTextConfig:
    hidden: int
    layers: int
    heads: int
    intermediate: int
    activation: str
    eps: float
    vocab: int
    positions: int
    eos_token_id: int
    projection: int        # text_projection's output width; 0 for a model without one


@dataclass(frozen=True)
class TextEncoderOutput:
    hidden_states: np.ndarray     # (B, L, hidden): the requested layer's output, without final_layer_norm
    pooled: np.ndarray | None     # (B, projection or hidden) at the first EOS, or None when not asked for


def parse_config(config: dict, where: str | Path = "config.json") -> ClipTextConfig:
    """Validate a transformers CLIPTextConfig and read its sizes."""
    where = str(where)
    kind = config.get("model_type", "clip_text_model")
    if kind != "clip_text_model":
        raise ModelFileError(f"{where}: model_type is {kind!r}; a CLIP text encoder has 'clip_text_model'")

    def size(key: str, default: int | None = None) -> int:
        value = config.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ModelFileError(f"{where}: {key} must be a positive integer, got {value!r}")
        return value

    hidden, heads = size("hidden_size"), size("num_attention_heads")
    if hidden % heads:
        raise ModelFileError(f"{where}: hidden_size {hidden} does not divide into {heads} attention heads")
    activation = config.get("hidden_act", "quick_gelu")
    if activation not in ACTIVATIONS:
        raise ModelFileError(f"{where}: hidden_act {activation!r} is not supported; CLIP text encoders use "
                             f"{' or '.join(ACTIVATIONS)}")
    eos = config.get("eos_token_id", 49407)
    if not isinstance(eos, int):
        raise ModelFileError(f"{where}: eos_token_id must be an integer, got {eos!r}")
    return ClipTextConfig(hidden=hidden, layers=size("num_hidden_layers"), heads=heads,
                          intermediate=size("intermediate_size"), activation=activation,
                          eps=float(config.get("layer_norm_eps", 1e-5)), vocab=size("vocab_size"),
                          positions=size("max_position_embeddings"), eos_token_id=eos,
                          projection=size("projection_dim", hidden) if "CLIPTextModelWithProjection" in
                          config.get("architectures", []) else 0)


def param_shapes(cfg: ClipTextConfig, prefix: str = "") -> dict[str, tuple[int, ...]]:
    """Every tensor the encoder uses, with its shape, as transformers names them."""
    c, p = cfg.hidden, prefix
    shapes: dict[str, tuple[int, ...]] = {
        f"{p}embeddings.token_embedding.weight": (cfg.vocab, c),
        f"{p}embeddings.position_embedding.weight": (cfg.positions, c),
    }
    for i in range(cfg.layers):
        layer = f"{p}encoder.layers.{i}."
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            shapes[f"{layer}self_attn.{proj}.weight"] = (c, c)
            shapes[f"{layer}self_attn.{proj}.bias"] = (c,)
        for norm in ("layer_norm1", "layer_norm2"):
            shapes[f"{layer}{norm}.weight"] = shapes[f"{layer}{norm}.bias"] = (c,)
        shapes[f"{layer}mlp.fc1.weight"], shapes[f"{layer}mlp.fc1.bias"] = (cfg.intermediate, c), (cfg.intermediate,)
        shapes[f"{layer}mlp.fc2.weight"], shapes[f"{layer}mlp.fc2.bias"] = (c, cfg.intermediate), (c,)
    shapes[f"{p}final_layer_norm.weight"] = shapes[f"{p}final_layer_norm.bias"] = (c,)
    if cfg.projection:
        shapes["text_projection.weight"] = (cfg.projection, c)
    return shapes


class ClipTextEncoder(StreamedModel):
    """out = encoder(ids, clip_skip=0, pooled=False): hidden_states[-(clip_skip + 2)] of
    transformers' output (the penultimate layer by default) and, when asked, the pooled output."""

    def __init__(self, store: TensorStore, config: ClipTextConfig, prefix: str, options: Options):
        super().__init__(store, options)
        self.config = config
        self.prefix = prefix
        self._plans: dict[int, list[Group]] = {}

    @classmethod
    def load(cls, path: str | Path, preset: str = "default", **overrides: object) -> "ClipTextEncoder":
        """Open a transformers text_encoder/ folder (config.json, model[.fp16].safetensors)
        without reading its weights."""
        folder = Path(path)
        options = resolve(preset, **overrides)
        config = parse_config(read_config(folder), folder / "config.json")
        tensors = TensorStore(find_weight_files(folder, "model"), drop_pages=options.drop_pages)
        prefix = "text_model." if "text_model.embeddings.token_embedding.weight" in tensors else ""
        if config.projection == 0 and "text_projection.weight" in tensors:
            # A config without "architectures": the file says it has a projection.
            config = dataclasses.replace(config, projection=tensors.shape("text_projection.weight")[0])
        tensors.check(param_shapes(config, prefix))
        return cls(tensors, config, prefix, options)

    # -- the forward pass ------------------------------------------------------

    def __call__(self, ids: np.ndarray, clip_skip: int = 0, pooled: bool = False) -> TextEncoderOutput:
        """ids (B, L) token ids, L <= max_position_embeddings."""
        ids = self._check_ids(ids)
        depth = self.hidden_depth(clip_skip)
        run = self.config.layers if pooled else depth
        if run not in self._plans:
            probe = np.zeros((1, 1), dtype=np.int64)
            self._plans[run] = self.record_plan(lambda: self.forward(probe, run, depth, pooled))
        return self.run_planned(self._plans[run], lambda: self.forward(ids, run, depth, pooled))

    def hidden_depth(self, clip_skip: int) -> int:
        """Layers run for hidden_states[-(clip_skip + 2)]."""
        layers = self.config.layers
        if isinstance(clip_skip, bool) or not isinstance(clip_skip, int) or not 0 <= clip_skip <= layers - 2:
            raise InputError(f"clip_skip must be an integer from 0 to {self.config.layers - 2} for this "
                             f"{self.config.layers}-layer text encoder, got {clip_skip!r}")
        return layers - 1 - clip_skip

    def forward(self, ids: np.ndarray, run: int, depth: int, pooled: bool) -> TextEncoderOutput:
        p = self.prefix
        h = self.token_embedding(ids)
        positions = self.fetch((f"{p}embeddings.position_embedding.weight",))
        if not self.planning:
            h += positions[0][:ids.shape[1]]
        hidden = h
        for i in range(run):
            h = self.encoder_layer(f"{p}encoder.layers.{i}", h)
            if i + 1 == depth:
                hidden = h
        return TextEncoderOutput(hidden, self.pooled_output(ids, h) if pooled else None)

    def token_embedding(self, ids: np.ndarray) -> np.ndarray:
        """Rows of the token embedding for `ids`, reading only those rows from disk."""
        name = f"{self.prefix}embeddings.token_embedding.weight"
        if self.planning:
            return np.zeros(ids.shape + (self.config.hidden,), dtype=np.float32)
        started = self.trace.begin()
        used = np.unique(ids)
        rows = np.empty((used.size, self.config.hidden), dtype=np.float32)
        start = 0
        for end in range(1, used.size + 1):     # one read per run of consecutive ids
            if end == used.size or used[end] != used[end - 1] + 1:
                rows[start:end] = self.store.read_rows(name, int(used[start]), int(used[end - 1]) + 1)
                start = end
        read = self.store.stored_bytes(name) * used.size // self.config.vocab
        self.trace.end("embedding", name, read, started)
        return rows[np.searchsorted(used, ids)]

    def encoder_layer(self, p: str, h: np.ndarray) -> np.ndarray:
        """CLIPEncoderLayer: h + attn(LN1(h)), then + mlp(LN2(.))."""
        eps = self.config.eps
        h = h + self.self_attention(f"{p}.self_attn", self.layer_norm(f"{p}.layer_norm1", h, eps))
        return h + self.mlp(f"{p}.mlp", self.layer_norm(f"{p}.layer_norm2", h, eps))

    def self_attention(self, p: str, x: np.ndarray) -> np.ndarray:
        q = self.linear(f"{p}.q_proj", x)
        k = self.linear(f"{p}.k_proj", x)
        v = self.linear(f"{p}.v_proj", x)
        if not self.planning:
            started = self.trace.begin()
            x = causal_attention(q, k, v, self.config.heads)
            self.trace.end("attention", p, 0, started, flops.attention(*q.shape[:2], k.shape[1], q.shape[2],
                                                                       self.config.heads))
        return self.linear(f"{p}.out_proj", x)

    def mlp(self, p: str, x: np.ndarray) -> np.ndarray:
        h = self.linear(f"{p}.fc1", x)
        h = quick_gelu(h) if self.config.activation == "quick_gelu" else ops.gelu(h)
        return self.linear(f"{p}.fc2", h)

    def pooled_output(self, ids: np.ndarray, h: np.ndarray) -> np.ndarray:
        """final_layer_norm of the last layer at the EOS position, through text_projection if any."""
        if self.config.eos_token_id == LEGACY_EOS_TOKEN_ID:
            eos = ids.argmax(axis=1)
        else:
            eos = (ids == self.config.eos_token_id).argmax(axis=1)
        rows = h[np.arange(h.shape[0]), eos] if not self.planning else h[:, 0]
        out = self.layer_norm(f"{self.prefix}final_layer_norm", np.ascontiguousarray(rows), self.config.eps)
        return self.linear("text_projection", out) if self.config.projection else out

    def _check_ids(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids)
        if ids.ndim != 2 or not np.issubdtype(ids.dtype, np.integer) or ids.shape[0] < 1 or ids.shape[1] < 1:
            raise InputError(f"token ids must be a non-empty (batch, length) integer array, got {ids.dtype} "
                             f"{list(ids.shape)}")
        if ids.shape[1] > self.config.positions:
            raise InputError(f"{ids.shape[1]} tokens in one sequence; this text encoder reads at most "
                             f"{self.config.positions}")
        if ids.min() < 0 or ids.max() >= self.config.vocab:
            raise InputError(f"token id {int(ids.max() if ids.max() >= self.config.vocab else ids.min())} is "
                             f"outside the vocabulary (0..{self.config.vocab - 1})")
        return ids.astype(np.int64)


def causal_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, heads: int) -> np.ndarray:
    """softmax(q k^T / sqrt(d) + causal mask) v for (B, L, C) inputs, all heads at once
    (CLIP's sequences are short: the (B, heads, L, L) scores of 77 tokens are small)."""
    B, L, C = q.shape
    d = C // heads

    def split(x: np.ndarray) -> np.ndarray:
        return x.reshape(B, L, heads, d).transpose(0, 2, 1, 3)

    scores = split(q * np.float32(1.0 / math.sqrt(d))) @ split(k).transpose(0, 1, 3, 2)
    scores[..., np.triu(np.ones((L, L), dtype=bool), 1)] = -np.inf
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    return np.ascontiguousarray((scores @ split(v)).transpose(0, 2, 1, 3)).reshape(B, L, C)


def quick_gelu(x: np.ndarray) -> np.ndarray:
    """x * sigmoid(1.702 x), in place."""
    t = np.multiply(x, np.float32(-1.702))
    with np.errstate(over="ignore"):
        np.exp(t, out=t)
    t += 1.0
    x /= t
    return x
