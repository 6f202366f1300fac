"""Per-kernel GPU time of one triton-backend MoE call (torch.profiler), for the decode analysis.

    PYTHONPATH=src python3 benchmarks/kernel_breakdown.py --preset qwen3-30b-a3b,nemotron-nano \
        --weight-format bf16,fp8_tensor,nvfp4 --tokens 1,8,64 [--json out.json]

Each point calls the layer ``--calls`` times, rotating over input sets whose routings touch
different experts (weights not L2-resident), and prints the mean time of every kernel and their
sum next to the weight-read floor (bytes of the experts hit / ``--bw`` TB/s) and the TF/s. Not a benchmark of
record (that is ``fusedmoe bench``): it shows where the time of one call goes.
"""

import argparse
import collections
import json

import torch

from fusedmoe.backends.kernel_configs import TunedTable, choose_moe_config
from fusedmoe.backends.triton import run_weights
from fusedmoe.bench.presets import (BenchCase, get_preset, make_inputs, make_weights, weights_nbytes,
                                    with_activation)
from fusedmoe.config import Format


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="qwen3-30b-a3b")
    ap.add_argument("--weight-format", default="bf16")
    ap.add_argument("--tokens", default="1,8")
    ap.add_argument("--activation", default=None,
                    help="run every preset's shape with this expert activation instead of its model's "
                         "(e.g. relu2: the shared harness's non-gated cases of the gated models)")
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--bw", type=float, default=4.4, help="memory roofline in TB/s for the floor column")
    ap.add_argument("--sets", type=int, default=16,
                    help="input sets the calls rotate over (1: the same experts every call -- their weights stay in L2 "
                         "where they fit, the kernels' time with the DRAM reads mostly gone)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--heuristic", action="store_true", help="heuristic configs only (ignore the tuned table)")
    ap.add_argument("--gemm2", action="append", default=[], metavar="JSON",
                    help='GEMM2 config keys laid over the chosen one, e.g. \'{"num_warps": 4, "persistent": 2}\' '
                         '(repeatable: each is one more variant of every point; GEMM1 keeps the chosen config '
                         'with the variant\'s block_m)')
    ap.add_argument("--gemm1", action="append", default=[], metavar="JSON",
                    help='GEMM1 config keys laid over the chosen one, e.g. \'{"num_warps": 8}\' (repeatable: each is one '
                         'more variant of every point; GEMM2 keeps the chosen config)')
    ap.add_argument("--no-gemm1-amax", action="store_true",
                    help="dynamic per-tensor intermediate scales by the zero-filled intermediate and an absmax pass "
                         "(triton_moe.set_gemm1_amax(False)) instead of GEMM1's epilogue amax")
    ap.add_argument("--fused-combine", type=int, default=None, metavar="TOKENS",
                    help="calls of at most TOKENS tokens run the top-k combine inside GEMM2 where its config allows "
                         "(triton_moe.set_fused_combine; one program a tile, no held activation tile)")
    a = ap.parse_args()
    if a.no_gemm1_amax or a.fused_combine is not None:
        from fusedmoe.backends import triton_moe

        if a.no_gemm1_amax:
            triton_moe.set_gemm1_amax(False)
        if a.fused_combine is not None:
            triton_moe.set_fused_combine(a.fused_combine)
    dev = torch.device("cuda")
    rows = []
    for pname in a.preset.split(","):
        p = with_activation(get_preset(pname), a.activation)
        pname = p.name  # "<preset>:<activation>" with --activation
        for wf_name in a.weight_format.split(","):
            wf = Format(wf_name)
            w = make_weights(p, wf, device=dev)
            case = BenchCase(p, wf, wf.natural_activation_format(), p.routing_config())
            per_expert = weights_nbytes(w) / p.experts
            for T in (int(t) for t in a.tokens.split(",")):
                sets = make_inputs(case, T, device=dev, nsets=a.sets)
                base = choose_moe_config(T, p.hidden, w.padded_intermediate_size, w.num_experts, p.top_k, wf,
                                         p.activation, torch.cuda.get_device_name(),
                                         table=TunedTable() if a.heuristic else None)
                variants = [(None, base if a.heuristic else None)] + [
                    (g2, {"gemm2": {**base.gemm2.to_dict(), **json.loads(g2)}}) for g2 in a.gemm2] + [
                    ("gemm1 " + g1, {"gemm1": {**base.gemm1.to_dict(), **json.loads(g1)}, "gemm2": base.gemm2.to_dict()})
                    for g1 in a.gemm1]
                print(f"# {pname} {wf_name} T={T} config: gemm1 {base.gemm1.to_dict()} gemm2 {base.gemm2.to_dict()}")
                for g2, cfg in variants:
                    _one(a, rows, pname, wf_name, T, w, case, sets, per_expert, p, cfg, g2)
            del w
            torch.cuda.empty_cache()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


def _one(a, rows, pname, wf_name, T, w, case, sets, per_expert, p, cfg, g2) -> None:
    """One point (one config variant): per-kernel mean times over ``a.calls`` calls, printed and appended to ``rows``."""
    for s in sets[:2]:  # compile / warm up
        run_weights(s.x, w, s.topk, activation_format=case.act_format, config=cfg)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for i in range(a.calls):
            s = sets[i % len(sets)]
            run_weights(s.x, w, s.topk, activation_format=case.act_format, config=cfg)
        torch.cuda.synchronize()
    per = collections.defaultdict(float)
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            per[ev.name] += ev.device_time_total if hasattr(ev, "device_time_total") else ev.cuda_time_total
    hit = sum(len(torch.unique(s.topk.ids)) for s in sets) / len(sets)
    floor_us = (hit * per_expert + 4 * T * p.hidden) / (a.bw * 1e12) * 1e6
    kernels = {k: v / a.calls for k, v in sorted(per.items(), key=lambda kv: -kv[1])}
    total = sum(kernels.values())
    tflops = 2 * T * p.top_k * p.hidden * (p.n1 + p.intermediate) / total * 1e-6
    rows.append(dict(preset=pname, format=wf_name, tokens=T, gemm2=g2, floor_us=floor_us, total_us=total,
                     tflops=tflops, kernels=kernels))
    print(f"{pname:18s} {wf_name:11s} T={T:<5d} weight-read floor {floor_us:7.1f} us  kernels "
          f"{total:8.1f} us ({100 * floor_us / total:5.1f} %)  {tflops:6.1f} TF/s"
          + (f"  {g2 if g2.startswith('gemm1 ') else 'gemm2 ' + g2}" if g2 else ""))
    for k, v in kernels.items():
        print(f"    {v:8.2f} us  {k[:110]}")


if __name__ == "__main__":
    main()
