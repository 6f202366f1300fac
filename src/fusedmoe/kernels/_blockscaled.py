"""Block-scaled operands of the grouped expert GEMMs (``@triton.jit`` helpers only; used by
``_moe_gemm.py``). Hopper has neither FP4 tensor cores nor hardware micro-scaling, so NVFP4, MXFP4
and MXFP8 tiles are loaded in their storage format and converted in registers; the per-tensor
parts of the scales (NVFP4's global ``1/g``, FP8's per-tensor scale) are applied to the fp32
accumulator in the epilogue.

Data contract (the linear ``QuantizedTensor`` layout, docs/semantics.md 5.6-5.8; rows = weight
rows N or activation rows, K = the contracted dim, contiguous):

=========  ============================  =====================================  ==========
operand    values                        block scales (per row, along K)        in-kernel
=========  ============================  =====================================  ==========
PLAIN      16/32-bit [rows, K]           -                                      ``x``
FP8        e4m3 [rows, K]                - (per-tensor scale: epilogue)         ``q``
NVFP4      uint8 [rows, K/2] (2i: low)   e4m3 [rows, K/16]                      ``e2m1 * s`` (``/g``: epilogue)
MXFP4      uint8 [rows, K/2]             uint8 UE8M0 [rows, K/32]               ``e2m1 * 2^(e-127)``
MXFP8      e4m3 [rows, K]                uint8 UE8M0 [rows, K/32]               ``q * 2^(e-127)``
=========  ============================  =====================================  ==========

Two ways to multiply (chosen by the launcher):

* **Dequantize** (``_load_tile``; every pair except MX x MXFP8 at decode): both tiles become the
  MMA's 16-bit operand dtype. Every product above is exact in fp32 and in bf16 (E2M1 has 2
  significant bits, E4M3 4, a UE8M0 scale is a power of two: <= 6 significant bits), so a tile is
  bit-identical to ``fm.dequantize`` before its per-tensor factor and the bf16 MMA with fp32
  accumulation only rounds in the accumulation. (bf16 has fp32's exponent range; fp16 tiles are
  used only for NVFP4 weights, whose ``e2m1 * s`` lies in [2^-10, 2688].)
* **E4M3 MMA with scaled partial sums** (``_load_mx_block``; MX weights x MXFP8 activations with
  at most 32-row tiles): per 32-wide K block, an E4M3 x E4M3 MMA (MXFP4 is converted to E4M3
  exactly: ``e2m1 * 2^-6``) whose fp32 result is multiplied by ``2^ea * 2^ew`` and added to the
  accumulator: no per-element conversion at all for MXFP8, one 32-bit integer op per 4 values for
  MXFP4, and ``block_m`` FMAs per weight element per block on the accumulator (cheap at decode,
  why larger tiles dequantize instead).

Portable E2M1 decode (interpreter, fp16 / fp32 MMA operands): the 3 magnitude bits go to fp16 bits
9..11 and the sign to bit 15: that fp16 number is ``e2m1 * 2^-14`` (code 1 = 0.5 is the fp16
subnormal 2^-15, which the fp16 -> fp32 conversion keeps exactly); the 2^14 is folded into the
block scale (NVFP4 ``s * 16384``, exact; MX ``2^(e - 113)``, exact for codes e <= 240, i.e. block
amax < 6 * 2^113).

CUDA fast paths (``FAST_CVT``, bf16 operands; inline PTX, not available in the interpreter,
bit-identical by construction and checked by the ``gpu`` tests): E2M1 -> bf16 by the
nibble-aligned converter (``_e2m1x4_bf16_nib``: packed FP4 read as 16-bit words, 15 integer
instructions per 8 values and no byte permutes; NVFP4's exponent restore folded into the block
scale), E4M3 -> bf16 times ``2^k`` in bf16, and E2M1 -> E4M3 on packed words
(``_e2m1x2_to_e4m3_asm``).

K order (``KPERM``, ``_dot_order``): both operands of a dot are permuted identically along K so
that the pairs of K values a thread owns in Hopper's 16-bit register-operand layout are contiguous
in memory: 16-byte loads and no register shuffles between the load and the MMA.

sm_90 SASS of the main loop (Triton 3.6, gated GEMM1, 4 warps, 64 x 128 weight tiles, block_m 16,
instructions per weight value per thread): NVFP4 x BF16 portable 9.8 -> +KPERM 8.2 -> PRMT-table
converter 5.1 -> table-free shifts / masks 4.5 -> nibble-aligned 4.1 (Triton's own
``tl.dot_scaled`` on Hopper, MXFP4 x bf16: 8.4); MXFP8 x MXFP8 dequantized 5.9, E4M3 partial sums
2.8 (mostly fp32 FMUL / FFMA); MXFP4 x MXFP8 partial sums 4.9.

Epilogue quantizers (GEMM1 output -> GEMM2 input), bit-identical to ``fm.quantize`` on the
values rounded to hidden's dtype: NVFP4 with a static global scale (packed bytes + E4M3 block-scale
*bytes*, built with integer operations so they are exact in Triton's interpreter too) and MXFP8
(UE8M0 bytes; the values are written by the caller).
"""

import triton
import triton.language as tl

from ..formats.reference import _F32_RCP6
from ._quant import _div_rn, _e2m1_code, _e4m3_rne

# operand formats (launcher: fusedmoe.backends.triton_moe._F_CODE)
F_PLAIN = tl.constexpr(0)
F_FP8 = tl.constexpr(1)
F_NVFP4 = tl.constexpr(2)
F_MXFP4 = tl.constexpr(3)
F_MXFP8 = tl.constexpr(4)

_FP8_MAX = tl.constexpr(448.0)
_RCP6 = tl.constexpr(_F32_RCP6)  # fp32(1/6)


@triton.jit
def _e4m3_f32(b):
    """E4M3 numbers given as their bytes (uint8: the launcher's views below sm_89, where Triton has no e4m3 type,
    ``_host.e4m3_in_bytes``) -> fp32, exactly: the 7 low bits moved to fp16 bits 7-13 are ``e4m3 * 2^-8`` (e4m3's
    subnormals become fp16 subnormals, kept by the fp16 -> fp32 conversion), the sign to bit 15; the codes 0x7F /
    0xFF are NaN, as ``torch.float8_e4m3fn``'s."""
    h = b.to(tl.uint16)
    v = (((h & 0x80) << 8) | ((h & 0x7F) << 7)).to(tl.float16, bitcast=True).to(tl.float32) * 256.0
    return tl.where((h & 0x7F) == 0x7F, float("nan"), v)


@triton.jit
def _e4m3_as(x, DT: tl.constexpr):
    """E4M3 numbers (e4m3, or their bytes: ``_e4m3_f32``) -> ``DT``; other dtypes converted as they are."""
    if x.dtype == tl.uint8:
        return _e4m3_f32(x).to(DT)
    else:
        return x.to(DT)


@triton.jit
def _ue8m0_to_f32(e):
    """``2^(e - 127)`` as fp32 (exact; 2^-127 is an fp32 subnormal), NaN for 255: as
    ``formats.reference.ue8m0_decode``. ``e``: int32 in [0, 255]."""
    bits = tl.where(e == 0, 0x400000, e << 23)
    bits = tl.where(e == 255, 0x7FC00000, bits)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _ue8m0_to_f32_x16384(e):
    """``2^(e - 127) * 2^14 = 2^(e - 113)`` (exact for e <= 240; saturates above), NaN for 255."""
    bits = tl.where(e == 255, 0x7FC00000, tl.minimum(e + 14, 254) << 23)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _e2m1x2_raw(b):
    """Packed E2M1 pairs ``b`` (uint8 [R, C/2], element 2i in the low nibble) -> fp32 [R, C/2, 2]
    holding ``e2m1 * 2^-14`` (exact, signed zeros kept)."""
    b16 = b.to(tl.uint16)
    lo = (((b16 & 0x7) << 9) | ((b16 & 0x8) << 12)).to(tl.float16, bitcast=True).to(tl.float32)
    hi = (((b16 & 0x70) << 5) | ((b16 & 0x80) << 8)).to(tl.float16, bitcast=True).to(tl.float32)
    return tl.join(lo, hi)


# E2M1 -> bf16 converter of the CUDA fast path (FAST_CVT), nibble-aligned: packed FP4 read as 16-bit
# words (a tile loads the uint8 storage through an int16 view: element j = bytes 2j, 2j + 1 = the
# four nibbles of K values 4j .. 4j + 3 at bits 0-3, 4-7, 8-11, 12-15). In a 32-bit register of two
# such words the nibble at bits 12-15 of each half already has its sign at bf16's bit 15, and its
# magnitude moves to bits 6-8 with one shift: (w & 0x80008000) | ((w & 0x70007000) >> 6) is the
# value times 2^-126 (bits 6-8 are the exponent LSBs and the mantissa MSB: 0.5 becomes the
# subnormal 2^-127); the register shifted left by 4, 8, 12 brings nibbles 2, 1, 0 there. 3
# instructions per output register (AND, SHR, LOP3) + 3 shifts = 15 integer-pipe instructions per 8
# values, no byte permutes, and elementwise in the 16-bit words (output s, element j = nibble s of
# word j), which is what inline_asm_elementwise may assume of any register order. With ``restore``
# a bf16x2 multiply by 2^126 follows (MX scales); without it the caller folds 2^126 into the block
# scale (NVFP4: ``s * 2^110``, exact for e4m3 scales, and the remaining 2^16 is applied to the fp32
# accumulator: _NIB_ACC_FACTOR).
def _e2m1_nib_asm(restore: bool) -> str:
    """PTX: $0 .. $3 = nibble 0 .. 3 (bits 4s .. 4s + 3) of the two 16-bit words in $4."""
    lines = [".reg .b32 v, w, t, k, z;", "mov.b32 v, $4;", "mov.b32 k, 0x7E807E80;", "mov.b32 z, 0x80008000;"]
    for out, shift in (("$3", 0), ("$2", 4), ("$1", 8), ("$0", 12)):
        src = "v" if shift == 0 else "w"
        if shift:
            lines.append(f"shl.b32 w, v, {shift};")
        lines += [f"and.b32 t, {src}, 0x70007000;", "shr.b32 t, t, 6;", f"and.b32 {out}, {src}, 0x80008000;",
                  f"or.b32 {out}, {out}, t;"]
        if restore:
            lines.append(f"fma.rn.bf16x2 {out}, {out}, k, z;")
    return "{\n" + "\n".join(lines) + "\n}"


def _ptx_moves(dst: str, src: str, moves) -> list:
    """PTX lines setting ``dst`` to the OR over ``moves`` of ``(src << shift) & mask`` (a negative shift: a logical
    right shift); the temporary ``t`` must be declared."""
    lines = []
    for i, (shift, mask) in enumerate(moves):
        t = dst if i == 0 else "t"
        if shift:
            lines.append(f"{'shl.b32' if shift > 0 else 'shr.u32'} {t}, {src}, {abs(shift)};")
        lines.append(f"and.b32 {t}, {t if shift else src}, {mask:#010x};")
        if i:
            lines.append(f"or.b32 {dst}, {dst}, t;")
    return lines


# The same outputs from words stored bit-swizzled (QuantizedTensor.value_layout "swizzled", formats/tensor.py
# FP4_SWIZZLE): value 0 already sits at the output bits (one AND), values 1 and 2 get there by a left shift of 3
# and 6 (the IMAD pipe can shift) and one AND, value 3 by three shifts and masks: 11 integer instructions per 8
# values instead of 15, 4 of them off the ALU pipe. Still elementwise in the 16-bit words: a left shift by <= 6
# moves a low word's bits 10-15 into the high word's bits 16-21 and a right shift by 3 / 7 the high word's bits
# 16-22 into bits 9-15 of the low one, all outside the masks.
_P_BF16 = 0x81C081C0  # bf16 sign 15 / 31, magnitude 6-8 / 22-24
_SWZ_BF16_MOVES = (((0, _P_BF16),), ((3, _P_BF16),), ((6, _P_BF16),),
                   ((1, 0x80008000), (-3, 0x01800180), (-7, 0x00400040)))  # value 3: sign 14, exponent 10-11, mantissa 13


def _e2m1_swz_asm(restore: bool) -> str:
    """PTX: $0 .. $3 = value 0 .. 3 of the two swizzled 16-bit words in $4."""
    lines = [".reg .b32 v, t, k, z;", "mov.b32 v, $4;", "mov.b32 k, 0x7E807E80;", "mov.b32 z, 0x80008000;"]
    for i, moves in enumerate(_SWZ_BF16_MOVES):
        lines += _ptx_moves(f"${i}", "v", moves)
    if restore:
        lines += [f"fma.rn.bf16x2 ${i}, ${i}, k, z;" for i in range(4)]
    return "{\n" + "\n".join(lines) + "\n}"


_E2M1_BF16_NIB = tl.constexpr(_e2m1_nib_asm(False))
_E2M1_BF16_NIB_RESTORED = tl.constexpr(_e2m1_nib_asm(True))
_E2M1_BF16_SWZ = tl.constexpr(_e2m1_swz_asm(False))
_E2M1_BF16_SWZ_RESTORED = tl.constexpr(_e2m1_swz_asm(True))
# NVFP4: 2^126 = the block-scale factor 2^110 x the accumulator factor 2^16 (both exact)
_NIB_SCALE_BIAS = tl.constexpr(2.0 ** 110)
_NIB_ACC_FACTOR = tl.constexpr(2.0 ** 16)
# FAST_CVT == MX_FOLD (the launcher's choice when every MX block scale code of the weights with a nonzero
# value lies in [MX_FOLD_CODE_MIN, MX_FOLD_CODE_MAX]: ``ExpertWeights.mx_fold_ok``): MXFP4 weights
# skip the converter's bf16x2 multiply by 2^126; their block scale carries 2^110 of it (bf16
# 2^(e - 17): normal for e <= 144) and the accumulator the other 2^16 (_NIB_ACC_FACTOR), as
# NVFP4. Exact: the smallest product 0.5 * 2^-126 * 2^(e - 17) is >= 2^-133, bf16's least subnormal,
# for e >= 11, and every product has <= 2 significant bits.
MX_FOLD = tl.constexpr(2)
MX_FOLD_CODE_MIN = 11
MX_FOLD_CODE_MAX = 144
_MX_FOLD_EXP_BIAS = tl.constexpr(110)


@triton.jit
def _e2m1x4_bf16_nib(w, RESTORE: tl.constexpr, SWZ: tl.constexpr = False):
    """Packed FP4 as 16-bit words ``w`` (int16 [R, C]; bit-swizzled with ``SWZ``) -> its four
    values (bf16 [R, C] each; value s = K value 4j + s of word j): ``e2m1 * 2^-126``, or ``e2m1``
    with ``RESTORE``. Not available in Triton's interpreter."""
    if SWZ:
        swz: tl.constexpr = _E2M1_BF16_SWZ_RESTORED if RESTORE else _E2M1_BF16_SWZ
        return tl.inline_asm_elementwise(swz, "=r,=r,=r,=r,r", [w], dtype=(tl.bfloat16,) * 4, is_pure=True, pack=2)
    else:
        asm: tl.constexpr = _E2M1_BF16_NIB_RESTORED if RESTORE else _E2M1_BF16_NIB
        return tl.inline_asm_elementwise(asm, "=r,=r,=r,=r,r", [w], dtype=(tl.bfloat16,) * 4, is_pure=True, pack=2)


@triton.jit
def _unswizzle_bytes(b):
    """Packed FP4 bytes ``b`` (uint8 [R, C], C even) stored bit-swizzled (formats/tensor.py FP4_SWIZZLE, per
    little-endian 16-bit word) -> the linear bytes (portable integer operations; the inverse bit map as one
    shift and mask per distance)."""
    lo, hi = tl.split(tl.reshape(b, [b.shape[0], b.shape[1] // 2, 2]))
    w = lo.to(tl.int32) | (hi.to(tl.int32) << 8)
    p = (((w >> 6) & 0x7) | ((w >> 12) & 0x8) | ((w & 0x4038) << 1) | ((w >> 5) & 0x80) | ((w & 0x7) << 8)
         | ((w & 0x200) << 2) | ((w >> 1) & 0x1000) | ((w & 0xC00) << 3))
    return tl.reshape(tl.join((p & 0xFF).to(tl.uint8), (p >> 8).to(tl.uint8)), [b.shape[0], b.shape[1]])


@triton.jit
def _ue8m0_to_bf16(e):
    """``2^(e - 127)`` as bf16 (exact: bf16 has fp32's exponent range; e = 0 is the subnormal
    0x0040), NaN for 255. ``e``: int32 in [0, 255]."""
    bits = tl.where(e == 0, 0x40, tl.where(e == 255, 0x7FC0, e << 7))
    return bits.to(tl.int16).to(tl.bfloat16, bitcast=True)


@triton.jit
def _dot_order(x, BR: tl.constexpr, BK: tl.constexpr, KPERM: tl.constexpr):
    """K permutation shared by both operands of a dot (a sum over K does not depend on the order):
    the pairs of K elements ``[4, BK/8]`` -> ``[BK/8, 4]``, i.e. dot position ``(4 i + c) * 2 + h``
    holds element ``(BK/8 * c + i) * 2 + h``. Hopper's (and Ampere's) 16-bit MMA register operand
    gives lane ``c`` (of 4 along K) the pairs ``c, c + 4, c + 8, ...``; after the permutation those
    are the pairs ``[BK/8 * c, BK/8 * (c + 1))``, contiguous in memory: a packed FP4 row of a
    128-wide tile is read as four 16-byte vectors instead of 64 single bytes, and no register
    shuffles are needed between the load and the MMA.

    ``KPERM == 3`` (FP4 weights, BK >= 32): ``[4, BK/32, 2, 2, 2]`` -> ``[2, 2, BK/32, 4, 2]``,
    i.e. dot position ``((((h * 2 + x) * BK/32 + i) * 4 + c) * 2 + p`` holds element
    ``((((BK/32 * c + i) * 2 + p) * 2 + x) * 2 + h``: a lane's register pair is the same nibble
    ``2x + h`` of two consecutive 16-bit words -- exactly one output register of
    ``_e2m1x4_bf16_nib`` -- and a lane's words are contiguous in memory. Every conversion path
    (portable too) uses it for FP4 weights, so they all add the same products in the same order.
    ``KPERM == 2`` (FP4 tiles narrower than 32): ``[4, BK/16, 2, 2]`` -> ``[2, BK/16, 4, 2]``
    (pairs of consecutive bytes, same nibble; sm_90 decode GEMM1 main loop with the former byte-table
    converter: 647 -> 587 instructions per K block).
    """
    if KPERM == 3:
        return tl.reshape(tl.permute(tl.reshape(x, [BR, 4, BK // 32, 2, 2, 2]), [0, 5, 4, 2, 1, 3]), [BR, BK])
    if KPERM == 2:
        return tl.reshape(tl.permute(tl.reshape(x, [BR, 4, BK // 16, 2, 2]), [0, 4, 2, 1, 3]), [BR, BK])
    elif KPERM:
        return tl.reshape(tl.permute(tl.reshape(x, [BR, 4, BK // 8, 2]), [0, 2, 1, 3]), [BR, BK])
    else:
        return x


@triton.jit
def _dot_order_steps(x, BR: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """``x`` [BR, BN] with each ``BK``-wide run of columns in ``_dot_order``'s KPERM 3 order (BN a multiple of BK):
    GEMM1's epilogue stores its tile so (``OUT_DOT_BK``) for a GEMM2 of ``BK``-wide K steps that loads without
    permuting (``A_PERMUTED``). A permutation of the tile in registers, then the plain contiguous store: per-element
    addresses held 255 registers and spilled (sm_90). The host's ``to_dot_order`` lays out a tensor the same way."""
    R: tl.constexpr = BR * (BN // BK)  # each BK-wide run a row of its own
    return tl.reshape(_dot_order(tl.reshape(x, [R, BK]), R, BK, 3), [BR, BN])


def to_dot_order(x, bk: int, tail: int = 0):
    """Host twin of ``_dot_order_steps`` (torch): a new contiguous [rows, n] tensor holding ``x`` [rows, n] (columns
    contiguous) in the KPERM 3 dot order of ``bk``-wide K steps, the last ``tail`` columns one step of their own --
    what a GEMM with ``A_PERMUTED`` loads without permuting. One copy per step width (capture-safe: no index
    tensor). Needs ``n - tail`` a multiple of ``bk``; ``bk`` and ``tail`` multiples of 32."""
    rows, n = x.shape
    if bk % 32 or tail % 32 or n < tail or (n - tail) % bk or x.stride(1) != 1:
        raise ValueError(f"to_dot_order: [.., {n}] (column stride {x.stride(1)}) is not n = m * {bk} + {tail} "
                         "with contiguous columns and 32-multiples")
    out = x.new_empty((rows, n))
    for lo, hi, w in ((0, n - tail, bk), (n - tail, n, tail)):
        if hi > lo:
            q = w // 32
            # element (((c q + i) 2 + p) 2 + x) 2 + h -> position (((h 2 + x) q + i) 4 + c) 2 + p
            src = x[:, lo:hi].view(rows, (hi - lo) // w, 4, q, 2, 2, 2).permute(0, 1, 6, 5, 3, 2, 4)
            out[:, lo:hi].view(rows, (hi - lo) // w, 2, 2, q, 4, 2).copy_(src)
    return out


# the "tiled" FP4 value layout (formats/tensor.py: QuantizedTensor.value_layout): per 64-row tile,
# [C/TK, 64, TK/2 bytes] -- each TK-column piece of the tile's 64 rows one contiguous run, the pieces
# of a row tile one after the other. A GEMM program's K step (BK <= TK columns of 64 rows) is then
# one contiguous run of memory instead of 64 pieces a row stride apart.
_TILE_ROWS = tl.constexpr(64)


@triton.jit
def _w_rows(n, stride_n, TK: tl.constexpr, EPC: tl.constexpr):
    """Storage offsets (int64) of the starts of weight rows ``n``: linear (``TK`` 0) ``n * stride_n``;
    tiled with TK-column pieces ``(n // 64) * stride_n + (n % 64) * TK / EPC`` (``stride_n``: the
    row tiles' stride; ``EPC``: logical columns per storage element -- 2 for bytes, 4 for the
    int16 words of the nibble view)."""
    if TK == 0:
        return n * stride_n
    else:
        return (n // _TILE_ROWS) * stride_n + (n % _TILE_ROWS) * (TK // EPC)


@triton.jit
def _k_base(ki, BK: tl.constexpr, TK: tl.constexpr, EPC: tl.constexpr):
    """Storage offset, from a row's start (``_w_rows``), of logical column ``ki * BK``: linear
    ``ki * BK / EPC``; tiled (BK <= TK, TK a multiple of BK) the piece ``ki * BK // TK`` (each
    ``64 * TK / EPC`` elements) plus the column within it. Scalar arithmetic only: the tile's
    ``BK / EPC`` elements of a row stay one ``arange`` run, aligned as in the linear layout."""
    if TK == 0:
        return ki * (BK // EPC)
    else:
        tl.static_assert(BK <= TK and TK % BK == 0, "tiled FP4 values: block_k must divide the tile width")
        if BK == TK:
            return ki * (_TILE_ROWS * TK // EPC)
        else:
            # products of constexprs, no division of an offset: Triton's axis analysis keeps the
            # 16-byte alignment (``(ki * BK % TK) // EPC`` hid it: no cp.async, 4x the LDGs on sm_90)
            R: tl.constexpr = TK // BK
            piece = ki // R
            return piece * (_TILE_ROWS * TK // EPC) + (ki - piece * R) * (BK // EPC)


@triton.jit
def _k_offs(ki, BK: tl.constexpr, TK: tl.constexpr, EPC: tl.constexpr):
    """Storage offsets ([BK / EPC], from a row's start) of the ``ki``-th K tile's logical columns: ``_k_base``'s
    one run, or for a K tile two tile widths wide (``BK == 2 * TK``: gpt-oss's K = 2880 tiled by 64, in 128-wide
    decode steps) the runs of its two pieces side by side -- ``(j // W) * P + j % W`` with constexpr powers of
    two, which Triton's axis analysis keeps contiguous (and aligned) within a piece."""
    if TK == 0 or BK <= TK:
        return _k_base(ki, BK, TK, EPC) + tl.arange(0, BK // EPC)
    else:
        tl.static_assert(BK == 2 * TK, "tiled FP4 values: block_k is at most two tile widths")
        P: tl.constexpr = _TILE_ROWS * TK // EPC  # storage elements of one piece (64 rows x TK columns)
        W: tl.constexpr = TK // EPC  # a row's run in one piece
        j = tl.arange(0, BK // EPC)
        return ki * (2 * P) + (j // W) * P + (j % W)


@triton.jit
def _tile_scales(s_ptr, s_row_off, s_stride_k, ki, K, row_ok, G: tl.constexpr, BK: tl.constexpr,
                 EVEN_K: tl.constexpr, S_RUN: tl.constexpr = 0):
    """The block scales of ``_load_tile``'s ``ki``-th tile as stored ([BR, BK / G]: e4m3 or UE8M0
    bytes), row-major or K-major (``s_stride_k``); blocks past K (``EVEN_K`` False) read 0.

    ``S_RUN`` > BK / G (row-major UE8M0 scales in rows padded to 16 bytes, ``EVEN_K``; the launcher's
    ``triton_moe._scale_run``): each step loads the aligned run of ``S_RUN`` bytes of a row that holds its
    own BK / G, and keeps those. A decode step's own bytes (e.g. 2 a row at block_k 64) are fewer than the
    4 a thread that Triton's pipeline needs to copy a load ahead (cp.async): it then waited for them from
    memory in every step (Nsight Compute, gpt-oss-120b MXFP4 GEMM1 at one token: the top stall). The run
    is read again by the next steps from L1 / L2; the bytes past the row's blocks are its zero padding."""
    if S_RUN > BK // G:
        tl.static_assert(EVEN_K and S_RUN % (BK // G) == 0, "scale runs: whole steps, no K mask")
        R: tl.constexpr = S_RUN // (BK // G)  # steps per run
        roffs = (ki // R) * S_RUN + tl.arange(0, S_RUN)
        run = tl.load(s_ptr + s_row_off[:, None] + roffs[None, :], mask=row_ok[:, None], other=0)
        tl.static_assert(R == 2 or R == 4, "scale runs: 2 or 4 steps")
        if R == 2:
            lo, hi = tl.split(tl.permute(tl.reshape(run, [run.shape[0], 2, BK // G]), [0, 2, 1]))
            return tl.where(ki % 2 == 0, lo, hi)
        else:
            # run byte ((h * 2 + l) * BK/G + b): step h * 2 + l of the run
            x0, x1 = tl.split(tl.permute(tl.reshape(run, [run.shape[0], 2, 2, BK // G]), [0, 3, 1, 2]))
            h0, h1 = tl.split(tl.where(ki % 2 == 0, x0, x1))
            return tl.where((ki // 2) % 2 == 0, h0, h1)
    goffs = ki * (BK // G) + tl.arange(0, BK // G)
    if EVEN_K:
        sm = row_ok[:, None]
    else:
        sm = row_ok[:, None] & (goffs < K // G)[None, :]
    return tl.load(s_ptr + s_row_off[:, None] + goffs[None, :] * s_stride_k, mask=sm, other=0.0)


@triton.jit
def _load_tile(ptr, row_off, s_ptr, s_row_off, s_stride_k, ki, K, row_ok, FMT: tl.constexpr,
               BR: tl.constexpr, BK: tl.constexpr, EVEN_K: tl.constexpr, CD: tl.constexpr,
               FAST_CVT: tl.constexpr = False, KPERM: tl.constexpr = False, TK: tl.constexpr = 0,
               SWZ: tl.constexpr = False, S_RUN: tl.constexpr = 0):
    """The ``ki``-th [BR, BK] operand tile along K (elements ``[ki*BK, (ki+1)*BK)``), dequantized
    to ``CD``.

    ``ptr`` / ``s_ptr``: values / block scales, already offset to the expert (weights); ``row_off``
    / ``s_row_off``: int64 [BR] offsets of each row's start (``row * row_stride``, in elements of
    the storage tensor: bytes for packed FP4); ``s_stride_k``: the scales' stride along K (1 for
    row-major scales; the number of rows for K-major scales -- ``ExpertWeights``' NVFP4 layout --
    whose tile is ``BK / G`` contiguous runs of ``BR`` bytes: coalesced, and prefetched by Triton's
    pipeline from 4 bytes per thread); ``row_ok`` [BR]: rows to load (others read 0).
    K is a multiple of the format's scale block and BK of the block, so a K tail (``EVEN_K`` False)
    is masked at block granularity. Per-tensor factors are left to the epilogue. ``FAST_CVT``
    (CUDA, CD = bf16): FP4 values through ``_e2m1x4_bf16_nib`` from the int16 view of the storage
    (``ptr`` / ``row_off`` in 16-bit words) and the block scale multiplied in bf16 (exact: the
    product has <= 6 significant bits); NVFP4 tiles are then ``2^-16`` times the values
    (``_NIB_ACC_FACTOR``, applied to the accumulator). Offsets are
    ``ki * (BK / 2) + arange`` rather than ``(ki * BK) // 2 + ...``: a division would hide their
    16-byte alignment from Triton's axis analysis and split the loads into bytes. ``TK`` (packed FP4
    only): 0 for linear values, else the width of the pieces of the "tiled" layout (``_w_rows``
    gave ``row_off``; ``_k_offs`` places the step, within a piece or across two). ``SWZ`` (packed FP4 only): the values' 16-bit words are
    bit-swizzled (value layout "swizzled"): the fast converter reads them as they are, the portable
    path unswizzles the bytes first. ``S_RUN``: the block scales read in aligned runs of that many bytes a row
    (``_tile_scales``).
    """
    if FMT == F_NVFP4 or FMT == F_MXFP4:
        G: tl.constexpr = 16 if FMT == F_NVFP4 else 32
        if FAST_CVT and CD == tl.bfloat16:
            s = _tile_scales(s_ptr, s_row_off, s_stride_k, ki, K, row_ok, G, BK, EVEN_K, S_RUN)
            if FMT == F_NVFP4:  # e4m3 scales
                s = _e4m3_as(s, tl.bfloat16)
            elif FAST_CVT == MX_FOLD:  # UE8M0 codes in [11, 144]: 2^(e-127) * 2^110 in one integer op
                s = ((s.to(tl.int32) + _MX_FOLD_EXP_BIAS) << 7).to(tl.int16).to(tl.bfloat16, bitcast=True)
            else:  # UE8M0 bytes
                s = _ue8m0_to_bf16(s.to(tl.int32))
            # nibble-aligned converter: ``ptr`` is the int16 view of the packed storage (row
            # offsets in 16-bit words); NVFP4 scales carry 2^110 of the 2^126 (exact: e4m3
            # scales are <= 448 and the products >= 2^-26), MX values are restored in the converter
            k16 = ki * (BK // 4) + tl.arange(0, BK // 4)  # logical K position, in words
            m16 = row_ok[:, None] if EVEN_K else row_ok[:, None] & (k16 < K // 4)[None, :]
            offs16 = _k_offs(ki, BK, TK, 4)
            w16 = tl.load(ptr + row_off[:, None] + offs16[None, :], mask=m16, other=0)
            if FMT == F_NVFP4:
                s = s * _NIB_SCALE_BIAS
            n0, n1, n2, n3 = _e2m1x4_bf16_nib(w16, FMT != F_NVFP4 and FAST_CVT != MX_FOLD, SWZ)
            # [BR, BK/4 words, s & 1, s >> 1]; a scale block is G/4 consecutive words
            v = tl.reshape(tl.join(tl.join(n0, n1), tl.join(n2, n3)), [BR, BK // G, G]) * s[:, :, None]
            # -> natural K order 4j + s
            v = tl.permute(tl.reshape(v, [BR, BK // 4, 2, 2]), [0, 1, 3, 2])
            return _dot_order(tl.reshape(v, [BR, BK]), BR, BK, KPERM)
        kb = ki * (BK // 2) + tl.arange(0, BK // 2)  # logical K position, in bytes
        m = row_ok[:, None] if EVEN_K else row_ok[:, None] & (kb < K // 2)[None, :]
        offs = _k_offs(ki, BK, TK, 2)
        b = tl.load(ptr + row_off[:, None] + offs[None, :], mask=m, other=0)
        if SWZ:
            b = _unswizzle_bytes(b)
        s = _tile_scales(s_ptr, s_row_off, s_stride_k, ki, K, row_ok, G, BK, EVEN_K, S_RUN)
        if FMT == F_NVFP4:  # e4m3 scales
            s = _e4m3_as(s, tl.float32) * 16384.0
        else:  # UE8M0 bytes
            s = _ue8m0_to_f32_x16384(s.to(tl.int32))
        v = tl.reshape(_e2m1x2_raw(b), [BR, BK // G, G]) * s[:, :, None]
        return _dot_order(tl.reshape(v, [BR, BK]).to(CD), BR, BK, KPERM)
    else:
        offs = ki * BK + tl.arange(0, BK)
        if EVEN_K:
            m = row_ok[:, None]
        else:
            m = row_ok[:, None] & (offs < K)[None, :]
        x = tl.load(ptr + row_off[:, None] + offs[None, :], mask=m, other=0.0)
        if x.dtype == tl.uint8:  # E4M3 values as bytes (below sm_89): exact in fp32, so in bf16 and fp16
            x = _e4m3_f32(x)
        if FMT == F_MXFP8:
            e = _tile_scales(s_ptr, s_row_off, s_stride_k, ki, K, row_ok, 32, BK, EVEN_K, S_RUN)
            if FAST_CVT and CD == tl.bfloat16:  # e4m3 -> bf16 is exact, so is q * 2^k in bf16
                v = tl.reshape(x.to(tl.bfloat16), [BR, BK // 32, 32]) * _ue8m0_to_bf16(e.to(tl.int32))[:, :, None]
                return _dot_order(tl.reshape(v, [BR, BK]), BR, BK, KPERM)
            s = _ue8m0_to_f32(e.to(tl.int32))
            v = tl.reshape(x.to(tl.float32), [BR, BK // 32, 32]) * s[:, :, None]
            return _dot_order(tl.reshape(v, [BR, BK]).to(CD), BR, BK, KPERM)
        else:
            return _dot_order(x.to(CD), BR, BK, KPERM)


@triton.jit
def _e2m1x2_to_e4m3(b):
    """Packed E2M1 pairs ``b`` (uint8 [R, C/2]) -> E4M3 [R, C] holding ``e2m1 * 2^-6``, exactly:
    the 3 magnitude bits go to E4M3 bits 2..4 (exponent 0..3, mantissa bit 2; code 1 = 0.5 becomes
    the E4M3 subnormal 2^-7) and the sign to bit 7. Integer operations on bytes only."""
    lo = ((b & 0x7) << 2) | ((b & 0x8) << 4)
    hi = ((b >> 2) & 0x1C) | (b & 0x80)
    v = tl.join(lo.to(tl.float8e4nv, bitcast=True), hi.to(tl.float8e4nv, bitcast=True))
    return tl.reshape(v, [b.shape[0], 2 * b.shape[1]])


_E2M1_E4M3_ASM = tl.constexpr("""
{
.reg .b32 t0, t1, t2, t3;
and.b32 t0, $2, 0x07070707;
shl.b32 t0, t0, 2;
and.b32 t1, $2, 0x08080808;
shl.b32 t1, t1, 4;
or.b32 $0, t0, t1;
shr.u32 t2, $2, 2;
and.b32 t2, t2, 0x1C1C1C1C;
and.b32 t3, $2, 0x80808080;
or.b32 $1, t2, t3;
}
""")


# The same from bit-swizzled words (FP4_SWIZZLE), 4 bytes = two whole words per register: $0 gets the low nibbles'
# values (0 and 2 of each word), $1 the high nibbles' (1 and 3). Each register's bytes 0-1 and 2-3 must be one
# word: pack=4 over a tile whose rows hold >= 2 consecutive bytes per thread (a K block's 16 bytes of a row are one
# 16-byte vector; test_gpu_tiled_and_linear_weights_same_bits compares the MXFP4 x MXFP8 layer on swizzled and
# linear values bit for bit).
# E4M3 ``e2m1 * 2^-6``: sign at bit 7, magnitude at 2-4 of each byte. $0: bytes 0 / 2 from value 0 (magnitude
# 6-8, sign 15), bytes 1 / 3 from value 2 (0-2, 9); $1: from value 1 (3-5, 12) and value 3 (13 / 10-11, 14).
_SWZ_E4M3_MOVES = (((-4, 0x001C001C), (-8, 0x00800080), (10, 0x1C001C00), (6, 0x80008000)),
                   ((-1, 0x001C001C), (-5, 0x00800080), (1, 0x98009800), (-3, 0x04000400)))
_E2M1_E4M3_SWZ_ASM = tl.constexpr("{\n" + "\n".join(
    [".reg .b32 t;"] + _ptx_moves("$0", "$2", _SWZ_E4M3_MOVES[0]) + _ptx_moves("$1", "$2", _SWZ_E4M3_MOVES[1]))
    + "\n}")


@triton.jit
def _e2m1x2_to_e4m3_asm(b):
    """CUDA fast path of ``_e2m1x2_to_e4m3``: the same bit moves on 4 packed bytes per 32-bit
    operation (8 values per ~6 instructions; Triton's byte-wise integer ops do not pack)."""
    lo, hi = tl.inline_asm_elementwise(_E2M1_E4M3_ASM, "=r,=r,r", [b], dtype=(tl.float8e4nv, tl.float8e4nv),
                                       is_pure=True, pack=4)
    return tl.reshape(tl.join(lo, hi), [b.shape[0], 2 * b.shape[1]])


@triton.jit
def _e2m1x2_swz_to_e4m3_asm(b):
    """``_e2m1x2_to_e4m3_asm`` of bit-swizzled bytes (``_E2M1_E4M3_SWZ_ASM``; same result as unswizzling first)."""
    lo, hi = tl.inline_asm_elementwise(_E2M1_E4M3_SWZ_ASM, "=r,=r,r", [b], dtype=(tl.float8e4nv, tl.float8e4nv),
                                       is_pure=True, pack=4)
    return tl.reshape(tl.join(lo, hi), [b.shape[0], 2 * b.shape[1]])


@triton.jit
def _load_mx_block(ptr, row_off, s_ptr, s_row_off, s_stride_k, kb, K, row_ok, FMT: tl.constexpr,
                   BR: tl.constexpr, EVEN_K: tl.constexpr, FAST_CVT: tl.constexpr, TK: tl.constexpr = 0,
                   SWZ: tl.constexpr = False):
    """The ``kb``-th 32-wide K block of an MX operand (MXFP8, or MXFP4 converted to E4M3) as
    (E4M3 values [BR, 32], fp32 scale [BR]) with ``x = values * scale``: MXFP8 ``2^(e-127)``,
    MXFP4 ``2^(e-127+6)`` (the conversion's 2^-6). The scale is decoded as the fp32 pattern
    ``(e + 6|0) << 23`` (one integer op): exact for codes 1..248 (MXFP4: 0..248); MXFP8's code 0
    (2^-127: an all-zero group in practice) becomes 0 and code 255 (NaN) +inf. Blocks past K
    (``EVEN_K`` False) read as zeros. ``TK``: MXFP4 values linear (0) or tiled (``_load_tile``); ``SWZ``: their
    words bit-swizzled."""
    if EVEN_K:
        ok = row_ok
    else:
        ok = row_ok & (kb < K // 32)
    e = tl.load(s_ptr + s_row_off + kb * s_stride_k, mask=ok, other=0).to(tl.int32)
    if FMT == F_MXFP4:
        offs = _k_base(kb, 32, TK, 2) + tl.arange(0, 16)
        b = tl.load(ptr + row_off[:, None] + offs[None, :], mask=ok[:, None], other=0)
        if FAST_CVT and SWZ:
            v = _e2m1x2_swz_to_e4m3_asm(b)
        elif FAST_CVT:
            v = _e2m1x2_to_e4m3_asm(b)
        elif SWZ:
            v = _e2m1x2_to_e4m3(_unswizzle_bytes(b))
        else:
            v = _e2m1x2_to_e4m3(b)
        return v, ((e + 6) << 23).to(tl.float32, bitcast=True)
    else:
        offs = kb * 32 + tl.arange(0, 32)
        v = tl.load(ptr + row_off[:, None] + offs[None, :], mask=ok[:, None], other=0.0)
        return v, (e << 23).to(tl.float32, bitcast=True)


@triton.jit
def _e4m3_bits(s):
    """E4M3 byte (int32) of fp32 ``s`` in [0, 448] that is exactly representable in E4M3."""
    bits = s.to(tl.int32, bitcast=True)
    normal = (((bits >> 23) - 120) << 3) | ((bits >> 20) & 7)
    sub = (s * 512.0).to(tl.int32)
    return tl.where(s < 0.015625, sub, normal)


@triton.jit
def _nvfp4_quant_tile(x, g, BM: tl.constexpr, BN: tl.constexpr):
    """NVFP4 of fp32 ``x [BM, BN]`` (16-blocks along BN) with global scale ``g`` (fp32 scalar),
    the recipe of ``formats.reference._nvfp4_blocks`` bit for bit. Returns (packed bytes int32
    [BM, BN/2], E4M3 scale bytes int32 [BM, BN/16])."""
    x3 = tl.reshape(x, [BM, BN // 16, 16])
    amax = tl.max(tl.abs(x3), axis=2)
    sv = tl.minimum(g * (amax * _RCP6), _FP8_MAX)
    s_q = _e4m3_rne(sv)
    zero_s = s_q == 0.0
    inv_g = _div_rn(tl.full([BM, BN // 16], 1.0, tl.float32), g)
    denom = tl.where(zero_s, 1.0, s_q * inv_g)  # 1.0: placeholder, never used
    out_scale = tl.where(zero_s, 0.0, _div_rn(tl.full([BM, BN // 16], 1.0, tl.float32), denom))
    codes = _e2m1_code(x3 * out_scale[:, :, None])
    lo, hi = tl.split(tl.reshape(codes, [BM, BN // 2, 2]))
    return lo | (hi << 4), _e4m3_bits(s_q)


@triton.jit
def _dequant_kernel(
    ptr,  # values [R, K] (packed FP4: uint8 [R, K/2])
    s_ptr,  # block scales [R, K/G] (unused for PLAIN / FP8)
    out_ptr,  # fp32 [R, K]
    R,
    K,
    stride_r,
    stride_sr,
    stride_or,
    FMT: tl.constexpr,
    BR: tl.constexpr,
    BK: tl.constexpr,
    EVEN_K: tl.constexpr,
    CD: tl.constexpr,
    FAST_CVT: tl.constexpr,
    TK: tl.constexpr = 0,  # packed FP4: values linear (0) or tiled with TK-column pieces (stride_r: row tiles')
    SWZ: tl.constexpr = False,  # packed FP4: words bit-swizzled (value layout "swizzled")
):
    """Test entry: ``out = _load_tile(...)`` converted to fp32, i.e. exactly the tiles the GEMMs multiply
    (before the per-tensor factors). grid = (cdiv(R, BR), cdiv(K, BK))."""
    rows = tl.program_id(0) * BR + tl.arange(0, BR)
    ki = tl.program_id(1)
    ok = rows < R
    r64 = rows.to(tl.int64)
    x = _load_tile(ptr, _w_rows(r64, stride_r, TK, 4 if FAST_CVT else 2), s_ptr, r64 * stride_sr, 1, ki, K, ok,
                   FMT, BR, BK, EVEN_K, CD, FAST_CVT, False, TK, SWZ)
    x = x.to(tl.float32)
    if FAST_CVT and FMT == F_NVFP4 or FAST_CVT == MX_FOLD and FMT == F_MXFP4:
        x = x * _NIB_ACC_FACTOR
    cols = ki * BK + tl.arange(0, BK)
    tl.store(out_ptr + r64[:, None] * stride_or + cols[None, :], x,
             mask=ok[:, None] & (cols < K)[None, :])
