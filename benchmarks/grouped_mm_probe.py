"""Probe: torch's CUTLASS grouped GEMMs (``torch._scaled_grouped_mm`` FP8 row-wise, ``torch._grouped_mm``
BF16) on the MoE prefill GEMM shapes, for the decision whether the triton backend's compute-bound
prefill should call them (issue 3: FP8 per tensor / channel prefill is 0.66-0.95x SGLang's kernel
with our promoted accumulation).

    PYTHONPATH=src python3 benchmarks/grouped_mm_probe.py --tokens 2048,8192 [--json out.json]

Per (shape, T, GEMM): the time of one grouped GEMM over the T*K expert-sorted rows (uniform random
top-k), FP8 with slow (promoted) and fast accumulation and BF16, as µs and TF/s; and, once per FP8
GEMM shape, the RMS error relative to the fp32 product of the same FP8 operands. Not a benchmark of
record: it measures only the GEMMs, not a whole layer.
"""

import argparse
import json

import torch

from fusedmoe.bench.presets import get_preset
from fusedmoe.bench.timing import time_calls

FP8 = torch.float8_e4m3fn
# the shared harness's model shapes (../shared/bench/peers) by their presets: (H, I, E, top_k, gated)
_PRESETS = {"dsv3": "deepseek-v3", "dsv3_tp8": "deepseek-v3-tp8", "qwen3_30b_a3b": "qwen3-30b-a3b",
            "minimax_m2.5": "minimax-m2", "mixtral": "mixtral-8x7b", "nemotron": "nemotron-nano"}
SHAPES = {name: (lambda p: (p.hidden, p.intermediate, p.experts, p.top_k, p.activation.is_gated))(get_preset(preset))
          for name, preset in _PRESETS.items()}


def _time(fn):
    """Median µs of 20 CUDA-event-timed calls, L2 flushed before each (fusedmoe.bench.timing)."""
    return time_calls([fn], "cuda", method="events", reps=20, budget_s=10.0).median_s * 1e6


def _rms_rel(out, ref):
    return ((out.float() - ref).pow(2).mean().sqrt() / ref.pow(2).mean().sqrt()).item()


def probe(name, T, dev, check):
    H, I, E, K, gated = SHAPES[name]
    S = T * K
    ids = torch.rand(T, E, device=dev).topk(K, dim=1).indices.flatten()
    counts = torch.bincount(ids, minlength=E)
    offs = torch.cumsum(counts, 0).to(torch.int32)
    rows = []
    for gemm, (N, Kd) in (("gemm1", ((2 if gated else 1) * I, H)), ("gemm2", (H, I))):
        a = (torch.randn(S, Kd, device=dev) * 2).to(FP8)
        sa = torch.rand(S, device=dev) * 0.01 + 0.005
        w = (torch.randn(E, N, Kd, device=dev) * 2).to(FP8)
        sb = torch.rand(E, N, device=dev) * 0.01 + 0.005
        wt = w.transpose(1, 2)  # [E, Kd, N], column-major: what _scaled_grouped_mm takes
        flops = 2.0 * S * N * Kd
        rec = dict(shape=name, tokens=T, gemm=gemm, N=N, K=Kd, rows=S)
        for acc in ("slow", "fast"):
            f = lambda: torch._scaled_grouped_mm(a, wt, sa, sb, offs=offs, out_dtype=torch.bfloat16,
                                                 use_fast_accum=acc == "fast")
            t = _time(f)
            rec[f"fp8_{acc}_us"] = t
            rec[f"fp8_{acc}_tflops"] = flops / t * 1e-6
            if check:
                out = f()
                # fp32 reference on the first 4 experts with rows
                errs = []
                lo = 0
                for e in range(E):
                    hi = int(offs[e])
                    if hi > lo and len(errs) < 4:
                        ref = (a[lo:hi].float() * sa[lo:hi, None]) @ (w[e].float() * sb[e][:, None]).T
                        errs.append(_rms_rel(out[lo:hi], ref))
                    lo = hi
                rec[f"fp8_{acc}_rms_rel"] = max(errs)
        ab = a.to(torch.bfloat16)
        wbt = w.to(torch.bfloat16).transpose(1, 2)
        t = _time(lambda: torch._grouped_mm(ab, wbt, offs=offs))
        rec["bf16_us"] = t
        rec["bf16_tflops"] = flops / t * 1e-6
        rows.append(rec)
        del a, w, wt, ab, wbt
        torch.cuda.empty_cache()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--tokens", default="2048,8192")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    dev = torch.device("cuda")
    out = []
    print(f"{'shape':14s} {'T':>5s} {'gemm':5s} {'N':>6s} {'K':>6s} | {'fp8 slow us':>11s} {'TF/s':>6s} "
          f"{'rms':>8s} | {'fp8 fast us':>11s} {'TF/s':>6s} {'rms':>8s} | {'bf16 us':>9s} {'TF/s':>6s}")
    for name in a.shapes.split(","):
        for i, T in enumerate(int(t) for t in a.tokens.split(",")):
            for r in probe(name, T, dev, check=i == 0):
                out.append(r)
                print(f"{r['shape']:14s} {T:5d} {r['gemm']:5s} {r['N']:6d} {r['K']:6d} | "
                      f"{r['fp8_slow_us']:11.1f} {r['fp8_slow_tflops']:6.0f} {r.get('fp8_slow_rms_rel', float('nan')):8.1e} | "
                      f"{r['fp8_fast_us']:11.1f} {r['fp8_fast_tflops']:6.0f} {r.get('fp8_fast_rms_rel', float('nan')):8.1e} | "
                      f"{r['bf16_us']:9.1f} {r['bf16_tflops']:6.0f}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
