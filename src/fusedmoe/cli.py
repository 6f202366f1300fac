"""``fusedmoe`` command line: ``info``, ``demo`` (more subcommands as they land)."""

from __future__ import annotations

import argparse
import platform
import sys
import time
from typing import List, Optional

import torch

__all__ = ["main"]


def _table(title: str, columns: List[str], rows: List[List[str]]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(title)
        widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(columns)]
        print("  ".join(c.ljust(w) for c, w in zip(columns, widths)))
        for r in rows:
            print("  ".join(v.ljust(w) for v, w in zip(r, widths)))
        return
    t = Table(title=title)
    for c in columns:
        t.add_column(c)
    for r in rows:
        t.add_row(*r)
    Console(width=max(100, len(" ".join(columns)) + 20)).print(t)


def cmd_info(args) -> int:
    import triton

    from . import backends
    from .config import Activation, Format
    from .backends.base import MoERequest

    dev = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    print(f"fusedmoe {__import__('fusedmoe').__version__}  python {platform.python_version()}  "
          f"torch {torch.__version__}  triton {triton.__version__}")
    if dev.type == "cuda":
        p = torch.cuda.get_device_properties(dev)
        print(f"device: {p.name} (sm_{p.major}{p.minor}, {p.multi_processor_count} SMs, "
              f"{p.total_memory / 2**30:.0f} GiB), CUDA {torch.version.cuda}")
    else:
        print("device: cpu (no CUDA device visible)")
    rows = []
    for wf in Format:
        if not wf.is_weight_format:
            continue
        for af in wf.allowed_activation_formats():
            cells = [wf.name, af.name]
            for name in backends.available():
                req = MoERequest(wf, af, Activation.SWIGLU)
                why = backends.get(name).supports(req, dev)
                cells.append("yes" if why is None else "no")
            rows.append(cells)
    _table(f"backends on {dev}", ["weights", "activations", *backends.available()], rows)
    for name, why in backends.describe(dev).items():
        if why:
            print(f"  {name}: {why}")
    name, reason = backends.select(MoERequest(Format.BF16, Format.BF16, Activation.SWIGLU), dev)
    print(f"auto backend for BF16 on {dev}: {reason}")
    return 0


def _timeit(fn, device) -> float:
    """Median seconds per call (CUDA events on a GPU, wall clock on a CPU)."""
    for _ in range(3):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
        times = []
        for _ in range(20):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) / 1e3)
    else:
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


def cmd_demo(args) -> int:
    """A Nemotron-3-Nano-shaped MoE layer (ReLU², DeepSeek-V3 ungrouped routing with bias and
    scale 2.5) through the auto backend, in BF16, FP8 and NVFP4, checked against the reference."""
    import fusedmoe as fm

    dev = torch.device(args.device) if args.device else (
        torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu"))
    full = dev.type == "cuda" and not args.small
    if full:
        H, I, E, K, tokens = 2688, 1856, 128, 6, [1, 32, 512]
    else:  # scaled down for a CPU: still needs padding (I=232 -> 256) and real routing
        H, I, E, K, tokens = 256, 232, 16, 6, [4, 32]
    dtype = torch.bfloat16
    g = torch.Generator(device="cpu").manual_seed(0)
    w13 = (torch.randn(E, I, H, generator=g) * H ** -0.5).to(dev)
    w2 = (torch.randn(E, H, I, generator=g) * I ** -0.5).to(dev)
    bias = (torch.randn(E, generator=g) * 0.1).to(dev)
    routing = fm.RoutingConfig(fm.RoutingMethod.DEEPSEEK_V3, top_k=K, routed_scaling_factor=2.5)
    print(f"Nemotron-3-Nano-shaped MoE on {dev}: H={H} I={I} E={E} top_k={K}, ReLU², DeepSeek-V3 routing "
          f"(ungrouped, bias, scale 2.5){'' if full else ' -- scaled down for CPU'}")
    rows = []
    bounds = {fm.Format.BF16: 2e-2, fm.Format.FP8_TENSOR: 1e-1, fm.Format.NVFP4: 2e-1}
    failed = False
    for fmt in (fm.Format.BF16, fm.Format.FP8_TENSOR, fm.Format.NVFP4):
        weights = fm.ExpertWeights.from_float(w13, w2, activation=fm.Activation.RELU2, format=fmt)
        moe = fm.FusedMoE(weights, routing=routing, activation=fm.Activation.RELU2)
        for T in tokens:
            x = torch.randn(T, H, generator=g).to(dev, dtype)
            logits = torch.randn(T, E, generator=g).to(dev)
            out = moe(x, logits, bias)
            topk = moe.route(logits, bias)
            ref = fm.reference_moe(x, weights, topk, activation=fm.Activation.RELU2)
            # float64 model with the original (unquantized) weights and unquantized activations
            ideal = torch.zeros(T, H, dtype=torch.float64, device=dev)
            for k in range(K):
                e = topk.ids[:, k].long()
                h = torch.einsum("th,tih->ti", x.double(), w13[e].double())
                y = torch.einsum("ti,thi->th", torch.relu(h) ** 2, w2[e].double())
                ideal += topk.weights[:, k, None].double() * y
            err_spec, err_ideal = _rel(out, ref), _rel(out, ideal)
            ok = err_spec < 2e-2 and err_ideal < bounds[fmt]
            failed |= not ok
            t = _timeit(lambda: moe(x, logits, bias), dev)
            rows.append([fmt.name, moe.backend, str(T), f"{err_spec:.2e}", f"{err_ideal:.2e}",
                         f"{bounds[fmt]:.0e}", f"{t * 1e6:,.1f}", "ok" if ok else "FAIL"])
    _table("fusedmoe demo", ["weights", "backend", "tokens", "err vs spec ref", "err vs fp64 float model",
                             "bound", "µs/call", "check"], rows)
    print("err = ||out - ref|| / ||ref||. 'spec ref' is fm.reference_moe (same quantization, fp32 math; "
          "bound 2e-2); the fp64 float model uses the unquantized weights and activations, so it also "
          "shows each format's quantization error (bounds in the 'bound' column).")
    print(f"backend choice: {moe.backend_reason}")
    return 1 if failed else 0


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="fusedmoe", description="fused Mixture-of-Experts kernels")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("info", help="versions, device, backends and what each supports").set_defaults(fn=cmd_info)
    d = sub.add_parser("demo", help="a Nemotron-shaped MoE layer through the auto backend, checked")
    d.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    d.add_argument("--small", action="store_true", help="the scaled-down shape even on a GPU")
    d.set_defaults(fn=cmd_demo)
    args = p.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
