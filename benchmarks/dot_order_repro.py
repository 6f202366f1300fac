"""Standalone repro attempt of the dot-order activations' 8-warp failure (H200), without FP4.

The excluded config (``triton_moe._dot_order_ok``: a swapped GEMM1 of 8 warps) gives wrong results on every run
(twenty-sixth session, ``benchmarks/dot_order_probe.py --allow-racy``). The 4-warp config with the same tile is
correct. Its TTGIR matches the 4-warp one op for op: a [128, 64] token tile pipelined by cp.async, read in place as
wgmma's B operand through ``memdesc_trans``, with a register A operand of 128 weight rows. The only change is that
two warpgroups split those rows (the joined gate / up tile). This kernel keeps that structure with bf16 weights:
an elementwise op keeps A in registers, and B is the transposed cp.async tile. It compares against torch at 4 and
8 warps, over ``--runs`` launches each: if 8 warps fail here too, it is a Triton 3.6 lowering bug independent of
our FP4 code.

    PYTHONPATH=src python3 benchmarks/dot_order_repro.py [--runs 20] [--k 2880]
    PYTHONPATH=src python3 benchmarks/dot_order_repro.py --compile-only   # CPU: sm_90 TTGIR checks, no GPU
"""
import argparse

import torch
import triton
import triton.language as tl


@triton.jit
def _repro_kernel(w_ptr, x_ptr, out_ptr, K, w_scale, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                  SCALE_W: tl.constexpr):
    """out[BM, BN] = (w * w_scale) @ x^T over K: w [BM, K] bf16 made a register operand by an elementwise multiply,
    x [BN, K] bf16 loaded by the pipeline and transposed in shared memory (wgmma's B in place)."""
    pid = tl.program_id(0)
    rows = tl.arange(0, BM)
    toks = pid * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k in range(0, K, BK):
        w = tl.load(w_ptr + rows[:, None] * K + (k + offs_k)[None, :])
        if SCALE_W:
            w = (w.to(tl.float32) * w_scale).to(tl.bfloat16)  # computed in registers, as the converted FP4 tile
        x = tl.load(x_ptr + toks[:, None] * K + (k + offs_k)[None, :])
        acc = tl.dot(w.to(tl.bfloat16), tl.trans(x), acc)
    tl.store(out_ptr + rows[:, None] * (tl.num_programs(0) * BN) + toks[None, :], acc)


def _compile_only() -> None:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    for nw in (4, 8):
        src = ASTSource(_repro_kernel, dict(w_ptr="*bf16", x_ptr="*bf16", out_ptr="*fp32", K="i32", w_scale="fp32", BM="constexpr",
                                            BN="constexpr", BK="constexpr", SCALE_W="constexpr"),
                        constexprs=dict(BM=128, BN=128, BK=64, SCALE_W=True),
                        attrs={(0,): [["tt.divisibility", 16]], (1,): [["tt.divisibility", 16]],
                               (2,): [["tt.divisibility", 16]], (3,): [["tt.divisibility", 16]]})
        k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=nw, num_stages=4))
        ir = k.asm["ttgir"]
        mma = [ln for ln in ir.splitlines() if ln.startswith("#mma")]
        print(f"num_warps {nw}: {mma[0] if mma else 'no wgmma layout'}", flush=True)
        print(f"num_warps {nw}: warp_group_dot {ir.count('ttng.warp_group_dot ')}, memdesc_trans "
              f"{ir.count('ttg.memdesc_trans')}, async_copy {ir.count('async_copy_global_to_local')}, "
              f"register A {'dot_op<{opIdx = 0' in ir}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--k", type=int, default=2880)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--compile-only", action="store_true")
    a = ap.parse_args()
    if a.compile_only:
        _compile_only()
        return
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    w = torch.randn(128, a.k, generator=g, device=dev).to(torch.bfloat16)
    x = torch.randn(a.tokens, a.k, generator=g, device=dev).to(torch.bfloat16)
    ref = w.float() @ x.float().T
    for nw in (4, 8):
        for scale_w in (True, False):
            bad = nan = 0
            worst = 0.0
            first = None
            differ = 0
            for _ in range(a.runs):
                out = torch.empty(128, a.tokens, device=dev)
                _repro_kernel[(a.tokens // 128,)](w, x, out, a.k, 1.0, BM=128, BN=128, BK=64, SCALE_W=scale_w,
                                                   num_warps=nw, num_stages=4)
                torch.cuda.synchronize()
                err = ((out - ref).abs().max() / ref.abs().max()).item()
                nan += bool(torch.isnan(out).any())
                bad += not err < 1e-2
                worst = max(worst, err) if err == err else worst
                if first is None:
                    first = out
                else:
                    differ += not torch.equal(out, first)
            print(f"num_warps {nw} register A {scale_w}: {bad}/{a.runs} beyond 1e-2 of the reference, {nan} with NaN, "
                  f"{differ}/{a.runs - 1} differ from the first run, worst max_rel {worst:.2e}", flush=True)


if __name__ == "__main__":
    main()
