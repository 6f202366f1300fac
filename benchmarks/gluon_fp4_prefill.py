"""Prototype (not library code): a warp-specialized Gluon grouped GEMM with MXFP4 weights and BF16 activations
for prefill, measured against dense BF16 / the roofline -- does overlapping the FP4 dequantization with the
other warpgroup's wgmma lift W4A16 prefill toward the 60 % of the BF16 peak that issue 4 asks for?

    PYTHONPATH=src python3 benchmarks/gluon_fp4_prefill.py [--experts 128 --rows 128 --n 2880 --k 2880]

Why: the Triton FP4 prefill GEMMs run at 34-44 % of the BF16 peak (H200, 4096 tokens). Every K step of a
Triton program converts its FP4 tile, then runs its wgmma, then waits for it: the whole CTA passes one
barrier a step, so the conversion and the tensor cores never overlap.

Structure (swap-AB: the weights are the MMA's M side, the tokens its N side):
* a TMA loader warp fills a STAGES-deep ring with, per 64-wide K step, the [128 tokens, 64] BF16 activation
  tile (rows already in block-padded slot order, as ``_align._gather_slot_rows_kernel`` makes them) and the
  [128 weight rows, 32 bytes] MXFP4 tile (linear ``[E * N, K / 2]`` bytes, low nibble first);
* two consumer warpgroups each own 64 of the 128 weight rows: per step they load their packed bytes from the
  ring, convert them with the step's UE8M0 scales to BF16 (exact: <= 2 + 1 significant bits times a power of
  two), store the [64, 64] tile into one of two shared buffers, and issue an asynchronous wgmma
  (A = that tile, B = the activation tile, transposed view); ``warpgroup_mma_wait(1)`` keeps one wgmma in
  flight, so a warpgroup converts step k + 1 while its step k multiplies, and the other warpgroup's work
  interleaves with both;
* epilogue: the [64 weight rows, 128 tokens] fp32 accumulator, rounded to BF16, stored transposed at
  ``out[token row, n]``.

The check compares with ``x @ dequantize(W).T`` in fp32 per expert block.
"""

import argparse

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

from fusedmoe.kernels import _blockscaled as _bs
from fusedmoe.kernels._moe_gemm import _tile_ids


@gluon.jit
def _loader(x_desc, w_desc, x_bufs, w_bufs, ready, empty, block_expert_ptr, num_m, N, K, BN: gl.constexpr,
            BK: gl.constexpr, STAGES: gl.constexpr, GROUP_M: gl.constexpr):
    BT: gl.constexpr = x_desc.block_type.shape[0]
    nbytes: gl.constexpr = x_desc.block_type.nbytes + w_desc.block_type.nbytes
    num_n = gl.cdiv(N, BN)
    n_k = gl.cdiv(K, BK)
    it = 0
    for t in range(gl.program_id(0), num_m * num_n, gl.num_programs(0)):
        pid_m, pid_n = _tile_ids(t, num_m, num_n, GROUP_M)
        e = gl.load(block_expert_ptr + pid_m)
        for kk in range(n_k):
            s = it % STAGES
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
            bar = ready.index(s)
            mbarrier.expect(bar, nbytes)
            tma.async_copy_global_to_shared(x_desc, [pid_m * BT, kk * BK], bar, x_bufs.index(s))
            tma.async_copy_global_to_shared(w_desc, [e * N + pid_n * BN, kk * w_desc.block_type.shape[1]], bar,
                                            w_bufs.index(s))
            it += 1


@gluon.jit
def _consumer(x_bufs, w_bufs, d_bufs, ready, empty, out_ptr, s_ptr, block_expert_ptr, num_m, N, K, stride_sn,
              stride_om, HALF: gl.constexpr, BT: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr,
              STAGES: gl.constexpr, GROUP_M: gl.constexpr, CVT: gl.constexpr):
    HN: gl.constexpr = BN // 2  # this warpgroup's weight rows
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BT, 16])
    # packed values as [HN, BK/16, 8 bytes] (CVT 0) or [HN, BK/16, 4 int16 words] (CVT 1): a thread holds 16 values of
    # one row, all in one 32-wide scale block (bytes 16 j .. 16 j + 15 of a step are block j)
    BQ: gl.constexpr = BK // 16
    PV: gl.constexpr = 8 if CVT == 0 else 4
    wl: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, 1, PV], threads_per_warp=[8, BQ, 32 // (8 * BQ)],
                                        warps_per_cta=[4, 1, 1], order=[2, 1, 0])
    sl: gl.constexpr = gl.SliceLayout(2, wl)
    ol: gl.constexpr = gl.BlockedLayout(size_per_thread=[8, 1], threads_per_warp=[8, 4], warps_per_cta=[1, 4],
                                        order=[0, 1])
    num_n = gl.cdiv(N, BN)
    n_k = gl.cdiv(K, BK)
    r = gl.arange(0, HN, layout=gl.SliceLayout(1, sl))
    j = gl.arange(0, BQ, layout=gl.SliceLayout(0, sl))
    it = 0
    for t in range(gl.program_id(0), num_m * num_n, gl.num_programs(0)):
        pid_m, pid_n = _tile_ids(t, num_m, num_n, GROUP_M)
        e = gl.load(block_expert_ptr + pid_m)
        wrow = (e * N + pid_n * BN + HALF * HN + r).to(gl.int64)
        # a byte's scale: block j // 2 of the step; rows past N read the next expert's (never stored)
        s_rows = s_ptr + wrow[:, None] * stride_sn + (j // 2)[None, :]
        acc = gl.zeros((HN, BT), dtype=gl.float32, layout=acc_l)
        for kk in range(n_k):
            s = it % STAGES
            sc = gl.load(s_rows + kk * (BK // 32)).to(gl.int32)  # UE8M0 codes [HN, BQ] (L1-cached)
            mbarrier.wait(ready.index(s), (it // STAGES) & 1)
            if CVT == 0:
                b = w_bufs.index(s).reshape([BN, BQ, 8]).slice(HALF * HN, HN).load(wl).to(gl.int32)
                # E2M1 -> fp16 bits (sign to bit 15, magnitude to bits 9..11): the value times 2^-14; the scale
                # 2^(e - 127) times 2^14 as fp32 (exact for codes 1..240); the product exact in bf16
                lo = (((b & 0x8) << 12) | ((b & 0x7) << 9)).to(gl.int16).to(gl.float16, bitcast=True)
                hi = (((b & 0x80) << 8) | ((b & 0x70) << 5)).to(gl.int16).to(gl.float16, bitcast=True)
                f = ((sc + 14) << 23).to(gl.float32, bitcast=True)[:, :, None]
                v_lo = (lo.to(gl.float32) * f).to(gl.bfloat16)
                v_hi = (hi.to(gl.float32) * f).to(gl.bfloat16)
                v = gl.reshape(gl.join(v_lo, v_hi), [HN, BK])  # k = 2 * byte + nibble
            else:
                # the library's nibble-aligned converter (inline PTX on 16-bit words: value s of word i is K 4 i + s),
                # the scale 2^(e - 127) multiplied in bf16 (exact)
                w = w_bufs.index(s).reshape([BN, BQ, 4]).slice(HALF * HN, HN).load(wl)
                n0, n1, n2, n3 = _bs._e2m1x4_bf16_nib(w, CVT == 1, False)
                if CVT == 1:
                    f = _bs._ue8m0_to_bf16(sc)[:, :, None]
                else:  # CVT 2, the library's MX fold: e2m1 * 2^-126 times 2^(e - 17); the other 2^16 on the accumulator
                    f = ((sc + 110) << 7).to(gl.int16).to(gl.bfloat16, bitcast=True)[:, :, None]
                v = gl.join(gl.join(n0 * f, n1 * f), gl.join(n2 * f, n3 * f))  # [HN, BQ, 4, s & 1, s >> 1]
                v = gl.reshape(gl.permute(v, [0, 1, 2, 4, 3]), [HN, BK])
            d = d_bufs.index(it % 2)
            d.store(v)
            fence_async_shared()
            gl.thread_barrier()
            acc = warpgroup_mma(d, x_bufs.index(s).permute((1, 0)), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))
            if kk > 0:  # the step before has retired: its ring slot is free (its d buffer is reused next step)
                mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES), count=1)
            it += 1
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES), count=1)
        if CVT == 2:
            acc = acc * 65536.0
        # epilogue: acc[n, token] -> out[token row, n], 8 consecutive n a thread (16-byte stores)
        o = gl.convert_layout(acc.to(gl.bfloat16), ol)
        n = pid_n * BN + HALF * HN + gl.arange(0, HN, layout=gl.SliceLayout(1, ol))
        m = pid_m * BT + gl.arange(0, BT, layout=gl.SliceLayout(0, ol))
        gl.store(out_ptr + m.to(gl.int64)[None, :] * stride_om + n[:, None], o, mask=(n < N)[:, None])


@gluon.jit
def fp4_prefill_kernel(x_desc, w_desc, out_ptr, s_ptr, block_expert_ptr, num_m, N, K, stride_sn, stride_om,
                       BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, GROUP_M: gl.constexpr,
                       CVT: gl.constexpr = 0):
    BT: gl.constexpr = x_desc.block_type.shape[0]
    x_bufs = gl.allocate_shared_memory(x_desc.dtype, [STAGES] + x_desc.block_type.shape, x_desc.layout)
    w_bufs = gl.allocate_shared_memory(w_desc.dtype, [STAGES] + w_desc.block_type.shape, w_desc.layout)
    dl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BN // 2, BK], gl.bfloat16)
    d0 = gl.allocate_shared_memory(gl.bfloat16, [2, BN // 2, BK], dl)
    d1 = gl.allocate_shared_memory(gl.bfloat16, [2, BN // 2, BK], dl)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=2)
    gl.warp_specialize([
        (_consumer, (x_bufs, w_bufs, d0, ready, empty, out_ptr, s_ptr, block_expert_ptr, num_m, N, K, stride_sn,
                     stride_om, 0, BT, BN, BK, STAGES, GROUP_M, CVT)),
        (_consumer, (x_bufs, w_bufs, d1, ready, empty, out_ptr, s_ptr, block_expert_ptr, num_m, N, K, stride_sn,
                     stride_om, 1, BT, BN, BK, STAGES, GROUP_M, CVT)),
        (_loader, (x_desc, w_desc, x_bufs, w_bufs, ready, empty, block_expert_ptr, num_m, N, K, BN, BK, STAGES,
                   GROUP_M)),
    ], [4, 1], [232, 40])


def descriptors(x: torch.Tensor, w_bytes: torch.Tensor, BT: int, BN: int, BK: int, cvt: int):
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    xl = gl.NVMMASharedLayout.get_default_for([BT, BK], gl.bfloat16)
    if cvt == 0:  # bytes (CVT 1 / 2: the same bytes as 16-bit words)
        wl = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=8, rank=2)
        return TensorDescriptor.from_tensor(x, [BT, BK], xl), TensorDescriptor.from_tensor(w_bytes, [BN, BK // 2], wl)
    wl = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=16, rank=2)  # 16-bit words
    return (TensorDescriptor.from_tensor(x, [BT, BK], xl),
            TensorDescriptor.from_tensor(w_bytes.view(torch.int16), [BN, BK // 4], wl))


def run(x, w_bytes, scales, block_expert, N, K, BT=128, BN=128, BK=64, STAGES=4, GROUP_M=8, CVT=1, sms=None):
    x_desc, w_desc = descriptors(x, w_bytes, BT, BN, BK, CVT)
    out = torch.empty(x.shape[0], N, dtype=torch.bfloat16, device=x.device)
    num_m = x.shape[0] // BT
    tiles = num_m * triton.cdiv(N, BN)
    sms = sms or torch.cuda.get_device_properties(x.device).multi_processor_count
    fp4_prefill_kernel[(min(tiles, sms),)](x_desc, w_desc, out, scales, block_expert, num_m, N, K, scales.stride(0),
                                           out.stride(0), BN=BN, BK=BK, STAGES=STAGES, GROUP_M=GROUP_M, CVT=CVT,
                                           num_warps=4)
    return out


def main():
    from fusedmoe.config import Format
    from fusedmoe.formats import dequantize, quantize

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--experts", type=int, default=128)
    ap.add_argument("--rows", type=int, default=128, help="token rows per expert (a multiple of --bt)")
    ap.add_argument("--n", type=int, default=2880)
    ap.add_argument("--k", type=int, default=2880)
    ap.add_argument("--stages", default="3,4")
    ap.add_argument("--bt", type=int, default=128, help="token rows of a tile: the wgmma's N (128 or 256)")
    ap.add_argument("--cvt", default="0,1,2", help="0: portable integer conversion, 1: the library's PTX converter, "
                    "2: its MX fold (the 2^126 restore moved to the scale and the accumulator)")
    ap.add_argument("--reps", type=int, default=50)
    a = ap.parse_args()
    E, R, N, K = a.experts, a.rows, a.n, a.k
    dev = torch.device("cuda")
    torch.manual_seed(0)
    q = quantize(torch.randn(E, N, K, device=dev) * 0.05, Format.MXFP4)
    w_bytes = q.data.reshape(E * N, K // 2).contiguous()
    scales = q.scale.reshape(E * N, K // 32).contiguous()
    x = torch.randn(E * R, K, device=dev).to(torch.bfloat16)
    BT = a.bt
    block_expert = torch.arange(E, device=dev, dtype=torch.int32).repeat_interleave(R // BT)
    wd = dequantize(q).float()
    flops = 2.0 * E * R * N * K
    for cvt, st in ((c, int(s)) for c in (int(v) for v in a.cvt.split(",")) for s in a.stages.split(",")):
        out = run(x, w_bytes, scales, block_expert, N, K, BT=BT, STAGES=st, CVT=cvt)
        torch.cuda.synchronize()
        err = 0.0
        for e in range(0, E, max(1, E // 8)):
            ref = x[e * R:(e + 1) * R].float() @ wd[e].T
            err = max(err, ((out[e * R:(e + 1) * R].float() - ref).norm() / ref.norm()).item())
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(10):
                run(x, w_bytes, scales, block_expert, N, K, BT=BT, STAGES=st, CVT=cvt)
        g.replay()
        torch.cuda.synchronize()
        ts = []
        for _ in range(a.reps // 10 + 3):
            s0, s1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s0.record()
            g.replay()
            s1.record()
            torch.cuda.synchronize()
            ts.append(s0.elapsed_time(s1) * 100.0)  # us per launch
        t = sorted(ts)[len(ts) // 2]
        print(f"gluon fp4 prefill E={E} rows={R} N={N} K={K} BT={BT} cvt={cvt} stages={st}: {t:8.1f} us  {flops / t / 1e6:6.1f} TF/s"
              f"  rel err {err:.2e}", flush=True)
    # dense BF16 reference point: the same FLOPs as one torch.matmul of [E*R, K] x [K, N]
    wdense = torch.randn(N, K, device=dev).to(torch.bfloat16)
    mm = lambda: x @ wdense.T  # noqa: E731
    mm()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(10):
            mm()
    g.replay()
    torch.cuda.synchronize()
    s0, s1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s0.record()
    g.replay()
    s1.record()
    torch.cuda.synchronize()
    t = s0.elapsed_time(s1) * 100.0
    print(f"torch bf16 matmul [{E * R}, {K}] x [{K}, {N}]: {t:8.1f} us  {flops / t / 1e6:6.1f} TF/s", flush=True)


if __name__ == "__main__":
    main()
