"""Launchers of the Triton MoE expert kernels: :func:`triton_experts`.

One forward (slot x = t*K + k; E = E_loc local experts; I = I_pad):

    [quantize_act(hidden)]          quantized activation formats only (formats/triton_quant.py);
                                    at T*K <= 256 the one-pass FP8 ones run in the align launch
    align                           sort slots by local expert, pad groups to BLOCK_M
                                    (1 launch if T*K <= 256, else 2)
    GEMM1 + bias + act (+ quant)    -> intermediate [T*K, I] (slot-indexed), rounded to hidden's
                                    dtype, then quantized in the same epilogue for a static FP8
                                    per-tensor scale, 1x128 FP8 groups, 1x32 MXFP8 groups, or
                                    NVFP4 with a static global scale
    [quantize_act(intermediate)]    FP8 per-token, dynamic FP8 per-tensor, dynamic NVFP4 (one
                                    global scale over the local intermediate), or FP8 block / MXFP8
                                    when GEMM1's block_n does not hold whole groups
    GEMM2 + bias + routing weight   -> y [T*K, H] in hidden's dtype (K = 1: straight into out)
    combine                         out[t] = sum_k y[t*K + k] in fp32 (skipped for K = 1)

FP8 per tensor / per channel prefill on sm_90 (``KernelConfig.warp_specialized``, chosen by the
heuristic from 256 rows per expert with an intermediate of 512+, or by the tuned table): either GEMM
runs as the Gluon kernel of ``kernels/_ws_gemm.py`` (a TMA loader warp, two MMA warpgroups, same
promoted accumulation); its input rows are first gathered into block-padded slot order
(``_align._gather_slot_rows_kernel``: one launch and P x K bytes more per GEMM), its output is the
same slot-indexed tensor -- except when both GEMMs are and nothing but a 1 x 128 group quantization
runs between them (static FP8 or 16-bit intermediate; FP8 blocks, quantized over the rows in use;
``set_ws_padded_handoff``): GEMM1 then stores in block-padded row order and GEMM2 reads that
without a gather.

MXFP4 weights x BF16 activations at prefill on sm_90 (the chosen config has block_m >= 128; ``set_ws_fp4``):
both GEMMs run as the Gluon kernel of ``kernels/_ws_fp4.py`` (a TMA loader warp, two consumer warpgroups that
dequantize their half of the weight tile into shared memory while the other's wgmma runs; swap-AB tiles of
128 or 256 token rows), after the same gather; output by slot as above.

Block-scaled weights (NVFP4, MXFP4, MXFP8; Hopper has no FP4 or micro-scaled MMA) are read in
the linear ``QuantizedTensor`` layout and converted in registers inside both GEMMs
(``kernels/_blockscaled.py``); activation formats per weight format are
``Format.allowed_activation_formats()``:

    weights  activations (GEMM1 input = GEMM2 input)  MMA (bf16 hidden; fp32 accumulation)
    NVFP4    BF16 (W4A16, natural)                    bf16: e2m1*s_blk x hidden; / g_w in the epilogue
             FP8_TENSOR (W4A8)                        bf16: e2m1*s_blk x e4m3 (both exact); * a_s / g_w
             NVFP4 (W4A4, TRTLLM-Gen numerics)        bf16: e2m1*s_blk on both sides; / (g_a g_w)
    MXFP4    BF16 (natural)                           bf16: e2m1*2^e x hidden
             MXFP8                                    bf16, both sides dequantized (the E4M3 path below
                                                      only where set_mx_e4m3_dot asks for MXFP4)
    MXFP8    MXFP8                                    decode (block_m <= 32): E4M3 MMA per 32-block,
                                                      partial sums * 2^ea 2^ew; larger tiles: bf16, both
                                                      sides dequantized

fp16 hidden: W4A16 multiplies fp16 (NVFP4) or fp32 operands with TF32 (MX: power-of-two scales may
leave fp16's range; fp16 and e2m1*2^e are exact in TF32); the interpreter multiplies fp32.

Weight layout: the kernels read the checkpoint's linear layout (no cache, no repacking of the
values): values [E, N, K/2] packed (FP4, element 2i in the low nibble) or [E, N, K] (E4M3), scales
[E, N, K/G] (G = 16 NVFP4, 32 MX), NVFP4 global scales [E]; K (the contracted dim) contiguous. A
[BLOCK_N, BLOCK_K] weight tile is BLOCK_N rows of BLOCK_K/2 contiguous bytes (64 B at BLOCK_K =
128: whole 32-byte sectors) plus BLOCK_N rows of BLOCK_K/G scale bytes. Block scales may also be
K-major (stride 1 along N, ``QuantizedTensor.k_major_scales``): then a tile's scales are BLOCK_K/G
runs of BLOCK_N contiguous bytes -- coalesced, and prefetched by Triton's pipeline once they reach
4 bytes per thread. ``ExpertWeights`` stores NVFP4 scales K-major and MX scales row-major (where
each layout measured faster: the comment in ``ExpertWeights.__post_init__``). The layout a Hopper
register-operand MMA wants (each thread's K pairs contiguous) is obtained without repacking: both
operands are permuted identically along K inside the kernel (``_blockscaled._dot_order``), which a
dot does not notice, and each thread then reads 16 contiguous bytes per row. Gated GEMM1 reads the
gate and the up rows from the two halves of w13 (rows [0, I_pad) and [I_pad, 2 I_pad)), no row
interleave, as one joined [2 BLOCK_N, BLOCK_K] tile at decode and for NVFP4
(``kernel_configs.join_gate_up``), else as two tiles in turn. Intermediate sizes that are not
multiples of the scale block are zero-padded per half by ``ExpertWeights.from_float`` (alignment
>= the block, e.g. I = 48 -> 64 for MX), which leaves results unchanged (zero rows / columns add
exact zeros and never raise a block scale).

Launches per forward at decode (T*K <= 256): BF16, NVFP4 x BF16, MXFP4 x BF16 4 (3 when K = 1);
FP8 per-tensor static, FP8 block, MXFP8 activations 4 (3 when K = 1: hidden is quantized in the
align launch, ``_ALIGN_QUANT``); FP8 per-token 5; NVFP4 x NVFP4 with static scales 7 (two of them
the 1-element reciprocals g = 1/a); dynamic per-tensor FP8 (incl. NVFP4 x FP8) 6, dynamic NVFP4 8
(these also zero-fill the intermediate). Prefill adds one
(the two-kernel align); the opt-in atomic combine replaces the combine kernel by a zero-fill of the
output. Nothing synchronizes the host or depends on data values on the host: all sizes come from
shapes, so a forward can be captured in a CUDA graph.

Numerics (docs/semantics.md 7; matches ``fm.reference_moe`` to rounding): fp32 accumulation;
dequant scales in the GEMM epilogues (per K-block for FP8 block); weight-on-input before the
bias; activation in fp32, rounded to hidden's dtype, then re-quantized exactly like
``fm.quantize``. **The per-slot output y is stored in hidden's dtype** before the fp32 combine
(one extra rounding per slot compared with the reference, which sums fp32 values).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from typing import Any, Mapping, Optional, Union

import torch
import triton.language as tl

from ..config import Activation, ActivationParams, Format
from ..formats import QuantizedTensor, quantize_act
from ..formats.triton_quant import Fp8Plan, plan_fp8
from ..kernels import _blockscaled as _bs
from ..kernels import _host
from ..kernels._host import cdiv, interpreted, launch, next_pow2
from .kernel_configs import (KernelConfig, MoEKernelConfig, TunedTable, auto_persistent, choose_moe_config,
                             held_a_problem, join_gate_up, k_loop_stages, triton_tile, warp_specialized_problem,
                             ws_block_scale_problem, WS_FP4_FORMATS,
                             WS_FP4_BLOCK_KS, WS_FP4_BLOCK_MS, WS_FP4_DEC_BLOCK_M, ws_fp4_config, ws_fp4_dec_config,
                             ws_dynamic_tiles_auto, ws_x_gather_auto,
                             WS_DEC_BLOCK_M, WS_FORMATS, WS_PROMOTED_FORMATS, ws_dec_block_k, ws_dec_config,
                             ws_dec_max_blocks,
                             ws_dec_stage_bytes, ws_dec_max_stages, ws_fp4_dec_stage_bytes, WS_DEC_CTAS,
                             set_table_siblings)

__all__ = ["triton_experts", "align_slots", "AlignResult"]

# the tuned entries of a sibling GPU (kernel_configs.table_devices; kernel_configs reads no environment variables)
if os.environ.get("FUSEDMOE_TABLE_SIBLINGS", "1") == "0":
    set_table_siblings(False)

_DEFAULT_ACT_PARAMS = ActivationParams()  # frozen: one instance serves every call without params

_SUPPORTED_WEIGHTS = (Format.BF16, Format.FP8_TENSOR, Format.FP8_CHANNEL, Format.FP8_BLOCK, Format.NVFP4,
                      Format.MXFP4, Format.MXFP8)
_ACT_FOR_WEIGHT = {
    Format.BF16: (Format.BF16,),
    Format.FP8_TENSOR: (Format.FP8_TENSOR,),
    Format.FP8_CHANNEL: (Format.FP8_TOKEN,),
    Format.FP8_BLOCK: (Format.FP8_BLOCK,),
    Format.NVFP4: Format.NVFP4.allowed_activation_formats(),  # BF16, FP8_TENSOR, NVFP4
    Format.MXFP4: Format.MXFP4.allowed_activation_formats(),  # BF16, MXFP8
    Format.MXFP8: Format.MXFP8.allowed_activation_formats(),  # MXFP8
}
# block-scaled weight formats: the Q_MICRO family of kernels/_moe_gemm.py
_MICRO_WEIGHTS = (Format.NVFP4, Format.MXFP4, Format.MXFP8)
# operand formats of the Q_MICRO family (kernels/_blockscaled.py: F_PLAIN ... F_MXFP8)
_F_CODE = {Format.BF16: 0, Format.FP8_TENSOR: 1, Format.NVFP4: 2, Format.MXFP4: 3, Format.MXFP8: 4}
# activation formats whose static scale (dequant convention) the weights may carry
_STATIC_ACT = (Format.FP8_TENSOR, Format.NVFP4)
# CUDA, bf16 MMA operands: E2M1 -> bf16 by the nibble-aligned converter (packed FP4 read as 16-bit
# words, kernels/_blockscaled._e2m1x4_bf16_nib; NVFP4's exponent restore folded into its block
# scale) and the block scale multiplied in bf16; MXFP8 e4m3 -> bf16 times 2^k in bf16.
# Bit-identical to the portable fp32 path by construction (exact products, same K order); checked
# on the GPU by test_triton_fp4's gpu tests.
_FAST_CVT = True
# Decode (T*K <= _SINGLE_ALIGN_MAX: the align is one program): the FP8 quantizations of hidden that
# are one kernel (static per tensor, per token, 1 x 128 groups, MXFP8) run in the align's launch,
# in programs of their own (kernels/_align._align_scatter_quant_kernel): the same bits, one launch
# fewer (tests switch it off to compare).
_ALIGN_QUANT = True
_FP8_ACT = (Format.FP8_TENSOR, Format.FP8_TOKEN, Format.FP8_BLOCK, Format.MXFP8)


def _nib_view(t: torch.Tensor, on: bool) -> torch.Tensor:
    """Packed FP4 storage (uint8) as the 16-bit words the fast E2M1 converter reads (``on``); other
    operands unchanged."""
    return t.view(torch.int16) if on and t.dtype == torch.uint8 else t


# FUSEDMOE_MX_FOLD=0: the restore multiply everywhere (A/B runs in separate processes)
_MX_FOLD = {"enabled": os.environ.get("FUSEDMOE_MX_FOLD", "1") != "0"}


def set_mx_fold(enabled: bool) -> bool:
    """MXFP4 weights with a known ``scale_code_range`` in [11, 144] (``ExpertWeights`` measures it):
    fold the E2M1 converter's 2^126 into the block scale (``kernels/_blockscaled.MX_FOLD``; on by
    default, same bits). Off: the converter restores each value with a bf16x2 multiply (A/B runs).
    Returns the previous setting."""
    return _swap_bool(_MX_FOLD, enabled)


def _mx_fold_cvt(w: QuantizedTensor, fast: bool, mxdot: bool = False):
    """FAST_CVT of one GEMM: ``fast``, or ``_blockscaled.MX_FOLD`` (2) for MXFP4 weights whose
    nonzero blocks' scale codes all lie in [MX_FOLD_CODE_MIN, MX_FOLD_CODE_MAX] on the dequantizing
    path (the E4M3 partial-sum path of ``mxdot`` keeps ``fast``: its own fast converter, no fold)."""
    r = w.scale_code_range
    if (fast and not mxdot and _MX_FOLD["enabled"] and w.fmt is Format.MXFP4 and r is not None
            and _bs.MX_FOLD_CODE_MIN <= r[0] and r[1] <= _bs.MX_FOLD_CODE_MAX):
        return 2
    return fast


# Activations stored in the dot order (A_PERMUTED): OPT-IN (FUSEDMOE_A_DOT_ORDER=auto: MXFP4 weights; 1: NVFP4 too;
# g1 / g2: one GEMM, both formats). H200, twenty-fifth session (BENCHMARKS.md section 0): MXFP4 prefill at 4096 tokens
# 1.08-1.17x faster with both GEMMs so (Nemotron-3-Super / -Nano), gpt-oss 0.94-1.03x, NVFP4 0.95-1.02x, 64-row tiles
# neutral to 0.72x. Not on by default for two wrong results seen with it, both in Triton 3.6's pipelining of a token
# tile that wgmma reads in place from the cp.async buffer: a swapped GEMM of two warpgroups (swap_ab, 8 warps: both
# read that tile) gave different results from run to run (gpt-oss-120b GEMM1, 17 of 60 runs: such tiles never take
# it), and gpt-oss-sized MXFP4 weights at 512 tokens with scale rows NOT padded to 16 bytes (ExpertWeights pads them;
# a test bypasses that) gave NaN (test_gpu_padded_scale_rows_same_bits).
_A_DOT_ORDER_ENV = os.environ.get("FUSEDMOE_A_DOT_ORDER", "0")
_A_DOT_ORDER = {"gemm1": _A_DOT_ORDER_ENV in ("auto", "1", "g1"), "gemm2": _A_DOT_ORDER_ENV in ("auto", "1", "g2"),
                "formats": frozenset({Format.MXFP4} if _A_DOT_ORDER_ENV == "auto" else {Format.MXFP4, Format.NVFP4}),
                "min_block_m": 128}


def set_act_dot_order(enabled: bool, gemm2: Optional[bool] = None, formats=None,
                      min_block_m: Optional[int] = None) -> tuple:
    """FP4 weights x 16-bit activations at prefill tiles (block_m >= 128): hidden is copied once into the dot order
    of GEMM1's K steps (``_blockscaled.to_dot_order``) and GEMM1's epilogue stores the intermediate in the dot order
    of GEMM2's, so that neither GEMM permutes its activation tile in registers (``A_PERMUTED``; same bits: the same
    products added in the same order). Off by default (two wrong results seen with it: the comment above
    ``_A_DOT_ORDER_ENV``); ``set_act_dot_order(True, formats=("mxfp4",))`` is the measured-faster setting.
    ``gemm2``: GEMM2's setting where it differs from GEMM1's; ``formats``: the weight formats (None: unchanged).
    Swapped GEMMs of more than 4 warps never take it. ``min_block_m``: the smallest token tile that takes it (None:
    unchanged; default 128, prefill tiles; 16 lets decode tiles take it too -- measured only). Returns the previous
    (gemm1, gemm2, formats, min_block_m), which this function also takes back (``set_act_dot_order(*prev)``)."""
    prev = (_A_DOT_ORDER["gemm1"], _A_DOT_ORDER["gemm2"], _A_DOT_ORDER["formats"], _A_DOT_ORDER["min_block_m"])
    _A_DOT_ORDER["gemm1"] = bool(enabled)
    _A_DOT_ORDER["gemm2"] = bool(enabled if gemm2 is None else gemm2)
    if formats is not None:
        _A_DOT_ORDER["formats"] = frozenset(Format(f) for f in formats)
    if min_block_m is not None:
        _A_DOT_ORDER["min_block_m"] = int(min_block_m)
    return prev


def _dot_order_ok(c: KernelConfig, wfmt: Format, k: int, k_tail: int, gemm: str) -> bool:
    """Whether a GEMM of the block-scaled family with this config loads 16-bit activations stored in the dot order
    (``A_PERMUTED``): switched on for this format, FP4 weights' KPERM 3 order, a prefill tile, whole K steps (or n
    steps and a tail), and not a swapped tile of two warpgroups (a race, see above)."""
    return (_A_DOT_ORDER[gemm] and wfmt in _A_DOT_ORDER["formats"] and c.block_m >= _A_DOT_ORDER["min_block_m"]
            and _k_order(wfmt, c.block_k) == 3 and (k % c.block_k == 0 or k_tail > 0)
            and not (c.swap_ab and c.num_warps > 4) and not c.warp_specialized)


def _k_order(wfmt: Format, block_k: int) -> int:
    """KPERM of one GEMM (kernels/_blockscaled._dot_order) for block-scaled weights: FP4 the E2M1
    converter's own pair order (3; 2 for tiles narrower than 32), in the portable path too so that
    both add the same products in the same order (bit-identical results); MXFP8 1."""
    if wfmt in (Format.NVFP4, Format.MXFP4):
        return 3 if block_k >= 32 else 2
    return 1


_MXDOT_MAX_BLOCK_M = 32
# weight formats whose MXFP8-activation decode tiles take the E4M3 partial-sum path (``mxdot``); the others
# dequantize both tiles to bf16 as at prefill. H200, 25th session (BENCHMARKS.md section 0): MXFP8 weights 1.0-1.19x
# faster with it, MXFP4 weights 1.25-1.82x faster without it (on the swizzled words). FUSEDMOE_MXDOT_FORMATS=
# mxfp4,mxfp8 / "none" (A/B runs in separate processes)
_MXDOT_FORMATS = {"formats": frozenset(
    Format(f.strip()) for f in os.environ.get("FUSEDMOE_MXDOT_FORMATS", "mxfp8").split(",")
    if f.strip() and f.strip() != "none")}


def mx_e4m3_dot_formats() -> frozenset:
    """The weight formats whose decode tiles with MXFP8 activations run the E4M3 partial-sum path (default: MXFP8)."""
    return _MXDOT_FORMATS["formats"]


def set_mx_e4m3_dot(formats) -> frozenset:
    """Weight formats (of MXFP4, MXFP8) whose decode tiles (block_m <= 32) with MXFP8 activations run
    E4M3 MMAs per 32-block with scaled partial sums instead of dequantizing both tiles to bf16 (default: MXFP8
    only). Both are exact products summed in fp32 (results agree to accumulation order, not bit for bit).
    ``ExpertWeights.for_activation_format`` follows the MXFP4 setting (plain nibbles for the E4M3 path).
    Returns the previous set."""
    new = frozenset(Format(f) for f in formats)
    bad = new - {Format.MXFP4, Format.MXFP8}
    if bad:
        raise ValueError("set_mx_e4m3_dot: only mxfp4 / mxfp8 weights have the E4M3 path, got "
                         f"{sorted(f.value for f in bad)}")
    prev = _MXDOT_FORMATS["formats"]
    _MXDOT_FORMATS["formats"] = new
    return prev


_ACT_CODE = {
    Activation.SWIGLU: 0,
    Activation.GEGLU: 1,
    Activation.SWIGLU_OAI: 2,
    Activation.RELU2: 3,
    Activation.GELU: 4,
    Activation.SILU: 5,
    Activation.RELU: 6,
    Activation.IDENTITY: 7,
}
# quantized operand pairs (kernels/_moe_gemm.py: Q_NONE, Q_TENSOR, Q_ROW, Q_BLOCK)
_QUANT_CODE = {Format.BF16: 0, Format.FP8_TENSOR: 1, Format.FP8_CHANNEL: 2, Format.FP8_BLOCK: 3,
               Format.NVFP4: 4, Format.MXFP4: 4, Format.MXFP8: 4}
_OUT_PLAIN, _OUT_FP8_STATIC, _OUT_FP8_BLOCK, _OUT_MXFP8, _OUT_NVFP4, _OUT_PLAIN_AMAX = 0, 1, 2, 3, 4, 5
_TL_DTYPE = {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16, torch.float32: tl.float32}
_E4M3 = torch.float8_e4m3fn

# T*K up to this: the whole align in one program (one launch). The in-program sort grows as
# n log^2 n: on an H200 one program takes 1.9 us for 8 slots but 10.5 us for 1024, so larger
# inputs take the two-kernel path with 256-slot chunks.
_SINGLE_ALIGN_MAX = 256
_ALIGN_CHUNK = 256  # slots per program of the two-kernel align


@functools.cache
def _kernels():
    """Imported on first use, so TRITON_INTERPRET set after ``import fusedmoe`` is honoured (kept
    afterwards: an import statement per call costs microseconds of host time)."""
    from ..kernels import _align, _combine, _moe_gemm

    return _align, _moe_gemm, _combine


def _compute_dtype(hidden_dtype: torch.dtype, wfmt: Format, act_format: Format, interp: bool):
    """(MMA operand dtype of the block-scaled family, tl.dot input precision). Every dequantized
    operand is exact in it: quantized activations and weights are exact in bf16 (<= 6 significant
    bits, fp32's exponent range); W4A16 multiplies hidden's own dtype, except fp16 hidden with
    MX weights, whose power-of-two scales can leave fp16's range: fp32 operands with TF32 (fp16
    values and e2m1*2^e are exact in TF32). The interpreter multiplies fp32 (its bf16 dot is
    wrong)."""
    if interp:
        return tl.float32, "ieee"
    if act_format is not Format.BF16 or hidden_dtype == torch.bfloat16:
        return tl.bfloat16, "tf32"
    if hidden_dtype == torch.float16:
        return (tl.float16, "tf32") if wfmt is Format.NVFP4 else (tl.float32, "tf32")
    return tl.float32, "ieee"


def dequantize_tiles(q: QuantizedTensor, *, block_rows: int = 16, block_k: int = 64,
                     fast_cvt: bool = False) -> torch.Tensor:
    """Test entry: the operand tiles of a block-scaled ``q [*B, R, C]`` exactly as the GEMMs
    dequantize them (``kernels/_blockscaled._load_tile``, in memory order), as fp32
    ``[*B, R, C]``, **without** the per-tensor factor (NVFP4 ``1/g``, FP8 per-tensor scale).
    Formats NVFP4, MXFP4, MXFP8, FP8_TENSOR; ``block_k`` must be a multiple of the scale block.
    ``fast_cvt`` (CUDA only): the bf16 tiles of the GPU fast path (``FAST_CVT``) instead of fp32 --
    for MXFP4 with a ``scale_code_range`` the GEMMs fold (``_mx_fold_cvt``), folded as they are."""
    if q.fmt not in (Format.NVFP4, Format.MXFP4, Format.MXFP8, Format.FP8_TENSOR):
        raise ValueError(f"dequantize_tiles: {q.fmt!r} is not a block-scaled operand format")
    C = q.shape[-1]
    G = q.fmt.block_size or 1
    if block_k % G:
        raise ValueError(f"block_k={block_k} must be a multiple of {G} for {q.fmt.name}")
    if fast_cvt and q.device.type != "cuda":
        raise ValueError("dequantize_tiles: fast_cvt needs a CUDA device (inline PTX)")
    tk = q.value_tile_k
    if tk:  # [row tiles, C/TK, 64, TK/2]: the kernels' tiled addressing
        if tk % block_k:
            raise ValueError(f"block_k={block_k} must divide the tiled values' tile width {tk}")
        data = q.data.reshape(-1, *q.data.shape[-3:]).contiguous()
        R = data.shape[0] * 64
    else:
        data = q.data.reshape(-1, q.data.shape[-1]).contiguous()
        R = data.shape[0]
    eb = _host.e4m3_in_bytes(q.device)
    scale = _kv(q.scale, eb).reshape(R, -1).contiguous() if q.fmt.block_size else data
    out = torch.empty((R, C), dtype=torch.float32, device=data.device)
    grid = (cdiv(R, block_rows), cdiv(C, block_k))
    data = _kv(_nib_view(data, bool(fast_cvt)), eb)
    launch(_bs._dequant_kernel, grid,
        data, scale, out, R, C, data.stride(0), scale.stride(0), out.stride(0),
        FMT=_F_CODE[q.fmt], BR=block_rows, BK=block_k, EVEN_K=C % block_k == 0,
        CD=tl.bfloat16 if fast_cvt else tl.float32, FAST_CVT=_mx_fold_cvt(q, bool(fast_cvt)),
        TK=tk, SWZ=q.value_swizzled,
    )
    return out.reshape(q.shape)


def _k_tail(c: KernelConfig, K: int, tile_k: int, tail_ok: bool) -> int:
    """``K_TAIL`` of a block-scaled GEMM (``kernels/_moe_gemm._gemm1_kernel``): half a K tile where K ends with one
    (K = n block_k + block_k / 2, n >= 1: gpt-oss's 2880 with block_k 128) and the values are linear or tiled that
    wide (``_blockscaled._k_offs`` reads a 128-wide step from two 64-wide pieces); else 0. ``tail_ok``: block-scaled
    weights outside the MX x MXFP8 E4M3 path (which steps per 32-block)."""
    half = c.block_k // 2
    if not tail_ok or K % c.block_k == 0 or K % half or half < 32 or K < c.block_k or tile_k not in (0, half):
        return 0
    return half


def _fit_tile_k(c: KernelConfig, tile_k: int, k_tail: int = 0) -> KernelConfig:
    """``c`` with a block_k that divides the tiled FP4 values' tile width ``tile_k`` (0: linear
    values, any block_k): the widest such K tile (``ExpertWeights`` tiles 64 / 128 columns, the
    heuristic's block_k where it divides K; tuned tables may hold 128 for K = 2880, tiled by 64) -- unless the
    GEMM runs a K tail (``k_tail``, :func:`_k_tail`), whose block_k spans two tiles."""
    if k_tail or not tile_k or tile_k % c.block_k == 0 or c.warp_specialized:  # (Gluon kernels place each 64-wide box)
        return c
    return dataclasses.replace(c, block_k=math.gcd(c.block_k, tile_k))


def _device_info(device: torch.device):
    """(name, SM count) of a CUDA device; ("cpu", None) otherwise (interpreter)."""
    if device.type != "cuda":
        return "cpu", None
    return _cuda_device_info(device.index if device.index is not None else torch.cuda.current_device())


@functools.lru_cache(maxsize=None)
def _cuda_device_info(index: int):
    props = torch.cuda.get_device_properties(index)
    return props.name, props.multi_processor_count


def _cuda_major(index: int) -> int:
    return _host.cuda_capability(index)[0]


MIN_CAPABILITY = (8, 0)  # bf16 MMA; below it the 16-bit tiles spill by thousands of instructions (sm_75 compile)
# Below sm_89 Triton has no float8_e4m3 type: no kernel that loads, stores or multiplies an E4M3 number compiles
# there. The launcher then hands E4M3 numbers over as bytes (``_host.e4m3_in_bytes``): NVFP4 block scales, FP8
# values; the quantizers write fp32 that torch rounds to E4M3. Every format runs; 16-bit, MXFP4 and NVFP4 x BF16
# hold no E4M3 number in a GEMM operand and pay nothing for it.


def _kv(t: torch.Tensor, eb: bool) -> torch.Tensor:
    """A kernel argument as the Triton kernels take it: E4M3 tensors as their bytes where ``eb``."""
    return t.view(torch.uint8) if eb and t.dtype == _E4M3 else t


def device_problem(dev: torch.device) -> Optional[str]:
    """None, or why the Triton kernels cannot run on ``dev``: an AMD GPU (the kernels hold NVIDIA inline PTX and
    Hopper-only launch options, and nothing was compiled or run for ROCm), or ``arch_problem``. Devices of unknown
    capability (the CPU, for the interpreter) pass."""
    if dev.type == "cuda" and _host.rocm():
        return ("AMD GPUs (ROCm) are not supported by the Triton kernels yet: they hold NVIDIA inline PTX and were "
                "never compiled for ROCm")
    cap = _host.device_capability(dev)
    return None if cap is None else arch_problem(cap)


def arch_problem(capability: "tuple[int, int]") -> Optional[str]:
    """None, or why the Triton kernels cannot run on a GPU of compute ``capability``: from sm_80 every weight and
    activation format (below sm_89 with E4M3 numbers as bytes, FP8 GEMMs on 16-bit tensor cores); nothing below.
    The Gluon kernels (sm_90 only) have rules of their own and fall back to the Triton kernels. Checked by
    compiling for each target (``tests/test_arch_support.py``)."""
    cap = tuple(capability)
    if cap < MIN_CAPABILITY:
        return (f"the Triton kernels need compute capability {MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]} or newer "
                f"(bf16 tensor cores), got {cap[0]}.{cap[1]}")
    return None


@functools.lru_cache(maxsize=None)
def _cuda_smem_per_block(index: int) -> int:
    """Opt-in shared memory per block in bytes (0 where torch does not report it)."""
    return int(getattr(torch.cuda.get_device_properties(index), "shared_memory_per_block_optin", 0) or 0)


# room left for the epilogue's layout conversions next to the pipelined operand buffers
_SMEM_EPILOGUE_RESERVE = 16 * 1024


def fit_stages(c: KernelConfig, a_bytes: int, w_bytes: int, w_tiles: int, smem_bytes: int) -> KernelConfig:
    """``c`` with num_stages lowered (to >= 1) until its pipelined operand buffers, num_stages x
    ``c.stage_bytes(a_bytes, w_bytes, w_tiles)``, fit ``smem_bytes`` minus a reserve
    for the epilogue. The heuristic sizes stages for 16-bit (or FP8) activations; fp32 hidden
    states (and fp32 weights) need twice the bytes per stage. ``smem_bytes`` 0: unknown, unchanged."""
    if smem_bytes <= 0:
        return c
    fit = max(1, (smem_bytes - _SMEM_EPILOGUE_RESERVE) // c.stage_bytes(a_bytes, w_bytes, w_tiles))
    if c.num_stages <= fit:
        return c
    return dataclasses.replace(c, num_stages=int(fit))


_TRIM_STAGES = {"enabled": os.environ.get("FUSEDMOE_TRIM_STAGES", "1") != "0"}


def trim_stages(c: KernelConfig, K: int, persistent: bool = False) -> KernelConfig:
    """``c`` with num_stages at most one more than a program's K blocks, ``cdiv(cdiv(K, block_k),
    split_k)`` (and >= 2): Triton's pipeline allocates every stage's operand buffers whatever the
    loop's trip count, and it prefetches num_stages - 1 K blocks ahead, so stages past the trip count
    only take shared memory -- fewer programs per SM, fewer loads in flight. Decode GEMM2s of
    short-K shards are the case: DeepSeek-V3 TP8's K = 256 in one 256-wide block with 5 stages held
    100 KB a program (2 per SM) for 20 KB of loads. Persistent and column-tile-holding GEMMs (their
    loops run over tiles too) and the warp-specialized ring are left as they are; the results are the
    same bits whatever the stage count. ``set_trim_stages(False)`` turns it off (A/B). Cached: a
    forward asks twice per call, and a config replaced anew costs ~10 us of host time."""
    if not _TRIM_STAGES["enabled"] or persistent or c.n_tiles != 1 or c.warp_specialized:
        return c
    return _trimmed(c, K)


@functools.lru_cache(maxsize=1024)
def _trimmed(c: KernelConfig, K: int) -> KernelConfig:
    keep = max(2, k_loop_stages(K, c.block_k, c.split_k))
    return c if c.num_stages <= keep else dataclasses.replace(c, num_stages=keep)


def set_trim_stages(enabled: bool) -> bool:
    """``True`` (the default): :func:`trim_stages` caps each GEMM's pipeline stages at its K loop's
    trip count + 1; ``False``: the configs' stages as they are (A/B runs). Returns the previous setting."""
    return _swap_bool(_TRIM_STAGES, enabled)


# ---- block scales read in aligned runs -----------------------------------------------------------

_SCALE_RUN = {"enabled": os.environ.get("FUSEDMOE_SCALE_RUN", "1") != "0"}
_SCALE_RUN_BYTES = 4  # a cp.async of 4 bytes: the smallest Triton's pipeline copies ahead
_SCALE_RUN_MAX_BLOCK_M = 64  # decode tiles
_MX_WEIGHTS = frozenset({Format.MXFP4, Format.MXFP8})  # UE8M0 block scales, row-major in ExpertWeights


def set_scale_runs(enabled: bool) -> bool:
    """``True`` (the default): :func:`_scale_run` lets a block-scaled GEMM read its MX weight scales in aligned
    4-byte runs where a K step's own bytes are too few to be copied ahead; ``False``: every step loads its own bytes
    (A/B runs; ``FUSEDMOE_SCALE_RUN=0``). Same bits. Returns the previous setting."""
    return _swap_bool(_SCALE_RUN, enabled)


def _scale_run(wfmt: Format, s: torch.Tensor, c: KernelConfig, rows: int, even_k: bool, mxdot: bool,
               a_permuted: bool = False) -> int:
    """``W_SRUN`` of one block-scaled GEMM launch (``_blockscaled._tile_scales``): 4 where the weights' UE8M0 block
    scales (MXFP4 / MXFP8) are row-major in rows a multiple of 16 bytes apart (``QuantizedTensor.padded_scale_rows``,
    what ``ExpertWeights`` stores), a K step's own scale bytes of a row are fewer than 4 (``block_k`` 32 or 64) and
    the tile has at least as many weight ``rows`` as the program has threads -- then each thread copies 4 bytes
    ahead through Triton's pipeline (cp.async) instead of waiting for 1-2 bytes from memory in every step. 0
    otherwise. Needs whole K steps (``even_k``) and the storage to hold each row's run (the padding). Decode tiles
    only (``block_m`` <= 64, where it was measured), and never with the dot-order activations (``a_permuted``): with
    both, a 128-row prefill tile whose wgmma reads the token tile in place from the cp.async buffer gave different
    bits from run to run on the H200 (``test_gpu_act_dot_order_same_bits``, twenty-seventh session)."""
    run = _SCALE_RUN_BYTES
    per_step = c.block_k // 32
    if (not _SCALE_RUN["enabled"] or mxdot or a_permuted or not even_k or c.block_m > _SCALE_RUN_MAX_BLOCK_M
            or per_step >= run or run % per_step or rows < 32 * c.num_warps or wfmt not in _MX_WEIGHTS):
        return 0
    # the weights' side (one pass over the strides: this runs for both GEMMs of every eager call)
    shape, strides, off = s.shape, s.stride(), s.storage_offset()
    if len(shape) < 2 or strides[-1] != 1 or off % 16:
        return 0
    last = off  # the last row's first element
    for n, st in zip(shape[:-1], strides[:-1]):
        if st % 16:
            return 0
        last += (n - 1) * st
    return run if last + cdiv(shape[-1], run) * run <= s.untyped_storage().nbytes() // s.element_size() else 0


# ---- programmatic dependent launch ---------------------------------------------------------------

# Measured on the H200 (benchmarks/results/h200-2026-11-29-s4, the shared harness, 25 cases x 7 token
# counts, same process): PDL makes a call 2.2 % faster at 1 token, 0.8 % at 8, 0.2-0.4 % at 32-512,
# and 0.6 % slower at 2048-8192 (up to 5 % on large grids: the dependent kernel's early programs
# take SM slots from the previous kernel's tail). "auto" therefore uses it up to this many tokens.
PDL_AUTO_MAX_TOKENS = 512
_PDL = {"mode": "auto"}


def set_programmatic_dependent_launch(enabled) -> "bool | str":
    """Programmatic dependent launch of align-scatter, GEMM1, GEMM2 and the combine on Hopper and
    newer: each kernel's programs can be scheduled while the previous kernel drains (every one of
    them waits for the prior grid -- ``griddepcontrol.wait`` -- before its first load, so results
    are bit-identical; the GPU tests check it). ``"auto"`` (the default): on for calls of at most
    ``PDL_AUTO_MAX_TOKENS`` tokens, where the launch latency it hides is a visible part of the
    call; ``True`` / ``False``: always / never. Returns the previous setting."""
    if not (isinstance(enabled, bool) or enabled == "auto"):
        raise TypeError(f"enabled must be a bool or 'auto', got {enabled!r}")
    prev, _PDL["mode"] = _PDL["mode"], enabled
    return prev


def _pdl_args(device: torch.device, interp: bool, tokens: int) -> dict:
    """Launch keywords: USE_GDC (the kernels' constexpr) and Triton's ``launch_pdl`` when the
    setting asks for it at this token count and it is supported (CUDA capability >= 9, not the
    interpreter)."""
    mode = _PDL["mode"]
    on = tokens <= PDL_AUTO_MAX_TOKENS if mode == "auto" else mode
    if not on or interp or device.type != "cuda" or _cuda_major(
            device.index if device.index is not None else torch.cuda.current_device()) < 9:
        return {"USE_GDC": False}
    return {"USE_GDC": True, "launch_pdl": True}


# ---- combine in GEMM2 -------------------------------------------------------------------------------

# GEMM2 can run the top-k combine itself (kernels/_moe_gemm.py FUSE_COMBINE: the last of a token's
# slots to finish sums its rows; same bits as the combine kernel): one launch fewer. Off by default:
# in the shared harness (CUDA graphs, H200, session 6) it made 1-32-token calls 4 % slower
# (geomean over 25 cases each; up to 20 % on DeepSeek-V3 TP8, whose short GEMM2 programs pay the
# per-row arrivals -- fence, atomics, barriers -- and the serialized row sums) against the 1.7 us
# combine launch it saves; FP4 decode, which splits K anyway, gained 1-2 us. At prefill it needs one program a tile
# (no held activation tile), and even in a column-major tile order, where a token's rows of y are still in L2 when its
# last slot arrives, GEMM2 + combine ran 2.4-4.2x slower (H100, DeepSeek-V3 TP8 at 8192 tokens, forty-ninth session).
_FUSED_COMBINE = {"max_tokens": 0}


def set_fused_combine(max_tokens: int) -> int:
    """Calls of at most ``max_tokens`` tokens run the top-k combine inside GEMM2 (default 0:
    never; see ``_FUSED_COMBINE`` for the measurements). Returns the previous setting. The results
    are bit-identical either way (GPU and interpreter tests check it)."""
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 0:
        raise TypeError(f"max_tokens must be an int >= 0, got {max_tokens!r}")
    prev, _FUSED_COMBINE["max_tokens"] = _FUSED_COMBINE["max_tokens"], max_tokens
    return prev


def _swap_bool(store: dict, enabled: bool, key: str = "enabled") -> bool:
    """``store[key] = enabled`` for the on / off switches below (a bool only); returns the
    previous value."""
    if not isinstance(enabled, bool):
        raise TypeError(f"enabled must be a bool, got {enabled!r}")
    prev, store[key] = store[key], enabled
    return prev


# ---- persistent GEMM2 -------------------------------------------------------------------------------

_PERSISTENT = {"enabled": True}


def set_persistent_gemm2(enabled: bool) -> bool:
    """``True`` (the default): GEMM2 runs persistent where its config says so
    (``KernelConfig.persistent``, by default :func:`~fusedmoe.backends.kernel_configs.auto_persistent`);
    ``False``: always one program per tile (for A/B measurements; the results are bit-identical
    either way). Returns the previous setting."""
    return _swap_bool(_PERSISTENT, enabled)


# ---- warp-specialized GEMMs: the padding half of a block skipped ------------------------------------

_WS_SKIP_HALF = {"enabled": True, "16bit": os.environ.get("FUSEDMOE_WS_SKIP16", "0") == "1"}


def set_ws_skip_padding_half(enabled: bool) -> bool:
    """``True`` (the default): in the warp-specialized GEMMs (``KernelConfig.warp_specialized``) of
    FP8 weights a 128-row block whose second 64 rows are all padding (an expert's last block with
    <= 64 rows) is computed by the first MMA warpgroup alone -- the second issues no wgmma and its
    half of A is not loaded; ``False``: both warpgroups run every block (for A/B measurements; the
    results are bit-identical either way: the skipped rows are never stored). 16-bit weights never
    skip unless :func:`set_ws_skip_padding_half_16bit` says so (:func:`_ws_skips_padding_half`). Returns the
    previous setting."""
    return _swap_bool(_WS_SKIP_HALF, enabled)


def set_ws_skip_padding_half_16bit(enabled: bool) -> bool:
    """``False`` (the default; ``FUSEDMOE_WS_SKIP16=1`` starts with ``True``): 16-bit weights' warp-specialized GEMMs
    run both warpgroups on every block; ``True``: they skip a block's all-padding half as FP8 does (where
    :func:`set_ws_skip_padding_half` is on) -- for A/B measurements: slower at 8192 tokens on the H200 (fifteenth
    session, DeepSeek-V3 SwiGLU 0.75-0.81x) and on an H100 (fiftieth, 0.761x, all in GEMM1), with the counted tiles
    too (fifty-first, ``wsdyn+ws16skip``: DeepSeek-V3 / TP8 / Qwen3-30B BF16 0.930 / 0.938 / 0.990x). The same bits
    either way. Returns the previous setting."""
    return _swap_bool(_WS_SKIP_HALF, enabled, "16bit")


def _ws_skips_padding_half(weight_format: Format) -> bool:
    """Whether the warp-specialized GEMM of ``weight_format`` skips a block's all-padding half. FP8
    (per tensor / channel / 128 x 128 blocks) with the setting on; 16-bit weights only with
    :func:`set_ws_skip_padding_half_16bit`: on the H200 the skip made their 8192-token layers slower (DeepSeek-V3
    SwiGLU BF16 0.75-0.81x in three runs, BENCHMARKS.md, fifteenth session) while FP8 gained at every token count
    (1.10x at 512); on the H100 still 0.75-0.96x at 8192 tokens (fifty-second session), and running such blocks as
    paired halves instead (the second warpgroup on the next column tile's weights) was slower yet, 0.56-0.86x:
    removed."""
    return _WS_SKIP_HALF["enabled"] and (weight_format is not Format.BF16 or _WS_SKIP_HALF["16bit"])


# ---- warp-specialized FP8 GEMMs: the promoted accumulation pipelined (per config, or forced on) -------------

_WS_PIPE = {"enabled": os.environ.get("FUSEDMOE_WS_PIPE", "0") == "1"}
# the prefill kernel's A rows by cp.async from the unsorted rows, no gather launch (set_ws_x_gather): "auto" (the
# default: kernel_configs.ws_x_gather_auto), True, False
_WS_X_GATHER = {"mode": {"1": True, "0": False}.get(os.environ.get("FUSEDMOE_WS_XGATHER", "auto"), "auto")}


def _swap_mode(store: dict, mode, name: str, key: str = "mode") -> "bool | str":
    """``store[key] = mode`` for the switches with a rule (``True``, ``False`` or ``"auto"``); returns the previous
    mode."""
    if not (isinstance(mode, bool) or (isinstance(mode, str) and mode == "auto")):
        raise TypeError(f"{name}: mode must be True, False or 'auto', got {mode!r}")
    prev, store[key] = store[key], mode
    return prev


def set_ws_x_gather(mode) -> "bool | str":
    """Whether the warp-specialized 16-bit / FP8 prefill GEMMs (``kernels/_ws_gemm.py``) read their input rows
    straight from the unsorted rows -- GEMM1 the (quantized) hidden states, row ``slot // top_k``; GEMM2 the
    slot-indexed intermediate -- by cp.async in a four-warp loader (``X_GATHER``, forty-third session), instead of a
    gather launch into block-padded slot order and TMA boxes: one launch and a write and read of P x K elements less
    a GEMM (DeepSeek-V3 FP8 per channel at 8192 tokens on an H100: 233 + 104 of ~8700 µs). ``"auto"`` (the default;
    ``FUSEDMOE_WS_XGATHER=1`` / ``0`` start a process with ``True`` / ``False``): where
    :func:`kernel_configs.ws_x_gather_auto` says -- few weight rows an expert or few rows an expert, or a gated layer
    (or FP8 per channel weights) whose tiles come from the global counter (:func:`set_ws_dynamic_tiles`), measured
    faster there; ``True``: every such GEMM; ``False``: none. Where the rows are not 16-byte aligned, or GEMM2 reads
    GEMM1's padded rows (``set_ws_padded_handoff``), the gather stays. Same values in the same tiles: the same bits.
    Returns the previous mode."""
    return _swap_mode(_WS_X_GATHER, mode, "set_ws_x_gather")


# the warp-specialized prefill GEMMs' tiles by a global counter (set_ws_dynamic_tiles): "auto" (the default:
# kernel_configs.ws_dynamic_tiles_auto), True, False; the counters by (device, stream)
_WS_DYN = {"mode": {"1": True, "0": False}.get(os.environ.get("FUSEDMOE_WS_DYN", "auto"), "auto"), "counters": {}}


def set_ws_dynamic_tiles(mode) -> "bool | str":
    """Whether the warp-specialized prefill GEMMs (``DYN``: 16-bit / FP8 ``kernels/_ws_gemm.py``, forty-fourth
    session, measured in the forty-fifth; FP4 ``kernels/_ws_fp4.py``, forty-fifth, measured in the forty-sixth) take
    their tiles from a global counter -- each program's loader fetches the next tile index by a relaxed atomic as it
    starts a tile and hands it to the consumer warpgroups through a queue in shared memory -- instead of the static
    ``program_id + i * num_programs``. The tiles in flight then always form one window of the tile walk: an expert's
    M-blocks load the same weight tiles together (persistent programs with static tiles drift apart: DeepSeek-V3 FP8
    at 8192 tokens read 10.0 GB from DRAM for ~8 GB of data with the 2 x 64 GEMM1 tile, 13.4 GB with the 2 x 128 one
    -- forty-third session), and programs that drew short tiles (half-empty blocks) take more. ``"auto"`` (the
    default; ``FUSEDMOE_WS_DYN=1`` / ``0`` start a process with ``True`` / ``False``): where
    :func:`kernel_configs.ws_dynamic_tiles_auto` says -- FP8, MXFP4 and NVFP4 weights with many local experts;
    ``True``: every such GEMM; ``False``: none. The counters (int32 [2]) are left at zero by the kernel; eager calls
    take turns between two pairs per (device, stream) -- consecutive launches never share one, should a launch ever
    start before the last one ends -- and a CUDA graph captures a zeroed pair of its own. Same tiles, same
    arithmetic: the same bits. Returns the previous mode."""
    return _swap_mode(_WS_DYN, mode, "set_ws_dynamic_tiles")


def _ws_dyn(weight_format: Format, E: int) -> bool:
    """Whether a prefill kernel (``_ws_gemm_kernel``, ``_ws_fp4_kernel``) takes its tiles from a global counter
    (:func:`set_ws_dynamic_tiles`; "auto": :func:`kernel_configs.ws_dynamic_tiles_auto` for ``E`` local experts)."""
    mode = _WS_DYN["mode"]
    return ws_dynamic_tiles_auto(weight_format, E) if mode == "auto" else mode


def _ws_dynamic_args(dyn: bool, al: "AlignResult") -> dict:
    """The prefill kernels' ``DYN`` launch arguments: ``dyn`` (:func:`_ws_dyn`) and the counters (off: a placeholder,
    never read)."""
    device = al.num_post_padded.device
    return dict(tile_ctr_ptr=_ws_tile_counters(device) if dyn else al.num_post_padded, DYN=dyn)


def _ws_tile_counters(device: torch.device) -> torch.Tensor:
    """Zeroed int32 [2] tile counters for one ``DYN`` launch (:func:`set_ws_dynamic_tiles`): eager, one of two pairs
    cached per (device, stream), in turn -- each launch leaves its pair at zero, and consecutive launches (GEMM1,
    GEMM2) get different pairs; while a CUDA graph is captured, a fresh zeroed pair (a graph may be replayed beside
    another)."""
    if device.type != "cuda" or torch.cuda.is_current_stream_capturing():
        return torch.zeros(2, dtype=torch.int32, device=device)
    key = (device.index if device.index is not None else torch.cuda.current_device(),
           torch.cuda.current_stream(device).cuda_stream)
    pairs = _WS_DYN["counters"].get(key)
    if pairs is None:
        pairs = _WS_DYN["counters"][key] = [torch.zeros(2, dtype=torch.int32, device=device) for _ in range(2)]
    pairs.reverse()
    return pairs[0]


def set_ws_pipelined_promotion(enabled: bool) -> bool:
    """``False`` (the default; ``FUSEDMOE_WS_PIPE=1`` starts with ``True``): the config decides
    (``KernelConfig.pipelined_promotion``, a tuner candidate). ``True``: every warp-specialized FP8 prefill tile
    runs pipelined -- two partial sets take turns, so block k + 1's wgmmas are issued before the warpgroup waits
    for block k's and adds them (``kernels/_ws_gemm._ws_pipe_k_loop``; tiles with a partial set per accumulator:
    gated block_n 64, non-gated 64 / 128), or in the wide one-set 2 x 128 / 256 tiles by 64-column sub-tiles
    (``_ws_wide_pipe_k_loop``; compiled for sm_90, not yet run on a GPU); FP8 128 x 128 blocks too since the
    thirty-eighth session (compiled only), each block's partials scaled with one weight scale a column group
    (:func:`_ws_block_w_scalar`). The same partial products added in the same order: the same bits (GPU test).
    Thirty-seventh session, shared harness on an H100, FP8 per tensor / channel at 512-8192 tokens: 0.956-1.073x
    by shape (DeepSeek-V3 per channel 8192 tokens 1.07x, Mixtral per tensor 512 0.96x); geomean 1.008x at
    2048-8192 tokens, 0.995x at 512 -- a per-shape choice, hence the config field. Returns the previous setting."""
    return _swap_bool(_WS_PIPE, enabled)


# ---- FP8 128 x 128 block GEMMs: one weight scale a tile (Triton) / a tile half (warp-specialized) -------------

_BLOCK_W1 = {"enabled": os.environ.get("FUSEDMOE_BLOCK_W1", "1") != "0"}


def set_block_w1(enabled: bool) -> bool:
    """``True`` (the default since the thirty-eighth session; ``FUSEDMOE_BLOCK_W1=0`` starts with ``False``): the
    Triton FP8 128 x 128 block GEMMs with tiles of at most 128 weight rows load one weight scale a K block and
    multiply it into the rows' activation scales (``kernels/_moe_gemm._block_w_ptrs``); ``False``: a 128-vector over the
    tile's rows multiplied into every partial product (the kernels before). The same FFMA a product either way --
    the same bits; sm_90 SASS of the gated 64 x 128 prefill tile: 189 instead of 328 instructions a K block (docs/
    kernels.md). Returns the previous setting."""
    return _swap_bool(_BLOCK_W1, enabled)


# H100, the shared harness's FP8 block points at 512 / 2048 / 8192 tokens in one process (fortieth session, call 1):
# the warp-specialized block tiles with the scalar scales 1.01-1.16x those with the vectors on all six points
# (DeepSeek-V3 at 8192 tokens 11939 -> 10337 us)
_WS_BLOCK_SCALAR = {"enabled": os.environ.get("FUSEDMOE_WS_BLOCK_SCALAR", "1") != "0"}


def set_ws_block_scalar_scales(enabled: bool) -> bool:
    """``True`` (the default since the fortieth session; ``FUSEDMOE_WS_BLOCK_SCALAR=0`` starts with ``False``): the
    narrow warp-specialized FP8 128 x 128 block tiles read one weight scale for each of the tile's column groups,
    which lie in one 128-row scale block each (:func:`_ws_block_w_scalar`). ``False``: each K block's weight scales
    as a vector over the tile's columns (``w_s[col // 128]``, masked at N) multiplied into every partial product.
    The same products ``part * (a_s * w_s)`` fused into the same FMA either way, the same bits (GPU test); sm_90
    compile: 145 instead of 326 instructions a K block in the gated 2 x 64 tile (128 / 296 non-gated), no spills;
    H100: 1.01-1.16x (``_WS_BLOCK_SCALAR``). The wide FP8 block tiles (block_n 128 gated / 256: tuner candidates)
    always read their scales so. Returns the previous setting."""
    return _swap_bool(_WS_BLOCK_SCALAR, enabled)


def _ws_block_w_scalar(c: KernelConfig, N: int, gated: bool, pipe: bool = False) -> bool:
    """W_SCALAR of an FP8 128 x 128 block tile: the wide ones (block_n 128 gated / 256) and the pipelined ones
    (``pipe``) always, the other narrow ones under :func:`set_ws_block_scalar_scales`. It needs each column group of
    the tile inside one 128-row scale block -- any non-gated tile (64 / 128 columns, or two 128-column halves of 256,
    from a multiple of their width); a gated one when block_n divides N (its up group starts at row N of w13), which
    the layer's check (intermediate sizes of whole 128-row blocks) makes always so."""
    wide = c.block_n == (128 if gated else 256)
    if not (wide or pipe or _WS_BLOCK_SCALAR["enabled"]):
        return False
    why = ws_block_scale_problem(c, Format.FP8_BLOCK, gated, N)
    if why is not None:
        raise ValueError(why)
    return True


# ---- FP8 re-quantization of the intermediate by reciprocals ----------------------------------------

_RCP_DIV = {"enabled": True}


def set_reciprocal_quant(enabled: bool) -> bool:
    """``True``: GEMM1's FP8 re-quantization of the intermediate (static per-tensor scale, or the
    1 x 128 groups of FP8 128 x 128 blocks) divides by a reciprocal with Markstein's correction
    (``_quant._div_by_rcp``: one multiply and two fma instead of an IEEE division per value) --
    the same bits by construction (``benchmarks/div_by_reciprocal_check.py``; H200 same-bits tests,
    sixteenth session), the default; ``False``: IEEE divisions. H200 harness (BENCHMARKS.md,
    sixteenth session): Nemotron FP8 per tensor (non-gated, 128-column tiles) 1.06-1.11x at 512-8192
    tokens, MiniMax-M2 / Qwen3-30B per tensor at 8192 1.03-1.06x, no loss elsewhere. CUDA only; the
    interpreter always divides. Returns the previous setting."""
    return _swap_bool(_RCP_DIV, enabled)


# ---- the intermediate's dynamic per-tensor amax in GEMM1's epilogue -------------------------------

_GEMM1_AMAX = {"enabled": True}


def set_gemm1_amax(enabled: bool) -> bool:
    """``True`` (default): with a dynamic per-tensor scale for GEMM2's input (FP8 per tensor or NVFP4
    activations without ``a2_scale``), GEMM1's epilogue reduces max |h| over the tile it stores
    into one int32 by ``atomic_max`` (``_moe_gemm._atomic_amax``: deterministic), and the
    quantization pass starts from it -- no zero-filled intermediate, no separate absmax pass over
    it (H200, sixteenth session: those were 2-8 % of an FP8 per-tensor prefill call). ``False``: the
    intermediate zero-filled, then ``quantize_act``'s own absmax. Same bits either way. Returns the
    previous setting."""
    return _swap_bool(_GEMM1_AMAX, enabled)


# ---- GEMM1 -> GEMM2 hand-off in block-padded row order (both warp-specialized) ---------------------

_WS_PADDED_HANDOFF = {"enabled": True}
# the padded hand-off's padding rows (in the blocks GEMM1 computes) stored as zeros, as GEMM2's gather
# would leave them, instead of left unwritten: a group quantization pass over unwritten rows ran
# DeepSeek-V3 FP8 block layers 1.02-1.04x slower at 2048 / 8192 tokens (harness peer
# fusedmoe-padgarbage, eighteenth session)
_WS_ZERO_PAD_ROWS = True


def set_ws_padded_handoff(enabled: bool) -> bool:
    """``True`` (default): when both GEMMs are warp-specialized and GEMM2 reads the intermediate as
    GEMM1 stores it (a static FP8 per-tensor scale, or 16-bit activations: no quantization pass in
    between) or its 1 x 128 group quantization (FP8 blocks: the pass runs over the
    ``num_post_padded`` rows in use, in the same order, and GEMM2 reads the scales by padded row),
    GEMM1 stores each row at its block-padded position -- the row GEMM2's TMA loads -- so GEMM2 needs
    no gather of its input (one write and one read of P x I elements less; the padding rows -- stored
    as zeros, or unwritten where a block's second half is all padding and skipped -- reach only
    GEMM2's padding rows, never stored). The FP4 warp-specialized kernels (BF16 activations) too: their
    padding rows are left unwritten and reach only GEMM2's padding columns; the decode kernel stores the rows in
    its dot order (twenty-ninth session; correct in the thirty-first session's H200 triage: the prefill kernel only
    with the opt-in ``set_ws_fp4_padded``, the decode kernel always). ``False``:
    GEMM1 stores by slot and GEMM2 gathers. Same bits either way. Returns the previous setting."""
    return _swap_bool(_WS_PADDED_HANDOFF, enabled)


# ---- split-K scratch ------------------------------------------------------------------------------

# (device, stream) -> (int32 counters, fp32 partial sums). The split-K programs leave every counter
# they use at zero and fully rewrite the partials they read, so one pair serves every later eager
# call on that stream (launches on one stream are ordered): no allocation per decode call.
_SCRATCH: dict = {}


# under CUDA-graph capture the split-K counters are zeroed by the align launch (default since the twenty-sixth
# session; FUSEDMOE_ALIGN_ZERO=0 turns it off; see set_align_zero_fill)
_ALIGN_ZERO = {"enabled": os.environ.get("FUSEDMOE_ALIGN_ZERO", "1") != "0"}


def set_align_zero_fill(enabled: bool) -> bool:
    """Calls captured in a CUDA graph that split a GEMM's K loop need zeroed arrival counters in fresh buffers
    (``split_scratch``): by default a ``torch.zeros`` -- a memset node between the align and GEMM1, which also
    breaks the programmatic dependent launch of GEMM1 on the align. Enabled (the default): the align launch zeroes
    them itself (``kernels/_align._zero_fill``, after its wait for the prior grid), one graph node fewer per such
    call -- H200, FP4 decode of gpt-oss-120b / Nemotron-3-Super / DeepSeek-V3 at 1 and 8 tokens: 1.00-1.05x
    (twenty-sixth session). The same launch zeroes GEMM1's amax of a dynamic per-tensor intermediate (FP8 / NVFP4
    without a static scale; eager calls too, fifty-fourth session: unmeasured, a fill launch fewer). ``False``: the
    memset node and the amax's fill. Same bits. Returns the previous setting."""
    return _swap_bool(_ALIGN_ZERO, enabled)


# decode (the one-program align) under programmatic dependent launch: the align lets the next grid launch right
# after its own wait instead of as its programs exit (kernels/_align._gdc_enter); FUSEDMOE_ALIGN_TRIGGER=0 turns it
# off. On by default since the fortieth session: H100, the shared harness's 50 points at 1 / 8 tokens in one process
# (fusedmoe vs the switch on, then the peer fusedmoe-altrig): 1.011x geomean, 1.013-1.056x on the short one-token
# calls (Qwen3-30B FP8 per channel 25.0 -> 23.7 us), 49 of 50 points >= 0.995x. (The Triton GEMMs triggering right
# after their wait as well measured 1.007x, down to 0.93x on Mixtral: not kept.)
_ALIGN_TRIGGER = {"enabled": os.environ.get("FUSEDMOE_ALIGN_TRIGGER", "1") != "0"}


def set_align_early_trigger(enabled: bool) -> bool:
    """Decode calls (one-program align, ``T * top_k <= 256``) under programmatic dependent launch: ``True`` -- the
    align launch calls ``griddepcontrol.launch_dependents`` right after its wait for the prior grid, so the next
    kernel's programs (GEMM1, or a quantizer / gather launch before it) are scheduled while the align runs and
    start the moment it ends (the default); ``False`` -- they launch as the align's programs exit. Every kernel of
    the chain waits for its prior grid before its first load, so the results are the same bits either way (GPU
    test). Returns the previous setting."""
    return _swap_bool(_ALIGN_TRIGGER, enabled)


def _align_zeroes_counters(device: torch.device) -> bool:
    """Whether this call's split-K counters are left to the align launch to zero (``set_align_zero_fill``): only
    fresh buffers need it, i.e. while a CUDA graph is being captured."""
    return _ALIGN_ZERO["enabled"] and device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def split_scratch(n_counters: int, n_partials: int, device: torch.device, *, zero_later: bool = False):
    """(``n_counters`` zeroed int32 arrival counters, ``n_partials`` fp32 partial-sum slots) for the
    split-K GEMM launches of one call on the current stream.

    Eager: cached per (device, stream) and grown as needed (the kernels leave the counters at zero).
    While a CUDA graph is being captured: fresh buffers, the counters' zero fill captured with the
    launch -- a graph may be replayed on another stream, or next to another graph, so it never
    shares scratch (one memset node per call that splits). ``zero_later`` (there): the counters are left
    unwritten for the caller to zero in a kernel of its own (``set_align_zero_fill``)."""
    if device.type != "cuda" or torch.cuda.is_current_stream_capturing():
        alloc = torch.empty if zero_later else torch.zeros
        return (alloc(n_counters, dtype=torch.int32, device=device),
                torch.empty(n_partials, dtype=torch.float32, device=device))
    key = (device.index if device.index is not None else torch.cuda.current_device(),
           torch.cuda.current_stream(device).cuda_stream)
    cnt, part = _SCRATCH.get(key, (None, None))
    if cnt is None or cnt.numel() < n_counters:
        cnt = torch.zeros(max(n_counters, 1024), dtype=torch.int32, device=device)
    if part is None or part.numel() < n_partials:
        part = torch.empty(max(n_partials, 1 << 16), dtype=torch.float32, device=device)
    _SCRATCH[key] = (cnt, part)
    return cnt, part


# ---- align -------------------------------------------------------------------------------------


class AlignResult:
    """Output of :func:`align_slots` (device tensors; sizes known on the host)."""

    __slots__ = ("sorted_ids", "block_expert", "num_post_padded", "block_m", "max_blocks")

    def __init__(self, sorted_ids, block_expert, num_post_padded, block_m, max_blocks):
        self.sorted_ids = sorted_ids  # [P_max] int32, sentinel T*K
        self.block_expert = block_expert  # [P_max / block_m] int32, -1 past the end
        self.num_post_padded = num_post_padded  # [1] int32
        self.block_m = block_m
        self.max_blocks = max_blocks


def max_padded_rows(num_slots: int, num_groups: int, block_m: int) -> int:
    """Upper bound of the padded, sorted slot list, from shapes only: every non-empty group wastes
    at most block_m - 1 rows and there are at most min(groups, slots) non-empty groups."""
    g = min(num_groups, num_slots)
    return cdiv(num_slots + g * (block_m - 1), block_m) * block_m


def align_slots(topk_ids: torch.Tensor, num_local_experts: int, block_m: int, *, local_expert_offset: int = 0,
                include_nonlocal: bool = False, tokens: "int | None" = None,
                quant: "Fp8Plan | DotRowsPlan | None" = None, zero: "torch.Tensor | None" = None) -> AlignResult:
    """Group the T*K slots of ``topk_ids [T, K]`` (global ids) by local expert, each group padded to
    ``block_m`` rows (see ``kernels/_align.py``). ``include_nonlocal`` appends one more group (id
    ``num_local_experts``) holding the slots of non-local experts. ``tokens``: the call's token
    count, for the launch options (default ``topk_ids.shape[0]``). ``quant``: an FP8 quantization
    of hidden (``formats.triton_quant.plan_fp8``), or hidden's dot-order copy for the FP4 decode kernel
    (:class:`DotRowsPlan`), run by the same launch (one chunk of slots only: ``T*K <= _SINGLE_ALIGN_MAX``); its
    result is ``quant.result()`` afterwards. ``zero``: an int32 tensor the same
    launch sets to 0 (split-K counters, ``set_align_zero_fill``)."""
    _align, _, _ = _kernels()
    ids = topk_ids.reshape(-1)
    if not ids.is_contiguous():
        ids = ids.contiguous()
    TK = ids.numel()
    dev = ids.device
    E = int(num_local_experts)
    groups = E + (1 if include_nonlocal else 0)
    P = max_padded_rows(TK, groups, block_m)
    NB = P // block_m
    # one allocation for the three outputs, each starting 16-byte aligned (P is a multiple of
    # block_m >= 16; the count after NB rounded up to 4 ints) so their kernels' pointer
    # specializations do not change with the token count
    nb_end = P + cdiv(NB, 4) * 4
    buf = torch.empty(nb_end + 4, dtype=torch.int32, device=dev)
    sorted_ids, block_expert, ntpp = buf[:P], buf[P:P + NB], buf[nb_end:nb_end + 1]
    single = TK <= _SINGLE_ALIGN_MAX
    if quant is not None and not (single and TK):
        raise ValueError(f"align_slots: quant runs in the one-program align only (1 <= T*K <= {_SINGLE_ALIGN_MAX}), "
                         f"got T*K = {TK}")
    if TK == 0:
        ntpp.zero_()
        block_expert.fill_(-1)
        if zero is not None:
            zero.zero_()
        return AlignResult(sorted_ids, block_expert, ntpp, block_m, NB)
    zkw = {} if zero is None else dict(zero_ptr=zero, n_zero=zero.numel(),
                                       ZERO_BLOCK=max(16, min(1024, next_pow2(zero.numel()))))
    num_bins = max(16, next_pow2(groups))
    chunk = max(16, next_pow2(TK)) if single else _ALIGN_CHUNK
    nc = cdiv(TK, chunk)
    blocks_per_iter = max(1, min(next_pow2(NB), 4096 // block_m))
    chunks_per_iter = max(1, min(next_pow2(nc), 8192 // num_bins))
    warps = 4 if chunk <= 256 else 8
    if single:
        counts = ntpp  # unused
    else:
        counts = torch.empty((nc, num_bins), dtype=torch.int32, device=dev)
        launch(_align._align_count_kernel, (nc,),
            ids, counts, TK, local_expert_offset,
            E_LOC=E, INCLUDE_NONLOCAL=include_nonlocal, NUM_BINS=num_bins, CHUNK=chunk, num_warps=warps,
        )
    pdl = _pdl_args(dev, interpreted(_align._align_scatter_kernel), topk_ids.shape[0] if tokens is None else tokens)
    if single and pdl["USE_GDC"] and _ALIGN_TRIGGER["enabled"]:
        pdl = dict(pdl, EARLY_TRIGGER=True)
    if quant is not None:
        q_args, q_meta = quant.fused_args()
        launch(_align._align_scatter_quant_kernel, (1 + quant.programs,),
            ids, sorted_ids, block_expert, ntpp, TK, local_expert_offset, NB, *q_args,
            E_LOC=E, INCLUDE_NONLOCAL=include_nonlocal, NUM_BINS=num_bins, CHUNK=chunk, BLOCK_M=block_m,
            BLOCKS_PER_ITER=blocks_per_iter, num_warps=max(warps, quant.num_warps), **q_meta, **pdl, **zkw,
        )
        return AlignResult(sorted_ids, block_expert, ntpp, block_m, NB)
    launch(_align._align_scatter_kernel, (nc,),
        ids, counts, sorted_ids, block_expert, ntpp, TK, local_expert_offset, nc, NB,
        E_LOC=E, INCLUDE_NONLOCAL=include_nonlocal, NUM_BINS=num_bins, CHUNK=chunk, BLOCK_M=block_m,
        SINGLE=single, CHUNKS_PER_ITER=chunks_per_iter, BLOCKS_PER_ITER=blocks_per_iter, num_warps=warps, **pdl,
        **zkw,
    )
    return AlignResult(sorted_ids, block_expert, ntpp, block_m, NB)


# ---- validation --------------------------------------------------------------------------------


def _check_qt(name: str, q, E: int, rows: int, cols: int, device) -> None:
    if not isinstance(q, QuantizedTensor):
        raise TypeError(f"{name} must be a fm.QuantizedTensor, got {type(q).__name__}")
    if tuple(q.shape) != (E, rows, cols):
        raise ValueError(f"{name} must have logical shape [{E}, {rows}, {cols}], got {tuple(q.shape)}")
    if q.device != device:
        raise ValueError(f"{name} is on {q.device} but hidden is on {device}")
    if q.data.stride(-1) != 1:
        raise ValueError(f"{name}.data must have a contiguous last dim, got strides {tuple(q.data.stride())}")
    if q.fmt is Format.FP8_BLOCK and q.block_rows != 128:
        raise ValueError(f"{name}: FP8_BLOCK weights need 128x128 scale tiles (block_rows=128), got {q.block_rows}")


def _check_bias(name: str, b, E: int, n: int, device) -> None:
    if b is None:
        return
    if not isinstance(b, torch.Tensor) or b.dtype != torch.float32:
        raise TypeError(f"{name} must be a float32 tensor, got {getattr(b, 'dtype', type(b).__name__)}")
    if tuple(b.shape) != (E, n) or b.stride(-1) != 1:
        raise ValueError(f"{name} must be a [{E}, {n}] tensor with a contiguous last dim, got {tuple(b.shape)}")
    if b.device != device:
        raise ValueError(f"{name} is on {b.device} but hidden is on {device}")


def _scalar_ptr(name: str, s, device) -> torch.Tensor:
    if not isinstance(s, torch.Tensor) or not s.is_floating_point() or s.numel() != 1:
        raise TypeError(f"{name} must be a one-element floating tensor (a static dequant scale), got {s!r}")
    if s.device != device:
        raise ValueError(f"{name} is on {s.device} but hidden is on {device}")
    return s.reshape(1).to(torch.float32)


# ---- warp-specialized GEMMs (Gluon, sm_90) ---------------------------------------------------------


# the Gluon kernels (kernels/_ws_*.py) are written against Triton 3.6's experimental Gluon API (warp_specialize,
# the NVMMA layouts, the Hopper TMA descriptors), which changed from release to release before it
GLUON_MIN_TRITON = (3, 6)


def _triton_version(version: Optional[str] = None) -> "tuple[int, int]":
    """(major, minor) of ``version`` (default: the installed Triton's), e.g. "3.6.0+git1234" -> (3, 6)."""
    import triton

    parts = (version or triton.__version__).split("+")[0].split(".")
    return tuple(int("".join(ch for ch in p if ch.isdigit()) or 0) for p in (parts + ["0"])[:2])


@functools.lru_cache(maxsize=None)
def gluon_problem(version: Optional[str] = None) -> Optional[str]:
    """None, or why this Triton (``version``: the installed one) does not run the Gluon kernels."""
    if _triton_version(version) < GLUON_MIN_TRITON:
        import triton

        return (f"the warp-specialized Gluon kernels need Triton >= {'.'.join(map(str, GLUON_MIN_TRITON))} (their "
                f"experimental API changed before it), got {version or triton.__version__}")
    return None


@functools.lru_cache(maxsize=1024)
def _triton_fallback(T: int, H: int, I_pad: int, E: int, K: int, wfmt: Format, activation: Activation, dev_name: str,
                     num_sms, atomic: bool) -> MoEKernelConfig:
    """What a call without a config runs where the tuned table or the heuristic chose a Gluon kernel that cannot run
    (an older Triton, ``gluon_problem``; a layer the decode kernel cannot take): the heuristic's config (no tuned
    table: its entries may name the Gluon decode kernel) with a warp-specialized prefill GEMM as the Triton tile it
    replaced (``kernel_configs.triton_tile``). Cached: the per-call path of such layers."""
    h = choose_moe_config(T, H, I_pad, E, K, wfmt, activation, dev_name, table=TunedTable(), num_sms=num_sms)
    return MoEKernelConfig(triton_tile(h.gemm1), triton_tile(h.gemm2), atomic)


def _ws_check(dev: torch.device, interp: bool, w: QuantizedTensor, a_dtype: torch.dtype) -> None:
    """Where ``KernelConfig.warp_specialized`` can run: a CUDA device of capability 9.x (wgmma and
    TMA; Blackwell has no wgmma), not the interpreter, Triton >= 3.6 (``gluon_problem``), the weights contiguous and
    16-byte aligned; 16-bit weights with the GEMM's input in the same dtype (wgmma takes one operand type)."""
    why = gluon_problem()
    if why is not None:
        raise NotImplementedError(f"warp_specialized: {why}; use a config without warp_specialized")
    if interp or dev.type != "cuda":
        raise NotImplementedError("warp_specialized is a Gluon kernel for sm_90: Triton's interpreter cannot run "
                                  "Gluon; use a config without warp_specialized")
    major = _cuda_major(dev.index if dev.index is not None else torch.cuda.current_device())
    if major != 9:
        raise NotImplementedError(f"warp_specialized needs an sm_90 GPU (wgmma), got compute capability {major}.x")
    if _host.e4m3_in_bytes(dev):
        raise NotImplementedError("warp_specialized takes typed E4M3 tensors; this call hands them over as bytes "
                                  "(_host.E4M3_BYTES_FORCED): use a config without warp_specialized")
    if not w.data.is_contiguous() or w.data.data_ptr() % 16:
        raise ValueError("warp_specialized reads the weights through TMA: their data must be contiguous and 16-byte "
                         "aligned (as ExpertWeights stores them)")
    if w.fmt is Format.BF16 and a_dtype != w.data.dtype:
        raise ValueError(f"warp_specialized with 16-bit weights multiplies them with the GEMM's input as is: hidden "
                         f"must be {w.data.dtype} like the weights, got {a_dtype} (use a config without "
                         "warp_specialized)")


def _gather_slot_rows(a: torch.Tensor, al: "AlignResult", BM: int, row_div: int, TK: int, E: int,
                      dot64: bool = False, real_only: bool = False, pair8: bool = False) -> torch.Tensor:
    """The warp-specialized GEMMs' input: the rows of ``a`` [rows, K] (hidden, ``row_div`` = top_k; or the
    slot-indexed intermediate, 1) copied as bytes into block-padded slot order ([max_blocks * BM, K bytes]; padding
    rows zero) by ``_align._gather_slot_rows_kernel`` -- Hopper's TMA has no row gather. ``dot64`` (16-bit ``a``,
    K a multiple of 64): each 64-wide K block in the FP4 decode kernel's dot order (``kernels/_ws_fp4_dec.py``).
    ``real_only`` (the decode kernels): padding rows left unwritten (whatever the buffer held: they only reach
    output columns that are never stored). ``pair8`` (16-bit ``a``, K a multiple of 8): each 8-wide K group in the
    FP4 prefill kernel's pair order (``kernels/_ws_fp4.pair8_cols``)."""
    from ..kernels import _align as _al

    C = a.shape[1] * a.element_size()
    if dot64 and (a.element_size() != 2 or C % 128):
        raise ValueError(f"the dot order permutes 64-element blocks of 16-bit rows, got {a.dtype} rows of {C} bytes")
    if pair8 and (a.element_size() != 2 or C % 16 or dot64):
        raise ValueError(f"the pair order permutes 8-element groups of 16-bit rows (not with dot64), got {a.dtype} "
                         f"rows of {C} bytes, dot64={dot64}")
    rows = torch.empty((al.max_blocks * BM, C), dtype=torch.uint8, device=a.device)
    launch(_al._gather_slot_rows_kernel, (al.max_blocks, cdiv(C, 256)),
           a.view(torch.uint8), rows, al.sorted_ids, al.block_expert, al.num_post_padded, TK, C,
           a.stride(0) * a.element_size(), rows.stride(0), TOP_K=row_div, E_LOC=E, BLOCK_M=BM, BLOCK_C=256,
           DOT64=dot64, REAL_ONLY=real_only, PAIR8=pair8, num_warps=4)
    return rows


class DotRowsPlan:
    """The FP4 decode kernel's GEMM1 input planned for the decode align's launch (``align_slots(quant=...)``, the
    interface of ``formats.triton_quant.Fp8Plan``): hidden's [T, H] 16-bit rows copied with each 64-wide K block in
    the kernel's dot order (``kernels/_align._dot64_rows``) by programs of their own next to the one-program align --
    independent of the slots, so no launch of its own and no gather between the align and GEMM1: the kernel's loader
    copies a block's rows from it by cp.async (``set_ws_fp4_decode``'s ``x_gather``). :meth:`result` afterwards."""

    __slots__ = ("x", "out", "block_t", "block_c")

    num_warps = 4

    def __init__(self, x: torch.Tensor):
        T, C = x.shape
        if x.element_size() != 2 or C % 64 or x.stride(1) != 1:
            raise ValueError(f"DotRowsPlan: 16-bit rows of a multiple of 64 contiguous columns, got {x.dtype} "
                             f"{tuple(x.shape)} with strides {tuple(x.stride())}")
        self.x = x
        self.out = torch.empty((T, C), dtype=x.dtype, device=x.device)
        # a tile of a few rows x up to 512 columns a program (one load and store each): one gpt-oss-120b token's
        # 5.6 KB in 6 programs, 64 tokens in 16 x 6
        self.block_t = max(1, min(8, next_pow2(cdiv(T, 16))))
        self.block_c = min(512, next_pow2(C))

    @property
    def programs(self) -> int:
        return cdiv(self.x.shape[0], self.block_t) * cdiv(self.x.shape[1], self.block_c)

    def fused_args(self):
        """(runtime arguments from ``x_ptr`` on, constexprs) of ``_align_scatter_quant_kernel`` with ``DOT_ROWS``
        (its scale pointers and quantizer constexprs unused)."""
        x, out = self.x, self.out
        T, C = x.shape
        return (x, out, out, out, T, C, x.stride(0), out.stride(0), 0, 1), dict(
            GROUPS=False, SCALE_MODE=0, GROUP=0, MX=False, OUT_FP32=False, BLOCK_T=self.block_t,
            BLOCK_C=self.block_c, DOT_ROWS=True)

    def result(self) -> torch.Tensor:
        return self.out


@functools.lru_cache(maxsize=None)
def _ws_layouts(block_n: int, block_k: int, dtype: torch.dtype):
    from triton.experimental.gluon import language as gl

    gdt = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16}.get(dtype, gl.float8e4nv)
    return (gl.NVMMASharedLayout.get_default_for([64, block_k], gdt),
            gl.NVMMASharedLayout.get_default_for([block_n, block_k], gdt))


def _ws_gemm(c: KernelConfig, a: torch.Tensor, a_s, a_s_stride, w: QuantizedTensor, w_s, wse, wsn, bias, has_bias,
             tw_flat, q_scale, out_q, al: "AlignResult", out: torch.Tensor, N: int, row_div: int, TK: int, E: int,
             act_code: int, gated: bool, p, round_tl, weight_on_input: bool, mul_routing_weight: bool,
             num_sms, *, a_padded: bool = False, out_padded: bool = False, a_scales_padded: bool = False,
             part=None, cnt=None, pdl=None, layer_gated: Optional[bool] = None) -> None:
    """One GEMM by ``kernels/_ws_gemm``: its input rows ``a`` [rows, K] e4m3 or 16-bit (hidden or
    its quantization for GEMM1, ``row_div`` = top_k; the slot-indexed intermediate for GEMM2,
    ``row_div`` = 1) gathered into block-padded slot order (one extra write and read of P x K
    elements), then the persistent warp-specialized kernel into ``out`` [T*K, N] by slot -- for decode tiles
    (block_m 16, OPT-IN) ``kernels/_ws_dec`` (:func:`_ws_dec_launch`; ``part`` / ``cnt`` its split-K scratch,
    ``pdl`` its programmatic-dependent-launch keywords, :func:`_pdl_args`).
    ``a_padded``: ``a`` already holds the rows in block-padded order (GEMM2 after GEMM1 with
    ``out_padded``, which stores at the rows' padded positions into ``out`` [P_max, N]): no gather;
    ``a_scales_padded``: its per-row scales ``a_s`` are in that order too (the 1 x 128 group
    quantization of the padded intermediate). ``layer_gated``: whether the layer's activation is gated (default
    ``gated``; GEMM2 passes the layer's) -- the row copies' rule reads it (:func:`kernel_configs.ws_x_gather_auto`)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from ..kernels import _ws_gemm as _ws

    Kd = a.shape[1]
    BM, BK = c.block_m, c.block_k
    dt = a.dtype if a.element_size() == 2 else _E4M3
    decode = BM == WS_DEC_BLOCK_M
    dyn = not decode and _ws_dyn(w.fmt, E)
    # the loader copies the rows itself (cp.async) where they are 16-byte aligned: the decode kernel's by default,
    # the prefill kernel's under set_ws_x_gather
    aligned = (not a_padded and a.data_ptr() % 16 == 0 and a.stride(1) == 1
               and (a.stride(0) * a.element_size()) % 16 == 0 and Kd % 16 == 0)
    if decode:
        x_gather = aligned and _WS_DEC["x_gather"]
    else:
        xg = _WS_X_GATHER["mode"]
        x_gather = aligned and (ws_x_gather_auto(N * (2 if gated else 1), TK / max(1, E), dyn=dyn,
                                                 gated=gated if layer_gated is None else layer_gated,
                                                 weight_format=w.fmt)
                                if xg == "auto" else xg)
    rows = a.view(dt) if a_padded or x_gather else _gather_slot_rows(a, al, BM, row_div, TK, E,
                                                                     real_only=decode).view(dt)
    if decode:
        _ws_dec_launch(c, rows, a_s, a_s_stride, w, w_s, wse, wsn, bias, has_bias, tw_flat, q_scale, out_q, al, out, N,
                       row_div, TK, E, act_code, gated, p, round_tl, weight_on_input, mul_routing_weight, num_sms, part,
                       cnt, out_padded=out_padded, a_scales_padded=a_scales_padded, x_gather=x_gather, pdl=pdl)
        return
    pipe = (c.pipelined_promotion or _WS_PIPE["enabled"]) and w.fmt in WS_PROMOTED_FORMATS
    w_scalar = w.fmt is Format.FP8_BLOCK and _ws_block_w_scalar(c, N, gated, pipe)
    a_layout, w_layout = _ws_layouts(c.block_n, BK, dt)
    a_desc = TensorDescriptor.from_tensor(rows, [64, BK], a_layout)
    w_desc = TensorDescriptor.from_tensor(w.data.view(-1, Kd), [c.block_n, BK], w_layout)
    tiles = al.max_blocks * cdiv(N, c.block_n)
    _ws._ws_gemm_kernel[(max(1, min(tiles, num_sms or 1)),)](
        a_desc, w_desc, out, a_s, w_s, bias, tw_flat, q_scale, al.sorted_ids, al.block_expert, al.num_post_padded,
        N, Kd, TK, out.stride(0), a_s_stride, wse, wsn, bias.stride(0) if has_bias else 0,
        float(p.alpha), float(p.beta), float(p.limit), rows, rows.stride(0),
        TOP_K=row_div, E_LOC=E, ACT=act_code, GATED=gated, QUANT=_QUANT_CODE[w.fmt], OUT_Q=out_q,
        ROUND_DTYPE=round_tl, HAS_BIAS=has_bias, WEIGHT_ON_INPUT=weight_on_input,
        MUL_ROUTING_WEIGHT=mul_routing_weight, BN=c.block_n, BK=BK, STAGES=c.num_stages, GROUP_M=c.group_m,
        SKIP_HALF=_ws_skips_padding_half(w.fmt), RCP_DIV=_RCP_DIV["enabled"], OUT_PADDED=out_padded,
        A_PADDED=a_scales_padded, ZERO_PAD=out_padded and _WS_ZERO_PAD_ROWS,
        PIPE=pipe, W_SCALAR=w_scalar, X_GATHER=x_gather, **_ws_dynamic_args(dyn, al), num_warps=4)


# ---- the warp-specialized 16-bit / FP8 GEMMs at decode (opt-in) -----------------------------------------------

# kernels/_ws_dec.py: programs an SM (each one consumer warpgroup and its loader warp; registers capped as for the FP4
# decode kernel, _WS_FP4_DEC_MAXNREG), ring stages (0: as many as fit that many programs an SM), 128-byte K blocks a
# ring step
_WS_DEC = {"enabled": os.environ.get("FUSEDMOE_WS_DECODE", "0") == "1", "ctas": 2, "stages": 0, "blocks": 1,
           # the token rows by cp.async from the unsorted rows (no gather launch; where they are 16-byte aligned)
           "x_gather": os.environ.get("FUSEDMOE_WS_DECODE_CPASYNC", "1") != "0",
           # both GEMMs in one launch (_ws_dec_fused_kernel), where nothing runs between them
           "fused": os.environ.get("FUSEDMOE_WS_DECODE_FUSED", "0") == "1",
           # every consumer thread frees the ring slots (no warpgroup barriers around one thread's arrive; thirty-third
           # session, compiled only: off until measured; not in the fused launch)
           "t_release": os.environ.get("FUSEDMOE_WS_DECODE_TRELEASE", "0") == "1"}


def set_ws_decode(enabled: bool, ctas: int = 2, num_stages: int = 0, blocks: int = 1, x_gather: bool = True,
                  fused: bool = False, thread_release: bool = False) -> tuple:
    """OPT-IN (thirtieth session; on the H200 correct but not faster than the Triton decode GEMMs, 0.77-1.11x at one
    token -- thirty-first session, BENCHMARKS.md; ``False`` is the default, ``FUSEDMOE_WS_DECODE=1``): calls without
    a config whose chosen config has decode tiles (block_m <= 16) with BF16 / FP16 or FP8 (per tensor, per channel,
    128 x 128 blocks) weights run both GEMMs in the warp-specialized decode kernel (``kernels/_ws_dec.py``,
    :func:`auto_ws_decode`): ``ctas`` programs an SM (1-4), ``num_stages`` ring steps (2-8; 0: as many as fit),
    ``blocks`` 128-byte K blocks a step (1 / 2), split-K by :func:`ws_fp4_dec_split`'s makespan rule; ``x_gather``
    (``FUSEDMOE_WS_DECODE_CPASYNC``, default on): the loader copies a block's token rows by cp.async from the
    unsorted rows where they are 16-byte aligned, instead of a gather launch into slot order and TMA boxes;
    ``fused`` (``FUSEDMOE_WS_DECODE_FUSED=1``, default off): both GEMMs in one persistent launch where nothing runs
    between them (16-bit weights, FP8 per tensor with a static intermediate scale;
    ``kernels/_ws_dec._ws_dec_fused_kernel``); ``thread_release`` (``FUSEDMOE_WS_DECODE_TRELEASE=1``, default off;
    thirty-third session, compiled only): every consumer thread frees the ring slots instead of one thread's arrive
    between two warpgroup barriers (sm_90 SASS: the K loop's 2-3 ``BAR.SYNC`` a step go; also for the table's
    entries; not in the fused launch). Returns the previous ``(enabled, ctas, num_stages, blocks, x_gather, fused,
    thread_release)``. (The tuned table may choose the kernel for a shape whatever this switch says: thirty-second
    session, 20 of 32 re-tuned decode points.)"""
    if not all(isinstance(v, bool) for v in (enabled, x_gather, fused, thread_release)):
        raise TypeError(f"enabled, x_gather, fused and thread_release must be bools, got {enabled!r}, {x_gather!r}, "
                        f"{fused!r}, {thread_release!r}")
    if ctas not in WS_DEC_CTAS or num_stages not in (0,) + tuple(range(2, 9)) or blocks not in (1, 2):
        raise ValueError(f"set_ws_decode: ctas must be 1-4, num_stages 0 or 2-8 and blocks 1 / 2, got {ctas}, "
                         f"{num_stages}, {blocks}")
    prev = (_WS_DEC["enabled"], _WS_DEC["ctas"], _WS_DEC["stages"], _WS_DEC["blocks"], _WS_DEC["x_gather"],
            _WS_DEC["fused"], _WS_DEC["t_release"])
    _WS_DEC.update(enabled=enabled, ctas=ctas, stages=num_stages, blocks=blocks, x_gather=x_gather, fused=fused,
                   t_release=thread_release)
    return prev


def ws_dec_stages(weight_format: Format, blocks: int, ctas: int, num_stages: int = 0) -> int:
    """Ring stages of the 16-bit / FP8 decode kernel: ``num_stages``, or (0) as many as let ``ctas`` programs share an
    SM's 228 KB of shared memory, 2-8 (one 128-byte block a step: 8 for 1-2 programs, 7 for 3)."""
    if num_stages:
        return num_stages
    stage = ws_dec_stage_bytes(blocks * ws_dec_block_k(weight_format), weight_format)
    return max(2, min(8, ws_dec_max_stages(stage, ctas)))


def _ws_dec_layer_problem(w13: QuantizedTensor, w2: QuantizedTensor, dtype: torch.dtype, dev: torch.device,
                          interp: bool, H: int, I_pad: int) -> Optional[str]:
    """None, or why the 16-bit / FP8 decode kernel cannot take this layer: an sm_90 GPU (not the interpreter),
    weights in ``WS_FORMATS`` (16-bit ones in hidden's dtype), contiguous and 16-byte aligned, H and I_pad
    multiples of 16 (TMA row strides)."""
    if interp or dev.type != "cuda":
        return "it is a Gluon kernel for sm_90 GPUs (Triton's interpreter cannot run Gluon)"
    if w13.fmt not in WS_FORMATS:
        return f"it takes {[f.name for f in WS_FORMATS]} weights, got {w13.fmt.name}"
    if w13.fmt is Format.BF16 and (w13.data.dtype != dtype or w2.data.dtype != dtype):
        return f"its 16-bit weights must be in hidden's dtype {dtype}, got {w13.data.dtype}"
    if H % 16 or I_pad % 16:
        return f"it needs H and intermediate_size_padded multiples of 16 (TMA row strides), got {H} and {I_pad}"
    major = _cuda_major(dev.index if dev.index is not None else torch.cuda.current_device())
    if major != 9:
        return f"it needs an sm_90 GPU (wgmma), got compute capability {major}.x"
    for w in (w13, w2):
        if not w.data.is_contiguous() or w.data.data_ptr() % 16:
            return "it reads the weights through TMA: their data must be contiguous and 16-byte aligned"
    return None


def auto_ws_decode(cfg: MoEKernelConfig, w13: QuantizedTensor, w2: QuantizedTensor, act_format: Format,
                   dtype: torch.dtype, device: torch.device, tokens: int, top_k: int, activation: Activation,
                   interp: bool = False) -> MoEKernelConfig:
    """The config a call without an explicit one runs for 16-bit / FP8 weights: ``cfg``, or with the opt-in
    :func:`set_ws_decode`, decode tiles (block_m <= 16), no atomic combine and a layer the kernel can take, the
    decode kernel's tiles for both GEMMs (``ws_dec_config``; split-K from the expected blocks -- experts hit -- by
    :func:`ws_fp4_dec_split`, all programs busy). (A tuned-table entry naming the kernel: :func:`auto_ws`.)"""
    if (not _WS_DEC["enabled"] or cfg.block_m > WS_DEC_BLOCK_M or cfg.atomic_combine
            or _ws_dec_layer_problem(w13, w2, dtype, device, interp, w13.shape[-1], w2.shape[-1]) is not None):
        return cfg
    _, sms = _device_info(device)
    c = ws_decode_config(tokens, w13.shape[-1], w2.shape[-1], w13.shape[0], top_k, w13.fmt, activation.is_gated,
                         _WS_DEC["blocks"], sms)
    return MoEKernelConfig(c.gemm1, c.gemm2, cfg.atomic_combine)


def ws_decode_config(tokens: int, hidden: int, intermediate_padded: int, experts: int, top_k: int,
                     weight_format: Format, gated: bool, blocks: int = 1, num_sms: Optional[int] = None,
                     ctas: Optional[int] = None) -> MoEKernelConfig:
    """The 16-bit / FP8 decode kernel's config for a layer shape at ``tokens``, as :func:`set_ws_decode`'s settings
    (programs an SM, stages) run it: ``blocks`` 128-byte K blocks a ring step (FP8 128 x 128 blocks: always one, a
    scale block a step), split-K of each GEMM by :func:`ws_fp4_dec_split` over the expected blocks (one an expert
    hit) on ``num_sms`` (default 132) SMs. What :func:`auto_ws_decode` picks with the switch on, and the tuner's
    candidates (``fusedmoe.bench.tune.search_space``). ``ctas``: programs an SM, recorded in the configs
    (``persistent``; the ring's stages then as many as fit, unless ``set_ws_decode`` fixed them); None: the
    switch's, left to the launch."""
    n = ctas or _WS_DEC["ctas"]  # (``ws_dec_config`` refuses a ctas outside WS_DEC_CTAS)
    kb = min(blocks, ws_dec_max_blocks(weight_format))
    st = ws_dec_stages(weight_format, kb, n, _WS_DEC["stages"])
    s1, s2 = _dec_splits(hidden, intermediate_padded, experts, tokens, top_k, gated,
                         kb * ws_dec_block_k(weight_format), n * (num_sms or 132))
    return MoEKernelConfig(ws_dec_config(gated, "gemm1", weight_format, s1, st, kb, ctas),
                           ws_dec_config(False, "gemm2", weight_format, s2, st, kb, ctas))


def _decode_layer_problem(w13: QuantizedTensor, w2: QuantizedTensor, act_format: Format, dtype: torch.dtype,
                          device: torch.device, interp: bool) -> Optional[str]:
    """None, or why the decode kernel of ``w13``'s format family cannot take this layer: FP4 weights the FP4 decode
    kernel (``set_ws_fp4``, ``_ws_fp4_problem``), the others the 16-bit / FP8 one (``_ws_dec_layer_problem``)."""
    H, I_pad = w13.shape[-1], w2.shape[-1]
    if w13.fmt in WS_FP4_FORMATS:
        if not _WS_FP4["enabled"]:
            return "the FP4 warp-specialized kernels are switched off (set_ws_fp4)"
        return _ws_fp4_problem(w13, w2, act_format, dtype, device, interp, H, I_pad)
    return _ws_dec_layer_problem(w13, w2, dtype, device, interp, H, I_pad)


def auto_ws(cfg: MoEKernelConfig, w13: QuantizedTensor, w2: QuantizedTensor, act_format: Format, dtype: torch.dtype,
            device: torch.device, tokens: int, top_k: int, activation: Activation,
            interp: bool = False) -> MoEKernelConfig:
    """What a call without a config runs: :func:`auto_ws_fp4` for FP4 weights, :func:`auto_ws_decode` for 16-bit /
    FP8 ones (``fusedmoe bench`` records and passes the same). Where the tuned table chose a decode kernel (decode
    tiles, block_m 16, warp-specialized), its config as it is, whatever the opt-in switches say. The Triton kernels'
    config (``_triton_fallback``) where the table or the heuristic chose a Gluon kernel that cannot run: a Triton
    the Gluon kernels do not run on (:func:`gluon_problem`), E4M3 numbers as bytes (``_host.e4m3_in_bytes``: the
    Gluon kernels take typed E4M3 tensors), or a decode-kernel entry with an atomic combine or for
    a layer its kernel cannot take (:func:`_decode_layer_problem`: e.g. 16-bit weights in another dtype than hidden,
    unaligned weights, FP4 weights with activations other than BF16 or ``set_ws_fp4(False)``)."""
    ws = cfg.gemm1.warp_specialized or cfg.gemm2.warp_specialized
    table_dec = ws and cfg.block_m == WS_DEC_BLOCK_M  # (an entry of the tuned table: the heuristic never picks it)
    no_gluon = gluon_problem() is not None or _host.e4m3_in_bytes(device)
    if ws and (no_gluon or (table_dec and (
            cfg.atomic_combine or _decode_layer_problem(w13, w2, act_format, dtype, device, interp) is not None))):
        dev_name, sms = _device_info(device)
        return _triton_fallback(tokens, w13.shape[-1], w2.shape[-1], w13.shape[0], top_k, w13.fmt, activation,
                                dev_name, sms, cfg.atomic_combine)
    if table_dec or no_gluon:
        return cfg
    if w13.fmt in WS_FP4_FORMATS:
        return auto_ws_fp4(cfg, w13, w2, act_format, dtype, device, tokens, top_k, activation, interp)
    return auto_ws_decode(cfg, w13, w2, act_format, dtype, device, tokens, top_k, activation, interp)


@functools.lru_cache(maxsize=None)
def _ws_dec_layout(block_k: int, dtype: torch.dtype):
    """The shared-memory layout of every box of the decode kernel (16 / 8 token rows, 32 weight rows): 128-byte rows,
    128-byte swizzle -- one layout, so that the 8-row boxes land in the 16-row buffers as the wgmma reads them."""
    from triton.experimental.gluon import language as gl

    gdt = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16}.get(dtype, gl.float8e4nv)
    return gl.NVMMASharedLayout.get_default_for([WS_DEC_BLOCK_M, block_k], gdt)


def _ws_dec_boxes(x_src: torch.Tensor, w_views, bke: int) -> list:
    """The decode kernels' TMA descriptors (one layout, ``_ws_dec_layout``): the token rows of ``x_src`` in boxes of
    16 and of 8 rows, then a [32, bke] weight box over each of ``w_views``."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    layout = _ws_dec_layout(bke, x_src.dtype)
    return ([TensorDescriptor.from_tensor(x_src, [h, bke], layout) for h in (WS_DEC_BLOCK_M, 8)]
            + [TensorDescriptor.from_tensor(v, [32, bke], layout) for v in w_views])


def _ws_dec_grid(c: KernelConfig, units: int, num_sms, default_ctas: int) -> "tuple[tuple, Optional[int]]":
    """The decode kernels' persistent grid (the config's programs an SM, ``persistent``, else ``default_ctas``: the
    switch's; at most one program a unit) and its register cap."""
    ctas = c.persistent or default_ctas
    return (max(1, min(units, ctas * (num_sms or 1))),), _WS_FP4_DEC_MAXNREG[ctas]


def _ws_dec_launch(c: KernelConfig, rows: torch.Tensor, a_s, a_s_stride, w: QuantizedTensor, w_s, wse, wsn, bias,
                   has_bias, tw_flat, q_scale, out_q, al: "AlignResult", out: torch.Tensor, N: int, row_div: int,
                   TK: int, E: int, act_code: int, gated: bool, p, round_tl, weight_on_input: bool,
                   mul_routing_weight: bool, num_sms, part, cnt, *, out_padded: bool = False,
                   a_scales_padded: bool = False, x_gather: bool = False, pdl=None) -> None:
    """The 16-bit / FP8 decode kernel on gathered rows (``rows`` [max_blocks * 16, K] in the weights' operand dtype;
    ``x_gather``: the unsorted rows [rows, K], row ``slot // row_div``, 16-byte aligned, copied by the loader):
    persistent, ``set_ws_decode``'s programs an SM, into ``out`` [T*K, N] by slot (``out_padded``: [max_blocks * 16,
    N] at the rows' padded positions -- the next GEMM's ``rows``); ``part`` / ``cnt``: the split-K scratch
    (``c.split_k`` > 1: ``tiles * split_k * 64 * 16`` fp32 and ``tiles`` zeroed int32, tiles = blocks x column
    tiles)."""
    from ..kernels import _ws_dec as _wd

    Kd = rows.shape[1]
    bke = ws_dec_block_k(w.fmt)
    kb = c.block_k // bke
    if c.split_k > 1 and (part is None or cnt is None):
        raise ValueError("the decode kernel's split-K needs its partial-sum and counter scratch")
    # the token rows in boxes of 16 rows and of 8 (for blocks with at most 8 real rows); with x_gather the loader
    # copies the rows itself and the descriptors only carry the tiles' shape and layout: over the weights (at least
    # 32 rows of the operand dtype), not over a source that may have a single row
    w_view = w.data.view(-1, Kd)
    descs = _ws_dec_boxes(w_view if x_gather else rows, [w_view], bke)
    num_n = cdiv(N, 32) if gated else cdiv(N, 64)
    grid, maxnreg = _ws_dec_grid(c, al.max_blocks * num_n * c.split_k, num_sms, _WS_DEC["ctas"])
    blockwise = w.fmt is Format.FP8_BLOCK
    _wd._ws_dec_kernel[grid](
        *descs, out, a_s, w_s, bias, tw_flat, q_scale, al.sorted_ids, al.block_expert, al.num_post_padded,
        tw_flat if part is None else part, tw_flat if cnt is None else cnt, rows, N, w.shape[-2], Kd,
        cdiv(cdiv(Kd, bke), kb), cdiv(Kd, 128), num_n, TK, out.stride(0), a_s_stride, wse, wsn,
        w_s.stride(2) if blockwise else 0, bias.stride(0) if has_bias else 0, rows.stride(0), float(p.alpha),
        float(p.beta), float(p.limit), TOP_K=row_div, E_LOC=E, ACT=act_code, GATED=gated, QUANT=_QUANT_CODE[w.fmt],
        OUT_Q=out_q,
        ROUND_DTYPE=round_tl, HAS_BIAS=has_bias, WEIGHT_ON_INPUT=weight_on_input,
        MUL_ROUTING_WEIGHT=mul_routing_weight, RCP_DIV=_RCP_DIV["enabled"], STAGES=c.num_stages, SPLIT=c.split_k,
        KB=kb, OUT_PADDED=out_padded, A_PADDED=a_scales_padded, X_GATHER=x_gather, T_RELEASE=_WS_DEC["t_release"],
        num_warps=4, maxnreg=maxnreg, **(pdl or {}))


def _ws_dec_fuses(c1: KernelConfig, c2: KernelConfig, wfmt: Format, a2_scale, hidden: torch.Tensor) -> bool:
    """Whether a call runs both decode GEMMs in one launch (``set_ws_decode(..., fused=True)``): both configs decode
    tiles of the 16-bit / FP8 decode kernel with the same ring, 16-bit weights or FP8 per tensor with a static
    intermediate scale (nothing to run between the GEMMs), the padded hand-off on, GEMM1's input rows 16-byte
    aligned for cp.async (16-bit: ``hidden`` itself; FP8: its quantization, a fresh tensor)."""
    return (_WS_DEC["fused"] and c1.warp_specialized and c2.warp_specialized and c1.block_m == WS_DEC_BLOCK_M
            and c2.block_m == WS_DEC_BLOCK_M and c1.block_k == c2.block_k and c1.num_stages == c2.num_stages
            and c1.persistent == c2.persistent
            and (wfmt is Format.BF16 or (wfmt is Format.FP8_TENSOR and a2_scale is not None))
            and _WS_PADDED_HANDOFF["enabled"]
            and (wfmt is not Format.BF16 or (hidden.data_ptr() % 16 == 0
                                             and (hidden.stride(0) * hidden.element_size()) % 16 == 0)))


def _ws_dec_fused_launch(c1: KernelConfig, c2: KernelConfig, a1: torch.Tensor, a1_s, w13: QuantizedTensor, w13_s,
                         wse1, wsn1, b13, has_b13, w2: QuantizedTensor, w2_s, wse2, wsn2, b2, has_b2, tw_flat, q_scale,
                         out_q, al: "AlignResult", inter: torch.Tensor, y: torch.Tensor, K: int, TK: int, E: int,
                         act_code: int, gated: bool, p, round_tl, weight_on_input: bool, num_sms, part1, cnt1, part2,
                         cnt2, dep, *, pdl=None) -> None:
    """Both decode GEMMs in one persistent launch (``kernels/_ws_dec._ws_dec_fused_kernel``): GEMM1 from ``a1`` [T, H]
    (hidden or its e4m3 quantization, rows by cp.async) into ``inter`` [max_blocks * 16, I_pad] at the rows' padded
    positions, GEMM2 from there into ``y`` [T*K, H] by slot; ``dep`` [max_blocks] int32 zeroed (the align's zero
    fill), the per-block count of GEMM1's stored column tiles that GEMM2's loader waits for. The grid is at most the
    programs that fit the SMs at once (``set_ws_decode``'s programs an SM): every program may wait for any other's
    GEMM1 units."""
    from ..kernels import _ws_dec as _wd

    H, I_pad = a1.shape[1], inter.shape[1]
    bke = ws_dec_block_k(w13.fmt)
    kb = c1.block_k // bke
    w1_view = w13.data.view(-1, H)
    # (the loader copies the token rows itself: the x descriptors only carry the tiles' shape and layout)
    descs = _ws_dec_boxes(w1_view, [w1_view, w2.data.view(-1, I_pad)], bke)
    num_n1 = cdiv(I_pad, 32) if gated else cdiv(I_pad, 64)
    num_n2 = cdiv(H, 64)
    grid, maxnreg = _ws_dec_grid(c1, al.max_blocks * max(num_n1 * c1.split_k, num_n2 * c2.split_k), num_sms,
                                 _WS_DEC["ctas"])
    _wd._ws_dec_fused_kernel[grid](
        *descs, a1, inter, y, a1_s, w13_s, b13, q_scale, w2_s, b2, tw_flat, al.sorted_ids,
        al.block_expert, al.num_post_padded, part1, cnt1, part2, cnt2, dep, I_pad, H, w13.shape[-2],
        cdiv(cdiv(H, bke), kb), cdiv(cdiv(I_pad, bke), kb), num_n1, num_n2, TK, a1.stride(0), inter.stride(0),
        y.stride(0), wse1, wsn1, wse2, wsn2, b13.stride(0) if has_b13 else 0, b2.stride(0) if has_b2 else 0,
        float(p.alpha), float(p.beta), float(p.limit), TOP_K=K, E_LOC=E, ACT=act_code, GATED=gated,
        QUANT=_QUANT_CODE[w13.fmt], OUT_Q1=out_q, ROUND_DTYPE=round_tl, HAS_BIAS1=has_b13, HAS_BIAS2=has_b2,
        WEIGHT_ON_INPUT=weight_on_input, RCP_DIV=_RCP_DIV["enabled"], STAGES=c1.num_stages, SPLIT1=c1.split_k,
        SPLIT2=c2.split_k, KB=kb, num_warps=4, maxnreg=maxnreg, **(pdl or {}))


# ---- the warp-specialized MXFP4 x BF16 GEMMs (prefill) ----------------------------------------------

# the FP4 decode kernel's default reach: calls of one token (thirty-fifth session, H200, in-process A/B over
# gpt-oss-120b MXFP4 / NVFP4 and Nemotron-3-Super / Nano MXFP4 / NVFP4 with the block scales through the ring and
# every consumer thread freeing the slots: 1.04-1.27x the Triton GEMMs at one token on 5 of the 6 points, 0.99x on
# Nemotron-3-Nano MXFP4; at 2 tokens 0.97-1.31x, at 4 0.93-1.03x, at 8 and 64 tokens 0.82-1.01x)
WS_FP4_DEC_AUTO_MAX_TOKENS = 1


def _env_decode_tokens(value: str):
    """``FUSEDMOE_WS_FP4_DECODE``: unset -- ``WS_FP4_DEC_AUTO_MAX_TOKENS``; ``1`` -- every call with decode tiles
    (True); ``0`` -- never (False); another whole number -- calls of at most that many tokens."""
    if value == "":
        return WS_FP4_DEC_AUTO_MAX_TOKENS
    if value in ("0", "1"):
        return value == "1"
    if not value.isdigit():
        raise ValueError(f"FUSEDMOE_WS_FP4_DECODE must be 0, 1 or a whole number of tokens, got {value!r}")
    return int(value)


def _env_ws_fp4_block_k(value: str) -> int:
    """``FUSEDMOE_WS_FP4_BK`` (:func:`set_ws_fp4_block_k`): "64" or "128"."""
    if value not in {str(k) for k in WS_FP4_BLOCK_KS}:
        raise ValueError(f"FUSEDMOE_WS_FP4_BK must be 64 or 128, got {value!r}")
    return int(value)


def _env_min_rows(value: str) -> int:
    """``FUSEDMOE_WS_FP4_MIN_ROWS``: rows per local expert, an int >= 0 (:func:`set_ws_fp4_min_rows`)."""
    if not value.isdigit():
        raise ValueError(f"FUSEDMOE_WS_FP4_MIN_ROWS must be an int >= 0 (rows per local expert), got {value!r}")
    return int(value)


# kernels/_ws_fp4.py: the heuristic's and the tuned table's prefill tiles (block_m >= 128) of MXFP4 weights with
# BF16 activations run there instead of the Triton kernels on sm_90
_WS_FP4 = {"enabled": os.environ.get("FUSEDMOE_WS_FP4", "1") != "0", "block_m": 0,
           # 256-token tiles as this many chunks, only those with real rows multiplied (1: whole tiles; 0: by format,
           # WS_FP4_AUTO_CHUNKS)
           "chunks": int(os.environ.get("FUSEDMOE_WS_FP4_CHUNKS",
                                        {"1": "2", "0": "1"}.get(os.environ.get("FUSEDMOE_WS_FP4_SKIP_HALF", ""),
                                                                 "0"))),
           "nvfp4": os.environ.get("FUSEDMOE_WS_NVFP4", "1") == "1",
           # the FP4 decode kernel for calls of at most this many tokens (True: every call with decode tiles; False:
           # none); FUSEDMOE_WS_FP4_DECODE=1 / 0 / a number
           "decode": _env_decode_tokens(os.environ.get("FUSEDMOE_WS_FP4_DECODE", "")),
           # the padded hand-off between the prefill kernel's GEMMs (the FP4 decode kernel always takes
           # it under set_ws_padded_handoff)
           "padded": os.environ.get("FUSEDMOE_WS_FP4_PADDED", "1") == "1",
           # the prefill kernel's block scales loaded a K step ahead (set_ws_fp4_scales_ahead; the default since the
           # forty-first session)
           "sc_ahead": os.environ.get("FUSEDMOE_WS_FP4_SC_AHEAD", "1") != "0",
           # 256-token tiles as 64-row chunks joined into wgmmas as wide as the real rows (set_ws_fp4_join; the
           # default since the forty-second session)
           "join": os.environ.get("FUSEDMOE_WS_FP4_JOIN", "1") != "0",
           # the prefill kernel's block scales through its ring (set_ws_fp4_scales_smem: "auto", the default since
           # the fifty-ninth session, for the formats of WS_FP4_SSMEM_AUTO_FORMATS)
           "s_smem": {"1": True, "0": False}.get(os.environ.get("FUSEDMOE_WS_FP4_SSMEM", "auto"), "auto"),
           # a gated prefill tile's gate and up halves stored by one store (set_ws_fp4_one_store; the default since
           # the fifty-ninth session)
           "one_store": os.environ.get("FUSEDMOE_WS_FP4_ONESTORE", "1") != "0",
           # two 64-wide K steps a ring slot where the shared memory holds them: the prefill kernel's 128-token
           # tiles (set_ws_fp4_block_k; the default since the sixtieth session)
           "block_k": _env_ws_fp4_block_k(os.environ.get("FUSEDMOE_WS_FP4_BK", "128")),
           # 128-token tiles in two 64-row chunks joined as the 256-token ones (set_ws_fp4_join128; the default since
           # the sixtieth session)
           "join128": os.environ.get("FUSEDMOE_WS_FP4_JOIN128", "1") != "0",
           # both prefill GEMMs' K in the pair order (set_ws_fp4_pair_order: "auto", the default since the
           # sixty-first session, for non-gated layers)
           "pairs": {"1": True, "0": False}.get(os.environ.get("FUSEDMOE_WS_FP4_PAIRS", "auto"), "auto"),
           # the prefill kernel also from this many rows per local expert where the config has smaller tiles
           # (set_ws_fp4_min_rows; 0, the default: the config's prefill tiles only)
           "min_rows": _env_min_rows(os.environ.get("FUSEDMOE_WS_FP4_MIN_ROWS", "0"))}
# the weight formats whose FP4 prefill GEMMs take their block scales through the ring under set_ws_fp4_scales_smem's
# "auto" (H100, fifty-ninth session, decode_ab.py at 2048 / 4096 / 8192 tokens on gpt-oss-120b and Nemotron-3-Super /
# -Nano: NVFP4 1.08-1.15x at 2048, and in a three-round rerun 1.05x at 4096, 1.01-1.02x at 8192 -- where the two-round
# run had read Nemotron-3-Super 0.99x / 0.94x --; MXFP4 0.92-1.01x)
WS_FP4_SSMEM_AUTO_FORMATS = (Format.NVFP4,)
# the chunks of a 256-token tile by weight format where set_ws_fp4_chunks says 0 (the default): the H200's A/B of the
# thirty-second session (gpt-oss-120b, Nemotron-3-Super / Nano at 4096 / 8192 tokens, the padded hand-off on) --
# MXFP4 2 chunks 1.02-1.06x whole tiles on all six points; NVFP4 0.94-0.97x on gpt-oss-120b, 1.04-1.05x on Nemotron
WS_FP4_AUTO_CHUNKS = {Format.MXFP4: 2, Format.NVFP4: 1}
# NVFP4 prefill in the warp-specialized kernel from this many rows per local expert. 0 since the sixty-second
# session: wherever the config has prefill tiles, as MXFP4. The thirty-second session's H200 A/B had set 64 (1.05-1.17x
# the Triton GEMMs at 128-192 rows, 0.97-1.00x at 32-48), before the kernel's NVFP4 scales through the ring (1.05-1.15x
# at 2048-4096 tokens) and its 128-token tiles' joined chunks and two K steps a slot (1.21x at 48 rows, MXFP4). The
# only points the rule moves are 48 rows an expert (128-token tiles from there): gpt-oss-120b NVFP4 at 1536 tokens ran
# the Triton GEMMs in 2305.5 us on the H200 (sixty-second session, call 2), against MXFP4's 1404.2 in this kernel.
WS_NVFP4_MIN_ROWS_PER_EXPERT = 0
_WS_FP4["nvfp4_min_rows"] = WS_NVFP4_MIN_ROWS_PER_EXPERT
# the FP4 decode kernel (kernels/_ws_fp4_dec.py): programs an SM (each one consumer warpgroup and its loader warp:
# 8 warps with the padding) and the register cap that lets that many share an SM's 64K registers, ring stages
# (4 stages since the fifty-third session: H100, Nemotron-3-Super MXFP4 / NVFP4 at one token 1.04-1.05x the 8 stages
# before, the other FP4 model points' tuned-table entries keep theirs)
_WS_FP4_DEC = {"ctas": 3, "stages": 4, "block_k": 128,
               # GEMM1's token rows by cp.async from the align launch's dot-order copy of hidden (DotRowsPlan) instead
               # of a gather launch and TMA boxes (thirty-third session; compiled for sm_90 only until its GPU tests
               # ran)
               "x_gather": os.environ.get("FUSEDMOE_WS_FP4_DECODE_CPASYNC", "1") != "0",
               # the block scales through the ring (cp.async by the loader, read from shared memory) instead of the
               # consumer's global loads (thirty-third session; H200, thirty-fifth: 1.07-1.82x the global loads on
               # all 18 points of the A/B -- three FP4 model shapes x MXFP4 / NVFP4 x 1 / 8 / 64 tokens)
               "s_smem": os.environ.get("FUSEDMOE_WS_FP4_DECODE_SSMEM", "1") != "0",
               # every consumer thread frees the ring slots (no warpgroup barriers around one thread's arrive; same
               # sessions: 1.00-1.04x on the same 18 points, with the scales through the ring)
               "t_release": os.environ.get("FUSEDMOE_WS_FP4_DECODE_TRELEASE", "1") != "0",
               # GEMM2's first ring steps' weights before its wait for GEMM1 (set_ws_fp4_decode_early_weights; the
               # default since the fifty-second session: H100, 1.04-1.12x at one token on all six FP4 model points)
               "early_w": os.environ.get("FUSEDMOE_WS_FP4_DECODE_EARLYW", "1") != "0",
               # the units walk the align's block bound (a host number) instead of its num_post_padded
               # (set_ws_fp4_decode_static_blocks; the default since the fifty-third session: H100, 1.002-1.015x at
               # one token on all six FP4 model points, three runs)
               "m_static": os.environ.get("FUSEDMOE_WS_FP4_DECODE_MSTATIC", "1") != "0"}
_WS_FP4_DEC_MAXNREG = {1: None, 2: 128, 3: 80, 4: 64}


def ws_fp4_decode_settings() -> tuple:
    """The FP4 decode switch as it stands: :func:`set_ws_fp4_decode`'s arguments ``(enabled, ctas, num_stages,
    block_k, x_gather, scales_smem, thread_release)`` (its environment variables included)."""
    return (_WS_FP4["decode"], _WS_FP4_DEC["ctas"], _WS_FP4_DEC["stages"], _WS_FP4_DEC["block_k"],
            _WS_FP4_DEC["x_gather"], _WS_FP4_DEC["s_smem"], _WS_FP4_DEC["t_release"])


def set_ws_fp4_decode(enabled, ctas: int = 3, num_stages: int = 4, block_k: int = 128,
                      x_gather: bool = True, scales_smem: bool = True, thread_release: bool = True) -> tuple:
    """Where ``auto_ws_fp4`` picks the FP4 decode kernel (``kernels/_ws_fp4_dec.py``; MXFP4 / NVFP4 weights x BF16
    activations) for a call whose chosen config has decode tiles (block_m <= 16): ``enabled`` an int -- calls of at
    most that many tokens (the default, ``WS_FP4_DEC_AUTO_MAX_TOKENS`` = 1: where the H200 measured it faster than
    the Triton GEMMs, thirty-fifth session, BENCHMARKS.md); ``True`` every such call; ``False`` none
    (``FUSEDMOE_WS_FP4_DECODE=1`` / ``0`` / a number). The kernel: 16 token rows a block, ``ctas`` programs an SM
    (1-4; 4: 64 registers a thread), ``num_stages`` ring steps of ``block_k`` (64 / 128) K values -- at most as many
    as fit ``ctas`` programs an SM (4 x 6 of 128); 4 by default since the fifty-third session (H100, one token:
    Nemotron-3-Super 1.04-1.05x the 8 before, BENCHMARKS.md) --, split-K from :func:`ws_fp4_dec_split`.
    ``x_gather`` (``FUSEDMOE_WS_FP4_DECODE_CPASYNC``, default on): where the align is one program (T x top_k <= 256),
    its launch also copies hidden in the kernel's dot order (:class:`DotRowsPlan`) and GEMM1's loader copies a
    block's rows from that by cp.async -- no gather launch between the align and GEMM1 (its 3.4 us were more than
    the kernel's gain over the Triton GEMM1 at one gpt-oss-120b token, thirty-second session); off: the gather
    launch into slot order and TMA boxes. ``scales_smem`` (``FUSEDMOE_WS_FP4_DECODE_SSMEM``, default on since the
    thirty-fifth session): the loader copies each step's block scales into the ring and the consumer reads them
    from shared memory instead of loading them from global memory two blocks ahead (Nsight: those byte loads are
    uncoalesced and stall the consumer; scale tensors 16-byte aligned with 16-byte-multiple strides, otherwise the
    global loads). ``thread_release`` (``FUSEDMOE_WS_FP4_DECODE_TRELEASE``, default on since the same session): each
    consumer thread frees the ring slots itself instead of one arrive between two warpgroup barriers (sm_90 SASS: 1
    ``BAR.SYNC`` a K step instead of 3). The same bits whatever the three say (GPU tests). Returns the previous
    ``(enabled, ctas, num_stages, block_k, x_gather, scales_smem, thread_release)``."""
    if not all(isinstance(v, bool) for v in (x_gather, scales_smem, thread_release)) or not (
            isinstance(enabled, int) and (isinstance(enabled, bool) or enabled >= 0)):
        raise TypeError(f"enabled must be a bool or a number of tokens >= 0, x_gather, scales_smem and "
                        f"thread_release bools, got {enabled!r}, {x_gather!r}, {scales_smem!r}, {thread_release!r}")
    if ctas not in WS_DEC_CTAS or not 2 <= num_stages <= 8 or block_k not in (64, 128):
        raise ValueError(f"set_ws_fp4_decode: ctas must be 1-4, num_stages 2-8 and block_k 64 / 128, got {ctas}, "
                         f"{num_stages}, {block_k}")
    prev = ws_fp4_decode_settings()
    _WS_FP4["decode"] = enabled
    _WS_FP4_DEC.update(ctas=ctas, stages=num_stages, block_k=block_k, x_gather=x_gather, s_smem=scales_smem,
                       t_release=thread_release)
    return prev


def set_ws_fp4_decode_early_weights(enabled: bool) -> bool:
    """``True`` (the default since the fifty-second session; ``FUSEDMOE_WS_FP4_DECODE_EARLYW=0`` turns it off): under
    programmatic dependent launch, the FP4 decode kernel's GEMM2 loader sends the weights and block scales of its
    first ring steps before it waits for GEMM1 -- they do not depend on it -- and their token boxes after
    (``kernels/_ws_fp4_dec._dec_catch_up``). The align's block layout it reads for them is final before GEMM2
    starts: every kernel of the layer lets the next one launch only after its own wait for the one before, so
    when a grid starts, every grid before its prior one has finished (the same holds for GEMM1 after a gather
    launch, which takes it too; not with GEMM1's cp.async rows, whose prior grid is the align itself). Our reading
    of the gain: GEMM2's programs start on the SMs GEMM1 leaves free (360 programs of 3 an SM on 132 SMs) and on
    those its first weights arrive during GEMM1 instead of after a dependent chain -- the wait, the align's
    outputs, then DRAM (the stream-K test, which fills every SM with GEMM1, lost 0.82-0.85x). H100, one token
    (``decode_ab.py --settings default,ws4earlyw``, twice): gpt-oss-120b, Nemotron-3-Nano / Super x MXFP4 / NVFP4
    1.04-1.12x. The same bits (the same copies into the same slots; GPU tests). Returns the previous setting."""
    return _swap_bool(_WS_FP4_DEC, enabled, "early_w")


def set_ws_fp4_decode_static_blocks(enabled: bool) -> bool:
    """``True`` (the default since the fifty-third session; ``FUSEDMOE_WS_FP4_DECODE_MSTATIC=0`` turns it off): the
    FP4 decode kernel's units walk the align's block bound ``max_blocks`` -- known on the host from the shapes --
    instead of the rows in use it writes (``num_post_padded``), and skip the blocks past those (the align marks them
    -1). A program's first weight boxes then wait for one load of the align's outputs (its block's expert) instead
    of two in a row. At one token the bound is the blocks in use (top_k distinct experts, one block each); at 8
    tokens a few more units are skipped. H100, one token (``decode_ab.py --settings default,ws4mstatic``, three
    runs): gpt-oss-120b, Nemotron-3-Nano / Super x MXFP4 / NVFP4 1.002-1.015x. The same bits (GPU tests). Returns
    the previous setting."""
    return _swap_bool(_WS_FP4_DEC, enabled, "m_static")


def _ws_fp4_decode_on(tokens: int) -> bool:
    """Whether :func:`set_ws_fp4_decode`'s switch lets a call of ``tokens`` tokens run the FP4 decode kernel."""
    d = _WS_FP4["decode"]
    return d if isinstance(d, bool) else tokens <= d


_WS_FP4_DEC_UNIT_STEPS = 2  # a unit's fixed cost in ring steps (its setup, partial store / reduction, epilogue)


def ws_fp4_dec_split(units: int, k_steps: int, programs: int) -> int:
    """split_k of an FP4 decode GEMM: of 1, 2, 4, 8 K shares (at least two ring steps of ``k_steps`` a share), the
    fewest with the shortest makespan -- the busiest program's units times a unit's steps plus its fixed cost
    (``_WS_FP4_DEC_UNIT_STEPS``), ``units`` (blocks x column tiles) spread over ``programs``. gpt-oss-120b GEMM1 at
    one token, 360 units of 23 steps on 396 programs: 1 (one unit each); 180 units (its GEMM2): 2."""
    best, best_cost = 1, None
    for s in (1, 2, 4, 8):
        if s > 1 and k_steps < 2 * s:
            break
        cost = -(-units * s // max(1, programs)) * (k_steps / s + _WS_FP4_DEC_UNIT_STEPS)
        if best_cost is None or cost < best_cost:
            best, best_cost = s, cost
    return best


def _dec_splits(H: int, I_pad: int, experts: int, tokens: int, top_k: int, gated: bool, block_k: int,
                programs: int) -> "tuple[int, int]":
    """split_k of GEMM1 and GEMM2 for the decode kernels (FP4 and 16-bit / FP8 alike: 16 token rows a block, 32 gated /
    64 output columns a unit): :func:`ws_fp4_dec_split` over the expected blocks (one an expert hit) and
    ``programs``."""
    blocks = min(tokens * top_k, experts)
    return (ws_fp4_dec_split(blocks * (cdiv(I_pad, 32) if gated else cdiv(I_pad, 64)), cdiv(H, block_k), programs),
            ws_fp4_dec_split(blocks * cdiv(H, 64), cdiv(I_pad, block_k), programs))


def ws_fp4_decode_config(tokens: int, hidden: int, intermediate_padded: int, experts: int, top_k: int, gated: bool,
                         num_sms: Optional[int] = None, ctas: Optional[int] = None,
                         num_stages: Optional[int] = None) -> MoEKernelConfig:
    """The FP4 decode kernel's config for a layer shape at ``tokens``, as :func:`set_ws_fp4_decode`'s settings run
    it: its ``block_k``, its stages (``num_stages``, None: the switch's; at most as many as fit the programs an SM:
    ``ws_dec_max_stages``), split-K of
    each GEMM by :func:`ws_fp4_dec_split` over the expected blocks (one an expert hit) on ``num_sms`` (default
    132) SMs. What :func:`auto_ws_fp4` picks with the switch on, and the tuner's candidates
    (``fusedmoe.bench.tune.search_space``). ``ctas``: programs an SM, recorded in the configs (``persistent``);
    None: the switch's, left to the launch."""
    n = ctas or _WS_FP4_DEC["ctas"]  # (``ws_fp4_dec_config`` refuses a ctas outside WS_DEC_CTAS)
    bk = _WS_FP4_DEC["block_k"]
    st = max(2, min(num_stages or _WS_FP4_DEC["stages"], ws_dec_max_stages(ws_fp4_dec_stage_bytes(bk), n)))
    s1, s2 = _dec_splits(hidden, intermediate_padded, experts, tokens, top_k, gated, bk, n * (num_sms or 132))
    return MoEKernelConfig(ws_fp4_dec_config(gated, "gemm1", s1, st, bk, ctas),
                           ws_fp4_dec_config(False, "gemm2", s2, st, bk, ctas))


WS_FP4_WIDE_MIN_ROWS_PER_EXPERT = 128  # the prefill kernel's 256-token tiles from this many rows per local expert
# ... with the joined chunks (set_ws_fp4_join, the default): an expert's last block costs MMA work to the next 64 rows,
# so 256-token tiles pay from fewer rows -- the forty-second session's H100 A/B at 2048 tokens (64-96 rows an expert):
# 1.14-1.19x on Nemotron-3-Super / Nano MXFP4 and NVFP4, gpt-oss-120b MXFP4 1.05x, NVFP4 0.99x
WS_FP4_JOIN_WIDE_MIN_ROWS_PER_EXPERT = 64


def set_ws_fp4_padded(enabled: bool) -> bool:
    """``True`` (the default since the thirty-second session: 1.002-1.13x on the H200 at 2048-8192 MXFP4 tokens of
    gpt-oss-120b and Nemotron-3-Super / Nano; ``FUSEDMOE_WS_FP4_PADDED=0`` turns it off): with both prefill GEMMs in
    the FP4 warp-specialized kernel, GEMM1 stores its rows at their block-padded positions and GEMM2 reads them
    without a gather (one launch and one write and read of the rows less; under ``set_ws_padded_handoff``). Returns
    the previous setting."""
    return _swap_bool(_WS_FP4, enabled, "padded")


def set_ws_fp4_scales_ahead(enabled: bool) -> bool:
    """``True``: the FP4 warp-specialized prefill GEMMs (``kernels/_ws_fp4.py``, ``SC_AHEAD``) load each K step's
    block scales one step ahead -- issued before the previous step's ring wait, so the global load's latency overlaps
    that step's conversion and wgmma instead of stalling its own step's conversion (sm_90 SASS without it: the
    scale's ``LDG`` is issued after the ring wait and consumed ~40 instructions later, every step). Same values: the
    same bits. On by default since the forty-first session (H100, ``decode_ab.py`` at 4096 / 8192 tokens of
    gpt-oss-120b and Nemotron-3-Super / Nano: NVFP4 1.13-1.19x, MXFP4 1.005-1.02x; 1024 tokens 0.99-1.00x);
    ``FUSEDMOE_WS_FP4_SC_AHEAD=0`` turns it off. Returns the previous setting."""
    return _swap_bool(_WS_FP4, enabled, "sc_ahead")


def set_ws_fp4_scales_smem(mode) -> "bool | str":
    """Whether the FP4 warp-specialized prefill GEMMs (``kernels/_ws_fp4.py``, ``S_SMEM``) take their block scales
    through the operand ring -- the loader warp copies each K step's scales of the tile's 128 weight rows by cp.async
    into the ring slot (MX: each row's 4-byte word of codes; NVFP4: four e4m3 columns in 16-byte runs), the consumer
    warpgroups read them from shared memory after their ring wait -- instead of each consumer's global byte loads
    a step ahead (:func:`set_ws_fp4_scales_ahead`). No global load is then in flight at the consumers' proxy fence
    before each wgmma (a ``MEMBAR``, which waits for it). ``"auto"`` (the default since the fifty-ninth session;
    ``FUSEDMOE_WS_FP4_SSMEM=1`` / ``0`` start a process with ``True`` / ``False``): the formats of
    ``WS_FP4_SSMEM_AUTO_FORMATS``, NVFP4 -- H100, ``decode_ab.py`` at 2048 / 4096 / 8192 tokens on gpt-oss-120b and
    Nemotron-3-Super / -Nano: NVFP4 1.08-1.15x at 2048 tokens, 1.05x at 4096, 1.01-1.02x at 8192 (three rounds);
    MXFP4 0.92-1.01x (not profiled; NVFP4 has twice the scales, K-major, which the consumers' global loads gather
    four a row, where MX's two a step sit in one word); ``True``: every FP4 format; ``False``: none. Needs the
    scales 16-byte aligned with strides that are multiples of 16 and N a multiple of 16 (``ExpertWeights``' layouts;
    otherwise the global loads run). Same values: the same bits. Returns the previous mode."""
    return _swap_mode(_WS_FP4, mode, "set_ws_fp4_scales_smem", "s_smem")


def _ws_fp4_ssmem(weight_format: Format) -> bool:
    """Whether an FP4 prefill GEMM of ``weight_format`` takes its block scales through the ring
    (:func:`set_ws_fp4_scales_smem`; "auto": ``WS_FP4_SSMEM_AUTO_FORMATS``)."""
    mode = _WS_FP4["s_smem"]
    return weight_format in WS_FP4_SSMEM_AUTO_FORMATS if mode == "auto" else mode


def set_ws_fp4_one_store(enabled: bool) -> bool:
    """``True`` (the default since the fifty-ninth session; ``FUSEDMOE_WS_FP4_ONESTORE=0`` turns it off): in the FP4
    warp-specialized prefill GEMMs' gated tiles (GEMM1 of SwiGLU / clamped SwiGLU / GeGLU; ``kernels/_ws_fp4.py``,
    ``ONE_STORE``) each consumer warpgroup joins its converted gate and up halves in registers and stores them into
    the wgmma's shared tile by one store instead of two. Two stores into the same buffer make Triton's shared-memory
    hazard analysis put a warpgroup barrier between them (it cannot tell the halves apart), in the middle of every
    K step's conversion; the join itself costs no instruction (sm_90: the K loop's barriers 4 -> 3, its instruction
    count unchanged). H100, ``decode_ab.py`` of gpt-oss-120b MXFP4 / NVFP4 at 2048 / 4096 / 8192 tokens: 1.000-1.027x
    on all six points. Same values at the same places: the same bits. Returns the previous setting."""
    return _swap_bool(_WS_FP4, enabled, "one_store")


def set_ws_fp4_block_k(block_k: int) -> int:
    """The FP4 warp-specialized prefill GEMMs' K a ring slot (``kernels/_ws_fp4.py``, ``KS``): 128 (the default
    since the sixtieth session; ``FUSEDMOE_WS_FP4_BK=64`` starts a process with 64) -- two 64-wide K steps a slot
    where the shared memory holds them, converted behind one ring wait, one proxy fence and one warpgroup barrier,
    their wgmmas waited for once (the per-step synchronization the Nsight reports found the consumers stalled on,
    halved) -- or 64 (one step a slot everywhere). The shared memory holds two steps for 128-token tiles (3 stages;
    ``kernel_configs.ws_fp4_stages``); 256-token tiles keep one (two steps a slot there, with single-buffered
    converted tiles at 2 stages: 0.82-0.94x on the H100, sixty-first session; removed). sm_90 compile (gated MXFP4
    GEMM1, 128-token tiles): 281 instructions and 3 warpgroup barriers a slot of two steps against 2 x 163 and 2 x 3.
    An odd step count (gpt-oss-120b's K 2880) runs a last step past K with TMA-zeroed inputs: the same sums. H100,
    ``decode_ab.py`` with 128-token tiles in joined chunks forced (:func:`set_ws_fp4_join128`): 0.97-1.08x one step
    a slot (medians of two rounds; 1.00-1.08x by the best rounds) at 2048 / 4096 tokens on gpt-oss-120b,
    Nemotron-3-Super / -Nano, MXFP4 / NVFP4. Returns the previous value."""
    if block_k not in WS_FP4_BLOCK_KS or isinstance(block_k, bool):
        raise ValueError(f"set_ws_fp4_block_k: 64 or 128, got {block_k!r}")
    prev, _WS_FP4["block_k"] = _WS_FP4["block_k"], block_k
    return prev


def set_ws_fp4_pair_order(mode) -> "bool | str":
    """Whether the FP4 prefill kernel's GEMMs take their input's K in the pair order (``kernels/_ws_fp4.pair8_cols``:
    in each 8-wide group, position 2 s + j holds K 4 j + s) -- GEMM1's gather writes hidden's rows so, GEMM1's
    epilogue the intermediate (on the padded hand-off; otherwise GEMM2's gather) -- and store each converted weight
    tile in the same order, which is the order the E2M1 converter's registers come in: no byte permutes between the
    converter and the shared-memory stores. sm_90 compile: 16 ``PRMT`` a K step fewer, 166 -> 151 instructions a step
    (gated MXFP4 GEMM1, 256-token tiles), 161 -> 146 (NVFP4 ReLU^2). ``"auto"`` (the default since the sixty-first
    session; ``FUSEDMOE_WS_FP4_PAIRS=1`` / ``0`` start a process with ``True`` / ``False``): non-gated layers -- H100,
    ``decode_ab.py`` (five rounds) at 2048 / 4096 / 8192 tokens: Nemotron-3-Super / -Nano (ReLU^2) MXFP4 / NVFP4
    **1.01-1.04x** on all twelve points; gpt-oss-120b (clamped SwiGLU) 0.97-1.02x, 0.97-0.98x at 8192 in a six-round
    rerun (not profiled); H200 (sixty-second session) 0.98-1.02x, and 0.99-1.04x with GEMM1's weight rows converted
    in the pair order instead of its epilogue's permutation (removed: 0.98-1.00x on Nemotron) -- so gated layers keep
    K order. ``True``: every layer; ``False``: none. The same products; their order inside a wgmma's 16-wide K step
    differs, so the bits may (within 2e-3 of K order: ``test_gpu_ws_fp4_pair_order``). Returns the previous mode."""
    return _swap_mode(_WS_FP4, mode, "set_ws_fp4_pair_order", "pairs")


def set_ws_fp4_min_rows(rows: int) -> int:
    """``rows`` > 0 (opt-in, ``FUSEDMOE_WS_FP4_MIN_ROWS``; built in the sixty-second session, not yet measured): FP4
    x BF16 calls with at least ``rows`` token rows per local expert run the FP4 prefill kernel (128-token tiles in
    two joined 64-row chunks) also where the heuristic or the tuned table chose smaller Triton tiles (block_m 32 /
    64: gpt-oss-120b below 1536 tokens, 48 rows an expert). Why it may pay: below a tile's rows an expert, either
    kernel converts each weight of an expert it reads once, and the conversion is what such a layer costs; the
    FP4 prefill kernel's dedicated consumer warpgroups convert faster (gpt-oss-120b at 48 rows, H200: MXFP4 1404 µs
    in it, NVFP4 2306 µs in the Triton GEMMs). ``decode_ab.py`` settings ``ws4from16`` / ``ws4from24`` /
    ``ws4from32`` measure it. 0 (the default): the config's prefill tiles only. The one-token decode kernel's calls
    are unaffected unless their rows reach ``rows``. Returns the previous value."""
    if not isinstance(rows, int) or isinstance(rows, bool) or rows < 0:
        raise ValueError(f"set_ws_fp4_min_rows: rows per local expert, an int >= 0, got {rows!r}")
    prev, _WS_FP4["min_rows"] = _WS_FP4["min_rows"], rows
    return prev


def _ws_fp4_pairs(gated: bool) -> bool:
    """Whether a layer's FP4 prefill GEMMs run in the pair order (:func:`set_ws_fp4_pair_order`; "auto": non-gated
    layers)."""
    mode = _WS_FP4["pairs"]
    return not gated if mode == "auto" else mode


def set_ws_fp4_join128(enabled: bool) -> bool:
    """``True`` (the default since the sixtieth session; ``FUSEDMOE_WS_FP4_JOIN128=0`` turns it off; with
    :func:`set_ws_fp4_join` on): the FP4 warp-specialized prefill GEMMs' 128-token tiles in two 64-row chunks joined
    as the 256-token tiles' four -- a block whose expert's rows end within its first 64 loads and multiplies 64 token
    rows, not 128. ``auto_ws_fp4`` takes 128-token tiles below 64 rows an expert (with the join), so these blocks
    are common there. H100, with :func:`set_ws_fp4_block_k`'s two steps a slot: gpt-oss-120b MXFP4 at 1536 tokens
    (48 rows an expert) **1.21x** the former 128-token tiles (twice, three rounds each); the points that keep
    256-token tiles unchanged. Same products in the same order: the same bits. Returns the previous setting."""
    return _swap_bool(_WS_FP4, enabled, "join128")


def set_ws_fp4_join(enabled: bool) -> bool:
    """``True`` (the default since the forty-second session; ``FUSEDMOE_WS_FP4_JOIN=0`` turns it off): the FP4
    warp-specialized prefill GEMMs' 256-token tiles load their input in four 64-row chunks, only those with real rows,
    and multiply a block's real chunks by one wgmma as wide as they are (64, 128, 128 + 64 or 256 token rows;
    ``kernels/_ws_fp4.py`` ``_fp4_chunk_tile``) -- an expert's last block then costs tensor-core work to the next 64
    rows instead of the next 128 (``set_ws_fp4_chunks(2)``, MXFP4's default without the join) or 256 (whole tiles,
    NVFP4's), without the four 64-row wgmmas of
    ``set_ws_fp4_chunks(4)`` (each re-reading the converted weights from shared memory). Overrides
    ``set_ws_fp4_chunks`` for 256-token tiles, and ``auto_ws_fp4`` takes them from
    ``WS_FP4_JOIN_WIDE_MIN_ROWS_PER_EXPERT`` (64) rows an expert instead of 128. Same products in the same order: the
    same bits. H100, ``decode_ab.py`` of gpt-oss-120b and Nemotron-3-Super / Nano, MXFP4 and NVFP4: 4096 / 8192 tokens
    1.02-1.07x the chunks by format, 2048 tokens (with the 256-token tiles from 64 rows) 0.99-1.19x. Returns the
    previous setting."""
    return _swap_bool(_WS_FP4, enabled, "join")


def set_ws_fp4_chunks(chunks: int) -> int:
    """256-token tiles of the FP4 warp-specialized GEMMs as ``chunks`` (2 or 4) wgmmas of 128 / 64 token rows into as
    many accumulators, a block multiplying and loading only the chunks that hold real rows -- an expert's last block
    is partly padding, and at 100-200 rows an expert that is half the MMA work; 1: whole tiles; 0 (the default,
    ``FUSEDMOE_WS_FP4_CHUNKS``): by weight format, ``WS_FP4_AUTO_CHUNKS`` (MXFP4 2, NVFP4 1: the thirty-second
    session's H200 A/B). Same products in the same order: the same bits. Returns the previous setting."""
    if chunks not in (0, 1, 2, 4) or isinstance(chunks, bool):
        raise ValueError(f"set_ws_fp4_chunks: chunks must be 0 (by format), 1, 2 or 4, got {chunks!r}")
    prev, _WS_FP4["chunks"] = _WS_FP4["chunks"], chunks
    return prev


def set_ws_fp4_skip_half(enabled: bool) -> bool:
    """``set_ws_fp4_chunks(2 if enabled else 1)`` (the twenty-eighth session's name: an expert's all-padding half of a
    256-token block skipped; ``FUSEDMOE_WS_FP4_SKIP_HALF=1``). Returns whether chunks were set before (0, by format,
    counts as set)."""
    if not isinstance(enabled, bool):
        raise TypeError(f"enabled must be a bool, got {enabled!r}")
    return set_ws_fp4_chunks(2 if enabled else 1) != 1


def set_ws_fp4_nvfp4(enabled: bool, min_rows_per_expert: Optional[int] = None) -> bool:
    """``True`` (the default since the thirty-second session; ``FUSEDMOE_WS_NVFP4=0`` turns it off): ``auto_ws_fp4``
    also picks the FP4 warp-specialized GEMMs for NVFP4 weights x BF16 activations (W4A16; the e4m3 block scales
    K-major as ``ExpertWeights`` keeps them, the global ``1 / g`` on the accumulator) at prefill tiles from
    ``WS_NVFP4_MIN_ROWS_PER_EXPERT`` rows per local expert -- 0 since the sixty-second session: wherever the config
    has prefill tiles, as MXFP4 (the comment at that constant says why); ``min_rows_per_expert`` sets a threshold
    (the thirty-second session's was 64), None restores the default. An explicit
    warp-specialized config runs them whatever this says. Returns the previous setting (on / off)."""
    rows = WS_NVFP4_MIN_ROWS_PER_EXPERT if min_rows_per_expert is None else min_rows_per_expert
    if not isinstance(rows, int) or isinstance(rows, bool) or rows < 0:
        raise ValueError(f"set_ws_fp4_nvfp4: min_rows_per_expert must be an int >= 0, got {min_rows_per_expert!r}")
    prev = _swap_bool(_WS_FP4, enabled, "nvfp4")
    _WS_FP4["nvfp4_min_rows"] = rows
    return prev


def set_ws_fp4(enabled: bool, block_m: int = 0) -> "tuple[bool, int]":
    """``True`` (the default; ``FUSEDMOE_WS_FP4=0`` turns it off): calls whose chosen config has prefill tiles
    (block_m >= 128) with MXFP4 weights and BF16 activations on sm_90 run both GEMMs in the warp-specialized
    Gluon kernel (``kernels/_ws_fp4.py``); ``False``: the Triton kernels. ``block_m``: 128 or 256 token rows a
    tile for every such call, 0 (the default) 256 from ``WS_FP4_JOIN_WIDE_MIN_ROWS_PER_EXPERT`` rows per expert
    (``WS_FP4_WIDE_MIN_ROWS_PER_EXPERT`` with ``set_ws_fp4_join(False)``).
    A config passed to the call is always taken as it is. Returns the previous ``(enabled, block_m)``."""
    if not isinstance(enabled, bool):
        raise TypeError(f"enabled must be a bool, got {enabled!r}")
    if block_m not in (0,) + WS_FP4_BLOCK_MS:
        raise ValueError(f"set_ws_fp4: block_m must be 0 or one of {WS_FP4_BLOCK_MS}, got {block_m!r}")
    prev = (_WS_FP4["enabled"], _WS_FP4["block_m"])
    _WS_FP4["enabled"], _WS_FP4["block_m"] = enabled, block_m
    return prev


def _ws_fp4_problem(w13: QuantizedTensor, w2: QuantizedTensor, act_format: Format, dtype: torch.dtype,
                    dev: torch.device, interp: bool, H: int, I_pad: int) -> Optional[str]:
    """None, or why the FP4 warp-specialized kernel cannot take this call: it needs sm_90 (not the interpreter),
    MXFP4 or NVFP4 weights in the tiled layout (tile width a multiple of 64, contiguous, 16-byte aligned) with
    row-major MX scales / K-major NVFP4 scales (``ExpertWeights``' layouts), BF16 activations and hidden states, H
    and I_pad multiples of 64."""
    if interp or dev.type != "cuda":
        return "it is a Gluon kernel for sm_90 GPUs (Triton's interpreter cannot run Gluon)"
    if w13.fmt not in WS_FP4_FORMATS or act_format is not Format.BF16 or dtype != torch.bfloat16:
        return (f"it takes MXFP4 or NVFP4 weights with BF16 activations and bfloat16 hidden states, got "
                f"{w13.fmt.name} x {act_format.name}, {dtype}")
    if H % 64 or I_pad % 64:
        return f"it needs H and intermediate_size_padded multiples of 64, got {H} and {I_pad}"
    major = _cuda_major(dev.index if dev.index is not None else torch.cuda.current_device())
    if major != 9:
        return f"it needs an sm_90 GPU (wgmma), got compute capability {major}.x"
    k_major = w13.fmt is Format.NVFP4
    for w in (w13, w2):
        if (w.value_tile_k % 64 or w.value_tile_k == 0 or not w.data.is_contiguous() or w.data.data_ptr() % 16
                or w.scale is None or w.scale.dim() != 3 or w.scale.stride(1 if k_major else 2) != 1):
            return ("it reads the FP4 values through TMA in ExpertWeights' tiled layout (tiles of 64 or 128 "
                    f"columns, contiguous) with {'K-major NVFP4' if k_major else 'row-major MX'} block scales")
    return None


def auto_ws_fp4(cfg: MoEKernelConfig, w13: QuantizedTensor, w2: QuantizedTensor, act_format: Format,
                dtype: torch.dtype, device: torch.device, tokens: int, top_k: int, activation: Activation,
                interp: bool = False) -> MoEKernelConfig:
    """The config a call without an explicit one runs: ``cfg`` (``choose_moe_config``'s), or where it has
    prefill tiles (block_m >= 128), no atomic combine, and the FP4 warp-specialized kernel can take the call
    (``set_ws_fp4``, ``_ws_fp4_problem``; NVFP4 weights under ``set_ws_fp4_nvfp4`` from
    ``WS_NVFP4_MIN_ROWS_PER_EXPERT`` rows per local expert; smaller tiles too from :func:`set_ws_fp4_min_rows`' rows
    per local expert, opt-in) its tiles for both GEMMs --
    256 token rows from ``WS_FP4_JOIN_WIDE_MIN_ROWS_PER_EXPERT`` rows per local expert with the joined chunks
    (``set_ws_fp4_join``, the default) or ``WS_FP4_WIDE_MIN_ROWS_PER_EXPERT`` without, else 128; with decode tiles
    (block_m <= 16) and ``set_ws_fp4_decode``'s switch on for the call's tokens (by default one token), the FP4
    decode kernel's (:func:`ws_fp4_decode_config`).
    (A tuned-table entry naming the decode kernel: :func:`auto_ws`.) ``fusedmoe bench`` records and passes the
    same."""
    rows_per_expert = tokens * top_k / max(1, w13.shape[0])
    # (set_ws_fp4_min_rows: the prefill kernel from that many rows an expert whatever the config's tiles)
    decode = cfg.block_m < 128 and not (_WS_FP4["min_rows"] and rows_per_expert >= _WS_FP4["min_rows"])
    nv_off = w13.fmt is Format.NVFP4 and not decode and (not _WS_FP4["nvfp4"]
                                                          or rows_per_expert < _WS_FP4["nvfp4_min_rows"])
    if (not _WS_FP4["enabled"] or (decode and (not _ws_fp4_decode_on(tokens) or cfg.block_m > WS_FP4_DEC_BLOCK_M))
            or cfg.atomic_combine or w13.fmt not in WS_FP4_FORMATS or nv_off
            or _ws_fp4_problem(w13, w2, act_format, dtype, device, interp, w13.shape[-1], w2.shape[-1]) is not None):
        return cfg
    gated = activation.is_gated
    if decode:  # the decode kernel: split-K from the expected blocks (experts hit), all programs busy
        _, sms = _device_info(device)
        c = ws_fp4_decode_config(tokens, w13.shape[-1], w2.shape[-1], w13.shape[0], top_k, gated, sms)
        return MoEKernelConfig(c.gemm1, c.gemm2, cfg.atomic_combine)
    wide = WS_FP4_JOIN_WIDE_MIN_ROWS_PER_EXPERT if _WS_FP4["join"] else WS_FP4_WIDE_MIN_ROWS_PER_EXPERT
    bm = _WS_FP4["block_m"] or (256 if rows_per_expert >= wide else 128)
    bk = _WS_FP4["block_k"] if bm == 128 else 64  # (two K steps a slot: 128-token tiles only -- what fits)
    return MoEKernelConfig(*(ws_fp4_config(g, gemm, bm, block_k=bk)
                             for g, gemm in ((gated, "gemm1"), (False, "gemm2"))), cfg.atomic_combine)


def _ws_fp4_chunking(block_m: int, weight_format: Format) -> "tuple[bool, int]":
    """(joined, chunks) of the FP4 prefill kernel's token tiles under the switches: 256-token tiles in 4 joined
    64-row chunks (``set_ws_fp4_join``) or ``set_ws_fp4_chunks``' (by format); 128-token ones in 2 joined
    (``set_ws_fp4_join128``) or whole."""
    join = _WS_FP4["join"] and (block_m == 256 or (block_m == 128 and _WS_FP4["join128"]))
    if join:
        return True, block_m // 64
    return False, (_WS_FP4["chunks"] or WS_FP4_AUTO_CHUNKS[weight_format]) if block_m == 256 else 1


@functools.lru_cache(maxsize=None)
def _ws_fp4_layouts(block_m: int):
    from triton.experimental.gluon import language as gl

    return (gl.NVMMASharedLayout.get_default_for([block_m, 64], gl.bfloat16),
            gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=16, rank=2))


def _ws_fp4_gemm(c: KernelConfig, a: torch.Tensor, w: QuantizedTensor, bias, has_bias, tw_flat, al: "AlignResult",
                 out: torch.Tensor, N: int, row_div: int, TK: int, E: int, act_code: int, gated: bool, p, round_tl,
                 weight_on_input: bool, mul_routing_weight: bool, num_sms, fold_cvt: int, part, cnt, *,
                 a_padded: bool = False, out_padded: bool = False, pdl=None,
                 x_dot: Optional[torch.Tensor] = None, pairs: bool = False, out_pairs: bool = False) -> None:
    """One GEMM by the FP4 warp-specialized kernels: its BF16 input rows ``a`` [rows, K] (hidden for GEMM1,
    ``row_div`` = top_k; the slot-indexed intermediate for GEMM2, ``row_div`` = 1) gathered into block-padded slot
    order, then ``kernels/_ws_fp4`` (prefill tiles) or, for decode tiles (block_m 16), ``kernels/_ws_fp4_dec``
    (:func:`_ws_fp4_dec_launch`: the rows in its dot order; ``part`` / ``cnt`` its split-K scratch) into ``out``
    [T*K, N] by slot. ``out_padded``: ``out`` is [max_blocks * BM, N] at the rows' padded positions (the decode
    kernel's in its dot order); ``a_padded``: ``a`` is such a GEMM1 output already (no gather); ``x_dot`` (decode
    GEMM1, :class:`DotRowsPlan`'s result): ``a`` [T, K] in the dot order, which the decode kernel's loader copies
    by slot itself (cp.async; no gather). ``w``: MXFP4 / NVFP4 values in the tiled layout, read through TMA as
    16-bit words; its block scales row-major (MX) / K-major (NVFP4). ``pairs`` (prefill tiles,
    :func:`set_ws_fp4_pair_order`): the kernel's ``PAIRS`` -- ``a`` gathered in the pair order, or with ``a_padded``
    written so by GEMM1's ``out_pairs`` (its epilogue's, with ``out_padded``)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from ..kernels import _ws_fp4 as _w4

    Kd = a.shape[1]
    BM = c.block_m
    decode = BM == WS_FP4_DEC_BLOCK_M
    if ((gated or decode) and N % 64) or (decode and Kd % 64):  # (_ws_fp4_problem checks both for the layer)
        raise ValueError(f"the FP4 warp-specialized GEMM needs N (gated or decode) and K (decode) multiples of 64, "
                         f"got {N} and {Kd}")
    if x_dot is not None and not (decode and x_dot.shape == a.shape and x_dot.dtype == torch.bfloat16):
        raise ValueError(f"x_dot: the decode kernel's GEMM1 input in the dot order, {tuple(a.shape)} bf16, got "
                         f"{tuple(x_dot.shape)} {x_dot.dtype} (block_m {BM})")
    if decode and (pairs or out_pairs):
        raise ValueError("the pair order is the FP4 prefill kernel's (block_m 128 / 256), not the decode kernel's")
    if out_pairs and not out_padded:
        raise ValueError("out_pairs: GEMM1's output in the pair order is for the padded hand-off (out_padded)")
    if x_dot is not None:
        rows = x_dot
    else:
        rows = a if a_padded else _gather_slot_rows(a, al, BM, row_div, TK, E, dot64=decode, real_only=decode,
                                                    pair8=pairs)
    rows = rows.view(torch.bfloat16)
    if decode:
        _ws_fp4_dec_launch(c, rows, w, bias, has_bias, tw_flat, al, out, N, TK, E, act_code, gated, p, round_tl,
                           weight_on_input, mul_routing_weight, num_sms, fold_cvt, part, cnt, out_padded=out_padded,
                           pdl=pdl, x_gather=x_dot is not None, top_k=row_div)
        return
    # (the x box is then that fraction of a block)
    join, chunks = _ws_fp4_chunking(BM, w.fmt)
    if c.block_k == 128 and BM != 128:
        raise ValueError("the FP4 prefill kernel takes two K steps a slot (block_k 128) with 128-token tiles only "
                         f"(the shared memory holds no more), got block_m {BM}")
    XT = BM // chunks
    x_layout, w_layout = _ws_fp4_layouts(XT)
    tk = w.value_tile_k
    x_desc = TensorDescriptor.from_tensor(rows, [XT, 64], x_layout)
    w_desc = TensorDescriptor.from_tensor(w.data.view(torch.int16).reshape(-1, tk // 4), [64, 16], w_layout)
    R = w.shape[-2]
    NC = 64 if gated else 128
    tiles = al.max_blocks * cdiv(N, NC)
    nv = w.fmt is Format.NVFP4
    _w4._ws_fp4_kernel[(max(1, min(tiles, num_sms or 1)),)](
        x_desc, w_desc, out, w.scale, bias, tw_flat, al.sorted_ids, al.block_expert, al.num_post_padded,
        N, Kd, TK, R // 64, Kd // tk, w.scale.stride(0), w.scale.stride(1), out.stride(0),
        bias.stride(0) if has_bias else 0, float(p.alpha), float(p.beta), float(p.limit),
        w.global_scale if nv else tw_flat, w.scale.stride(2), E_LOC=E, ACT=act_code, GATED=gated, HAS_BIAS=has_bias,
        WEIGHT_ON_INPUT=weight_on_input, MUL_ROUTING_WEIGHT=mul_routing_weight, ROUND_DTYPE=round_tl,
        SWZ=w.value_swizzled, FOLD=fold_cvt == _bs.MX_FOLD.value, BK=64, TK=tk, STAGES=c.num_stages,
        GROUP_M=c.group_m, CHUNKS=chunks, NV=nv, OUT_PADDED=out_padded, SC_AHEAD=_WS_FP4["sc_ahead"], JOIN=join,
        S_SMEM=_ws_fp4_ssmem(w.fmt) and _ws_fp4_scales_copyable(w, N), ONE_STORE=_WS_FP4["one_store"] and gated,
        KS=c.block_k // 64, PAIRS=pairs, OUT_PAIRS=out_pairs, **_ws_dynamic_args(_ws_dyn(w.fmt, E), al), num_warps=4)


def _ws_fp4_dec_launch(c: KernelConfig, rows: torch.Tensor, w: QuantizedTensor, bias, has_bias, tw_flat,
                       al: "AlignResult", out: torch.Tensor, N: int, TK: int, E: int, act_code: int, gated: bool, p,
                       round_tl, weight_on_input: bool, mul_routing_weight: bool, num_sms, fold_cvt: int, part,
                       cnt, *, out_padded: bool = False, pdl=None, x_gather: bool = False, top_k: int = 1) -> None:
    """The FP4 decode kernel on gathered rows (``rows`` [max_blocks * 16, K] bf16 in the dot order; ``x_gather``:
    [T, K] unsorted, the loader copying each slot's row ``slot // top_k`` by cp.async): persistent,
    ``set_ws_fp4_decode``'s programs an SM, into ``out`` [T*K, N] by slot (``out_padded``: [max_blocks * 16, N] at
    the rows' padded positions, each 64-wide block in the dot order -- the next GEMM's ``rows``); ``part`` / ``cnt``:
    the split-K scratch (``c.split_k`` > 1: ``tiles * split_k * 64 * 16`` fp32 and ``tiles`` zeroed int32, tiles =
    blocks x column tiles)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from ..kernels import _ws_fp4_dec as _wd

    Kd = rows.shape[1]
    BM = c.block_m
    x_layout, w_layout = _ws_fp4_layouts(BM)
    tk = w.value_tile_k
    # the token rows in boxes of all BM rows and of 8 (for blocks with at most 8 real rows); with x_gather the loader
    # copies the rows itself and the descriptors only carry the tiles' shape and layout: over the weights' bytes as
    # [.., 64] bf16 rows (a source of at least BM rows; ``rows`` may have a single one)
    x_src = w.data.view(-1).view(torch.bfloat16).view(-1, 64) if x_gather else rows
    x_descs = [TensorDescriptor.from_tensor(x_src, [h, 64], x_layout) for h in (BM, 8)]
    w_desc = TensorDescriptor.from_tensor(w.data.view(torch.int16).reshape(-1, tk // 4), [32, 16], w_layout)
    R = w.shape[-2]
    kb = c.block_k // 64
    n64 = Kd // 64
    num_n = N // 32 if gated else cdiv(N, 64)
    grid, maxnreg = _ws_dec_grid(c, al.max_blocks * num_n * c.split_k, num_sms, _WS_FP4_DEC["ctas"])
    nv = w.fmt is Format.NVFP4
    s_smem = _WS_FP4_DEC["s_smem"] and _ws_fp4_scales_copyable(w, N)
    _wd._ws_fp4_dec_kernel[grid](
        *x_descs, w_desc, out, w.scale, w.global_scale if nv else tw_flat, bias, tw_flat, al.sorted_ids,
        al.block_expert, al.num_post_padded, part, cnt, rows, N, cdiv(n64, kb), n64, num_n, TK, R // 64, Kd // tk,
        w.scale.stride(0), w.scale.stride(1), w.scale.stride(2), out.stride(0), bias.stride(0) if has_bias else 0,
        rows.stride(0), float(p.alpha), float(p.beta), float(p.limit),
        E_LOC=E, ACT=act_code, GATED=gated, HAS_BIAS=has_bias, WEIGHT_ON_INPUT=weight_on_input,
        MUL_ROUTING_WEIGHT=mul_routing_weight, ROUND_DTYPE=round_tl, SWZ=w.value_swizzled,
        FOLD=fold_cvt == _bs.MX_FOLD.value, NV=nv, TK=tk, STAGES=c.num_stages, SPLIT=c.split_k, KB=kb,
        OUT_PADDED_DOT=out_padded, X_GATHER=x_gather, TOP_K=top_k, S_SMEM=s_smem,
        T_RELEASE=_WS_FP4_DEC["t_release"],
        EARLY_W=_WS_FP4_DEC["early_w"] and not x_gather and bool((pdl or {}).get("USE_GDC")),
        max_m=al.max_blocks if _WS_FP4_DEC["m_static"] else 0, M_STATIC=_WS_FP4_DEC["m_static"], num_warps=4,
        maxnreg=maxnreg, **(pdl or {}))


def _ws_fp4_scales_copyable(w: QuantizedTensor, N: int) -> bool:
    """Whether the FP4 kernels' loaders can copy ``w``'s block scales by cp.async (``S_SMEM``, the decode kernel's and
    the prefill kernel's): 16-byte aligned with strides that are multiples of 16 but the contiguous one (MX
    row-major: its 4-byte words stay inside the 16-byte padded rows; NVFP4 K-major: 8- / 16-byte runs of rows), and
    N a multiple of 16 (the row boxes' starts)."""
    sc = w.scale
    inner = 2 if w.fmt is Format.MXFP4 else 1  # the contiguous dim: MX the K blocks, NVFP4 the rows
    return (sc.data_ptr() % 16 == 0 and sc.stride(inner) == 1 and N % 16 == 0
            and all(st % 16 == 0 for d, st in enumerate(sc.stride()) if d != inner))


# ---- the forward -------------------------------------------------------------------------------


def triton_experts(
    hidden: torch.Tensor,
    w13: QuantizedTensor,
    w2: QuantizedTensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    *,
    activation: Activation,
    act_params: Optional[ActivationParams],
    act_format: Format,
    intermediate_size_padded: int,
    w13_bias: Optional[torch.Tensor] = None,
    w2_bias: Optional[torch.Tensor] = None,
    a1_scale: Optional[torch.Tensor] = None,
    a2_scale: Optional[torch.Tensor] = None,
    local_expert_offset: int = 0,
    weight_on_input: bool = False,
    config: Union[MoEKernelConfig, Mapping[str, Any], None] = None,
    out: Optional[torch.Tensor] = None,
    _capture: Optional[dict] = None,
    _fast_cvt: Optional[bool] = None,
) -> torch.Tensor:
    """The routed experts of one MoE layer with the Triton kernels; returns ``out [T, H]`` in
    hidden's dtype (written into ``out`` when given).

    hidden [T, H] bf16/fp16/fp32; w13 [E_loc, M, H] (M = 2*I_pad gated: gate rows then up rows,
    each half padded at its end; I_pad otherwise); w2 [E_loc, H, I_pad]; topk_ids [T, K] global
    expert ids (ids outside [local_expert_offset, local_expert_offset + E_loc) contribute 0);
    topk_weights [T, K]. Weight formats BF16, FP8_TENSOR, FP8_CHANNEL, FP8_BLOCK with activation
    formats BF16, FP8_TENSOR, FP8_TOKEN, FP8_BLOCK respectively; NVFP4 weights with BF16,
    FP8_TENSOR or NVFP4 activations, MXFP4 with BF16 or MXFP8, MXFP8 with MXFP8. ``a1_scale`` /
    ``a2_scale``: static scales (dequant convention: FP8 ``x ~= q * s``, NVFP4 ``s = 1/g``) of
    GEMM1's and GEMM2's inputs for FP8_TENSOR and NVFP4 activations; None = dynamic per call (one
    scale over hidden / over the local intermediate). ``config``: a MoEKernelConfig or a dict for
    ``choose_moe_config``'s override (keys gemm1, gemm2, atomic_combine); on a GPU either GEMM's
    num_stages is lowered where its operand buffers would not fit the device's shared memory
    (:func:`fit_stages`; fp32 operands need twice the bytes the heuristic plans for), and for FP4
    weights whose values are tiled (``QuantizedTensor.value_layout``) a block_k wider than the tile
    width is narrowed to it (:func:`_fit_tile_k`) -- except where K = n block_k + block_k / 2 (gpt-oss: 2880 with
    block_k 128), which runs n full K tiles and one half-wide step (:func:`_k_tail`). ``_capture`` (tests):
    a dict that receives GEMM2's input (``inter``, ``inter_scale``, ``inter_g``, ``out_q``,
    ``post_quant``; ``padded``: ``inter`` in block-padded row order) and the ``config`` used; ``_fast_cvt`` (tests): force the inline-PTX
    conversions on or off (default: on for CUDA bf16 MMA operands).
    """
    # ---- validation (shapes and dtypes only: no host sync) ----
    if not isinstance(hidden, torch.Tensor) or hidden.dim() != 2:
        raise ValueError(f"hidden must be a [T, H] tensor, got {getattr(hidden, 'shape', type(hidden).__name__)}")
    if hidden.dtype not in _TL_DTYPE:
        raise TypeError(f"hidden must be bfloat16, float16 or float32, got {hidden.dtype}")
    if not isinstance(activation, Activation):
        raise TypeError(f"activation must be a fm.Activation, got {activation!r}")
    if not isinstance(act_format, Format):
        raise TypeError(f"act_format must be a fm.Format, got {act_format!r}")
    if not isinstance(w13, QuantizedTensor) or not isinstance(w2, QuantizedTensor):
        raise TypeError("w13 and w2 must be fm.QuantizedTensor")
    wfmt = w13.fmt
    if w2.fmt is not wfmt:
        raise ValueError(f"w13 and w2 must share a format, got {wfmt!r} and {w2.fmt!r}")
    if wfmt not in _SUPPORTED_WEIGHTS:
        raise NotImplementedError(
            f"the triton backend does not implement {wfmt.name} weights; supported: "
            f"{', '.join(f.name for f in _SUPPORTED_WEIGHTS)}"
        )
    if act_format not in _ACT_FOR_WEIGHT[wfmt]:
        raise ValueError(
            f"act_format={act_format!r} is not available with {wfmt!r} weights in the triton backend; "
            f"expected one of {list(_ACT_FOR_WEIGHT[wfmt])}"
        )
    micro = wfmt in _MICRO_WEIGHTS
    T, H = hidden.shape
    I_pad = int(intermediate_size_padded)
    gated = activation.is_gated
    M = 2 * I_pad if gated else I_pad
    E = w13.shape[0]
    dev = hidden.device
    _check_qt("w13", w13, E, M, H, dev)
    _check_qt("w2", w2, E, H, I_pad, dev)
    if H and hidden.stride(1) != 1:
        raise ValueError(f"hidden must have a contiguous last dim, got strides {tuple(hidden.stride())}")
    if wfmt is Format.BF16 and w2.data.dtype != w13.data.dtype:
        raise TypeError(f"w13 and w2 data dtypes differ: {w13.data.dtype} vs {w2.data.dtype}")
    if wfmt is Format.FP8_BLOCK and (H % 128 or I_pad % 128):
        raise ValueError(f"FP8_BLOCK needs H and intermediate_size_padded multiples of 128, got H={H}, I_pad={I_pad}")
    if micro:
        ga = act_format.block_size
        if ga and (H % ga or I_pad % ga):
            raise ValueError(f"{act_format.name} activations need H and intermediate_size_padded multiples of "
                             f"{ga}, got H={H}, I_pad={I_pad}")
        for name, q in (("w13", w13), ("w2", w2)):
            if q.scale.stride(-1) != 1 and q.scale.stride(-2) != 1:
                raise ValueError(f"{name}.scale must be contiguous along its rows or along K (the K-major layout "
                                 f"of ExpertWeights), got strides {tuple(q.scale.stride())}")
    if not isinstance(topk_ids, torch.Tensor) or topk_ids.dim() != 2 or topk_ids.shape[0] != T:
        raise ValueError(f"topk_ids must be [T={T}, K], got {getattr(topk_ids, 'shape', topk_ids)}")
    if topk_ids.dtype not in (torch.int32, torch.int64, torch.int16):
        raise TypeError(f"topk_ids must be an integer tensor (int32 preferred), got {topk_ids.dtype}")
    if not isinstance(topk_weights, torch.Tensor) or tuple(topk_weights.shape) != tuple(topk_ids.shape):
        raise ValueError(f"topk_weights must have topk_ids' shape {tuple(topk_ids.shape)}")
    if not topk_weights.is_floating_point():
        raise TypeError(f"topk_weights must be floating point, got {topk_weights.dtype}")
    if topk_ids.device != dev or topk_weights.device != dev:
        raise ValueError(f"topk_ids / topk_weights must be on {dev}")
    _check_bias("w13_bias", w13_bias, E, M, dev)
    _check_bias("w2_bias", w2_bias, E, H, dev)
    if act_format not in _STATIC_ACT and (a1_scale is not None or a2_scale is not None):
        raise ValueError(f"a1_scale / a2_scale are static FP8_TENSOR / NVFP4 activation scales; "
                         f"{act_format.name} activations take none")
    if not isinstance(local_expert_offset, int) or local_expert_offset < 0:
        raise ValueError(f"local_expert_offset must be an int >= 0, got {local_expert_offset!r}")
    if out is not None:
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != (T, H) or out.dtype != hidden.dtype:
            raise ValueError(f"out must be a [{T}, {H}] {hidden.dtype} tensor")
        if out.device != dev or (H and out.stride(1) != 1):
            raise ValueError("out must be on hidden's device with a contiguous last dim")
    else:
        out = torch.empty((T, H), dtype=hidden.dtype, device=dev)
    K = topk_ids.shape[1]
    if T == 0 or H == 0:
        return out
    if E == 0 or K == 0:
        return out.zero_()

    _align, _gemm, _comb = _kernels()
    interp = interpreted(_gemm._gemm1_kernel)
    if dev.type != "cuda" and not interp:
        raise ValueError(
            f"hidden is on {dev} but the Triton kernels are compiled for a GPU: set TRITON_INTERPRET=1 "
            "before the first call to interpret them, or use fm.reference_moe"
        )
    why = device_problem(dev)
    if why is not None:
        raise NotImplementedError(why)
    dev_name, num_sms = _device_info(dev)
    pdl = _pdl_args(dev, interp, T)
    smem = 0 if dev.type != "cuda" else _cuda_smem_per_block(dev.index if dev.index is not None
                                                            else torch.cuda.current_device())
    cfg = choose_moe_config(T, H, I_pad, E, K, wfmt, activation, dev_name, override=config, num_sms=num_sms)
    if config is None:  # (auto_ws only picks a Gluon kernel where its layer rules have no objection)
        cfg = auto_ws(cfg, w13, w2, act_format, hidden.dtype, dev, T, K, activation, interp)
    c1, c2 = cfg.gemm1, cfg.gemm2
    eb = _host.e4m3_in_bytes(dev)  # E4M3 numbers as bytes (below sm_89, or forced)
    f32q = interp or eb  # quantizers write clamped fp32 values, rounded to E4M3 by torch
    if config is not None and wfmt in WS_FP4_FORMATS and (c1.warp_specialized or c2.warp_specialized):
        why = _ws_fp4_problem(w13, w2, act_format, hidden.dtype, dev, interp, H, I_pad)
        if why is not None:
            raise ValueError(f"warp_specialized with {wfmt.name} weights: {why}")
        if c1.warp_specialized != c2.warp_specialized:
            raise ValueError(f"warp_specialized with {wfmt.name} weights runs both GEMMs so or neither")
    # MX weights x MXFP8 activations at decode tiles: E4M3 MMAs per 32-block with scaled partial sums (no
    # dequantization; rescaling costs block_m FMAs per weight element per 32-block, so tiles of 64+ rows dequantize
    # to bf16 instead: sm_90 SASS counts in the module docstring)
    mxdot = (micro and act_format is Format.MXFP8 and cfg.block_m <= _MXDOT_MAX_BLOCK_M
             and wfmt in _MXDOT_FORMATS["formats"] and not eb)
    # K = n block_k + block_k / 2 (gpt-oss: 2880): full K tiles and one half-wide step (K_TAIL) instead of a K mask
    # in every step; not in the E4M3 path, which steps per 32-block
    tail_ok = micro and not mxdot
    kt1, kt2 = _k_tail(c1, H, w13.value_tile_k, tail_ok), _k_tail(c2, I_pad, w2.value_tile_k, tail_ok)
    # FP4 values in the tiled layout: a K tile lies within one tile width (``_blockscaled._k_base``), or two with a tail
    c1, c2 = _fit_tile_k(c1, w13.value_tile_k, kt1), _fit_tile_k(c2, w2.value_tile_k, kt2)
    BM = cfg.block_m
    if wfmt is Format.FP8_BLOCK and (c1.block_k != 128 or c2.block_k != 128):
        raise ValueError(f"FP8_BLOCK needs block_k == 128 in both GEMMs (one scale per K-block), got {c1.block_k}, {c2.block_k}")
    why = (held_a_problem(c2, wfmt, I_pad) or warp_specialized_problem(c1, wfmt, "gemm1", gated, H)
           or warp_specialized_problem(c2, wfmt, "gemm2", False, I_pad))
    if why is not None:
        raise ValueError(why)
    if c2.warp_specialized and cfg.atomic_combine:
        raise ValueError("GEMM2 warp_specialized stores y by slot: it does not take atomic_combine")
    for q in (w13,) * c1.warp_specialized + (w2,) * c2.warp_specialized:
        _ws_check(dev, interp, q, hidden.dtype)
    if micro:
        g = max(wfmt.block_size, act_format.block_size)
        if c1.block_k % g or c2.block_k % g:
            raise ValueError(f"{wfmt.name} x {act_format.name} needs block_k multiples of {g} (whole scale blocks "
                             f"per K tile), got {c1.block_k}, {c2.block_k}")

    TK = T * K
    ids_flat = topk_ids.reshape(-1)
    tw_flat = topk_weights.reshape(-1)
    if not ids_flat.is_contiguous():
        ids_flat = ids_flat.contiguous()
    if not tw_flat.is_contiguous():
        tw_flat = tw_flat.contiguous()
    quant = _QUANT_CODE[wfmt]
    round_tl = _TL_DTYPE[hidden.dtype]
    if micro:
        a_code, w_code = _F_CODE[act_format], _F_CODE[wfmt]
        cd, prec_micro = _compute_dtype(hidden.dtype, wfmt, act_format, interp)
        fast_cvt = (_FAST_CVT if _fast_cvt is None else bool(_fast_cvt)) and not interp and cd == tl.bfloat16
    else:
        a_code = w_code = 0
        cd, prec_micro, fast_cvt = tl.float32, None, False

    # ---- 1. activation quantization of hidden (2. align) ----
    # decode (one align program): single-kernel FP8 quantizations of hidden run in the align's launch
    qplan = plan_fp8(hidden, act_format, static_scale=a1_scale, out_fp32=f32q) if (
        _ALIGN_QUANT and T * K <= _SINGLE_ALIGN_MAX and act_format in _FP8_ACT) else None
    a1_g = tw_flat  # NVFP4 activations: their global scale [1]
    qa = None
    if act_format is Format.NVFP4:
        g1 = None if a1_scale is None else 1.0 / _scalar_ptr("a1_scale", a1_scale, dev)
        qa = quantize_act(hidden, act_format, global_scale=g1)
        a1_g = qa.global_scale.reshape(1)
    elif act_format is not Format.BF16 and qplan is None:
        qa = quantize_act(hidden, act_format, static_scale=a1_scale)

    atomic = cfg.atomic_combine
    direct_out = K == 1 and not atomic  # GEMM2 writes out itself: lay out non-local slots too
    # GEMM2 programs per SM (0: one per tile); a persistent GEMM2 does not fuse the combine
    pers2 = auto_persistent(c2, wfmt, 1 if quant else hidden.element_size()) if (
        _PERSISTENT["enabled"] and not c2.warp_specialized) else 0
    # GEMM2 combines (same bits) -- not when persistent, holding its activation tile or warp-specialized
    fuse = (not pers2 and c2.n_tiles == 1 and not c2.warp_specialized and not atomic and not direct_out
            and T <= _FUSED_COMBINE["max_tokens"])
    # split-K scratch of both GEMMs in one cached pair: GEMM1's counters / partials first, then GEMM2's (sizes from
    # shapes: taken before the align, which may zero the counters -- set_align_zero_fill)
    NB = max_padded_rows(TK, E + (1 if direct_out or fuse else 0), BM) // BM
    tiles1 = NB * cdiv(I_pad, c1.block_n)
    tiles2 = NB * cdiv(H, c2.block_n)
    n_part1 = tiles1 * c1.split_k * (2 if gated else 1) * BM * c1.block_n if c1.split_k > 1 else 0
    n_part2 = tiles2 * c2.split_k * BM * c2.block_n if c2.split_k > 1 else 0
    n_comb = T * cdiv(H, c2.block_n) if fuse else 0  # GEMM2's (token, column tile) counters
    # both decode GEMMs in one launch (opt-in): GEMM2's per-block wait for GEMM1's column tiles
    fused_dec = _ws_dec_fuses(c1, c2, wfmt, a2_scale, hidden)
    n_dep = NB if fused_dec else 0
    # GEMM1's epilogue reduces the amax of a dynamic per-tensor intermediate (FP8 / NVFP4 without a static scale,
    # _OUT_PLAIN_AMAX below) into an int32 that starts at 0: the align launch zeroes it with the split-K counters
    # (set_align_zero_fill) -- no fill launch between the align and GEMM1, which would also break GEMM1's
    # programmatic dependent launch on the align
    amax_zeroed = (act_format in (Format.FP8_TENSOR, Format.NVFP4) and a2_scale is None and _GEMM1_AMAX["enabled"]
                   and _ALIGN_ZERO["enabled"])
    zero = amax1 = None
    if n_part1 or n_part2 or n_comb or n_dep:
        zero_later = _align_zeroes_counters(dev)
        n_cnt = tiles1 + tiles2 + n_comb + n_dep
        # (fresh counters: the amax after them; cached ones stay zero by themselves, the amax does not)
        n_amax = 1 if amax_zeroed and zero_later else 0
        counters, partials = split_scratch(n_cnt + n_amax, n_part1 + n_part2, dev, zero_later=zero_later)
        if zero_later:
            zero = counters[:n_cnt + n_amax]
            amax1 = counters[n_cnt:n_cnt + 1] if n_amax else None
    if amax_zeroed and amax1 is None and zero is None:
        amax1 = zero = torch.empty((1,), dtype=torch.int32, device=dev)
    # the FP4 decode kernel's GEMM1 input in its dot order, copied by the align launch (its loader then reads the
    # rows by cp.async: no gather launch)
    x_dot = None
    if (qplan is None and qa is None and c1.warp_specialized and c1.block_m == WS_FP4_DEC_BLOCK_M
            and wfmt in WS_FP4_FORMATS and _WS_FP4_DEC["x_gather"] and 0 < TK <= _SINGLE_ALIGN_MAX
            and hidden.stride(1) == 1):
        qplan = x_dot = DotRowsPlan(hidden)
    al = align_slots(ids_flat, E, BM, local_expert_offset=local_expert_offset, include_nonlocal=direct_out or fuse,
                     tokens=T, quant=qplan, zero=zero)
    assert al.max_blocks == NB
    if x_dot is not None:
        x_dot = x_dot.result()
    elif qplan is not None:
        qa = qplan.result()
    # 16-bit activations of FP4 prefill tiles in the dot order (A_PERMUTED): hidden copied, the intermediate stored so
    dot1 = micro and qa is None and hidden.stride(1) == 1 and _dot_order_ok(c1, wfmt, H, kt1, "gemm1")
    if qa is None:
        a1, a1_s, a1_s_stride = (_bs.to_dot_order(hidden, c1.block_k, kt1) if dot1 else hidden), tw_flat, 0
    else:
        a1, a1_s = qa.data, qa.scale.reshape(-1) if qa.scale.dim() == 0 else qa.scale
        a1_s_stride = a1_s.stride(0) if a1_s.dim() == 2 else 1

    # ---- 3. GEMM1 (+ bias + activation + intermediate quantization) ----
    out_q = _OUT_PLAIN
    post_quant = None  # activation format applied by quantize_act after GEMM1
    if act_format is Format.FP8_TENSOR:
        if a2_scale is not None:
            out_q = _OUT_FP8_STATIC
        else:
            post_quant = Format.FP8_TENSOR
    elif act_format is Format.FP8_TOKEN:
        post_quant = Format.FP8_TOKEN
    elif act_format is Format.FP8_BLOCK:
        if c1.block_n % 128 == 0 and not c1.warp_specialized:  # (the Gluon epilogue has no group quantizer)
            out_q = _OUT_FP8_BLOCK
        else:
            post_quant = Format.FP8_BLOCK
    elif act_format is Format.MXFP8:
        if c1.block_n % 32 == 0:
            out_q = _OUT_MXFP8
        else:
            post_quant = Format.MXFP8
    elif act_format is Format.NVFP4:
        if a2_scale is not None:
            out_q = _OUT_NVFP4
        else:
            post_quant = Format.NVFP4

    inter_scale = None
    inter_g = tw_flat  # NVFP4 intermediate: its global scale [1]
    inter_amax = None
    # both GEMMs warp-specialized, nothing between them but the 1 x 128 group quantization (it runs
    # over the rows in use, in the same order): GEMM1 stores in GEMM2's padded row order. Not for
    # per-token scales: the same kernels, but 1.05-1.08x slower layers at 2048 tokens on the H200, also
    # with a pass that skips the padding rows (harness, eighteenth session; BENCHMARKS.md section 0)
    padded = (c1.warp_specialized and c2.warp_specialized and _WS_PADDED_HANDOFF["enabled"]
              and wfmt not in WS_FP4_FORMATS
              and ((post_quant is None and out_q in (_OUT_PLAIN, _OUT_FP8_STATIC))
                   or (post_quant is Format.FP8_BLOCK and out_q == _OUT_PLAIN)))
    # the FP4 warp-specialized kernels on both GEMMs: GEMM1 stores its rows at their block-padded positions (the
    # decode kernel with each 64-wide K block in GEMM2's dot order), so GEMM2 reads them without a gather (one
    # launch and a write and read of the rows less; padding rows unwritten: they only reach GEMM2's padding
    # columns, never stored)
    padded_fp4 = (c1.warp_specialized and c2.warp_specialized and _WS_PADDED_HANDOFF["enabled"]
                  and wfmt in WS_FP4_FORMATS and out_q == _OUT_PLAIN and post_quant is None
                  and (BM == WS_FP4_DEC_BLOCK_M or _WS_FP4["padded"]))
    inter_rows = NB * BM if padded or padded_fp4 else TK
    # the FP4 prefill kernel's pair order (set_ws_fp4_pair_order), read once for both GEMMs: each that runs that kernel
    # takes its input so (gathered so, or on the padded hand-off written so by GEMM1's epilogue)
    pairs_fp4 = (_ws_fp4_pairs(gated) and wfmt in WS_FP4_FORMATS and BM != WS_FP4_DEC_BLOCK_M
                 and (c1.warp_specialized or c2.warp_specialized))
    # (GEMM1's epilogue permutes its tile: whole GEMM2 K steps per tile, no tail)
    dot2 = (micro and out_q == _OUT_PLAIN and post_quant is None and not padded and kt2 == 0
            and c1.block_n % c2.block_k == 0 and _dot_order_ok(c2, wfmt, I_pad, kt2, "gemm2"))
    if out_q == _OUT_PLAIN and post_quant in (Format.FP8_TENSOR, Format.NVFP4) and _GEMM1_AMAX["enabled"]:
        # dynamic per-tensor scale of the intermediate: GEMM1's epilogue reduces max |h| of the rows it
        # stores (only local slots: the rows of non-local ones are never written nor read)
        out_q = _OUT_PLAIN_AMAX
        inter = torch.empty((TK, I_pad), dtype=hidden.dtype, device=dev)
        inter_amax = amax1 if amax1 is not None else torch.zeros((1,), dtype=torch.int32, device=dev)
        out_scale = q_scale = inter_amax  # (Triton: out_scale_ptr; Gluon: out_qscale_ptr)
        osm = 0
    elif out_q == _OUT_PLAIN:
        # dynamic per-tensor without the epilogue's amax: rows of non-local slots must not raise the
        # amax -> zero-filled
        alloc = torch.zeros if post_quant in (Format.FP8_TENSOR, Format.NVFP4) else torch.empty
        inter = alloc((inter_rows, I_pad), dtype=hidden.dtype, device=dev)
        out_scale = tw_flat
        q_scale = tw_flat
        osm = 0
    elif out_q == _OUT_NVFP4:
        # packed E2M1 bytes and E4M3 scale bytes, written as uint8 by the epilogue
        inter = torch.empty((TK, I_pad // 2), dtype=torch.uint8, device=dev)
        out_scale = torch.empty((TK, I_pad // 16), dtype=torch.uint8, device=dev)
        osm = out_scale.stride(0)
        inter_scale = out_scale.view(_E4M3)
        q_scale = 1.0 / _scalar_ptr("a2_scale", a2_scale, dev)  # g2, as the reference's 1.0 / a2
        inter_g = q_scale
    else:
        inter = torch.empty((inter_rows, I_pad), dtype=torch.float32 if f32q else _E4M3, device=dev)
        if out_q == _OUT_FP8_STATIC:
            q_scale = _scalar_ptr("a2_scale", a2_scale, dev)
            inter_scale = q_scale
            out_scale, osm = tw_flat, 0
        elif out_q == _OUT_MXFP8:
            out_scale = torch.empty((TK, I_pad // 32), dtype=torch.uint8, device=dev)
            inter_scale, osm = out_scale, out_scale.stride(0)
            q_scale = tw_flat
        else:
            out_scale = torch.empty((TK, I_pad // 128), dtype=torch.float32, device=dev)
            inter_scale, osm = out_scale, out_scale.stride(0)
            q_scale = tw_flat

    w13_s = _kv(w13.scale, eb) if w13.scale is not None else tw_flat
    wse1 = w13_s.stride(0) if w13.scale is not None else 0
    wsn1 = w13_s.stride(1) if w13.scale is not None and w13_s.dim() >= 2 else 0
    wsk1 = w13_s.stride(2) if micro else 0
    w13_g = w13.global_scale.contiguous() if wfmt is Format.NVFP4 else tw_flat
    b13 = w13_bias if w13_bias is not None else tw_flat
    p = act_params if act_params is not None else _DEFAULT_ACT_PARAMS
    upcast1 = interp or (quant == 0 and a1.dtype != w13.data.dtype)
    prec1 = "ieee" if (a1.dtype == torch.float32 or w13.data.dtype == torch.float32) else "tf32"
    if micro:
        prec1 = prec_micro
    as_fp32 = f32q and out_q in (_OUT_FP8_STATIC, _OUT_FP8_BLOCK, _OUT_MXFP8)
    if smem and not micro:  # operands staged as loaded (block-scaled formats stage dequantized tiles)
        c1 = fit_stages(c1, a1.element_size(), w13.data.element_size(), 2 if gated else 1, smem)
    c1 = trim_stages(c1, H)

    grid1 = (tiles1, c1.split_k)
    if n_part1:
        ws1, cnt1 = partials[:n_part1], counters[:tiles1]
    else:
        ws1 = cnt1 = tw_flat
    # the nibble-aligned E2M1 converter reads packed FP4 as 16-bit words: int16 views (strides too)
    nib = fast_cvt and not mxdot
    # MXFP4 weights whose block-scale codes allow it: the converter's 2^126 folded into the scale
    cvt1, cvt2 = (_mx_fold_cvt(w, fast_cvt, mxdot) for w in (w13, w2))
    a1_d, w13_d = _kv(_nib_view(a1, nib), eb), _kv(_nib_view(w13.data, nib), eb)
    a1_s = _kv(a1_s, eb)
    if c1.warp_specialized and wfmt in WS_FP4_FORMATS:  # kernels/_ws_fp4 (prefill), _ws_fp4_dec (decode)
        _ws_fp4_gemm(c1, a1, w13, b13, w13_bias is not None, tw_flat, al, inter, I_pad, K, TK, E,
                     _ACT_CODE[activation], gated, p, round_tl, bool(weight_on_input), False, num_sms, cvt1, ws1, cnt1,
                     out_padded=padded_fp4, pdl=pdl, x_dot=x_dot, pairs=pairs_fp4, out_pairs=pairs_fp4 and padded_fp4)
    elif fused_dec:  # both GEMMs in one launch, at GEMM2's place below
        assert padded, "the fused decode launch reads GEMM1's rows at their block-padded positions"
    elif c1.warp_specialized:  # kernels/_ws_gemm (FP8, 16-bit)
        _ws_gemm(c1, a1, a1_s, a1_s_stride, w13, w13_s, wse1, wsn1, b13, w13_bias is not None, tw_flat, q_scale,
                 out_q, al, inter, I_pad, K, TK, E, _ACT_CODE[activation], gated, p, round_tl, bool(weight_on_input),
                 False, num_sms, out_padded=padded, part=ws1, cnt=cnt1, pdl=pdl)
    else:
        launch(_gemm._gemm1_kernel, grid1,
            a1_d, a1_s, w13_d, w13_s, b13, tw_flat,
            al.sorted_ids, al.block_expert, al.num_post_padded,
            inter, out_scale, q_scale, a1_g, w13_g, ws1, cnt1,
            I_pad, H, TK, NB,
            a1_d.stride(0), w13_d.stride(0), w13_d.stride(1), a1_s_stride, wse1, wsn1, wsk1,
            b13.stride(0) if w13_bias is not None else 0, inter.stride(0), osm,
            float(p.alpha), float(p.beta), float(p.limit),
            TOP_K=K, E_LOC=E, ACT=_ACT_CODE[activation], GATED=gated, QUANT=quant, A_FMT=a_code, W_FMT=w_code,
            CD=cd, FAST_CVT=cvt1, KPERM=_k_order(wfmt, c1.block_k) if micro else 0, MXDOT=mxdot, OUT_Q=out_q,
            ROUND_DTYPE=round_tl, Q_AS_FP32=as_fp32,
            HAS_BIAS=w13_bias is not None, WEIGHT_ON_INPUT=bool(weight_on_input),
            BLOCK_M=BM, BLOCK_N=c1.block_n, BLOCK_K=c1.block_k, GROUP_M=c1.group_m, SWAP_AB=c1.swap_ab,
            EVEN_K=H % c1.block_k == 0 or kt1 > 0, EVEN_N=I_pad % c1.block_n == 0, UPCAST=upcast1, PRECISION=prec1,
            FAST_ACC=c1.fp8_fast_accum,
            SPLIT_K=c1.split_k, JOIN=micro and join_gate_up(wfmt, c1.swap_ab), **pdl,
            RCP_DIV=_RCP_DIV["enabled"] and not interp,  # the interpreter's fma is not fused
            W_TK=w13.value_tile_k, W_SWZ=w13.value_swizzled, K_TAIL=kt1,
            A_PERMUTED=dot1, OUT_DOT_BK=c2.block_k if dot2 else 0,
            W_SRUN=_scale_run(wfmt, w13_s, c1, c1.block_n * (2 if gated and join_gate_up(wfmt, c1.swap_ab) else 1),
                              H % c1.block_k == 0 or kt1 > 0, mxdot, dot1) if micro else 0,
            BLOCK_W1=_BLOCK_W1["enabled"], num_warps=c1.num_warps, num_stages=c1.num_stages,
        )

    if as_fp32:
        inter = inter.to(_E4M3)  # the epilogue wrote clamped fp32 values (f32q): RNE to E4M3 here
    if post_quant is not None:
        # padded: the rows in use only (num_post_padded); padding rows (zeros, or unwritten in a half
        # GEMM1 skipped) get values and scales that reach GEMM2's padding rows only (never stored)
        qi = (plan_fp8(inter, post_quant, out_fp32=f32q, rows=al.num_post_padded).run() if padded
              else quantize_act(inter, post_quant, amax=inter_amax))
        inter, inter_scale = qi.data, qi.scale
        if post_quant is Format.NVFP4:
            inter_g = qi.global_scale.reshape(1)
    if inter_scale is not None and inter_scale.dim() == 0:
        inter_scale = inter_scale.reshape(1)
    if _capture is not None:
        _capture.update(inter=inter, inter_scale=inter_scale, inter_g=inter_g, out_q=out_q, post_quant=post_quant,
                        config=cfg, padded=padded or padded_fp4, k_tail=(kt1, kt2), mxdot=mxdot,
                        dot_order=(dot1, dot2), pairs=pairs_fp4)

    # ---- 4. GEMM2 (+ bias + routing weight) ----
    if atomic:
        out.zero_()
        y = out
    elif direct_out:
        y = out
    else:
        y = torch.empty((TK, H), dtype=hidden.dtype, device=dev)
    a2_s = inter_scale if inter_scale is not None else tw_flat
    a2_s_stride = a2_s.stride(0) if a2_s.dim() == 2 else 1
    w2_s = _kv(w2.scale, eb) if w2.scale is not None else tw_flat
    wse2 = w2_s.stride(0) if w2.scale is not None else 0
    wsn2 = w2_s.stride(1) if w2.scale is not None and w2_s.dim() >= 2 else 0
    wsk2 = w2_s.stride(2) if micro else 0
    w2_g = w2.global_scale.contiguous() if wfmt is Format.NVFP4 else tw_flat
    b2 = w2_bias if w2_bias is not None else tw_flat
    if smem and c2.n_tiles > 1:  # the activation tile is loaded once, the weight tiles are staged
        held = BM * max(c2.block_k, I_pad) * inter.element_size()  # FP8 block: up to two 128-wide blocks
        kb = cdiv(I_pad, c2.block_k) if wfmt is Format.FP8_BLOCK else 1
        c2 = fit_stages(c2, 0, kb * w2.data.element_size(), 1, smem - held)
    elif smem and not micro:
        c2 = fit_stages(c2, inter.element_size(), w2.data.element_size(), 1, smem)
    c2 = trim_stages(c2, I_pad, bool(pers2))
    upcast2 = interp or (quant == 0 and inter.dtype != w2.data.dtype)
    prec2 = "ieee" if (inter.dtype == torch.float32 or w2.data.dtype == torch.float32) else "tf32"
    if micro:
        prec2 = prec_micro

    if n_part2:
        ws2, cnt2 = partials[n_part1:n_part1 + n_part2], counters[tiles1:tiles1 + tiles2]
    else:
        ws2 = cnt2 = tw_flat
    cnt_comb = counters[tiles1 + tiles2:tiles1 + tiles2 + n_comb] if fuse else tw_flat
    inter_d, w2_d = _kv(_nib_view(inter, nib), eb), _kv(_nib_view(w2.data, nib), eb)
    a2_s = _kv(a2_s, eb)
    if pers2:
        grid2 = (min(tiles2, pers2 * (num_sms or 1)), 1)
    elif c2.n_tiles > 1:
        grid2 = (NB * cdiv(cdiv(H, c2.block_n), c2.n_tiles), 1)
    else:
        grid2 = (tiles2, c2.split_k)
    if c2.warp_specialized:
        if direct_out:
            out.zero_()  # the non-local group's rows: its tiles are skipped
    if c2.warp_specialized and wfmt in WS_FP4_FORMATS:
        _ws_fp4_gemm(c2, inter, w2, b2, w2_bias is not None, tw_flat, al, y, H, 1, TK, E,
                     _ACT_CODE[Activation.IDENTITY], False, _DEFAULT_ACT_PARAMS, round_tl, False, not weight_on_input,
                     num_sms, cvt2, ws2, cnt2, a_padded=padded_fp4, pdl=pdl, pairs=pairs_fp4)
    elif fused_dec:  # kernels/_ws_dec, both GEMMs in one launch (opt-in)
        _ws_dec_fused_launch(c1, c2, a1, a1_s, w13, w13_s, wse1, wsn1, b13, w13_bias is not None, w2, w2_s, wse2, wsn2,
                             b2, w2_bias is not None, tw_flat, q_scale, out_q, al, inter, y, K, TK, E,
                             _ACT_CODE[activation], gated, p, round_tl, bool(weight_on_input), num_sms, ws1, cnt1, ws2,
                             cnt2, counters[tiles1 + tiles2 + n_comb:tiles1 + tiles2 + n_comb + n_dep], pdl=pdl)
    elif c2.warp_specialized:
        _ws_gemm(c2, inter, a2_s, a2_s_stride, w2, w2_s, wse2, wsn2, b2, w2_bias is not None, tw_flat, tw_flat,
                 _OUT_PLAIN, al, y, H, 1, TK, E, _ACT_CODE[Activation.IDENTITY], False, _DEFAULT_ACT_PARAMS, round_tl,
                 False, not weight_on_input, num_sms, a_padded=padded,
                 a_scales_padded=padded and post_quant is not None, part=ws2, cnt=cnt2, pdl=pdl, layer_gated=gated)
    else:
        launch(_gemm._gemm2_kernel, grid2,
            inter_d, a2_s, w2_d, w2_s, b2, tw_flat,
            al.sorted_ids, al.block_expert, al.num_post_padded,
            y, inter_g, w2_g, ws2, cnt2, cnt_comb, out, out.stride(0),
            H, I_pad, TK, NB,
            inter_d.stride(0), w2_d.stride(0), w2_d.stride(1), a2_s_stride, wse2, wsn2, wsk2,
            b2.stride(0) if w2_bias is not None else 0, y.stride(0),
            TOP_K=K, E_LOC=E, QUANT=quant, A_FMT=a_code, W_FMT=w_code, CD=cd, FAST_CVT=cvt2,
            KPERM=_k_order(wfmt, c2.block_k) if micro else 0,
            MXDOT=mxdot, HAS_BIAS=w2_bias is not None,
            MUL_ROUTING_WEIGHT=not weight_on_input, OUT_ATOMIC=atomic, FUSE_COMBINE=fuse,
            BLOCK_M=BM, BLOCK_N=c2.block_n, BLOCK_K=c2.block_k, GROUP_M=c2.group_m, SWAP_AB=c2.swap_ab,
            EVEN_K=I_pad % c2.block_k == 0 or kt2 > 0, EVEN_N=H % c2.block_n == 0, UPCAST=upcast2, PRECISION=prec2,
            FAST_ACC=c2.fp8_fast_accum,
            SPLIT_K=c2.split_k, **pdl, PERSISTENT=bool(pers2), N_TILES=c2.n_tiles,
            HELD_KB=cdiv(I_pad, c2.block_k) if c2.n_tiles > 1 and wfmt is Format.FP8_BLOCK else 1,
            W_TK=w2.value_tile_k, W_SWZ=w2.value_swizzled, K_TAIL=kt2, A_PERMUTED=dot2,
            W_SRUN=_scale_run(wfmt, w2_s, c2, c2.block_n, I_pad % c2.block_k == 0 or kt2 > 0, mxdot,
                              dot2) if micro else 0,
            BLOCK_W1=_BLOCK_W1["enabled"], num_warps=c2.num_warps, num_stages=c2.num_stages,
        )
    if atomic or direct_out or fuse:
        return out

    # ---- 5. combine ----
    BT, BH, warps = combine_blocks(T, H, num_sms)
    launch(_comb._combine_kernel, (cdiv(T, BT), cdiv(H, BH)),
        y, ids_flat, out, T, H, local_expert_offset, y.stride(0), out.stride(0),
        E_LOC=E, TOP_K=K, BLOCK_T=BT, BLOCK_H=BH, num_warps=warps, **pdl,
    )
    return out


def combine_blocks(T: int, H: int, num_sms: "int | None") -> tuple:
    """(BLOCK_T, BLOCK_H, num_warps) of the combine launch: [<= 4, 1024]-element tiles, 8 a thread; at decode, where
    that leaves most SMs without a program (8 tokens of H = 4096: 8 programs reading 22 x 8 rows; H200, Nemotron-3-Super
    FP4: 7-8 us), the tiles shrink -- rows first, then columns down to 128 -- until the grid covers the SMs. Every output
    element sums its K values in the same order whatever the tiles: the same bits. 8 elements a thread (4 in the
    128-column tiles)."""
    BH = min(1024, next_pow2(H))
    BT = max(1, min(next_pow2(T), 4096 // BH))
    while num_sms and cdiv(T, BT) * cdiv(H, BH) < num_sms and (BT > 1 or BH > 128):
        if BT > 1:
            BT //= 2
        else:
            BH //= 2
    return BT, BH, max(1, min(4, BT * BH // 256))
