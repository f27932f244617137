"""The engine's hot loops: C kernels (built by cffi from the .c files here) with numpy twins.

One module per family holds, for each of its kernels, the argument check, the numpy
twin ``np_<name>``, the C call ``c_<name>`` (None when the C module is not built) and
the dispatch ``<name>``: conversions, activations, norms, winograd, attention. The C
prototypes are in kernels.h, the build in build.py (with cbuild.py), and backend.py
chooses between C and numpy (``SLOWFRAME_KERNELS``) for the engine and the dithering.

The twins give the C kernels' bits (tests/engine/kernels/ check it), so the choice
only changes speed; the fused attention alone is matched by the BLAS path in
engine/ops.py to float32 rounding. All functions write into ``out`` (preallocated,
C-contiguous, of the stated dtype) and return it. The C calls release the GIL, so
another thread can run while they do. Inputs must be C-contiguous too; ``out`` may not
overlap an input, except that ``gelu_erf`` may run in place (``out is x``).
"""

from engine.kernels.activations import geglu, gelu_erf, softmax_rows
from engine.kernels.attention import attention_work, c_attention_head, fused_attention
from engine.kernels.backend import BACKEND, BUILD_HINT, fallback_warning
from engine.kernels.conversions import (bf16_to_f32, dequant_u8_rows, f16_to_f32, f32_to_f16, quant_u8_rows,
                                        taps_first)
from engine.kernels.norms import layer_norm, row_moments
from engine.kernels.winograd import wino_input, wino_output, wino_weights

__all__ = [
    "BACKEND",
    "BUILD_HINT",
    "attention_work",
    "bf16_to_f32",
    "c_attention_head",
    "dequant_u8_rows",
    "f16_to_f32",
    "f32_to_f16",
    "fallback_warning",
    "fused_attention",
    "geglu",
    "gelu_erf",
    "layer_norm",
    "quant_u8_rows",
    "row_moments",
    "softmax_rows",
    "taps_first",
    "wino_input",
    "wino_output",
    "wino_weights",
]
