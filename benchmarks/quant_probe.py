"""GPU time of the FP8 activation quantizers on the layer's shapes, against a plain cast's bandwidth.

    PYTHONPATH=src python3 benchmarks/quant_probe.py [--shapes 49152x1856,65536x2048] [--variants]

Per shape: ``formats.triton_quant.quantize_act`` per token (``FP8_TOKEN``, the intermediate of FP8 per-channel
layers) and per tensor (dynamic: absmax pass + quantization), and ``x.to(float8_e4m3fn)`` (torch's cast: the same
bytes, no scale) as the bandwidth reference; each timed over a CUDA graph of 20 calls. ``--variants`` also times the
per-token kernel at other (BLOCK_T, warps) than ``_row_blocks`` picks. Not a benchmark of record: it shows whether a
quantizer runs at the bandwidth its bytes need.
"""

import argparse

import torch

from fusedmoe.config import Format
from fusedmoe.formats import triton_quant as tq


def _time_us(fn, reps: int = 20) -> float:
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / reps)
    return sorted(times)[len(times) // 2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="49152x1856,65536x2048,8192x2688,8192x7168,16384x14336,48x768,6x1856")
    ap.add_argument("--variants", action="store_true")
    a = ap.parse_args()
    dev = torch.device("cuda")
    print(f"{'shape':>14s} {'what':28s} {'us':>8s} {'GB/s':>7s}")
    for sh in a.shapes.split(","):
        T, C = (int(v) for v in sh.split("x"))
        x = torch.randn(T, C, device=dev, dtype=torch.bfloat16)
        nbytes = T * C * 3 + T * 4

        def row(what, us):
            print(f"{sh:>14s} {what:28s} {us:8.1f} {nbytes / us * 1e-3:7.0f}", flush=True)

        row("torch cast (no scale)", _time_us(lambda: x.to(torch.float8_e4m3fn)))
        bt, bc, w = tq._row_blocks(T, C)
        row(f"per token  bt={bt} bc={bc} w={w}", _time_us(lambda: tq.quantize_act(x, Format.FP8_TOKEN)))
        row("per tensor dynamic", _time_us(lambda: tq.quantize_act(x, Format.FP8_TENSOR)))
        if a.variants:
            k = tq._kernels()
            for vbt, vw in ((1, 4), (1, 8), (2, 8), (4, 8), (8, 8), (4, 16)):
                vbc = bc
                if vbt * vbc > 32768:
                    continue
                plan = tq.plan_fp8(x, Format.FP8_TOKEN)
                plan.block_t, plan.num_warps = vbt, vw
                plan.grid = (-(-T // vbt), 1)
                row(f"per token  bt={vbt} bc={vbc} w={vw}", _time_us(lambda: plan.launch(k)))
        del x
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
