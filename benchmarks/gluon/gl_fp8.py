"""Gluon prototypes of a grouped FP8 GEMM with the promoted accumulation, warp-specialized: one
TMA loader warp and two MMA warpgroups, each owning 64 rows of a 128 x BN output tile. Each
BK-wide K block's wgmma goes into a fresh accumulator (``use_acc=False``), is waited for and added
to the fp32 sum (the precision of ``max_num_imprecise_acc = BK``); while one warpgroup adds, the
other's MMA runs. Not part of the library yet (issue 3, FP8 per tensor / channel prefill):

``gl_fp8_gemm`` walks tiles ``program_id, program_id + grid, ...`` in GROUP_M-row bands:

* grid = the number of tiles, GROUP_M = 1: one tile per program in (m, n) order -- the algorithm
  measured on the H200 in the tenth session (BENCHMARKS.md; the code as run: commit 96ac543,
  ``benchmarks/results/h200-2026-12-01-s10/call6_gluon/``): correct, 827 TF/s on the DeepSeek-V3
  GEMM1 shape at 8192 tokens, 1.12x the plain promoted Triton kernel; slower on short K (Qwen3-30B
  GEMM2, K = 768: the pipeline prologue and the epilogue are not overlapped).
* grid = the number of SMs: persistent, the loader running into the next tile while the MMA
  warpgroups store. Compiles for sm_90 (``tests/test_gluon_probe.py``); **not yet measured**.

Operands: A [rows, K] e4m3 in expert-aligned 128-row blocks (``expert_ptr`` [blocks] = the
expert of each block), W [E * N, K] e4m3 (row-major per expert), per-row ``a_s`` and per-(expert,
column) ``w_s`` fp32 scales; C [rows, N] bf16 = (A @ W[e]^T) * a_s * w_s.

GATED: the gated GEMM1 as the library's FP8 prefill GEMM1 would run it -- W = W13 [E * 2N, K] (each
expert's N gate rows, then its N up rows: the library's layout), C [rows, N] = silu(gate) * up, two
wgmmas (gate and up tiles) and one wait per K block, A in slot order (the library would quantize
hidden straight into that order: Hopper's TMA has no row gather). Compiles for sm_90 at BN = 64
(two sums and two partials of 64 x 64 fp32 a warpgroup: 128 registers a thread); **not yet run**.
"""
import triton  # noqa: F401  (the Gluon runtime needs triton imported first)
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait


@gluon.jit
def _tile_coords(t, num_m, num_n, GROUP_M: gl.constexpr):
    """(pid_m, pid_n) of tile t, in bands of GROUP_M row blocks (a band reuses its weight tiles
    from L2); GROUP_M = 1 is plain (m, n) order."""
    width = GROUP_M * num_n
    first_m = (t // width) * GROUP_M
    gsize = gl.minimum(num_m - first_m, GROUP_M)
    return first_m + (t % width) % gsize, (t % width) // gsize


@gluon.jit
def _loader(a_desc, w_desc, a0_bufs, a1_bufs, w_bufs, u_bufs, ready, empty, expert_ptr, num_m, N, K,
            HALF_M: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, GROUP_M: gl.constexpr,
            GATED: gl.constexpr):
    """TMA producer (one warp): both 64-row halves of A and the weight tile (GATED: the gate and up
    tiles, rows ``e * 2N + n`` and ``e * 2N + N + n``) of every K block of every tile of this
    program into the STAGES-deep ring; waits for both consumers to free a slot."""
    num_n = gl.cdiv(N, BN)
    n_k = gl.cdiv(K, BK)
    W_TILES: gl.constexpr = 2 if GATED else 1
    nbytes: gl.constexpr = 2 * a_desc.block_type.nbytes + W_TILES * w_desc.block_type.nbytes
    it = 0
    for t in range(gl.program_id(0), num_m * num_n, gl.num_programs(0)):
        pid_m, pid_n = _tile_coords(t, num_m, num_n, GROUP_M)
        row0 = pid_m * (2 * HALF_M)
        wrow0 = gl.load(expert_ptr + pid_m) * (W_TILES * N) + pid_n * BN
        for kk in range(n_k):
            s = it % STAGES
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)  # a fresh slot passes at once
            bar = ready.index(s)
            mbarrier.expect(bar, nbytes)
            tma.async_copy_global_to_shared(a_desc, [row0, kk * BK], bar, a0_bufs.index(s))
            tma.async_copy_global_to_shared(a_desc, [row0 + HALF_M, kk * BK], bar, a1_bufs.index(s))
            tma.async_copy_global_to_shared(w_desc, [wrow0, kk * BK], bar, w_bufs.index(s))
            if GATED:
                tma.async_copy_global_to_shared(w_desc, [wrow0 + N, kk * BK], bar, u_bufs.index(s))
            it += 1


@gluon.jit
def _consumer(a_bufs, w_bufs, u_bufs, ready, empty, c_ptr, a_s_ptr, w_s_ptr, expert_ptr, num_m, N, K, stride_c,
              HALF: gl.constexpr, HALF_M: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
              GROUP_M: gl.constexpr, GATED: gl.constexpr):
    """MMA warpgroup for rows [HALF * HALF_M, (HALF + 1) * HALF_M) of every tile: per K block a
    fresh wgmma (GATED: gate and up), one wait, the slot released, the fp32 adds; then the scales
    (GATED: silu(gate) * up in fp32) and the bf16 store."""
    layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 32])
    num_n = gl.cdiv(N, BN)
    n_k = gl.cdiv(K, BK)
    part = gl.zeros((HALF_M, BN), dtype=gl.float32, layout=layout)
    if GATED:
        part_u = gl.zeros((HALF_M, BN), dtype=gl.float32, layout=layout)
    it = 0
    for t in range(gl.program_id(0), num_m * num_n, gl.num_programs(0)):
        pid_m, pid_n = _tile_coords(t, num_m, num_n, GROUP_M)
        e = gl.load(expert_ptr + pid_m)
        acc = gl.zeros((HALF_M, BN), dtype=gl.float32, layout=layout)
        if GATED:
            acc_u = gl.zeros((HALF_M, BN), dtype=gl.float32, layout=layout)
        for kk in range(n_k):
            s = it % STAGES
            mbarrier.wait(ready.index(s), (it // STAGES) & 1)
            part = warpgroup_mma(a_bufs.index(s), w_bufs.index(s).permute((1, 0)), part, use_acc=False, is_async=True)
            if GATED:
                part_u = warpgroup_mma(a_bufs.index(s), u_bufs.index(s).permute((1, 0)), part_u, use_acc=False,
                                       is_async=True)
                part, part_u = warpgroup_mma_wait(num_outstanding=0, deps=(part, part_u))
                acc_u = acc_u + part_u
            else:
                part = warpgroup_mma_wait(num_outstanding=0, deps=(part,))
            mbarrier.arrive(empty.index(s), count=1)
            acc = acc + part
            it += 1
        rows = pid_m * (2 * HALF_M) + HALF * HALF_M + gl.arange(0, HALF_M, layout=gl.SliceLayout(1, layout))
        cols = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, layout))
        a_s = gl.load(a_s_ptr + rows)
        if GATED:  # gate columns e * 2N + n, up columns e * 2N + N + n
            w_s = w_s_ptr + e * (2 * N) + cols
            gate = acc * a_s[:, None] * gl.load(w_s, mask=cols < N, other=0.0)[None, :]
            up = acc_u * a_s[:, None] * gl.load(w_s + N, mask=cols < N, other=0.0)[None, :]
            out = gate / (1.0 + gl.exp(-gate)) * up
        else:
            w_s = gl.load(w_s_ptr + e * N + cols, mask=cols < N, other=0.0)
            out = acc * a_s[:, None] * w_s[None, :]
        gl.store(c_ptr + rows[:, None].to(gl.int64) * stride_c + cols[None, :], out.to(gl.bfloat16),
                 mask=cols[None, :] < N)


@gluon.jit
def gl_fp8_gemm(a_desc, w_desc, c_ptr, a_s_ptr, w_s_ptr, expert_ptr, num_m, N, K, stride_c,
                BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, GROUP_M: gl.constexpr,
                GATED: gl.constexpr = False):
    """``a_desc``: block [64, BK] over A; ``w_desc``: block [BN, BK] over W [E * N, K] (GATED: W13
    [E * 2N, K], N = the intermediate size); launch with ``num_warps=4`` (the first MMA warpgroup;
    the second and the loader warp are workers)."""
    HALF_M: gl.constexpr = a_desc.block_type.shape[0]
    a0_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    a1_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    w_bufs = gl.allocate_shared_memory(w_desc.dtype, [STAGES] + w_desc.block_type.shape, w_desc.layout)
    u_bufs = w_bufs  # GATED: the up tiles' ring
    if GATED:
        u_bufs = gl.allocate_shared_memory(w_desc.dtype, [STAGES] + w_desc.block_type.shape, w_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=2)  # both MMA warpgroups release a slot
    gl.warp_specialize([
        (_consumer, (a0_bufs, w_bufs, u_bufs, ready, empty, c_ptr, a_s_ptr, w_s_ptr, expert_ptr, num_m, N, K,
                     stride_c, 0, HALF_M, BN, BK, STAGES, GROUP_M, GATED)),
        (_consumer, (a1_bufs, w_bufs, u_bufs, ready, empty, c_ptr, a_s_ptr, w_s_ptr, expert_ptr, num_m, N, K,
                     stride_c, 1, HALF_M, BN, BK, STAGES, GROUP_M, GATED)),
        (_loader, (a_desc, w_desc, a0_bufs, a1_bufs, w_bufs, u_bufs, ready, empty, expert_ptr, num_m, N, K,
                   HALF_M, BN, BK, STAGES, GROUP_M, GATED)),
    ], [4, 1], [232, 40])
