"""Torch reference for fusedmoe's numeric formats: the bit-exact specification.

Pure torch (no Triton), any device. Every fast path (the Triton activation quantizers in
``formats/triton_quant.py``, the GEMM epilogues) must reproduce these functions bit for bit. The
formats and their sources are described in ``docs/semantics.md`` section 5; the storage contract is
the table in :class:`fusedmoe.formats.tensor.QuantizedTensor`.

Arithmetic rules (they are what makes the results reproducible across devices):

* All math is fp32. Inputs (fp16 / bf16 / fp32) are converted exactly to fp32 first.
* Divisions are true IEEE fp32 divisions (round to nearest even). They are always done between two
  tensors on the same device: on CUDA, PyTorch turns ``tensor / python_scalar`` into a multiply by a
  rounded reciprocal, which is not the same number.
* Constants are applied as their fp32 roundings (``_f32``), so a kernel using the same fp32
  constants gets the same bits.
* E4M3 encoding is ``clamp(v, -448, 448).to(torch.float8_e4m3fn)``: round to nearest even,
  saturating to +-448 by the explicit clamp (never by the cast), subnormals kept, the sign of values
  that round to zero kept (-1e-5 -> byte 0x80).
* E2M1 encoding (:func:`float_to_e2m1`) rounds to nearest even on the grid
  {0, 0.5, 1, 1.5, 2, 3, 4, 6} and saturates to +-6. **A negative value (or -0.0) that rounds to
  zero keeps its sign bit: code 0b1000.** Its dequantized value is -0.0, equal to 0.
* UE8M0 scales (MX formats) are computed from the fp32 bit pattern, rounding **toward +inf**
  (:func:`ue8m0_encode_ceil`), not with torch's ``float8_e8m0fnu`` cast (that one rounds to
  nearest).

Where Blackwell hardware (FlashInfer's ``cvt_warp_fp16_to_fp4`` / ``cvt_warp_fp16_to_mxfp8``) uses
the approximate reciprocal ``rcp.approx.ftz.f32``, this reference uses correctly rounded fp32
reciprocals/divisions. The result can therefore differ from FlashInfer's bytes in the last fp32
ulp of an intermediate, which flips a scale byte or an element code only when that intermediate sits
exactly on a rounding boundary. fusedmoe's own kernels follow this reference, not the hardware.

Scale formulas (``amax`` = max |x| over the scale's group; ``/`` = fp32 true division):

===========  ==============================  ==================================================
format       activations (:func:`quantize`)  weights (:func:`quantize_weight`, w = [E, N, K])
===========  ==============================  ==================================================
FP8_TENSOR   s = max(amax/448, FP8_MIN_SCALE)  s[e] = max(amax_e, 1e-10) / 448
             over the whole tensor, or the
             static ``scale=``
FP8_TOKEN    s[row] = max(amax_row/448,        (activation format only)
             FP8_MIN_SCALE)
FP8_CHANNEL  same as FP8_TOKEN                 s[e, n] = max(amax_row, 1e-10) / 448
FP8_BLOCK    1 x 128 groups:                   128 x 128 tiles:
             s = max(amax_g, 1e-10) / 448      s = max(amax_tile, 1e-10) / 448
MXFP8        1 x 32: e = ue8m0_ceil(amax/448)  same
NVFP4        1 x 16, g = 2688 / amax(tensor)   1 x 16, g[e] = 2688 / amax_e
MXFP4        1 x 32: e = ue8m0_ceil(amax/6)    same
===========  ==============================  ==================================================

FP8 values: ``q = e4m3(clamp(x / s, -448, 448))``; dequant ``x = q * s``.
MX values: ``q = enc(x * 2^-(e-127))`` (``enc`` = E4M3 with the clamp, or E2M1), and ``q = 0`` when
the scale underflows (``e == 0``, which covers all-zero groups); dequant ``x = q * 2^(e-127)``.
NVFP4 follows the 4-step recipe of semantics 5.7, see :func:`_nvfp4_blocks`; dequant
``x = e2m1 * float(s_blk) / g``. The NVFP4 global amax is floored at ``NVFP4_MIN_AMAX`` so that an
all-zero tensor gets a finite ``g`` (its block scales and values are then all 0).

NaN / inf policy: quantizing a tensor that contains NaN or inf has no meaningful result. The
reference quantizers raise ``ValueError("x contains NaN/inf")`` for CPU tensors (one cheap pass).
On GPU nothing is checked (checking would synchronize the host): the output is then unspecified,
and the Triton kernels may differ from this reference on such inputs.
"""

from __future__ import annotations

import numbers
import struct
from typing import Optional, Union

import torch

from ..config import Format
from .tensor import QuantizedTensor

__all__ = [
    "FP8_MAX",
    "FP8_MIN_SCALE",
    "FP8_BLOCK_EPS",
    "FP8_WEIGHT_EPS",
    "E2M1_MAX",
    "NVFP4_MIN_AMAX",
    "E2M1_VALUES",
    "quantize",
    "quantize_weight",
    "dequantize",
    "e2m1_to_float",
    "float_to_e2m1",
    "pack_fp4",
    "unpack_fp4",
    "ue8m0_encode_ceil",
    "ue8m0_decode",
]


def _f32(v: float) -> float:
    """``v`` rounded to the nearest fp32 value (returned as a Python float)."""
    return struct.unpack("<f", struct.pack("<f", v))[0]


FP8_MAX = 448.0
"""Largest finite E4M3 (``float8_e4m3fn``) magnitude."""
FP8_MIN_SCALE = 1.0 / (448.0 * 512.0)
"""Floor of dynamic FP8 per-tensor / per-token scales (vLLM's ``_FP8_MIN_SCALING_FACTOR``);
applied as its fp32 rounding."""
FP8_BLOCK_EPS = 1e-10
"""Floor of the group amax of FP8_BLOCK (SGLang ``per_token_group_quant_fp8``); applied as fp32."""
FP8_WEIGHT_EPS = 1e-10
"""Floor of the amax of FP8 weight scales (per tensor, per channel, per tile), so that all-zero
experts/rows get a finite scale; applied as fp32."""
E2M1_MAX = 6.0
"""Largest E2M1 magnitude."""
NVFP4_MIN_AMAX = 2.0**-100
"""Floor of the tensor amax when the NVFP4 global scale ``g = 2688 / amax`` is computed."""
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
"""Magnitudes of the E2M1 codes 0..7 (bit 3 is the sign)."""

# fp32 constants shared with the Triton kernels (kernels/_quant.py uses the same values).
_F32_MIN_SCALE = _f32(FP8_MIN_SCALE)
_F32_BLOCK_EPS = _f32(FP8_BLOCK_EPS)
_F32_WEIGHT_EPS = _f32(FP8_WEIGHT_EPS)
_F32_RCP6 = _f32(1.0 / 6.0)
_NVFP4_G_NUM = FP8_MAX * E2M1_MAX  # 2688, exact

_FLOAT_INPUTS = (torch.float16, torch.bfloat16, torch.float32)
_E4M3 = torch.float8_e4m3fn


# ----------------------------------------------------------------------------------------------
# element codecs
# ----------------------------------------------------------------------------------------------


def _const(v: float, like: torch.Tensor) -> torch.Tensor:
    """A 0-dim fp32 tensor holding ``v`` on ``like``'s device (true division needs a tensor)."""
    return torch.tensor(v, dtype=torch.float32, device=like.device)


def _to_e4m3(v: torch.Tensor) -> torch.Tensor:
    """``e4m3(clamp(v, -448, 448))``: RNE, saturating by the explicit clamp."""
    return v.clamp(-FP8_MAX, FP8_MAX).to(_E4M3)


def float_to_e2m1(x: torch.Tensor) -> torch.Tensor:
    """Encode ``x`` as E2M1 codes (uint8 in [0, 15], one code per element, not packed).

    Round to nearest, ties to even, on the magnitude grid {0, 0.5, 1, 1.5, 2, 3, 4, 6} (codes 0..7),
    saturating to 6; bit 3 is the sign bit of ``x`` (``torch.signbit``), so negative values that
    round to zero, and -0.0, give 0b1000. With ``a = |x|`` the magnitude code is the number of true
    comparisons among ``a > 0.25, a >= 0.75, a > 1.25, a >= 1.75, a > 2.5, a >= 3.5, a > 5``
    (ties 0.25 -> 0, 0.75 -> 1.0, 1.25 -> 1.0, 1.75 -> 2.0, 2.5 -> 2.0, 3.5 -> 4.0, 5 -> 4.0).
    NaN gives magnitude code 0 (unspecified: inputs are expected to be finite).
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating-point tensor, got {x.dtype}")
    xf = x.float()
    a = xf.abs()
    code = (
        (a > 0.25).to(torch.uint8)
        + (a >= 0.75).to(torch.uint8)
        + (a > 1.25).to(torch.uint8)
        + (a >= 1.75).to(torch.uint8)
        + (a > 2.5).to(torch.uint8)
        + (a >= 3.5).to(torch.uint8)
        + (a > 5.0).to(torch.uint8)
    )
    return code | (torch.signbit(xf).to(torch.uint8) << 3)


def e2m1_to_float(codes: torch.Tensor) -> torch.Tensor:
    """Decode E2M1 codes (uint8 in [0, 15], unpacked) to fp32: ``(-1)^bit3 * E2M1_VALUES[code & 7]``.

    Code 0b1000 decodes to -0.0.
    """
    if not isinstance(codes, torch.Tensor):
        raise TypeError(f"codes must be a torch.Tensor, got {type(codes).__name__}")
    if codes.dtype != torch.uint8:
        raise TypeError(f"codes must be uint8 E2M1 codes, got {codes.dtype}")
    if codes.device.type == "cpu" and codes.numel() and int(codes.max()) > 15:
        raise ValueError("codes must be unpacked E2M1 codes in [0, 15]; use unpack_fp4() on packed bytes")
    lut = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=codes.device)
    mag = lut[(codes & 7).long()]
    return torch.where((codes & 8) != 0, -mag, mag)


def pack_fp4(codes: torch.Tensor) -> torch.Tensor:
    """Pack E2M1 codes [..., 2n] into bytes [..., n]: element 2i low nibble, 2i+1 high nibble."""
    if not isinstance(codes, torch.Tensor):
        raise TypeError(f"codes must be a torch.Tensor, got {type(codes).__name__}")
    if codes.dtype != torch.uint8:
        raise TypeError(f"codes must be uint8 E2M1 codes, got {codes.dtype}")
    if codes.dim() < 1 or codes.shape[-1] % 2:
        raise ValueError(f"codes: the last dim must be even to pack two codes per byte, got shape {tuple(codes.shape)}")
    return (codes[..., 0::2] & 0xF) | ((codes[..., 1::2] & 0xF) << 4)


def unpack_fp4(packed: torch.Tensor) -> torch.Tensor:
    """Unpack bytes [..., n] into E2M1 codes [..., 2n]: low nibble first (element 2i), then high."""
    if not isinstance(packed, torch.Tensor):
        raise TypeError(f"packed must be a torch.Tensor, got {type(packed).__name__}")
    if packed.dtype != torch.uint8:
        raise TypeError(f"packed must be uint8 (two E2M1 codes per byte), got {packed.dtype}")
    if packed.dim() < 1:
        raise ValueError("packed must have at least one dim")
    out = torch.stack((packed & 0xF, packed >> 4), dim=-1)
    return out.reshape(*packed.shape[:-1], packed.shape[-1] * 2)


def ue8m0_encode_ceil(x: torch.Tensor) -> torch.Tensor:
    """UE8M0 exponent byte of ``|x|`` rounded toward +inf, saturating: uint8 code ``e``, value 2^(e-127).

    From the fp32 bit pattern of ``|x|`` (exponent field ``E``, mantissa ``M``):
    normal (``E >= 1``): ``e = E + (M != 0)``; subnormal or zero (``E == 0``): ``e = 1`` if
    ``|x| > 2^-127`` else ``0``; then ``e = min(e, 254)`` (inf saturates to 2^127). NaN gives 255
    (the UE8M0 NaN). This is ``__nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundPosInf)``: the
    smallest power of two >= |x| (2^-127 for |x| <= 2^-127).
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating-point tensor, got {x.dtype}")
    xf = x.float()
    bits = xf.contiguous().view(torch.int32) & 0x7FFFFFFF
    exp = bits >> 23
    mant = bits & 0x7FFFFF
    code = torch.where(exp == 0, (mant > 0x400000).to(torch.int32), exp + (mant != 0).to(torch.int32))
    code = code.clamp(max=254)
    code = torch.where(torch.isnan(xf), torch.full_like(code, 255), code)
    return code.to(torch.uint8)


def ue8m0_decode(e: torch.Tensor) -> torch.Tensor:
    """Decode UE8M0 exponent bytes to fp32: ``2^(e-127)`` (exact; 2^-127 is an fp32 subnormal),
    NaN for 255."""
    if not isinstance(e, torch.Tensor):
        raise TypeError(f"e must be a torch.Tensor, got {type(e).__name__}")
    if e.dtype != torch.uint8:
        raise TypeError(f"e must be uint8 UE8M0 exponent bytes, got {e.dtype}")
    ei = e.to(torch.int32)
    bits = torch.where(ei == 0, torch.full_like(ei, 0x400000), ei << 23)
    val = bits.view(torch.float32)
    return torch.where(ei == 255, torch.full_like(val, float("nan")), val)


def _ue8m0_quant_multiplier(e: torch.Tensor) -> torch.Tensor:
    """The factor applied to x before encoding: ``2^(127-e)`` (exact), 0 when ``e == 0``."""
    ei = e.to(torch.int32)
    bits = torch.where(ei >= 254, torch.full_like(ei, 0x400000), (254 - ei) << 23)
    mult = bits.view(torch.float32)
    return torch.where(ei == 0, torch.zeros_like(mult), mult)


# ----------------------------------------------------------------------------------------------
# validation helpers
# ----------------------------------------------------------------------------------------------


def _check_float_tensor(x, name: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _FLOAT_INPUTS:
        raise TypeError(f"{name} must be float16, bfloat16 or float32, got {x.dtype}")


def _check_format(fmt) -> None:
    if not isinstance(fmt, Format):
        raise TypeError(f"fmt must be a fm.Format, got {fmt!r}")


def _check_last_dim(x: torch.Tensor, fmt: Format, name: str) -> None:
    C = x.shape[-1]
    if fmt.is_fp4 and C % 2:
        raise ValueError(f"{name}: the last dim must be even for {fmt.name} (two E2M1 per byte), got {C}")
    b = fmt.block_size
    if b and C % b:
        raise ValueError(
            f"{name}: the last dim ({C}) must be a multiple of {b} for {fmt.name} ({b}-element scale groups)"
        )


def _check_finite(x: torch.Tensor, name: str) -> None:
    """NaN policy: checked on CPU tensors only (a GPU check would synchronize the host)."""
    if x.device.type == "cpu" and x.numel() and not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} contains NaN/inf")


def _scalar_tensor(v, name: str, like: torch.Tensor, shape: tuple) -> torch.Tensor:
    """A positive fp32 scale given as a number or a tensor with one element (or ``shape``)."""
    if isinstance(v, numbers.Real) and not isinstance(v, bool):
        t = torch.tensor(float(v), dtype=torch.float32, device=like.device)
    elif isinstance(v, torch.Tensor):
        if not v.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got {v.dtype}")
        if v.numel() != 1 and tuple(v.shape) != tuple(shape):
            raise ValueError(f"{name} must have one element or shape {tuple(shape)}, got shape {tuple(v.shape)}")
        t = v.detach().to(device=like.device, dtype=torch.float32)
    else:
        raise TypeError(f"{name} must be a float or a tensor, got {type(v).__name__}")
    if t.device.type == "cpu" and not bool((torch.isfinite(t) & (t > 0)).all()):
        raise ValueError(f"{name} must be finite and > 0")
    return t.reshape(()) if t.numel() == 1 else t


def _absmax(x: torch.Tensor, dims) -> torch.Tensor:
    """fp32 max |x| over ``dims`` (0 for empty reductions)."""
    a = x.float().abs()
    if a.numel() == 0:
        dims_t = (dims,) if isinstance(dims, int) else tuple(dims)
        dims_t = tuple(d % a.dim() for d in dims_t)
        shape = [s for i, s in enumerate(a.shape) if i not in dims_t]
        return torch.zeros(shape, dtype=torch.float32, device=x.device)
    return a.amax(dim=dims)


def _expand_right(s: torch.Tensor, ndim: int) -> torch.Tensor:
    return s.reshape(tuple(s.shape) + (1,) * (ndim - s.dim()))


# ----------------------------------------------------------------------------------------------
# per-format quantizers (x fp32, blocks along the last dim)
# ----------------------------------------------------------------------------------------------


def _fp8_dynamic_row_scale(amax: torch.Tensor) -> torch.Tensor:
    """``max(amax / 448, FP8_MIN_SCALE)`` in fp32 (activation per-tensor / per-token)."""
    return torch.div(amax, _const(FP8_MAX, amax)).clamp_min(_F32_MIN_SCALE)


def _fp8_eps_scale(amax: torch.Tensor, eps: float) -> torch.Tensor:
    """``max(amax, eps) / 448`` in fp32 (FP8_BLOCK groups, FP8 weights)."""
    return torch.div(amax.clamp_min(eps), _const(FP8_MAX, amax))


def _fp8_values(xf: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """``e4m3(clamp(x / s, -448, 448))`` with ``s`` broadcast from the right-hand dims trimmed."""
    return _to_e4m3(torch.div(xf, s))


def _mx_blocks(xf: torch.Tensor, fmt: Format):
    """MXFP8 / MXFP4 along the last dim (semantics 5.6, 5.8). Returns (data, scale bytes)."""
    C = xf.shape[-1]
    xg = xf.reshape(*xf.shape[:-1], C // 32, 32)
    amax = _absmax(xg, -1)
    elem_max = FP8_MAX if fmt is Format.MXFP8 else E2M1_MAX
    e = ue8m0_encode_ceil(torch.div(amax, _const(elem_max, amax)))
    y = xg * _ue8m0_quant_multiplier(e)[..., None]
    if fmt is Format.MXFP8:
        return _to_e4m3(y).reshape(xf.shape), e
    return pack_fp4(float_to_e2m1(y).reshape(xf.shape)), e


def _nvfp4_blocks(xf: torch.Tensor, g: torch.Tensor):
    """NVFP4 along the last dim (semantics 5.7), ``g`` of shape ``[*B]`` (the leading batch dims).

    Per 16-block, all fp32:
      1. ``amax_blk = max |x|``;
      2. ``s_blk = e4m3(min(g * (amax_blk * fp32(1/6)), 448))`` (the stored byte; RNE);
      3. ``out_scale = 1 / (float(s_blk) * (1 / g))``, or 0 when ``s_blk == 0``;
      4. ``q = e2m1(x * out_scale)`` (RNE, saturating, sign kept), packed low nibble first.
    Steps 2-3 use correctly rounded fp32 reciprocals where Blackwell uses ``rcp.approx.ftz``.
    Returns (packed data, e4m3 block scales).
    """
    C = xf.shape[-1]
    xg = xf.reshape(*xf.shape[:-1], C // 16, 16)
    amax = _absmax(xg, -1)
    gb = _expand_right(g, amax.dim())
    s_blk = (gb * (amax * _F32_RCP6)).clamp(max=FP8_MAX).to(_E4M3)
    s_f = s_blk.float()
    inv_g = torch.div(_const(1.0, g), g)
    denom = s_f * _expand_right(inv_g, s_f.dim())
    out_scale = torch.where(s_f == 0, torch.zeros_like(s_f), torch.div(_const(1.0, s_f), denom))
    codes = float_to_e2m1(xg * out_scale[..., None])
    return pack_fp4(codes.reshape(xf.shape)), s_blk


def _nvfp4_global_scale(amax: torch.Tensor) -> torch.Tensor:
    """``g = 2688 / max(amax, NVFP4_MIN_AMAX)`` in fp32."""
    return torch.div(_const(_NVFP4_G_NUM, amax), amax.clamp_min(NVFP4_MIN_AMAX))


# ----------------------------------------------------------------------------------------------
# public API
# ----------------------------------------------------------------------------------------------


def quantize(
    x: torch.Tensor,
    fmt: Format,
    *,
    global_scale: Optional[Union[torch.Tensor, float]] = None,
    scale: Optional[Union[torch.Tensor, float]] = None,
) -> QuantizedTensor:
    """Activation-style quantization of ``x [*B, R, C]`` (any leading dims) along its last dim.

    * ``BF16``: no quantization; fp16/bf16 data is kept as is, fp32 is rounded to bf16.
    * ``FP8_TENSOR``: one scale for the whole tensor, ``s = max(amax/448, FP8_MIN_SCALE)``, or the
      static ``scale=`` (dequant convention ``x ~= q * s``). Stored as fp32 of shape ``[*B]`` (the
      same value repeated; a 0-dim tensor for 1-D and 2-D ``x``).
    * ``FP8_TOKEN`` / ``FP8_CHANNEL``: one scale per row, ``s = max(amax_row/448, FP8_MIN_SCALE)``.
    * ``FP8_BLOCK``: 1 x 128 groups, ``s = max(amax_g, 1e-10) / 448``, ``block_rows = 1``.
      All FP8: ``q = e4m3(clamp(x / s, -448, 448))``.
    * ``MXFP8`` / ``MXFP4``: 1 x 32 groups, ``e = ue8m0_ceil(amax/448)`` (resp. ``amax/6``),
      ``q = e4m3(clamp(x * 2^-(e-127)))`` (resp. ``e2m1(...)``), ``q = 0`` when ``e == 0``.
    * ``NVFP4``: 1 x 16 groups with the global scale ``g = global_scale`` or, when not given,
      ``2688 / max(amax(x), NVFP4_MIN_AMAX)`` (one for the whole tensor); stored as fp32 ``[*B]``.
      ``global_scale`` may also be a tensor of shape ``[*B]`` (one per batch slice).

    Raises TypeError / ValueError naming the argument on bad input; ValueError("x contains NaN/inf")
    for non-finite CPU input (see the module docstring for the NaN policy).
    """
    _check_float_tensor(x, "x")
    _check_format(fmt)
    if x.dim() < 1:
        raise ValueError("x must have at least one dim (the quantized last dim)")
    _check_last_dim(x, fmt, "x")
    if scale is not None and fmt is not Format.FP8_TENSOR:
        raise ValueError(f"scale= is the static FP8_TENSOR scale; {fmt.name} does not take it")
    if global_scale is not None and fmt is not Format.NVFP4:
        raise ValueError(f"global_scale= is the NVFP4 global scale; {fmt.name} does not take it")
    _check_finite(x, "x")
    B = tuple(x.shape[:-2])

    if fmt is Format.BF16:
        data = x if x.dtype in (torch.bfloat16, torch.float16) else x.to(torch.bfloat16)
        return QuantizedTensor(data, fmt)

    xf = x.float()
    if fmt is Format.FP8_TENSOR:
        if scale is None:
            s = _fp8_dynamic_row_scale(_absmax(xf, tuple(range(xf.dim()))))
        else:
            s = _scalar_tensor(scale, "scale", x, ())
        q = _fp8_values(xf, s)
        return QuantizedTensor(q, fmt, s.expand(B).contiguous())
    if fmt in (Format.FP8_TOKEN, Format.FP8_CHANNEL):
        s = _fp8_dynamic_row_scale(_absmax(xf, -1))
        return QuantizedTensor(_fp8_values(xf, s[..., None]), fmt, s)
    if fmt is Format.FP8_BLOCK:
        C = x.shape[-1]
        xg = xf.reshape(*x.shape[:-1], C // 128, 128)
        s = _fp8_eps_scale(_absmax(xg, -1), _F32_BLOCK_EPS)
        q = _fp8_values(xg, s[..., None]).reshape(x.shape)
        return QuantizedTensor(q, fmt, s, block_rows=1)
    if fmt in (Format.MXFP8, Format.MXFP4):
        data, e = _mx_blocks(xf, fmt)
        return QuantizedTensor(data, fmt, e)
    # NVFP4
    if global_scale is None:
        g = _nvfp4_global_scale(_absmax(xf, tuple(range(xf.dim()))))
    else:
        g = _scalar_tensor(global_scale, "global_scale", x, B)
    g = g.expand(B).contiguous()
    data, s_blk = _nvfp4_blocks(xf, g)
    return QuantizedTensor(data, fmt, s_blk, global_scale=g)


def quantize_weight(w: torch.Tensor, fmt: Format) -> QuantizedTensor:
    """Quantize expert weights ``w [E, N, K]`` (K = the contracted dim) for weight format ``fmt``.

    * ``BF16``: fp16/bf16 kept, fp32 rounded to bf16.
    * ``FP8_TENSOR``: ``s[e] = max(amax_e, 1e-10) / 448`` (scale [E]).
    * ``FP8_CHANNEL``: ``s[e, n] = max(amax_{e,n}, 1e-10) / 448`` (scale [E, N]).
    * ``FP8_BLOCK``: 128 x 128 (N x K) tiles, ``s = max(amax_tile, 1e-10) / 448``, scale
      [E, ceil(N/128), K/128], ``block_rows = 128``; N need not be a multiple of 128 (the last tile
      is partial), K must be.
      All FP8: ``q = e4m3(clamp(w / s, -448, 448))``.
    * ``MXFP8`` / ``MXFP4``: 1 x 32 along K, exactly as :func:`quantize`.
    * ``NVFP4``: 1 x 16 along K with one global scale per expert, ``g[e] = 2688 / max(amax_e,
      NVFP4_MIN_AMAX)`` (global_scale [E]).
    ``FP8_TOKEN`` is an activation format and is rejected.
    """
    _check_float_tensor(w, "w")
    _check_format(fmt)
    if w.dim() != 3:
        raise ValueError(f"w must be [E, N, K] expert weights, got shape {tuple(w.shape)}")
    if fmt is Format.FP8_TOKEN:
        raise ValueError("fmt=FP8_TOKEN is an activation format; use FP8_CHANNEL for per-row weight scales")
    _check_last_dim(w, fmt, "w")
    _check_finite(w, "w")

    if fmt is Format.BF16:
        data = w if w.dtype in (torch.bfloat16, torch.float16) else w.to(torch.bfloat16)
        return QuantizedTensor(data, fmt)
    wf = w.float()
    E, N, K = w.shape
    if fmt is Format.FP8_TENSOR:
        s = _fp8_eps_scale(_absmax(wf, (1, 2)), _F32_WEIGHT_EPS)
        return QuantizedTensor(_fp8_values(wf, s[:, None, None]), fmt, s)
    if fmt is Format.FP8_CHANNEL:
        s = _fp8_eps_scale(_absmax(wf, -1), _F32_WEIGHT_EPS)
        return QuantizedTensor(_fp8_values(wf, s[..., None]), fmt, s)
    if fmt is Format.FP8_BLOCK:
        NB = -(-N // 128)
        wp = torch.zeros((E, NB * 128, K), dtype=torch.float32, device=w.device)
        wp[:, :N] = wf
        tiles = wp.reshape(E, NB, 128, K // 128, 128)
        s = _fp8_eps_scale(_absmax(tiles, (2, 4)), _F32_WEIGHT_EPS)  # [E, NB, K/128]
        q = _fp8_values(tiles, s[:, :, None, :, None]).reshape(E, NB * 128, K)[:, :N]
        return QuantizedTensor(q.contiguous(), fmt, s, block_rows=128)
    if fmt in (Format.MXFP8, Format.MXFP4):
        data, e = _mx_blocks(wf, fmt)
        return QuantizedTensor(data, fmt, e)
    # NVFP4
    g = _nvfp4_global_scale(_absmax(wf, (1, 2)))
    data, s_blk = _nvfp4_blocks(wf, g)
    return QuantizedTensor(data, fmt, s_blk, global_scale=g)


def dequantize(q: QuantizedTensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Dequantize ``q`` to ``dtype`` (computed in fp32, then cast).

    FP8_TENSOR / FP8_TOKEN / FP8_CHANNEL: ``x = float(q) * s`` (s broadcast over the trailing dims);
    FP8_BLOCK: ``x[.., r, c] = float(q) * s[.., r // block_rows, c // 128]``;
    MXFP8 / MXFP4: ``x = v * 2^(e-127)`` (``v`` the E4M3 / E2M1 value);
    NVFP4: ``x = e2m1 * float(s_blk) / g`` (g broadcast over the leading dims); BF16: ``x`` itself.
    """
    if not isinstance(q, QuantizedTensor):
        raise TypeError(f"q must be a fm.QuantizedTensor, got {type(q).__name__}")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
    q = q.linear_values()  # FP4 weights may be stored tiled (QuantizedTensor.value_layout)
    fmt, d, s = q.fmt, q.data, q.scale
    if fmt is Format.BF16:
        return d.to(dtype)
    C = q.shape[-1]
    if fmt in (Format.FP8_TENSOR, Format.FP8_TOKEN, Format.FP8_CHANNEL):
        out = d.float() * _expand_right(s, d.dim())
    elif fmt is Format.FP8_BLOCK:
        se = s.repeat_interleave(128, dim=-1)[..., :C]
        if d.dim() >= 2:
            se = se.repeat_interleave(q.block_rows, dim=-2)[..., : d.shape[-2], :]
        out = d.float() * se
    elif fmt in (Format.MXFP8, Format.MXFP4):
        v = d.float() if fmt is Format.MXFP8 else e2m1_to_float(unpack_fp4(d))
        lead = tuple(v.shape[:-1])
        out = (v.reshape(*lead, C // 32, 32) * ue8m0_decode(s)[..., None]).reshape(*lead, C)
    else:  # NVFP4
        v = e2m1_to_float(unpack_fp4(d))
        lead = tuple(v.shape[:-1])
        vs = v.reshape(*lead, C // 16, 16) * s.float()[..., None]
        out = torch.div(vs, _expand_right(q.global_scale, vs.dim())).reshape(*lead, C)
    return out.to(dtype)
