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
def _loader(a_desc, w_desc, a0_bufs, a1_bufs, w_bufs, ready, empty, expert_ptr, num_m, N, K,
            HALF_M: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, GROUP_M: gl.constexpr):
    """TMA producer (one warp): both 64-row halves of A and the weight tile of every K block of
    every tile of this program into the STAGES-deep ring; waits for both consumers to free a slot."""
    num_n = gl.cdiv(N, BN)
    n_k = gl.cdiv(K, BK)
    nbytes: gl.constexpr = 2 * a_desc.block_type.nbytes + w_desc.block_type.nbytes
    it = 0
    for t in range(gl.program_id(0), num_m * num_n, gl.num_programs(0)):
        pid_m, pid_n = _tile_coords(t, num_m, num_n, GROUP_M)
        row0 = pid_m * (2 * HALF_M)
        wrow0 = gl.load(expert_ptr + pid_m) * N + pid_n * BN
        for kk in range(n_k):
            s = it % STAGES
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)  # a fresh slot passes at once
            bar = ready.index(s)
            mbarrier.expect(bar, nbytes)
            tma.async_copy_global_to_shared(a_desc, [row0, kk * BK], bar, a0_bufs.index(s))
            tma.async_copy_global_to_shared(a_desc, [row0 + HALF_M, kk * BK], bar, a1_bufs.index(s))
            tma.async_copy_global_to_shared(w_desc, [wrow0, kk * BK], bar, w_bufs.index(s))
            it += 1


@gluon.jit
def _consumer(a_bufs, w_bufs, ready, empty, c_ptr, a_s_ptr, w_s_ptr, expert_ptr, num_m, N, K, stride_c,
              HALF: gl.constexpr, HALF_M: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
              GROUP_M: gl.constexpr):
    """MMA warpgroup for rows [HALF * HALF_M, (HALF + 1) * HALF_M) of every tile: per K block a
    fresh wgmma, its wait, the slot released, the fp32 add; then the scaled bf16 store."""
    layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 32])
    num_n = gl.cdiv(N, BN)
    n_k = gl.cdiv(K, BK)
    part = gl.zeros((HALF_M, BN), dtype=gl.float32, layout=layout)
    it = 0
    for t in range(gl.program_id(0), num_m * num_n, gl.num_programs(0)):
        pid_m, pid_n = _tile_coords(t, num_m, num_n, GROUP_M)
        e = gl.load(expert_ptr + pid_m)
        acc = gl.zeros((HALF_M, BN), dtype=gl.float32, layout=layout)
        for kk in range(n_k):
            s = it % STAGES
            mbarrier.wait(ready.index(s), (it // STAGES) & 1)
            part = warpgroup_mma(a_bufs.index(s), w_bufs.index(s).permute((1, 0)), part, use_acc=False, is_async=True)
            part = warpgroup_mma_wait(num_outstanding=0, deps=(part,))
            mbarrier.arrive(empty.index(s), count=1)
            acc = acc + part
            it += 1
        rows = pid_m * (2 * HALF_M) + HALF * HALF_M + gl.arange(0, HALF_M, layout=gl.SliceLayout(1, layout))
        cols = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, layout))
        a_s = gl.load(a_s_ptr + rows)
        w_s = gl.load(w_s_ptr + e * N + cols, mask=cols < N, other=0.0)
        out = acc * a_s[:, None] * w_s[None, :]
        gl.store(c_ptr + rows[:, None].to(gl.int64) * stride_c + cols[None, :], out.to(gl.bfloat16),
                 mask=cols[None, :] < N)


@gluon.jit
def gl_fp8_gemm(a_desc, w_desc, c_ptr, a_s_ptr, w_s_ptr, expert_ptr, num_m, N, K, stride_c,
                BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, GROUP_M: gl.constexpr):
    """``a_desc``: block [64, BK] over A; ``w_desc``: block [BN, BK] over W [E * N, K]; launch
    with ``num_warps=4`` (the first MMA warpgroup; the second and the loader warp are workers)."""
    HALF_M: gl.constexpr = a_desc.block_type.shape[0]
    a0_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    a1_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    w_bufs = gl.allocate_shared_memory(w_desc.dtype, [STAGES] + w_desc.block_type.shape, w_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=2)  # both MMA warpgroups release a slot
    gl.warp_specialize([
        (_consumer, (a0_bufs, w_bufs, ready, empty, c_ptr, a_s_ptr, w_s_ptr, expert_ptr, num_m, N, K, stride_c,
                     0, HALF_M, BN, BK, STAGES, GROUP_M)),
        (_consumer, (a1_bufs, w_bufs, ready, empty, c_ptr, a_s_ptr, w_s_ptr, expert_ptr, num_m, N, K, stride_c,
                     1, HALF_M, BN, BK, STAGES, GROUP_M)),
        (_loader, (a_desc, w_desc, a0_bufs, a1_bufs, w_bufs, ready, empty, expert_ptr, num_m, N, K,
                   HALF_M, BN, BK, STAGES, GROUP_M)),
    ], [4, 1], [232, 40])


# ---- gated GEMM1 (SwiGLU in the epilogue): the form the library's FP8 prefill GEMM1 would take ----

@gluon.jit
def _loader_g(a_desc, w_desc, a0_bufs, a1_bufs, g_bufs, u_bufs, ready, empty, expert_ptr, num_m, I, K,
              HALF_M: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, GROUP_M: gl.constexpr):
    """TMA producer of the gated GEMM1: per K block both 64-row halves of A and the gate and up
    weight tiles (rows ``e * 2I + n`` and ``e * 2I + I + n`` of W13)."""
    num_n = gl.cdiv(I, BN)
    n_k = gl.cdiv(K, BK)
    nbytes: gl.constexpr = 2 * a_desc.block_type.nbytes + 2 * w_desc.block_type.nbytes
    it = 0
    for t in range(gl.program_id(0), num_m * num_n, gl.num_programs(0)):
        pid_m, pid_n = _tile_coords(t, num_m, num_n, GROUP_M)
        row0 = pid_m * (2 * HALF_M)
        grow0 = gl.load(expert_ptr + pid_m) * (2 * I) + pid_n * BN
        for kk in range(n_k):
            s = it % STAGES
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
            bar = ready.index(s)
            mbarrier.expect(bar, nbytes)
            tma.async_copy_global_to_shared(a_desc, [row0, kk * BK], bar, a0_bufs.index(s))
            tma.async_copy_global_to_shared(a_desc, [row0 + HALF_M, kk * BK], bar, a1_bufs.index(s))
            tma.async_copy_global_to_shared(w_desc, [grow0, kk * BK], bar, g_bufs.index(s))
            tma.async_copy_global_to_shared(w_desc, [grow0 + I, kk * BK], bar, u_bufs.index(s))
            it += 1


@gluon.jit
def _consumer_g(a_bufs, g_bufs, u_bufs, ready, empty, c_ptr, a_s_ptr, w_s_ptr, expert_ptr, num_m, I, K, stride_c,
                HALF: gl.constexpr, HALF_M: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
                GROUP_M: gl.constexpr):
    """MMA warpgroup of the gated GEMM1 (rows [HALF * HALF_M, (HALF + 1) * HALF_M) of every tile):
    per K block two fresh wgmmas (gate, up), one wait, the slot released, two fp32 adds; then the
    scales, silu(gate) * up in fp32 and the bf16 store of the [rows, I] intermediate."""
    layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 32])
    num_n = gl.cdiv(I, BN)
    n_k = gl.cdiv(K, BK)
    pg = gl.zeros((HALF_M, BN), dtype=gl.float32, layout=layout)
    pu = gl.zeros((HALF_M, BN), dtype=gl.float32, layout=layout)
    it = 0
    for t in range(gl.program_id(0), num_m * num_n, gl.num_programs(0)):
        pid_m, pid_n = _tile_coords(t, num_m, num_n, GROUP_M)
        e = gl.load(expert_ptr + pid_m)
        acc_g = gl.zeros((HALF_M, BN), dtype=gl.float32, layout=layout)
        acc_u = gl.zeros((HALF_M, BN), dtype=gl.float32, layout=layout)
        for kk in range(n_k):
            s = it % STAGES
            mbarrier.wait(ready.index(s), (it // STAGES) & 1)
            pg = warpgroup_mma(a_bufs.index(s), g_bufs.index(s).permute((1, 0)), pg, use_acc=False, is_async=True)
            pu = warpgroup_mma(a_bufs.index(s), u_bufs.index(s).permute((1, 0)), pu, use_acc=False, is_async=True)
            pg, pu = warpgroup_mma_wait(num_outstanding=0, deps=(pg, pu))
            mbarrier.arrive(empty.index(s), count=1)
            acc_g = acc_g + pg
            acc_u = acc_u + pu
            it += 1
        rows = pid_m * (2 * HALF_M) + HALF * HALF_M + gl.arange(0, HALF_M, layout=gl.SliceLayout(1, layout))
        cols = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, layout))
        a_s = gl.load(a_s_ptr + rows)[:, None]
        col_ok = cols < I
        g = acc_g * a_s * gl.load(w_s_ptr + e * (2 * I) + cols, mask=col_ok, other=0.0)[None, :]
        u = acc_u * a_s * gl.load(w_s_ptr + e * (2 * I) + I + cols, mask=col_ok, other=0.0)[None, :]
        h = g / (1.0 + gl.exp(-g)) * u
        gl.store(c_ptr + rows[:, None].to(gl.int64) * stride_c + cols[None, :], h.to(gl.bfloat16),
                 mask=col_ok[None, :])


@gluon.jit
def gl_fp8_gemm1_swiglu(a_desc, w_desc, c_ptr, a_s_ptr, w_s_ptr, expert_ptr, num_m, I, K, stride_c,
                        BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, GROUP_M: gl.constexpr):
    """Gated FP8 GEMM1 with SwiGLU: C [rows, I] bf16 = silu(A @ Wg^T * s) * (A @ Wu^T * s), W13
    [E * 2I, K] with each expert's gate rows then up rows (the library's layout), A in slot order
    (expert-aligned 128-row blocks: the library would quantize hidden straight into that order,
    Hopper's TMA having no row gather). ``a_desc``: block [64, BK]; ``w_desc``: block [BN, BK];
    BN = 64 keeps a warpgroup's four 64 x 64 fp32 tiles (two sums, two partials) at 128 registers a
    thread. Launch with ``num_warps=4`` and grid = SMs (persistent) or tiles. Not yet measured."""
    HALF_M: gl.constexpr = a_desc.block_type.shape[0]
    a0_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    a1_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    g_bufs = gl.allocate_shared_memory(w_desc.dtype, [STAGES] + w_desc.block_type.shape, w_desc.layout)
    u_bufs = gl.allocate_shared_memory(w_desc.dtype, [STAGES] + w_desc.block_type.shape, w_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=2)  # both MMA warpgroups release a slot
    gl.warp_specialize([
        (_consumer_g, (a0_bufs, g_bufs, u_bufs, ready, empty, c_ptr, a_s_ptr, w_s_ptr, expert_ptr, num_m, I, K,
                       stride_c, 0, HALF_M, BN, BK, STAGES, GROUP_M)),
        (_consumer_g, (a1_bufs, g_bufs, u_bufs, ready, empty, c_ptr, a_s_ptr, w_s_ptr, expert_ptr, num_m, I, K,
                       stride_c, 1, HALF_M, BN, BK, STAGES, GROUP_M)),
        (_loader_g, (a_desc, w_desc, a0_bufs, a1_bufs, g_bufs, u_bufs, ready, empty, expert_ptr, num_m, I, K,
                     HALF_M, BN, BK, STAGES, GROUP_M)),
    ], [4, 1], [232, 40])
