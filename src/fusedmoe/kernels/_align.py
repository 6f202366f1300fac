"""Triton kernels that sort the T*K routing slots by local expert (private; launched by
``fusedmoe.backends.triton_moe``).

Data contract (slot x = t*K + k, TK = T*K, E = E_loc local experts, BM = BLOCK_M):

    topk_ids        [TK]            int   global expert ids (any int dtype)
    sorted_ids      [P_max]         int32 slot ids grouped by local expert; each group padded to a
                                          multiple of BM; every other entry is the sentinel TK
    block_expert    [P_max / BM]    int32 local expert of each BM-row block; E marks the optional
                                          "non-local" group (K = 1 only, see INCLUDE_NONLOCAL);
                                          -1 for blocks at or past num_post_padded
    num_post_padded [1]             int32 number of rows in use (a multiple of BM)

Layout: group of local expert 0, then 1, ..., E-1 (then the non-local group), each group's slots
in increasing slot order (deterministic, independent of the launch configuration). The host
computes P_max from shapes only (no sync, CUDA-graph capturable):
P_max = round_up(TK + G * (BM - 1), BM), G = min(number of groups, TK).

Algorithm: the slots are cut into chunks of CHUNK (a power of two). Per chunk a histogram over the
groups (``tl.histogram``); a stable counting sort inside the chunk (``tl.sort`` of the unique key
``bin * CHUNK + i``); the destination of a slot is
``base[bin] + (slots of bin in earlier chunks) + (rank inside the chunk)``.
- One chunk (decode, TK <= CHUNK): a single program does everything (one launch), in slot space
  (``_align_single``: groups are runs of the sorted slots, no per-group arrays -- its work does not grow with
  the number of experts); with FP8 activations that launch also quantizes hidden in its other programs
  (``_align_scatter_quant_kernel``).
- Several chunks: ``_align_count_kernel`` writes the per-chunk histograms, then
  ``_align_scatter_kernel`` (one program per chunk) reduces them and scatters (two launches).
Block metadata and sentinels, at disjoint addresses (no intra-kernel ordering is needed): each
slot writes its group into its block's entry (every block in use holds a slot), each group's last
block gets the sentinel in its padding rows, and the blocks past the rows in use get -1 and
sentinels -- O(slots + groups x BM + unused rows) stores, no search over the groups per block
(H200, Nemotron-3-Super, 512 experts, 8 tokens: one program searching 512 group ends for each of
176 blocks took 17.4 us, a fifth of its FP4 GEMM1; now 4.5 us).
"""

import triton
import triton.language as tl

from ._quant import _fp8_groups, _fp8_rows


@triton.jit
def _slot_bins(topk_ids_ptr, offs, num_slots, expert_offset, E_LOC: tl.constexpr,
               INCLUDE_NONLOCAL: tl.constexpr, NUM_BINS: tl.constexpr):
    """Group of each slot: its local expert in [0, E_LOC), E_LOC for a non-local slot when
    INCLUDE_NONLOCAL, otherwise NUM_BINS (= outside the layout; also for offs >= num_slots)."""
    in_range = offs < num_slots
    ids = tl.load(topk_ids_ptr + offs, mask=in_range, other=0).to(tl.int32)
    e = ids - expert_offset
    local = (e >= 0) & (e < E_LOC)
    if INCLUDE_NONLOCAL:
        b = tl.where(local, e, E_LOC)
    else:
        b = tl.where(local, e, NUM_BINS)
    return tl.where(in_range, b, NUM_BINS)


@triton.jit
def _align_count_kernel(
    topk_ids_ptr,  # [TK] int
    counts_ptr,  # [num_chunks, NUM_BINS] int32 (out)
    num_slots,  # TK
    expert_offset,  # first global id held locally
    E_LOC: tl.constexpr,
    INCLUDE_NONLOCAL: tl.constexpr,
    NUM_BINS: tl.constexpr,  # power of two >= number of groups
    CHUNK: tl.constexpr,
):
    """grid = (num_chunks,): histogram of the groups of one chunk of slots."""
    pid = tl.program_id(0)
    offs = pid * CHUNK + tl.arange(0, CHUNK)
    bins = _slot_bins(topk_ids_ptr, offs, num_slots, expert_offset, E_LOC, INCLUDE_NONLOCAL, NUM_BINS)
    h = tl.histogram(bins, NUM_BINS, mask=bins < NUM_BINS)
    tl.store(counts_ptr + pid * NUM_BINS + tl.arange(0, NUM_BINS), h)


@triton.jit
def _align_scatter_kernel(
    topk_ids_ptr,  # [TK] int
    counts_ptr,  # [num_chunks, NUM_BINS] int32 (ignored when SINGLE)
    sorted_ids_ptr,  # [P_max] int32 (out)
    block_expert_ptr,  # [P_max / BLOCK_M] int32 (out)
    num_post_padded_ptr,  # [1] int32 (out)
    num_slots,  # TK (also the sentinel)
    expert_offset,
    num_chunks,
    max_blocks,  # P_max / BLOCK_M
    E_LOC: tl.constexpr,
    INCLUDE_NONLOCAL: tl.constexpr,
    NUM_BINS: tl.constexpr,
    CHUNK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    SINGLE: tl.constexpr,  # one chunk: compute the histogram here (decode: one launch in all)
    CHUNKS_PER_ITER: tl.constexpr,  # rows of the counts matrix reduced per loop iteration
    BLOCKS_PER_ITER: tl.constexpr,  # blocks past the rows in use whose metadata one loop iteration writes
    USE_GDC: tl.constexpr,  # launched with programmatic dependent launch: wait for the prior grid first
    zero_ptr=None,  # ZERO_BLOCK > 0: int32 [n_zero] set to 0 by program 0 (the GEMMs' split-K counters)
    n_zero=0,
    ZERO_BLOCK: tl.constexpr = 0,
    EARLY_TRIGGER: tl.constexpr = False,  # USE_GDC: let the next grid launch right after the wait (_gdc_enter)
):
    """grid = (num_chunks,): scatter the slots of one chunk, plus a share of the metadata."""
    _gdc_enter(USE_GDC, EARLY_TRIGGER)
    _zero_fill(zero_ptr, n_zero, ZERO_BLOCK)
    _align_scatter(tl.program_id(0), topk_ids_ptr, counts_ptr, sorted_ids_ptr, block_expert_ptr, num_post_padded_ptr,
                   num_slots, expert_offset, num_chunks, max_blocks, E_LOC, INCLUDE_NONLOCAL, NUM_BINS, CHUNK, BLOCK_M,
                   SINGLE, CHUNKS_PER_ITER, BLOCKS_PER_ITER)


@triton.jit
def _align_scatter_quant_kernel(
    topk_ids_ptr, sorted_ids_ptr, block_expert_ptr, num_post_padded_ptr, num_slots, expert_offset, max_blocks,
    x_ptr,  # [T, C] hidden
    q_ptr,  # [T, C] e4m3 (fp32 if OUT_FP32; DOT_ROWS: hidden's dtype, the dot-order copy)
    s_ptr,  # the quantizer's scale output (rows: SCALE_MODE 2 [T]; groups: [T, C/GROUP])
    src_ptr,  # rows, SCALE_MODE 0: the static scale [1]
    T,
    C: tl.constexpr,
    stride_x,
    stride_q,
    stride_s,
    num_g,  # groups: group-blocks per row block
    E_LOC: tl.constexpr,
    INCLUDE_NONLOCAL: tl.constexpr,
    NUM_BINS: tl.constexpr,
    CHUNK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCKS_PER_ITER: tl.constexpr,
    GROUPS: tl.constexpr,  # False: _quant._fp8_rows (SCALE_MODE 0 / 2); True: _quant._fp8_groups
    SCALE_MODE: tl.constexpr,
    GROUP: tl.constexpr,
    MX: tl.constexpr,
    OUT_FP32: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_C: tl.constexpr,  # rows: columns per step; groups: groups per program (BLOCK_G)
    USE_GDC: tl.constexpr,
    RCP_DIV: tl.constexpr = False,  # the quantizer's x / s by reciprocals (_quant._div_by_scale; same bits)
    zero_ptr=None,  # as in _align_scatter_kernel
    n_zero=0,
    ZERO_BLOCK: tl.constexpr = 0,
    DOT_ROWS: tl.constexpr = False,  # programs 1..: hidden's rows in the FP4 decode kernel's dot order, no quantizer
    EARLY_TRIGGER: tl.constexpr = False,  # as in _align_scatter_kernel
):
    """Decode (one chunk of slots): the single-program align in program 0 and the FP8
    quantization of hidden in programs 1.. (the programs of ``_fp8_row_kernel`` or
    ``_fp8_group_kernel``, flattened): the two are independent, so one launch does both -- the
    same outputs, bit for bit. grid = (1 + quantizer programs,). ``DOT_ROWS`` (the FP4 decode kernel's
    BF16 input, ``kernels/_ws_fp4_dec.py``): programs 1.. copy hidden's rows into ``q_ptr`` with each 64-wide K block
    in that kernel's dot order (:func:`_dot64_rows`: BLOCK_T rows x BLOCK_C columns a program; ``s_ptr``, ``src_ptr``
    and the quantizer's constexprs unused), so that its loader copies 16-byte runs of them by cp.async instead of a
    gather launch between the align and the GEMM."""
    _gdc_enter(USE_GDC, EARLY_TRIGGER)
    _zero_fill(zero_ptr, n_zero, ZERO_BLOCK)
    pid = tl.program_id(0)
    if pid == 0:
        _align_single(topk_ids_ptr, sorted_ids_ptr, block_expert_ptr, num_post_padded_ptr, num_slots, expert_offset,
                      max_blocks, E_LOC, INCLUDE_NONLOCAL, NUM_BINS, CHUNK, BLOCK_M, BLOCKS_PER_ITER)
    elif DOT_ROWS:
        _dot64_rows(pid - 1, x_ptr, q_ptr, T, C, stride_x, stride_q, BLOCK_T, BLOCK_C)
    elif GROUPS:
        _fp8_groups((pid - 1) // num_g, (pid - 1) % num_g, x_ptr, q_ptr, s_ptr, T, C, stride_x, stride_q, stride_s,
                    GROUP, MX, OUT_FP32, BLOCK_T, BLOCK_C, RCP_DIV)
    else:
        _fp8_rows(pid - 1, x_ptr, q_ptr, s_ptr, src_ptr, T, C, stride_x, stride_q, SCALE_MODE, OUT_FP32, BLOCK_T,
                  BLOCK_C, RCP_DIV)


@triton.jit
def _gdc_enter(USE_GDC: tl.constexpr, EARLY_TRIGGER: tl.constexpr):
    """Programmatic dependent launch: wait for the prior grid before the first load; ``EARLY_TRIGGER``
    (``triton_moe.set_align_early_trigger``) then lets the next grid launch at once, so its programs are resident
    and waiting (every kernel of the chain waits for its prior grid before its first load) while this launch runs,
    instead of launching as this launch's programs exit."""
    if USE_GDC:
        tl.extra.cuda.gdc_wait()
        if EARLY_TRIGGER:
            tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def _zero_fill(zero_ptr, n_zero, ZERO_BLOCK: tl.constexpr):
    """Program 0 stores zeros to ``zero_ptr[:n_zero]`` (ZERO_BLOCK > 0): the split-K arrival counters of a call
    captured in a CUDA graph, fresh buffers, zeroed here instead of by a memset node between the align and GEMM1
    (``triton_moe.set_align_zero_fill``). After the launch's wait for the prior grid: nothing before it reads them."""
    if ZERO_BLOCK > 0:
        if tl.program_id(0) == 0:
            for i in range(0, n_zero, ZERO_BLOCK):
                offs = i + tl.arange(0, ZERO_BLOCK)
                tl.store(zero_ptr + offs, tl.zeros([ZERO_BLOCK], dtype=tl.int32), mask=offs < n_zero)


@triton.jit
def _align_scatter(pid, topk_ids_ptr, counts_ptr, sorted_ids_ptr, block_expert_ptr, num_post_padded_ptr, num_slots,
                   expert_offset, num_chunks, max_blocks, E_LOC: tl.constexpr, INCLUDE_NONLOCAL: tl.constexpr,
                   NUM_BINS: tl.constexpr, CHUNK: tl.constexpr, BLOCK_M: tl.constexpr, SINGLE: tl.constexpr,
                   CHUNKS_PER_ITER: tl.constexpr, BLOCKS_PER_ITER: tl.constexpr):
    """Program ``pid`` of the scatter (``counts_ptr`` unused when SINGLE)."""
    if SINGLE:
        _align_single(topk_ids_ptr, sorted_ids_ptr, block_expert_ptr, num_post_padded_ptr, num_slots, expert_offset,
                      max_blocks, E_LOC, INCLUDE_NONLOCAL, NUM_BINS, CHUNK, BLOCK_M, BLOCKS_PER_ITER)
    else:
        _align_chunk(pid, topk_ids_ptr, counts_ptr, sorted_ids_ptr, block_expert_ptr, num_post_padded_ptr, num_slots,
                     expert_offset, num_chunks, max_blocks, E_LOC, INCLUDE_NONLOCAL, NUM_BINS, CHUNK, BLOCK_M,
                     CHUNKS_PER_ITER, BLOCKS_PER_ITER)


@triton.jit
def _max_i32(a, b):
    return tl.maximum(a, b)


@triton.jit
def _align_single(topk_ids_ptr, sorted_ids_ptr, block_expert_ptr, num_post_padded_ptr, num_slots, expert_offset,
                  max_blocks, E_LOC: tl.constexpr, INCLUDE_NONLOCAL: tl.constexpr, NUM_BINS: tl.constexpr,
                  CHUNK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCKS_PER_ITER: tl.constexpr):
    """The one-program align (decode: all slots in one chunk), computed in slot space: after the stable sort of
    the slots by group, a group is a run of equal groups -- its start by a running max of the run starts, its
    padded size at its last slot, its base row by the cumulative sum of those sizes. O(CHUNK) work whatever the
    number of groups: no histogram or prefix sum over NUM_BINS bins, no [NUM_BINS, BLOCK_M] sentinel store (H200,
    one token: with those, Nemotron-3-Super's 512 experts took 3.9-4.2 us against 1.7-1.8 with 128; now 1.4-1.6 us
    for both). The same layout."""
    idx = tl.arange(0, CHUNK)
    bins = _slot_bins(topk_ids_ptr, idx, num_slots, expert_offset, E_LOC, INCLUDE_NONLOCAL, NUM_BINS)
    sorted_keys = tl.sort(bins * CHUNK + idx)  # unique keys: stable by slot within a group
    sbin = sorted_keys // CHUNK
    slot = sorted_keys % CHUNK
    in_layout = sbin < NUM_BINS  # slots outside the layout sort last
    first = (idx == 0) | (tl.gather(sbin, tl.maximum(idx - 1, 0), 0) != sbin)
    last = (idx == CHUNK - 1) | (tl.gather(sbin, tl.minimum(idx + 1, CHUNK - 1), 0) != sbin)
    start = tl.associative_scan(tl.where(first, idx, 0), 0, _max_i32)  # sorted position of the group's first slot
    size = idx - start + 1  # at the group's last slot: its slot count
    padded = tl.where(last & in_layout, (size + BLOCK_M - 1) // BLOCK_M * BLOCK_M, 0)
    ends = tl.cumsum(padded, 0)  # rows of the groups up to this position's
    base = tl.where(start > 0, tl.gather(ends, tl.maximum(start - 1, 0), 0), 0)
    dest = base + idx - start
    tl.store(sorted_ids_ptr + dest, slot, mask=in_layout)
    total_rows = tl.sum(padded, axis=0)
    tl.store(num_post_padded_ptr, total_rows)
    # every block in use holds a slot: its group
    tl.store(block_expert_ptr + dest // BLOCK_M, sbin, mask=in_layout)
    # the sentinel in the padding rows after each group's last slot
    rows_in_block = tl.arange(0, BLOCK_M)
    n_pad = tl.where(last & in_layout, padded - size, 0)
    tl.store(sorted_ids_ptr + (dest + 1)[:, None] + rows_in_block[None, :],
             tl.zeros([CHUNK, BLOCK_M], dtype=tl.int32) + num_slots, mask=rows_in_block[None, :] < n_pad[:, None])
    _unused_blocks(sorted_ids_ptr, block_expert_ptr, num_slots, total_rows, 0, 1, max_blocks, BLOCK_M,
                   BLOCKS_PER_ITER)


@triton.jit
def _unused_blocks(sorted_ids_ptr, block_expert_ptr, num_slots, total_rows, pid, num_chunks, max_blocks,
                   BLOCK_M: tl.constexpr, BLOCKS_PER_ITER: tl.constexpr):
    """The blocks past the rows in use (program ``pid``'s share): no group (-1), sentinel rows."""
    rows_in_block = tl.arange(0, BLOCK_M)
    for b0 in range(total_rows // BLOCK_M + pid * BLOCKS_PER_ITER, max_blocks, num_chunks * BLOCKS_PER_ITER):
        blk = b0 + tl.arange(0, BLOCKS_PER_ITER)
        blk_ok = blk < max_blocks
        tl.store(block_expert_ptr + blk, tl.full([BLOCKS_PER_ITER], -1, tl.int32), mask=blk_ok)
        rows = blk[:, None] * BLOCK_M + rows_in_block[None, :]
        tl.store(sorted_ids_ptr + rows, tl.zeros([BLOCKS_PER_ITER, BLOCK_M], dtype=tl.int32) + num_slots,
                 mask=blk_ok[:, None])


@triton.jit
def _align_chunk(pid, topk_ids_ptr, counts_ptr, sorted_ids_ptr, block_expert_ptr, num_post_padded_ptr, num_slots,
                 expert_offset, num_chunks, max_blocks, E_LOC: tl.constexpr, INCLUDE_NONLOCAL: tl.constexpr,
                 NUM_BINS: tl.constexpr, CHUNK: tl.constexpr, BLOCK_M: tl.constexpr, CHUNKS_PER_ITER: tl.constexpr,
                 BLOCKS_PER_ITER: tl.constexpr):
    """Program ``pid`` of the two-kernel align's scatter (the chunks' histograms in ``counts_ptr``)."""
    offs = pid * CHUNK + tl.arange(0, CHUNK)
    bins = _slot_bins(topk_ids_ptr, offs, num_slots, expert_offset, E_LOC, INCLUDE_NONLOCAL, NUM_BINS)
    bin_idx = tl.arange(0, NUM_BINS)

    totals = tl.zeros([NUM_BINS], dtype=tl.int32)
    before = tl.zeros([NUM_BINS], dtype=tl.int32)
    for c0 in range(0, num_chunks, CHUNKS_PER_ITER):
        cs = c0 + tl.arange(0, CHUNKS_PER_ITER)
        tile = tl.load(counts_ptr + cs[:, None] * NUM_BINS + bin_idx[None, :],
                       mask=cs[:, None] < num_chunks, other=0)
        totals += tl.sum(tile, axis=0)
        before += tl.sum(tl.where(cs[:, None] < pid, tile, 0), axis=0)
    hist = tl.load(counts_ptr + pid * NUM_BINS + bin_idx)

    # group layout: padded sizes, exclusive prefix = base row of each group
    padded = (totals + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    base = tl.cumsum(padded, axis=0) - padded
    total_rows = tl.sum(padded, axis=0)

    # stable counting sort inside the chunk
    start_in_chunk = tl.cumsum(hist, axis=0) - hist
    delta = base + before - start_in_chunk  # dest = position in sorted chunk + delta[bin]
    keys = bins * CHUNK + tl.arange(0, CHUNK)
    sorted_keys = tl.sort(keys)
    sbin = sorted_keys // CHUNK
    slot = pid * CHUNK + (sorted_keys % CHUNK)
    in_layout = sbin < NUM_BINS
    dest = tl.arange(0, CHUNK) + tl.gather(delta, tl.where(in_layout, sbin, 0), 0)
    tl.store(sorted_ids_ptr + dest, slot, mask=in_layout)

    if pid == 0:
        tl.store(num_post_padded_ptr, total_rows)

    # metadata, every part at addresses no other program or part writes (no ordering needed):
    # 1. a block holding a slot belongs to the slot's group -- and every block in use holds one
    #    (a group's blocks are full but its last, which holds its leftover slots)
    tl.store(block_expert_ptr + dest // BLOCK_M, sbin, mask=in_layout)
    # 2. the padding rows of each group's last block hold the sentinel: all groups at once in
    #    program 0 when [NUM_BINS, BLOCK_M] is at most 8192 rows (no gathers), else in runs of
    #    GROUPS_PER_ITER groups (runs pid, pid + num_chunks, ...)
    rows_in_block = tl.arange(0, BLOCK_M)
    if NUM_BINS * BLOCK_M <= 8192:
        if pid == 0:
            tl.store(sorted_ids_ptr + (base + totals)[:, None] + rows_in_block[None, :],
                     tl.zeros([NUM_BINS, BLOCK_M], dtype=tl.int32) + num_slots,
                     mask=rows_in_block[None, :] < (padded - totals)[:, None])
    else:
        GROUPS_PER_ITER: tl.constexpr = 8192 // BLOCK_M
        for g0 in range(pid * GROUPS_PER_ITER, NUM_BINS, num_chunks * GROUPS_PER_ITER):
            gi = g0 + tl.arange(0, GROUPS_PER_ITER)
            g_end = tl.gather(base, gi, 0) + tl.gather(totals, gi, 0)  # first padding row
            n_pad = tl.gather(padded, gi, 0) - tl.gather(totals, gi, 0)
            tl.store(sorted_ids_ptr + g_end[:, None] + rows_in_block[None, :],
                     tl.zeros([GROUPS_PER_ITER, BLOCK_M], dtype=tl.int32) + num_slots,
                     mask=rows_in_block[None, :] < n_pad[:, None])
    # 3. the blocks past the rows in use: no group (-1), sentinel rows
    _unused_blocks(sorted_ids_ptr, block_expert_ptr, num_slots, total_rows, pid, num_chunks, max_blocks, BLOCK_M,
                   BLOCKS_PER_ITER)


@triton.jit
def _gather_slot_rows_kernel(
    src_ptr,  # [T, C] rows of hidden's quantization (any 1-byte view)
    dst_ptr,  # [P_max, C] out: row r = src[sorted_ids[r] // TOP_K], zeros for padding rows
    sorted_ids_ptr,  # [P_max] int32
    block_expert_ptr,  # [P_max / BLOCK_M] int32
    num_post_padded_ptr,  # [1] int32
    num_slots,  # T*K (the sentinel)
    C,
    stride_src,
    stride_dst,
    TOP_K: tl.constexpr,
    E_LOC: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_C: tl.constexpr,
    DOT64: tl.constexpr = False,
    REAL_ONLY: tl.constexpr = False,
    PAIR8: tl.constexpr = False,
):
    """The rows of GEMM1's input in block-padded slot order, for the warp-specialized GEMM1
    (``_ws_gemm1``: its TMA loads contiguous rows). grid = (P_max / BLOCK_M, cdiv(C, BLOCK_C));
    blocks at or past ``num_post_padded`` and of the non-local group are skipped (never read).
    ``DOT64`` (16-bit elements, C a multiple of 128 bytes): each 64-element block of a row in the FP4
    decode kernel's dot order (``kernels/_ws_fp4_dec.py``): element ``16 s + 8 m + 2 c + p`` of the
    block is the source's ``16 c + 8 m + 4 p + s``. ``REAL_ONLY`` (the decode kernels, whose token rows are
    the wgmma's N side: a padding row only reaches its own output column, never stored): padding rows are
    left as they are instead of zeroed -- at one token 1 of a block's 16 rows is written. ``PAIR8`` (16-bit
    elements, C a multiple of 16 bytes): each 8-element group of a row in the FP4 prefill kernel's pair order
    (``kernels/_ws_fp4.pair8_cols``): element ``2 s + j`` of the group is the source's ``4 j + s`` -- loaded in
    order, permuted in registers."""
    pid_m = tl.program_id(0)
    if pid_m * BLOCK_M >= tl.load(num_post_padded_ptr):
        return
    if tl.load(block_expert_ptr + pid_m) >= E_LOC:
        return
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    slots = tl.load(sorted_ids_ptr + rows)
    ok = slots < num_slots
    tok64 = (slots // TOP_K).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    c_ok = cols < C
    src_cols = cols
    if DOT64:  # byte b of element d of a 128-byte block <- byte b of element _dot64_source(d)
        src_cols = cols - cols % 128 + 2 * _dot64_source((cols % 128) // 2) + cols % 2
    x = tl.load(src_ptr + tok64[:, None] * stride_src + src_cols[None, :], mask=ok[:, None] & c_ok[None, :], other=0)
    if PAIR8:  # [group, j, s, byte] -> [group, s, j, byte] (the groups never straddle C: 16-byte multiples)
        x = tl.permute(tl.reshape(x, [BLOCK_M, BLOCK_C // 16, 2, 4, 2]), [0, 1, 3, 2, 4])
        x = tl.reshape(x, [BLOCK_M, BLOCK_C])
    tl.store(dst_ptr + rows.to(tl.int64)[:, None] * stride_dst + cols[None, :], x,
             mask=(ok[:, None] & c_ok[None, :]) if REAL_ONLY else c_ok[None, :])


@triton.jit
def _dot64_source(d):
    """The FP4 decode kernel's dot order (``kernels/_ws_fp4_dec.py``): the K position within a 64-wide block that
    dot position ``d = 16 s + 8 m + 2 c + p`` holds, ``16 c + 8 m + 4 p + s``."""
    return 16 * ((d // 2) % 4) + 8 * ((d // 8) % 2) + 4 * (d % 2) + d // 16


@triton.jit
def _dot64_rows(pid, x_ptr, dst_ptr, T, C: tl.constexpr, stride_x, stride_dst, BLOCK_T: tl.constexpr,
                BLOCK_C: tl.constexpr):
    """Program ``pid`` of the dot-order copy of ``x`` [T, C] 16-bit rows (C a multiple of 64) into ``dst`` [T, C]:
    one tile of ``BLOCK_T`` rows x ``BLOCK_C`` columns (a multiple of 64) a program, the column tiles of a row block
    on consecutive programs -- every 64-wide K block permuted (:func:`_dot64_source`). (One load and store a program,
    fiftieth session: with one program stepping through a row's columns 512 at a time the launch took 3.6-3.7 µs at
    H = 2688-2880 against 1.9 µs at H = 1024 on an H100 -- the steps, by our reading, outlasting the align program.)"""
    n_c: tl.constexpr = (C + BLOCK_C - 1) // BLOCK_C
    rows = (pid // n_c) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = (pid % n_c) * BLOCK_C + tl.arange(0, BLOCK_C)
    r64 = rows.to(tl.int64)
    src = cols - cols % 64 + _dot64_source(cols % 64)
    m = (rows < T)[:, None] & (cols < C)[None, :]
    x = tl.load(x_ptr + r64[:, None] * stride_x + src[None, :], mask=m)
    tl.store(dst_ptr + r64[:, None] * stride_dst + cols[None, :], x, mask=m)
