"""Probe (H200): the Gluon warp-specialized promoted FP8 GEMM (``gl_fp8.py``) per tile and persistent,
against a plain Triton TMA kernel with the same promotion, on the harness's prefill GEMM shapes.

    PYTHONPATH=src python3 benchmarks/gluon/gluon_fp8_probe.py [--shapes dsv3,qwen3_30b_a3b] [--tokens 8192] \
        [--variants triton,gluon,gluon_p] [--stages 4] [--timeout 25] [--json out.jsonl]

Variants: ``triton`` (plain TMA kernel, 8 warps), ``triton_ws`` (the same with Triton's
``warp_specialize=True``: it hung on the H200 with Triton 3.6.0), ``gluon`` (one tile per program),
``gluon_p`` (persistent), ``gluon_g1`` (gated GEMM1 of a SwiGLU shape, persistent, with the
activation in the epilogue: ``gl_fp8_gemm(..., GATED=True)``, bf16 [rows, I] out; the RMS error is against
silu(gate) * up in fp32 on the same FP8 operands; gemm1 of gated shapes only).

Every point runs in its own process under ``--timeout`` seconds (a deadlocked warp-specialized
kernel then costs only that; Triton 3.6's own ``warp_specialize=True`` loops hung on the H200).
Data: uniform random top-k, rows in expert-aligned 128-row blocks, random E4M3 operands and fp32
scales; one GEMM (gemm1: N = 2I or I, K = H; gemm2: N = H, K = I). Prints µs, TF/s (useful rows
only) and the RMS error against fp32 on the same FP8 operands (3 row blocks). Not a benchmark of
record: it times one GEMM, not a layer.
"""

import argparse
import json
import os
import subprocess
import sys

FP8_NAME = "float8_e4m3fn"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from grouped_mm_probe import SHAPES  # noqa: E402  (the harness's prefill shapes, by preset)

BM, BN, BK = 128, 128, 128


def _plain_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def tma_fp8_gemm(a_desc, w_desc, c_ptr, a_s_ptr, w_s_ptr, expert_ptr, N, K, stride_c,
                     BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr,
                     WS: tl.constexpr):
        """The baseline: one 128 x BN tile per program, TMA loads, Triton's software pipeline,
        the promotion by ``max_num_imprecise_acc = BK``; WS: Triton's own Hopper warp
        specialization of the loop (specializes only at 4 warps; hung on the H200 with 3.6.0)."""
        pid = tl.program_id(0)
        num_n = tl.cdiv(N, BN)
        pid_m = pid // num_n
        pid_n = pid % num_n
        e = tl.load(expert_ptr + pid_m)
        acc = tl.zeros([BM, BN], dtype=tl.float32)
        for k in tl.range(0, K, BK, num_stages=STAGES, warp_specialize=WS):
            a = a_desc.load([pid_m * BM, k])
            w = w_desc.load([e * N + pid_n * BN, k])
            acc = tl.dot(a, w.T, acc, max_num_imprecise_acc=BK)
        rows = pid_m * BM + tl.arange(0, BM)
        cols = pid_n * BN + tl.arange(0, BN)
        out = acc * tl.load(a_s_ptr + rows)[:, None] * tl.load(w_s_ptr + e * N + cols, mask=cols < N)[None, :]
        tl.store(c_ptr + rows[:, None].to(tl.int64) * stride_c + cols[None, :], out.to(tl.bfloat16),
                 mask=cols[None, :] < N)

    return tma_fp8_gemm


def _data(shape, T, gemm):
    import torch

    H, I, E, K, gated = SHAPES[shape]
    N, Kd = ((2 if gated else 1) * I, H) if gemm == "gemm1" else (H, I)
    torch.manual_seed(0)
    ids = torch.rand(T, E, device="cuda").topk(K, dim=1).indices.flatten()
    blocks = (torch.bincount(ids, minlength=E) + BM - 1) // BM
    eob = torch.repeat_interleave(torch.arange(E, device="cuda", dtype=torch.int32), blocks)
    nb = int(blocks.sum())
    fp8 = getattr(torch, FP8_NAME)
    a = (torch.randn(nb * BM, Kd, device="cuda") * 2).to(fp8)
    w = (torch.randn(E * N, Kd, device="cuda") * 2).to(fp8)
    sa = torch.rand(nb * BM, device="cuda") * 0.01 + 0.005
    sw = torch.rand(E * N, device="cuda") * 0.01 + 0.005
    return dict(N=N, K=Kd, a=a, w=w, sa=sa, sw=sw, eob=eob, nb=nb, slots=T * K)


def _time_us(fn) -> float:
    """Median of 10 CUDA-event-timed calls, L2 flushed before each (fusedmoe.bench.timing)."""
    from fusedmoe.bench.timing import time_calls

    return time_calls([fn], "cuda", method="events", reps=10, budget_s=10.0).median_s * 1e6


def run_one(shape, T, gemm, variant, stages):
    import torch
    import triton

    d = _data(shape, T, gemm)
    N, K, a, w, nb = d["N"], d["K"], d["a"], d["w"], d["nb"]
    gated = variant == "gluon_g1"
    if gated and (gemm != "gemm1" or not SHAPES[shape][4]):
        raise ValueError("gluon_g1 is the gated GEMM1: gemm1 of a gated shape")
    n_out = N // 2 if gated else N  # gated: the intermediate's I columns
    c = torch.empty(a.shape[0], n_out, device="cuda", dtype=torch.bfloat16)
    tiles = nb * triton.cdiv(N, BN)
    if variant in ("triton", "triton_ws"):
        from triton.tools.tensor_descriptor import TensorDescriptor

        k = _plain_kernel()
        ad, wd = TensorDescriptor.from_tensor(a, [BM, BK]), TensorDescriptor.from_tensor(w, [BN, BK])
        f = lambda: k[(tiles,)](ad, wd, c, d["sa"], d["sw"], d["eob"], N, K, c.stride(0), BM=BM, BN=BN, BK=BK,
                                STAGES=stages, WS=variant == "triton_ws", num_warps=4 if variant == "triton_ws" else 8,
                                num_stages=stages)
    else:
        from triton.experimental.gluon import language as gl
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import gl_fp8

        bn = 64 if gated else BN  # gated: gate and up tiles of 64 columns
        tiles = nb * triton.cdiv(n_out, bn)
        ad = TensorDescriptor.from_tensor(a, [BM // 2, BK], gl.NVMMASharedLayout.get_default_for([BM // 2, BK], gl.float8e4nv))
        wd = TensorDescriptor.from_tensor(w, [bn, BK], gl.NVMMASharedLayout.get_default_for([bn, BK], gl.float8e4nv))
        persistent = variant in ("gluon_p", "gluon_g1")
        grid = (min(torch.cuda.get_device_properties(0).multi_processor_count, tiles) if persistent else tiles,)
        f = lambda: gl_fp8.gl_fp8_gemm[grid](ad, wd, c, d["sa"], d["sw"], d["eob"], nb, n_out, K, c.stride(0), BN=bn,  # noqa: E731
                                             BK=BK, STAGES=stages, GROUP_M=8 if persistent else 1, GATED=gated,
                                             num_warps=4)
    t = _time_us(f)
    errs = []
    for blk in (0, nb // 2, nb - 1):
        e0, r0 = int(d["eob"][blk]), blk * BM
        ref = (a[r0:r0 + BM].float() * d["sa"][r0:r0 + BM, None]) @ (
            w[e0 * N:(e0 + 1) * N].float() * d["sw"][e0 * N:(e0 + 1) * N, None]).T
        if gated:
            ref = torch.nn.functional.silu(ref[:, :n_out]) * ref[:, n_out:]
        errs.append(((c[r0:r0 + BM].float() - ref).pow(2).mean().sqrt() / ref.pow(2).mean().sqrt()).item())
    return dict(shape=shape, T=T, gemm=gemm, variant=variant, stages=stages, us=round(t, 1),
                tflops=round(2.0 * d["slots"] * N * K / t * 1e-6), rms=max(errs))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--tokens", default="2048,8192")
    ap.add_argument("--gemms", default="gemm1,gemm2")
    ap.add_argument("--variants", default="triton,gluon,gluon_p")
    ap.add_argument("--stages", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=25.0)
    ap.add_argument("--json", default=None, help="append one JSON line per point")
    ap.add_argument("--one", nargs=5, metavar=("SHAPE", "T", "GEMM", "VARIANT", "STAGES"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        s, T, g, v, st = a.one
        print(json.dumps(run_one(s, int(T), g, v, int(st))), flush=True)
        return
    for shape in a.shapes.split(","):
        for T in (int(t) for t in a.tokens.split(",")):
            for gemm in a.gemms.split(","):
                for v in a.variants.split(","):
                    cmd = [sys.executable, os.path.abspath(__file__), "--one", shape, str(T), gemm, v, str(a.stages)]
                    try:
                        p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
                        lines = p.stdout.strip().splitlines()
                        rec = json.loads(lines[-1]) if p.returncode == 0 and lines else dict(
                            shape=shape, T=T, gemm=gemm, variant=v, error=p.stderr[-400:])
                    except subprocess.TimeoutExpired:
                        rec = dict(shape=shape, T=T, gemm=gemm, variant=v, error=f"timeout {a.timeout} s (hang?)")
                    print(f"{shape:14s} {T:5d} {gemm} {v:8s} " + (
                        f"{rec['us']:9.1f} us {rec['tflops']:5d} TF/s rms {rec['rms']:.1e}" if "us" in rec
                        else rec["error"].strip().splitlines()[-1] if rec["error"].strip() else "error"), flush=True)
                    if a.json:
                        with open(a.json, "a") as f:
                            f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
