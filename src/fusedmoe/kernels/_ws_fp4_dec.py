"""Warp-specialized grouped GEMMs for MXFP4 / NVFP4 weights x BF16 activations at DECODE on Hopper, in Gluon
(private; twenty-ninth session; first run on the H200 in the thirty-first: correct, but slower than the Triton
decode GEMMs, 0.47-0.97x at 1-64 tokens; with the block scales through the ring and per-thread slot release --
thirty-third session, measured in the thirty-fifth -- 1.04-1.27x at one token on 5 of 6 FP4 model points, still
behind at 4-64 tokens (BENCHMARKS.md), so by default it runs one-token calls). Launched by
``fusedmoe.backends.triton_moe`` for configs with ``warp_specialized`` and decode tiles, block_m 16:
``triton_moe.set_ws_fp4_decode`` / ``FUSEDMOE_WS_FP4_DECODE`` says for which calls ``auto_ws_fp4`` picks them,
and a tuned-table entry that names them runs whatever the switch says -- the tuner offers them since the
thirty-third session).

Why: the Triton decode GEMMs stream FP4 weights at 1.1-1.6 TB/s (one token) against a 3.4 TB/s target; Nsight
showed them latency-bound inside each K step, and a bare Triton stream of the same bytes at that program count
reaches only ~2.2 TB/s (BENCHMARKS.md, twenty-eighth session). Here each program is persistent with one TMA loader
warp that runs ``num_stages`` steps ahead of one consumer warpgroup, and 1-3 programs share an SM, so many weight
bytes are in flight per SM while the consumers convert. Prototype and its measurements:
``benchmarks/gluon_fp4_decode.py``.

The weights are the wgmma's REGISTER operand: a consumer thread loads its 16-bit words of the step's FP4 box from
shared memory (4 words = 16 K values of two rows), converts them with the library's PTX E2M1 converter and
multiplies the block scales in, and the result is already the A fragment -- no BF16 weight tile goes through
shared memory (stored and read back it would move 8x the FP4 bytes through shared memory each step: at HBM speed
more than its bandwidth). That needs the token rows in the "dot order" along K: within each 64-wide K block, dot
position ``16 s + 8 m + 2 c + p`` holds K position ``16 c + 8 m + 4 p + s`` (thread column c, word 2 m + p of its
four, nibble s of the word: the converter's output register j holds nibble s of two consecutive words, the
fragment's K pair). For GEMM1 the decode align's launch copies hidden so (``_align._dot64_rows``, programs of
its own next to the one-program align: no launch of its own) and the loader copies a block's rows from that copy by
cp.async (``X_GATHER``, the default where the align is one program); otherwise ``_align._gather_slot_rows_kernel``
with ``DOT64`` writes them into slot order for TMA boxes (a launch between the align and GEMM1: 3.4 us at one
gpt-oss-120b token on the H200, more than the kernel's gain over the Triton GEMM1). The weights keep
ExpertWeights' layout. Each block's A registers stay live -- a ``deps`` of the next wait -- until its wgmma
retired (ptxas would otherwise serialize the wgmmas: C7513), one wgmma in flight.

Data contract (``_ws_fp4`` conventions; ``E_LOC`` local experts, BT = 16 token rows a block):

    x_desc      TMA descriptor, block [BT, 64], over the GEMM's BF16 input rows gathered into block-padded slot
                order, each 64-wide K block in the dot order; ``x8_desc``: the same rows in blocks of 8 (the same
                layout), for blocks with at most 8 real rows. ``X_GATHER``: the descriptors only give the tiles'
                shape and layout; the rows come from ``x_ptr`` [T, K] (hidden in the dot order, row ``slot //
                TOP_K``, 16-byte aligned rows of stride ``stride_x``) by cp.async, padding rows and K blocks past
                ``n64`` zero-filled
    w_desc      TMA descriptor, block [32, 16] int16, over the FP4 values in the "tiled" / "swizzled" layout viewed
                as 16-bit words (``_ws_fp4``): a step's 64 weight rows are two boxes -- gated: 32 gate rows
                n0 + [0, 32) and the same up rows N + n0 + ...; otherwise rows n0 + [0, 64)
    s_ptr       block scales: MX UE8M0 [E, R, >= K / 32] row-major; NVFP4 e4m3 [E, R, K / 16] K-major
    gs_ptr      NVFP4: global scales [E] fp32
    out         [T*K, N] by slot (``_ws_fp4._fp4_epilogue``: GEMM1's activated intermediate, GEMM2's y); with
                ``OUT_PADDED_DOT`` (GEMM1 before this kernel's GEMM2) [blocks * BT, N] at the rows' padded
                positions, each 64-wide block in the dot order: GEMM2's ``x_desc`` rows without a gather
    part_ptr /  SPLIT > 1: fp32 partial sums [tiles * SPLIT, 64, BT] and int32 arrival counters [tiles] (zero,
    cnt_ptr     left zero): the last of a tile's SPLIT programs adds the partials in split order (the same bits
                whichever arrives last) and runs the epilogue

Work units: (block of BT slot rows, column tile of NC = 32 gated / 64 output columns, 1 / SPLIT of the K steps),
walked by ``program_id, program_id + num_programs, ...``; blocks of experts >= E_LOC skipped. A K step is KB
64-wide blocks (``block_k = 64 KB``); 64-wide blocks past K (K not a multiple of 64 KB) load token rows of zeros
(TMA's bounds) and multiply whatever finite words follow.

Limits (``kernel_configs.warp_specialized_problem``, ``triton_moe._ws_fp4_problem``): sm_90, MXFP4 / NVFP4 weights
in the tiled layout, BF16 activations and hidden states, K and N multiples of 64, block_m 16, block_k 64 / 128.
"""

import torch
import triton  # noqa: F401  (the Gluon runtime needs triton imported first)
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait

from . import _blockscaled as _bs
from ._ws_fp4 import _fp4_acc_factors, _fp4_chunk_count, _fp4_epilogue, _fp4_scale_cols, _fp4_scale_factor
from ._ws_gemm import (_ring_barriers, _ring_prev, _ring_ready, _ring_release, _ring_slot, _x_copy, _x_lanes,
                       _x_src)


def dot64_cols(K: int) -> torch.Tensor:
    """The dot order as a column permutation: ``x[:, dot64_cols(K)]`` holds at dot position 16 s + 8 m + 2 c + p
    of each 64-wide block the K position 16 c + 8 m + 4 p + s (``_align._gather_slot_rows_kernel``'s ``DOT64``)."""
    if K % 64:
        raise ValueError(f"the dot order permutes 64-wide K blocks, got K = {K}")
    d = torch.arange(64)
    s, m, c, p = d // 16, (d // 8) % 2, (d // 2) % 4, d % 2
    return (torch.arange(0, K, 64)[:, None] + (16 * c + 8 * m + 4 * p + s)[None, :]).reshape(-1)


@gluon.jit
def _dec_unit(u, num_n, SPLIT: gl.constexpr):
    """(block, column tile, K share) of work unit ``u``."""
    per_m = num_n * SPLIT
    rem = u % per_m
    return u // per_m, rem // SPLIT, rem % SPLIT


@gluon.jit
def _dec_blocks(num_post_padded_ptr, max_m, BT: gl.constexpr, CM: gl.constexpr, M_STATIC: gl.constexpr):
    """The blocks the units walk: the align's ``num_post_padded`` / BT, or (``M_STATIC``) the host's bound
    ``max_m`` -- the blocks past the rows in use are the align's -1 (:func:`_dec_local` skips them), and the walk
    does not wait for that load before it reads its first block's expert."""
    if M_STATIC:
        return max_m
    else:
        return gl.load(num_post_padded_ptr, cache_modifier=CM) // BT


@gluon.jit
def _dec_local(e, E_LOC: gl.constexpr, M_STATIC: gl.constexpr):
    """Whether block expert ``e`` is a local expert's (``M_STATIC``: also not the align's -1 of an unused block)."""
    if M_STATIC:
        return (e >= 0) & (e < E_LOC)
    else:
        return e < E_LOC


@gluon.jit
def _dec_split_sum(acc, part_ptr, cnt_ptr, tile, ks, SPLIT: gl.constexpr, acc_l: gl.constexpr):
    """Split-K of a decode unit's [64, BT] fp32 ``acc`` (layout ``acc_l``; share ``ks`` of ``tile``): stored as the
    tile's partial ``ks``; the last of the SPLIT programs to arrive (an acq_rel counter, left zero for the next call)
    gets ``(sum of the partials in split order -- the same bits whichever arrived last, True)``, the others ``(acc,
    False)`` (also ``kernels/_ws_dec.py``'s)."""
    BT: gl.constexpr = acc.shape[1]
    ar = gl.arange(0, 64, layout=gl.SliceLayout(1, acc_l))
    at = gl.arange(0, BT, layout=gl.SliceLayout(0, acc_l))
    p_offs = ar[:, None] * BT + at[None, :]  # the partial's offsets in a [64, BT] fp32 slot
    gl.store(part_ptr + (tile * SPLIT + ks).to(gl.int64) * (64 * BT) + p_offs, acc)
    gl.thread_barrier()  # every thread's partial is stored before the (release) arrival
    last = gl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel", scope="gpu") == SPLIT - 1
    if last:
        gl.atomic_xchg(cnt_ptr + tile, 0, sem="relaxed", scope="gpu")  # ready for the next call
        acc = gl.zeros((64, BT), dtype=gl.float32, layout=acc_l)
        for sk in gl.static_range(SPLIT):  # in split order
            acc += gl.load(part_ptr + (tile * SPLIT + sk).to(gl.int64) * (64 * BT) + p_offs, cache_modifier=".cg")
    return acc, last


@gluon.jit
def _dec_gdc(USE_GDC: gl.constexpr):
    """Programmatic dependent launch (``USE_GDC``, the Triton kernels' convention): wait for the prior grid before
    anything is read, then let the next grid launch (it waits for this one's end itself). Also
    ``kernels/_ws_dec.py``'s."""
    if USE_GDC:
        _dec_gdc_wait(USE_GDC)
        gl.inline_asm_elementwise("griddepcontrol.launch_dependents; // dummy $0", "=r", [], dtype=gl.int32,
                                  is_pure=False, pack=1)


@gluon.jit
def _dec_gdc_wait(USE_GDC: gl.constexpr):
    """The wait for the prior grid alone (:func:`_dec_gdc`'s first half; ``EARLY_W``: the loader's, after the
    weights of its first ring steps went out, :func:`_dec_catch_up`)."""
    if USE_GDC:
        gl.inline_asm_elementwise("griddepcontrol.wait; // dummy $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _dec_rows(pid_n, N, GATED: gl.constexpr):
    """The first weight rows (within the expert) of a decode unit's two 32-row boxes: gated, gate rows ``32 pid_n``
    and the same up rows ``N + 32 pid_n``; otherwise rows ``64 pid_n`` and ``64 pid_n + 32`` (also
    ``kernels/_ws_dec.py``'s)."""
    if GATED:
        r0 = pid_n * 32
        r1 = N + r0
    else:
        r0 = pid_n * 64
        r1 = r0 + 32
    return r0, r1


@gluon.jit
def _dec_slot(x_desc, x8_desc, ready, empty, it, n8, wbytes: gl.constexpr, STAGES: gl.constexpr, KB: gl.constexpr):
    """The loader's next ring slot: waits until the consumer released it (a fresh slot passes at once) and arms its
    ``ready`` barrier with the step's bytes -- the weights' ``wbytes`` and KB token boxes of 8 rows (``n8`` == 1: the
    block has at most 8 real rows) or of all its rows; one of the two arrive-and-expects. Returns (slot, barrier)."""
    s, bar = _ring_slot(ready, empty, it, STAGES)
    mbarrier.expect(bar, wbytes + KB * x8_desc.block_type.nbytes, pred=n8 == 1)
    mbarrier.expect(bar, wbytes + KB * x_desc.block_type.nbytes, pred=n8 > 1)
    return s, bar


@gluon.jit
def _dec_slot_w(ready, empty, it, wbytes: gl.constexpr, STAGES: gl.constexpr):
    """The loader's next ring slot where the token rows come by cp.async (``X_GATHER``): waits until the consumer
    released it and arms its ``ready`` barrier with the weights' bytes only -- the loader warp's 32
    ``cp.async.mbarrier.arrive.noinc`` (:func:`_ws_gemm._x_copy`) are the phase's other arrivals (ready barriers of 33).
    Returns (slot, barrier)."""
    s, bar = _ring_slot(ready, empty, it, STAGES)
    mbarrier.expect(bar, wbytes)
    return s, bar


@gluon.jit
def _dec_s_copy(s_buf, s_ptr, e, r0, r1, kk, n64, stride_se, stride_sr, stride_sk, NV: gl.constexpr,
                KB: gl.constexpr):
    """``S_SMEM``: cp.async of a K step's block scales for the unit's 64 weight rows -- row ``16 w + 8 h + g`` of
    the tile is row ``16 (w % 2) + 8 h + g`` of the 32-row box at ``r0`` (w < 2) or ``r1`` -- into the ring slot's
    ``s_buf``. MX (row-major UE8M0 codes): each row's aligned 4-byte word holding the step's 2 KB codes (from byte
    ``(2 KB kk) % 4``; scale rows are 16-byte padded, so the word never leaves the row), ``s_buf`` [4, 2, 8] int32.
    NVFP4 (K-major e4m3): the step's 4 KB scale columns, ``s_buf`` [4 KB, 4, 2, 8], in runs of 8 rows (8-byte
    copies: the scale pointer, its strides and N multiples of 8, as the JIT specializes them). Needs the scale
    tensor 16-byte aligned with strides that are multiples of 16 (the launcher checks)."""
    sbase = s_ptr + e.to(gl.int64) * stride_se
    if NV:
        nl: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, 1, 2, 8], threads_per_warp=[8, 4, 1, 1],
                                            warps_per_cta=[1, 1, 1, 1], order=[3, 2, 1, 0])
        c4 = gl.arange(0, 4 * KB, layout=gl.SliceLayout(1, gl.SliceLayout(2, gl.SliceLayout(3, nl))))
        w4 = gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(2, gl.SliceLayout(3, nl))))
        h4 = gl.arange(0, 2, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(3, nl))))
        g4 = gl.arange(0, 8, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(2, nl))))
        rb = gl.where(w4 < 2, r0, r1) + (w4 % 2) * 16  # [4]: each 16-row quarter's first weight row
        # columns past the K blocks read the last one again (finite; their token rows are zero), as the consumer's
        # global loads clamp: no mask, so that the copies stay 8 bytes wide
        col = gl.minimum(kk * 4 * KB + c4, 4 * n64 - 1)
        ptrs = (sbase + (col.to(gl.int64) * stride_sk)[:, None, None, None] + rb[None, :, None, None]
                + (8 * h4)[None, None, :, None] + g4[None, None, None, :])
        async_copy.async_copy_global_to_shared(s_buf, ptrs)
    else:
        ml: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, 2, 1], threads_per_warp=[4, 1, 8],
                                            warps_per_cta=[1, 1, 1], order=[2, 1, 0])
        w3 = gl.arange(0, 4, layout=gl.SliceLayout(1, gl.SliceLayout(2, ml)))
        h3 = gl.arange(0, 2, layout=gl.SliceLayout(0, gl.SliceLayout(2, ml)))
        g3 = gl.arange(0, 8, layout=gl.SliceLayout(0, gl.SliceLayout(1, ml)))
        rb = gl.where(w3 < 2, r0, r1) + (w3 % 2) * 16
        row = rb[:, None, None] + (8 * h3)[None, :, None] + g3[None, None, :]
        word = (kk * 2 * KB) // 4 * 4  # the row's 4-byte word holding the step's codes
        ptrs = (sbase + row.to(gl.int64) * stride_sr + word).to(gl.pointer_type(gl.int32))
        async_copy.async_copy_global_to_shared(s_buf, ptrs)


@gluon.jit
def _dec_s_read(s_buf, wd, b, kk, n64, cc4, h: gl.constexpr, NV: gl.constexpr, KB: gl.constexpr,
                sl: gl.constexpr):
    """``S_SMEM``: block ``b``'s scales (the h-th of the step) for a thread's rows and column c (``cc4``) as
    ``_fp4_scale_factor`` takes them: MX the code byte of ``wd`` (the rows' words, loaded once a step) at
    ``(2 KB kk) % 4 + 2 (b - kk KB) + c // 2`` -- past the K blocks the last block's (as the global path clamps);
    NVFP4 the e4m3 of column 4 h + c of the slot's [4 KB, 64] buffer."""
    if NV:
        return s_buf.slice(4 * h, 4).permute([1, 2, 3, 0]).load(sl)
    else:
        j = (kk * 2 * KB) % 4 + 2 * (gl.minimum(b, n64 - 1) - kk * KB) + cc4 // 2
        return (wd[:, :, :, None] >> (8 * j)) & 0xFF


@gluon.jit
def _dec_token_box(x_desc, x8_desc, row, kc, bar, xb, n8):
    """TMA of a block's token rows at K column ``kc`` into ``xb``: its first 8 rows where it has at most 8 real ones
    (``n8`` == 1), else all."""
    tma.async_copy_global_to_shared(x8_desc, [row, kc], bar, xb.slice(0, 8), pred=n8 == 1)
    tma.async_copy_global_to_shared(x_desc, [row, kc], bar, xb, pred=n8 > 1)


@gluon.jit
def _dec_catch_up(x_desc, x8_desc, x_bufs, ready, sorted_ids_ptr, block_expert_ptr, num_m, n_k, num_n, num_slots,
                  E_LOC: gl.constexpr, STAGES: gl.constexpr, SPLIT: gl.constexpr, KB: gl.constexpr,
                  M_STATIC: gl.constexpr,
                  USE_GDC: gl.constexpr):
    """``EARLY_W``: the loader's wait for the prior grid -- whose output the token rows are --, then the token boxes
    of its first ``STAGES`` ring steps, whose weights (and block scales) went out before it: the same walk as
    :func:`_dec_loader`'s, into the same slots, on barriers armed with the steps' whole bytes."""
    _dec_gdc_wait(USE_GDC)
    BT: gl.constexpr = x_desc.block_type.shape[0]
    it = 0
    for u in range(gl.program_id(0), num_m * num_n * SPLIT, gl.num_programs(0)):
        pid_m, pid_n, ks = _dec_unit(u, num_n, SPLIT)
        e = gl.load(block_expert_ptr + pid_m, cache_modifier=".cg")  # (before the wait: :func:`_dec_loader`)
        if _dec_local(e, E_LOC, M_STATIC) & (it < STAGES):
            n8 = _fp4_chunk_count(sorted_ids_ptr, pid_m, num_slots, 8, BT // 8, ".cg")
            for kk in range((n_k * ks) // SPLIT, (n_k * (ks + 1)) // SPLIT):
                if it < STAGES:  # (a fresh slot: step it's own)
                    for h in gl.static_range(KB):
                        _dec_token_box(x_desc, x8_desc, pid_m * BT, (kk * KB + h) * 64, ready.index(it),
                                       x_bufs.index(it * KB + h), n8)
                it += 1


@gluon.jit
def _dec_loader(x_desc, x8_desc, w_desc, x_bufs, w_bufs, s_bufs, ready, empty, x_ptr, s_ptr, sorted_ids_ptr,
                block_expert_ptr, num_post_padded_ptr, max_m, N, R_TILES, K_PIECES, n_k, n64, num_n, num_slots,
                stride_x, stride_se, stride_sr, stride_sk, E_LOC: gl.constexpr, GATED: gl.constexpr, TK: gl.constexpr,
                STAGES: gl.constexpr, SPLIT: gl.constexpr, KB: gl.constexpr, X_GATHER: gl.constexpr,
                TOP_K: gl.constexpr, NV: gl.constexpr, S_SMEM: gl.constexpr, EARLY_W: gl.constexpr,
                USE_GDC: gl.constexpr, M_STATIC: gl.constexpr):
    """TMA producer (one warp): per K step KB token boxes and KB x 2 [32, 16] weight boxes (the 64 rows of the
    unit's column tile) into ring slot ``it % STAGES``. Where a block has at most 8 real rows (at one token an
    expert's block holds one), the token box is its first 8 rows (``x8_desc``): BT rows for every 64 weight rows
    move as many bytes through L2 as the weights. (Fewer than 8 rows would split the 128-byte swizzle's 8-row
    atom, which Gluon does not slice.) The rows left out keep whatever the slot held: they only reach the wgmma's
    padding columns, never stored. ``X_GATHER`` (GEMM1): the token tiles come by cp.async from ``x_ptr`` [T, K]
    (hidden in the dot order, row ``slot // TOP_K``; :func:`_ws_gemm._x_copy`) after the step's weight boxes went out --
    no gather launch before the kernel. ``S_SMEM``: the step's block scales too (:func:`_dec_s_copy`), then the
    thread's cp.async arrival. ``EARLY_W`` (token rows by TMA -- GEMM2, or GEMM1 after a gather launch -- under
    programmatic dependent launch; the kernel does not wait for the prior grid at its start): the weights and scales
    of the first ``STAGES`` steps go out before the wait, their token boxes after it (:func:`_dec_catch_up`, once
    those steps are issued) -- the align's outputs it reads for that are final before this grid starts, as every
    kernel of the layer lets the next one launch only after its own wait."""
    BT: gl.constexpr = x_desc.block_type.shape[0]
    wbytes: gl.constexpr = KB * 2 * w_desc.block_type.nbytes
    rr, cc = _x_lanes(BT, 64, 8)
    # (EARLY_W: the align's outputs read before the wait for the prior grid, so past L1 -- ``.cg`` --, which may still
    # hold an earlier call's lines; the align's grid finished before this one started: its writes are in L2)
    CM: gl.constexpr = ".cg" if EARLY_W else ""
    num_m = _dec_blocks(num_post_padded_ptr, max_m, BT, CM, M_STATIC)
    it = 0
    for u in range(gl.program_id(0), num_m * num_n * SPLIT, gl.num_programs(0)):
        pid_m, pid_n, ks = _dec_unit(u, num_n, SPLIT)
        e = gl.load(block_expert_ptr + pid_m, cache_modifier=CM)
        if _dec_local(e, E_LOC, M_STATIC):
            if X_GATHER:
                xrow, ok = _x_src(x_ptr, sorted_ids_ptr, pid_m, num_slots, stride_x, rr, BT, TOP_K, False)
            else:
                n8 = _fp4_chunk_count(sorted_ids_ptr, pid_m, num_slots, 8, BT // 8, CM)  # 8-row chunks with real rows
            r0, r1 = _dec_rows(pid_n, N, GATED)  # (N a multiple of 64: each box within one 64-row tile)
            base0 = (e * R_TILES + r0 // 64) * K_PIECES
            base1 = (e * R_TILES + r1 // 64) * K_PIECES
            k0 = (n_k * ks) // SPLIT
            k1 = (n_k * (ks + 1)) // SPLIT
            for kk in range(k0, k1):
                if X_GATHER:
                    s, bar = _dec_slot_w(ready, empty, it, wbytes, STAGES)
                else:
                    s, bar = _dec_slot(x_desc, x8_desc, ready, empty, it, n8, wbytes, STAGES, KB)
                for h in gl.static_range(KB):
                    kq = kk * KB + h  # the 64-wide K block
                    piece = (kq * 64) // TK
                    col = ((kq * 64) % TK) // 4
                    slot = s * KB + h
                    if not X_GATHER:
                        if EARLY_W:
                            if it >= STAGES:  # (the first STAGES steps' token boxes: _dec_catch_up)
                                _dec_token_box(x_desc, x8_desc, pid_m * BT, kq * 64, bar, x_bufs.index(slot), n8)
                        else:
                            _dec_token_box(x_desc, x8_desc, pid_m * BT, kq * 64, bar, x_bufs.index(slot), n8)
                    wb = w_bufs.index(slot)
                    tma.async_copy_global_to_shared(w_desc, [(base0 + piece) * 64 + r0 % 64, col], bar,
                                                    wb.slice(0, 32))
                    tma.async_copy_global_to_shared(w_desc, [(base1 + piece) * 64 + r1 % 64, col], bar,
                                                    wb.slice(32, 32))
                if X_GATHER:  # K blocks past n64 (block_k 128, K an odd number of 64s): zeros
                    _x_copy(x_bufs, s * KB, kk * KB * 64, xrow, ok, cc, n64 * 64, bar, KB, not S_SMEM)
                if S_SMEM:  # the step's block scales, then this thread's one cp.async arrival
                    _dec_s_copy(s_bufs.index(s), s_ptr, e, r0, r1, kk, n64, stride_se, stride_sr, stride_sk, NV, KB)
                    async_copy.mbarrier_arrive(bar, increment_count=False)
                it += 1
                if EARLY_W:
                    if it == STAGES:
                        _dec_catch_up(x_desc, x8_desc, x_bufs, ready, sorted_ids_ptr, block_expert_ptr, num_m, n_k,
                                      num_n, num_slots, E_LOC, STAGES, SPLIT, KB, M_STATIC, USE_GDC)
    if EARLY_W:
        if it < STAGES:  # (fewer steps than the ring: their token boxes now)
            _dec_catch_up(x_desc, x8_desc, x_bufs, ready, sorted_ids_ptr, block_expert_ptr, num_m, n_k, num_n,
                          num_slots, E_LOC, STAGES, SPLIT, KB, M_STATIC, USE_GDC)


@gluon.jit
def _dec_a_operand(words, sc, SWZ: gl.constexpr, FOLD: gl.constexpr, NV: gl.constexpr, dot_l: gl.constexpr):
    """[4 warps, 2 row halves, 8 row groups, 4 columns c, 4 words] int16 of one 64 x 64 block -> the wgmma's
    register A [64, 64] bf16 in the dot order (module docstring) times the block scales ``sc`` [4, 2, 8, 4] (MX:
    UE8M0 codes; NVFP4: e4m3): the values as ``_ws_fp4._fp4_tile`` makes them (MX ``FOLD`` and NVFP4: 2^-16 times)."""
    f = _fp4_scale_factor(sc, FOLD, NV)[:, :, :, :, None]
    n0, n1, n2, n3 = _bs._e2m1x4_bf16_nib(words, not (FOLD or NV), SWZ)  # nibble s of word j: K 4 j + s
    v = gl.join(gl.join(n0 * f, n1 * f), gl.join(n2 * f, n3 * f))  # [w, h, g, c, word, s & 1, s >> 1]
    v = gl.reshape(v, [4, 2, 8, 4, 2, 2, 2, 2])  # [w, h, g, c, m, p, s0, s1]
    v = gl.permute(v, [0, 1, 2, 7, 6, 4, 3, 5])  # row 16 w + 8 h + g, dot k 16 (2 s1 + s0) + 8 m + 2 c + p
    return gl.convert_layout(gl.reshape(v, [64, 64]), dot_l)  # the same registers: no data movement


@gluon.jit
def _dec_consumer(x_bufs, w_bufs, s_bufs, ready, empty, out_ptr, s_ptr, gs_ptr, bias_ptr, topk_w_ptr, sorted_ids_ptr,
                  block_expert_ptr, num_post_padded_ptr, max_m, part_ptr, cnt_ptr, N, n_k, n64, num_n, num_slots,
                  stride_se, stride_sr, stride_sk, stride_om, stride_be, act_alpha, act_beta, act_limit,
                  BT: gl.constexpr,
                  E_LOC: gl.constexpr, ACT: gl.constexpr, GATED: gl.constexpr, HAS_BIAS: gl.constexpr,
                  WEIGHT_ON_INPUT: gl.constexpr, MUL_ROUTING_WEIGHT: gl.constexpr, ROUND_DTYPE: gl.constexpr,
                  SWZ: gl.constexpr, FOLD: gl.constexpr, NV: gl.constexpr, STAGES: gl.constexpr,
                  SPLIT: gl.constexpr, KB: gl.constexpr, OUT_PADDED_DOT: gl.constexpr, X_GATHER: gl.constexpr,
                  S_SMEM: gl.constexpr, T_RELEASE: gl.constexpr, EARLY_W: gl.constexpr, USE_GDC: gl.constexpr,
                  M_STATIC: gl.constexpr):
    """Consumer warpgroup: per unit its K steps, each 64-wide block converted into the register A operand and
    multiplied with the block's token rows (one wgmma in flight); then the split-K reduction and the epilogue. The
    block scales: loaded from global memory two blocks ahead, or (``S_SMEM``) read from the ring slot, where the
    loader copied them (:func:`_dec_s_read`). ``EARLY_W``: the wait for the prior grid at its start (the kernel's
    is the loader's)."""
    if EARLY_W:
        _dec_gdc(USE_GDC)
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BT, 16])
    dot_l: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_l, k_width=2)
    # a thread: rows 16 w + g and 16 w + 8 + g (g = lane // 4), words 4 c .. 4 c + 3 (c = lane % 4)
    wl: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, 2, 1, 1, 4], threads_per_warp=[1, 1, 8, 4, 1],
                                        warps_per_cta=[4, 1, 1, 1, 1], order=[4, 3, 2, 1, 0])
    sl: gl.constexpr = gl.SliceLayout(4, wl)
    rw = gl.arange(0, 4, layout=gl.SliceLayout(1, gl.SliceLayout(2, gl.SliceLayout(3, sl))))
    rh = gl.arange(0, 2, layout=gl.SliceLayout(0, gl.SliceLayout(2, gl.SliceLayout(3, sl))))
    rg = gl.arange(0, 8, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(3, sl))))
    cc = gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(2, sl))))
    r = rw[:, None, None, None] * 16 + rh[None, :, None, None] * 8 + rg[None, None, :, None]  # row of the tile
    jq, bstep = _fp4_scale_cols(cc[None, None, None, :], stride_sk, NV)  # thread column c's block scale
    num_m = _dec_blocks(num_post_padded_ptr, max_m, BT, "", M_STATIC)
    it = 0
    a_prev = gl.zeros((64, 64), gl.bfloat16, layout=dot_l)
    for u in range(gl.program_id(0), num_m * num_n * SPLIT, gl.num_programs(0)):
        pid_m, pid_n, ks = _dec_unit(u, num_n, SPLIT)
        e = gl.load(block_expert_ptr + pid_m)
        if _dec_local(e, E_LOC, M_STATIC):
            if GATED:
                n0 = pid_n * 32
                wrow = gl.where(r < 32, n0 + r, N + n0 + r - 32)
            else:
                n0 = pid_n * 64
                wrow = gl.minimum(n0 + r, N - 1)  # rows past N (never stored) read row N - 1's scales
            k0 = (n_k * ks) // SPLIT
            k1 = (n_k * (ks + 1)) // SPLIT
            if not S_SMEM:
                sp = s_ptr + e.to(gl.int64) * stride_se + wrow.to(gl.int64) * stride_sr + jq
                # block scales two 64-wide blocks ahead (mostly cache hits); past the unit's last block the last one
                # again (the index is uniform: a clamp instead of masks)
                b_last = gl.minimum(k1 * KB, n64) - 1  # (>= k0 KB where the share has a step; clamped below if not)
                sc = gl.load(sp + gl.minimum(k0 * KB, n64 - 1) * bstep)
                sc_n = gl.load(sp + gl.maximum(gl.minimum(k0 * KB + 1, b_last), 0) * bstep)
            acc = gl.zeros((64, BT), dtype=gl.float32, layout=acc_l)
            for kk in range(k0, k1):
                s = _ring_ready(ready, it, STAGES, X_GATHER)
                wd = 0
                if S_SMEM and not NV:  # the rows' scale words, once a step
                    wd = s_bufs.index(s).load(gl.SliceLayout(3, sl))
                for h in gl.static_range(KB):
                    b = kk * KB + h
                    if S_SMEM:
                        sc = _dec_s_read(s_bufs.index(s), wd, b, kk, n64, cc[None, None, None, :], h, NV, KB, sl)
                    else:
                        sc_nn = gl.load(sp + gl.minimum(b + 2, b_last) * bstep)
                    words = w_bufs.index(s * KB + h).reshape([4, 2, 8, 4, 4]).load(wl)
                    a = _dec_a_operand(words, sc, SWZ, FOLD, NV, dot_l)
                    acc = warpgroup_mma(a, x_bufs.index(s * KB + h).permute((1, 0)), acc, is_async=True)
                    # the block before retires: its A registers (a dependency of this wait) may be reused
                    acc, a_prev = warpgroup_mma_wait(num_outstanding=1, deps=(acc, a_prev))
                    a_prev = a
                    if h == 0:
                        if kk > k0:  # the step before's last wgmma retired: its ring slot is free
                            _ring_release(empty, _ring_prev(it, STAGES), T_RELEASE)
                    if not S_SMEM:
                        sc = sc_n
                        sc_n = sc_nn
                it += 1
            acc, a_prev = warpgroup_mma_wait(num_outstanding=0, deps=(acc, a_prev))
            _ring_release(empty, _ring_prev(it, STAGES), T_RELEASE)
            last = True
            if SPLIT > 1:
                acc, last = _dec_split_sum(acc, part_ptr, cnt_ptr, pid_m * num_n + pid_n, ks, SPLIT, acc_l)
            if last:
                acc = _fp4_acc_factors(acc, gs_ptr, e, FOLD, NV)
                _fp4_epilogue(acc, e, pid_m, n0, out_ptr, bias_ptr, topk_w_ptr, sorted_ids_ptr, N, num_slots,
                              stride_om, stride_be, act_alpha, act_beta, act_limit, 0, BT, ACT, GATED, HAS_BIAS,
                              WEIGHT_ON_INPUT, MUL_ROUTING_WEIGHT, ROUND_DTYPE, OUT_PADDED_DOT)


@gluon.jit
def _ws_fp4_dec_kernel(
    x_desc, x8_desc, w_desc, out_ptr, s_ptr, gs_ptr, bias_ptr, topk_w_ptr, sorted_ids_ptr, block_expert_ptr,
    num_post_padded_ptr, part_ptr, cnt_ptr, x_ptr, N, n_k, n64, num_n, num_slots, R_TILES, K_PIECES, stride_se,
    stride_sr, stride_sk, stride_om, stride_be, stride_x, act_alpha, act_beta, act_limit,
    E_LOC: gl.constexpr, ACT: gl.constexpr, GATED: gl.constexpr, HAS_BIAS: gl.constexpr,
    WEIGHT_ON_INPUT: gl.constexpr, MUL_ROUTING_WEIGHT: gl.constexpr, ROUND_DTYPE: gl.constexpr, SWZ: gl.constexpr,
    FOLD: gl.constexpr, NV: gl.constexpr, TK: gl.constexpr, STAGES: gl.constexpr, SPLIT: gl.constexpr,
    KB: gl.constexpr, OUT_PADDED_DOT: gl.constexpr = False, USE_GDC: gl.constexpr = False,
    X_GATHER: gl.constexpr = False, TOP_K: gl.constexpr = 1, S_SMEM: gl.constexpr = False,
    T_RELEASE: gl.constexpr = False, EARLY_W: gl.constexpr = False, max_m=0, M_STATIC: gl.constexpr = False,
):
    """One grouped FP4 x BF16 decode GEMM + its epilogue (module docstring). Launch with ``num_warps=4`` (the
    consumer warpgroup; the loader warp is a worker), persistent, a few programs an SM (``maxnreg`` caps the
    registers so that they fit). ``USE_GDC``: launched with programmatic dependent launch. ``X_GATHER`` (GEMM1):
    the token rows come from ``x_ptr`` [T, K] (hidden in the dot order, row stride ``stride_x``, 16-byte aligned;
    row ``slot // TOP_K``) by cp.async (:func:`_dec_loader`) instead of the TMA descriptors, which then only give
    the tiles' shapes and layout. ``S_SMEM`` (thirty-third session; the launcher's default since the thirty-fifth):
    the block scales come through the ring too (:func:`_dec_s_copy` / :func:`_dec_s_read`) instead of the consumer's
    global loads. ``T_RELEASE`` (likewise): every consumer thread frees the ring slots itself
    (:func:`_ws_gemm._ring_release`). ``EARLY_W`` (TMA token rows under ``USE_GDC``; fifty-second session, the
    launcher's default): its loader sends the first ring steps' weights and scales before it waits for the prior grid
    (:func:`_dec_loader`). Not with ``X_GATHER``, whose token rows come from the prior grid itself (the align).
    ``M_STATIC`` (fifty-third session, the launcher's default): the units walk ``max_m`` blocks (the align's bound,
    a host number) instead of ``num_post_padded`` / BT, skipping the unused blocks' -1 experts -- one dependent load
    less before a program's first weights go out (:func:`_dec_blocks`)."""
    gl.static_assert(not (EARLY_W and X_GATHER), "EARLY_W defers the TMA token boxes (not the cp.async rows)")
    if not EARLY_W:
        _dec_gdc(USE_GDC)
    BT: gl.constexpr = x_desc.block_type.shape[0]
    x_bufs = gl.allocate_shared_memory(x_desc.dtype, [STAGES * KB] + x_desc.block_type.shape, x_desc.layout)
    w_bufs = gl.allocate_shared_memory(w_desc.dtype, [STAGES * KB, 64, 16], w_desc.layout)
    # the scales' ring (S_SMEM; otherwise one unused slot, so that the partitions' arguments are the same)
    SST: gl.constexpr = STAGES if S_SMEM else 1
    # (a layout for the trailing dims: the stage is indexed)
    if NV:  # [stage, scale column, then the tile's 64 rows as 16 w + 8 h + g]
        s_bufs = gl.allocate_shared_memory(gl.float8e4nv, [SST, 4 * KB, 4, 2, 8],
                                           gl.SwizzledSharedLayout(1, 1, 1, order=[3, 2, 1, 0]))
    else:  # [stage, rows]: one 4-byte word of codes a row
        s_bufs = gl.allocate_shared_memory(gl.int32, [SST, 4, 2, 8], gl.SwizzledSharedLayout(1, 1, 1, order=[2, 1, 0]))
    # one consumer warpgroup releases a slot; cp.async (token rows, scales): the expect + the loader warp's 32 arrivals
    ready, empty = _ring_barriers(STAGES, 128 if T_RELEASE else 1, 33 if X_GATHER or S_SMEM else 1)
    gl.warp_specialize([
        (_dec_consumer, (x_bufs, w_bufs, s_bufs, ready, empty, out_ptr, s_ptr, gs_ptr, bias_ptr, topk_w_ptr,
                         sorted_ids_ptr, block_expert_ptr, num_post_padded_ptr, max_m, part_ptr, cnt_ptr, N, n_k, n64,
                         num_n, num_slots, stride_se, stride_sr, stride_sk, stride_om, stride_be, act_alpha, act_beta,
                         act_limit, BT, E_LOC, ACT, GATED, HAS_BIAS, WEIGHT_ON_INPUT, MUL_ROUTING_WEIGHT, ROUND_DTYPE,
                         SWZ, FOLD, NV, STAGES, SPLIT, KB, OUT_PADDED_DOT, X_GATHER, S_SMEM, T_RELEASE, EARLY_W,
                         USE_GDC, M_STATIC)),
        (_dec_loader, (x_desc, x8_desc, w_desc, x_bufs, w_bufs, s_bufs, ready, empty, x_ptr, s_ptr, sorted_ids_ptr,
                       block_expert_ptr, num_post_padded_ptr, max_m, N, R_TILES, K_PIECES, n_k, n64, num_n,
                       num_slots, stride_x, stride_se, stride_sr, stride_sk, E_LOC, GATED, TK, STAGES, SPLIT, KB,
                       X_GATHER, TOP_K, NV, S_SMEM, EARLY_W, USE_GDC, M_STATIC)),
    ], [1], [40])
