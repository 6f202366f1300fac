"""Bit-stability and speed probe of the dot-order activations (``triton_moe.set_act_dot_order``), H200.

Per (preset, format) at ``--tokens`` (default 4096) with the shipped config, each setting runs the layer ``--runs``
times on one input: how many outputs differ from that setting's first run and from the register permutation's
(bitwise), max |diff|, median µs (CUDA events per call, eager). Settings: off, GEMM1 only, GEMM2 only, both; with
``--variants`` also both at num_stages 2 / 3 and a swapped GEMM1 at 4 warps instead of 8 (the racing class). The
exclusion of swapped 8-warp GEMMs (``_dot_order_ok``) is lifted with ``--allow-racy`` to reproduce the race.

    python3 benchmarks/dot_order_probe.py --runs 60 [--variants] [--allow-racy] [--tokens 1 --min-block-m 16]
"""
import argparse
import dataclasses

import torch

from fusedmoe.backends import triton_moe
from fusedmoe.backends.kernel_configs import DEFAULT_TABLE_PATH, choose_moe_config, load_tuned_configs
from fusedmoe.backends.triton import run_weights
from fusedmoe.bench.presets import BenchCase, get_preset, make_inputs, make_weights
from fusedmoe.config import Format

POINTS = (("gpt-oss-120b", Format.MXFP4), ("nemotron-super", Format.MXFP4), ("nemotron-nano", Format.MXFP4),
          ("gpt-oss-20b", Format.MXFP4), ("nemotron-super", Format.NVFP4))


def _stages(cfg, n):
    return dataclasses.replace(cfg, gemm1=dataclasses.replace(cfg.gemm1, num_stages=n),
                               gemm2=dataclasses.replace(cfg.gemm2, num_stages=n))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--variants", action="store_true")
    ap.add_argument("--allow-racy", action="store_true")
    ap.add_argument("--min-block-m", type=int, default=None,
                    help="smallest token tile that takes the dot order (set_act_dot_order's min_block_m; 16: decode)")
    args = ap.parse_args()
    if args.allow_racy:
        ok = triton_moe._dot_order_ok
        triton_moe._dot_order_ok = lambda c, *a: ok(dataclasses.replace(c, swap_ab=False) if c.swap_ab else c, *a)
    dev = torch.device("cuda")
    table = load_tuned_configs(DEFAULT_TABLE_PATH)
    for pname, fmt in POINTS:
        p = get_preset(pname)
        w = make_weights(p, fmt, device=dev)
        s = make_inputs(BenchCase(p, fmt, Format.BF16, p.routing_config()), args.tokens, device=dev, nsets=1)[0]
        cfg = choose_moe_config(args.tokens, w.hidden_size, w.padded_intermediate_size, w.num_experts, p.top_k, fmt,
                                w.activation, torch.cuda.get_device_name(dev), table=table, num_sms=132)
        print(f"== {pname} {fmt.value} T={args.tokens}: {cfg}", flush=True)
        settings = [("off", (False, False), cfg), ("gemm1", (True, False), cfg), ("gemm2", (False, True), cfg),
                    ("both", (True, True), cfg)]
        if args.variants:
            g1_4 = dataclasses.replace(cfg, gemm1=dataclasses.replace(cfg.gemm1, num_warps=4))
            settings += [("both ns2", (True, True), _stages(cfg, 2)), ("both ns3", (True, True), _stages(cfg, 3)),
                         ("off g1 4 warps", (False, False), g1_4), ("both g1 4 warps", (True, True), g1_4)]
        offs = {}  # config -> the register permutation's output with it
        for label, (g1, g2), c in settings:
            if c not in offs:
                prev = triton_moe.set_act_dot_order(False)
                try:
                    offs[c] = run_weights(s.x, w, s.topk, activation_format=Format.BF16, config=c)
                finally:
                    triton_moe.set_act_dot_order(*prev)
            ref = offs[c]
            prev = triton_moe.set_act_dot_order(g1, g2, formats=(fmt,), min_block_m=args.min_block_m)
            try:
                first = run_weights(s.x, w, s.topk, activation_format=Format.BF16, config=c)
                n_first = n_off = 0
                mx = 0.0
                ts = []
                for _ in range(args.runs):
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record()
                    o = run_weights(s.x, w, s.topk, activation_format=Format.BF16, config=c)
                    b.record()
                    torch.cuda.synchronize()
                    ts.append(a.elapsed_time(b) * 1000)
                    n_first += not torch.equal(o, first)
                    n_off += not torch.equal(o, ref)
                    mx = max(mx, (o.float() - ref.float()).abs().max().item())
            finally:
                triton_moe.set_act_dot_order(*prev)
            ts.sort()
            print(f"  {label:16s} differ from first {n_first:3d}/{args.runs}, from off {n_off:3d}/{args.runs}, "
                  f"max|d| {mx:.3g} (output max {ref.float().abs().max().item():.3g}), median {ts[len(ts) // 2]:8.1f} us",
                  flush=True)
        del w
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
