"""MXFP4 x MXFP8 layer time under a CUDA graph (16 calls rotating input sets per replay), µs per call.
A/B aid: run once per FUSEDMOE_FP4_LAYOUT in separate processes."""
import os
import torch
from fusedmoe.backends.triton import run_weights
from fusedmoe.bench.presets import BenchCase, get_preset, make_inputs, make_weights
from fusedmoe.config import Format

dev = torch.device("cuda")
for pname in ("gpt-oss-120b", "nemotron-super"):
    p = get_preset(pname)
    w = make_weights(p, Format.MXFP4, device=dev)
    case = BenchCase(p, Format.MXFP4, Format.MXFP8, p.routing_config())
    for T in (8, 64):
        sets = make_inputs(case, T, device=dev, nsets=16)
        for s in sets[:2]:
            run_weights(s.x, w, s.topk, activation_format=Format.MXFP8)
        torch.cuda.synchronize()
        st = torch.cuda.Stream()
        st.wait_stream(torch.cuda.current_stream())
        g = torch.cuda.CUDAGraph()
        with torch.cuda.stream(st), torch.cuda.graph(g, stream=st):
            for s in sets:
                run_weights(s.x, w, s.topk, activation_format=Format.MXFP8)
        torch.cuda.synchronize()
        ts = []
        for _ in range(20):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); g.replay(); b.record(); torch.cuda.synchronize()
            ts.append(a.elapsed_time(b) * 1000 / len(sets))
        ts.sort()
        print(f"{os.environ.get('FUSEDMOE_FP4_LAYOUT', 'swizzled')} {pname} T={T}: {ts[len(ts) // 2]:.1f} us", flush=True)
    del w
    torch.cuda.empty_cache()
