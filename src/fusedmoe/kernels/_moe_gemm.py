"""Grouped expert GEMMs of the Triton MoE backend (private; launched by
``fusedmoe.backends.triton_moe``).

Both kernels walk the expert-sorted, BLOCK_M-padded slot list of ``_align.py``: program
(pid_m, pid_n) owns rows ``sorted_ids[pid_m*BM : (pid_m+1)*BM]`` (all of one local expert
``e = block_expert[pid_m]``) and columns ``[pid_n*BN, (pid_n+1)*BN)``. Programs whose block starts at
or past ``num_post_padded`` exit at once, so the grid (sized from shapes only) may over-cover.

Semantics, per slot x = t*K + k of local expert e (docs/semantics.md 1, 4, 5.3-5.8, 6, 7):

    GEMM1   acc[x, n] = sum_k deq(A)[t, k] * deq(W13)[e, n, k]          (fp32)
            (* topk_w[x] if WEIGHT_ON_INPUT)  (+ b13[e, n])
            h = act(acc)  (gated: gate = rows [0, N), up = rows [N, 2N) of W13; N = I_pad)
            inter[x, n] = round_to_hidden_dtype(h), then optionally quantized here (OUT_Q)
    GEMM2   y[x, n] = (sum_k deq(inter)[x, k] * deq(W2)[e, n, k] + b2[e, n]) * topk_w[x]
                      (no topk_w if WEIGHT_ON_INPUT); stored in the output dtype

Quantized operand pairs (QUANT), all fp32 dequant scales (x ~= q * s):

    0 NONE   16-bit (or fp32) A and W, no scales
    1 TENSOR A: one scale (pointer to a scalar); W: one scale per expert [E]
    2 ROW    A: one scale per row of A (token for GEMM1, slot for GEMM2); W: per output row [E, N]
    3 BLOCK  A: 1x128 groups [rows, K/128]; W: 128x128 tiles [E, N/128, K/128]; BLOCK_K == 128 and
             the partial product of every K-block is scaled in fp32 before it is accumulated
    4 MICRO  block-scaled family (NVFP4 / MXFP4 / MXFP8 weights): A and W are each described by an
             operand format (A_FMT, W_FMT: ``_blockscaled.F_*``) and read in their storage format:
             A: PLAIN (hidden dtype), FP8 per tensor, NVFP4 ([rows, K/2] + e4m3 [rows, K/16]) or
             MXFP8 ([rows, K] + UE8M0 [rows, K/32]); W: NVFP4, MXFP4, MXFP8 in the linear layout
             of ``QuantizedTensor`` ([E, N, K/2] packed + [E, N, K/G] scales; values K
             contiguous, scales K contiguous or K-major: stride_wsk).
             Not MXDOT: both tiles dequantized in registers to CD (``_blockscaled._load_tile``,
             block scales inside the tile, both in the KPERM K order; a gated GEMM1 with JOIN
             reads gate and up rows as one [2 BLOCK_N, BLOCK_K] tile), per-tensor factors in the
             epilogue:
                 A FP8 (per tensor)   acc *= a_scale
                 A NVFP4              acc /= g_a          (a_gs_ptr, fp32 [1])
                 W NVFP4              acc /= g_w[e]       (w_gs_ptr, fp32 [E])
             MXDOT (MX weights x MXFP8 activations, decode tiles): per 32-wide K block an E4M3 MMA,
             its partial sum times 2^ea[row] * 2^ew[col] (``_blockscaled._load_mx_block``; as
             BLOCK scaling with 32-blocks). BLOCK_K is a multiple of every scale block (16 / 32).

Either GEMM may split its K loop over SPLIT_K programs per tile (decode): fp32 partial sums in a
workspace, the last program to arrive (per-tile counter) adds them in split order and runs the
epilogue -- deterministic. USE_GDC (programmatic dependent launch): every program waits for
the prior grid before its first load and lets the next grid launch after its main loop.

FUSE_COMBINE (GEMM2 at decode): the top-k combine runs in GEMM2 instead of a fifth launch. Every
slot's program stores its row of y, then arrives at the (token, column tile) counter; the last of the
token's TOP_K arrivals sums the token's TOP_K rows of y in k order in fp32 and stores the output row
-- the combine kernel's arithmetic, the same bits. Non-local slots are laid out as the extra group
E_LOC, whose programs store zero rows and arrive too, so every token gets TOP_K arrivals.

PERSISTENT (GEMM2 at prefill, ``KernelConfig.persistent``): a fixed grid of programs walks the tiles
in one flattened (tile, K-block) loop, so the next tile's loads overlap this one's epilogue; each
tile's arithmetic is unchanged (same bits for any grid).

N_TILES > 1 (GEMM2 of short K, ``KernelConfig.n_tiles``): a program loads its activation tile -- the
whole K in one BLOCK_K (16-bit, FP8 per tensor / row) or in up to two 128-wide blocks (FP8 128 x 128
blocks) -- once and computes N_TILES column tiles with it.

Pointer offsets that can exceed 2**31 (expert * stride, row * stride) are computed in int64.
"""

import triton
import triton.language as tl

from ._blockscaled import (F_FP8, F_MXFP4, F_MXFP8, F_NVFP4, MX_FOLD, _NIB_ACC_FACTOR, _load_mx_block, _load_tile,
                           _dot_order_steps, _e4m3_f32, _nvfp4_quant_tile, _w_rows)
from ._quant import _div_by_scale, _div_rn, _ue8m0_ceil, _ue8m0_multiplier

# activation codes (launcher maps fusedmoe.Activation to these)
ACT_SWIGLU = tl.constexpr(0)
ACT_GEGLU = tl.constexpr(1)
ACT_SWIGLU_OAI = tl.constexpr(2)
ACT_RELU2 = tl.constexpr(3)
ACT_GELU = tl.constexpr(4)
ACT_SILU = tl.constexpr(5)
ACT_RELU = tl.constexpr(6)
ACT_IDENTITY = tl.constexpr(7)

# quantized operand pairs
Q_NONE = tl.constexpr(0)
Q_TENSOR = tl.constexpr(1)
Q_ROW = tl.constexpr(2)
Q_BLOCK = tl.constexpr(3)
Q_MICRO = tl.constexpr(4)

# GEMM1 output (intermediate) modes
OUT_PLAIN = tl.constexpr(0)  # hidden dtype
OUT_FP8_STATIC = tl.constexpr(1)  # e4m3(clamp(h / a2, +-448)), a2 a static per-tensor scale
OUT_FP8_BLOCK = tl.constexpr(2)  # 1x128 groups: s = max(amax, 1e-10) / 448, e4m3(clamp(h / s))
OUT_MXFP8 = tl.constexpr(3)  # 1x32 groups: e = ue8m0_ceil(amax / 448), e4m3(clamp(h * 2^(127-e)))
OUT_NVFP4 = tl.constexpr(4)  # 1x16 blocks with the static global scale g (out_qscale_ptr): packed
#                             E2M1 bytes [rows, N/2] + E4M3 scale bytes (uint8) [rows, N/16]
OUT_PLAIN_AMAX = tl.constexpr(5)  # hidden dtype, and max |h| over the stored values into an int32 [1]
#                                   (the amax bits a dynamic per-tensor quantization of the intermediate
#                                   starts from: _atomic_amax; Triton: out_scale_ptr, Gluon: out_qscale_ptr)

FP8_MAX = tl.constexpr(448.0)


@triton.jit
def _tile_ids(pid, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """Grouped ordering: GROUP_M consecutive M-blocks share each N sweep (L2 reuse)."""
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def _block_slots(sorted_ids_ptr, pid_m, num_slots, BLOCK_M: tl.constexpr):
    """The slots of M-block ``pid_m`` of the aligned slot list and which rows are real.

    Padding rows (the sentinel ``num_slots``) repeat the block's first slot, so every load reads
    written data; their results are never stored."""
    slots = tl.load(sorted_ids_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
    row_ok = slots < num_slots
    return tl.where(row_ok, slots, tl.min(slots, axis=0)), row_ok


@triton.jit
def _micro_weight_ptrs(w_ptr, w_scale_ptr, e64, stride_we, stride_wse, offs_n, n_ok,
                       EVEN_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Q_MICRO operand bases of expert ``e64``: (all-rows mask of the activation tile, int64 weight
    rows, weight base, weight-scale base, weight-row mask)."""
    if EVEN_N:
        w_ok = tl.full([BLOCK_N], 1, tl.int1)
    else:
        w_ok = n_ok
    return (tl.full([BLOCK_M], 1, tl.int1), offs_n.to(tl.int64), w_ptr + e64 * stride_we,
            w_scale_ptr + e64 * stride_wse, w_ok)


@triton.jit
def _load_a(a_ptrs, k_ok, EVEN_K: tl.constexpr):
    """A [BLOCK_M, BLOCK_K] activation tile of the 16-bit / FP8 paths (zeros past K when not EVEN_K)."""
    if EVEN_K:
        return tl.load(a_ptrs)
    else:
        return tl.load(a_ptrs, mask=k_ok[None, :], other=0.0)


@triton.jit
def _load_w(w_ptrs, n_ok, k_ok, EVEN_K: tl.constexpr, EVEN_N: tl.constexpr):
    """A [BLOCK_N, BLOCK_K] weight tile of the 16-bit / FP8 paths (zeros past N / K unless EVEN_*)."""
    if EVEN_K:
        if EVEN_N:
            return tl.load(w_ptrs)
        else:
            return tl.load(w_ptrs, mask=n_ok[:, None], other=0.0)
    else:
        return tl.load(w_ptrs, mask=n_ok[:, None] & k_ok[None, :], other=0.0)


@triton.jit
def _mma(a, w, acc, SWAP_AB: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr, FAST_ACC: tl.constexpr):
    """acc + a @ w^T for a [BM, BK], w [BN, BK]; acc is [BN, BM] (= (a @ w^T)^T) when SWAP_AB.

    SWAP_AB puts the weight tile on the MMA's M side: on Hopper wgmma needs M >= 64, so small
    token blocks (BM = 16/32) run as W @ A^T. UPCAST (interpreter, mixed 16/32-bit operands)
    multiplies in fp32. FP8 x FP8: Hopper's tensor cores accumulate FP8 products in reduced
    precision, so by default the partial sum of every BLOCK_K slice is added to the fp32
    accumulator with a regular fp32 add (``max_num_imprecise_acc = BLOCK_K``: 128 at prefill,
    DeepGEMM's promotion interval; 256 in the FP8 configs of one or two tokens and in the GEMM2
    that holds a K <= 256 activation tile, ``KernelConfig.n_tiles`` -- promoting every 128 there
    made one-token FP8 layers 1-11 % slower on the H200; Triton's sm90 default never promotes, which
    doubles the error against the reference at K = 2048). FAST_ACC (``KernelConfig.fp8_fast_accum``)
    accumulates in the tensor cores throughout, as SGLang's and vLLM's Triton MoE do: no second
    accumulator, so 128 x 256 FP8 tiles fit in registers (sm_90 compile: 0 spills instead of ~270).
    Other dtypes ignore it.
    """
    if a.dtype == tl.uint8:  # E4M3 operands as bytes (below sm_89): bf16 holds them exactly, fp32 sums the products
        a = _e4m3_f32(a).to(tl.bfloat16)
    if w.dtype == tl.uint8:
        w = _e4m3_f32(w).to(tl.bfloat16)
    if UPCAST:
        a = a.to(tl.float32)
        w = w.to(tl.float32)
    BK: tl.constexpr = a.shape[1]
    IMPRECISE: tl.constexpr = BK if a.dtype.is_fp8() else 0
    if FAST_ACC and a.dtype.is_fp8():
        if SWAP_AB:
            return tl.dot(w, tl.trans(a), acc=acc, input_precision=PRECISION)
        else:
            return tl.dot(a, tl.trans(w), acc=acc, input_precision=PRECISION)
    if SWAP_AB:
        return tl.dot(w, tl.trans(a), acc=acc, input_precision=PRECISION, max_num_imprecise_acc=IMPRECISE)
    else:
        return tl.dot(a, tl.trans(w), acc=acc, input_precision=PRECISION, max_num_imprecise_acc=IMPRECISE)


@triton.jit
def _scale_block(part, a_s, w_s, SWAP_AB: tl.constexpr, W1: tl.constexpr = False):
    """Dequantize one K-block partial product: part * a_s[row] * w_s[col] (layout-aware). ``W1``: ``w_s`` is one
    scale for all the tile's weight rows (a scalar: they lie in one 128-row scale block) -- the same factors."""
    if W1:
        if SWAP_AB:
            return part * (w_s * a_s[None, :])
        else:
            return part * (a_s[:, None] * w_s)
    if SWAP_AB:
        return part * (w_s[:, None] * a_s[None, :])
    else:
        return part * (a_s[:, None] * w_s[None, :])


@triton.jit
def _kblock_mma(a, w, acc, a_s, w_s, BLOCK_SCALED: tl.constexpr, SWAP_AB: tl.constexpr, UPCAST: tl.constexpr,
                PRECISION: tl.constexpr, FAST_ACC: tl.constexpr, W1: tl.constexpr = False):
    """``acc`` plus one K-block's product of the 16-bit / FP8 paths: BLOCK_SCALED (FP8 128 x 128
    blocks) the block's partial product in a fresh accumulator times ``a_s[row] * w_s[col]`` (``W1``: one
    ``w_s`` for the tile, :func:`_block_w_ptrs`), added in fp32; otherwise accumulated by the MMA itself (``_mma``;
    a_s / w_s unused)."""
    if BLOCK_SCALED:
        return acc + _scale_block(_mma(a, w, tl.zeros_like(acc), SWAP_AB, UPCAST, PRECISION, False), a_s, w_s,
                                  SWAP_AB, W1)
    else:
        return _mma(a, w, acc, SWAP_AB, UPCAST, PRECISION, FAST_ACC)


@triton.jit
def _block_w_ptrs(w_scale_ptr, e64, stride_wse, stride_wsn, row0, rows, W1: tl.constexpr):
    """FP8 128 x 128 blocks: the pointers to the weight scales of a tile's weight rows ``rows`` (K blocks at stride
    1). ``W1`` (``BLOCK_N`` <= 128, a power of two, the rows from ``row0``, a multiple of it -- for a gated GEMM1's
    up rows from row N, N a multiple of ``BLOCK_N``, which the layer's check of whole 128-row blocks makes so): they
    lie in one scale block, so one scalar pointer -- one load a K block instead of a ``BLOCK_N``-vector and one
    multiply a row instead of one a product (sm_90 SASS of the 64 x 128 gated prefill tile: 64 FMUL and 30 LDG a
    K block fewer); otherwise a pointer a row."""
    if W1:
        ptrs = w_scale_ptr + e64 * stride_wse + (row0 // 128) * stride_wsn
    else:
        ptrs = w_scale_ptr + e64 * stride_wse + (rows // 128) * stride_wsn
    return ptrs


@triton.jit
def _block_w_load(ptrs, kb, n_ok, W1: tl.constexpr):
    """K block ``kb``'s weight scales from :func:`_block_w_ptrs`' pointers: one scalar (``W1``), or the rows' vector
    (rows past N: 0)."""
    if W1:
        w_s = tl.load(ptrs + kb)
    else:
        w_s = tl.load(ptrs + kb, mask=n_ok, other=0.0)
    return w_s


@triton.jit
def _atomic_amax(amax_ptr, v, mask):
    """max |v| over the ``mask``-ed 2-D tile into the int32 at ``amax_ptr`` by ``atomic_max`` on the
    float's bits (non-negative floats order as ints): the value ``_quant._absmax_kernel`` would
    compute over the stored tensor -- masked elements count as 0 -- and as deterministic (max is
    order independent)."""
    t = tl.where(mask, tl.abs(v.to(tl.float32)), 0.0)
    m = tl.max(tl.reshape(t, [t.shape[0] * t.shape[1]]), axis=0)
    tl.atomic_max(amax_ptr, m.to(tl.int32, bitcast=True))


@triton.jit
def _micro_global_scales(acc, a_scale_ptr, a_gs_ptr, w_gs_ptr, e64, A_FMT: tl.constexpr, W_FMT: tl.constexpr,
                         FAST_CVT: tl.constexpr):
    """The per-tensor factors of block-scaled operands (the block scales were applied to the
    tiles): A FP8 per tensor ``* a_scale``, A NVFP4 ``/ g_a``, W NVFP4 ``/ g_w[e]`` (IEEE
    divisions, as the reference's dequantization ``e2m1 * s / g``); before them the 2^16 that each
    NVFP4 tile of the fast E2M1 converter (FAST_CVT) is short of (exact)."""
    if FAST_CVT and A_FMT == F_NVFP4:
        acc = acc * _NIB_ACC_FACTOR
    if FAST_CVT and W_FMT == F_NVFP4:
        acc = acc * _NIB_ACC_FACTOR
    if FAST_CVT == MX_FOLD and W_FMT == F_MXFP4:
        acc = acc * _NIB_ACC_FACTOR
    if A_FMT == F_FP8:
        acc = acc * tl.load(a_scale_ptr)
    if A_FMT == F_NVFP4:
        acc = _div_rn(acc, tl.load(a_gs_ptr))
    if W_FMT == F_NVFP4:
        acc = _div_rn(acc, tl.load(w_gs_ptr + e64))
    return acc


@triton.jit
def _split_k_range(K, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr):
    """The K-blocks ``[k_lo, k_hi)`` of this program: all of them, or the ``program_id(1)``-th
    contiguous share of ``SPLIT_K``."""
    if SPLIT_K == 1:
        return 0, tl.cdiv(K, BLOCK_K)
    k_per = tl.cdiv(tl.cdiv(K, BLOCK_K), SPLIT_K)
    k_lo = tl.program_id(1) * k_per
    return k_lo, tl.minimum(k_lo + k_per, tl.cdiv(K, BLOCK_K))


@triton.jit
def _tail_owner(k_lo, k_hi, K, BLOCK_K: tl.constexpr, K_TAIL: tl.constexpr):
    """Whether this program's K-blocks ``[k_lo, k_hi)`` (of the ``(K - K_TAIL) / BLOCK_K`` full ones) end with
    the last full block: that program also runs the K_TAIL-wide step (one per tile whatever SPLIT_K; a split
    left without blocks never does)."""
    return (k_lo < k_hi) & (k_hi * BLOCK_K == K - K_TAIL)


@triton.jit
def _micro_step(acc, acc_u, a_ptr, a_rows, a_scale_ptr, as_rows, a_all, w_e, rows, rows_u, ws_e, stride_wn, stride_wsn,
                stride_wsk, w_ok, ki, K, A_FMT: tl.constexpr, W_FMT: tl.constexpr, BLOCK_M: tl.constexpr,
                BR: tl.constexpr, BK: tl.constexpr, EVEN_K: tl.constexpr, CD: tl.constexpr, FAST_CVT: tl.constexpr,
                KPERM: tl.constexpr, W_TK: tl.constexpr, W_SWZ: tl.constexpr, WU: tl.constexpr,
                SWAP_AB: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr, FAST_ACC: tl.constexpr,
                TWO: tl.constexpr, A_PERMUTED: tl.constexpr = False, W_SRUN: tl.constexpr = 0):
    """One K step of the block-scaled (dequantize-in-registers) family: the ``ki``-th [BLOCK_M, BK] activation tile
    times the [BR, BK] weight tile of rows ``rows`` into ``acc``, and with ``TWO`` (a gated GEMM1 whose gate and up
    tiles are multiplied in turn) times the tile of rows ``rows_u`` into ``acc_u`` too. Every K loop of the family
    runs it, with BLOCK_K for the full steps and K_TAIL for a tail step (``_tail_owner``). ``A_PERMUTED``: the
    activations are stored in the dot order of these steps (``_blockscaled.to_dot_order`` /
    ``_dot_order_steps``), loaded as they lie. ``W_SRUN``: the weights' block scales read in aligned runs of that
    many bytes a row (``_blockscaled._tile_scales``; full steps only)."""
    a = _load_tile(a_ptr, a_rows, a_scale_ptr, as_rows, 1, ki, K, a_all, A_FMT, BLOCK_M, BK, EVEN_K, CD, FAST_CVT,
                   0 if A_PERMUTED else KPERM)
    w = _load_tile(w_e, _w_rows(rows, stride_wn, W_TK, WU), ws_e, rows * stride_wsn, stride_wsk, ki, K, w_ok, W_FMT,
                   BR, BK, EVEN_K, CD, FAST_CVT, KPERM, W_TK, W_SWZ, W_SRUN)
    acc = _mma(a, w, acc, SWAP_AB, UPCAST, PRECISION, FAST_ACC)
    if TWO:
        wu = _load_tile(w_e, _w_rows(rows_u, stride_wn, W_TK, WU), ws_e, rows_u * stride_wsn, stride_wsk, ki, K, w_ok,
                        W_FMT, BR, BK, EVEN_K, CD, FAST_CVT, KPERM, W_TK, W_SWZ, W_SRUN)
        acc_u = _mma(a, wu, acc_u, SWAP_AB, UPCAST, PRECISION, FAST_ACC)
    return acc, acc_u


@triton.jit
def _split_k_tile_offsets(BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    return tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]


@triton.jit
def _split_k_is_last(cnt_ptr, tile, SPLIT_K: tl.constexpr):
    """After this program stored its partial sums: arrive at the tile's counter (release: every
    thread's stores first; acquire: the others' partials are visible to the winner). True for the
    last of the SPLIT_K programs, which also resets the counter for the next call."""
    tl.debug_barrier()  # every thread's partial is stored before the (release) arrival
    last = tl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel", scope="gpu") == SPLIT_K - 1
    if last:
        tl.atomic_xchg(cnt_ptr + tile, 0, sem="relaxed", scope="gpu")  # ready for the next call
    return last


@triton.jit
def _split_k_sum(part_ptr, part_stride, SPLIT_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Sum of the SPLIT_K partials ``part_ptr + s * part_stride`` ([BLOCK_M, BLOCK_N] fp32 each),
    in split order: the same bits whichever program arrived last."""
    offs = _split_k_tile_offsets(BLOCK_M, BLOCK_N)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for sk in tl.static_range(SPLIT_K):
        # .cg: read at L2, where the other programs' stores are (never a stale L1 line)
        acc += tl.load(part_ptr + sk * part_stride + offs, cache_modifier=".cg")
    return acc


@triton.jit
def _combine_arrive(y_ptr, stride_ym, slot64, row_ok, offs_n, n_ok, pid_n, num_pid_n, cnt_ptr, out_ptr, stride_om,
                    TOP_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """FUSE_COMBINE: after this program stored its rows of y (``slot64``, columns ``offs_n``),
    arrive at each row's (token, column tile) counter; for the tokens whose last slot this was,
    sum their TOP_K rows of y in k order and store the output rows (counter reset for the next
    call). Release / acquire as in ``_split_k_is_last``, per row."""
    tl.debug_barrier()  # every thread's y stores precede the (release) arrivals
    tok = slot64 // TOP_K
    cidx = tok * num_pid_n + pid_n
    old = tl.atomic_add(cnt_ptr + cidx, tl.full([BLOCK_M], 1, tl.int32), mask=row_ok, sem="acq_rel", scope="gpu")
    last = row_ok & (old == TOP_K - 1)
    tl.atomic_xchg(cnt_ptr + cidx, tl.zeros([BLOCK_M], dtype=tl.int32), mask=last, sem="relaxed", scope="gpu")
    tl.debug_barrier()  # the acquiring threads' view reaches the threads that load below
    mask = last[:, None] & n_ok[None, :]
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k in tl.static_range(TOP_K):
        # .cg: the other programs' rows are at L2 (never a stale L1 line)
        yk = tl.load(y_ptr + (tok * TOP_K + k)[:, None] * stride_ym + offs_n[None, :], mask=mask, other=0.0,
                     cache_modifier=".cg")
        acc += yk.to(tl.float32)
    tl.store(out_ptr + tok[:, None] * stride_om + offs_n[None, :], acc.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _activation(g, u, ACT: tl.constexpr, alpha, beta, limit):
    """fp32 activation; ``u`` (the up half) is used by gated activations only."""
    if ACT == ACT_SWIGLU:
        return g * tl.sigmoid(g) * u
    elif ACT == ACT_GEGLU:
        return 0.5 * g * (1.0 + tl.erf(g * 0.7071067811865476)) * u
    elif ACT == ACT_SWIGLU_OAI:
        gc = tl.minimum(g, limit)
        uc = tl.minimum(tl.maximum(u, -limit), limit)
        return gc * tl.sigmoid(alpha * gc) * (uc + beta)
    elif ACT == ACT_RELU2:
        r = tl.maximum(g, 0.0)
        return r * r
    elif ACT == ACT_GELU:
        return 0.5 * g * (1.0 + tl.erf(g * 0.7071067811865476))
    elif ACT == ACT_SILU:
        return g * tl.sigmoid(g)
    elif ACT == ACT_RELU:
        return tl.maximum(g, 0.0)
    else:  # ACT_IDENTITY
        return g


@triton.jit
def _gemm1_epilogue(acc_g, acc_u, e64, tok64, slots, offs_n, n_ok, N, a_scale_ptr, w_scale_ptr, bias_ptr, topk_w_ptr,
                    stride_asm, stride_wse, stride_wsn, stride_be, QUANT: tl.constexpr, GATED: tl.constexpr,
                    WEIGHT_ON_INPUT: tl.constexpr, HAS_BIAS: tl.constexpr):
    """GEMM1's fp32 gate / up accumulators (``acc_u`` unused unless GATED) times the FP8 per-tensor
    or per-row dequant scales (other formats: the caller's), the routing weight on input, plus the
    bias (also the warp-specialized kernel's epilogue, ``_ws_gemm``)."""
    if QUANT == Q_TENSOR:
        s = tl.load(a_scale_ptr) * tl.load(w_scale_ptr + e64 * stride_wse)
        acc_g = acc_g * s
        if GATED:
            acc_u = acc_u * s
    elif QUANT == Q_ROW:
        a_s = tl.load(a_scale_ptr + tok64 * stride_asm)
        ws_g = tl.load(w_scale_ptr + e64 * stride_wse + offs_n * stride_wsn, mask=n_ok, other=0.0)
        acc_g = acc_g * (a_s[:, None] * ws_g[None, :])
        if GATED:
            ws_u = tl.load(w_scale_ptr + e64 * stride_wse + (N + offs_n) * stride_wsn, mask=n_ok, other=0.0)
            acc_u = acc_u * (a_s[:, None] * ws_u[None, :])
    if WEIGHT_ON_INPUT:
        tw = tl.load(topk_w_ptr + slots).to(tl.float32)
        acc_g = acc_g * tw[:, None]
        if GATED:
            acc_u = acc_u * tw[:, None]
    if HAS_BIAS:
        bg = tl.load(bias_ptr + e64 * stride_be + offs_n, mask=n_ok, other=0.0)
        acc_g = acc_g + bg[None, :]
        if GATED:
            bu = tl.load(bias_ptr + e64 * stride_be + N + offs_n, mask=n_ok, other=0.0)
            acc_u = acc_u + bu[None, :]
    return acc_g, acc_u


@triton.jit
def _gemm1_kernel(
    a_ptr,  # [T, H] hidden (16-bit / fp32) or its quantization (e4m3; NVFP4: uint8 [T, H/2])
    a_scale_ptr,  # TENSOR: [] ; ROW: [T] ; BLOCK: [T, H/128] ; MICRO: see the module docstring ; NONE: unused
    w_ptr,  # [E, M, H] w13 (M = 2N gated: gate rows [0, N), up rows [N, 2N); M = N otherwise; FP4: [E, M, H/2])
    w_scale_ptr,  # TENSOR: [E] ; ROW: [E, M] ; BLOCK: [E, M/128, H/128] ; MICRO: [E, M, H/G] ; NONE: unused
    bias_ptr,  # [E, M] fp32 (HAS_BIAS)
    topk_w_ptr,  # [T*K] routing weights (WEIGHT_ON_INPUT)
    sorted_ids_ptr,  # [P_max] int32
    block_expert_ptr,  # [P_max / BLOCK_M] int32
    num_post_padded_ptr,  # [1] int32
    out_ptr,  # [T*K, N] slot-indexed intermediate: hidden dtype, e4m3, or fp32 (Q_AS_FP32);
    #           OUT_NVFP4: uint8 [T*K, N/2]
    out_scale_ptr,  # OUT_FP8_BLOCK: [T*K, N/128] fp32; OUT_MXFP8: uint8 [T*K, N/32]; OUT_NVFP4: uint8 [T*K, N/16]
    out_qscale_ptr,  # OUT_FP8_STATIC: [] fp32 (a2); OUT_NVFP4: [1] fp32 global quant scale g2 = 1/a2
    a_gs_ptr,  # MICRO, A_FMT NVFP4: [1] fp32 global scale of A
    w_gs_ptr,  # MICRO, W_FMT NVFP4: [E] fp32 global scales of W
    ws_ptr,  # SPLIT_K > 1: fp32 [tiles, SPLIT_K, (2 if GATED else 1) * BLOCK_M * BLOCK_N] partial sums
    cnt_ptr,  # SPLIT_K > 1: int32 [tiles] arrival counters, zero on entry, left zero
    N,  # I_pad: columns of the intermediate
    K,  # H
    num_slots,  # T*K (= the sentinel in sorted_ids)
    num_blocks_m,  # P_max / BLOCK_M
    stride_am,
    stride_we,
    stride_wn,  # weight rows; FP4 values stored tiled (W_TK > 0): the 64-row tiles' stride
    stride_asm,
    stride_wse,
    stride_wsn,
    stride_wsk,  # MICRO: weight block scales' stride along K (1 row-major, M or N K-major)
    stride_be,
    stride_om,
    stride_osm,
    act_alpha,
    act_beta,
    act_limit,
    TOP_K: tl.constexpr,
    E_LOC: tl.constexpr,
    ACT: tl.constexpr,
    GATED: tl.constexpr,
    QUANT: tl.constexpr,
    A_FMT: tl.constexpr,  # MICRO only: operand formats (_blockscaled.F_*)
    W_FMT: tl.constexpr,
    CD: tl.constexpr,  # MICRO only: dtype the tiles are dequantized to (the MMA operand dtype)
    FAST_CVT: tl.constexpr,  # MICRO, CUDA: inline-PTX conversions (_blockscaled._e2m1x4_bf16_nib)
    KPERM: tl.constexpr,  # MICRO: both operands in the MMA-friendly K order (_blockscaled._dot_order)
    MXDOT: tl.constexpr,  # MICRO, MX weights x MXFP8 activations: E4M3 MMA per 32-block, scaled partial sums
    OUT_Q: tl.constexpr,
    ROUND_DTYPE: tl.constexpr,  # dtype of hidden: the activation output is rounded to it
    Q_AS_FP32: tl.constexpr,  # interpreter: store the scaled, clamped fp32 value (host casts)
    HAS_BIAS: tl.constexpr,
    WEIGHT_ON_INPUT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    SWAP_AB: tl.constexpr,
    EVEN_K: tl.constexpr,
    EVEN_N: tl.constexpr,
    UPCAST: tl.constexpr,
    PRECISION: tl.constexpr,
    FAST_ACC: tl.constexpr,
    SPLIT_K: tl.constexpr,
    USE_GDC: tl.constexpr,  # launched with programmatic dependent launch (Hopper+): wait for the prior grid first
    JOIN: tl.constexpr,  # MICRO, GATED, not MXDOT: gate and up rows as one weight tile (kernel_configs.join_gate_up)
    RCP_DIV: tl.constexpr = False,  # FP8 static / block re-quantization by reciprocals (_div_by_rcp; same bits)
    W_TK: tl.constexpr = 0,  # MICRO, FP4 weights: 0 linear values, else the "tiled" layout's piece width (_w_rows)
    W_SWZ: tl.constexpr = False,  # MICRO, FP4 weights: values in the "swizzled" layout (bit-swizzled 16-bit words)
    K_TAIL: tl.constexpr = 0,  # MICRO, not MXDOT: K = n BLOCK_K + K_TAIL, the last K_TAIL-wide step after the loop
    A_PERMUTED: tl.constexpr = False,  # MICRO, 16-bit A: hidden stored in the dot order of the K steps (no permute)
    OUT_DOT_BK: tl.constexpr = 0,  # OUT_PLAIN: > 0 stores the intermediate in the dot order of GEMM2's OUT_DOT_BK-wide
    #                                  K steps (_blockscaled._dot_order_steps; BLOCK_N a multiple of OUT_DOT_BK)
    W_SRUN: tl.constexpr = 0,  # MICRO, not MXDOT: weight block scales read in aligned runs of W_SRUN bytes a row
    #                            (_blockscaled._tile_scales; launcher: triton_moe._scale_run)
    BLOCK_W1: tl.constexpr = True,  # BLOCK: tiles of <= 128 weight rows read one weight scale (_block_w_ptrs)
):
    """GEMM1 + bias + activation + intermediate rounding/quantization.
    grid = (num_blocks_m * cdiv(N, BLOCK_N), SPLIT_K).

    SPLIT_K > 1 (decode: too few tiles to fill the GPU): program (tile, s) accumulates the s-th
    contiguous range of K-blocks, stores its fp32 accumulators in the workspace and increments the
    tile's counter; the last to arrive sums the SPLIT_K partials in split order (deterministic:
    the same bits whichever program arrives last), resets the counter and runs the epilogue.

    K_TAIL > 0 (block-scaled weights, not MXDOT; ``EVEN_K``): K is ``n * BLOCK_K + K_TAIL`` with n >= 1, e.g.
    gpt-oss's K = 2880 = 22 * 128 + 64. The loop runs the n full K-blocks without K masks, and the program whose
    share ends at the n-th block adds one K_TAIL-wide step after it (``_tail_owner``): the 128-wide K step of the
    decode main loop needs 14 % fewer instructions per weight value than the 64-wide one (sm_90 SASS, gated
    MXFP4 GEMM1: 348 per 128 values against 202 per 64), and a masked K tail in every step costs more (425)."""
    if USE_GDC:
        tl.extra.cuda.gdc_wait()  # before the first load: every input may come from the prior grid
    pid = tl.program_id(0)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m, pid_n = _tile_ids(pid, num_blocks_m, num_pid_n, GROUP_M)
    if pid_m * BLOCK_M >= tl.load(num_post_padded_ptr):
        return
    e = tl.load(block_expert_ptr + pid_m)
    if e >= E_LOC:  # the non-local group (K = 1 layouts) has no GEMM1 work
        return
    e64 = e.to(tl.int64)

    slots, row_ok = _block_slots(sorted_ids_ptr, pid_m, num_slots, BLOCK_M)
    tok64 = (slots // TOP_K).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < N
    offs_k = tl.arange(0, BLOCK_K)
    k_lo, k_hi = _split_k_range(K - K_TAIL, BLOCK_K, SPLIT_K)

    a_ptrs = a_ptr + tok64[:, None] * stride_am + (k_lo * BLOCK_K + offs_k)[None, :]
    wg_ptrs = w_ptr + e64 * stride_we + offs_n[:, None].to(tl.int64) * stride_wn + (k_lo * BLOCK_K + offs_k)[None, :]
    wu_ptrs = wg_ptrs + N * stride_wn

    if SWAP_AB:
        acc_g = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    else:
        acc_g = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    acc_u = tl.zeros_like(acc_g)

    W1: tl.constexpr = QUANT == Q_BLOCK and BLOCK_N <= 128 and BLOCK_W1  # one weight scale a tile (_block_w_ptrs)
    if QUANT == Q_BLOCK:
        as_ptrs = a_scale_ptr + tok64 * stride_asm
        wsg_ptrs = _block_w_ptrs(w_scale_ptr, e64, stride_wse, stride_wsn, pid_n * BLOCK_N, offs_n, W1)
        wsu_ptrs = _block_w_ptrs(w_scale_ptr, e64, stride_wse, stride_wsn, N + pid_n * BLOCK_N, N + offs_n, W1)
    if QUANT == Q_MICRO:
        a_rows = tok64 * stride_am
        as_rows = tok64 * stride_asm
        # logical columns per storage element of the values (_w_rows): int16 words of the nibble view of FAST_CVT, or bytes
        WU: tl.constexpr = 4 if FAST_CVT and CD == tl.bfloat16 else 2
        a_all, n64, w_e, ws_e, w_ok = _micro_weight_ptrs(w_ptr, w_scale_ptr, e64, stride_we, stride_wse, offs_n, n_ok,
                                                         EVEN_N, BLOCK_M, BLOCK_N)

    if QUANT == Q_MICRO and MXDOT:
        # MX weights x MXFP8 activations: E4M3 x E4M3 MMA per 32-wide K block, the partial sum
        # scaled by 2^ea * 2^ew in fp32 (no dequantization of either operand)
        for ki in range(k_lo, k_hi):
            for j in tl.static_range(BLOCK_K // 32):
                kb = ki * (BLOCK_K // 32) + j
                a, a_s = _load_mx_block(a_ptr, a_rows, a_scale_ptr, as_rows, 1, kb, K, a_all, F_MXFP8, BLOCK_M, EVEN_K,
                                        FAST_CVT)
                wg, wg_s = _load_mx_block(w_e, _w_rows(n64, stride_wn, W_TK, 2), ws_e, n64 * stride_wsn,
                                          stride_wsk, kb, K, w_ok, W_FMT, BLOCK_N, EVEN_K, FAST_CVT, W_TK, W_SWZ)
                acc_g += _scale_block(_mma(a, wg, tl.zeros_like(acc_g), SWAP_AB, UPCAST, PRECISION, False), a_s, wg_s,
                                      SWAP_AB)
                if GATED:
                    wu, wu_s = _load_mx_block(w_e, _w_rows(N + n64, stride_wn, W_TK, 2), ws_e,
                                              (N + n64) * stride_wsn, stride_wsk, kb, K, w_ok, W_FMT, BLOCK_N, EVEN_K,
                                              FAST_CVT, W_TK, W_SWZ)
                    acc_u += _scale_block(_mma(a, wu, tl.zeros_like(acc_u), SWAP_AB, UPCAST, PRECISION, False), a_s, wu_s,
                                          SWAP_AB)
    elif QUANT == Q_MICRO and GATED and JOIN:
        # block-scaled family, gated, JOIN: the gate rows n and the up rows N + n as one
        # [2 BLOCK_N, BLOCK_K] weight tile -- one MMA chain and one wait per K step instead of
        # two, and twice the block-scale bytes per load (at >= 4 bytes per thread Triton's
        # pipeline prefetches them; below, every step waits for a plain load). Rows stay two
        # contiguous runs of BLOCK_N (no division: Triton's axis analysis keeps their contiguity).
        r2 = tl.arange(0, 2 * BLOCK_N)
        n2 = pid_n * BLOCK_N + r2 + (r2 >= BLOCK_N).to(tl.int32) * (N - BLOCK_N)
        if EVEN_N:
            w2_ok = tl.full([2 * BLOCK_N], 1, tl.int1)
        else:
            w2_ok = n2 - (r2 >= BLOCK_N).to(tl.int32) * N < N
        n2 = n2.to(tl.int64)
        if SWAP_AB:
            acc = tl.zeros([2 * BLOCK_N, BLOCK_M], dtype=tl.float32)
        else:
            acc = tl.zeros([BLOCK_M, 2 * BLOCK_N], dtype=tl.float32)
        for ki in range(k_lo, k_hi):
            acc, _ = _micro_step(acc, acc, a_ptr, a_rows, a_scale_ptr, as_rows, a_all, w_e, n2, n2, ws_e, stride_wn,
                                 stride_wsn, stride_wsk, w2_ok, ki, K, A_FMT, W_FMT, BLOCK_M, 2 * BLOCK_N, BLOCK_K,
                                 EVEN_K, CD, FAST_CVT, KPERM, W_TK, W_SWZ, WU, SWAP_AB, UPCAST, PRECISION, FAST_ACC,
                                 False, A_PERMUTED, W_SRUN)
        if K_TAIL > 0:
            if _tail_owner(k_lo, k_hi, K, BLOCK_K, K_TAIL):
                acc, _ = _micro_step(acc, acc, a_ptr, a_rows, a_scale_ptr, as_rows, a_all, w_e, n2, n2, ws_e, stride_wn,
                                     stride_wsn, stride_wsk, w2_ok, K // K_TAIL - 1, K, A_FMT, W_FMT, BLOCK_M,
                                     2 * BLOCK_N, K_TAIL, True, CD, FAST_CVT, KPERM, W_TK, W_SWZ, WU, SWAP_AB, UPCAST,
                                     PRECISION, FAST_ACC, False, A_PERMUTED)
        if SWAP_AB:
            acc_g, acc_u = tl.split(tl.permute(tl.reshape(acc, [2, BLOCK_N, BLOCK_M]), [1, 2, 0]))
        else:
            acc_g, acc_u = tl.split(tl.permute(tl.reshape(acc, [BLOCK_M, 2, BLOCK_N]), [0, 2, 1]))
    elif QUANT == Q_MICRO:
        # block-scaled family: one tile, or gate and up tiles loaded and multiplied in turn
        for ki in range(k_lo, k_hi):
            acc_g, acc_u = _micro_step(acc_g, acc_u, a_ptr, a_rows, a_scale_ptr, as_rows, a_all, w_e, n64, N + n64,
                                       ws_e, stride_wn, stride_wsn, stride_wsk, w_ok, ki, K, A_FMT, W_FMT, BLOCK_M,
                                       BLOCK_N, BLOCK_K, EVEN_K, CD, FAST_CVT, KPERM, W_TK, W_SWZ, WU, SWAP_AB, UPCAST,
                                       PRECISION, FAST_ACC, GATED, A_PERMUTED, W_SRUN)
        if K_TAIL > 0:
            if _tail_owner(k_lo, k_hi, K, BLOCK_K, K_TAIL):
                acc_g, acc_u = _micro_step(acc_g, acc_u, a_ptr, a_rows, a_scale_ptr, as_rows, a_all, w_e, n64, N + n64,
                                           ws_e, stride_wn, stride_wsn, stride_wsk, w_ok, K // K_TAIL - 1, K, A_FMT,
                                           W_FMT, BLOCK_M, BLOCK_N, K_TAIL, True, CD, FAST_CVT, KPERM, W_TK, W_SWZ, WU,
                                           SWAP_AB, UPCAST, PRECISION, FAST_ACC, GATED, A_PERMUTED)
    else:
        for ki in range(k_lo, k_hi):
            k_ok = offs_k < K - ki * BLOCK_K  # used by the masked loads only (not EVEN_K)
            a = _load_a(a_ptrs, k_ok, EVEN_K)
            wg = _load_w(wg_ptrs, n_ok, k_ok, EVEN_K, EVEN_N)
            if GATED:
                wu = _load_w(wu_ptrs, n_ok, k_ok, EVEN_K, EVEN_N)

            a_s = 0.0  # FP8 128 x 128 blocks: this K-block's scales
            wg_s = 0.0
            if QUANT == Q_BLOCK:
                a_s = tl.load(as_ptrs + ki)
                wg_s = _block_w_load(wsg_ptrs, ki, n_ok, W1)
            acc_g = _kblock_mma(a, wg, acc_g, a_s, wg_s, QUANT == Q_BLOCK, SWAP_AB, UPCAST, PRECISION, FAST_ACC, W1)
            if GATED:
                wu_s = 0.0
                if QUANT == Q_BLOCK:
                    wu_s = _block_w_load(wsu_ptrs, ki, n_ok, W1)
                acc_u = _kblock_mma(a, wu, acc_u, a_s, wu_s, QUANT == Q_BLOCK, SWAP_AB, UPCAST, PRECISION, FAST_ACC,
                                    W1)

            a_ptrs += BLOCK_K
            wg_ptrs += BLOCK_K
            if GATED:
                wu_ptrs += BLOCK_K

    if USE_GDC:
        tl.extra.cuda.gdc_launch_dependents()  # the next grid may start launching (it waits for our end)
    if SWAP_AB:
        acc_g = tl.trans(acc_g)
        if GATED:
            acc_u = tl.trans(acc_u)

    if SPLIT_K > 1:
        tile = (pid_m * num_pid_n + pid_n).to(tl.int64)
        TS: tl.constexpr = BLOCK_M * BLOCK_N * (2 if GATED else 1)
        offs_t = _split_k_tile_offsets(BLOCK_M, BLOCK_N)
        ws_tile = ws_ptr + tile * (SPLIT_K * TS)
        tl.store(ws_tile + tl.program_id(1) * TS + offs_t, acc_g)
        if GATED:
            tl.store(ws_tile + tl.program_id(1) * TS + BLOCK_M * BLOCK_N + offs_t, acc_u)
        if not _split_k_is_last(cnt_ptr, tile, SPLIT_K):
            return
        acc_g = _split_k_sum(ws_tile, TS, SPLIT_K, BLOCK_M, BLOCK_N)
        if GATED:
            acc_u = _split_k_sum(ws_tile + BLOCK_M * BLOCK_N, TS, SPLIT_K, BLOCK_M, BLOCK_N)

    # ---- epilogue: dequant scales, routing weight on input, bias, activation -------------------
    if QUANT == Q_MICRO:
        acc_g = _micro_global_scales(acc_g, a_scale_ptr, a_gs_ptr, w_gs_ptr, e64, A_FMT, W_FMT, FAST_CVT)
        if GATED:
            acc_u = _micro_global_scales(acc_u, a_scale_ptr, a_gs_ptr, w_gs_ptr, e64, A_FMT, W_FMT, FAST_CVT)
    acc_g, acc_u = _gemm1_epilogue(acc_g, acc_u, e64, tok64, slots, offs_n, n_ok, N, a_scale_ptr, w_scale_ptr, bias_ptr,
                                   topk_w_ptr, stride_asm, stride_wse, stride_wsn, stride_be, QUANT, GATED,
                                   WEIGHT_ON_INPUT, HAS_BIAS)
    # activation in fp32, then rounded to the hidden dtype (also before any re-quantization)
    h = _activation(acc_g, acc_u, ACT, act_alpha, act_beta, act_limit).to(ROUND_DTYPE)
    if OUT_DOT_BK > 0:
        tl.static_assert(OUT_Q == OUT_PLAIN and BLOCK_N % OUT_DOT_BK == 0, "dot-order intermediate: 16-bit, whole steps")
        h = _dot_order_steps(h, BLOCK_M, BLOCK_N, OUT_DOT_BK)
    out_offs = slots.to(tl.int64)[:, None] * stride_om + offs_n[None, :]
    st_mask = row_ok[:, None] & n_ok[None, :]
    if OUT_Q == OUT_PLAIN or OUT_Q == OUT_PLAIN_AMAX:
        hv = h.to(out_ptr.dtype.element_ty)
        tl.store(out_ptr + out_offs, hv, mask=st_mask)
        if OUT_Q == OUT_PLAIN_AMAX:
            _atomic_amax(out_scale_ptr, hv, st_mask)
    elif OUT_Q == OUT_NVFP4:
        # BLOCK_N is a multiple of 16 and tiles start on a block boundary; N is a multiple of 16
        packed, s_bytes = _nvfp4_quant_tile(h.to(tl.float32), tl.load(out_qscale_ptr), BLOCK_M, BLOCK_N)
        slot64 = slots.to(tl.int64)
        pb = pid_n * (BLOCK_N // 2) + tl.arange(0, BLOCK_N // 2)
        tl.store(out_ptr + slot64[:, None] * stride_om + pb[None, :], packed.to(tl.uint8),
                 mask=row_ok[:, None] & (pb[None, :] < N // 2))
        sb = pid_n * (BLOCK_N // 16) + tl.arange(0, BLOCK_N // 16)
        tl.store(out_scale_ptr + slot64[:, None] * stride_osm + sb[None, :], s_bytes.to(tl.uint8),
                 mask=row_ok[:, None] & (sb[None, :] < N // 16))
    else:
        x = h.to(tl.float32)
        if OUT_Q == OUT_FP8_STATIC:
            q = _div_by_scale(x, tl.load(out_qscale_ptr), RCP_DIV)
            q = tl.minimum(tl.maximum(q, -FP8_MAX), FP8_MAX)
        elif OUT_Q == OUT_FP8_BLOCK:  # BLOCK_N is a multiple of 128; tiles start on a group boundary
            G: tl.constexpr = BLOCK_N // 128
            x3 = tl.reshape(x, [BLOCK_M, G, 128])
            amax = tl.max(tl.abs(x3), axis=2)
            sc = _div_rn(tl.maximum(amax, 1e-10), tl.full([BLOCK_M, G], 448.0, tl.float32))
            q3 = _div_by_scale(x3, sc[:, :, None], RCP_DIV)  # RCP_DIV: one division per group, not per value
            q3 = tl.minimum(tl.maximum(q3, -FP8_MAX), FP8_MAX)
            q = tl.reshape(q3, [BLOCK_M, BLOCK_N])
            g_idx = pid_n * G + tl.arange(0, G)
            tl.store(out_scale_ptr + slots.to(tl.int64)[:, None] * stride_osm + g_idx[None, :], sc,
                     mask=row_ok[:, None] & (g_idx[None, :] * 128 < N))
        elif OUT_Q == OUT_MXFP8:  # BLOCK_N is a multiple of 32; tiles start on a group boundary
            G32: tl.constexpr = BLOCK_N // 32
            x3 = tl.reshape(x, [BLOCK_M, G32, 32])
            amax = tl.max(tl.abs(x3), axis=2)
            code = _ue8m0_ceil(_div_rn(amax, tl.full([BLOCK_M, G32], 448.0, tl.float32)))
            q3 = x3 * _ue8m0_multiplier(code)[:, :, None]
            q3 = tl.minimum(tl.maximum(q3, -FP8_MAX), FP8_MAX)
            q = tl.reshape(q3, [BLOCK_M, BLOCK_N])
            g_idx = pid_n * G32 + tl.arange(0, G32)
            tl.store(out_scale_ptr + slots.to(tl.int64)[:, None] * stride_osm + g_idx[None, :], code.to(tl.uint8),
                     mask=row_ok[:, None] & (g_idx[None, :] * 32 < N))
        if Q_AS_FP32:
            tl.store(out_ptr + out_offs, q, mask=st_mask)
        else:
            tl.store(out_ptr + out_offs, q.to(out_ptr.dtype.element_ty), mask=st_mask)


@triton.jit
def _gemm2_mainloop(a_ptr, a_scale_ptr, w_ptr, w_scale_ptr, e64, slot64, n0, offs_n, n_ok, k_lo, k_hi, K,
                    stride_am, stride_we, stride_wn, stride_asm, stride_wse, stride_wsn, stride_wsk,
                    QUANT: tl.constexpr, A_FMT: tl.constexpr, W_FMT: tl.constexpr, CD: tl.constexpr,
                    FAST_CVT: tl.constexpr, KPERM: tl.constexpr, MXDOT: tl.constexpr, BLOCK_M: tl.constexpr,
                    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SWAP_AB: tl.constexpr, EVEN_K: tl.constexpr,
                    EVEN_N: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr, FAST_ACC: tl.constexpr,
                    W_TK: tl.constexpr = 0, W_SWZ: tl.constexpr = False, K_TAIL: tl.constexpr = 0,
                    A_PERMUTED: tl.constexpr = False, W_SRUN: tl.constexpr = 0, BLOCK_W1: tl.constexpr = True):
    """GEMM2's K loop over the K-blocks ``[k_lo, k_hi)`` of one tile (rows ``slot64`` of expert
    ``e64``, columns ``offs_n`` from ``n0``): the fp32 accumulator, [BLOCK_N, BLOCK_M] when SWAP_AB. K_TAIL: see
    ``_gemm1_kernel`` (the blocks count ``K - K_TAIL``)."""
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + slot64[:, None] * stride_am + (k_lo * BLOCK_K + offs_k)[None, :]
    w_ptrs = w_ptr + e64 * stride_we + offs_n[:, None].to(tl.int64) * stride_wn + (k_lo * BLOCK_K + offs_k)[None, :]
    if SWAP_AB:
        acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    W1: tl.constexpr = QUANT == Q_BLOCK and BLOCK_N <= 128 and BLOCK_W1  # one weight scale a tile (_block_w_ptrs)
    if QUANT == Q_BLOCK:
        as_ptrs = a_scale_ptr + slot64 * stride_asm
        ws_ptrs = _block_w_ptrs(w_scale_ptr, e64, stride_wse, stride_wsn, n0, offs_n, W1)

    if QUANT == Q_MICRO:
        a_rows = slot64 * stride_am
        as_rows = slot64 * stride_asm
        WU: tl.constexpr = 4 if FAST_CVT and CD == tl.bfloat16 else 2  # see _gemm1_kernel
        a_all, n64, w_e, ws_e, w_ok = _micro_weight_ptrs(w_ptr, w_scale_ptr, e64, stride_we, stride_wse, offs_n, n_ok,
                                                         EVEN_N, BLOCK_M, BLOCK_N)
        if MXDOT:  # see _gemm1_kernel
            for ki in range(k_lo, k_hi):
                for j in tl.static_range(BLOCK_K // 32):
                    kb = ki * (BLOCK_K // 32) + j
                    a, a_s = _load_mx_block(a_ptr, a_rows, a_scale_ptr, as_rows, 1, kb, K, a_all, F_MXFP8, BLOCK_M,
                                            EVEN_K, FAST_CVT)
                    w, w_s = _load_mx_block(w_e, _w_rows(n64, stride_wn, W_TK, 2), ws_e, n64 * stride_wsn,
                                            stride_wsk, kb, K, w_ok, W_FMT, BLOCK_N, EVEN_K, FAST_CVT, W_TK, W_SWZ)
                    acc += _scale_block(_mma(a, w, tl.zeros_like(acc), SWAP_AB, UPCAST, PRECISION, False), a_s, w_s,
                                        SWAP_AB)
        else:
            for ki in range(k_lo, k_hi):
                acc, _ = _micro_step(acc, acc, a_ptr, a_rows, a_scale_ptr, as_rows, a_all, w_e, n64, n64, ws_e,
                                     stride_wn, stride_wsn, stride_wsk, w_ok, ki, K, A_FMT, W_FMT, BLOCK_M, BLOCK_N,
                                     BLOCK_K, EVEN_K, CD, FAST_CVT, KPERM, W_TK, W_SWZ, WU, SWAP_AB, UPCAST, PRECISION,
                                     FAST_ACC, False, A_PERMUTED, W_SRUN)
            if K_TAIL > 0:
                if _tail_owner(k_lo, k_hi, K, BLOCK_K, K_TAIL):
                    acc, _ = _micro_step(acc, acc, a_ptr, a_rows, a_scale_ptr, as_rows, a_all, w_e, n64, n64, ws_e,
                                         stride_wn, stride_wsn, stride_wsk, w_ok, K // K_TAIL - 1, K, A_FMT, W_FMT,
                                         BLOCK_M, BLOCK_N, K_TAIL, True, CD, FAST_CVT, KPERM, W_TK, W_SWZ, WU, SWAP_AB,
                                         UPCAST, PRECISION, FAST_ACC, False, A_PERMUTED)
    else:
        for ki in range(k_lo, k_hi):
            k_ok = offs_k < K - ki * BLOCK_K  # used by the masked loads only (not EVEN_K)
            a = _load_a(a_ptrs, k_ok, EVEN_K)
            w = _load_w(w_ptrs, n_ok, k_ok, EVEN_K, EVEN_N)
            a_s = 0.0  # FP8 128 x 128 blocks: this K-block's scales
            w_s = 0.0
            if QUANT == Q_BLOCK:
                a_s = tl.load(as_ptrs + ki)
                w_s = _block_w_load(ws_ptrs, ki, n_ok, W1)
            acc = _kblock_mma(a, w, acc, a_s, w_s, QUANT == Q_BLOCK, SWAP_AB, UPCAST, PRECISION, FAST_ACC, W1)
            a_ptrs += BLOCK_K
            w_ptrs += BLOCK_K
    return acc


@triton.jit
def _gemm2_epilogue(acc, e64, slots, slot64, offs_n, n_ok, a_scale_ptr, w_scale_ptr, bias_ptr, topk_w_ptr, a_gs_ptr,
                    w_gs_ptr, stride_asm, stride_wse, stride_wsn, stride_be, QUANT: tl.constexpr, A_FMT: tl.constexpr,
                    W_FMT: tl.constexpr, FAST_CVT: tl.constexpr, HAS_BIAS: tl.constexpr,
                    MUL_ROUTING_WEIGHT: tl.constexpr):
    """Dequant scales, bias and routing weight of a [BLOCK_M, BLOCK_N] GEMM2 accumulator (fp32)."""
    if QUANT == Q_TENSOR:
        acc = acc * (tl.load(a_scale_ptr) * tl.load(w_scale_ptr + e64 * stride_wse))
    elif QUANT == Q_ROW:
        a_s = tl.load(a_scale_ptr + slot64 * stride_asm)
        w_s = tl.load(w_scale_ptr + e64 * stride_wse + offs_n * stride_wsn, mask=n_ok, other=0.0)
        acc = acc * (a_s[:, None] * w_s[None, :])
    elif QUANT == Q_MICRO:
        acc = _micro_global_scales(acc, a_scale_ptr, a_gs_ptr, w_gs_ptr, e64, A_FMT, W_FMT, FAST_CVT)
    if HAS_BIAS:
        acc = acc + tl.load(bias_ptr + e64 * stride_be + offs_n, mask=n_ok, other=0.0)[None, :]
    if MUL_ROUTING_WEIGHT:
        acc = acc * tl.load(topk_w_ptr + slots).to(tl.float32)[:, None]
    return acc


@triton.jit
def _gemm2_out(slot64, row_ok, offs_n, n_ok, stride_om, TOP_K: tl.constexpr, OUT_ATOMIC: tl.constexpr):
    """Output offsets and store mask of a GEMM2 tile: y's slot rows, or (OUT_ATOMIC) the tokens' rows."""
    if OUT_ATOMIC:
        out_offs = (slot64 // TOP_K)[:, None] * stride_om + offs_n[None, :]
    else:
        out_offs = slot64[:, None] * stride_om + offs_n[None, :]
    return out_offs, row_ok[:, None] & n_ok[None, :]


@triton.jit
def _gemm2_store(out_ptr, out_offs, acc, st_mask, OUT_ATOMIC: tl.constexpr):
    y = acc.to(out_ptr.dtype.element_ty)
    if OUT_ATOMIC:
        tl.atomic_add(out_ptr + out_offs, y, mask=st_mask, sem="relaxed")
    else:
        tl.store(out_ptr + out_offs, y, mask=st_mask)


@triton.jit
def _gemm2_held_a(a_ptr, a_scale_ptr, w_ptr, w_scale_ptr, bias_ptr, topk_w_ptr, sorted_ids_ptr, block_expert_ptr,
                  num_post_padded_ptr, out_ptr, N, K, num_slots, num_pid_n, stride_am, stride_we, stride_wn,
                  stride_asm, stride_wse, stride_wsn, stride_be, stride_om, TOP_K: tl.constexpr, E_LOC: tl.constexpr,
                  QUANT: tl.constexpr, HAS_BIAS: tl.constexpr, MUL_ROUTING_WEIGHT: tl.constexpr,
                  OUT_ATOMIC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  SWAP_AB: tl.constexpr, EVEN_K: tl.constexpr, EVEN_N: tl.constexpr, UPCAST: tl.constexpr,
                  PRECISION: tl.constexpr, FAST_ACC: tl.constexpr, N_TILES: tl.constexpr, HELD_KB: tl.constexpr,
                  BLOCK_W1: tl.constexpr = True):
    """GEMM2 with N_TILES column tiles per program (``_gemm2_kernel``'s N_TILES > 1): the activation
    tile is loaded once -- [BLOCK_M, BLOCK_K >= K], or for FP8 128 x 128 blocks (Q_BLOCK) HELD_KB = 1
    or 2 K-blocks of 128 with their per-row scales -- and each column tile runs the one-tile
    program's K-block arithmetic and epilogue."""
    num_ng = tl.cdiv(num_pid_n, N_TILES)
    pid = tl.program_id(0)
    pid_m = pid // num_ng
    n_lo = (pid % num_ng) * N_TILES
    n_hi = tl.minimum(n_lo + N_TILES, num_pid_n)
    if pid_m * BLOCK_M >= tl.load(num_post_padded_ptr):
        return
    e = tl.load(block_expert_ptr + pid_m)
    e64 = e.to(tl.int64)
    slots, row_ok = _block_slots(sorted_ids_ptr, pid_m, num_slots, BLOCK_M)
    slot64 = slots.to(tl.int64)
    if e >= E_LOC:  # the non-local group: exact zeros for its slots, as the one-tile program
        if not OUT_ATOMIC:
            for pid_n in range(n_lo, n_hi):
                offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
                out_offs, st_mask = _gemm2_out(slot64, row_ok, offs_n, offs_n < N, stride_om, TOP_K, OUT_ATOMIC)
                tl.store(out_ptr + out_offs, tl.zeros([BLOCK_M, BLOCK_N], dtype=out_ptr.dtype.element_ty),
                         mask=st_mask)
        return
    offs_k = tl.arange(0, BLOCK_K)
    k_ok = offs_k < K
    a_ptrs = a_ptr + slot64[:, None] * stride_am + offs_k[None, :]
    a = _load_a(a_ptrs, k_ok, EVEN_K)
    a_s = 0.0
    if QUANT == Q_BLOCK:  # the 1 x 128 activation scales of the held blocks
        as_ptrs = a_scale_ptr + slot64 * stride_asm
        a_s = tl.load(as_ptrs)
        if HELD_KB == 2:
            k_ok1 = offs_k < K - BLOCK_K
            a1 = _load_a(a_ptrs + BLOCK_K, k_ok1, EVEN_K)
            a_s1 = tl.load(as_ptrs + 1)
    for pid_n in tl.range(n_lo, n_hi):
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = offs_n < N
        w_ptrs = w_ptr + e64 * stride_we + offs_n[:, None].to(tl.int64) * stride_wn + offs_k[None, :]
        w = _load_w(w_ptrs, n_ok, k_ok, EVEN_K, EVEN_N)
        if SWAP_AB:
            acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
        else:
            acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        w_s = 0.0
        W1: tl.constexpr = QUANT == Q_BLOCK and BLOCK_N <= 128 and BLOCK_W1  # one weight scale a tile (_block_w_ptrs)
        if QUANT == Q_BLOCK:
            ws_ptrs = _block_w_ptrs(w_scale_ptr, e64, stride_wse, stride_wsn, pid_n * BLOCK_N, offs_n, W1)
            w_s = _block_w_load(ws_ptrs, 0, n_ok, W1)
        acc = _kblock_mma(a, w, acc, a_s, w_s, QUANT == Q_BLOCK, SWAP_AB, UPCAST, PRECISION, FAST_ACC, W1)
        if QUANT == Q_BLOCK and HELD_KB == 2:  # the second held K-block
            w1 = _load_w(w_ptrs + BLOCK_K, n_ok, k_ok1, EVEN_K, EVEN_N)
            acc = _kblock_mma(a1, w1, acc, a_s1, _block_w_load(ws_ptrs, 1, n_ok, W1), True, SWAP_AB, UPCAST,
                              PRECISION, FAST_ACC, W1)
        if SWAP_AB:
            acc = tl.trans(acc)
        acc = _gemm2_epilogue(acc, e64, slots, slot64, offs_n, n_ok, a_scale_ptr, w_scale_ptr, bias_ptr, topk_w_ptr,
                              topk_w_ptr, topk_w_ptr, stride_asm, stride_wse, stride_wsn, stride_be, QUANT, 0, 0,
                              False, HAS_BIAS, MUL_ROUTING_WEIGHT)
        out_offs, st_mask = _gemm2_out(slot64, row_ok, offs_n, n_ok, stride_om, TOP_K, OUT_ATOMIC)
        _gemm2_store(out_ptr, out_offs, acc, st_mask, OUT_ATOMIC)


@triton.jit
def _gemm2_kernel(
    a_ptr,  # [T*K, N1] slot-indexed intermediate: hidden dtype or e4m3 (N1 = I_pad); NVFP4: uint8 [T*K, N1/2]
    a_scale_ptr,  # TENSOR: [] ; ROW: [T*K] ; BLOCK: [T*K, N1/128] ; MICRO: see the module docstring
    w_ptr,  # [E, H, N1] w2 (FP4: uint8 [E, H, N1/2])
    w_scale_ptr,  # TENSOR: [E] ; ROW: [E, H] ; BLOCK: [E, H/128, N1/128] ; MICRO: [E, H, N1/G] ; NONE: unused
    bias_ptr,  # [E, H] fp32 (HAS_BIAS)
    topk_w_ptr,  # [T*K] routing weights
    sorted_ids_ptr,  # [P_max] int32
    block_expert_ptr,  # [P_max / BLOCK_M] int32 (E_LOC: the non-local group -> zero rows)
    num_post_padded_ptr,  # [1] int32
    out_ptr,  # not OUT_ATOMIC: [T*K, H] indexed by slot (y; the output itself when K == 1)
    #           OUT_ATOMIC: [T, H] zero-initialized, y added atomically per token
    a_gs_ptr,  # MICRO, A_FMT NVFP4: [1] fp32 global scale of the intermediate
    w_gs_ptr,  # MICRO, W_FMT NVFP4: [E] fp32 global scales of w2
    ws_ptr,  # SPLIT_K > 1: fp32 [tiles, SPLIT_K, BLOCK_M * BLOCK_N] partial sums
    cnt_ptr,  # SPLIT_K > 1: int32 [tiles] arrival counters, zero on entry, left zero
    comb_cnt_ptr,  # FUSE_COMBINE: int32 [T * cdiv(N, BLOCK_N)] arrival counters, zero on entry, left zero
    comb_out_ptr,  # FUSE_COMBINE: [T, H] the layer's output (row stride stride_co)
    stride_co,
    N,  # H
    K,  # I_pad
    num_slots,
    num_blocks_m,
    stride_am,
    stride_we,
    stride_wn,  # weight rows; FP4 values stored tiled (W_TK > 0): the 64-row tiles' stride
    stride_asm,
    stride_wse,
    stride_wsn,
    stride_wsk,  # MICRO: weight block scales' stride along K (1 row-major, M or N K-major)
    stride_be,
    stride_om,
    TOP_K: tl.constexpr,
    E_LOC: tl.constexpr,
    QUANT: tl.constexpr,
    A_FMT: tl.constexpr,
    W_FMT: tl.constexpr,
    CD: tl.constexpr,
    FAST_CVT: tl.constexpr,
    KPERM: tl.constexpr,
    MXDOT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    MUL_ROUTING_WEIGHT: tl.constexpr,
    OUT_ATOMIC: tl.constexpr,
    FUSE_COMBINE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    SWAP_AB: tl.constexpr,
    EVEN_K: tl.constexpr,
    EVEN_N: tl.constexpr,
    UPCAST: tl.constexpr,
    PRECISION: tl.constexpr,
    FAST_ACC: tl.constexpr,
    SPLIT_K: tl.constexpr,
    USE_GDC: tl.constexpr,  # launched with programmatic dependent launch (Hopper+): wait for the prior grid first
    PERSISTENT: tl.constexpr,  # a fixed grid of programs walks the tiles (SPLIT_K == 1, not FUSE_COMBINE)
    N_TILES: tl.constexpr,  # > 1: column tiles per program with the activation tile held (BLOCK_K >= K)
    HELD_KB: tl.constexpr,  # N_TILES > 1, QUANT == Q_BLOCK: K-blocks held (cdiv(K, 128): 1 or 2)
    W_TK: tl.constexpr = 0,  # MICRO, FP4 weights: 0 linear values, else the "tiled" layout's piece width (_w_rows)
    W_SWZ: tl.constexpr = False,  # MICRO, FP4 weights: values in the "swizzled" layout (bit-swizzled 16-bit words)
    K_TAIL: tl.constexpr = 0,  # MICRO, not MXDOT: as in _gemm1_kernel
    A_PERMUTED: tl.constexpr = False,  # MICRO, 16-bit A: the intermediate in the dot order (GEMM1's OUT_DOT_BK)
    W_SRUN: tl.constexpr = 0,  # MICRO, not MXDOT: as in _gemm1_kernel
    BLOCK_W1: tl.constexpr = True,  # BLOCK: as in _gemm1_kernel
):
    """GEMM2 + bias + routing weight, one output row per slot (+ the top-k combine: FUSE_COMBINE).
    grid = (num_blocks_m * cdiv(N, BLOCK_N), SPLIT_K); SPLIT_K > 1 as in ``_gemm1_kernel``.

    PERSISTENT (prefill): grid = (P, 1) with any P >= 1; program p computes the tiles p, p + P, ...
    of the blocks in use (``num_post_padded``), in the GROUP_M order, with one flattened loop over
    (tile, K-block) so that the software pipeline loads the next tile's first K-blocks while this
    one's epilogue runs -- the per-tile load latency that short K loops (K = I_pad of TP shards and
    fine-grained experts) cannot hide otherwise. Every tile's arithmetic is that of the one-tile
    program: the same bits for any P. Non-local blocks store zero rows (no early exit in the loop).

    N_TILES > 1 (short K: the whole K in one BLOCK_K, 16-bit / FP8 per tensor / per row; FP8 128 x 128
    blocks: K <= 256 in HELD_KB 128-wide blocks): grid =
    (num_blocks_m * cdiv(cdiv(N, BLOCK_N), N_TILES), 1); a program loads its [BLOCK_M, K] activation
    tile once and computes N_TILES consecutive column tiles with it, so only the weight tiles
    stream; one program per tile re-reads the activation tile for every column tile (as many bytes
    per MMA as the weight tile). Each tile's arithmetic is that of a one-tile program with the same
    BLOCK_K: the same bits for any N_TILES."""
    if USE_GDC:
        tl.extra.cuda.gdc_wait()
    num_pid_n = tl.cdiv(N, BLOCK_N)
    if N_TILES > 1:
        _gemm2_held_a(a_ptr, a_scale_ptr, w_ptr, w_scale_ptr, bias_ptr, topk_w_ptr, sorted_ids_ptr, block_expert_ptr,
                      num_post_padded_ptr, out_ptr, N, K, num_slots, num_pid_n, stride_am, stride_we, stride_wn,
                      stride_asm, stride_wse, stride_wsn, stride_be, stride_om, TOP_K, E_LOC, QUANT,
                      HAS_BIAS, MUL_ROUTING_WEIGHT, OUT_ATOMIC, BLOCK_M, BLOCK_N, BLOCK_K, SWAP_AB, EVEN_K, EVEN_N,
                      UPCAST, PRECISION, FAST_ACC, N_TILES, HELD_KB, BLOCK_W1)
        if USE_GDC:
            tl.extra.cuda.gdc_launch_dependents()
        return
    if PERSISTENT:
        num_m = tl.cdiv(tl.load(num_post_padded_ptr), BLOCK_M)
        for t in tl.range(tl.program_id(0), num_m * num_pid_n, tl.num_programs(0), flatten=True):
            pid_m, pid_n = _tile_ids(t, num_m, num_pid_n, GROUP_M)
            e = tl.load(block_expert_ptr + pid_m)
            local = e < E_LOC
            e64 = tl.minimum(e, E_LOC - 1).to(tl.int64)
            slots, row_ok = _block_slots(sorted_ids_ptr, pid_m, num_slots, BLOCK_M)
            slot64 = slots.to(tl.int64)
            offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            n_ok = offs_n < N
            out_offs, st_mask = _gemm2_out(slot64, row_ok, offs_n, n_ok, stride_om, TOP_K, OUT_ATOMIC)
            acc = _gemm2_mainloop(a_ptr, a_scale_ptr, w_ptr, w_scale_ptr, e64, slot64, pid_n * BLOCK_N, offs_n, n_ok,
                                  0, tl.cdiv(K - K_TAIL, BLOCK_K), K, stride_am, stride_we, stride_wn, stride_asm,
                                  stride_wse, stride_wsn, stride_wsk, QUANT, A_FMT, W_FMT, CD, FAST_CVT, KPERM, MXDOT,
                                  BLOCK_M, BLOCK_N, BLOCK_K, SWAP_AB, EVEN_K, EVEN_N, UPCAST, PRECISION, FAST_ACC, W_TK,
                                  W_SWZ, K_TAIL, A_PERMUTED, W_SRUN, BLOCK_W1)
            if SWAP_AB:
                acc = tl.trans(acc)
            acc = _gemm2_epilogue(acc, e64, slots, slot64, offs_n, n_ok, a_scale_ptr, w_scale_ptr, bias_ptr,
                                  topk_w_ptr, a_gs_ptr, w_gs_ptr, stride_asm, stride_wse, stride_wsn, stride_be,
                                  QUANT, A_FMT, W_FMT, FAST_CVT, HAS_BIAS, MUL_ROUTING_WEIGHT)
            if OUT_ATOMIC:
                st_mask = st_mask & local
            _gemm2_store(out_ptr, out_offs, tl.where(local, acc, 0.0), st_mask, OUT_ATOMIC)
        if USE_GDC:
            tl.extra.cuda.gdc_launch_dependents()
        return
    pid = tl.program_id(0)
    pid_m, pid_n = _tile_ids(pid, num_blocks_m, num_pid_n, GROUP_M)
    if pid_m * BLOCK_M >= tl.load(num_post_padded_ptr):
        return
    e = tl.load(block_expert_ptr + pid_m)
    e64 = e.to(tl.int64)

    slots, row_ok = _block_slots(sorted_ids_ptr, pid_m, num_slots, BLOCK_M)
    slot64 = slots.to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < N
    out_offs, st_mask = _gemm2_out(slot64, row_ok, offs_n, n_ok, stride_om, TOP_K, OUT_ATOMIC)

    if e >= E_LOC:
        # the non-local group (laid out when K == 1 writes the output directly, or FUSE_COMBINE):
        # its slots get exact zeros
        if not OUT_ATOMIC:
            tl.store(out_ptr + out_offs, tl.zeros([BLOCK_M, BLOCK_N], dtype=out_ptr.dtype.element_ty),
                     mask=st_mask)
        if FUSE_COMBINE:
            if tl.program_id(1) == 0:  # once per slot, whatever SPLIT_K
                _combine_arrive(out_ptr, stride_om, slot64, row_ok, offs_n, n_ok, pid_n, num_pid_n, comb_cnt_ptr,
                                comb_out_ptr, stride_co, TOP_K, BLOCK_M, BLOCK_N)
        return

    k_lo, k_hi = _split_k_range(K - K_TAIL, BLOCK_K, SPLIT_K)
    acc = _gemm2_mainloop(a_ptr, a_scale_ptr, w_ptr, w_scale_ptr, e64, slot64, pid_n * BLOCK_N, offs_n, n_ok, k_lo,
                          k_hi, K, stride_am, stride_we, stride_wn, stride_asm, stride_wse, stride_wsn, stride_wsk,
                          QUANT, A_FMT, W_FMT, CD, FAST_CVT, KPERM, MXDOT, BLOCK_M, BLOCK_N, BLOCK_K, SWAP_AB, EVEN_K,
                          EVEN_N, UPCAST, PRECISION, FAST_ACC, W_TK, W_SWZ, K_TAIL, A_PERMUTED, W_SRUN, BLOCK_W1)
    if USE_GDC:
        tl.extra.cuda.gdc_launch_dependents()
    if SWAP_AB:
        acc = tl.trans(acc)

    if SPLIT_K > 1:
        tile = (pid_m * num_pid_n + pid_n).to(tl.int64)
        TS: tl.constexpr = BLOCK_M * BLOCK_N
        ws_tile = ws_ptr + tile * (SPLIT_K * TS)
        tl.store(ws_tile + tl.program_id(1) * TS + _split_k_tile_offsets(BLOCK_M, BLOCK_N), acc)
        if not _split_k_is_last(cnt_ptr, tile, SPLIT_K):
            return
        acc = _split_k_sum(ws_tile, TS, SPLIT_K, BLOCK_M, BLOCK_N)

    acc = _gemm2_epilogue(acc, e64, slots, slot64, offs_n, n_ok, a_scale_ptr, w_scale_ptr, bias_ptr, topk_w_ptr,
                          a_gs_ptr, w_gs_ptr, stride_asm, stride_wse, stride_wsn, stride_be, QUANT, A_FMT, W_FMT,
                          FAST_CVT, HAS_BIAS, MUL_ROUTING_WEIGHT)
    _gemm2_store(out_ptr, out_offs, acc, st_mask, OUT_ATOMIC)
    if FUSE_COMBINE and not OUT_ATOMIC:
        _combine_arrive(out_ptr, stride_om, slot64, row_ok, offs_n, n_ok, pid_n, num_pid_n, comb_cnt_ptr,
                        comb_out_ptr, stride_co, TOP_K, BLOCK_M, BLOCK_N)
