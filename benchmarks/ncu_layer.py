"""One MoE layer call of a model preset under Nsight Compute: the layer is built and called (compiling its kernels)
outside the profiled range, then one call runs between ``cudaProfilerStart`` / ``cudaProfilerStop`` -- run it as

    ncu --profile-from-start off --clock-control none --section SpeedOfLight ... \\
        python3 benchmarks/ncu_layer.py --preset gpt-oss-120b --weight-format mxfp4 --tokens 4096

so that ncu sees exactly the kernels of one call (routing given: precomputed top-k as ``fusedmoe bench`` uses).
Settings of ``decode_ab.py`` (``--settings nows4join``) apply to that call. Without ncu it prints the call's time
(CUDA events, one call after warm-up) -- a plumbing check, not a benchmark.
"""
import argparse

import torch

from decode_ab import _setting
from fusedmoe.backends.triton import run_weights
from fusedmoe.bench.presets import BenchCase, calibrate_static_scales, get_preset, make_inputs, make_weights
from fusedmoe.config import Format


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", required=True)
    ap.add_argument("--weight-format", required=True)
    ap.add_argument("--tokens", type=int, required=True)
    ap.add_argument("--settings", default="default", help="one decode_ab.py setting (or several joined by +)")
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    if a.tokens < 1 or a.warmup < 1:
        raise SystemExit("--tokens and --warmup must be >= 1")
    dev = torch.device("cuda")
    p = get_preset(a.preset)
    fmt = Format(a.weight_format)
    af = fmt.natural_activation_format()
    case = BenchCase(p, fmt, af, p.routing_config())
    w = calibrate_static_scales(make_weights(p, fmt, device=dev).for_activation_format(af), case, device=dev)
    s = make_inputs(case, a.tokens, device=dev, nsets=1)[0]
    with _setting(a.settings):
        for _ in range(a.warmup):
            run_weights(s.x, w, s.topk, activation_format=af)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.cudart().cudaProfilerStart()
        start.record()
        run_weights(s.x, w, s.topk, activation_format=af)
        end.record()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
    us = start.elapsed_time(end) * 1e3
    print(f"{a.preset} {a.weight_format} T={a.tokens} settings={a.settings}: one call {us:.1f} us")


if __name__ == "__main__":
    main()
