"""Probe (H200): where the time of a short-K GEMM2 goes, and what a persistent launch recovers.

    PYTHONPATH=src python3 benchmarks/gemm2_probe.py --shape 7168,256,256,8 [--tokens 8192] [--json out.json]

``--shape H,I,E,top_k`` (DeepSeek-V3 TP8: 7168,256,256,8; Qwen3-30B: 2048,768,128,8): one FP8 GEMM2
(N = H, K = I) over T x top_k uniformly routed rows in expert-aligned 128-row blocks, 128 x 128 x 128
tiles, TMA loads, the promoted accumulation (``max_num_imprecise_acc = 128``), per-row x per-column
fp32 scales, bf16 output. Variants, each timed alone (median of 10 CUDA-event-timed calls, L2
flushed: ``fusedmoe.bench.timing``):

* ``torch_fill`` / ``torch_copy`` / ``store_only_w*``: writing the output alone (the store floor);
* ``gemm_{store,nostore,tmastore}_s*_w*``: one program per tile with its plain store, without it
  (kept only behind an impossible condition, so the loads and MMAs remain) and with a TMA store;
* ``pn_flat_occ*_w*_s*_tma*``: persistent (``occ`` programs per SM), the tile loop nested over the
  K loop with ``tl.range(..., flatten=True)`` -- the structure ``_moe_gemm._gemm2_kernel`` uses
  with ``PERSISTENT``; ``pf_...``: the same as one hand-flattened (tile, K-block) loop.

The persistent outputs are checked equal to the per-tile kernel's (``max |diff|`` printed). Not a
benchmark of record (that is the harness / ``fusedmoe bench``); the numbers of the eleventh
session (BENCHMARKS.md) came from this code.
"""
import argparse
import json

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from fusedmoe.bench.timing import time_calls


def tus(fn):
    return time_calls([fn], "cuda", method="events", reps=10, budget_s=10.0).median_s * 1e6


@triton.jit
def store_only(c_ptr, N, stride_c, BM: tl.constexpr, BN: tl.constexpr):
    """the output tiles written, nothing computed"""
    pid = tl.program_id(0)
    num_n = tl.cdiv(N, BN)
    pid_m = pid // num_n
    pid_n = pid % num_n
    rows = pid_m * BM + tl.arange(0, BM)
    cols = pid_n * BN + tl.arange(0, BN)
    v = (rows[:, None] + cols[None, :]).to(tl.float32)
    tl.store(c_ptr + rows[:, None].to(tl.int64) * stride_c + cols[None, :], v.to(tl.bfloat16))


@triton.jit
def gemm(a_desc, w_desc, c_ptr, c_desc, a_s_ptr, w_s_ptr, expert_ptr, N, K, stride_c,
         BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr, MODE: tl.constexpr):
    """one program per tile; MODE 0 plain store, 1 no store (an impossible condition keeps the
    loads and MMAs), 2 TMA store"""
    pid = tl.program_id(0)
    num_n = tl.cdiv(N, BN)
    pid_m = pid // num_n
    pid_n = pid % num_n
    e = tl.load(expert_ptr + pid_m)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k in tl.range(0, K, BK, num_stages=STAGES):
        a = a_desc.load([pid_m * BM, k])
        w = w_desc.load([e * N + pid_n * BN, k])
        acc = tl.dot(a, w.T, acc, max_num_imprecise_acc=BK)
    rows = pid_m * BM + tl.arange(0, BM)
    cols = pid_n * BN + tl.arange(0, BN)
    out = acc * tl.load(a_s_ptr + rows)[:, None] * tl.load(w_s_ptr + e * N + cols)[None, :]
    if MODE == 0:  # plain store
        tl.store(c_ptr + rows[:, None].to(tl.int64) * stride_c + cols[None, :], out.to(tl.bfloat16))
    elif MODE == 1:  # no store: the condition never holds
        if tl.sum(out) == 1.2345e30:
            tl.store(c_ptr + rows[:, None].to(tl.int64) * stride_c + cols[None, :], out.to(tl.bfloat16))
    else:  # TMA store
        c_desc.store([pid_m * BM, pid_n * BN], out.to(tl.bfloat16))


@triton.jit
def _tile(t, num_m, num_n, GROUP_M: tl.constexpr):
    width = GROUP_M * num_n
    first_m = (t // width) * GROUP_M
    gsize = tl.minimum(num_m - first_m, GROUP_M)
    return first_m + (t % width) % gsize, (t % width) // gsize


@triton.jit
def _epilogue(acc, c_ptr, c_desc, a_s_ptr, w_s_ptr, e, pid_m, pid_n, N, stride_c, BM: tl.constexpr, BN: tl.constexpr,
              TMA_ST: tl.constexpr):
    """scales, bf16, the plain or the TMA store of one tile"""
    rows = pid_m * BM + tl.arange(0, BM)
    cols = pid_n * BN + tl.arange(0, BN)
    out = acc * tl.load(a_s_ptr + rows)[:, None] * tl.load(w_s_ptr + e * N + cols)[None, :]
    if TMA_ST:
        c_desc.store([pid_m * BM, pid_n * BN], out.to(tl.bfloat16))
    else:
        tl.store(c_ptr + rows[:, None].to(tl.int64) * stride_c + cols[None, :], out.to(tl.bfloat16))


@triton.jit
def gemm_pn(a_desc, w_desc, c_ptr, c_desc, a_s_ptr, w_s_ptr, expert_ptr, num_m, N, K, stride_c,
            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr, GROUP_M: tl.constexpr,
            TMA_ST: tl.constexpr, FLAT: tl.constexpr):
    """persistent, nested loops, flatten=FLAT"""
    num_n = tl.cdiv(N, BN)
    for t in tl.range(tl.program_id(0), num_m * num_n, tl.num_programs(0), flatten=FLAT, num_stages=STAGES):
        pid_m, pid_n = _tile(t, num_m, num_n, GROUP_M)
        e = tl.load(expert_ptr + pid_m)
        acc = tl.zeros([BM, BN], dtype=tl.float32)
        for k in range(0, K, BK):
            a = a_desc.load([pid_m * BM, k])
            w = w_desc.load([e * N + pid_n * BN, k])
            acc = tl.dot(a, w.T, acc, max_num_imprecise_acc=BK)
        _epilogue(acc, c_ptr, c_desc, a_s_ptr, w_s_ptr, e, pid_m, pid_n, N, stride_c, BM, BN, TMA_ST)


@triton.jit
def gemm_pf(a_desc, w_desc, c_ptr, c_desc, a_s_ptr, w_s_ptr, expert_ptr, num_m, N, K, stride_c,
            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr, GROUP_M: tl.constexpr,
            TMA_ST: tl.constexpr):
    """persistent, one flattened loop over (tile, k) (the pre-3.4 Triton persistent tutorial form)"""
    num_n = tl.cdiv(N, BN)
    num_tiles = num_m * num_n
    k_tiles = tl.cdiv(K, BK)
    start = tl.program_id(0)
    nprog = tl.num_programs(0)
    my_tiles = tl.cdiv(num_tiles - start, nprog)
    t = start - nprog
    ki = -1
    pid_m = 0
    pid_n = 0
    e = 0
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for _ in tl.range(0, k_tiles * my_tiles, num_stages=STAGES):
        ki = tl.where(ki == k_tiles - 1, 0, ki + 1)
        if ki == 0:
            t += nprog
            pid_m, pid_n = _tile(t, num_m, num_n, GROUP_M)
            e = tl.load(expert_ptr + pid_m)
        a = a_desc.load([pid_m * BM, ki * BK])
        w = w_desc.load([e * N + pid_n * BN, ki * BK])
        acc = tl.dot(a, w.T, acc, max_num_imprecise_acc=BK)
        if ki == k_tiles - 1:
            _epilogue(acc, c_ptr, c_desc, a_s_ptr, w_s_ptr, e, pid_m, pid_n, N, stride_c, BM, BN, TMA_ST)
            acc = tl.zeros([BM, BN], dtype=tl.float32)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="7168,256,256,8", help="H,I,E,top_k")
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    H, I, E, K = (int(v) for v in a.shape.split(","))
    T, BM, BN, BK = a.tokens, 128, 128, 128
    torch.manual_seed(0)
    ids = torch.rand(T, E, device="cuda").topk(K, dim=1).indices.flatten()
    blocks = (torch.bincount(ids, minlength=E) + BM - 1) // BM
    eob = torch.repeat_interleave(torch.arange(E, device="cuda", dtype=torch.int32), blocks)
    nb = int(blocks.sum())
    fp8 = torch.float8_e4m3fn
    N, Kd = H, I
    A = (torch.randn(nb * BM, Kd, device="cuda") * 2).to(fp8)
    W = (torch.randn(E * N, Kd, device="cuda") * 2).to(fp8)
    sa = torch.rand(nb * BM, device="cuda") * 0.01 + 0.005
    sw = torch.rand(E * N, device="cuda") * 0.01 + 0.005
    c = torch.empty(nb * BM, N, device="cuda", dtype=torch.bfloat16)
    gb = c.numel() * 2 / 1e9
    tiles = nb * triton.cdiv(N, BN)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    ad, wd = TensorDescriptor.from_tensor(A, [BM, BK]), TensorDescriptor.from_tensor(W, [BN, BK])
    cd = TensorDescriptor.from_tensor(c, [BM, BN])
    res = {"torch_fill": tus(lambda: c.fill_(1.0))}
    src = torch.empty_like(c)
    res["torch_copy"] = tus(lambda: c.copy_(src))
    del src
    for w in (4, 8):
        res[f"store_only_w{w}"] = tus(lambda: store_only[(tiles,)](c, N, c.stride(0), BM=BM, BN=BN, num_warps=w))
    for st in (2, 3):
        for mode, name in ((0, "store"), (1, "nostore"), (2, "tmastore")):
            for w in (4, 8):
                res[f"gemm_{name}_s{st}_w{w}"] = tus(lambda: gemm[(tiles,)](
                    ad, wd, c, cd, sa, sw, eob, N, Kd, c.stride(0), BM=BM, BN=BN, BK=BK, STAGES=st, MODE=mode,
                    num_warps=w, num_stages=st))
    gemm[(tiles,)](ad, wd, c, cd, sa, sw, eob, N, Kd, c.stride(0), BM=BM, BN=BN, BK=BK, STAGES=3, MODE=0,
                   num_warps=4, num_stages=3)
    ref = c.clone()
    for occ in (1, 2):
        grid = (min(tiles, sms * occ),)
        for w in (4, 8):
            for st in (3, 4):
                for tma_st in (0, 1):
                    for name, kern, kw in (("pn_flat", gemm_pn, {"FLAT": True}), ("pf", gemm_pf, {})):
                        fn = lambda: kern[grid](ad, wd, c, cd, sa, sw, eob, nb, N, Kd, c.stride(0), BM=BM, BN=BN,  # noqa: E731
                                                BK=BK, STAGES=st, GROUP_M=8, TMA_ST=tma_st, num_warps=w, **kw)
                        c.zero_()
                        fn()
                        torch.cuda.synchronize()
                        err = float((c.float() - ref.float()).abs().max())
                        res[f"{name}_occ{occ}_w{w}_s{st}_tma{tma_st}"] = (tus(fn), err)
    print(f"H={H} I={I} E={E} top_k={K} T={T}: output {gb:.2f} GB, {tiles} tiles, {2 * T * K * N * Kd / 1e9:.0f} GFLOP")
    for k, v in res.items():
        us, err = v if isinstance(v, tuple) else (v, None)
        print(f"{k:30s} {us:9.1f} us  output {gb / us * 1e3:5.2f} TB/s" + ("" if err is None else f"  max|diff| {err:g}"))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(H=H, I=I, E=E, top_k=K, T=T, res=res), f)


if __name__ == "__main__":
    main()
