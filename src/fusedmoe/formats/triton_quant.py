"""Triton activation quantization: :func:`quantize_act`, bit-identical to :func:`fm.quantize
<fusedmoe.formats.reference.quantize>`.

Launch-only: no ``.item()``, no host synchronization, no data-dependent Python control flow, so
it can be captured in a CUDA graph. Dynamic per-tensor scales are reduced on the device (an
``atomic_max`` kernel into a zeroed int32 word) and consumed by the quantization kernel.

Triton's interpreter (``TRITON_INTERPRET=1``, used by the CPU tests) converts fp32 to fp8
incorrectly, so when the kernels are interpreted (or ``x`` is on the CPU) they write the clamped,
scaled fp32 values and this module performs the final round-to-nearest-even ``.to(float8_e4m3fn)``
with torch; on a GPU the kernels cast themselves.

The kernels module is imported on first use, so ``TRITON_INTERPRET`` is honoured when it is set
after ``import fusedmoe`` but before the first call.
"""

from __future__ import annotations

import functools
import os
from typing import Optional

import torch

from ..config import Format
from ..kernels._host import cdiv, e4m3_in_bytes, interpreted, launch, next_pow2
from .reference import _F32_MIN_SCALE, _NVFP4_G_NUM, NVFP4_MIN_AMAX
from .tensor import QuantizedTensor

__all__ = ["quantize_act", "plan_fp8", "Fp8Plan"]

_ACT_FORMATS = (Format.BF16, Format.FP8_TENSOR, Format.FP8_TOKEN, Format.FP8_BLOCK, Format.MXFP8, Format.NVFP4)
_FLOAT_INPUTS = (torch.float16, torch.bfloat16, torch.float32)
_E4M3 = torch.float8_e4m3fn
# dynamic per-tensor FP8 of at most this many elements runs in one program (one launch instead of
# a zero fill, an absmax pass and the quantization); larger tensors use the parallel two-pass path
# (8192-element tiles, at most two loads per pass; H200, Qwen3-30B FP8 one token: 30.3 -> 28.4 us)
_ONE_PROGRAM_ELEMS = 1 << 14
# per-token / per-tensor-scaled rows: a row of up to this many columns (rounded up to a power of
# two) is loaded once and kept in registers (one memory round trip instead of two passes over
# 1024-wide chunks: the decode intermediate, the hidden row); wider rows go in 2048-wide chunks
_ROW_IN_REGISTERS_MAX = 8192
# up to this many rows one program a row (decode: the most programs, each one round trip);
# beyond, programs of about 4096 elements
_ONE_ROW_PER_PROGRAM_MAX = 1024
# x / s of the FP8 quantizers by s's reciprocal and Markstein's correction (``_quant._div_by_scale``:
# one IEEE division per scale instead of one per value, the same bits) where that is proven: compiled
# kernels (the interpreter's fma is not fused; it is also the only place that writes fp32 values, so
# ``out_fp32`` stands for it), 16-bit x (``benchmarks/div_by_reciprocal_check.py`` covers every finite
# bf16 / fp16 value) and dynamic scales (>= FP8_MIN_SCALE / 1e-10 / 448: positive normal numbers; a
# caller's static scale keeps the division). FUSEDMOE_QUANT_RCP_DIV=0 turns it off (A/B runs).
_QUANT_RCP_DIV = os.environ.get("FUSEDMOE_QUANT_RCP_DIV", "1") != "0"


def _rcp_div(x: torch.Tensor, out_fp32: bool) -> bool:
    """Whether a dynamic-scale FP8 quantization of ``x`` divides by reciprocals (``_QUANT_RCP_DIV``)."""
    return _QUANT_RCP_DIV and not out_fp32 and x.dtype in (torch.float16, torch.bfloat16)


def _row_blocks(T: int, C: int) -> "tuple[int, int, int]":
    """(BLOCK_T, BLOCK_C, num_warps) of ``_quant._fp8_rows`` for ``x [T, C]``. Measured on the H200
    (``benchmarks/quant_probe.py --variants``, twenty-first session): one row a program wherever a row
    has >= 2048 columns (49152 x 1856: 113 vs 124 us with two rows; 16384 x 14336: 230 vs 282 us), 8
    warps for decode rows of >= 1024 columns (6 x 1856: 2.9 vs 4.0 us) and for rows of >= 8192 columns
    or in 2048-wide chunks, else 4 (8192 x 2688: 41.9 vs 46.9 us)."""
    block_c = next_pow2(C)
    chunked = block_c > _ROW_IN_REGISTERS_MAX
    if chunked:
        block_c = 2048
    if T <= _ONE_ROW_PER_PROGRAM_MAX:
        return 1, block_c, 8 if block_c >= 1024 else 4
    if block_c >= 2048:  # chunked rows too (2048-wide chunks)
        return 1, block_c, 8 if chunked or block_c >= 8192 else 4
    block_t = min(next_pow2(T), max(1, 4096 // block_c))
    return block_t, block_c, 8 if block_t * block_c >= 8192 else 4


@functools.cache
def _kernels():
    """Imported on first use (so TRITON_INTERPRET set after ``import fusedmoe`` is honoured), then kept."""
    from ..kernels import _quant

    return _quant


def _device_scalar(v, name: str, x: torch.Tensor) -> torch.Tensor:
    """A one-element floating tensor on ``x``'s device, as fp32 [1] (no host sync, no copy
    across devices: a CPU scale for a CUDA ``x`` would force a synchronizing transfer)."""
    if not isinstance(v, torch.Tensor):
        raise TypeError(f"{name} must be a one-element tensor on x's device, got {type(v).__name__}")
    if not v.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {v.dtype}")
    if v.numel() != 1:
        raise ValueError(f"{name} must have exactly one element, got shape {tuple(v.shape)}")
    if v.device != x.device:
        raise ValueError(f"{name} is on {v.device} but x is on {x.device}; move it once, outside the hot path")
    return v.detach().reshape(1).to(torch.float32).contiguous()


def quantize_act(
    x: torch.Tensor,
    fmt: Format,
    *,
    static_scale: Optional[torch.Tensor] = None,
    global_scale: Optional[torch.Tensor] = None,
    amax: Optional[torch.Tensor] = None,
) -> QuantizedTensor:
    """Quantize activations ``x [T, C]`` (fp16 / bf16 / fp32, last dim contiguous) with Triton.

    Formats and formulas are those of :func:`fusedmoe.formats.reference.quantize`, bit for bit:

    * ``FP8_TENSOR``: ``static_scale`` (one-element tensor on ``x``'s device, dequant convention
      ``x ~= q * s``), or dynamic ``s = max(amax(x) / 448, FP8_MIN_SCALE)`` reduced on the device;
      scale fp32 0-dim.
    * ``FP8_TOKEN``: ``s[t] = max(amax_t / 448, FP8_MIN_SCALE)``; scale fp32 [T].
    * ``FP8_BLOCK``: 1 x 128 groups, ``s = max(amax_g, 1e-10) / 448``; scale fp32 [T, C/128].
    * ``MXFP8``: 1 x 32 groups, UE8M0 ``e = ue8m0_ceil(amax_g / 448)``; scale uint8 [T, C/32].
    * ``NVFP4``: ``global_scale`` g (one-element tensor on ``x``'s device) or, when not given,
      ``g = 2688 / max(amax(x), 2^-100)`` computed on the device; data uint8 [T, C/2], block
      scales E4M3 [T, C/16], global scale fp32 0-dim.
    * ``BF16``: ``x`` is returned as is (fp32 ``x`` is rounded to bf16).

    ``amax`` (dynamic ``FP8_TENSOR`` and ``NVFP4`` only): an int32 [1] tensor on ``x``'s device
    holding the bits of ``max |x|`` already reduced (non-negative floats order as ints -- what a
    GEMM1 epilogue accumulates with ``atomic_max``, ``kernels/_moe_gemm._atomic_amax``); the
    whole-tensor absmax pass is skipped, and only rows that went into it need to be meaningful
    (others are quantized but do not move the scale).

    Used for the MoE input and for the re-quantized intermediate alike. NaN / inf in ``x`` give
    unspecified output (nothing is checked: that would synchronize the host).
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _FLOAT_INPUTS:
        raise TypeError(f"x must be float16, bfloat16 or float32, got {x.dtype}")
    if not isinstance(fmt, Format):
        raise TypeError(f"fmt must be a fm.Format, got {fmt!r}")
    if fmt not in _ACT_FORMATS:
        raise ValueError(
            f"fmt={fmt!r} is not an activation format quantize_act supports; expected one of "
            f"{[f.name for f in _ACT_FORMATS]}"
        )
    if x.dim() != 2:
        raise ValueError(f"x must be [T, C], got shape {tuple(x.shape)}")
    T, C = x.shape
    b = fmt.block_size
    if b and C % b:
        raise ValueError(f"x: the last dim ({C}) must be a multiple of {b} for {fmt.name}")
    if static_scale is not None and fmt is not Format.FP8_TENSOR:
        raise ValueError(f"static_scale is the FP8_TENSOR scale; {fmt.name} does not take it")
    if global_scale is not None and fmt is not Format.NVFP4:
        raise ValueError(f"global_scale is the NVFP4 global scale; {fmt.name} does not take it")
    if amax is not None:
        if fmt not in (Format.FP8_TENSOR, Format.NVFP4) or static_scale is not None or global_scale is not None:
            raise ValueError(f"amax is the precomputed max |x| of a dynamic FP8_TENSOR / NVFP4 scale; "
                             f"{fmt.name}{' with a given scale' if fmt in (Format.FP8_TENSOR, Format.NVFP4) else ''} "
                             f"does not take it")
        if not isinstance(amax, torch.Tensor) or amax.dtype != torch.int32 or amax.numel() != 1:
            raise ValueError(f"amax must be an int32 tensor of one element (the bits of max |x|), got "
                             f"{amax.dtype if isinstance(amax, torch.Tensor) else type(amax).__name__} "
                             f"{tuple(amax.shape) if isinstance(amax, torch.Tensor) else ''}")
        if amax.device != x.device:
            raise ValueError(f"amax must be on x's device ({x.device}), got {amax.device}")
    if fmt is Format.BF16:
        return QuantizedTensor(x if x.dtype != torch.float32 else x.to(torch.bfloat16), fmt)
    if C > 1 and x.stride(1) != 1:
        raise ValueError(f"x must have a contiguous last dim (stride 1), got strides {tuple(x.stride())}")

    k = _kernels()
    interp = interpreted(k._fp8_row_kernel)
    if x.device.type == "cpu" and not interp:
        raise ValueError(
            "x is on the CPU but the Triton kernels are compiled for a GPU: set TRITON_INTERPRET=1 "
            "before the first quantize_act call to interpret them, or use fm.quantize (the torch reference)"
        )
    dev = x.device
    out_fp32 = interp or e4m3_in_bytes(x.device)  # (no E4M3 type below sm_89: torch rounds the fp32 values)
    vdtype = torch.float32 if out_fp32 else _E4M3
    empty = T == 0 or C == 0

    if not empty and amax is None:
        plan = plan_fp8(x, fmt, static_scale=static_scale, out_fp32=out_fp32)
        if plan is not None:
            plan.launch(k)
            return plan.result()

    if fmt in (Format.FP8_TENSOR, Format.FP8_TOKEN):
        # left here: empty tensors, and the dynamic per-tensor scale (amax over the whole tensor first)
        q = torch.empty((T, C), dtype=vdtype, device=dev)
        if fmt is Format.FP8_TOKEN:
            return QuantizedTensor(_finish(q, out_fp32), fmt, torch.full((T,), _F32_MIN_SCALE, device=dev))
        if static_scale is not None:
            return QuantizedTensor(_finish(q, out_fp32), fmt, _device_scalar(static_scale, "static_scale", x).reshape(()))
        s = torch.empty((1,), dtype=torch.float32, device=dev)
        if empty:
            s.fill_(_F32_MIN_SCALE)
        elif T * C <= _ONE_PROGRAM_ELEMS and amax is None:
            # small tensor (decode): amax and quantization in one program, one launch
            one_tile = next_pow2(T) * next_pow2(C) <= _ONE_PROGRAM_ELEMS
            if one_tile:
                bc, bt = next_pow2(C), next_pow2(T)
            else:
                bc = min(next_pow2(C), 2048)
                bt = min(next_pow2(T), max(1, 8192 // bc))
            launch(k._fp8_tensor_one_program_kernel, (1,),
                x, q, s, T, C, x.stride(0), q.stride(0), OUT_FP32=out_fp32, BLOCK_T=bt, BLOCK_C=bc,
                RCP_DIV=_rcp_div(x, out_fp32),
                ONE_TILE=one_tile, num_warps=16 if bt * bc > 8192 else 8,
            )
        else:
            if amax is None:
                amax = torch.zeros((1,), dtype=torch.int32, device=dev)
                _launch_absmax(k, x, amax)
            bt, bc, warps = _row_blocks(T, C)
            launch(k._fp8_row_kernel, (cdiv(T, bt),),
                x, q, s, amax, T, C, x.stride(0), q.stride(0),
                SCALE_MODE=1, OUT_FP32=out_fp32, BLOCK_T=bt, BLOCK_C=bc, num_warps=warps,
                RCP_DIV=_rcp_div(x, out_fp32),
            )
        return QuantizedTensor(_finish(q, out_fp32), fmt, s.reshape(()))

    if fmt in (Format.FP8_BLOCK, Format.MXFP8):  # left here: empty tensors
        q = torch.empty((T, C), dtype=vdtype, device=dev)
        s = torch.empty((T, C // b), dtype=torch.uint8 if fmt is Format.MXFP8 else torch.float32, device=dev)
        return QuantizedTensor(_finish(q, out_fp32), fmt, s, block_rows=1)

    # NVFP4
    NB = C // 16
    q = torch.empty((T, C // 2), dtype=torch.uint8, device=dev)
    s = torch.empty((T, NB), dtype=torch.float32 if out_fp32 else _E4M3, device=dev)
    if global_scale is not None:
        g = _device_scalar(global_scale, "global_scale", x)
        g_src, g_from_amax = g, False
    else:
        given = amax is not None
        if not given:
            amax = torch.zeros((1,), dtype=torch.int32, device=dev)
        g = torch.empty((1,), dtype=torch.float32, device=dev)
        if empty:
            torch.div(
                torch.full((1,), _NVFP4_G_NUM, dtype=torch.float32, device=dev),
                torch.full((1,), NVFP4_MIN_AMAX, dtype=torch.float32, device=dev),
                out=g,
            )
        elif not given:
            _launch_absmax(k, x, amax)
        g_src, g_from_amax = amax, True
    if not empty:
        BLOCK_G = min(next_pow2(NB), 64)
        BLOCK_T = min(next_pow2(T), max(1, 1024 // (BLOCK_G * 16)))
        grid = (cdiv(T, BLOCK_T), cdiv(NB, BLOCK_G))
        launch(k._nvfp4_kernel, grid,
            x, q, s, g_src, g, T, C, x.stride(0), q.stride(0), s.stride(0),
            G_FROM_AMAX=g_from_amax, OUT_FP32=out_fp32, BLOCK_T=BLOCK_T, BLOCK_G=BLOCK_G,
        )
    return QuantizedTensor(q, fmt, _finish(s, out_fp32), global_scale=g.reshape(()))


class Fp8Plan:
    """One single-kernel FP8 quantization of ``x`` with its outputs allocated, not yet launched:
    ``_fp8_row_kernel`` (``groups`` False: static per-tensor scale ``src`` or per-token scales) or
    ``_fp8_group_kernel`` (``groups``: 1 x ``group`` blocks). :meth:`launch` runs it alone;
    ``kernels/_align._align_scatter_quant_kernel`` runs the same programs inside the decode align
    launch (:meth:`fused_args`). Afterwards :meth:`result` is the quantized tensor."""

    __slots__ = ("fmt", "groups", "x", "q", "s", "src", "mode", "group", "block_t", "block_c", "grid", "out_fp32",
                 "num_warps", "rows", "rcp_div")

    def __init__(self, fmt, groups, x, q, s, src, mode, group, block_t, block_c, grid, out_fp32, num_warps=4,
                 rows=None):
        self.fmt, self.groups, self.x, self.q, self.s, self.src = fmt, groups, x, q, s, src
        self.mode, self.group, self.block_t, self.block_c, self.grid, self.out_fp32 = (
            mode, group, block_t, block_c, grid, out_fp32)
        self.num_warps = num_warps  # the warps its programs want (the fused align launch takes the larger)
        self.rows = rows  # groups only: None, or int32 [1] on the device, the rows to quantize
        # x / s by reciprocals: dynamic scales only (mode 2 per token, or the groups); a static scale divides
        self.rcp_div = (groups or mode != 0) and _rcp_div(x, out_fp32)

    @property
    def programs(self) -> int:
        return self.grid[0] * self.grid[1]

    def launch(self, k) -> None:
        """Launch the quantizer kernel of ``kernels/_quant`` (module ``k``) alone."""
        x, q, s = self.x, self.q, self.s
        T, C = x.shape
        if self.groups:
            has_rows = self.rows is not None
            launch(k._fp8_group_kernel, self.grid,
                x, q, s, T, C, x.stride(0), q.stride(0), s.stride(0), self.rows if has_rows else s,
                GROUP=self.group, MX=self.fmt is Format.MXFP8, OUT_FP32=self.out_fp32, BLOCK_T=self.block_t,
                BLOCK_G=self.block_c, ROWS_FROM_PTR=has_rows, RCP_DIV=self.rcp_div, num_warps=self.num_warps,
            )
        else:
            launch(k._fp8_row_kernel, self.grid[:1],
                x, q, s, self.src, T, C, x.stride(0), q.stride(0),
                SCALE_MODE=self.mode, OUT_FP32=self.out_fp32, BLOCK_T=self.block_t, BLOCK_C=self.block_c,
                RCP_DIV=self.rcp_div, num_warps=self.num_warps,
            )

    def run(self) -> QuantizedTensor:
        """:meth:`launch` with this module's kernels, then :meth:`result`."""
        self.launch(_kernels())
        return self.result()

    def fused_args(self):
        """(runtime arguments from ``x_ptr`` on, constexprs) of this quantizer's part of
        ``kernels/_align._align_scatter_quant_kernel``."""
        if self.rows is not None:
            raise ValueError("Fp8Plan: a plan with a device row count runs alone (launch), not in the align launch")
        x, q, s = self.x, self.q, self.s
        T, C = x.shape
        return (x, q, s, self.src, T, C, x.stride(0), q.stride(0), s.stride(0) if self.groups else 0, self.grid[1]), dict(
            GROUPS=self.groups, SCALE_MODE=self.mode, GROUP=self.group, MX=self.fmt is Format.MXFP8,
            OUT_FP32=self.out_fp32, BLOCK_T=self.block_t, BLOCK_C=self.block_c, RCP_DIV=self.rcp_div)

    def result(self) -> QuantizedTensor:
        q = _finish(self.q, self.out_fp32)
        if self.groups:
            return QuantizedTensor(q, self.fmt, self.s, block_rows=1)
        return QuantizedTensor(q, self.fmt, self.s if self.fmt is Format.FP8_TOKEN else self.s.reshape(()))


def plan_fp8(x: torch.Tensor, fmt: Format, *, static_scale=None, out_fp32: bool = False,
             rows: Optional[torch.Tensor] = None) -> "Optional[Fp8Plan]":
    """The single-kernel FP8 quantizations of a non-empty ``x [T, C]`` (already validated by
    :func:`quantize_act`): ``FP8_TENSOR`` with a static scale, ``FP8_TOKEN``, ``FP8_BLOCK`` and
    ``MXFP8``, planned (outputs allocated) but not launched; None for the others (a dynamic
    per-tensor scale needs the whole tensor's amax first; NVFP4). ``rows`` (``FP8_BLOCK`` / ``MXFP8``
    groups): an int32 [1] tensor on x's device -- only the first ``rows[0]`` rows are quantized (a
    block-padded intermediate whose rows in use only the device knows); the values and scales of the
    other rows are left unset."""
    T, C = x.shape
    dev = x.device
    if rows is not None:
        if fmt not in (Format.FP8_BLOCK, Format.MXFP8):
            raise ValueError(f"rows: a device row count is taken by the group formats (FP8_BLOCK, MXFP8), not {fmt.name}")
        if rows.dtype != torch.int32 or rows.numel() != 1 or rows.device != dev:
            raise ValueError(f"rows must be an int32 tensor of one element on {dev}, got {rows.dtype} "
                             f"{tuple(rows.shape)} on {rows.device}")
    if fmt is Format.FP8_TOKEN or (fmt is Format.FP8_TENSOR and static_scale is not None):
        q = torch.empty((T, C), dtype=torch.float32 if out_fp32 else _E4M3, device=dev)
        block_t, block_c, warps = _row_blocks(T, C)
        if fmt is Format.FP8_TOKEN:
            s = torch.empty((T,), dtype=torch.float32, device=dev)
            mode = 2
        else:
            s = _device_scalar(static_scale, "static_scale", x)
            mode = 0
        return Fp8Plan(fmt, False, x, q, s, s, mode, 1, block_t, block_c, (cdiv(T, block_t), 1), out_fp32, warps)
    if fmt in (Format.FP8_BLOCK, Format.MXFP8):
        G = fmt.block_size
        NG = C // G
        q = torch.empty((T, C), dtype=torch.float32 if out_fp32 else _E4M3, device=dev)
        s = torch.empty((T, NG), dtype=torch.uint8 if fmt is Format.MXFP8 else torch.float32, device=dev)
        block_g = min(next_pow2(NG), max(1, 1024 // G))
        block_t = min(next_pow2(T), max(1, 2048 // (block_g * G)))
        return Fp8Plan(fmt, True, x, q, s, s, 0, G, block_t, block_g, (cdiv(T, block_t), cdiv(NG, block_g)), out_fp32,
                       rows=rows)
    return None


def _launch_absmax(k, x: torch.Tensor, amax: torch.Tensor) -> None:
    T, C = x.shape
    BLOCK_C = min(next_pow2(C), 1024)
    BLOCK_T = min(next_pow2(T), max(1, 4096 // BLOCK_C))
    grid = (cdiv(T, BLOCK_T), cdiv(C, BLOCK_C))
    launch(k._absmax_kernel, grid, x, amax, T, C, x.stride(0), BLOCK_T=BLOCK_T, BLOCK_C=BLOCK_C)


def _finish(v: torch.Tensor, out_fp32: bool) -> torch.Tensor:
    """Interpreted kernels wrote clamped fp32 values: round them to E4M3 (RNE) with torch."""
    return v.to(_E4M3) if out_fp32 else v
