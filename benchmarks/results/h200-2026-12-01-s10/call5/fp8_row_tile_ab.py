"""A/B of the FP8 per-token quantizer's tiling (``formats.triton_quant.row_tile``) in one process:
the row as one tile (one load serves the amax and the quantization) against 1024-column steps
(an amax pass, then the quantization pass), on the activation shapes of FP8 per-channel layers.

    PYTHONPATH=src python3 benchmarks/fp8_row_tile_ab.py [--json out.json]

Rows are T*K slots of the intermediate (GEMM2's input) or T tokens of hidden (GEMM1's input);
every tensor is larger than L2 except the decode rows. Prints µs and TB/s (bf16 read + e4m3 and
scale written) per variant.
"""

import argparse
import json

import torch

from fusedmoe.formats import triton_quant as tq
from fusedmoe.kernels import _quant as k
from fusedmoe.kernels._host import cdiv, launch, next_pow2

# (label, rows, C): Nemotron-3-Nano intermediate / hidden at 8192 tokens, DeepSeek-V3, Mixtral,
# Qwen3-30B, DeepSeek-V3 TP8, and two decode-sized hidden tensors
SHAPES = [("nemotron I T=8192", 49152, 1856), ("nemotron H T=8192", 8192, 2688),
          ("dsv3 I T=8192", 65536, 2048), ("dsv3 H T=8192", 8192, 7168),
          ("mixtral I T=8192", 16384, 14336), ("qwen3 I T=8192", 65536, 768),
          ("minimax I T=8192", 65536, 1536), ("dsv3_tp8 I T=8192", 65536, 256),
          ("qwen3 H T=8", 8, 2048), ("nemotron H T=8", 8, 2688)]


def _time(fn, reps=20):
    fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(reps):
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3)
    return sorted(ts)[len(ts) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    rows_out = []
    for label, T, C in SHAPES:
        x = torch.randn(T, C, device="cuda", dtype=torch.bfloat16)
        q = torch.empty(T, C, device="cuda", dtype=torch.float8_e4m3fn)
        s = torch.empty(T, device="cuda", dtype=torch.float32)
        old = (min(next_pow2(C), 1024),)
        variants = {"steps1024": (min(next_pow2(T), max(1, 2048 // old[0])), old[0], 4),
                    "row_tile": tq.row_tile(T, C) + (4,)}
        bt, bc = tq.row_tile(T, C)
        if bc * 2 <= 8192:
            variants["row_tile_2rows_8w"] = (min(next_pow2(T), 2 * bt), bc, 8)
        ref = None
        rec = dict(label=label, rows=T, C=C)
        for name, (BT, BC, warps) in variants.items():
            f = lambda: launch(k._fp8_row_kernel, (cdiv(T, BT),), x, q, s, s, T, C, x.stride(0), q.stride(0),
                               SCALE_MODE=2, OUT_FP32=False, BLOCK_T=BT, BLOCK_C=BC, num_warps=warps)
            t = _time(f)
            bits = (q.view(torch.uint8).clone(), s.clone())
            if ref is None:
                ref = bits
            same = torch.equal(ref[0], bits[0]) and torch.equal(ref[1].view(torch.int32), bits[1].view(torch.int32))
            rec[name] = dict(us=t, tbps=T * C * 3 / t * 1e-6, block=(BT, BC, warps), same_bits=same)
        rows_out.append(rec)
        print(f"{label:20s} {T:6d} x {C:5d} | " + " | ".join(
            f"{n} {v['us']:7.1f} us {v['tbps']:4.2f} TB/s{'' if v['same_bits'] else ' BITS DIFFER'}"
            for n, v in rec.items() if isinstance(v, dict)), flush=True)
        del x, q
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows_out, f, indent=1)



if __name__ == "__main__":
    main()
