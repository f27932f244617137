"""Engine options and the presets that bundle them.

A preset is a named starting point; every option can be overridden on its own:
`UNet.load(path, preset="rpi-lowmem", attention_slices=8)`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from engine.errors import InputError

WEIGHTS_PROVIDERS = ("nocache", "prefetch", "ram")
ACTIVATION_DTYPES = ("fp32", "fp16", "uint8")


@dataclass(frozen=True)
class Options:
    weights: str = "prefetch"
    """How weights reach an op: "nocache" (read when needed), "prefetch" (a thread reads
    ahead in execution order), "ram" (keep everything once read)."""
    prefetch_bytes: int = 256 << 20
    """Prefetch budget: fp32 bytes read ahead but not yet used (at least one op is always read)."""
    drop_pages: bool = False
    """After reading a weight, tell the kernel to drop its file pages from the page cache,
    so a model larger than RAM does not push out everything else."""
    attention_slices: int = 4
    """Where attention runs as two BLAS GEMMs per band (no C kernels, or heads whose
    channels are not a multiple of 16): the query rows of each head are processed in this
    many bands (fewer where a band would hold under 4 MB of scores: short sequences,
    prompts). The fused C kernel always works 64 rows at a time and needs no bands."""
    threads: int = 0
    """CPU threads the engine computes on, for everything: BLAS calls, the splits of the C
    kernels (convolution transforms, norms, GEGLU, weight conversion) and attention heads
    (0: one per core this process may run on)."""
    skip_dtype: str = "fp32"
    """Storage of the UNet's skip connections between down and up blocks: fp32, fp16, or
    uint8 with a scale and zero point per channel, set by each tensor's range."""
    cross_kv_cache: bool = True
    """Compute cross-attention K and V once per prompt conditioning and reuse them."""
    kv_dtype: str = "fp32"
    """Storage of the cached cross-attention K and V: fp32 or fp16."""
    kv_cache_entries: int = 2
    """Conditionings whose K and V are kept: 2 holds a prompt and its negative (CFG as two
    evaluations never recomputes); 1 halves that memory (~25 MB in fp16 for SDXL) and
    the pipeline then orders the halves of each step so every other evaluation reuses."""
    memory_budget: int = 0
    """Peak RSS a run must stay within (0: no limit); the pipeline refuses a batch of pictures
    it estimates would not fit (engine/sdxl/pipeline.py, check_pictures)."""
    band_bytes: int = 64 << 20
    """Largest temporary a banded op builds at once: a convolution's patch matrix, the
    feed-forward's hidden rows."""
    weight_chunk_bytes: int = 0
    """With weights="nocache": a weight larger than this in fp32 is read in bands of output
    channels while its op runs, so no whole fp32 copy of it exists (0: read whole)."""
    readahead_bytes: int = 32 << 20
    """With weights="nocache": stored bytes of the next ops' weights the kernel is asked to
    read ahead into the page cache while the current op computes. Those pages share the
    memory the process has (a cgroup's limit counts them): where they do not fit they are
    dropped before their op runs and read a second time."""
    cfg_batch: bool = True
    """Classifier-free guidance as one batch-2 UNet evaluation per step (the weights are
    read once per step) rather than two batch-1 evaluations (half the activation memory)."""
    keep_freed_memory: bool = True
    """Keep freed memory in the process for reuse (glibc) instead of returning it to the
    system: no page faults and zeroing for every op's fresh weight arrays, at the cost of
    holding the high-water mark. Process-wide once any model loads with it."""
    mmap_threshold: int = 0
    """With keep_freed_memory off: arrays of at least this many bytes get their own mapping
    and go back to the system when freed (glibc's M_MMAP_THRESHOLD). 0 leaves glibc's
    default, which rises to 32 MB after big frees and then lets freed arrays pile up in
    the heap, resident. Process-wide once any model loads with it."""
    retain_freed_bytes: int = 0
    """With keep_freed_memory off: where the UNet works on hidden states of at most a tenth
    of this (its low-resolution, weight-heavy levels, far below the evaluation's peak),
    up to this many freed bytes stay in the heap for the next op's weights instead of
    being faulted in afresh; at the larger levels, which set the peak, and after each
    evaluation they go back to the system. 0: off. Process-wide while it lasts."""
    ops_printf: bool = False
    """Print every op as it runs: weight bytes, seconds and process RSS."""

    def replace(self, **overrides: object) -> "Options":
        known = {f.name: f for f in dataclasses.fields(self)}
        for key, value in overrides.items():
            if key not in known:
                raise InputError(f"unknown engine option '{key}'; known options: {', '.join(sorted(known))}")
            expected = type(getattr(self, key))
            if expected is int and isinstance(value, bool) or not isinstance(value, expected):
                raise InputError(f"engine option '{key}' must be {expected.__name__}, got {value!r}")
        opts = dataclasses.replace(self, **overrides)
        opts.validate()
        return opts

    def validate(self) -> None:
        if self.weights not in WEIGHTS_PROVIDERS:
            raise InputError(f"weights='{self.weights}' is not one of {', '.join(WEIGHTS_PROVIDERS)}")
        if self.skip_dtype not in ACTIVATION_DTYPES:
            raise InputError(f"skip_dtype='{self.skip_dtype}' is not one of {', '.join(ACTIVATION_DTYPES)}")
        if self.kv_dtype not in ("fp32", "fp16"):
            raise InputError(f"kv_dtype='{self.kv_dtype}' must be fp32 or fp16")
        if self.mmap_threshold < 0:
            raise InputError(f"engine option 'mmap_threshold' must be 0 (glibc's default) or more, "
                             f"got {self.mmap_threshold}")
        if self.retain_freed_bytes < 0:
            raise InputError(f"engine option 'retain_freed_bytes' must be 0 (off) or more, got "
                             f"{self.retain_freed_bytes}")
        if self.weight_chunk_bytes < 0:
            raise InputError(f"engine option 'weight_chunk_bytes' must be 0 or more, got {self.weight_chunk_bytes}")
        if self.threads < 0:
            raise InputError(f"engine option 'threads' must be 0 (all cores) or more, got {self.threads}")
        for key in ("prefetch_bytes", "readahead_bytes", "attention_slices", "band_bytes", "kv_cache_entries"):
            if getattr(self, key) < 1:
                raise InputError(f"engine option '{key}' must be at least 1, got {getattr(self, key)}")


PRESETS: dict[str, Options] = {
    # A PC: read ahead on a thread, big bands, everything in fp32.
    "default": Options(),
    # A Pi Zero 2 W with some headroom: a small read-ahead, compact skips and K/V.
    "rpi": Options(weights="prefetch", prefetch_bytes=48 << 20, drop_pages=True, attention_slices=16,
                   skip_dtype="fp16", kv_dtype="fp16", band_bytes=8 << 20, keep_freed_memory=False),
    # A Pi Zero 2 W generating 1024x1024: the least memory; plain reads, uint8 skips. Arrays
    # of 8 MB and more go back to the system when freed; smaller ones are reused from the
    # heap, so the 1280-wide UNet levels' weights and activations (5-7 MB) are not faulted
    # in and zeroed afresh. At the levels with small hidden states (all of a 64x64
    # evaluation; the 1280-channel levels, most of the weight bytes, at 128x128) up to 64 MB
    # of freed heap is kept for reuse; the levels that set the peak return it. Both values,
    # and the bands and weight chunks, chosen by measurement within the 250 MB budget:
    # bench/RESULTS.md#memory
    # The weights read ahead stay within 8 MB: in 256 MiB, page cache included, a 32 MB window
    # did not fit beside the process, and an evaluation read 7.0 GB for its 4.45 GB of weights
    # (bench/RESULTS.md#card-overlap).
    "rpi-lowmem": Options(weights="nocache", drop_pages=True, weight_chunk_bytes=16 << 20, readahead_bytes=8 << 20,
                          attention_slices=16,
                          skip_dtype="uint8", kv_dtype="fp16", kv_cache_entries=1, band_bytes=4 << 20,
                          cfg_batch=False, keep_freed_memory=False, mmap_threshold=8 << 20,
                          retain_freed_bytes=64 << 20, memory_budget=250_000_000),
}


def resolve(preset: str = "default", **overrides: object) -> Options:
    """The options of `preset` with `overrides` applied."""
    if preset not in PRESETS:
        raise InputError(f"unknown preset '{preset}'; choose one of: {', '.join(PRESETS)}")
    return PRESETS[preset].replace(**overrides)
