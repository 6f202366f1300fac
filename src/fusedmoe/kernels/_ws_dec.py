"""Warp-specialized grouped GEMMs for 16-bit and FP8 (per tensor / per channel / 128 x 128 blocks) weights at DECODE on
Hopper, in Gluon (private; OPT-IN -- thirtieth session; first run on the H200 in the thirty-first: correct, its GPU
tests pass, but not faster than the Triton decode GEMMs, 0.77-1.11x at one token depending on the shape and the
programs an SM (BENCHMARKS.md), so it stays off by default. Launched by
``fusedmoe.backends.triton_moe._ws_gemm`` for warp-specialized configs with decode tiles, block_m 16:
``triton_moe.set_ws_decode`` / ``FUSEDMOE_WS_DECODE=1`` lets ``auto_ws_decode`` pick them).

Why: at one token the Triton GEMMs of the small expert shapes take about twice their weight-read floor (issue 3's
1-8 token region, 73.6 % of the roofline against an 80 % target; DeepSeek-V3 TP8 and Qwen3-30B FP8 at one token
37-44 %): each program streams a fixed row band and K range with a few loads in flight, so the latency of the first
loads and the programs' uneven shares stay exposed (BENCHMARKS.md, twenty-seventh and twenty-eighth sessions: even a
bare Triton stream of the same bytes at that program count reached ~2.2 TB/s). This is the FP4 decode kernel's
structure (``kernels/_ws_fp4_dec.py``) without its conversion: each program is persistent, one TMA loader warp runs
``num_stages`` ring steps ahead of one consumer warpgroup through the units of work, across unit boundaries, and
1-3 programs share an SM, so many weight bytes are in flight per SM at all times. The weights are the wgmma's A
operand straight from shared memory (64 weight rows, the MMA's M), the token rows its B (N = 16): swap-AB tiles, as
the Triton decode configs are.

Data contract (``_ws_gemm`` conventions; ``E_LOC`` local experts, BT = 16 token rows a block):

    x_desc      TMA descriptor, block [BT, BKE], over the GEMM's input rows (16-bit, or e4m3 for FP8 weights)
                gathered into block-padded slot order (``_align._gather_slot_rows_kernel``), BKE = 128 bytes of K
                (64 16-bit / 128 FP8 values); ``x8_desc``: the same rows in boxes of 8, for blocks with at most 8
                real rows (the rows left out keep whatever the slot held: they only reach the wgmma's padding
                columns, never stored). GEMM2 after this kernel's GEMM1 with ``OUT_PADDED``: GEMM1's output itself
    w_desc      TMA descriptor, block [32, BKE], over the weights viewed as [E * R, K] (R = 2 N gated: each expert's
                N gate rows, then its N up rows; R = N otherwise): a unit's 64 weight rows are two boxes -- gated:
                32 gate rows n0 + [0, 32) and the same up rows N + n0 + ...; otherwise rows n0 + [0, 64). Boxes past
                an expert's rows read the next expert's (or TMA's zeros past the tensor): only columns >= N, never
                stored. K past the tensor: zeros from TMA (both operands), so any K works
    scales      QUANT (``_moe_gemm``): Q_NONE 16-bit, no scales; Q_TENSOR a [] x w [E]; Q_ROW a [input rows] x w
                [E, R] (per channel); Q_BLOCK (FP8 128 x 128 blocks) a [input rows, K / 128] x w [E, R / 128,
                K / 128] (``stride_wsn`` / ``stride_wsk``), each 128-wide K block's partial product scaled before it
                is added. Input rows: tokens (GEMM1, ``TOP_K`` = top_k) or slots (GEMM2, ``TOP_K`` 1)
    out         [T*K, N] by slot (GEMM1's activated intermediate -- hidden's dtype, e4m3 with ``OUT_Q`` =
                OUT_FP8_STATIC, or hidden's dtype and its max |h| with OUT_PLAIN_AMAX --, GEMM2's y); with
                ``OUT_PADDED`` [blocks * BT, N] at the rows' block-padded positions (GEMM2's rows without a gather)
    part_ptr /  SPLIT > 1: fp32 partial sums [tiles * SPLIT, 64, BT] and int32 arrival counters [tiles] (zero, left
    cnt_ptr     zero): the last of a tile's SPLIT programs adds the partials in split order

Accumulation: 16-bit weights accumulate every K block into one fp32 chain (one wgmma in flight: the slot of the step
before is released once this step's first wgmma is issued and the one before retired). FP8 accumulates each 128-wide
K block into a fresh accumulator that is added to an fp32 sum (the promoted accumulation of the Triton kernels'
``max_num_imprecise_acc = BLOCK_K``) -- at 16 token columns that is 8 additions a thread a block, far from the
memory time of a block's 8 KB of weights.

Work units: (block of BT slot rows, column tile of NC = 32 gated / 64 output columns, 1 / SPLIT of the K steps),
walked by ``program_id, program_id + num_programs, ...``; blocks of experts >= E_LOC skipped. A K step is KB blocks
of BKE values.

Limits (``kernel_configs.warp_specialized_problem``): sm_90, BF16 / FP16 / FP8 per tensor, per channel, 128 x 128
blocks, block_m 16, block_n 32 (gated GEMM1) / 64, block_k KB x BKE, K a multiple of 16 (TMA row strides).
"""

import triton  # noqa: F401  (the Gluon runtime needs triton imported first)
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import tma, warpgroup_mma, warpgroup_mma_wait

from ._moe_gemm import ACT_IDENTITY, OUT_PLAIN, Q_BLOCK, Q_NONE, _scale_block
from ._ws_fp4 import _fp4_chunk_count, _split_gate_up
from ._ws_fp4_dec import _dec_gdc, _dec_rows, _dec_slot, _dec_slot_w, _dec_split_sum, _dec_token_box, _dec_unit
from ._ws_gemm import (_ring_barriers, _ring_prev, _ring_ready, _ring_release, _ws_store, _x_copy, _x_lanes,
                       _x_src)


@gluon.jit
def _wd_loader(x_desc, x8_desc, w_desc, x_bufs, w_bufs, ready, empty, x_ptr, sorted_ids_ptr, block_expert_ptr,
               num_post_padded_ptr, N, R, K, n_k, num_n, num_slots, stride_x, TOP_K: gl.constexpr,
               E_LOC: gl.constexpr, GATED: gl.constexpr, STAGES: gl.constexpr, SPLIT: gl.constexpr, KB: gl.constexpr,
               X_GATHER: gl.constexpr, it=0, dep_ptr=None, dep_target=0, DEP_WAIT: gl.constexpr = False):
    """Producer (one warp): per K step KB token tiles and KB x 2 [32, BKE] weight boxes (TMA) into ring slot
    ``it % STAGES``. Token tiles: TMA boxes of the gathered rows (8 rows where the block has at most 8 real ones),
    or with ``X_GATHER`` the block's real rows straight from ``x_ptr`` [rows, K] (row ``slot // TOP_K``) by cp.async,
    16 bytes a copy, padding rows and K past the end zero-filled -- no gather launch before the GEMM. The copies are
    tracked by the slot's ``ready`` barrier next to the weights' expected bytes: each loader thread's
    ``cp.async.mbarrier.arrive.noinc`` is one of the phase's arrivals (the ring's ready barriers expect 1 + 32 with
    ``X_GATHER``), so the weights' boxes go out first.

    ``DEP_WAIT`` (``_ws_dec_fused_kernel``'s GEMM2 phase): the token rows are the intermediate's rows at their
    block-padded positions, copied once all ``dep_target`` column tiles of GEMM1 have stored the block
    (``dep_ptr[block]``, read with acquire by every thread) -- the weights of a unit stream in while it waits; each
    unit then counts itself past the wait, and the block's last one sets the counter back to zero for the next call.
    Every unit has a K step (the rule: split_k at most the K steps). Returns the ring position ``it`` for the next
    phase."""
    BT: gl.constexpr = x_desc.block_type.shape[0]
    BKE: gl.constexpr = x_desc.block_type.shape[1]
    wbytes: gl.constexpr = KB * 2 * w_desc.block_type.nbytes
    rr, cc = _x_lanes(BT, BKE, 128 // x_desc.dtype.primitive_bitwidth)  # 16-byte copies
    num_m = gl.load(num_post_padded_ptr) // BT
    it = it + 0 * gl.program_id(0)  # (a tensor: the ring position is loop-carried)
    for u in range(gl.program_id(0), num_m * num_n * SPLIT, gl.num_programs(0)):
        pid_m, pid_n, ks = _dec_unit(u, num_n, SPLIT)
        e = gl.load(block_expert_ptr + pid_m)
        if e < E_LOC:
            n8 = _fp4_chunk_count(sorted_ids_ptr, pid_m, num_slots, 8, BT // 8, "")  # 8-row chunks with real rows
            if X_GATHER:  # (DEP_WAIT: the intermediate's rows at their block-padded positions)
                xrow, ok = _x_src(x_ptr, sorted_ids_ptr, pid_m, num_slots, stride_x, rr, BT, TOP_K, DEP_WAIT)
            r0, r1 = _dec_rows(pid_n, N, GATED)
            row0 = e * R + r0
            row1 = e * R + r1
            k0 = (n_k * ks) // SPLIT
            k1 = (n_k * (ks + 1)) // SPLIT
            for kk in range(k0, k1):
                if X_GATHER:  # the weights first: the copies' 32 .noinc arrivals hold the phase open (33 in all)
                    s, bar = _dec_slot_w(ready, empty, it, wbytes, STAGES)
                else:
                    s, bar = _dec_slot(x_desc, x8_desc, ready, empty, it, n8, wbytes, STAGES, KB)
                for h in gl.static_range(KB):
                    kc = (kk * KB + h) * BKE
                    slot = s * KB + h
                    if not X_GATHER:
                        _dec_token_box(x_desc, x8_desc, pid_m * BT, kc, bar, x_bufs.index(slot), n8)
                    wb = w_bufs.index(slot)
                    tma.async_copy_global_to_shared(w_desc, [row0, kc], bar, wb.slice(0, 32))
                    tma.async_copy_global_to_shared(w_desc, [row1, kc], bar, wb.slice(32, 32))
                if X_GATHER:
                    if DEP_WAIT:
                        if kk == k0:  # GEMM1 has stored every column tile of this block: each thread acquires
                            z = gl.zeros([32], gl.int32, layout=gl.BlockedLayout([1], [32], [1], [0]))
                            while gl.min(gl.atomic_add(dep_ptr + pid_m + z, z, sem="acquire", scope="gpu"),
                                         axis=0) < dep_target:
                                pass
                            # this unit has passed: the block's last GEMM2 unit to pass leaves the counter at zero
                            # for the next call, as the split-K counters are (split_scratch's contract)
                            passed = gl.atomic_add(dep_ptr + pid_m, 1, sem="relaxed", scope="gpu")
                            if passed == dep_target + num_n * SPLIT - 1:
                                gl.atomic_xchg(dep_ptr + pid_m, 0, sem="relaxed", scope="gpu")
                    _x_copy(x_bufs, s * KB, kk * KB * BKE, xrow, ok, cc, K, bar, KB)
                it += 1
    return it


@gluon.jit
def _wd_epilogue(acc, e, pid_m, n0, out_ptr, a_scale_ptr, w_scale_ptr, bias_ptr, topk_w_ptr, out_qscale_ptr,
                 sorted_ids_ptr, N, num_slots, stride_om, stride_asm, stride_wse, stride_wsn, stride_be, act_alpha,
                 act_beta, act_limit, TOP_K: gl.constexpr, ACT: gl.constexpr, GATED: gl.constexpr,
                 QUANT: gl.constexpr, OUT_Q: gl.constexpr, ROUND_DTYPE: gl.constexpr, HAS_BIAS: gl.constexpr,
                 WEIGHT_ON_INPUT: gl.constexpr, MUL_ROUTING_WEIGHT: gl.constexpr, RCP_DIV: gl.constexpr,
                 OUT_PADDED: gl.constexpr, A_PADDED: gl.constexpr):
    """acc [64 weight rows, BT token rows] -> the [BT, NC] output tile (gated: rows 0-31 gate, 32-63 up) through
    ``_ws_gemm._ws_store`` (the prefill kernel's scales, bias, activation, re-quantization and stores)."""
    BT: gl.constexpr = acc.shape[1]
    NC: gl.constexpr = 32 if GATED else 64
    ol: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, 4], threads_per_warp=[32 // (NC // 4), NC // 4],
                                        warps_per_cta=[4, 1], order=[1, 0])
    if GATED:
        g, u = _split_gate_up(acc, BT)
        g = gl.convert_layout(gl.permute(g, [1, 0]), ol)
        u = gl.convert_layout(gl.permute(u, [1, 0]), ol)
    else:
        g = gl.convert_layout(gl.permute(acc, [1, 0]), ol)
        u = g
    rows = pid_m * BT + gl.arange(0, BT, layout=gl.SliceLayout(1, ol))
    slots = gl.load(sorted_ids_ptr + rows)
    row_ok = slots < num_slots
    slots = gl.where(row_ok, slots, 0)
    tok64 = rows.to(gl.int64) if A_PADDED else (slots // TOP_K).to(gl.int64)  # the input's scale rows
    cols = n0 + gl.arange(0, NC, layout=gl.SliceLayout(0, ol))
    _ws_store(g, u, e, slots, row_ok, tok64, rows if OUT_PADDED else slots, cols, cols < N, out_ptr, a_scale_ptr,
              w_scale_ptr, bias_ptr, topk_w_ptr, out_qscale_ptr, N, stride_om, stride_asm, stride_wse, stride_wsn,
              stride_be, act_alpha, act_beta, act_limit, ACT, GATED, QUANT, OUT_Q, ROUND_DTYPE, HAS_BIAS,
              WEIGHT_ON_INPUT, MUL_ROUTING_WEIGHT, RCP_DIV, False)


@gluon.jit
def _wd_consumer(x_bufs, w_bufs, ready, empty, out_ptr, a_scale_ptr, w_scale_ptr, bias_ptr, topk_w_ptr, out_qscale_ptr,
                 sorted_ids_ptr, block_expert_ptr, num_post_padded_ptr, part_ptr, cnt_ptr, N, R, n_k, n_kb, num_n,
                 num_slots, stride_om, stride_asm, stride_wse, stride_wsn, stride_wsk, stride_be, act_alpha, act_beta,
                 act_limit, BT: gl.constexpr, TOP_K: gl.constexpr, E_LOC: gl.constexpr, ACT: gl.constexpr,
                 GATED: gl.constexpr, QUANT: gl.constexpr, OUT_Q: gl.constexpr, ROUND_DTYPE: gl.constexpr,
                 HAS_BIAS: gl.constexpr, WEIGHT_ON_INPUT: gl.constexpr, MUL_ROUTING_WEIGHT: gl.constexpr,
                 RCP_DIV: gl.constexpr, STAGES: gl.constexpr, SPLIT: gl.constexpr, KB: gl.constexpr,
                 OUT_PADDED: gl.constexpr, A_PADDED: gl.constexpr, X_GATHER: gl.constexpr, it=0, dep_ptr=None,
                 DEP_SIGNAL: gl.constexpr = False, T_RELEASE: gl.constexpr = False):
    """Consumer warpgroup: per unit its K steps (16-bit: one accumulator chain, one wgmma in flight; FP8: a fresh
    accumulator a 128-wide block, added -- Q_BLOCK: scaled -- to the fp32 sum), then split-K and the epilogue.
    ``DEP_SIGNAL`` (the fused kernel's GEMM1 phase): once a column tile of a block is stored, ``dep_ptr[block]`` is
    raised by one (release, after every thread's stores). ``T_RELEASE``: every thread frees the ring slots
    (``_ws_gemm._ring_release``). Returns the ring position ``it`` for the next phase."""
    INSTR_K: gl.constexpr = 16 if QUANT == Q_NONE else 32  # wgmma's K: 32 bytes of either operand
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                    instr_shape=[16, BT, INSTR_K])
    num_m = gl.load(num_post_padded_ptr) // BT
    it = it + 0 * gl.program_id(0)  # (a tensor: the ring position is loop-carried)
    part = gl.zeros((64, BT), dtype=gl.float32, layout=acc_l)
    for u in range(gl.program_id(0), num_m * num_n * SPLIT, gl.num_programs(0)):
        pid_m, pid_n, ks = _dec_unit(u, num_n, SPLIT)
        e = gl.load(block_expert_ptr + pid_m)
        if e < E_LOC:
            k0 = (n_k * ks) // SPLIT
            k1 = (n_k * (ks + 1)) // SPLIT
            acc = gl.zeros((64, BT), dtype=gl.float32, layout=acc_l)
            if QUANT == Q_BLOCK:  # a weight row's 128-row scale block, a token column's activation scales
                r0, r1 = _dec_rows(pid_n, N, GATED)
                r = gl.arange(0, 64, layout=gl.SliceLayout(1, acc_l))
                wr = gl.minimum(gl.where(r < 32, r0 + r, r1 + r - 32), R - 1)  # (rows past R: never stored)
                ws_rows = w_scale_ptr + e.to(gl.int64) * stride_wse + (wr // 128) * stride_wsn
                p = pid_m * BT + gl.arange(0, BT, layout=gl.SliceLayout(0, acc_l))
                if A_PADDED:  # the input's scales in block-padded row order
                    as_cols = a_scale_ptr + p.to(gl.int64) * stride_asm
                else:
                    sl = gl.load(sorted_ids_ptr + p)
                    sl = gl.where(sl < num_slots, sl, 0)
                    as_cols = a_scale_ptr + (sl // TOP_K).to(gl.int64) * stride_asm
            if QUANT == Q_NONE:
                for kk in range(k0, k1):
                    s = _ring_ready(ready, it, STAGES, X_GATHER)
                    for h in gl.static_range(KB):
                        acc = warpgroup_mma(w_bufs.index(s * KB + h), x_bufs.index(s * KB + h).permute((1, 0)), acc,
                                            is_async=True)
                        acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))
                        if h == 0:
                            if kk > k0:  # the step before's last wgmma retired: its ring slot is free
                                _ring_release(empty, _ring_prev(it, STAGES), T_RELEASE)
                    it += 1
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
                if k1 > k0:
                    _ring_release(empty, _ring_prev(it, STAGES), T_RELEASE)
            else:
                for kk in range(k0, k1):
                    s = _ring_ready(ready, it, STAGES, X_GATHER)
                    for h in gl.static_range(KB):
                        part = warpgroup_mma(w_bufs.index(s * KB + h), x_bufs.index(s * KB + h).permute((1, 0)),
                                             part, use_acc=False, is_async=True)
                        if QUANT == Q_BLOCK:  # this K block's scales, loaded while the MMA runs (past K: the last)
                            kb = gl.minimum(kk * KB + h, n_kb - 1)
                            a_s = gl.load(as_cols + kb)
                            w_s = gl.load(ws_rows + kb * stride_wsk)
                        part = warpgroup_mma_wait(num_outstanding=0, deps=(part,))
                        if QUANT == Q_BLOCK:
                            acc = acc + _scale_block(part, a_s, w_s, True)  # (the swapped Triton kernels' order)
                        else:
                            acc = acc + part
                    _ring_release(empty, s, T_RELEASE)
                    it += 1
            last = True
            if SPLIT > 1:
                acc, last = _dec_split_sum(acc, part_ptr, cnt_ptr, pid_m * num_n + pid_n, ks, SPLIT, acc_l)
            if last:
                _wd_epilogue(acc, e, pid_m, pid_n * (32 if GATED else 64), out_ptr, a_scale_ptr, w_scale_ptr,
                             bias_ptr, topk_w_ptr, out_qscale_ptr, sorted_ids_ptr, N, num_slots, stride_om,
                             stride_asm, stride_wse, stride_wsn, stride_be, act_alpha, act_beta, act_limit, TOP_K,
                             ACT, GATED, QUANT, OUT_Q, ROUND_DTYPE, HAS_BIAS, WEIGHT_ON_INPUT, MUL_ROUTING_WEIGHT,
                             RCP_DIV, OUT_PADDED, A_PADDED)
                if DEP_SIGNAL:  # the block's rows of this column tile are stored: GEMM2 may read them
                    gl.thread_barrier()
                    gl.atomic_add(dep_ptr + pid_m, 1, sem="release", scope="gpu")
    return it


@gluon.jit
def _wd_consumer_only(x_bufs, w_bufs, ready, empty, out_ptr, a_scale_ptr, w_scale_ptr, bias_ptr, topk_w_ptr,
                      out_qscale_ptr, sorted_ids_ptr, block_expert_ptr, num_post_padded_ptr, part_ptr, cnt_ptr, N, R,
                      n_k, n_kb, num_n, num_slots, stride_om, stride_asm, stride_wse, stride_wsn, stride_wsk,
                      stride_be, act_alpha, act_beta, act_limit, BT: gl.constexpr, TOP_K: gl.constexpr,
                      E_LOC: gl.constexpr, ACT: gl.constexpr, GATED: gl.constexpr, QUANT: gl.constexpr,
                      OUT_Q: gl.constexpr, ROUND_DTYPE: gl.constexpr, HAS_BIAS: gl.constexpr,
                      WEIGHT_ON_INPUT: gl.constexpr, MUL_ROUTING_WEIGHT: gl.constexpr, RCP_DIV: gl.constexpr,
                      STAGES: gl.constexpr, SPLIT: gl.constexpr, KB: gl.constexpr, OUT_PADDED: gl.constexpr,
                      A_PADDED: gl.constexpr, X_GATHER: gl.constexpr, T_RELEASE: gl.constexpr):
    """``_wd_consumer`` as a partition of its own (a partition returns nothing)."""
    _wd_consumer(x_bufs, w_bufs, ready, empty, out_ptr, a_scale_ptr, w_scale_ptr, bias_ptr, topk_w_ptr,
                 out_qscale_ptr, sorted_ids_ptr, block_expert_ptr, num_post_padded_ptr, part_ptr, cnt_ptr, N, R, n_k,
                 n_kb, num_n, num_slots, stride_om, stride_asm, stride_wse, stride_wsn, stride_wsk, stride_be,
                 act_alpha, act_beta, act_limit, BT, TOP_K, E_LOC, ACT, GATED, QUANT, OUT_Q, ROUND_DTYPE, HAS_BIAS,
                 WEIGHT_ON_INPUT, MUL_ROUTING_WEIGHT, RCP_DIV, STAGES, SPLIT, KB, OUT_PADDED, A_PADDED, X_GATHER, 0,
                 None, False, T_RELEASE)


@gluon.jit
def _wd_loader_only(x_desc, x8_desc, w_desc, x_bufs, w_bufs, ready, empty, x_ptr, sorted_ids_ptr, block_expert_ptr,
                    num_post_padded_ptr, N, R, K, n_k, num_n, num_slots, stride_x, TOP_K: gl.constexpr,
                    E_LOC: gl.constexpr, GATED: gl.constexpr, STAGES: gl.constexpr, SPLIT: gl.constexpr,
                    KB: gl.constexpr, X_GATHER: gl.constexpr):
    """``_wd_loader`` as a partition of its own (a partition returns nothing)."""
    _wd_loader(x_desc, x8_desc, w_desc, x_bufs, w_bufs, ready, empty, x_ptr, sorted_ids_ptr, block_expert_ptr,
               num_post_padded_ptr, N, R, K, n_k, num_n, num_slots, stride_x, TOP_K, E_LOC, GATED, STAGES, SPLIT, KB,
               X_GATHER)


@gluon.jit
def _ws_dec_kernel(
    x_desc, x8_desc, w_desc, out_ptr, a_scale_ptr, w_scale_ptr, bias_ptr, topk_w_ptr, out_qscale_ptr, sorted_ids_ptr,
    block_expert_ptr, num_post_padded_ptr, part_ptr, cnt_ptr, x_ptr, N, R, K, n_k, n_kb, num_n, num_slots, stride_om,
    stride_asm, stride_wse, stride_wsn, stride_wsk, stride_be, stride_x, act_alpha, act_beta, act_limit,
    TOP_K: gl.constexpr, E_LOC: gl.constexpr, ACT: gl.constexpr, GATED: gl.constexpr, QUANT: gl.constexpr,
    OUT_Q: gl.constexpr, ROUND_DTYPE: gl.constexpr, HAS_BIAS: gl.constexpr, WEIGHT_ON_INPUT: gl.constexpr,
    MUL_ROUTING_WEIGHT: gl.constexpr, RCP_DIV: gl.constexpr, STAGES: gl.constexpr, SPLIT: gl.constexpr,
    KB: gl.constexpr, OUT_PADDED: gl.constexpr = False, A_PADDED: gl.constexpr = False, X_GATHER: gl.constexpr = False,
    USE_GDC: gl.constexpr = False, T_RELEASE: gl.constexpr = False,
):
    """One grouped 16-bit / FP8 decode GEMM + its epilogue (module docstring). Launch with ``num_warps=4`` (the
    consumer warpgroup; the loader warp is a worker), persistent, a few programs an SM (``maxnreg`` caps the registers
    so that they fit). ``n_k``: K steps (of KB x BKE values), ``n_kb``: 128-wide K blocks (Q_BLOCK's scale columns).
    ``OUT_PADDED``: GEMM1 stores at the rows' block-padded positions (GEMM2's input without a gather); ``A_PADDED``:
    GEMM2's input scales are in that order too (the 1 x 128 group quantization of a padded intermediate).
    ``X_GATHER``: the token rows come from ``x_ptr`` [rows, K] (row stride ``stride_x``, 16-byte aligned) by cp.async
    (``_wd_loader``) instead of the TMA descriptors, which then only give the tiles' shapes and layout. ``USE_GDC``:
    launched with programmatic dependent launch (``_ws_fp4_dec._dec_gdc``). ``T_RELEASE`` (OPT-IN, thirty-third
    session, compiled only): every consumer thread frees the ring slots, without warpgroup barriers."""
    _dec_gdc(USE_GDC)
    BT: gl.constexpr = x_desc.block_type.shape[0]
    x_bufs = gl.allocate_shared_memory(x_desc.dtype, [STAGES * KB] + x_desc.block_type.shape, x_desc.layout)
    w_bufs = gl.allocate_shared_memory(w_desc.dtype, [STAGES * KB, 64, w_desc.block_type.shape[1]], w_desc.layout)
    # one consumer warpgroup releases a slot (T_RELEASE: its 128 threads); cp.async token rows: the weights' expect +
    # the loader warp's 32 arrivals
    ready, empty = _ring_barriers(STAGES, 128 if T_RELEASE else 1, 33 if X_GATHER else 1)
    gl.warp_specialize([
        (_wd_consumer_only, (x_bufs, w_bufs, ready, empty, out_ptr, a_scale_ptr, w_scale_ptr, bias_ptr, topk_w_ptr,
                             out_qscale_ptr, sorted_ids_ptr, block_expert_ptr, num_post_padded_ptr, part_ptr, cnt_ptr,
                             N, R, n_k, n_kb, num_n, num_slots, stride_om, stride_asm, stride_wse, stride_wsn,
                             stride_wsk, stride_be, act_alpha, act_beta, act_limit, BT, TOP_K, E_LOC, ACT, GATED,
                             QUANT, OUT_Q, ROUND_DTYPE, HAS_BIAS, WEIGHT_ON_INPUT, MUL_ROUTING_WEIGHT, RCP_DIV, STAGES,
                             SPLIT, KB, OUT_PADDED, A_PADDED, X_GATHER, T_RELEASE)),
        (_wd_loader_only, (x_desc, x8_desc, w_desc, x_bufs, w_bufs, ready, empty, x_ptr, sorted_ids_ptr,
                           block_expert_ptr, num_post_padded_ptr, N, R, K, n_k, num_n, num_slots, stride_x, TOP_K,
                           E_LOC, GATED, STAGES, SPLIT, KB, X_GATHER)),
    ], [1], [40])


@gluon.jit
def _wd_fused_loader(x_desc, x8_desc, w1_desc, w2_desc, x_bufs, w_bufs, ready, empty, hidden_ptr, inter_ptr,
                     sorted_ids_ptr, block_expert_ptr, num_post_padded_ptr, dep_ptr, I, H, R1, n_k1, n_k2, num_n1,
                     num_n2, num_slots, stride_h, stride_i, TOP_K: gl.constexpr, E_LOC: gl.constexpr,
                     GATED: gl.constexpr, STAGES: gl.constexpr, SPLIT1: gl.constexpr, SPLIT2: gl.constexpr,
                     KB: gl.constexpr):
    """The fused kernel's producer: GEMM1's units (token rows from hidden), then GEMM2's (the intermediate's padded
    rows, each block once GEMM1 stored it), one ring."""
    it = _wd_loader(x_desc, x8_desc, w1_desc, x_bufs, w_bufs, ready, empty, hidden_ptr, sorted_ids_ptr,
                    block_expert_ptr, num_post_padded_ptr, I, R1, H, n_k1, num_n1, num_slots, stride_h, TOP_K, E_LOC,
                    GATED, STAGES, SPLIT1, KB, True, 0, dep_ptr, 0, False)
    _wd_loader(x_desc, x8_desc, w2_desc, x_bufs, w_bufs, ready, empty, inter_ptr, sorted_ids_ptr, block_expert_ptr,
               num_post_padded_ptr, H, H, I, n_k2, num_n2, num_slots, stride_i, 1, E_LOC, False, STAGES, SPLIT2, KB,
               True, it, dep_ptr, num_n1, True)


@gluon.jit
def _wd_fused_consumer(x_bufs, w_bufs, ready, empty, inter_ptr, y_ptr, a1_scale_ptr, w1_scale_ptr, b1_ptr,
                       a2_scale_ptr, w2_scale_ptr, b2_ptr, topk_w_ptr, sorted_ids_ptr, block_expert_ptr,
                       num_post_padded_ptr, part1_ptr, cnt1_ptr, part2_ptr, cnt2_ptr, dep_ptr, I, H, R1, n_k1, n_k2,
                       num_n1, num_n2, num_slots, stride_i, stride_y, stride_w1se, stride_w1sn, stride_w2se,
                       stride_w2sn, stride_b1, stride_b2, act_alpha, act_beta, act_limit, BT: gl.constexpr,
                       TOP_K: gl.constexpr, E_LOC: gl.constexpr, ACT: gl.constexpr, GATED: gl.constexpr,
                       QUANT: gl.constexpr, OUT_Q1: gl.constexpr, ROUND_DTYPE: gl.constexpr, HAS_BIAS1: gl.constexpr,
                       HAS_BIAS2: gl.constexpr, WEIGHT_ON_INPUT: gl.constexpr, RCP_DIV: gl.constexpr,
                       STAGES: gl.constexpr, SPLIT1: gl.constexpr, SPLIT2: gl.constexpr, KB: gl.constexpr):
    """The fused kernel's consumer: GEMM1's units into the intermediate at the rows' padded positions (each stored
    column tile raises its block's dependency counter), then GEMM2's units into y by slot."""
    it = _wd_consumer(x_bufs, w_bufs, ready, empty, inter_ptr, a1_scale_ptr, w1_scale_ptr, b1_ptr, topk_w_ptr,
                      a2_scale_ptr, sorted_ids_ptr, block_expert_ptr, num_post_padded_ptr, part1_ptr, cnt1_ptr, I, R1,
                      n_k1, 1, num_n1, num_slots, stride_i, 0, stride_w1se, stride_w1sn, 0, stride_b1, act_alpha,
                      act_beta, act_limit, BT, TOP_K, E_LOC, ACT, GATED, QUANT, OUT_Q1, ROUND_DTYPE, HAS_BIAS1,
                      WEIGHT_ON_INPUT, False, RCP_DIV, STAGES, SPLIT1, KB, True, False, True, 0, dep_ptr, True)
    _wd_consumer(x_bufs, w_bufs, ready, empty, y_ptr, a2_scale_ptr, w2_scale_ptr, b2_ptr, topk_w_ptr, a2_scale_ptr,
                 sorted_ids_ptr, block_expert_ptr, num_post_padded_ptr, part2_ptr, cnt2_ptr, H, H, n_k2, 1, num_n2,
                 num_slots, stride_y, 0, stride_w2se, stride_w2sn, 0, stride_b2, act_alpha, act_beta, act_limit, BT, 1,
                 E_LOC, ACT_IDENTITY, False, QUANT, OUT_PLAIN, ROUND_DTYPE, HAS_BIAS2, False, not WEIGHT_ON_INPUT,
                 RCP_DIV, STAGES, SPLIT2, KB, False, False, True, it, dep_ptr, False)


@gluon.jit
def _ws_dec_fused_kernel(
    x_desc, x8_desc, w1_desc, w2_desc, hidden_ptr, inter_ptr, y_ptr, a1_scale_ptr, w1_scale_ptr, b1_ptr, a2_scale_ptr,
    w2_scale_ptr, b2_ptr, topk_w_ptr, sorted_ids_ptr, block_expert_ptr, num_post_padded_ptr, part1_ptr, cnt1_ptr,
    part2_ptr, cnt2_ptr, dep_ptr, I, H, R1, n_k1, n_k2, num_n1, num_n2, num_slots, stride_h, stride_i, stride_y,
    stride_w1se, stride_w1sn, stride_w2se, stride_w2sn, stride_b1, stride_b2, act_alpha, act_beta, act_limit,
    TOP_K: gl.constexpr, E_LOC: gl.constexpr, ACT: gl.constexpr, GATED: gl.constexpr, QUANT: gl.constexpr,
    OUT_Q1: gl.constexpr, ROUND_DTYPE: gl.constexpr, HAS_BIAS1: gl.constexpr, HAS_BIAS2: gl.constexpr,
    WEIGHT_ON_INPUT: gl.constexpr, RCP_DIV: gl.constexpr, STAGES: gl.constexpr, SPLIT1: gl.constexpr,
    SPLIT2: gl.constexpr, KB: gl.constexpr, USE_GDC: gl.constexpr = False,
):
    """Both decode GEMMs in ONE persistent launch (OPT-IN within the opt-in kernel, ``set_ws_decode(..., fused=True)``;
    16-bit weights, or FP8 per tensor with a static intermediate scale: nothing runs between the GEMMs). Every
    program walks GEMM1's units, then GEMM2's, through one ring: GEMM1's epilogue stores the intermediate at the
    rows' block-padded positions (``inter_ptr`` [blocks * 16, I], hidden's dtype or e4m3 by ``OUT_Q1``) and raises
    ``dep_ptr[block]`` (int32, zero at the launch; the block's last GEMM2 unit to pass its wait leaves it at zero
    again, as the split-K counters are) once a column tile is stored; GEMM2's loader streams a unit's weights, waits
    until all ``num_n1`` column tiles of its block are stored, then copies the block's rows. No kernel boundary
    between the GEMMs: the second GEMM's weights stream while the first one's last units finish. Programs only wait
    for units earlier in every program's walk, and the grid is at most the programs that fit the SMs at once (the
    launcher's), so all of them run together: no deadlock. ``hidden_ptr`` [T, H] (GEMM1's input, or its e4m3
    quantization; 16-byte aligned rows), ``y_ptr`` [T*K, H] by slot; the scales as ``_ws_dec_kernel``'s (Q_TENSOR:
    GEMM2's activation scale is the static intermediate scale); split-K scratch per GEMM."""
    _dec_gdc(USE_GDC)
    BT: gl.constexpr = x_desc.block_type.shape[0]
    x_bufs = gl.allocate_shared_memory(x_desc.dtype, [STAGES * KB] + x_desc.block_type.shape, x_desc.layout)
    w_bufs = gl.allocate_shared_memory(w1_desc.dtype, [STAGES * KB, 64, w1_desc.block_type.shape[1]], w1_desc.layout)
    ready, empty = _ring_barriers(STAGES, 1, 33)  # the weights' expect + the loader warp's 32 cp.async arrivals
    gl.warp_specialize([
        (_wd_fused_consumer, (x_bufs, w_bufs, ready, empty, inter_ptr, y_ptr, a1_scale_ptr, w1_scale_ptr, b1_ptr,
                              a2_scale_ptr, w2_scale_ptr, b2_ptr, topk_w_ptr, sorted_ids_ptr, block_expert_ptr,
                              num_post_padded_ptr, part1_ptr, cnt1_ptr, part2_ptr, cnt2_ptr, dep_ptr, I, H, R1, n_k1,
                              n_k2, num_n1, num_n2, num_slots, stride_i, stride_y, stride_w1se, stride_w1sn,
                              stride_w2se, stride_w2sn, stride_b1, stride_b2, act_alpha, act_beta, act_limit, BT,
                              TOP_K, E_LOC, ACT, GATED, QUANT, OUT_Q1, ROUND_DTYPE, HAS_BIAS1, HAS_BIAS2,
                              WEIGHT_ON_INPUT, RCP_DIV, STAGES, SPLIT1, SPLIT2, KB)),
        (_wd_fused_loader, (x_desc, x8_desc, w1_desc, w2_desc, x_bufs, w_bufs, ready, empty, hidden_ptr, inter_ptr,
                            sorted_ids_ptr, block_expert_ptr, num_post_padded_ptr, dep_ptr, I, H, R1, n_k1, n_k2,
                            num_n1, num_n2, num_slots, stride_h, stride_i, TOP_K, E_LOC, GATED, STAGES, SPLIT1, SPLIT2,
                            KB)),
    ], [1], [40])
