"""Dot-order (A_PERMUTED) probe: per (preset, format) at 4096 tokens with the shipped config, each (gemm1, gemm2)
setting run N times on the same input: outputs differing from that setting's first run and from the register
permutation's (bitwise), max |diff|, median µs (CUDA events per call)."""
import dataclasses, sys, torch
from fusedmoe.backends.triton import run_weights
from fusedmoe.backends import triton_moe
from fusedmoe.backends.kernel_configs import choose_moe_config, load_tuned_configs, DEFAULT_TABLE_PATH
from fusedmoe.bench.presets import BenchCase, get_preset, make_inputs, make_weights
from fusedmoe.config import Format

dev = torch.device("cuda")
table = load_tuned_configs(DEFAULT_TABLE_PATH)
N = int(sys.argv[1]) if len(sys.argv) > 1 else 60
SHIPPED = len(sys.argv) > 2 and sys.argv[2] == "shipped"
for pname, fmt in ((("gpt-oss-120b", Format.MXFP4), ("nemotron-super", Format.MXFP4), ("nemotron-nano", Format.MXFP4),
                    ("gpt-oss-20b", Format.MXFP4)) if SHIPPED else
                   (("gpt-oss-120b", Format.MXFP4), ("nemotron-super", Format.MXFP4), ("nemotron-nano", Format.MXFP4),
                    ("nemotron-super", Format.NVFP4), ("gpt-oss-120b", Format.NVFP4))):
    p = get_preset(pname)
    w = make_weights(p, fmt, device=dev)
    case = BenchCase(p, fmt, Format.BF16, p.routing_config())
    s = make_inputs(case, 4096, device=dev, nsets=1)[0]
    cfg = choose_moe_config(4096, w.hidden_size, w.padded_intermediate_size, w.num_experts, p.top_k, fmt, w.activation,
                            torch.cuda.get_device_name(dev), table=table, num_sms=132)
    c3 = dataclasses.replace(cfg, gemm1=dataclasses.replace(cfg.gemm1, num_stages=3),
                             gemm2=dataclasses.replace(cfg.gemm2, num_stages=3))
    print(f"== {pname} {fmt.value}: {cfg}", flush=True)
    base = None
    variants = ((("off", (False, False), cfg), ("shipped", (True, True), cfg)) if SHIPPED else
                (("off", (False, False), cfg), ("g1", (True, False), cfg), ("g2", (False, True), cfg),
                 ("both", (True, True), cfg), ("off ns3", (False, False), c3), ("both ns3", (True, True), c3)))
    for label, (g1, g2), c in variants:
        triton_moe.set_act_dot_order(g1, g2, formats=(Format.MXFP4,) if SHIPPED else (Format.MXFP4, Format.NVFP4))
        first = run_weights(s.x, w, s.topk, activation_format=Format.BF16, config=c)
        torch.cuda.synchronize()
        if base is None:
            base = first.clone()
        nd = nb = 0
        mx = 0.0
        ts = []
        for i in range(N):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); o = run_weights(s.x, w, s.topk, activation_format=Format.BF16, config=c); b.record()
            torch.cuda.synchronize()
            ts.append(a.elapsed_time(b) * 1000)
            nd += not torch.equal(o, first)
            nb += not torch.equal(o, base)
            mx = max(mx, (o.float() - base.float()).abs().max().item())
        ts.sort()
        print(f"  {label:9s} diff_from_first={nd:3d}/{N} diff_from_off={nb:3d}/{N} max|d|={mx:.3g} "
              f"ref_scale={base.float().abs().max().item():.3g} median={ts[N // 2]:8.1f} us", flush=True)
    triton_moe.set_act_dot_order(True, True, formats=(Format.MXFP4,))
    del w
    torch.cuda.empty_cache()
