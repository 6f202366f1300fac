"""Same-process A/B of the two block-scale layouts the Triton kernels read (session 8).

    PYTHONPATH=src python3 benchmarks/fp4_layout_ab.py --point gpt-oss-120b:mxfp4:1 ... [--heuristic]

Per point (PRESET:FORMAT:TOKENS): the layer call (CUDA-graph replay, rotating input sets) with
  kmajor    block scales K-major (QuantizedTensor.k_major_scales; ExpertWeights' NVFP4 layout)
  rowmajor  the same scales row-major (the linear checkpoint layout; ExpertWeights' MX layout)
passed to the kernels directly, and the GEMM kernel times of one call (torch.profiler); the tuned
table's configs, or the heuristic's (--heuristic). One row per point and layout. (Session 8 also
timed GEMM1 with gate and up as two tiles against the joined tile, with a temporary switch that
is not in the code: BENCHMARKS.md.)
"""

import argparse
import collections
import dataclasses

import torch

from fusedmoe.backends.kernel_configs import TunedTable, choose_moe_config
from fusedmoe.backends.triton import run_weights
from fusedmoe.bench.timing import time_calls
from fusedmoe.formats import QuantizedTensor
from ncu_profile import load_point  # benchmarks/ (the script's directory is on sys.path)


def _with_layout(w, k_major: bool):
    """``w`` with both weights' block scales in one layout (bypassing ExpertWeights' choice)."""
    out = dataclasses.replace(w)
    for name in ("w13", "w2"):
        q = getattr(w, name)
        q = q.k_major_scales() if k_major else QuantizedTensor(q.data, q.fmt, q.scale.contiguous(), q.global_scale)
        object.__setattr__(out, name, q)
    return out


def _kernel_times(fn):
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
    per = collections.defaultdict(float)
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            per[ev.name] += ev.device_time_total / 5
    return {k: v for k, v in per.items() if "gemm" in k}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--point", action="append", required=True)
    ap.add_argument("--heuristic", action="store_true")
    a = ap.parse_args()
    dev = torch.device("cuda")
    print(f"{'point':32s} {'variant':13s} {'us':>8s}  gemm kernels (us)", flush=True)
    for spec in a.point:
        p, w, case, sets = load_point(spec, dev, 8)
        cfg = None
        if a.heuristic:
            cfg = choose_moe_config(int(spec.split(":")[2]), p.hidden, w.padded_intermediate_size, w.num_experts,
                                    p.top_k, w.format, p.activation, torch.cuda.get_device_name(), table=TunedTable())
        variants = [("kmajor", _with_layout(w, True)), ("rowmajor", _with_layout(w, False))]
        for name, ww in variants:
            calls = [lambda s=s, ww=ww: run_weights(s.x, ww, s.topk, activation_format=case.act_format, config=cfg)
                     for s in sets]
            tr = time_calls(calls, dev, budget_s=1.5)
            kt = _kernel_times(calls[0])
            ks = " ".join(f"{k.split('_')[1]}={v:.1f}" for k, v in sorted(kt.items()))
            print(f"{spec:32s} {name:13s} {tr.median_s * 1e6:8.1f}  {ks}", flush=True)
        del w, variants
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
