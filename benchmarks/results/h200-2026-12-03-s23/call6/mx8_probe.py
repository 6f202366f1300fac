"""MXFP4 x MXFP8 (the E4M3 partial-sum path at decode) layer time, µs: CUDA events over 64 calls
rotating 16 input sets. A/B aid only (run once per FUSEDMOE_FP4_LAYOUT in separate processes)."""
import os
import torch
from fusedmoe.backends.triton import run_weights
from fusedmoe.bench.presets import BenchCase, get_preset, make_inputs, make_weights
from fusedmoe.config import Format

for pname in ("gpt-oss-120b", "nemotron-super"):
    p = get_preset(pname)
    w = make_weights(p, Format.MXFP4, device=torch.device("cuda"))
    case = BenchCase(p, Format.MXFP4, Format.MXFP8, p.routing_config())
    for T in (1, 8, 64):
        sets = make_inputs(case, T, device=torch.device("cuda"), nsets=16)
        for s in sets[:4]:
            run_weights(s.x, w, s.topk, activation_format=Format.MXFP8)
        torch.cuda.synchronize()
        best = []
        for rep in range(3):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for i in range(64):
                s = sets[i % len(sets)]
                run_weights(s.x, w, s.topk, activation_format=Format.MXFP8)
            b.record()
            torch.cuda.synchronize()
            best.append(a.elapsed_time(b) * 1000 / 64)
        print(f"{os.environ.get('FUSEDMOE_FP4_LAYOUT', 'swizzled')} {pname} mxfp4 x mxfp8 T={T}: {min(best):.1f} us "
              f"(layout {w.w13.value_layout})", flush=True)
    del w
    torch.cuda.empty_cache()
