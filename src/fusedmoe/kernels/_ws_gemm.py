"""Warp-specialized grouped GEMMs for FP8 (per tensor / per channel / 128 x 128 blocks) and 16-bit
weights on Hopper, in Gluon
(private; launched by ``fusedmoe.backends.triton_moe`` when ``KernelConfig.warp_specialized`` is
set for GEMM1 or GEMM2).

Why: prefill GEMMs of FP8 per tensor / channel are compute-bound, and our default promoted
accumulation (each 128-wide K block's wgmma into a fresh accumulator, added to an fp32 sum) costs
the plain Triton kernel its overlap: the MMA warps wait for each wgmma before adding. Here one TMA
loader warp fills a STAGES-deep shared-memory ring and two MMA warpgroups each own 64 rows of a
128-row tile; while one warpgroup adds its partial sums the other's wgmma runs. Same precision as
the Triton kernel's ``max_num_imprecise_acc = BLOCK_K``. Grown from the prototype of sessions 10-12
(``benchmarks/gluon/`` at commit e854bfe; H200, BENCHMARKS.md section 0, thirteenth session: the
gated GEMM1 of DeepSeek-V3 at 8192 tokens 5422 -> 4527 us, Mixtral 5220 -> 3617 us against a plain
promoted Triton TMA kernel); in the layer, both GEMMs warp-specialized ran FP8 prefill 1.03-1.22x
faster than the tuned Triton tiles where rows per expert are many (BENCHMARKS.md).

Data contract (as ``_moe_gemm._gemm1_kernel`` / ``_gemm2_kernel``; BM = 128 = 2 x 64 rows):

    a_desc      TMA descriptor, block [64, BK], over A_rows [P_max, K] e4m3: the GEMM's input rows
                gathered into block-padded slot order (``_align._gather_slot_rows_kernel``: Hopper's
                TMA has no row gather); padding rows are zero. GEMM2 after a warp-specialized GEMM1
                with OUT_PADDED: GEMM1's output itself (its padding rows stored as zeros with
                ZERO_PAD, never written in skipped halves: whatever they hold only reaches GEMM2's
                padding rows, which are never stored), or its 1 x 128 FP8 group quantization in
                the same row order (A_PADDED: the input's scales indexed by block-padded row too)
    w_desc      TMA descriptor, block [BN, BK], over the weights viewed as [E * M, K] e4m3 (GEMM1:
                w13, M = 2 N gated -- each expert's N gate rows, then its N up rows -- M = N
                otherwise; GEMM2: w2, M = N = H)
    out         [T*K, N] slot-indexed: GEMM1's intermediate in hidden's dtype, or e4m3 quantized with
                the static scale of GEMM2's input (OUT_Q = OUT_FP8_STATIC); GEMM2's y in hidden's
                dtype (or the output itself when K = 1). OUT_PADDED (GEMM1, when GEMM2 is
                warp-specialized and reads the intermediate as it is: ``triton_moe.set_ws_padded_handoff``):
                [P_max, N], row = the slot's block-padded position -- GEMM2's TMA rows, no gather
    scales      QUANT TENSOR: a [] x w [E]; ROW: a [rows of the input: tokens (GEMM1) or slots
                (GEMM2, TOP_K = 1; block-padded rows with A_PADDED)] x w [E, M] (per channel); BLOCK
                (FP8 128 x 128 blocks): a [rows, K/128] x w [E, M/128, K/128], each K block's partial
                product scaled before it is added
                (``_moe_gemm._scale_block``, as the Triton kernel; H200-tested in the fourteenth
                session, chosen by the tuner at 8192 tokens of DeepSeek-V3 / MiniMax-M2); NONE
                (16-bit weights and input, one dtype): no scales, one accumulator chain per tile
                (each K block's wgmma accumulates into it; the slot of the block before is released
                once at most this block's wgmmas are in flight), 64-wide K blocks

Padding half (SKIP_HALF; the launcher sets it for FP8 weights, ``triton_moe._ws_skips_padding_half``):
an expert's last block holds its leftover rows first, so when row 64 of a block is the sentinel the
second warpgroup's 64 rows are all padding: the loader then loads only the first half of A and the
second warpgroup issues no wgmma for that tile (it only keeps step with the ring's barriers) -- the
first warpgroup has the tensor cores to itself. Same bits (the skipped rows are never stored).
Measured (H200, fifteenth session, harness, both GEMMs warp-specialized): FP8 1.10x at 512 tokens
(up to 1.21x: FP8 block DeepSeek-V3), 1.04x at 2048, 1.015x at 8192, flat on Mixtral (8 experts:
hardly any padding); 16-bit weights 1.05x at 512 but 0.75-0.92x at 8192 (DeepSeek-V3 SwiGLU
0.75-0.81x in three runs; not understood: the compiled loop is the same), so they skip only with
``triton_moe.set_ws_skip_padding_half_16bit``. The fiftieth session (H100) placed the loss: DeepSeek-V3 BF16 at 8192
tokens 0.761x, all of it in GEMM1 (8159 -> 12832 µs; GEMM2 4454 -> 4351), with the same K loop either way. Not the
static tiles drifting apart, as that session guessed: with the counted tiles (``DYN``) too the skip loses (fifty-first
session, H100, ``decode_ab.py --settings default,wsdyn,wsdyn+ws16skip``: DeepSeek-V3 / TP8 / Qwen3-30B BF16 at 8192
tokens 0.930 / 0.938 / 0.990x of the default). Still not understood.

Pipelined promotion (PIPE: ``KernelConfig.pipelined_promotion``, or every tile with
``triton_moe.set_ws_pipelined_promotion``; FP8 per tensor / channel / blocks): in the two-set tiles each warpgroup's
two partial sets take turns (``_ws_pipe_k_loop``), so the next K block's wgmmas are in flight while it waits for a
block's and adds them; the wide one-set tiles run each K block as four 64-column sub-tiles with two 64-column partial
sets in turn, across K blocks too (``_ws_wide_pipe_k_loop``) -- the same products added in the same order, the same
bits.

Tiles walk ``program_id, program_id + num_programs, ...`` over the (M-block, column tile) grid of
the rows in use (``num_post_padded``, read on the device) in GROUP_M bands (``_tile_ids``) -- or, with
``DYN`` (``triton_moe.set_ws_dynamic_tiles``, by default FP8 with >= 64 local experts), in the order a global
counter hands them out, so the tiles in flight stay one window of that walk; a
persistent launch (one program per SM) lets the loader run into the next tile while the MMA
warpgroups store. Blocks of the non-local group (expert >= E_LOC) are skipped by every partition
alike (their output rows are the launcher's to zero). Epilogue (per warpgroup, fp32): scales,
routing weight on input (GEMM1), bias, routing weight (GEMM2: MUL_ROUTING_WEIGHT), the activation
(``_moe_gemm._activation``; GEMM2: identity), rounded to hidden's dtype, stored at the slot rows
(a static FP8 intermediate divided by its scale: IEEE divisions, or with RCP_DIV the reciprocal and
Markstein's correction, ``_quant._div_by_rcp``: the same bits; OUT_PLAIN_AMAX: a 16-bit
intermediate and its max |h| into the int32 at ``out_qscale_ptr``, ``_moe_gemm._atomic_amax``, for
the dynamic per-tensor quantization that follows).

Limits (``kernel_configs.warp_specialized_problem``): sm_90 (wgmma), not the interpreter (Gluon
has none), block_m 128, 128-byte K blocks (block_k 128 FP8 / 64 16-bit); FP8 block_n 64 (gated:
two 64 x 64 fp32 accumulators and two partials per thread) or 64 / 128 (non-gated, GEMM2), 16-bit
64 / 128 gated (the 2 x 128 tile with biases spills a little in the epilogue) or 128 / 256; no
split-K, swap-AB or fast accumulation; K a multiple of 16 (TMA row strides).

16-bit weights, measured (H200, fourteenth session, BENCHMARKS.md): against the tuned Triton tiles
only where an expert has many rows -- Mixtral at 512-8192 tokens 1.00-1.11x, DeepSeek-V3 SwiGLU at
8192 1.06x -- and 0.7-0.95x elsewhere (the 128-row tiles pad, and the gather costs 2 x P x K bytes):
the Triton kernel needs no promoted accumulation, so the warp-specialized one gains less than for
FP8. The heuristic keeps the Triton kernels for 16-bit weights; the tuner tries both.
"""

import triton  # noqa: F401  (the Gluon runtime needs triton imported first)
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

from ._moe_gemm import (FP8_MAX, OUT_FP8_STATIC, OUT_PLAIN_AMAX, Q_BLOCK, Q_NONE, _activation,
                        _atomic_amax, _div_by_scale, _gemm1_epilogue, _scale_block, _tile_ids)


@gluon.jit
def _ws_loader(a_desc, w_desc, a0_bufs, a1_bufs, wg_bufs, wu_bufs, ready, empty, sorted_ids_ptr, block_expert_ptr,
               num_post_padded_ptr, N, K, num_slots, x_ptr, stride_x, E_LOC: gl.constexpr, BN: gl.constexpr,
               BK: gl.constexpr, STAGES: gl.constexpr, GROUP_M: gl.constexpr, GATED: gl.constexpr,
               SKIP_HALF: gl.constexpr, TOP_K: gl.constexpr, X_GATHER: gl.constexpr, tile_ctr_ptr=0, tiles=0,
               tq_ready=0, tq_empty=0, DYN: gl.constexpr = False, TQ: gl.constexpr = 1):
    """TMA producer (one warp): both 64-row halves of A and the weight tile(s) (gated: gate rows
    ``e * 2N + n``, up rows ``e * 2N + N + n``) of every K block of this program's tiles into the
    ring; a slot is refilled once both MMA warpgroups have released it. A block whose second half
    is all padding (an expert's last block with <= 64 rows: its first row there is the sentinel)
    gets its first half of A only -- the second warpgroup skips that tile (``_ws_consumer``;
    SKIP_HALF). ``X_GATHER`` (four warps): only the weights by TMA (the expect), then each thread's cp.async of its
    part of the A halves from the unsorted rows at ``x_ptr`` (:func:`_x_src`, :func:`_x_copy`) -- no gather
    launch before the kernel -- and its ``.noinc`` arrival once they landed; the consumers fence before their
    wgmmas read the A tile (:func:`_ring_ready`). ``DYN`` (``triton_moe.set_ws_dynamic_tiles``): the program's
    tiles are not ``program_id + i * num_programs`` but the values of a global counter (``tile_ctr_ptr[0]``),
    fetched one tile ahead and handed to the consumers through a queue in shared memory (:func:`_ws_tile_publish`)
    -- the tiles in flight on the GPU then always form one window of the tile walk."""
    HALF_M: gl.constexpr = a_desc.block_type.shape[0]
    num_m = gl.load(num_post_padded_ptr) // (2 * HALF_M)
    num_n = gl.cdiv(N, BN)
    n_k = gl.cdiv(K, BK)
    it = 0
    if DYN:  # tiles in the order of a global counter, each handed to the consumers (_ws_tile_publish)
        q = 0
        t = gl.atomic_add(tile_ctr_ptr, 1, sem="relaxed")
        while t < num_m * num_n:
            _ws_tile_publish(tiles, tq_ready, tq_empty, q, t, TQ, X_LOADER_WARPS if X_GATHER else 1)
            q += 1
            # the next tile fetched before this one's loads (the scalar atomic waits for its value: one round trip a
            # tile in the loader, behind the ring's lead)
            t_next = gl.atomic_add(tile_ctr_ptr, 1, sem="relaxed")
            it = _ws_load_tile(a_desc, w_desc, a0_bufs, a1_bufs, wg_bufs, wu_bufs, ready, empty, sorted_ids_ptr,
                               block_expert_ptr, N, K, num_slots, x_ptr, stride_x, t, num_m, num_n, n_k, it, E_LOC, BN,
                               BK, STAGES, GROUP_M, GATED, SKIP_HALF, TOP_K, X_GATHER)
            t = t_next
        _ws_tiles_done(tile_ctr_ptr, tiles, tq_ready, tq_empty, q, t, TQ, X_LOADER_WARPS if X_GATHER else 1)
    else:
        for t in range(gl.program_id(0), num_m * num_n, gl.num_programs(0)):
            it = _ws_load_tile(a_desc, w_desc, a0_bufs, a1_bufs, wg_bufs, wu_bufs, ready, empty, sorted_ids_ptr,
                               block_expert_ptr, N, K, num_slots, x_ptr, stride_x, t, num_m, num_n, n_k, it, E_LOC, BN,
                               BK, STAGES, GROUP_M, GATED, SKIP_HALF, TOP_K, X_GATHER)


@gluon.jit
def _ws_load_tile(a_desc, w_desc, a0_bufs, a1_bufs, wg_bufs, wu_bufs, ready, empty, sorted_ids_ptr, block_expert_ptr,
                  N, K, num_slots, x_ptr, stride_x, t, num_m, num_n, n_k, it, E_LOC: gl.constexpr, BN: gl.constexpr,
                  BK: gl.constexpr, STAGES: gl.constexpr, GROUP_M: gl.constexpr, GATED: gl.constexpr,
                  SKIP_HALF: gl.constexpr, TOP_K: gl.constexpr, X_GATHER: gl.constexpr):
    """:func:`_ws_loader`'s work for tile ``t``: every K block's operands into the ring from ring step ``it`` on
    (nothing for a tile of a non-local expert). Returns the next ring step."""
    HALF_M: gl.constexpr = a_desc.block_type.shape[0]
    W_TILES: gl.constexpr = 2 if GATED else 1
    wbytes: gl.constexpr = W_TILES * w_desc.block_type.nbytes
    nbytes: gl.constexpr = 2 * a_desc.block_type.nbytes + wbytes
    nbytes_half: gl.constexpr = nbytes - a_desc.block_type.nbytes
    VEC: gl.constexpr = 128 // a_desc.dtype.primitive_bitwidth  # (X_GATHER: 16 bytes a copy)
    pid_m, pid_n = _tile_ids(t, num_m, num_n, GROUP_M)
    e = gl.load(block_expert_ptr + pid_m)
    if e < E_LOC:
        row0 = pid_m * (2 * HALF_M)
        wrow0 = e * (W_TILES * N) + pid_n * BN
        if X_GATHER:  # the block's rows' input rows (its two halves: 64-row blocks 2 pid_m, 2 pid_m + 1)
            rr, cc = _x_lanes(HALF_M, BK, VEC, X_LOADER_WARPS)
            x0, ok0 = _x_src(x_ptr, sorted_ids_ptr, 2 * pid_m, num_slots, stride_x, rr, HALF_M, TOP_K, False)
            x1, ok1 = _x_src(x_ptr, sorted_ids_ptr, 2 * pid_m + 1, num_slots, stride_x, rr, HALF_M, TOP_K, False)
        full = row0 >= 0  # every block full unless SKIP_HALF looks (a tensor: the predicates below take it)
        if SKIP_HALF:
            full = gl.load(sorted_ids_ptr + row0 + HALF_M) < num_slots  # the second half holds a real row
        for kk in range(n_k):
            s, bar = _ring_slot(ready, empty, it, STAGES)
            if X_GATHER:
                mbarrier.expect(bar, wbytes)
            else:
                mbarrier.expect(bar, nbytes, pred=full)
                mbarrier.expect(bar, nbytes_half, pred=full == 0)
                tma.async_copy_global_to_shared(a_desc, [row0, kk * BK], bar, a0_bufs.index(s))
                tma.async_copy_global_to_shared(a_desc, [row0 + HALF_M, kk * BK], bar, a1_bufs.index(s),
                                                pred=full)
            tma.async_copy_global_to_shared(w_desc, [wrow0, kk * BK], bar, wg_bufs.index(s))
            if GATED:
                tma.async_copy_global_to_shared(w_desc, [wrow0 + N, kk * BK], bar, wu_bufs.index(s))
            if X_GATHER:
                _x_copy(a0_bufs, s, kk * BK, x0, ok0, cc, K, bar, 1, False)
                if full:
                    _x_copy(a1_bufs, s, kk * BK, x1, ok1, cc, K, bar, 1, False)
                async_copy.mbarrier_arrive(bar, increment_count=False)
            it += 1
    return it


@gluon.jit
def _ws_tile_publish(tiles, tq_ready, tq_empty, q, t, TQ: gl.constexpr, WARPS: gl.constexpr):
    """``DYN``: the loader (``WARPS`` warps) hands tile ``t`` (its ``q``-th) to the consumer warpgroups through slot
    ``q % TQ`` of the tile queue in shared memory, once both have taken the tile ``TQ`` before (the arrive after
    the store: the loader's barrier orders its threads' writes first, the arrive releases them)."""
    s = q % TQ
    mbarrier.wait(tq_empty.index(s), ((q // TQ) & 1) ^ 1)
    lay: gl.constexpr = gl.BlockedLayout(size_per_thread=[1], threads_per_warp=[32], warps_per_cta=[WARPS], order=[0])
    tiles.index(s).store(gl.full([1], t, gl.int32, layout=lay))
    mbarrier.arrive(tq_ready.index(s), count=1)


@gluon.jit
def _ws_tile_queue(TQ: gl.constexpr, DYN: gl.constexpr):
    """``DYN``: the tile queue in shared memory -- ``TQ`` int32 slots and their ready / empty barriers (both consumer
    warpgroups take each tile); without it three placeholders, never used."""
    tiles = 0
    tq_ready = 0
    tq_empty = 0
    if DYN:
        tiles = gl.allocate_shared_memory(gl.int32, [TQ, 1], gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
        tq_ready, tq_empty = _ring_barriers(TQ, 2, 1)
    return tiles, tq_ready, tq_empty


@gluon.jit
def _ws_tiles_done(tile_ctr_ptr, tiles, tq_ready, tq_empty, q, t, TQ: gl.constexpr, WARPS: gl.constexpr):
    """``DYN``: the loader's fetch ``t`` was past the last tile -- handed to the consumers as their stop
    (:func:`_ws_tile_publish`); the program whose fetch past the end comes last leaves the counters at zero for the
    next launch (acq_rel: every program's fetches before its count, the reset after the last count)."""
    _ws_tile_publish(tiles, tq_ready, tq_empty, q, t, TQ, WARPS)
    if gl.atomic_add(tile_ctr_ptr + 1, 1, sem="acq_rel") == gl.num_programs(0) - 1:
        gl.store(tile_ctr_ptr, 0)
        gl.store(tile_ctr_ptr + 1, 0)


@gluon.jit
def _ws_tile_take(tiles, tq_ready, tq_empty, q, TQ: gl.constexpr):
    """``DYN``: a consumer warpgroup's ``q``-th tile from the queue (:func:`_ws_tile_publish`)."""
    s = q % TQ
    mbarrier.wait(tq_ready.index(s), (q // TQ) & 1)
    lay: gl.constexpr = gl.BlockedLayout(size_per_thread=[1], threads_per_warp=[32], warps_per_cta=[4], order=[0])
    t = gl.max(tiles.index(s).load(lay), axis=0)
    mbarrier.arrive(tq_empty.index(s), count=1)
    return t


# the X_GATHER loader's warps: they copy a K block's [64, BK] A halves 16 bytes a lane, and each of its threads
# arrives on the slot's ready barrier (with the weights' expect: 1 + 32 * X_LOADER_WARPS arrivals a phase)
X_LOADER_WARPS = gl.constexpr(4)


@gluon.jit
def _x_lanes(BT: gl.constexpr, BKE: gl.constexpr, VEC: gl.constexpr, WARPS: gl.constexpr = 1):
    """The loader's lanes (``WARPS`` warps) over a [BT, BKE] token tile for cp.async, VEC elements (16 bytes) a copy:
    (row indices, column indices) in that blocked layout. The decode kernels' one-warp loaders and the X_GATHER
    loader here (:data:`X_LOADER_WARPS`)."""
    lw: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, VEC], threads_per_warp=[32 // (BKE // VEC), BKE // VEC],
                                        warps_per_cta=[WARPS, 1], order=[1, 0])
    return gl.arange(0, BT, layout=gl.SliceLayout(1, lw)), gl.arange(0, BKE, layout=gl.SliceLayout(0, lw))


@gluon.jit
def _x_src(x_ptr, sorted_ids_ptr, pid_m, num_slots, stride_x, rr, BT: gl.constexpr, TOP_K: gl.constexpr,
           PADDED: gl.constexpr):
    """(row start pointers, real-row mask) of block ``pid_m``'s token rows ``rr`` (blocks of BT rows) in ``x_ptr``:
    row ``slot // TOP_K`` of the unsorted rows (padding rows: row 0, masked), or (``PADDED``) the block-padded row
    itself."""
    sl = gl.load(sorted_ids_ptr + pid_m * BT + rr)
    ok = sl < num_slots
    if PADDED:
        xrow = x_ptr + (pid_m * BT + rr).to(gl.int64)[:, None] * stride_x
    else:
        xrow = x_ptr + (gl.where(ok, sl, 0) // TOP_K).to(gl.int64)[:, None] * stride_x
    return xrow, ok


@gluon.jit
def _x_copy(x_bufs, first, k0, xrow, ok, cc, K, bar, KB: gl.constexpr, ARRIVE: gl.constexpr = True):
    """cp.async of KB token tiles (K columns ``k0 + h BKE + cc``, h < KB) into ``x_bufs[first + h]``, 16 bytes a
    copy; padding rows and columns past ``K`` zero-filled (as TMA's bounds). Then (``ARRIVE``) this thread's
    ``.noinc`` arrival on ``bar`` once its copies landed (the FP4 decode kernel: one of the phase's 32 + 1,
    ``_ws_fp4_dec._dec_slot_w``)."""
    BKE: gl.constexpr = x_bufs.shape[2]
    for h in gl.static_range(KB):
        cols = k0 + h * BKE + cc
        async_copy.async_copy_global_to_shared(x_bufs.index(first + h), xrow + cols[None, :],
                                               mask=ok[:, None] & (cols < K)[None, :])
    if ARRIVE:
        async_copy.mbarrier_arrive(bar, increment_count=False)


@gluon.jit
def _ring_pos(it, STAGES: gl.constexpr):
    """Ring step ``it``'s (slot, phase), ``it % STAGES`` and ``(it // STAGES) & 1``, computed unsigned: the step count
    is never negative, and a signed division and remainder carry sign corrections (sm_90, 4 stages: the FP4 prefill
    consumers' K loop 8-11 instructions a step shorter -- uniform-datapath ones, which the warps issue like any
    other)."""
    u = it.to(gl.uint32)
    return (u % STAGES).to(gl.int32), ((u // STAGES) & 1).to(gl.int32)


@gluon.jit
def _ring_prev(it, STAGES: gl.constexpr):
    """The slot of ring step ``it - 1`` (``it`` >= 1; unsigned as :func:`_ring_pos`)."""
    return ((it.to(gl.uint32) + (STAGES - 1)) % STAGES).to(gl.int32)


@gluon.jit
def _ring_slot(ready, empty, it, STAGES: gl.constexpr):
    """A loader's ring step ``it``: waits until the consumers released its slot (a fresh slot passes at once).
    Returns (slot, its ready barrier), for the step's expect and copies."""
    s, ph = _ring_pos(it, STAGES)
    mbarrier.wait(empty.index(s), ph ^ 1)
    return s, ready.index(s)


@gluon.jit
def _ring_ready(ready, it, STAGES: gl.constexpr, X_GATHER: gl.constexpr = False):
    """A consumer's next ring slot once its operands landed; with ``X_GATHER`` its token tile came by cp.async (the
    generic proxy): a proxy fence before the wgmma reads it. Returns the slot."""
    s, ph = _ring_pos(it, STAGES)
    mbarrier.wait(ready.index(s), ph)
    if X_GATHER:
        fence_async_shared()
    return s


@gluon.jit
def _ws_rows(sorted_ids_ptr, pid_m, col0, num_slots, N, HALF: gl.constexpr, HALF_M: gl.constexpr,
             TOP_K: gl.constexpr, NC: gl.constexpr, A_PADDED: gl.constexpr, layout: gl.constexpr):
    """This warpgroup's rows of M-block ``pid_m`` and the ``NC`` columns from ``col0``: their slots
    (padding rows: slot 0, whose scales they read; never stored), which are real, the rows' input
    rows -- the rows of the input's scales: tokens for GEMM1, slots for GEMM2 (TOP_K 1), or with
    A_PADDED (GEMM2's input quantized in block-padded order) the block-padded positions -- the
    columns, which are inside N, and the rows' block-padded positions."""
    rows = pid_m * (2 * HALF_M) + HALF * HALF_M + gl.arange(0, HALF_M, layout=gl.SliceLayout(1, layout))
    slots = gl.load(sorted_ids_ptr + rows)
    row_ok = slots < num_slots
    slots = gl.where(row_ok, slots, 0)
    if A_PADDED:
        tok64 = rows.to(gl.int64)
    else:
        tok64 = (slots // TOP_K).to(gl.int64)
    cols = col0 + gl.arange(0, NC, layout=gl.SliceLayout(0, layout))
    return slots, row_ok, tok64, cols, cols < N, rows


@gluon.jit
def _ws_epilogue(acc_g, acc_u, e, pid_m, col0, out_ptr, a_scale_ptr, w_scale_ptr, bias_ptr, topk_w_ptr, out_qscale_ptr,
                 sorted_ids_ptr, N, num_slots, stride_om, stride_asm, stride_wse, stride_wsn, stride_be, act_alpha,
                 act_beta, act_limit, HALF: gl.constexpr, HALF_M: gl.constexpr, TOP_K: gl.constexpr, ACT: gl.constexpr,
                 GATED: gl.constexpr, QUANT: gl.constexpr, OUT_Q: gl.constexpr, ROUND_DTYPE: gl.constexpr,
                 HAS_BIAS: gl.constexpr, WEIGHT_ON_INPUT: gl.constexpr, MUL_ROUTING_WEIGHT: gl.constexpr,
                 NC: gl.constexpr, RCP_DIV: gl.constexpr, OUT_PADDED: gl.constexpr, A_PADDED: gl.constexpr,
                 ZERO_PAD: gl.constexpr, layout: gl.constexpr):
    """The ``NC`` output columns from ``col0`` of this warpgroup's rows (:func:`_ws_store`; with ``OUT_PADDED``
    stored at the rows' block-padded positions)."""
    slots, row_ok, tok64, cols, n_ok, rows = _ws_rows(sorted_ids_ptr, pid_m, col0, num_slots, N, HALF, HALF_M, TOP_K,
                                                      NC, A_PADDED, layout)
    _ws_store(acc_g, acc_u, e, slots, row_ok, tok64, rows if OUT_PADDED else slots, cols, n_ok, out_ptr, a_scale_ptr,
              w_scale_ptr, bias_ptr, topk_w_ptr, out_qscale_ptr, N, stride_om, stride_asm, stride_wse, stride_wsn,
              stride_be, act_alpha, act_beta, act_limit, ACT, GATED, QUANT, OUT_Q, ROUND_DTYPE, HAS_BIAS,
              WEIGHT_ON_INPUT, MUL_ROUTING_WEIGHT, RCP_DIV, ZERO_PAD)


@gluon.jit
def _ws_sub_epilogues(acc0, acc1, acc2, acc3, e, pid_m, col0, out_ptr, a_scale_ptr, w_scale_ptr, bias_ptr, topk_w_ptr,
                      out_qscale_ptr, sorted_ids_ptr, N, num_slots, stride_om, stride_asm, stride_wse, stride_wsn,
                      stride_be, act_alpha, act_beta, act_limit, HALF: gl.constexpr, HALF_M: gl.constexpr,
                      TOP_K: gl.constexpr, ACT: gl.constexpr, GATED: gl.constexpr, QUANT: gl.constexpr,
                      OUT_Q: gl.constexpr, ROUND_DTYPE: gl.constexpr, HAS_BIAS: gl.constexpr,
                      WEIGHT_ON_INPUT: gl.constexpr, MUL_ROUTING_WEIGHT: gl.constexpr, SN: gl.constexpr,
                      RCP_DIV: gl.constexpr, OUT_PADDED: gl.constexpr, A_PADDED: gl.constexpr,
                      ZERO_PAD: gl.constexpr, layout: gl.constexpr):
    """:func:`_ws_epilogue` of a pipelined wide tile's four ``SN``-column sums (:func:`_ws_wide_pipe_k_loop`): gated,
    (gate, up) = (acc0, acc2) for the columns from ``col0`` and (acc1, acc3) for the next ``SN``; otherwise acc<j> for
    the ``j``-th ``SN`` columns from ``col0``."""
    for j in gl.static_range(2 if GATED else 4):
        g = acc0
        u = acc2 if GATED else acc0
        if j == 1:
            g = acc1
            u = acc3 if GATED else acc1
        elif j == 2:
            g = acc2
            u = acc2
        elif j == 3:
            g = acc3
            u = acc3
        _ws_epilogue(g, u, e, pid_m, col0 + j * SN, out_ptr, a_scale_ptr, w_scale_ptr, bias_ptr, topk_w_ptr,
                     out_qscale_ptr, sorted_ids_ptr, N, num_slots, stride_om, stride_asm, stride_wse, stride_wsn,
                     stride_be, act_alpha, act_beta, act_limit, HALF, HALF_M, TOP_K, ACT, GATED, QUANT, OUT_Q,
                     ROUND_DTYPE, HAS_BIAS, WEIGHT_ON_INPUT, MUL_ROUTING_WEIGHT, SN, RCP_DIV, OUT_PADDED, A_PADDED,
                     ZERO_PAD, layout)


@gluon.jit
def _ws_store(acc_g, acc_u, e, slots, row_ok, tok64, out_rows, cols, n_ok, out_ptr, a_scale_ptr, w_scale_ptr, bias_ptr,
              topk_w_ptr, out_qscale_ptr, N, stride_om, stride_asm, stride_wse, stride_wsn, stride_be, act_alpha,
              act_beta, act_limit, ACT: gl.constexpr, GATED: gl.constexpr, QUANT: gl.constexpr, OUT_Q: gl.constexpr,
              ROUND_DTYPE: gl.constexpr, HAS_BIAS: gl.constexpr, WEIGHT_ON_INPUT: gl.constexpr,
              MUL_ROUTING_WEIGHT: gl.constexpr, RCP_DIV: gl.constexpr, ZERO_PAD: gl.constexpr):
    """A [rows, columns] tile of fp32 gate / up accumulators (``acc_u`` unused unless GATED) -> the output: scales,
    routing weight on input, bias, routing weight (GEMM2), activation, rounding, re-quantization, stored at
    ``out_rows`` (the slots, or block-padded positions) where the slot is real (``row_ok``) and the column inside N
    (also ``kernels/_ws_dec.py``'s epilogue). ``tok64``: the rows of the input's per-row scales."""
    e64 = e.to(gl.int64)
    acc_g, acc_u = _gemm1_epilogue(acc_g, acc_u, e64, tok64, slots, cols, n_ok, N, a_scale_ptr, w_scale_ptr,
                                   bias_ptr, topk_w_ptr, stride_asm, stride_wse, stride_wsn, stride_be, QUANT,
                                   GATED, WEIGHT_ON_INPUT, HAS_BIAS)
    if MUL_ROUTING_WEIGHT:  # GEMM2: after the bias
        acc_g = acc_g * gl.load(topk_w_ptr + slots).to(gl.float32)[:, None]
    h = _activation(acc_g, acc_u, ACT, act_alpha, act_beta, act_limit).to(ROUND_DTYPE)
    offs = out_rows.to(gl.int64)[:, None] * stride_om + cols[None, :]
    if OUT_Q == OUT_FP8_STATIC:  # e4m3(clamp(h / a2)), a2 the static scale of GEMM2's input
        q = _div_by_scale(h.to(gl.float32), gl.load(out_qscale_ptr), RCP_DIV)
        h = gl.minimum(gl.maximum(q, -FP8_MAX), FP8_MAX)
    st_mask = row_ok[:, None] & n_ok[None, :]
    if ZERO_PAD:  # out_rows block-padded: the block's padding rows stored as zeros (what GEMM2's gather would give)
        h = gl.where(row_ok[:, None], h, gl.zeros_like(h))
        st_mask = (out_rows >= 0)[:, None] & n_ok[None, :]
    hv = h.to(out_ptr.dtype.element_ty)
    gl.store(out_ptr + offs, hv, mask=st_mask)
    if OUT_Q == OUT_PLAIN_AMAX:  # max |h| of the stored tile into the int32 amax (out_qscale_ptr)
        _atomic_amax(out_qscale_ptr, hv, st_mask)


@gluon.jit
def _ws_pipe_issue(a_bufs, wg_bufs, wu_bufs, ready, it, pg, pu, GATED: gl.constexpr, STAGES: gl.constexpr,
                   XG: gl.constexpr = False):
    """Ring step ``it``'s wgmmas into the partial set ``pg`` (/ ``pu``), fresh (use_acc False), not waited for."""
    s = _ring_ready(ready, it, STAGES, XG)
    pg = warpgroup_mma(a_bufs.index(s), wg_bufs.index(s).permute((1, 0)), pg, use_acc=False, is_async=True)
    if GATED:
        pu = warpgroup_mma(a_bufs.index(s), wu_bufs.index(s).permute((1, 0)), pu, use_acc=False, is_async=True)
    return pg, pu


@gluon.jit
def _ws_blk_scales(as_rows, ws0_ptr, ws1_ptr, kb, GATED: gl.constexpr):
    """FP8 blocks, K block ``kb``: ``a_s[row] * w_s`` for the tile's first column group (gated: the gate tile) and
    its second (the up tile, or a wide non-gated tile's second 128 columns) -- ``[rows, 1]`` each, one weight scale
    a group (``W_SCALAR``); the factors the narrow tiles' vectors give, ``a_s[row] * w_s[col // 128]``."""
    a_s = gl.load(as_rows + kb)[:, None]
    s0 = a_s * gl.load(ws0_ptr + kb)
    s1 = s0
    if GATED:
        s1 = a_s * gl.load(ws1_ptr + kb)
    return s0, s1


@gluon.jit
def _ws_pipe_retire(empty, acc_g, acc_u, dg, du, fg, fu, it, AHEAD: gl.constexpr, GATED: gl.constexpr,
                    STAGES: gl.constexpr, sg=0, su=0, BLOCK: gl.constexpr = False):
    """Wait for ring step ``it``'s partial set (``dg`` / ``du``), release its slot and add it to the fp32 sums;
    ``AHEAD``: the set issued after it (``fg`` / ``fu``) stays in flight (the wait passes it through as a value).
    ``BLOCK``: FP8 blocks, each partial times its scale factors ``sg`` / ``su`` (:func:`_ws_blk_scales`) in one FMA
    (``_ws_fma``)."""
    if GATED:
        dg, du, fg, fu = warpgroup_mma_wait(num_outstanding=2 if AHEAD else 0, deps=(dg, du, fg, fu))
        if BLOCK:
            acc_u = _ws_fma(acc_u, du, su)
        else:
            acc_u = acc_u + du
    else:
        dg, fg = warpgroup_mma_wait(num_outstanding=1 if AHEAD else 0, deps=(dg, fg))
    mbarrier.arrive(empty.index(_ring_pos(it, STAGES)[0]), count=1)
    if BLOCK:
        acc_g = _ws_fma(acc_g, dg, sg)
    else:
        acc_g = acc_g + dg
    return acc_g, acc_u, dg, du, fg, fu


@gluon.jit
def _ws_pipe_k_loop(a_bufs, wg_bufs, wu_bufs, ready, empty, acc_g, acc_u, pa_g, pa_u, it, n_k,
                    GATED: gl.constexpr, STAGES: gl.constexpr, as_rows=0, ws0_ptr=0, ws1_ptr=0,
                    BLOCK: gl.constexpr = False, XG: gl.constexpr = False):
    """The promoted K loop with two partial sets taking turns (``_ws_consumer``'s PIPE): set A holds the even K
    blocks, set B the odd ones; each block's wgmmas are issued before the block before it is waited for and added.
    Unrolled by two (the sets keep their registers): pairs (A, B) while a block follows them, then the tail -- one
    block in A, or two. ``BLOCK`` (FP8 blocks, ``W_SCALAR``): each block's scale factors (:func:`_ws_blk_scales`:
    ``as_rows`` the rows' activation scales, ``ws0_ptr`` / ``ws1_ptr`` the weight scales of the gate / up tile)
    loaded after its wgmmas are issued, kept until it is added. Returns the sums and the ring step after the tile."""
    kb0 = it  # (the tile's K block = ring step - kb0)
    pb_g = gl.zeros_like(pa_g)
    pb_u = gl.zeros_like(pa_u)
    pa_g, pa_u = _ws_pipe_issue(a_bufs, wg_bufs, wu_bufs, ready, it, pa_g, pa_u, GATED, STAGES, XG)
    sa_g = 0
    sa_u = 0
    if BLOCK:
        sa_g, sa_u = _ws_blk_scales(as_rows, ws0_ptr, ws1_ptr, 0, GATED)
    # (a value again, still in flight: loop-carried sets keep one type)
    if GATED:
        pa_g, pa_u = warpgroup_mma_wait(num_outstanding=2, deps=(pa_g, pa_u))
    else:
        pa_g = warpgroup_mma_wait(num_outstanding=1, deps=(pa_g,))
    for _ in range((n_k - 1) // 2):  # blocks 2j (A, in flight) and 2j + 1; block 2j + 2 exists
        pb_g, pb_u = _ws_pipe_issue(a_bufs, wg_bufs, wu_bufs, ready, it + 1, pb_g, pb_u, GATED, STAGES, XG)
        sb_g = 0
        sb_u = 0
        if BLOCK:
            sb_g, sb_u = _ws_blk_scales(as_rows, ws0_ptr, ws1_ptr, it + 1 - kb0, GATED)
        acc_g, acc_u, pa_g, pa_u, pb_g, pb_u = _ws_pipe_retire(empty, acc_g, acc_u, pa_g, pa_u, pb_g, pb_u, it, True,
                                                               GATED, STAGES, sa_g, sa_u, BLOCK)
        pa_g, pa_u = _ws_pipe_issue(a_bufs, wg_bufs, wu_bufs, ready, it + 2, pa_g, pa_u, GATED, STAGES, XG)
        if BLOCK:
            sa_g, sa_u = _ws_blk_scales(as_rows, ws0_ptr, ws1_ptr, it + 2 - kb0, GATED)
        acc_g, acc_u, pb_g, pb_u, pa_g, pa_u = _ws_pipe_retire(empty, acc_g, acc_u, pb_g, pb_u, pa_g, pa_u, it + 1,
                                                               True, GATED, STAGES, sb_g, sb_u, BLOCK)
        it += 2
    if n_k % 2 == 0:  # two blocks left: A (in flight) and the last
        pb_g, pb_u = _ws_pipe_issue(a_bufs, wg_bufs, wu_bufs, ready, it + 1, pb_g, pb_u, GATED, STAGES, XG)
        sb_g = 0
        sb_u = 0
        if BLOCK:
            sb_g, sb_u = _ws_blk_scales(as_rows, ws0_ptr, ws1_ptr, it + 1 - kb0, GATED)
        acc_g, acc_u, pa_g, pa_u, pb_g, pb_u = _ws_pipe_retire(empty, acc_g, acc_u, pa_g, pa_u, pb_g, pb_u, it, True,
                                                               GATED, STAGES, sa_g, sa_u, BLOCK)
        acc_g, acc_u, pb_g, pb_u, pa_g, pa_u = _ws_pipe_retire(empty, acc_g, acc_u, pb_g, pb_u, pa_g, pa_u, it + 1,
                                                               False, GATED, STAGES, sb_g, sb_u, BLOCK)
        it += 2
    else:  # one: A
        acc_g, acc_u, pa_g, pa_u, pb_g, pb_u = _ws_pipe_retire(empty, acc_g, acc_u, pa_g, pa_u, pb_g, pb_u, it, False,
                                                               GATED, STAGES, sa_g, sa_u, BLOCK)
        it += 1
    return acc_g, acc_u, it


@gluon.jit
def _ws_sub_b(wg_bufs, wu_bufs, s, j: gl.constexpr, GATED: gl.constexpr, SN: gl.constexpr):
    """wgmma's B for sub-tile ``j`` (``SN`` weight rows) of ring slot ``s``: gated -- the gate tile's halves, then the
    up tile's; otherwise the weight tile's ``j``-th ``SN`` rows."""
    if GATED and j >= 2:
        b = wu_bufs.index(s).slice((j - 2) * SN, SN)
    else:
        b = wg_bufs.index(s).slice(j * SN, SN)
    return b.permute((1, 0))


@gluon.jit
def _ws_add(acc, p):
    """``acc + p`` (fp32, round to nearest: the bits of the plain add) as PTX the compiler may not move: LLVM may
    sink a plain add of a retired partial set past the next wgmma's issue into that set, which then needs a third
    register set (sm_90 compiles of the wide pipelined loop: 1302 local loads / stores in a two-block variant, copies
    of an in-flight set at the loop's back edge that make ptxas serialize every wgmma -- C7514 -- in another)."""
    return gl.inline_asm_elementwise("add.f32 $0, $1, $2;", "=r,r,r", [acc, p], dtype=gl.float32, is_pure=False,
                                     pack=1)


@gluon.jit
def _ws_promote(acc, part, sc, a_s, w_s, QUANT: gl.constexpr, W_SCALAR: gl.constexpr):
    """One K block's partial sum ``part`` added into ``acc`` (the base loop's promotion): FP8 blocks times the
    block's scale factors -- ``sc`` (:func:`_ws_blk_scales`) with ``W_SCALAR``, else ``a_s`` and the per-column
    ``w_s`` (``_moe_gemm._scale_block``) -- otherwise plainly."""
    if QUANT == Q_BLOCK and W_SCALAR:
        acc = _ws_fma(acc, part, sc)
    elif QUANT == Q_BLOCK:
        acc = acc + _scale_block(part, a_s, w_s, False)
    else:
        acc = acc + part
    return acc


@gluon.jit
def _ws_fma(acc, p, sc):
    """``acc + p * sc`` as one fp32 FMA (round to nearest; what ptxas contracts the plain expression to) in PTX the
    compiler may not move (``_ws_add``'s reason)."""
    return gl.inline_asm_elementwise("fma.rn.f32 $0, $1, $2, $3;", "=r,r,r,r", [p, sc, acc], dtype=gl.float32,
                                     is_pure=False, pack=1)


@gluon.jit
def _ws_sub_step(a, wg_bufs, wu_bufs, s, j: gl.constexpr, GATED: gl.constexpr, SN: gl.constexpr, p_new, p_old, acc,
                 sc=0, BLOCK: gl.constexpr = False):
    """Sub-tile ``j`` of ring slot ``s`` issued into the partial set ``p_new`` (fresh, not waited for), then the set
    issued before it, ``p_old``, waited for and added into ``acc`` (``BLOCK``: times its scale factor ``sc`` in one
    FMA). Returns ``(p_new, p_old, acc)``."""
    p_new = warpgroup_mma(a, _ws_sub_b(wg_bufs, wu_bufs, s, j, GATED, SN), p_new, use_acc=False, is_async=True)
    p_old, p_new = warpgroup_mma_wait(num_outstanding=1, deps=(p_old, p_new))
    if BLOCK:
        acc = _ws_fma(acc, p_old, sc)
    else:
        acc = _ws_add(acc, p_old)
    return p_new, p_old, acc


@gluon.jit
def _ws_wide_pipe_block(a_bufs, wg_bufs, wu_bufs, ready, empty, pa, pb, acc0, acc1, acc2, acc3, it, s_prev,
                        CARRIED: gl.constexpr, GATED: gl.constexpr, STAGES: gl.constexpr, SN: gl.constexpr,
                        s0=0, s1=0, s1_prev=0, BLOCK: gl.constexpr = False, XG: gl.constexpr = False):
    """Ring step ``it``'s four sub-tiles, 0 into ``pa``, 1 into ``pb``, 2 into ``pa``, 3 into ``pb``, each issued
    before the one before it is waited for and added (into ``acc<j - 1>``); sub-tile 3 is left in flight.
    ``CARRIED``: the block before's sub-tile 3 (``pb``) is still in flight -- sub-tile 0 goes in first, then it is
    waited for and added into ``acc3`` and the block before's slot ``s_prev`` released. ``BLOCK``: sub-tiles 0-1
    scaled by ``s0``, 2-3 by ``s1`` (:func:`_ws_blk_scales`), the carried one by the block before's ``s1_prev``.
    Returns the sets, the sums and this block's slot."""
    s = _ring_ready(ready, it, STAGES, XG)
    a = a_bufs.index(s)
    if CARRIED:
        pa, pb, acc3 = _ws_sub_step(a, wg_bufs, wu_bufs, s, 0, GATED, SN, pa, pb, acc3, s1_prev, BLOCK)
        mbarrier.arrive(empty.index(s_prev), count=1)
    else:
        pa = warpgroup_mma(a, _ws_sub_b(wg_bufs, wu_bufs, s, 0, GATED, SN), pa, use_acc=False, is_async=True)
    pb, pa, acc0 = _ws_sub_step(a, wg_bufs, wu_bufs, s, 1, GATED, SN, pb, pa, acc0, s0, BLOCK)
    pa, pb, acc1 = _ws_sub_step(a, wg_bufs, wu_bufs, s, 2, GATED, SN, pa, pb, acc1, s0, BLOCK)
    pb, pa, acc2 = _ws_sub_step(a, wg_bufs, wu_bufs, s, 3, GATED, SN, pb, pa, acc2, s1, BLOCK)
    return pa, pb, acc0, acc1, acc2, acc3, s


@gluon.jit
def _ws_wide_pipe_k_loop(a_bufs, wg_bufs, wu_bufs, ready, empty, acc0, acc1, acc2, acc3, it, n_k,
                         GATED: gl.constexpr, STAGES: gl.constexpr, SN: gl.constexpr, as_rows=0, ws0_ptr=0,
                         ws1_ptr=0, BLOCK: gl.constexpr = False, XG: gl.constexpr = False):
    """The promoted K loop of a wide one-set tile (``_ws_consumer``'s ONE_PART) pipelined: each K block as four
    ``SN``-column sub-tiles (gated: gate's two halves, then up's) whose fresh partial sums alternate between two
    ``SN``-column sets -- sub-tile j + 1's wgmma is issued before the warpgroup waits for sub-tile j's and adds it
    into ``acc<j mod 4>``, across K blocks too (a block's last sub-tile runs while the next block's first is
    issued), so the warpgroup waits with nothing in flight only once a tile, after its last block; the base one-set
    loop does twice a block. As many registers as the one-set loop (four SN-column sums and two SN-column partial
    sets against two 2 SN-column sums and one 2 SN-column set); the same partial products added in the same order:
    the same bits. Returns the four sums and the ring step after the tile.

    The shape of the code is what ptxas needs to keep the wgmmas asynchronous (sm_90 compiles, thirty-eighth
    session): the first block before the loop, the last after it behind ``n_k >= 2`` -- a loop over all blocks but
    the first, exited straight into the final wait, makes ptxas serialize every wgmma of the kernel (C7514, "non
    wgmma instructions reading accumulator registers"; so did a two-set test loop on the narrow tiles, fixed by the
    same shape: ``_ws_pipe_k_loop``'s even tail), for reasons not understood; ``_ws_add`` keeps LLVM from needing a
    third partial set. ``BLOCK`` (FP8 blocks, ``W_SCALAR``): each block's two scale factors (:func:`_ws_blk_scales`:
    the first 128 columns' and the second's) loaded before its sub-tiles, the second kept for the sub-tile carried
    into the next block."""
    pa = gl.zeros_like(acc0)
    pb = gl.zeros_like(acc0)
    s0 = 0
    s1 = 0
    if BLOCK:
        s0, s1 = _ws_blk_scales(as_rows, ws0_ptr, ws1_ptr, 0, True)
    pa, pb, acc0, acc1, acc2, acc3, s = _ws_wide_pipe_block(a_bufs, wg_bufs, wu_bufs, ready, empty, pa, pb, acc0,
                                                            acc1, acc2, acc3, it, 0, False, GATED, STAGES, SN, s0, s1,
                                                            s1, BLOCK, XG)
    for kk in range(n_k - 2):
        s1_prev = s1
        if BLOCK:
            s0, s1 = _ws_blk_scales(as_rows, ws0_ptr, ws1_ptr, 1 + kk, True)
        pa, pb, acc0, acc1, acc2, acc3, s = _ws_wide_pipe_block(a_bufs, wg_bufs, wu_bufs, ready, empty, pa, pb, acc0,
                                                                acc1, acc2, acc3, it + 1 + kk, s, True, GATED,
                                                                STAGES, SN, s0, s1, s1_prev, BLOCK, XG)
    if n_k >= 2:  # the last block (see above: this shape, not the loop running one more trip)
        s1_prev = s1
        if BLOCK:
            s0, s1 = _ws_blk_scales(as_rows, ws0_ptr, ws1_ptr, n_k - 1, True)
        pa, pb, acc0, acc1, acc2, acc3, s = _ws_wide_pipe_block(a_bufs, wg_bufs, wu_bufs, ready, empty, pa, pb, acc0,
                                                                acc1, acc2, acc3, it + n_k - 1, s, True, GATED,
                                                                STAGES, SN, s0, s1, s1_prev, BLOCK, XG)
        pb, pa = warpgroup_mma_wait(num_outstanding=0, deps=(pb, pa))
    else:
        pb = warpgroup_mma_wait(num_outstanding=0, deps=(pb,))
    mbarrier.arrive(empty.index(s), count=1)
    if BLOCK:
        acc3 = _ws_fma(acc3, pb, s1)
    else:
        acc3 = _ws_add(acc3, pb)
    return acc0, acc1, acc2, acc3, it + n_k


@gluon.jit
def _ws_consumer(a_bufs, wg_bufs, wu_bufs, ready, empty, out_ptr, a_scale_ptr, w_scale_ptr, bias_ptr, topk_w_ptr,
                 out_qscale_ptr, sorted_ids_ptr, block_expert_ptr, num_post_padded_ptr, N, K, num_slots, stride_om,
                 stride_asm, stride_wse, stride_wsn, stride_be, act_alpha, act_beta, act_limit,
                 HALF: gl.constexpr, HALF_M: gl.constexpr, TOP_K: gl.constexpr, E_LOC: gl.constexpr,
                 ACT: gl.constexpr, GATED: gl.constexpr, QUANT: gl.constexpr, OUT_Q: gl.constexpr,
                 ROUND_DTYPE: gl.constexpr, HAS_BIAS: gl.constexpr, WEIGHT_ON_INPUT: gl.constexpr,
                 MUL_ROUTING_WEIGHT: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
                 GROUP_M: gl.constexpr, SKIP_HALF: gl.constexpr, RCP_DIV: gl.constexpr, OUT_PADDED: gl.constexpr,
                 A_PADDED: gl.constexpr, ZERO_PAD: gl.constexpr, PIPE: gl.constexpr = False,
                 W_SCALAR: gl.constexpr = False, X_GATHER: gl.constexpr = False, tiles=0, tq_ready=0,
                 tq_empty=0, DYN: gl.constexpr = False, TQ: gl.constexpr = 1):
    """MMA warpgroup for rows [HALF * 64, HALF * 64 + 64) of every tile: per K block a fresh
    wgmma (gated: gate and up), one wait, the slot released, the fp32 adds; then the epilogue.

    PIPE (FP8 per tensor / channel; ``KernelConfig.pipelined_promotion``): two partial-sum sets taking turns, so
    that block k + 1's wgmmas are issued before the warpgroup waits for block k's and adds them -- the tensor cores
    get the next block while the fp32 adds run; in the ONE_PART tiles (below) by 64-column sub-tiles
    (``_ws_wide_pipe_k_loop``). The same partial products added in the same order: the same bits.

    ONE_PART (FP8 tiles of 2 x 128 gated or 256 columns): one promoted partial-sum set of 128
    columns serves the K block's two halves in turn -- gate then up, or the tile's first then second
    128 columns: wgmma, wait, add, twice -- so 128 + 64 fp32 registers a thread hold a tile twice as
    wide as the two-set 2 x 64 / 128 ones (half the L2 bytes of A per FLOP). FP8 blocks (thirty-eighth
    session, compiled only): each half's partial times ``a_s[row] * w_s`` with one weight scale a
    half, fused into the add (``_ws_fma``) -- with the per-column scale vectors of the narrow tiles,
    or with a plain multiply-add that LLVM sinks past the next wgmma, they spilled.

    W_SCALAR (FP8 blocks; ``triton_moe._ws_block_w_scalar``): one weight scale a K block for each of
    the tile's column groups, loaded as a scalar -- where each group lies in one 128-row scale block
    -- instead of a per-column vector (``w_s[col // 128]``): the same FMA per product, the same bits;
    the wide tiles need it, the narrow ones take it under ``set_ws_block_scalar_scales``.

    X_GATHER: the A tiles came by cp.async (``_ws_loader``): a proxy fence after each ring wait
    (:func:`_ring_ready`).

    DYN: the tiles in the order the loader fetched them from the global counter, taken from the tile queue
    in shared memory (:func:`_ws_tile_take`) until one past the last."""
    INSTR_K: gl.constexpr = 16 if QUANT == Q_NONE else 32  # wgmma's K: 32 bytes of either operand
    ONE_PART: gl.constexpr = QUANT != Q_NONE and ((GATED and BN == 128) or ((not GATED) and BN == 256))
    PN: gl.constexpr = BN // 2 if ONE_PART and not GATED else BN  # columns of one accumulator
    layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                     instr_shape=[16, PN, INSTR_K])
    num_m = gl.load(num_post_padded_ptr) // (2 * HALF_M)
    num_n = gl.cdiv(N, BN)
    n_k = gl.cdiv(K, BK)
    part_g = gl.zeros((HALF_M, PN), dtype=gl.float32, layout=layout)
    part_u = gl.zeros((HALF_M, PN), dtype=gl.float32, layout=layout)
    rt = (out_ptr, a_scale_ptr, w_scale_ptr, bias_ptr, topk_w_ptr, out_qscale_ptr, sorted_ids_ptr, block_expert_ptr,
          N, K, num_slots, stride_om, stride_asm, stride_wse, stride_wsn, stride_be, act_alpha, act_beta, act_limit)
    it = 0
    if DYN:
        q = 0
        t = _ws_tile_take(tiles, tq_ready, tq_empty, q, TQ)
        while t < num_m * num_n:
            it, part_g, part_u = _ws_consume_tile(t, it, num_m, num_n, n_k, part_g, part_u, a_bufs, wg_bufs, wu_bufs,
                                                  ready, empty, rt, HALF, HALF_M, TOP_K, E_LOC, ACT, GATED, QUANT,
                                                  OUT_Q, ROUND_DTYPE, HAS_BIAS, WEIGHT_ON_INPUT, MUL_ROUTING_WEIGHT,
                                                  BN, BK, STAGES, GROUP_M, SKIP_HALF, RCP_DIV, OUT_PADDED, A_PADDED,
                                                  ZERO_PAD, PIPE, W_SCALAR, X_GATHER)
            q += 1
            t = _ws_tile_take(tiles, tq_ready, tq_empty, q, TQ)
    else:
        for t in range(gl.program_id(0), num_m * num_n, gl.num_programs(0)):
            it, part_g, part_u = _ws_consume_tile(t, it, num_m, num_n, n_k, part_g, part_u, a_bufs, wg_bufs, wu_bufs,
                                                  ready, empty, rt, HALF, HALF_M, TOP_K, E_LOC, ACT, GATED, QUANT,
                                                  OUT_Q, ROUND_DTYPE, HAS_BIAS, WEIGHT_ON_INPUT, MUL_ROUTING_WEIGHT,
                                                  BN, BK, STAGES, GROUP_M, SKIP_HALF, RCP_DIV, OUT_PADDED, A_PADDED,
                                                  ZERO_PAD, PIPE, W_SCALAR, X_GATHER)


@gluon.jit
def _ws_consume_tile(t, it, num_m, num_n, n_k, part_g, part_u, a_bufs, wg_bufs, wu_bufs, ready, empty, rt,
                     HALF: gl.constexpr, HALF_M: gl.constexpr, TOP_K: gl.constexpr, E_LOC: gl.constexpr,
                     ACT: gl.constexpr, GATED: gl.constexpr, QUANT: gl.constexpr, OUT_Q: gl.constexpr,
                     ROUND_DTYPE: gl.constexpr, HAS_BIAS: gl.constexpr, WEIGHT_ON_INPUT: gl.constexpr,
                     MUL_ROUTING_WEIGHT: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
                     GROUP_M: gl.constexpr, SKIP_HALF: gl.constexpr, RCP_DIV: gl.constexpr, OUT_PADDED: gl.constexpr,
                     A_PADDED: gl.constexpr, ZERO_PAD: gl.constexpr, PIPE: gl.constexpr, W_SCALAR: gl.constexpr,
                     X_GATHER: gl.constexpr):
    """:func:`_ws_consumer`'s work for tile ``t``: its K blocks from ring step ``it`` on, then its epilogue (nothing
    for a tile of a non-local expert; the ring kept in step for a half it skips). ``part_g`` / ``part_u``: the
    partial-sum registers, carried from tile to tile; ``rt``: the consumer's runtime arguments from ``out_ptr`` to
    ``act_limit`` (but ``num_post_padded_ptr``). Returns (the next ring step, part_g, part_u)."""
    out_ptr, a_scale_ptr, w_scale_ptr, bias_ptr, topk_w_ptr, out_qscale_ptr, sorted_ids_ptr, block_expert_ptr, N, K, \
        num_slots, stride_om, stride_asm, stride_wse, stride_wsn, stride_be, act_alpha, act_beta, act_limit = rt
    INSTR_K: gl.constexpr = 16 if QUANT == Q_NONE else 32  # wgmma's K: 32 bytes of either operand
    ONE_PART: gl.constexpr = QUANT != Q_NONE and ((GATED and BN == 128) or ((not GATED) and BN == 256))
    PN: gl.constexpr = BN // 2 if ONE_PART and not GATED else BN  # columns of one accumulator
    SUB_PIPE: gl.constexpr = ONE_PART and PIPE  # _ws_wide_pipe_k_loop
    layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                     instr_shape=[16, PN, INSTR_K])
    # PIPE on a wide one-set tile: its K blocks as four SN-column sub-tiles (_ws_wide_pipe_k_loop)
    SN: gl.constexpr = 64
    sub_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, SN, INSTR_K])
    pid_m, pid_n = _tile_ids(t, num_m, num_n, GROUP_M)
    e = gl.load(block_expert_ptr + pid_m)
    live = e < E_LOC
    if SKIP_HALF and HALF == 1:  # the second half of an expert's last block may be all padding (valid rows first)
        live = live & (gl.load(sorted_ids_ptr + pid_m * (2 * HALF_M) + HALF_M) < num_slots)
    if (e < E_LOC) & (live == 0):
        # nothing to compute or store: keep step with the ring (each slot's data has landed before
        # it is released, so the loader's phases stay in order), no MMA, no A half was loaded
        for kk in range(n_k):
            s, ph = _ring_pos(it, STAGES)
            mbarrier.wait(ready.index(s), ph)
            mbarrier.arrive(empty.index(s), count=1)
            it += 1
    if live:
        acc_g = gl.zeros((HALF_M, PN), dtype=gl.float32, layout=layout)
        acc_u = gl.zeros((HALF_M, PN), dtype=gl.float32, layout=layout)
        as_rows = 0  # (FP8 blocks' scale pointers; placeholders for the loops' signatures otherwise)
        ws0_ptr = 0
        ws1_ptr = 0
        if QUANT == Q_BLOCK:  # FP8 128 x 128 blocks: per K block, a_s[row, kb] and w_s[col // 128, kb]
            e64 = e.to(gl.int64)
            if SUB_PIPE:  # (the rows in the sub-tiles' layout)
                slots, row_ok, tok64, cols, n_ok, _ = _ws_rows(sorted_ids_ptr, pid_m, pid_n * BN, num_slots, N,
                                                               HALF, HALF_M, TOP_K, SN, A_PADDED, sub_layout)
            else:
                slots, row_ok, tok64, cols, n_ok, _ = _ws_rows(sorted_ids_ptr, pid_m, pid_n * BN, num_slots, N,
                                                               HALF, HALF_M, TOP_K, PN, A_PADDED, layout)
            as_rows = a_scale_ptr + tok64 * stride_asm
            if ONE_PART or W_SCALAR:  # one scale block for each half's columns (the launcher's W_SCALAR rule)
                ws0_ptr = w_scale_ptr + e64 * stride_wse + ((pid_n * BN) // 128) * stride_wsn
                if GATED:
                    ws1_ptr = w_scale_ptr + e64 * stride_wse + ((N + pid_n * BN) // 128) * stride_wsn
                else:  # (a tail tile's second half past N: the first's scales, never stored -- no read past
                    # the scale rows)
                    ws1_ptr = ws0_ptr + (pid_n * BN + 128 < N).to(gl.int32) * stride_wsn
            else:
                wsg_cols = w_scale_ptr + e64 * stride_wse + (cols // 128) * stride_wsn
                wsu_cols = w_scale_ptr + e64 * stride_wse + ((N + cols) // 128) * stride_wsn
        if QUANT == Q_NONE:
            # 16-bit operands: one accumulator chain; the K block before this one has retired when
            # at most this block's wgmmas are in flight -> its slot is released
            for kk in range(n_k):
                s = _ring_ready(ready, it, STAGES, X_GATHER)
                acc_g = warpgroup_mma(a_bufs.index(s), wg_bufs.index(s).permute((1, 0)), acc_g, is_async=True)
                if GATED:
                    acc_u = warpgroup_mma(a_bufs.index(s), wu_bufs.index(s).permute((1, 0)), acc_u,
                                          is_async=True)
                    acc_g, acc_u = warpgroup_mma_wait(num_outstanding=2, deps=(acc_g, acc_u))
                else:
                    acc_g = warpgroup_mma_wait(num_outstanding=1, deps=(acc_g,))
                if kk > 0:
                    mbarrier.arrive(empty.index(_ring_prev(it, STAGES)), count=1)
                it += 1
            if GATED:
                acc_g, acc_u = warpgroup_mma_wait(num_outstanding=0, deps=(acc_g, acc_u))
            else:
                acc_g = warpgroup_mma_wait(num_outstanding=0, deps=(acc_g,))
            mbarrier.arrive(empty.index(_ring_prev(it, STAGES)), count=1)
        elif SUB_PIPE:  # the wide tile as four SN-column sub-tiles, two partial sets in turn
            acc0 = gl.zeros((HALF_M, SN), dtype=gl.float32, layout=sub_layout)
            acc1 = gl.zeros((HALF_M, SN), dtype=gl.float32, layout=sub_layout)
            acc2 = gl.zeros((HALF_M, SN), dtype=gl.float32, layout=sub_layout)
            acc3 = gl.zeros((HALF_M, SN), dtype=gl.float32, layout=sub_layout)
            acc0, acc1, acc2, acc3, it = _ws_wide_pipe_k_loop(a_bufs, wg_bufs, wu_bufs, ready, empty, acc0, acc1,
                                                              acc2, acc3, it, n_k, GATED, STAGES, SN, as_rows,
                                                              ws0_ptr, ws1_ptr, QUANT == Q_BLOCK, X_GATHER)
        elif ONE_PART:
            for kk in range(n_k):
                s = _ring_ready(ready, it, STAGES, X_GATHER)
                if GATED:
                    b0 = wg_bufs.index(s).permute((1, 0))
                    b1 = wu_bufs.index(s).permute((1, 0))
                else:
                    b0 = wg_bufs.index(s).slice(0, PN).permute((1, 0))
                    b1 = wg_bufs.index(s).slice(PN, PN).permute((1, 0))
                part_g = warpgroup_mma(a_bufs.index(s), b0, part_g, use_acc=False, is_async=True)
                if QUANT == Q_BLOCK:  # this K block's scale factors, loaded while the MMA runs
                    s0, s1 = _ws_blk_scales(as_rows, ws0_ptr, ws1_ptr, kk, True)
                part_g = warpgroup_mma_wait(num_outstanding=0, deps=(part_g,))
                if QUANT == Q_BLOCK:
                    acc_g = _ws_fma(acc_g, part_g, s0)
                else:
                    acc_g = acc_g + part_g
                part_g = warpgroup_mma(a_bufs.index(s), b1, part_g, use_acc=False, is_async=True)
                part_g = warpgroup_mma_wait(num_outstanding=0, deps=(part_g,))
                mbarrier.arrive(empty.index(s), count=1)
                if QUANT == Q_BLOCK:
                    acc_u = _ws_fma(acc_u, part_g, s1)
                else:
                    acc_u = acc_u + part_g
                it += 1
        elif PIPE:  # (FP8 blocks: with W_SCALAR -- the per-column scale vectors of two partial sets spilled)
            acc_g, acc_u, it = _ws_pipe_k_loop(a_bufs, wg_bufs, wu_bufs, ready, empty, acc_g, acc_u, part_g,
                                               part_u, it, n_k, GATED, STAGES, as_rows, ws0_ptr, ws1_ptr,
                                               QUANT == Q_BLOCK, X_GATHER)
        else:
            for kk in range(n_k):
                s = _ring_ready(ready, it, STAGES, X_GATHER)
                part_g = warpgroup_mma(a_bufs.index(s), wg_bufs.index(s).permute((1, 0)), part_g, use_acc=False,
                                       is_async=True)
                if GATED:
                    part_u = warpgroup_mma(a_bufs.index(s), wu_bufs.index(s).permute((1, 0)), part_u, use_acc=False,
                                           is_async=True)
                sg = 0  # (the scale factors _ws_promote takes; placeholders unless FP8 blocks)
                su = 0
                a_s = 0
                wg_s = 0
                wu_s = 0
                if QUANT == Q_BLOCK and W_SCALAR:  # one weight scale for the gate tile's columns, one for
                    # the up tile's: this K block's scale factors, loaded while the MMAs run
                    sg, su = _ws_blk_scales(as_rows, ws0_ptr, ws1_ptr, kk, GATED)
                elif QUANT == Q_BLOCK:  # this K block's scales, loaded while the MMAs run
                    a_s = gl.load(as_rows + kk)
                    wg_s = gl.load(wsg_cols + kk, mask=n_ok, other=0.0)
                    if GATED:
                        wu_s = gl.load(wsu_cols + kk, mask=n_ok, other=0.0)
                if GATED:
                    part_g, part_u = warpgroup_mma_wait(num_outstanding=0, deps=(part_g, part_u))
                    acc_u = _ws_promote(acc_u, part_u, su, a_s, wu_s, QUANT, W_SCALAR)
                else:
                    part_g = warpgroup_mma_wait(num_outstanding=0, deps=(part_g,))
                mbarrier.arrive(empty.index(s), count=1)
                acc_g = _ws_promote(acc_g, part_g, sg, a_s, wg_s, QUANT, W_SCALAR)
                it += 1

        # ---- epilogue: scales, routing weight on input, bias, activation, store by slot ----
        if SUB_PIPE:  # the four sub-tile sums: gated (gate, up) of two SN-column halves, else quarters
            _ws_sub_epilogues(acc0, acc1, acc2, acc3, e, pid_m, pid_n * BN, out_ptr, a_scale_ptr, w_scale_ptr,
                              bias_ptr, topk_w_ptr, out_qscale_ptr, sorted_ids_ptr, N, num_slots, stride_om,
                              stride_asm, stride_wse, stride_wsn, stride_be, act_alpha, act_beta, act_limit, HALF,
                              HALF_M, TOP_K, ACT, GATED, QUANT, OUT_Q, ROUND_DTYPE, HAS_BIAS, WEIGHT_ON_INPUT,
                              MUL_ROUTING_WEIGHT, SN, RCP_DIV, OUT_PADDED, A_PADDED, ZERO_PAD, sub_layout)
        else:
            # (ONE_PART, not gated: acc_g and acc_u hold the tile's two column halves, stored in turn)
            _ws_epilogue(acc_g, acc_u, e, pid_m, pid_n * BN, out_ptr, a_scale_ptr, w_scale_ptr, bias_ptr,
                         topk_w_ptr, out_qscale_ptr, sorted_ids_ptr, N, num_slots, stride_om, stride_asm,
                         stride_wse, stride_wsn, stride_be, act_alpha, act_beta, act_limit, HALF, HALF_M, TOP_K,
                         ACT, GATED, QUANT, OUT_Q, ROUND_DTYPE, HAS_BIAS, WEIGHT_ON_INPUT, MUL_ROUTING_WEIGHT, PN,
                         RCP_DIV, OUT_PADDED, A_PADDED, ZERO_PAD, layout)
            if ONE_PART and not GATED:
                _ws_epilogue(acc_u, acc_u, e, pid_m, pid_n * BN + PN, out_ptr, a_scale_ptr, w_scale_ptr,
                             bias_ptr, topk_w_ptr, out_qscale_ptr, sorted_ids_ptr, N, num_slots, stride_om,
                             stride_asm, stride_wse, stride_wsn, stride_be, act_alpha, act_beta, act_limit, HALF,
                             HALF_M, TOP_K, ACT, GATED, QUANT, OUT_Q, ROUND_DTYPE, HAS_BIAS, WEIGHT_ON_INPUT,
                             MUL_ROUTING_WEIGHT, PN, RCP_DIV, OUT_PADDED, A_PADDED, ZERO_PAD, layout)
    return it, part_g, part_u


@gluon.jit
def _ring_barriers(STAGES: gl.constexpr, CONSUMERS: gl.constexpr = 2, READY: gl.constexpr = 1):
    """The operand ring's mbarriers: ``ready`` (the loader's expected bytes landed; ``READY`` arrivals a phase) and
    ``empty`` (released by each of the ``CONSUMERS`` warpgroups), one of each a stage (also ``kernels/_ws_fp4.py``'s
    and, with one consumer, ``kernels/_ws_fp4_dec.py``'s and ``kernels/_ws_dec.py``'s)."""
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=READY)
        mbarrier.init(empty.index(s), count=CONSUMERS)  # every consumer warpgroup releases a slot
    return ready, empty


@gluon.jit
def _ring_release(empty, slot, T_RELEASE: gl.constexpr):
    """A consumer warpgroup frees ring slot ``slot`` (its wgmmas retired): one arrival by the warpgroup (Gluon's
    ``mbarrier.arrive``: a warpgroup barrier on either side of one thread's arrive), or (``T_RELEASE``) one by each of
    its 128 threads, with no barrier -- ``cp.async.mbarrier.arrive.noinc``, which a thread without cp.async of its
    own performs at once (the empty barriers then count 128 a consumer warpgroup). The decode kernels'
    (``_ws_fp4_dec``, ``_ws_dec``; the FP4 prefill kernel's measured slower, forty-third session, BENCHMARKS.md)."""
    if T_RELEASE:
        async_copy.mbarrier_arrive(empty.index(slot), increment_count=False)
    else:
        mbarrier.arrive(empty.index(slot), count=1)


@gluon.jit
def _ws_gemm_kernel(
    a_desc, w_desc, out_ptr, a_scale_ptr, w_scale_ptr, bias_ptr, topk_w_ptr, out_qscale_ptr, sorted_ids_ptr,
    block_expert_ptr, num_post_padded_ptr, N, K, num_slots, stride_om, stride_asm, stride_wse, stride_wsn, stride_be,
    act_alpha, act_beta, act_limit, x_ptr, stride_x,
    TOP_K: gl.constexpr, E_LOC: gl.constexpr, ACT: gl.constexpr, GATED: gl.constexpr, QUANT: gl.constexpr,
    OUT_Q: gl.constexpr, ROUND_DTYPE: gl.constexpr, HAS_BIAS: gl.constexpr, WEIGHT_ON_INPUT: gl.constexpr,
    MUL_ROUTING_WEIGHT: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
    GROUP_M: gl.constexpr, SKIP_HALF: gl.constexpr = True, RCP_DIV: gl.constexpr = False,
    OUT_PADDED: gl.constexpr = False, A_PADDED: gl.constexpr = False, ZERO_PAD: gl.constexpr = False,
    PIPE: gl.constexpr = False, W_SCALAR: gl.constexpr = False, X_GATHER: gl.constexpr = False,
    tile_ctr_ptr=0, DYN: gl.constexpr = False,
):
    """One grouped GEMM + its epilogue, warp-specialized (see the module docstring). Launch with
    ``num_warps=4`` (the first MMA warpgroup; the second and the loader warp are workers: 12 warps
    after rounding) on ``min(tiles, SMs)`` programs. ``X_GATHER``: the A rows by cp.async from ``x_ptr`` (the
    unsorted rows, row ``slot // TOP_K``, stride ``stride_x``; 16-byte aligned) by a four-warp loader; ``a_desc``
    then only gives the A tiles' shape and layout. ``DYN`` (``set_ws_dynamic_tiles``): tiles by a global counter,
    ``tile_ctr_ptr`` int32 [2] (zeros; left zero), instead of ``program_id + i * num_programs`` (``_ws_loader``)."""
    HALF_M: gl.constexpr = a_desc.block_type.shape[0]
    a0_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    a1_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    wg_bufs = gl.allocate_shared_memory(w_desc.dtype, [STAGES] + w_desc.block_type.shape, w_desc.layout)
    wu_bufs = wg_bufs  # gated: the up tiles' ring
    if GATED:
        wu_bufs = gl.allocate_shared_memory(w_desc.dtype, [STAGES] + w_desc.block_type.shape, w_desc.layout)
    ready, empty = _ring_barriers(STAGES, 2, 1 + 32 * X_LOADER_WARPS if X_GATHER else 1)
    TQ: gl.constexpr = STAGES + 2  # (DYN: the tile queue's depth -- the loader may run a few short tiles ahead)
    tiles, tq_ready, tq_empty = _ws_tile_queue(TQ, DYN)
    gl.warp_specialize([
        (_ws_consumer, (a0_bufs, wg_bufs, wu_bufs, ready, empty, out_ptr, a_scale_ptr, w_scale_ptr, bias_ptr,
                        topk_w_ptr, out_qscale_ptr, sorted_ids_ptr, block_expert_ptr, num_post_padded_ptr, N, K,
                        num_slots, stride_om, stride_asm, stride_wse, stride_wsn, stride_be, act_alpha, act_beta,
                        act_limit, 0, HALF_M, TOP_K, E_LOC, ACT, GATED, QUANT, OUT_Q, ROUND_DTYPE, HAS_BIAS,
                        WEIGHT_ON_INPUT, MUL_ROUTING_WEIGHT, BN, BK, STAGES, GROUP_M, SKIP_HALF, RCP_DIV, OUT_PADDED,
                        A_PADDED, ZERO_PAD, PIPE, W_SCALAR, X_GATHER, tiles, tq_ready, tq_empty, DYN, TQ)),
        (_ws_consumer, (a1_bufs, wg_bufs, wu_bufs, ready, empty, out_ptr, a_scale_ptr, w_scale_ptr, bias_ptr,
                        topk_w_ptr, out_qscale_ptr, sorted_ids_ptr, block_expert_ptr, num_post_padded_ptr, N, K,
                        num_slots, stride_om, stride_asm, stride_wse, stride_wsn, stride_be, act_alpha, act_beta,
                        act_limit, 1, HALF_M, TOP_K, E_LOC, ACT, GATED, QUANT, OUT_Q, ROUND_DTYPE, HAS_BIAS,
                        WEIGHT_ON_INPUT, MUL_ROUTING_WEIGHT, BN, BK, STAGES, GROUP_M, SKIP_HALF, RCP_DIV, OUT_PADDED,
                        A_PADDED, ZERO_PAD, PIPE, W_SCALAR, X_GATHER, tiles, tq_ready, tq_empty, DYN, TQ)),
        (_ws_loader, (a_desc, w_desc, a0_bufs, a1_bufs, wg_bufs, wu_bufs, ready, empty, sorted_ids_ptr,
                      block_expert_ptr, num_post_padded_ptr, N, K, num_slots, x_ptr, stride_x, E_LOC, BN, BK, STAGES,
                      GROUP_M, GATED, SKIP_HALF, TOP_K, X_GATHER, tile_ctr_ptr, tiles, tq_ready, tq_empty, DYN,
                      TQ)),
    ], [4, X_LOADER_WARPS if X_GATHER else 1], [232, 48 if X_GATHER else 40])
