"""Drive triton-backend MoE calls for Nsight Compute (hardware counters of each expert kernel).

    ncu --clock-control none --profile-from-start off \
        --section SpeedOfLight --section WarpStateStats ... -o prof \
        python3 benchmarks/ncu_profile.py --point gpt-oss-120b:mxfp4:1 --point nemotron-super:nvfp4:64

Each ``--point PRESET:FORMAT:TOKENS`` builds the preset's weights, compiles and warms the call on
input sets outside the profiled range, then runs ``--calls`` calls inside
``cudaProfilerStart/Stop`` with programmatic dependent launch off (every kernel starts after the
previous one ends, as ncu serializes them anyway). Not a benchmark (ncu replays every kernel): it
says *why* a kernel takes its time -- issue-slot use, warp stall reasons, DRAM throughput.
``benchmarks/device_run.sh ncu`` runs it and exports the reports as text.
"""

import argparse
import json

import torch

from fusedmoe.backends import triton_moe
from fusedmoe.backends.kernel_configs import choose_moe_config
from fusedmoe.backends.triton import run_weights
from fusedmoe.bench.presets import BenchCase, get_preset, make_inputs, make_weights
from fusedmoe.config import Format


def load_point(spec: str, device, nsets: int):
    """``PRESET:FORMAT:TOKENS`` -> (preset, weights, case, input sets) on ``device``: the preset's
    weights in the format, its natural activation format and routing, ``nsets`` input sets."""
    pname, fname, tokens = spec.split(":")
    p, wf = get_preset(pname), Format(fname)
    w = make_weights(p, wf, device=device)
    case = BenchCase(p, wf, wf.natural_activation_format(), p.routing_config())
    return p, w, case, make_inputs(case, int(tokens), device=device, nsets=nsets)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--point", action="append", required=True, help="PRESET:FORMAT:TOKENS (repeatable)")
    ap.add_argument("--calls", type=int, default=1, help="profiled calls per point")
    ap.add_argument("--gemm1", default=None, metavar="JSON",
                    help='fields of GEMM1\'s config over the chosen one, e.g. \'{"split_k": 4}\' (as kernel_breakdown.py)')
    a = ap.parse_args()
    triton_moe.set_programmatic_dependent_launch(False)
    dev = torch.device("cuda")
    for spec in a.point:
        p, w, case, sets = load_point(spec, dev, 4)
        cfg = None
        if a.gemm1:
            T = sets[0].x.shape[0]
            base = choose_moe_config(T, p.hidden, w.padded_intermediate_size, w.num_experts, p.top_k, case.weight_format,
                                     p.activation, torch.cuda.get_device_name())
            cfg = {"gemm1": {**base.gemm1.to_dict(), **json.loads(a.gemm1)}, "gemm2": base.gemm2.to_dict()}
            print(f"{spec}: gemm1 {cfg['gemm1']}", flush=True)
        for s in sets[:3]:  # compile and warm up outside the profiled range
            run_weights(s.x, w, s.topk, activation_format=case.act_format, config=cfg)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        for i in range(a.calls):
            s = sets[3 - (i % 2)]
            run_weights(s.x, w, s.topk, activation_format=case.act_format, config=cfg)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
        print(f"profiled {spec}: {a.calls} call(s)", flush=True)
        del w
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
