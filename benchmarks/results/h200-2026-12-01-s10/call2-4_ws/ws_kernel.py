"""Experiment: grouped FP8 GEMM (expert-aligned row blocks) through TMA descriptors, with and
without Triton's Hopper warp specialization, promoted (max_num_imprecise_acc = BK) or fast."""
import triton
import triton.language as tl


@triton.jit
def ws_gemm(a_desc, w_desc, c_ptr, a_s_ptr, w_s_ptr, expert_ptr, num_m, N, K, stride_c,
            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
            WS: tl.constexpr, STAGES: tl.constexpr, PROMOTE: tl.constexpr):
    pid = tl.program_id(0)
    num_n = tl.cdiv(N, BN)
    group = pid // (GROUP_M * num_n)
    first_m = group * GROUP_M
    gsize = min(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % (GROUP_M * num_n)) % gsize
    pid_n = (pid % (GROUP_M * num_n)) // gsize
    e = tl.load(expert_ptr + pid_m)
    e = tl.maximum(e, 0)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    IMP: tl.constexpr = BK if PROMOTE else 0
    for k in tl.range(0, K, BK, num_stages=STAGES, warp_specialize=WS):
        a = a_desc.load([pid_m * BM, k])
        w = w_desc.load([e, pid_n * BN, k]).reshape(BN, BK)
        acc = tl.dot(a, w.T, acc, max_num_imprecise_acc=IMP)
    rows = pid_m * BM + tl.arange(0, BM)
    cols = pid_n * BN + tl.arange(0, BN)
    a_s = tl.load(a_s_ptr + rows)
    w_s = tl.load(w_s_ptr + e * N + cols)
    out = acc * a_s[:, None] * w_s[None, :]
    tl.store(c_ptr + rows[:, None] * stride_c + cols[None, :], out.to(tl.bfloat16), mask=cols[None, :] < N)


@triton.jit
def ws_gemm2d(a_desc, w_desc, c_ptr, a_s_ptr, w_s_ptr, expert_ptr, num_m, N, K, stride_c,
              BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
              WS: tl.constexpr, STAGES: tl.constexpr, PROMOTE: tl.constexpr):
    """Weights as one 2D [E*N, K] descriptor; plain (m, n) program order."""
    pid = tl.program_id(0)
    num_n = tl.cdiv(N, BN)
    pid_m = pid // num_n
    pid_n = pid % num_n
    e = tl.load(expert_ptr + pid_m)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    IMP: tl.constexpr = BK if PROMOTE else 0
    for k in tl.range(0, K, BK, num_stages=STAGES, warp_specialize=WS):
        a = a_desc.load([pid_m * BM, k])
        w = w_desc.load([e * N + pid_n * BN, k])
        acc = tl.dot(a, w.T, acc, max_num_imprecise_acc=IMP)
    rows = pid_m * BM + tl.arange(0, BM)
    cols = pid_n * BN + tl.arange(0, BN)
    a_s = tl.load(a_s_ptr + rows)
    w_s = tl.load(w_s_ptr + e * N + cols)
    out = acc * a_s[:, None] * w_s[None, :]
    tl.store(c_ptr + rows[:, None] * stride_c + cols[None, :], out.to(tl.bfloat16), mask=cols[None, :] < N)
