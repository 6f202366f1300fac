"""Prototype (session 10, compile-only on the CPU): grouped FP8 GEMM with the promoted accumulation,
warp-specialized in Gluon: one TMA loader warp, two MMA warpgroups each owning 64 rows of a
128 x BN tile. Each K block's MMA goes into a fresh accumulator (use_acc=False), is waited for and
added to the fp32 sum; while one warpgroup adds, the other's MMA runs (the point of the split)."""
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait


@gluon.jit
def _loader(a_desc, w_desc, a0_bufs, a1_bufs, w_bufs, ready, empty, row0, wrow0, K,
            HALF_M: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr):
    n_k = gl.cdiv(K, BK)
    nbytes: gl.constexpr = 2 * a_desc.block_type.nbytes + w_desc.block_type.nbytes
    for i in range(n_k):
        s = i % STAGES
        mbarrier.wait(empty.index(s), ((i // STAGES) & 1) ^ 1)
        bar = ready.index(s)
        mbarrier.expect(bar, nbytes)
        tma.async_copy_global_to_shared(a_desc, [row0, i * BK], bar, a0_bufs.index(s))
        tma.async_copy_global_to_shared(a_desc, [row0 + HALF_M, i * BK], bar, a1_bufs.index(s))
        tma.async_copy_global_to_shared(w_desc, [wrow0, i * BK], bar, w_bufs.index(s))


@gluon.jit
def _consumer(a_bufs, w_bufs, ready, empty, c_ptr, a_s_ptr, w_s_ptr, row0, col0, e, N, K, stride_c,
              HALF_M: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr):
    layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 32])
    acc = gl.zeros((HALF_M, BN), dtype=gl.float32, layout=layout)
    part = gl.zeros((HALF_M, BN), dtype=gl.float32, layout=layout)
    n_k = gl.cdiv(K, BK)
    for i in range(n_k):
        s = i % STAGES
        mbarrier.wait(ready.index(s), (i // STAGES) & 1)
        a = a_bufs.index(s)
        w = w_bufs.index(s).permute((1, 0))
        part = warpgroup_mma(a, w, part, use_acc=False, is_async=True)
        part = warpgroup_mma_wait(num_outstanding=0, deps=(part,))
        mbarrier.arrive(empty.index(s), count=1)
        acc = acc + part
    rows = row0 + gl.arange(0, HALF_M, layout=gl.SliceLayout(1, layout))
    cols = col0 + gl.arange(0, BN, layout=gl.SliceLayout(0, layout))
    a_s = gl.load(a_s_ptr + rows)
    w_s = gl.load(w_s_ptr + e * N + cols, mask=cols < N, other=0.0)
    out = acc * a_s[:, None] * w_s[None, :]
    ptrs = c_ptr + rows[:, None].to(gl.int64) * stride_c + cols[None, :]
    gl.store(ptrs, out.to(gl.bfloat16), mask=cols[None, :] < N)


@gluon.jit
def gl_fp8_gemm(a_desc, w_desc, c_ptr, a_s_ptr, w_s_ptr, expert_ptr, N, K, stride_c,
                BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr):
    HALF_M: gl.constexpr = a_desc.block_type.shape[0]
    pid = gl.program_id(0)
    num_n = gl.cdiv(N, BN)
    pid_m = pid // num_n
    pid_n = pid % num_n
    e = gl.load(expert_ptr + pid_m)
    row0 = pid_m * (2 * HALF_M)
    col0 = pid_n * BN
    a0_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    a1_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    w_bufs = gl.allocate_shared_memory(w_desc.dtype, [STAGES] + w_desc.block_type.shape, w_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=2)
    gl.warp_specialize([
        (_consumer, (a0_bufs, w_bufs, ready, empty, c_ptr, a_s_ptr, w_s_ptr, row0, col0, e, N, K, stride_c,
                     HALF_M, BN, BK, STAGES)),
        (_consumer, (a1_bufs, w_bufs, ready, empty, c_ptr, a_s_ptr, w_s_ptr, row0 + HALF_M, col0, e, N, K, stride_c,
                     HALF_M, BN, BK, STAGES)),
        (_loader, (a_desc, w_desc, a0_bufs, a1_bufs, w_bufs, ready, empty, row0, e * N + col0, K, HALF_M, BK, STAGES)),
    ], [4, 1], [232, 40])
