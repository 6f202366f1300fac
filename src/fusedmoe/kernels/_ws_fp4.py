"""Warp-specialized grouped GEMMs for MXFP4 / NVFP4 weights x BF16 activations at prefill on Hopper, in Gluon
(private; launched by ``fusedmoe.backends.triton_moe`` when ``KernelConfig.warp_specialized`` is set
for FP4 weights -- ``triton_moe.auto_ws_fp4`` sets it for MXFP4 prefill tiles, and for NVFP4 ones under
``set_ws_fp4_nvfp4`` (on by default since the thirty-second session, at every prefill tile since the sixty-second);
the rules in ``kernel_configs.warp_specialized_problem`` and ``triton_moe._ws_fp4_problem``).

Why: Hopper has no FP4 tensor cores, so every K step dequantizes its weight tile in registers before
a BF16 wgmma. In the Triton kernels the whole program passes one barrier a step (the software
pipeline's), so the conversion and the tensor cores take turns: 34-44 % of the BF16 peak at 4096
tokens (H200). Here a TMA loader warp fills a ring and two consumer warpgroups each convert their
half of the weight tile into shared memory and multiply it asynchronously, keeping one wgmma in
flight (``warpgroup_mma_wait(1)``): a warpgroup converts step k + 1 while its step k multiplies,
and the two warpgroups interleave. Prototype: ``benchmarks/gluon_fp4_prefill.py`` at commit f75857a, removed since (H200, twenty-
eighth session: 443 TF/s with 128-token tiles, 667 TF/s with 256, against ~236 TF/s for the Triton
GEMM of the same shape). In the layer, 4096 tokens: gpt-oss-120b 1.19x, Nemotron-3-Nano 1.21x,
Nemotron-3-Super 1.06x faster than the Triton kernels (BENCHMARKS.md, twenty-eighth session).

Swap-AB tiles: the weights are the MMA's M side (64 rows a warpgroup), the tokens its N side.

Data contract (``_moe_gemm`` conventions, ``E_LOC`` local experts):

    x_desc      TMA descriptor, block [BT, BK], over the GEMM's BF16 input rows gathered into
                block-padded slot order (``_align._gather_slot_rows_kernel``; padding rows zero), BT
                the align's block_m (128 or 256)
    w0_desc /   TMA descriptor, block [64, BK / 4] int16, over the weights' FP4 values in the
    (same)      "tiled" / "swizzled" layout ``[E, R / 64, K / TK, 64, TK / 2]`` bytes viewed as
                ``[E * R / 64 * K / TK * 64, TK / 4]`` 16-bit words (``QuantizedTensor.value_layout``):
                a K step of 64 rows is one box. R = 2 N gated (each expert's N gate rows, then its N
                up rows), N otherwise. Two rings: the tile's first and second 64 weight rows
    s_ptr       MX (``NV`` False): UE8M0 block scales [E, R, >= K / 32] bytes (row stride ``stride_sr``);
                NVFP4 (``NV``): e4m3 block scales [E, R, K / 16] K-major (``stride_sr`` 1, ``stride_sk`` R)
    gs_ptr      NVFP4: the global scales g [E] fp32 (the values are ``e2m1 * s / g``)
    out         [T*K, N] by slot: GEMM1's intermediate (activation applied, rounded to ``ROUND_DTYPE``)
                or GEMM2's y (bias, then the routing weight with ``MUL_ROUTING_WEIGHT``)

Tiles: NC output columns (gated 64: warpgroup h computes gate rows n0 + 32 h + [0, 32) and the
same up rows in one 64-row MMA tile -- gate in its rows 0-31, up in 32-63 -- so its epilogue pairs
them; non-gated 128: warpgroup h rows n0 + 64 h + [0, 64)) x BT token rows. Persistent
(``program_id, program_id + num_programs, ...`` over the (M-block, column tile) grid in GROUP_M
bands; or, with ``DYN``, the order of a global counter -- ``_ws_gemm``'s tile queue), blocks of experts >= E_LOC
skipped by all partitions (their rows are the launcher's).

Conversion (``_blockscaled._e2m1x4_bf16_nib``, the library's PTX converter on 16-bit words; SWZ:
the bit-swizzled words of ExpertWeights' default layout): e2m1 times the block scale exactly in
BF16; with ``FOLD`` (``triton_moe._mx_fold_cvt``: ``QuantizedTensor.scale_code_range`` in [11, 144]) the converter's 2^126 is
split between the scale (2^110) and the accumulator (2^16), as the Triton kernels do. NVFP4 always so: its
e4m3 scale times 2^110 in BF16 (exact), and ``2^16 / g`` on the accumulator (one multiply: within an ulp of the
Triton kernels' division). The sum over K runs in fp32 in the wgmma, in K order, 16 at a time.

Limits (``kernel_configs.warp_specialized_problem``, ``triton_moe._ws_fp4_problem``): sm_90, MXFP4 / NVFP4 weights in the tiled
layout with TK a multiple of 64, BF16 activations and hidden states, K and (gated) N multiples of 64, block_k 64 or
128 (``KS``: two 64-wide K steps a ring slot; 128-token tiles only), block_m 128 / 256, no split-K.
"""

import torch
import triton  # noqa: F401  (the Gluon runtime needs triton imported first)
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

from . import _blockscaled as _bs
from ._moe_gemm import _activation, _tile_ids
from ._ws_gemm import (_ring_barriers, _ring_pos, _ring_prev, _ws_tile_publish, _ws_tile_queue, _ws_tile_take,
                       _ws_tiles_done)

_MX_FOLD_EXP_BIAS = gl.constexpr(110)  # _blockscaled._MX_FOLD_EXP_BIAS
_NV_SCALE_BIAS = gl.constexpr(2.0 ** 110)  # _blockscaled._NIB_SCALE_BIAS
_ACC_FACTOR = gl.constexpr(65536.0)  # _blockscaled._NIB_ACC_FACTOR: the 2^16 the folded tiles are short of


def pair8_cols(K: int) -> torch.Tensor:
    """The pair order (``PAIRS``) as a column permutation: ``x[:, pair8_cols(K)]`` holds at position ``8 g + 2 s + j``
    the K position ``8 g + 4 j + s`` (j < 2, s < 4). The FP4 converter's register ``s`` holds value ``s`` of two
    consecutive 16-bit words -- K positions 4 j + s of their 8 (``_blockscaled._e2m1x4_bf16_nib``) -- so in this order
    each register is two neighbours of the converted tile and is stored as it is. A sum over K does not depend on
    the order when both operands take it: the gather (``_align._gather_slot_rows_kernel``'s ``PAIR8``) writes GEMM1's
    input so, GEMM1's epilogue (``OUT_PAIRS``) GEMM2's."""
    if K % 8:
        raise ValueError(f"the pair order permutes 8-wide K groups, got K = {K}")
    d = torch.arange(8)
    return (torch.arange(0, K, 8)[:, None] + (4 * (d % 2) + d // 2)[None, :]).reshape(-1)


@gluon.jit
def _fp4_chunk_count(sorted_ids_ptr, pid_m, num_slots, XT: gl.constexpr, CHUNKS: gl.constexpr, CM: gl.constexpr):
    """The ``XT``-row chunks of block ``pid_m`` that hold real rows (an expert's rows come first in its blocks):
    1 .. CHUNKS. ``CM``: the loads' cache modifier ("", or ``.cg`` where they may precede the wait for the prior
    grid)."""
    n = 1
    for c in gl.static_range(1, CHUNKS):
        n += (gl.load(sorted_ids_ptr + pid_m * (XT * CHUNKS) + c * XT, cache_modifier=CM) < num_slots).to(gl.int32)
    return n


@gluon.jit
def _fp4_x(x_bufs, s, c0: gl.constexpr, n: gl.constexpr, XT: gl.constexpr, CHUNKS: gl.constexpr, JOIN: gl.constexpr):
    """Ring slot ``s``'s input chunks ``c0 .. c0 + n - 1`` as one [n XT, BK] tile: ``JOIN``, a slot's chunks are one
    buffer [CHUNKS XT, BK] (a slice of it); otherwise each chunk its own buffer (``n`` 1)."""
    if JOIN:
        return x_bufs.index(s).slice(c0 * XT, n * XT)
    else:
        return x_bufs.index(s * CHUNKS + c0)


@gluon.jit
def _fp4_loader(x_desc, w0_desc, x_bufs, w0_bufs, w1_bufs, ready, empty, sorted_ids_ptr, block_expert_ptr,
                num_post_padded_ptr, N, K, num_slots, R_TILES, K_PIECES, E_LOC: gl.constexpr, NC: gl.constexpr,
                BK: gl.constexpr, TK: gl.constexpr, STAGES: gl.constexpr, GROUP_M: gl.constexpr, GATED: gl.constexpr,
                CHUNKS: gl.constexpr, JOIN: gl.constexpr, tile_ctr_ptr=0, tiles=0, tq_ready=0, tq_empty=0,
                DYN: gl.constexpr = False, TQ: gl.constexpr = 1, s_bufs=0, s_ptr=0, stride_se=0, stride_sr=0,
                stride_sk=0, NV: gl.constexpr = False, S_SMEM: gl.constexpr = False, KS: gl.constexpr = 1):
    """TMA producer (one warp): per K step the [BT, BK] input tile and the tile's two 64-row weight boxes (gated:
    gate rows n0 + [0, 64) and up rows N + n0 + [0, 64); otherwise rows n0 + [0, 128)) into the ring. With
    ``CHUNKS`` > 1 the input tile is that many chunks of BT / CHUNKS rows (``x_desc``'s box), only the chunks that
    hold real rows loaded (an expert's last block holds its rows first). ``DYN`` (``_ws_gemm._ws_loader``'s): the
    tiles from a global counter, fetched a tile ahead and handed to the consumers through the tile queue.
    ``S_SMEM``: each step's block scales of the tile's 128 weight rows too, by cp.async into the ring slot's
    ``s_bufs`` (:func:`_fp4_s_copy`), and each thread's ``.noinc`` arrival once they landed. ``KS``: K steps a ring
    slot (:func:`_fp4_load_tile`)."""
    XT: gl.constexpr = x_desc.block_type.shape[0]
    num_m = gl.load(num_post_padded_ptr) // (XT * CHUNKS)
    num_n = gl.cdiv(N, NC)
    n_k = K // BK
    it = 0
    if DYN:
        q = 0
        t = gl.atomic_add(tile_ctr_ptr, 1, sem="relaxed")
        while t < num_m * num_n:
            _ws_tile_publish(tiles, tq_ready, tq_empty, q, t, TQ, 1)
            q += 1
            t_next = gl.atomic_add(tile_ctr_ptr, 1, sem="relaxed")  # (its round trip behind the ring's lead)
            it = _fp4_load_tile(x_desc, w0_desc, x_bufs, w0_bufs, w1_bufs, ready, empty, sorted_ids_ptr,
                                block_expert_ptr, N, num_slots, R_TILES, K_PIECES, t, num_m, num_n, n_k, it, E_LOC,
                                BK, TK, STAGES, GROUP_M, GATED, CHUNKS, JOIN, s_bufs, s_ptr, stride_se,
                                stride_sr, stride_sk, NV, S_SMEM, KS)
            t = t_next
        _ws_tiles_done(tile_ctr_ptr, tiles, tq_ready, tq_empty, q, t, TQ, 1)
    else:
        for t in range(gl.program_id(0), num_m * num_n, gl.num_programs(0)):
            it = _fp4_load_tile(x_desc, w0_desc, x_bufs, w0_bufs, w1_bufs, ready, empty, sorted_ids_ptr,
                                block_expert_ptr, N, num_slots, R_TILES, K_PIECES, t, num_m, num_n, n_k, it, E_LOC,
                                BK, TK, STAGES, GROUP_M, GATED, CHUNKS, JOIN, s_bufs, s_ptr, stride_se,
                                stride_sr, stride_sk, NV, S_SMEM, KS)


@gluon.jit
def _fp4_load_tile(x_desc, w0_desc, x_bufs, w0_bufs, w1_bufs, ready, empty, sorted_ids_ptr, block_expert_ptr, N,
                   num_slots, R_TILES, K_PIECES, t, num_m, num_n, n_k, it, E_LOC: gl.constexpr, BK: gl.constexpr,
                   TK: gl.constexpr, STAGES: gl.constexpr, GROUP_M: gl.constexpr, GATED: gl.constexpr,
                   CHUNKS: gl.constexpr, JOIN: gl.constexpr, s_bufs, s_ptr, stride_se, stride_sr, stride_sk,
                   NV: gl.constexpr, S_SMEM: gl.constexpr, KS: gl.constexpr = 1):
    """:func:`_fp4_loader`'s work for tile ``t``: every K step's operands into the ring from ring step ``it`` on
    (nothing for a block of a non-local expert). Returns the next ring step. ``KS`` (2: the kernel's ``block_k``
    128): a ring slot holds K steps ``KS j .. KS j + KS - 1`` in its sub-slots ``KS s + i`` (one ready / empty
    barrier pair a slot); where n_k is odd the last slot's second step lies past K -- its input box is all past
    the rows' end (TMA's zero fill), its weight boxes the next row tile's first piece (finite values, or past the
    tensor's end: zeros) -- so it adds products of zero inputs."""
    XT: gl.constexpr = x_desc.block_type.shape[0]
    BT: gl.constexpr = XT * CHUNKS
    wbytes: gl.constexpr = 2 * w0_desc.block_type.nbytes
    xbytes: gl.constexpr = x_desc.block_type.nbytes
    pid_m, pid_n = _tile_ids(t, num_m, num_n, GROUP_M)
    e = gl.load(block_expert_ptr + pid_m)
    if e < E_LOC:
        if GATED:
            rt0 = pid_n  # NC = 64: one row tile of gate rows, the same of up rows
            rt1 = N // 64 + pid_n
        else:
            rt0 = pid_n * 2
            rt1 = rt0 + 1
        base0 = (e * R_TILES + rt0) * K_PIECES
        base1 = (e * R_TILES + rt1) * K_PIECES
        n_ch = 1
        if CHUNKS > 1:
            n_ch = _fp4_chunk_count(sorted_ids_ptr, pid_m, num_slots, XT, CHUNKS, "")
        for k2 in range(gl.cdiv(n_k, KS)):
            # (signed here: with _ring_pos the loader warp, at 40 registers, spilled in an sm_90 compile)
            s = it % STAGES
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)  # a fresh slot passes at once
            bar = ready.index(s)
            for c in gl.static_range(1, CHUNKS + 1):  # one of them: arrive + the slot's bytes
                mbarrier.expect(bar, KS * (wbytes + c * xbytes), pred=n_ch == c)
            for i in gl.static_range(KS):
                kk = k2 * KS + i
                v = s * KS + i
                piece = (kk * BK) // TK
                col = ((kk * BK) % TK) // 4
                for c in gl.static_range(CHUNKS):
                    tma.async_copy_global_to_shared(x_desc, [pid_m * BT + c * XT, kk * BK], bar,
                                                    _fp4_x(x_bufs, v, c, 1, XT, CHUNKS, JOIN), pred=c < n_ch)
                tma.async_copy_global_to_shared(w0_desc, [(base0 + piece) * 64, col], bar, w0_bufs.index(v))
                tma.async_copy_global_to_shared(w0_desc, [(base1 + piece) * 64, col], bar, w1_bufs.index(v))
                if S_SMEM:  # the step's block scales (a step past K: the last step's again, in bounds)
                    _fp4_s_copy(s_bufs.index(v), s_ptr, e, pid_n * (64 if GATED else 128), N,
                                gl.minimum(kk, n_k - 1), stride_se, stride_sr, stride_sk, GATED, NV)
            if S_SMEM:  # then this thread's one cp.async arrival for the slot
                async_copy.mbarrier_arrive(bar, increment_count=False)
            it += 1
    return it


@gluon.jit
def _fp4_s_copy(s_buf, s_ptr, e, n0, N, kk, stride_se, stride_sr, stride_sk, GATED: gl.constexpr, NV: gl.constexpr):
    """``S_SMEM``: cp.async of K step ``kk``'s block scales of a tile's 128 weight rows (the loader warp's 32 threads)
    into its ring slot's ``s_buf``: rows ``q 64 + i`` = ring ``q``'s box row ``i`` -- gated, gate rows ``n0 + i``
    (q 0) and up rows ``N + n0 + i`` (q 1); otherwise rows ``n0 + 64 q + i``. MX (row-major UE8M0 codes,
    ``s_buf`` [128] int32): each row's aligned 4-byte word holding the step's two codes (from byte ``2 kk % 4``;
    scale rows are 16-byte padded, so the word never leaves its row). NVFP4 (K-major e4m3, ``s_buf`` [4, 128]):
    the step's 4 scale columns in 16-byte runs of 16 rows. Rows past N (a non-gated tile's last 64 when N is 64
    mod 128; never stored) read rows before N instead: in bounds, finite. Needs the scale tensor 16-byte aligned
    with strides and N multiples of 16 (``triton_moe._ws_fp4_scales_copyable``)."""
    sbase = s_ptr + e.to(gl.int64) * stride_se
    if NV:
        nl: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, 1, 1, 16], threads_per_warp=[4, 2, 4, 1],
                                            warps_per_cta=[1, 1, 1, 1], order=[3, 2, 1, 0])
        c4 = gl.arange(0, 4, layout=gl.SliceLayout(1, gl.SliceLayout(2, gl.SliceLayout(3, nl))))
        q2 = gl.arange(0, 2, layout=gl.SliceLayout(1, gl.SliceLayout(0, gl.SliceLayout(3, nl))))
        g4 = gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(0, gl.SliceLayout(3, nl))))
        b16 = gl.arange(0, 16, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(2, nl))))
        if GATED:
            rg = (n0 + q2 * N)[:, None] + 16 * g4[None, :]  # [2, 4]: each 16-row run's first row
        else:
            rg = (n0 + q2 * 64)[:, None] + 16 * g4[None, :]
            rg = gl.where(rg < N, rg, N - 16)
        ptrs = (sbase + ((4 * kk + c4).to(gl.int64) * stride_sk)[:, None, None, None] + rg[None, :, :, None]
                + b16[None, None, None, :])
        async_copy.async_copy_global_to_shared(s_buf.reshape([4, 2, 4, 16]), ptrs)
    else:
        ml: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, 1], threads_per_warp=[1, 32], warps_per_cta=[1, 1],
                                            order=[1, 0])
        q2 = gl.arange(0, 2, layout=gl.SliceLayout(1, ml))
        i64 = gl.arange(0, 64, layout=gl.SliceLayout(0, ml))
        if GATED:
            row = (n0 + q2 * N)[:, None] + i64[None, :]
        else:
            row = gl.minimum((n0 + q2 * 64)[:, None] + i64[None, :], N - 1)
        word = (kk * 2) // 4 * 4  # the row's 4-byte word holding the step's codes
        ptrs = (sbase + row.to(gl.int64) * stride_sr + word).to(gl.pointer_type(gl.int32))
        async_copy.async_copy_global_to_shared(s_buf.reshape([2, 64]), ptrs)


@gluon.jit
def _fp4_s_read(s_buf, kk, HALF: gl.constexpr, GATED: gl.constexpr, NV: gl.constexpr, BK: gl.constexpr,
                sl: gl.constexpr):
    """``S_SMEM``: this warpgroup's block scales of step ``kk`` from its ring slot's ``s_buf`` (:func:`_fp4_s_copy`)
    as :func:`_fp4_scales2` returns them from global memory -- (gate / ring-0 rows, up / ring-1 rows), each [RW,
    BK / 16] in ``sl`` (:func:`_fp4_s_rows`; one set when not gated, returned twice)."""
    RW: gl.constexpr = 32 if GATED else 64
    sa = _fp4_s_rows(s_buf, kk, (32 if GATED else 64) * HALF, RW, NV, BK, sl)
    sb = sa
    if GATED:
        sb = _fp4_s_rows(s_buf, kk, 64 + 32 * HALF, RW, NV, BK, sl)
    return sa, sb


@gluon.jit
def _fp4_s_rows(s_buf, kk, ROW0: gl.constexpr, RW: gl.constexpr, NV: gl.constexpr, BK: gl.constexpr,
                sl: gl.constexpr):
    """``S_SMEM``: step ``kk``'s block scales of the slot's rows ``ROW0 + [0, RW)`` (:func:`_fp4_s_copy`'s order:
    ``q 64 + i`` = ring ``q``'s box row ``i``), [RW, BK / 16] in ``sl``: MX the codes (byte ``2 kk % 4 + j // 2`` of
    the rows' words), NVFP4 the e4m3 scales."""
    if NV:
        sc = s_buf.slice(ROW0, RW, dim=1).permute([1, 0]).load(sl)
    else:
        sh = 8 * ((2 * kk) % 4 + gl.arange(0, BK // 16, layout=gl.SliceLayout(0, sl)) // 2)
        sc = (s_buf.slice(ROW0, RW).load(gl.SliceLayout(1, sl))[:, None] >> sh[None, :]) & 0xFF
    return sc


@gluon.jit
def _fp4_scale_cols(j, stride_sk, NV: gl.constexpr):
    """A thread's 16 values ``j`` of a 64-wide K block -> (the offset of their block scale along K, a 64-wide block's
    step): NVFP4 block ``j`` of the K-major scales (``stride_sk`` apart); MX block ``j // 2`` of the row-major ones.
    Both FP4 kernels'."""
    if NV:
        return j * stride_sk, 4 * stride_sk
    else:
        return j // 2, 2


@gluon.jit
def _fp4_scale_factor(sc, FOLD: gl.constexpr, NV: gl.constexpr):
    """Block scales as loaded (NVFP4: e4m3; MX: UE8M0 codes) -> the BF16 factor of ``_e2m1x4_bf16_nib``'s values:
    NVFP4 ``s * 2^110`` and MX with ``FOLD`` ``2^(e - 17)`` (exact in BF16; the values ``e2m1 * 2^-126`` from the
    non-restoring converter, the accumulator carries the other 2^16), otherwise ``2^(e - 127)`` (the converter
    restores). Also the decode kernel's (``_ws_fp4_dec``)."""
    if NV:  # e4m3 * 2^110 (exact in bf16)
        f = (sc.to(gl.float32) * _NV_SCALE_BIAS).to(gl.bfloat16)
    elif FOLD:
        f = ((sc.to(gl.int32) + _MX_FOLD_EXP_BIAS) << 7).to(gl.int16).to(gl.bfloat16, bitcast=True)
    else:
        f = _bs._ue8m0_to_bf16(sc.to(gl.int32))
    return f


@gluon.jit
def _fp4_scales(sc_rows, sc_ok, kk, s_step, NV: gl.constexpr):
    """The block scales of K step ``kk`` as loaded (MX: UE8M0 codes; NVFP4: e4m3), [RW, BK / 16] (``sc_rows``,
    ``sc_ok``, ``s_step``: :func:`_fp4_tile`'s)."""
    if NV:  # (e4m3 scales: a float fill)
        sc = gl.load(sc_rows + kk * s_step, mask=sc_ok, other=0.0)
    else:
        sc = gl.load(sc_rows + kk * s_step, mask=sc_ok, other=0)
    return sc


@gluon.jit
def _fp4_scales2(sc_a, sc_b, ok_a, kk, s_step, NV: gl.constexpr, GATED: gl.constexpr):
    """Step ``kk``'s block scales of a warpgroup's gate (``sc_a``) and up (``sc_b``) rows -- one set when not gated
    (returned twice)."""
    sa = _fp4_scales(sc_a, ok_a, kk, s_step, NV)
    sb = sa
    if GATED:
        sb = _fp4_scales(sc_b, ok_a, kk, s_step, NV)
    return sa, sb


@gluon.jit
def _fp4_tile(w_buf, row0: gl.constexpr, sc, RW: gl.constexpr, BK: gl.constexpr, SWZ: gl.constexpr,
              FOLD: gl.constexpr, NV: gl.constexpr, wl: gl.constexpr, PAIRS: gl.constexpr = False):
    """Rows ``row0 + [0, RW)`` of one K step's 64-row box (the ring's 16-bit words), dequantized to BF16 [RW, BK]
    in K order. ``sc``: the rows' block scales of the step (:func:`_fp4_scales`, [RW, BK / 16]: a thread's 16
    values, MX block ``j // 2``, NVFP4 block ``j``; rows past N read 0, never stored). MX: UE8M0 codes, the value
    ``e2m1 * 2^(e - 127)`` (``FOLD``: ``2^-16`` times it). NVFP4 (``NV``): e4m3 scales, the value
    ``2^-16 * e2m1 * s`` (the global ``1 / g`` and the 2^16 go to the accumulator), as the Triton kernels do.
    ``PAIRS``: the tile in the pair order instead (:func:`pair8_cols`)."""
    BQ: gl.constexpr = BK // 16
    w = w_buf.reshape([64, BQ, 4]).slice(row0, RW).load(wl)
    f = _fp4_scale_factor(sc, FOLD, NV)[:, :, None]
    n0, n1, n2, n3 = _bs._e2m1x4_bf16_nib(w, not (FOLD or NV), SWZ)  # value s of word i: K 4 i + s
    v = gl.join(gl.join(n0 * f, n1 * f), gl.join(n2 * f, n3 * f))  # [RW, BQ, 4 words, s & 1, s >> 1]
    if PAIRS:  # each of the converter's registers -- value s of two consecutive words -- as two neighbours
        v6 = gl.reshape(v, [RW, BQ, 2, 2, 2, 2])  # [RW, BQ, word pair, word parity h, s & 1, s >> 1]
        t = gl.reshape(gl.permute(v6, [0, 1, 2, 5, 4, 3]), [RW, BK])
    else:
        t = gl.reshape(gl.permute(v, [0, 1, 2, 4, 3]), [RW, BK])
    return t


@gluon.jit
def _fp4_scale_ptrs(s_ptr, e, n0, N, r, jq, stride_se, stride_sr, HALF: gl.constexpr, GATED: gl.constexpr):
    """This warpgroup's scale pointers for a tile of columns from ``n0``: gated, gate rows n0 + 32 HALF + r (ring
    0) and the same up rows N + ... (ring 1); otherwise rows n0 + 64 HALF + r (ring HALF); ``jq``: the K offsets
    of the step's blocks (MX: ``j // 2``; NVFP4: ``j`` times the scales' K stride). A non-gated tile's last
    64 rows may lie past N (N = 64 mod 128): ``ok`` masks their scale reads (the last expert's would leave the
    tensor); gated tiles (N a multiple of 64) are always whole."""
    s_e = s_ptr + e.to(gl.int64) * stride_se
    if GATED:
        rows_a = n0 + HALF * 32 + r
        rows_b = N + rows_a
    else:
        rows_a = n0 + HALF * 64 + r
        rows_b = rows_a
    sc_a = s_e + rows_a.to(gl.int64)[:, None] * stride_sr + jq[None, :]
    sc_b = s_e + rows_b.to(gl.int64)[:, None] * stride_sr + jq[None, :]
    ok = (rows_a < N)[:, None] & (jq >= 0)[None, :]
    return sc_a, sc_b, ok


@gluon.jit
def _fp4_slot_scales(sc_a, sc_b, ok_a, k0, n_k, s_step, NV: gl.constexpr, GATED: gl.constexpr, KS: gl.constexpr):
    """The block scales of the ring slot from K step ``k0`` (steps past the last: the last step's, in bounds):
    (``sa``, ``sb``) of step ``k0`` and, ``KS`` 2, (``sa1``, ``sb1``) of step ``k0 + 1`` (otherwise the first pair
    again)."""
    sa, sb = _fp4_scales2(sc_a, sc_b, ok_a, gl.minimum(k0, n_k - 1), s_step, NV, GATED)
    if KS == 2:
        sa1, sb1 = _fp4_scales2(sc_a, sc_b, ok_a, gl.minimum(k0 + 1, n_k - 1), s_step, NV, GATED)
    else:
        sa1 = sa
        sb1 = sb
    return sa, sb, sa1, sb1


@gluon.jit
def _fp4_first_scales(sc_a, sc_b, ok_a, n_k, s_step, NV: gl.constexpr, GATED: gl.constexpr, SC_AHEAD: gl.constexpr,
                      KS: gl.constexpr = 1):
    """What :func:`_fp4_chunk_tile`'s K loop takes as ``sa`` / ``sb`` (and, ``KS`` 2, ``sa1`` / ``sb1``) at a
    tile's first ring slot: with ``SC_AHEAD`` the block scales of K step 0 (and 1), otherwise the scale pointers
    (unused: each step then loads its own)."""
    if SC_AHEAD:
        sa, sb, sa1, sb1 = _fp4_slot_scales(sc_a, sc_b, ok_a, 0, n_k, s_step, NV, GATED, KS)
    else:
        sa = sc_a
        sb = sc_b
        sa1 = sc_a
        sb1 = sc_b
    return sa, sb, sa1, sb1


@gluon.jit
def _fp4_convert(w0_bufs, w1_bufs, d, v, sa, sb, sc_a, sc_b, ok_a, kk, s_step, HALF: gl.constexpr,
                 GATED: gl.constexpr, BK: gl.constexpr, SWZ: gl.constexpr, FOLD: gl.constexpr, NV: gl.constexpr,
                 wl: gl.constexpr, SC_AHEAD: gl.constexpr, s_bufs=0, S_SMEM: gl.constexpr = False,
                 ONE_STORE: gl.constexpr = False, PAIRS: gl.constexpr = False):
    """K step ``kk``'s conversion of this warpgroup's 64 weight rows of ring sub-slot ``v`` into its shared tile
    ``d`` (gated: 32 gate rows of ring 0 over 32 up rows of ring 1). The block scales: ``S_SMEM``, from the sub-slot
    (:func:`_fp4_s_read`); ``SC_AHEAD``, ``sa`` / ``sb`` (loaded a slot before); otherwise loaded here, step ``kk``
    of ``sc_a`` / ``sc_b``. ``ONE_STORE`` (gated): the gate and up halves joined in registers and stored by one
    store -- two stores into the same buffer make Triton's shared-memory hazard analysis put a warpgroup barrier
    between them (it cannot tell the halves apart). ``PAIRS``: the tile in the pair order (:func:`pair8_cols`)."""
    if S_SMEM:
        sa, sb = _fp4_s_read(s_bufs.index(v), kk, HALF, GATED, NV, BK, gl.SliceLayout(2, wl))
    elif not SC_AHEAD:
        sa, sb = _fp4_scales2(sc_a, sc_b, ok_a, kk, s_step, NV, GATED)
    if GATED and ONE_STORE:  # rows h 32 + r: the gate half, then the up half
        tg = _fp4_tile(w0_bufs.index(v), HALF * 32, sa, 32, BK, SWZ, FOLD, NV, wl, PAIRS)
        tu = _fp4_tile(w1_bufs.index(v), HALF * 32, sb, 32, BK, SWZ, FOLD, NV, wl, PAIRS)
        d.store(gl.reshape(gl.permute(gl.join(tg, tu), [2, 0, 1]), [64, BK]))
    elif GATED:
        d.slice(0, 32).store(_fp4_tile(w0_bufs.index(v), HALF * 32, sa, 32, BK, SWZ, FOLD, NV, wl, PAIRS))
        d.slice(32, 32).store(_fp4_tile(w1_bufs.index(v), HALF * 32, sb, 32, BK, SWZ, FOLD, NV, wl, PAIRS))
    elif HALF == 0:
        d.store(_fp4_tile(w0_bufs.index(v), 0, sa, 64, BK, SWZ, FOLD, NV, wl, PAIRS))
    else:
        d.store(_fp4_tile(w1_bufs.index(v), 0, sa, 64, BK, SWZ, FOLD, NV, wl, PAIRS))


@gluon.jit
def _fp4_next_scales(sa, sb, sa1, sb1, sc_a, sc_b, ok_a, k2, n_k, s_step, NV: gl.constexpr, GATED: gl.constexpr,
                     SC_AHEAD: gl.constexpr, S_SMEM: gl.constexpr, KS: gl.constexpr):
    """``SC_AHEAD`` (and not ``S_SMEM``): the block scales of ring slot ``k2 + 1``'s steps
    (:func:`_fp4_slot_scales`), loaded before slot ``k2``'s ring wait; otherwise the ones given."""
    if SC_AHEAD and not S_SMEM:
        sa, sb, sa1, sb1 = _fp4_slot_scales(sc_a, sc_b, ok_a, (k2 + 1) * KS, n_k, s_step, NV, GATED, KS)
    return sa, sb, sa1, sb1


@gluon.jit
def _fp4_consumer(x_bufs, w0_bufs, w1_bufs, d_bufs, ready, empty, out_ptr, s_ptr, bias_ptr, topk_w_ptr,
                  sorted_ids_ptr, block_expert_ptr, num_post_padded_ptr, N, K, num_slots, stride_se, stride_sr,
                  stride_om, stride_be, act_alpha, act_beta, act_limit, gs_ptr, stride_sk, HALF: gl.constexpr,
                  BT: gl.constexpr, E_LOC: gl.constexpr, ACT: gl.constexpr, GATED: gl.constexpr,
                  HAS_BIAS: gl.constexpr, WEIGHT_ON_INPUT: gl.constexpr, MUL_ROUTING_WEIGHT: gl.constexpr,
                  ROUND_DTYPE: gl.constexpr, SWZ: gl.constexpr, FOLD: gl.constexpr, NC: gl.constexpr, BK: gl.constexpr,
                  STAGES: gl.constexpr, GROUP_M: gl.constexpr, CHUNKS: gl.constexpr, NV: gl.constexpr,
                  OUT_PADDED: gl.constexpr, SC_AHEAD: gl.constexpr, JOIN: gl.constexpr, tiles=0, tq_ready=0,
                  tq_empty=0, DYN: gl.constexpr = False, TQ: gl.constexpr = 1, s_bufs=0,
                  S_SMEM: gl.constexpr = False, ONE_STORE: gl.constexpr = False, KS: gl.constexpr = 1,
                  d_bufs1=0, PAIRS: gl.constexpr = False, OUT_PAIRS: gl.constexpr = False):
    """Consumer warpgroup ``HALF``: per K step its 64 weight rows converted into its shared tile (two buffers in
    turn), one asynchronous wgmma with the step's input tile, at most one step in flight; then the epilogue.
    ``CHUNKS`` > 1 (``set_ws_fp4_chunks``; MXFP4's default 2 since the thirty-second session): the block's BT token
    rows as that many wgmmas of BT / CHUNKS rows into as many accumulators, only the chunks that hold real rows
    multiplied and stored (an expert's last block
    holds its rows first; the loader skipped the others' input). Same products, same order: the same bits. ``DYN``:
    the tiles in the order the loader fetched them, from the tile queue (``_ws_gemm._ws_tile_take``) until one past
    the last. ``S_SMEM``: the block scales from the ring slots (``s_bufs``), none from global memory. ``KS`` 2:
    two K steps a ring slot (:func:`_fp4_chunk_tile`), the second one's converted tiles in ``d_bufs1``. ``PAIRS`` /
    ``OUT_PAIRS``: :func:`_ws_fp4_kernel`'s."""
    XT: gl.constexpr = BT // CHUNKS  # token rows of one wgmma
    BQ: gl.constexpr = BK // 16
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, XT, 16])
    # a thread holds 4 consecutive 16-bit words (16 values, inside one 32-wide scale block) of one row
    wl: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, 1, 4], threads_per_warp=[8, BQ, 32 // (8 * BQ)],
                                        warps_per_cta=[4, 1, 1], order=[2, 1, 0])
    sl: gl.constexpr = gl.SliceLayout(2, wl)
    RH: gl.constexpr = 32 if GATED else 64  # rows of each weight slice this warpgroup converts
    num_m = gl.load(num_post_padded_ptr) // BT
    num_n = gl.cdiv(N, NC)
    n_k = K // BK
    r = gl.arange(0, RH, layout=gl.SliceLayout(1, sl))
    jq, s_step = _fp4_scale_cols(gl.arange(0, BQ, layout=gl.SliceLayout(0, sl)), stride_sk, NV)  # (BK 64: BQ 4)
    rt = (x_bufs, w0_bufs, w1_bufs, d_bufs, ready, empty, out_ptr, s_ptr, bias_ptr, topk_w_ptr, sorted_ids_ptr,
          block_expert_ptr, gs_ptr, N, num_slots, stride_se, stride_sr, stride_om, stride_be, act_alpha, act_beta,
          act_limit, r, jq, s_step, n_k, s_bufs, d_bufs1)
    it = 0
    if DYN:
        q = 0
        t = _ws_tile_take(tiles, tq_ready, tq_empty, q, TQ)
        while t < num_m * num_n:
            it = _fp4_consume_tile(t, it, num_m, num_n, rt, HALF, XT, E_LOC, ACT, GATED, HAS_BIAS, WEIGHT_ON_INPUT,
                                   MUL_ROUTING_WEIGHT, ROUND_DTYPE, SWZ, FOLD, NC, BK, STAGES, GROUP_M, CHUNKS, NV,
                                   OUT_PADDED, SC_AHEAD, JOIN, wl, acc_l, S_SMEM, ONE_STORE, KS, PAIRS, OUT_PAIRS)
            q += 1
            t = _ws_tile_take(tiles, tq_ready, tq_empty, q, TQ)
    else:
        for t in range(gl.program_id(0), num_m * num_n, gl.num_programs(0)):
            it = _fp4_consume_tile(t, it, num_m, num_n, rt, HALF, XT, E_LOC, ACT, GATED, HAS_BIAS, WEIGHT_ON_INPUT,
                                   MUL_ROUTING_WEIGHT, ROUND_DTYPE, SWZ, FOLD, NC, BK, STAGES, GROUP_M, CHUNKS, NV,
                                   OUT_PADDED, SC_AHEAD, JOIN, wl, acc_l, S_SMEM, ONE_STORE, KS, PAIRS, OUT_PAIRS)


@gluon.jit
def _fp4_consume_tile(t, it, num_m, num_n, rt, HALF: gl.constexpr, XT: gl.constexpr, E_LOC: gl.constexpr,
                      ACT: gl.constexpr, GATED: gl.constexpr, HAS_BIAS: gl.constexpr, WEIGHT_ON_INPUT: gl.constexpr,
                      MUL_ROUTING_WEIGHT: gl.constexpr, ROUND_DTYPE: gl.constexpr, SWZ: gl.constexpr,
                      FOLD: gl.constexpr, NC: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
                      GROUP_M: gl.constexpr, CHUNKS: gl.constexpr, NV: gl.constexpr, OUT_PADDED: gl.constexpr,
                      SC_AHEAD: gl.constexpr, JOIN: gl.constexpr, wl: gl.constexpr, acc_l: gl.constexpr,
                      S_SMEM: gl.constexpr = False, ONE_STORE: gl.constexpr = False, KS: gl.constexpr = 1,
                      PAIRS: gl.constexpr = False, OUT_PAIRS: gl.constexpr = False):
    """:func:`_fp4_consumer`'s work for tile ``t`` (its runtime arguments as the tuple ``rt``): the tile's scale
    pointers and chunk count, then :func:`_fp4_chunk_tile` (nothing for a block of a non-local expert). Returns the
    next ring step."""
    (x_bufs, w0_bufs, w1_bufs, d_bufs, ready, empty, out_ptr, s_ptr, bias_ptr, topk_w_ptr, sorted_ids_ptr,
     block_expert_ptr, gs_ptr, N, num_slots, stride_se, stride_sr, stride_om, stride_be, act_alpha, act_beta,
     act_limit, r, jq, s_step, n_k, s_bufs, d_bufs1) = rt
    pid_m, pid_n = _tile_ids(t, num_m, num_n, GROUP_M)
    e = gl.load(block_expert_ptr + pid_m)
    if e < E_LOC:
        n0 = pid_n * NC
        sc_a, sc_b, ok_a = _fp4_scale_ptrs(s_ptr, e, n0, N, r, jq, stride_se, stride_sr, HALF, GATED)
        n_ch = 1  # (whole tiles: a constant, the loop below one direct call)
        if CHUNKS > 1:
            n_ch = _fp4_chunk_count(sorted_ids_ptr, pid_m, num_slots, XT, CHUNKS, "")
        # one instance a chunk count, each with only its accumulators live (zeros kept live for unused chunks
        # made ptxas move them inside the wgmma pipeline and serialize it, C7515)
        for nch in gl.static_range(1, CHUNKS + 1):
            if n_ch == nch:
                it = _fp4_chunk_tile(nch, e, pid_m, n0, x_bufs, w0_bufs, w1_bufs, d_bufs, ready, empty, it, sc_a,
                                     sc_b, ok_a, n_k, s_step, out_ptr, bias_ptr, topk_w_ptr, sorted_ids_ptr, gs_ptr,
                                     N, num_slots, stride_om, stride_be, act_alpha, act_beta, act_limit, HALF, XT,
                                     CHUNKS, ACT, GATED, HAS_BIAS, WEIGHT_ON_INPUT, MUL_ROUTING_WEIGHT,
                                     ROUND_DTYPE, BK, SWZ, FOLD, NV, STAGES, wl, acc_l, OUT_PADDED, SC_AHEAD, JOIN,
                                     s_bufs, S_SMEM, ONE_STORE, KS, d_bufs1, PAIRS, OUT_PAIRS)
    return it


@gluon.jit
def _fp4_chunk_tile(NCH: gl.constexpr, e, pid_m, n0, x_bufs, w0_bufs, w1_bufs, d_bufs, ready, empty, it, sc_a, sc_b,
                    ok_a, n_k, s_step, out_ptr, bias_ptr, topk_w_ptr, sorted_ids_ptr, gs_ptr, N, num_slots, stride_om,
                    stride_be, act_alpha, act_beta, act_limit, HALF: gl.constexpr, XT: gl.constexpr,
                    CHUNKS: gl.constexpr, ACT: gl.constexpr, GATED: gl.constexpr, HAS_BIAS: gl.constexpr,
                    WEIGHT_ON_INPUT: gl.constexpr, MUL_ROUTING_WEIGHT: gl.constexpr, ROUND_DTYPE: gl.constexpr,
                    BK: gl.constexpr, SWZ: gl.constexpr, FOLD: gl.constexpr, NV: gl.constexpr, STAGES: gl.constexpr,
                    wl: gl.constexpr, acc_l: gl.constexpr, OUT_PADDED: gl.constexpr, SC_AHEAD: gl.constexpr,
                    JOIN: gl.constexpr, s_bufs=0, S_SMEM: gl.constexpr = False, ONE_STORE: gl.constexpr = False,
                    KS: gl.constexpr = 1, d_bufs1=0, PAIRS: gl.constexpr = False, OUT_PAIRS: gl.constexpr = False):
    """One tile over its first ``NCH`` chunks (those with real rows): per K step its wgmmas, in flight while the next
    step converts (the wait retires the step before: its ring slot is released and its tile buffer reused; only the
    accumulators in use are its dependencies); then each accumulator's epilogue. Without ``JOIN`` one wgmma and
    accumulator a chunk (input chunk c of ring slot s: ``x_bufs[s * CHUNKS + c]``), chunk c's epilogue the XT-row
    block ``CHUNKS pid_m + c``. ``JOIN`` (:func:`_fp4_x`: a slot's chunks one buffer; 4 chunks of 64 rows): the
    chunks multiplied by one wgmma as wide as they are -- 64, 128 or 256 token rows; 3 chunks as 128 + 64 (a tensor's
    sizes are powers of two) -- instead of one 64-row wgmma a chunk, whose A operand (the converted weights) is
    re-read from shared memory for each. Each token row's sum runs over the same K steps in the same order either
    way: the bits of whole tiles. ``KS`` 2 (``block_k`` 128): a ring slot's two K steps converted behind one ring
    wait, fence and warpgroup barrier, their wgmmas issued together (each accumulator's in K order), one wait a slot;
    a step past K (n_k odd) adds zero products -- exactly, as the GPU test checks. Returns ``it``."""
    NA: gl.constexpr = (2 if NCH == 3 else 1) if JOIN else NCH  # accumulators (wgmmas a step)
    W0: gl.constexpr = XT * (2 if NCH == 3 else NCH) if JOIN else XT  # token rows of the first; the others XT
    C1: gl.constexpr = 2 if JOIN else 1  # the chunk of the second (the third and fourth: chunks 2, 3)
    acc_l0: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, W0, 16])
    acc0 = gl.zeros((64, W0), dtype=gl.float32, layout=acc_l0)
    if NA > 1:
        acc1 = gl.zeros((64, XT), dtype=gl.float32, layout=acc_l)
    if NA > 2:
        acc2 = gl.zeros((64, XT), dtype=gl.float32, layout=acc_l)
    if NA > 3:
        acc3 = gl.zeros((64, XT), dtype=gl.float32, layout=acc_l)
    sa, sb, sa1, sb1 = _fp4_first_scales(sc_a, sc_b, ok_a, n_k, s_step, NV, GATED, SC_AHEAD and not S_SMEM, KS)
    for k2 in range(gl.cdiv(n_k, KS)):
        s, ph = _ring_pos(it, STAGES)  # (unsigned: 8-11 instructions a step fewer than it % STAGES, it // STAGES)
        # this slot's A operands: one ring wait, its KS steps converted (a step past K -- n_k odd -- converts the
        # last step's scales with the next tile's values: finite, times zero inputs), one fence and warpgroup
        # barrier. The second step's tile is another buffer (d_bufs1), so Triton's hazard analysis puts no barrier
        # between the two steps' stores.
        k0 = k2 * KS
        di = _ring_pos(it, 2)[0]
        na, nb, na1, nb1 = _fp4_next_scales(sa, sb, sa1, sb1, sc_a, sc_b, ok_a, k2, n_k, s_step, NV, GATED, SC_AHEAD,
                                            S_SMEM, KS)
        mbarrier.wait(ready.index(s), ph)
        _fp4_convert(w0_bufs, w1_bufs, d_bufs.index(di), s * KS, sa, sb, sc_a, sc_b, ok_a, k0, s_step, HALF, GATED,
                     BK, SWZ, FOLD, NV, wl, SC_AHEAD, s_bufs, S_SMEM, ONE_STORE, PAIRS)
        if KS == 2:
            _fp4_convert(w0_bufs, w1_bufs, d_bufs1.index(di), s * KS + 1, sa1, sb1, sc_a, sc_b, ok_a,
                         gl.minimum(k0 + 1, n_k - 1), s_step, HALF, GATED, BK, SWZ, FOLD, NV, wl, SC_AHEAD, s_bufs,
                         S_SMEM, ONE_STORE, PAIRS)
        fence_async_shared()
        gl.thread_barrier()  # the warpgroup's stores are in before its wgmmas read them
        sa, sb, sa1, sb1 = na, nb, na1, nb1
        for i in gl.static_range(KS):  # each accumulator's K steps in order
            if i == 0:
                d = d_bufs.index(di)
            else:
                d = d_bufs1.index(di)
            v = s * KS + i
            acc0 = warpgroup_mma(d, _fp4_x(x_bufs, v, 0, W0 // XT, XT, CHUNKS, JOIN).permute((1, 0)), acc0,
                                 is_async=True)
            if NA > 1:
                acc1 = warpgroup_mma(d, _fp4_x(x_bufs, v, C1, 1, XT, CHUNKS, JOIN).permute((1, 0)), acc1,
                                     is_async=True)
            if NA > 2:
                acc2 = warpgroup_mma(d, _fp4_x(x_bufs, v, 2, 1, XT, CHUNKS, JOIN).permute((1, 0)), acc2,
                                     is_async=True)
            if NA > 3:
                acc3 = warpgroup_mma(d, _fp4_x(x_bufs, v, 3, 1, XT, CHUNKS, JOIN).permute((1, 0)), acc3,
                                     is_async=True)
        # the slot before retired (its wgmmas; this slot's in flight while the next converts)
        if NA == 1:
            acc0 = warpgroup_mma_wait(num_outstanding=KS, deps=(acc0,))
        if NA == 2:
            acc0, acc1 = warpgroup_mma_wait(num_outstanding=2 * KS, deps=(acc0, acc1))
        if NA == 3:
            acc0, acc1, acc2 = warpgroup_mma_wait(num_outstanding=3 * KS, deps=(acc0, acc1, acc2))
        if NA == 4:
            acc0, acc1, acc2, acc3 = warpgroup_mma_wait(num_outstanding=4 * KS, deps=(acc0, acc1, acc2, acc3))
        if k2 > 0:  # the slot before is free, its tile buffers are reused next slot
            mbarrier.arrive(empty.index(_ring_prev(it, STAGES)), count=1)
        it += 1
    if NA == 1:
        acc0 = warpgroup_mma_wait(num_outstanding=0, deps=(acc0,))
    if NA == 2:
        acc0, acc1 = warpgroup_mma_wait(num_outstanding=0, deps=(acc0, acc1))
    if NA == 3:
        acc0, acc1, acc2 = warpgroup_mma_wait(num_outstanding=0, deps=(acc0, acc1, acc2))
    if NA == 4:
        acc0, acc1, acc2, acc3 = warpgroup_mma_wait(num_outstanding=0, deps=(acc0, acc1, acc2, acc3))
    mbarrier.arrive(empty.index(_ring_prev(it, STAGES)), count=1)
    # (the first accumulator: block (CHUNKS XT / W0) pid_m of W0 rows; the others chunk c's XT-row block)
    _fp4_epilogue(_fp4_acc_factors(acc0, gs_ptr, e, FOLD, NV), e, (CHUNKS * XT // W0) * pid_m, n0, out_ptr, bias_ptr,
                  topk_w_ptr, sorted_ids_ptr, N, num_slots, stride_om, stride_be, act_alpha, act_beta, act_limit, HALF,
                  W0, ACT, GATED, HAS_BIAS, WEIGHT_ON_INPUT, MUL_ROUTING_WEIGHT, ROUND_DTYPE, False, OUT_PADDED,
                  OUT_PAIRS)
    for a in gl.static_range(1, NA):  # (the accumulators past NA do not exist: each one's epilogue by name)
        if a == 1:
            acc = acc1
            c = C1
        elif a == 2:
            acc = acc2
            c = 2
        else:
            acc = acc3
            c = 3
        _fp4_epilogue(_fp4_acc_factors(acc, gs_ptr, e, FOLD, NV), e, CHUNKS * pid_m + c, n0, out_ptr, bias_ptr,
                      topk_w_ptr, sorted_ids_ptr, N, num_slots, stride_om, stride_be, act_alpha, act_beta, act_limit,
                      HALF, XT, ACT, GATED, HAS_BIAS, WEIGHT_ON_INPUT, MUL_ROUTING_WEIGHT, ROUND_DTYPE, False,
                      OUT_PADDED, OUT_PAIRS)
    return it


@gluon.jit
def _fp4_acc_factors(acc, gs_ptr, e, FOLD: gl.constexpr, NV: gl.constexpr):
    """The accumulator's per-tensor factors: the 2^16 that folded tiles are short of (MX ``FOLD``), for NVFP4 with
    its ``1 / g[e]`` as one multiply by ``RN(2^16 / g)`` -- within an ulp of the Triton kernels' IEEE division
    (``_moe_gemm._micro_global_scales``), whose sums run in another order anyway; a correctly rounded division
    (Markstein's, ``_quant._div_by_rcp``) cost ~13 instructions a value (sm_90 SASS: the epilogue 1.7x longer)."""
    if NV:
        acc = acc * (_ACC_FACTOR / gl.load(gs_ptr + e))
    elif FOLD:
        acc = acc * _ACC_FACTOR
    return acc


@gluon.jit
def _split_gate_up(acc, BT: gl.constexpr):
    """A swapped gated tile's accumulator [64, BT] (rows 0-31 gate, 32-63 the same up columns) -> (gate, up), [32, BT]
    each (also ``kernels/_ws_dec.py``'s epilogue)."""
    l3: gl.constexpr = gl.BlockedLayout(size_per_thread=[2, 4, 1], threads_per_warp=[1, 8, 4], warps_per_cta=[1, 1, 4],
                                        order=[0, 1, 2])
    a3 = gl.convert_layout(gl.reshape(acc, [2, 32, BT]), l3)
    return gl.split(gl.permute(a3, [1, 2, 0]))


@gluon.jit
def _fp4_epilogue(acc, e, pid_m, n0, out_ptr, bias_ptr, topk_w_ptr, sorted_ids_ptr, N, num_slots, stride_om,
                  stride_be, act_alpha, act_beta, act_limit, HALF: gl.constexpr, BT: gl.constexpr, ACT: gl.constexpr,
                  GATED: gl.constexpr, HAS_BIAS: gl.constexpr, WEIGHT_ON_INPUT: gl.constexpr,
                  MUL_ROUTING_WEIGHT: gl.constexpr, ROUND_DTYPE: gl.constexpr, OUT_PADDED_DOT: gl.constexpr = False,
                  OUT_PADDED: gl.constexpr = False, OUT_PAIRS: gl.constexpr = False):
    """acc [64 weight rows, BT token rows] -> out[slot, n]: routing weight on input, bias, activation (gated:
    rows 0-31 gate, 32-63 up), routing weight (GEMM2), rounding; each thread stores runs of 4 columns (8 with
    ``OUT_PAIRS``).
    ``OUT_PADDED_DOT`` (the FP4 decode kernel's GEMM1, ``kernels/_ws_fp4_dec.py``): out[p, d] at the rows' padded
    positions p, column n at its dot position d within its 64-wide block (n = 16 c + 8 m + 4 q + s -> d = 16 s +
    8 m + 2 c + q) -- GEMM2's input as its gather would write it; padding rows are not written. ``OUT_PADDED``
    (GEMM1 before this kernel's GEMM2): out[p, n] at the padded positions, columns in order -- with ``OUT_PAIRS``
    (GEMM2 ``PAIRS``) each 8 columns in the pair order (:func:`pair8_cols`), permuted in registers before the store."""
    RO: gl.constexpr = 32 if GATED else 64  # output columns of this warpgroup
    CR: gl.constexpr = 8 if OUT_PAIRS else 4  # (OUT_PAIRS: a thread's 8 columns, permuted among its registers)
    ol: gl.constexpr = gl.BlockedLayout(size_per_thread=[CR, 1], threads_per_warp=[RO // CR, 32 // (RO // CR)],
                                        warps_per_cta=[1, 4], order=[0, 1])
    if GATED:
        g, u = _split_gate_up(acc, BT)
        g = gl.convert_layout(g, ol)
        u = gl.convert_layout(u, ol)
    else:
        g = gl.convert_layout(acc, ol)
        u = g
    cols = n0 + HALF * RO + gl.arange(0, RO, layout=gl.SliceLayout(1, ol))
    n_ok = cols < N
    p = pid_m * BT + gl.arange(0, BT, layout=gl.SliceLayout(0, ol))
    slots = gl.load(sorted_ids_ptr + p)
    row_ok = slots < num_slots
    slots = gl.where(row_ok, slots, 0)
    if WEIGHT_ON_INPUT:  # Llama4: the routing weight scales the token before GEMM1 (top_k 1)
        tw = gl.load(topk_w_ptr + slots).to(gl.float32)[None, :]
        g = g * tw
        u = u * tw
    if HAS_BIAS:
        b_e = bias_ptr + e.to(gl.int64) * stride_be
        g = g + gl.load(b_e + cols, mask=n_ok, other=0.0).to(gl.float32)[:, None]
        if GATED:
            u = u + gl.load(b_e + N + cols, mask=n_ok, other=0.0).to(gl.float32)[:, None]
    if MUL_ROUTING_WEIGHT:  # GEMM2: after the bias
        g = g * gl.load(topk_w_ptr + slots).to(gl.float32)[None, :]
    h = _activation(g, u, ACT, act_alpha, act_beta, act_limit).to(ROUND_DTYPE)
    if OUT_PAIRS:  # column 8 g + 4 j + s to 8 g + 2 s + j
        h = gl.reshape(gl.permute(gl.reshape(h, [RO // 8, 2, 4, BT]), [0, 2, 1, 3]), [RO, BT])
        h = gl.convert_layout(h, ol)
    if OUT_PADDED_DOT:
        n = cols % 64
        dcol = cols - n + 16 * (n % 4) + 8 * ((n // 8) % 2) + 2 * (n // 16) + (n // 4) % 2
        offs = p.to(gl.int64)[None, :] * stride_om + dcol[:, None]
    elif OUT_PADDED:
        offs = p.to(gl.int64)[None, :] * stride_om + cols[:, None]
    else:
        offs = slots.to(gl.int64)[None, :] * stride_om + cols[:, None]
    gl.store(out_ptr + offs, h.to(out_ptr.dtype.element_ty), mask=n_ok[:, None] & row_ok[None, :])


@gluon.jit
def _ws_fp4_kernel(
    x_desc, w0_desc, out_ptr, s_ptr, bias_ptr, topk_w_ptr, sorted_ids_ptr, block_expert_ptr, num_post_padded_ptr,
    N, K, num_slots, R_TILES, K_PIECES, stride_se, stride_sr, stride_om, stride_be, act_alpha, act_beta, act_limit,
    gs_ptr, stride_sk, E_LOC: gl.constexpr, ACT: gl.constexpr, GATED: gl.constexpr, HAS_BIAS: gl.constexpr,
    WEIGHT_ON_INPUT: gl.constexpr, MUL_ROUTING_WEIGHT: gl.constexpr, ROUND_DTYPE: gl.constexpr, SWZ: gl.constexpr,
    FOLD: gl.constexpr, BK: gl.constexpr, TK: gl.constexpr, STAGES: gl.constexpr, GROUP_M: gl.constexpr,
    CHUNKS: gl.constexpr = 1, NV: gl.constexpr = False, OUT_PADDED: gl.constexpr = False,
    SC_AHEAD: gl.constexpr = True, JOIN: gl.constexpr = False, tile_ctr_ptr=0, DYN: gl.constexpr = False,
    S_SMEM: gl.constexpr = False, ONE_STORE: gl.constexpr = False, KS: gl.constexpr = 1,
    PAIRS: gl.constexpr = False, OUT_PAIRS: gl.constexpr = False,
):
    """One grouped MXFP4 (or with ``NV`` NVFP4) x BF16 GEMM + its epilogue, warp-specialized (module docstring).
    Launch with ``num_warps=4`` (the first consumer warpgroup; the second and the loader warp are workers) on
    ``min(tiles, SMs)`` programs. ``CHUNKS`` 2 / 4 (``x_desc``'s box is then that fraction of the block's token
    rows): a block multiplies and loads only its chunks that hold real rows. ``NV``: NVFP4 weights, ``s_ptr`` their
    e4m3 scales K-major (``stride_sk`` apart along K), ``gs_ptr`` their global scales [E]. ``OUT_PADDED`` (GEMM1
    before this kernel's GEMM2): ``out``
    is [blocks * BT, N], the rows at their block-padded positions -- GEMM2's input without a gather. ``SC_AHEAD``
    (``triton_moe.set_ws_fp4_scales_ahead``): a consumer loads K step k + 1's block scales from global memory before
    its ring wait of step k, so their latency overlaps step k's conversion and wgmma instead of stalling step k + 1's
    conversion (otherwise each step's scale load is issued after its wait and used ~40 instructions later). The same
    values: the same bits; NVFP4 1.13-1.19x at 4096 / 8192 tokens (H100, forty-first session). ``DYN``
    (``triton_moe.set_ws_dynamic_tiles``; by default from 64 local experts since the forty-sixth session): tiles by
    a global counter, ``tile_ctr_ptr`` int32 [2] (zeros; left zero), as ``_ws_gemm._ws_gemm_kernel``'s -- the
    programs that drew blocks with few real chunks take more tiles. ``S_SMEM``
    (``triton_moe.set_ws_fp4_scales_smem``): the block scales come through the ring -- the loader copies each
    step's by cp.async (:func:`_fp4_s_copy`), the consumers read them from shared memory after the ring wait
    (:func:`_fp4_s_read`) -- so no global load is in flight at the consumers' proxy fence (a ``MEMBAR`` that waits
    for them) and ``SC_AHEAD`` has nothing to do; as the FP4 decode kernel's ``S_SMEM``. Needs the scales 16-byte
    aligned with strides and N multiples of 16. ``ONE_STORE`` (``triton_moe.set_ws_fp4_one_store``; gated tiles):
    a consumer stores its converted gate and up halves by one store (:func:`_fp4_convert`), one warpgroup barrier a K
    step fewer. ``KS`` 2 (``KernelConfig.block_k`` 128, ``triton_moe.set_ws_fp4_block_k``): two 64-wide K steps a
    ring slot, converted behind one ring wait, fence and barrier (:func:`_fp4_chunk_tile`; 128-token tiles: the
    shared memory holds no more). ``PAIRS`` (``triton_moe.set_ws_fp4_pair_order``): the input's K in the pair order
    (:func:`pair8_cols`: its gather or GEMM1's ``OUT_PAIRS`` wrote it so), and each converted weight tile stored in
    the same order -- as the converter's registers come, with no byte permutes (sm_90: 16 ``PRMT`` a step fewer).
    ``OUT_PAIRS`` (with ``OUT_PADDED``): GEMM1's output in the pair order, for a ``PAIRS`` GEMM2."""
    BT: gl.constexpr = x_desc.block_type.shape[0] * CHUNKS
    NC: gl.constexpr = 64 if GATED else 128
    XT: gl.constexpr = x_desc.block_type.shape[0]
    SUB: gl.constexpr = STAGES * KS  # sub-slots: a ring slot's KS K steps
    if JOIN:  # a slot's chunks in one buffer: consecutive chunks are one wider wgmma operand
        x_bufs = gl.allocate_shared_memory(x_desc.dtype, [SUB, CHUNKS * XT, x_desc.block_type.shape[1]],
                                           x_desc.layout)
    else:
        x_bufs = gl.allocate_shared_memory(x_desc.dtype, [SUB * CHUNKS] + x_desc.block_type.shape, x_desc.layout)
    w0_bufs = gl.allocate_shared_memory(w0_desc.dtype, [SUB] + w0_desc.block_type.shape, w0_desc.layout)
    w1_bufs = gl.allocate_shared_memory(w0_desc.dtype, [SUB] + w0_desc.block_type.shape, w0_desc.layout)
    dl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([64, BK], gl.bfloat16)
    d0 = gl.allocate_shared_memory(gl.bfloat16, [2, 64, BK], dl)
    d1 = gl.allocate_shared_memory(gl.bfloat16, [2, 64, BK], dl)
    if KS == 2:  # the second K step's converted tiles, another buffer a warpgroup (no barrier between the stores)
        d0b = gl.allocate_shared_memory(gl.bfloat16, [2, 64, BK], dl)
        d1b = gl.allocate_shared_memory(gl.bfloat16, [2, 64, BK], dl)
    else:
        d0b = d0
        d1b = d1
    # the scales' ring (S_SMEM; otherwise one small unused slot, so that the partitions' arguments are the same):
    # MX one 4-byte word of codes a weight row, NVFP4 the step's 4 e4m3 columns of the 128 rows
    SST: gl.constexpr = SUB if S_SMEM else 1
    SR: gl.constexpr = 128 if S_SMEM else 16
    if NV:
        s_bufs = gl.allocate_shared_memory(gl.float8e4nv, [SST, 4, SR], gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0]))
    else:
        s_bufs = gl.allocate_shared_memory(gl.int32, [SST, SR], gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
    # both consumer warpgroups release a slot; S_SMEM: the loader warp's 32 cp.async arrivals besides the expect
    ready, empty = _ring_barriers(STAGES, 2, 33 if S_SMEM else 1)
    TQ: gl.constexpr = STAGES + 2  # (DYN: the tile queue's depth, as _ws_gemm_kernel's)
    tiles, tq_ready, tq_empty = _ws_tile_queue(TQ, DYN)
    gl.warp_specialize([
        (_fp4_consumer, (x_bufs, w0_bufs, w1_bufs, d0, ready, empty, out_ptr, s_ptr, bias_ptr, topk_w_ptr,
                         sorted_ids_ptr, block_expert_ptr, num_post_padded_ptr, N, K, num_slots, stride_se, stride_sr,
                         stride_om, stride_be, act_alpha, act_beta, act_limit, gs_ptr, stride_sk, 0, BT, E_LOC, ACT,
                         GATED, HAS_BIAS, WEIGHT_ON_INPUT, MUL_ROUTING_WEIGHT, ROUND_DTYPE, SWZ, FOLD, NC, BK, STAGES,
                         GROUP_M, CHUNKS, NV, OUT_PADDED, SC_AHEAD, JOIN, tiles, tq_ready, tq_empty, DYN, TQ,
                         s_bufs, S_SMEM, ONE_STORE, KS, d0b, PAIRS, OUT_PAIRS)),
        (_fp4_consumer, (x_bufs, w0_bufs, w1_bufs, d1, ready, empty, out_ptr, s_ptr, bias_ptr, topk_w_ptr,
                         sorted_ids_ptr, block_expert_ptr, num_post_padded_ptr, N, K, num_slots, stride_se, stride_sr,
                         stride_om, stride_be, act_alpha, act_beta, act_limit, gs_ptr, stride_sk, 1, BT, E_LOC, ACT,
                         GATED, HAS_BIAS, WEIGHT_ON_INPUT, MUL_ROUTING_WEIGHT, ROUND_DTYPE, SWZ, FOLD, NC, BK, STAGES,
                         GROUP_M, CHUNKS, NV, OUT_PADDED, SC_AHEAD, JOIN, tiles, tq_ready, tq_empty, DYN, TQ,
                         s_bufs, S_SMEM, ONE_STORE, KS, d1b, PAIRS, OUT_PAIRS)),
        (_fp4_loader, (x_desc, w0_desc, x_bufs, w0_bufs, w1_bufs, ready, empty, sorted_ids_ptr,
                       block_expert_ptr, num_post_padded_ptr, N, K, num_slots, R_TILES, K_PIECES, E_LOC, NC, BK, TK,
                       STAGES, GROUP_M, GATED, CHUNKS, JOIN, tile_ctr_ptr, tiles, tq_ready, tq_empty, DYN, TQ,
                       s_bufs, s_ptr, stride_se, stride_sr, stride_sk, NV, S_SMEM, KS)),
    ], [4, 1], [232, 40])
