"""Numeric formats: the torch reference (bit-exact spec), the Triton activation quantizers and
the :class:`QuantizedTensor` container (``docs/semantics.md`` section 5)."""

from .reference import (
    E2M1_MAX,
    E2M1_VALUES,
    FP8_BLOCK_EPS,
    FP8_MAX,
    FP8_MIN_SCALE,
    FP8_WEIGHT_EPS,
    NVFP4_MIN_AMAX,
    dequantize,
    e2m1_to_float,
    float_to_e2m1,
    pack_fp4,
    quantize,
    quantize_weight,
    ue8m0_decode,
    ue8m0_encode_ceil,
    unpack_fp4,
)
from .tensor import QuantizedTensor, scale_code_range_of
from .triton_quant import quantize_act

__all__ = [
    "QuantizedTensor",
    "scale_code_range_of",
    "quantize",
    "quantize_weight",
    "dequantize",
    "quantize_act",
    "e2m1_to_float",
    "float_to_e2m1",
    "pack_fp4",
    "unpack_fp4",
    "ue8m0_encode_ceil",
    "ue8m0_decode",
    "FP8_MAX",
    "FP8_MIN_SCALE",
    "FP8_BLOCK_EPS",
    "FP8_WEIGHT_EPS",
    "E2M1_MAX",
    "E2M1_VALUES",
    "NVFP4_MIN_AMAX",
]
