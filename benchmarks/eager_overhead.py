"""Host (Python) cost of one eager ``fm.FusedMoE`` forward at decode, against the same call's GPU
time: what an eager engine or transformers pays per MoE layer beyond the kernels.

For each preset / format / token count: the CUDA-graph replay time (GPU work only), the eager time
of a call followed by a synchronize (latency), and the eager time per call of 200 back-to-back calls
(throughput: host-bound when the host needs longer per call than the GPU).

    PYTHONPATH=src python3 benchmarks/eager_overhead.py --preset qwen3-30b-a3b,deepseek-v3-tp8 --tokens 1,8

``--profile N``: also run N eager calls of each case under cProfile (the functions with the most own
time) and list the GPU kernels one call launches (torch.profiler), to see where the host time goes.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

import torch

import fusedmoe as fm
from fusedmoe.bench.presets import get_preset, make_weights
from fusedmoe.bench.timing import time_calls


def _wall(fn, n: int, sync_each: bool) -> float:
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
        if sync_each:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n


def _profile(fn, n: int) -> None:
    prof = cProfile.Profile()
    torch.cuda.synchronize()
    prof.enable()
    for _ in range(n):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    buf = io.StringIO()
    st = pstats.Stats(prof, stream=buf)
    st.sort_stats("tottime").print_stats(28)
    st.sort_stats("cumulative").print_stats(40)
    print("\n".join(line for line in buf.getvalue().splitlines() if line.strip()))
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as tp:
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
    print(tp.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))


def _variants(fn) -> None:
    from fusedmoe.backends.triton_moe import set_fused_combine
    from fusedmoe.kernels import _host

    prev_direct = _host._DIRECT
    res = []
    try:
        for direct in (False, True):
            for fuse in (0, 64):
                _host._DIRECT = direct
                prev = set_fused_combine(fuse)
                try:
                    res.append(f"direct={int(direct)} fused={int(bool(fuse))}: {_wall(fn, 200, False) * 1e6:6.1f}")
                finally:
                    set_fused_combine(prev)
    finally:
        _host._DIRECT = prev_direct
    print("      eager/call us  " + "  |  ".join(res))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="qwen3-30b-a3b,deepseek-v3-tp8")
    ap.add_argument("--weight-format", default="bf16,fp8_block")
    ap.add_argument("--tokens", default="1,8")
    ap.add_argument("--profile", type=int, default=0, metavar="N", help="cProfile N eager calls per case")
    ap.add_argument("--variants", action="store_true",
                    help="eager time per call with direct launches off / on and the combine in GEMM2 off / on")
    args = ap.parse_args(argv)
    dev = torch.device("cuda")
    print(f"{'case':40s} {'T':>4s} {'graph us':>9s} {'eager+sync us':>14s} {'eager/call us':>14s}")
    for name in args.preset.split(","):
        p = get_preset(name)
        for wf in args.weight_format.split(","):
            fmt = fm.Format(wf)
            weights = make_weights(p, fmt, device=dev)
            routing = p.routing_config()
            moe = fm.FusedMoE(weights, routing=routing, activation=p.activation)
            bias = torch.randn(p.experts, device=dev) * 0.1 if routing.method is fm.RoutingMethod.DEEPSEEK_V3 else None
            for T in (int(t) for t in args.tokens.split(",")):
                x = torch.randn(T, p.hidden, device=dev, dtype=torch.bfloat16)
                logits = torch.randn(T, p.experts, device=dev)

                def call():
                    return moe(x, logits, bias)

                g = time_calls([call], dev).median_s
                lat = _wall(call, 100, True)
                thr = _wall(call, 200, False)
                print(f"{name + '/' + wf:40s} {T:4d} {g * 1e6:9.1f} {lat * 1e6:14.1f} {thr * 1e6:14.1f}")
                if args.profile:
                    _profile(call, args.profile)
                if args.variants:
                    _variants(call)
            del moe, weights
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
