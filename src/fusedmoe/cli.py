"""``fusedmoe`` command line.

* ``info``: versions, device, backends and what each supports.
* ``demo``: a Nemotron-shaped MoE layer through the auto backend, checked against the reference.
* ``bench``: roofline-aware benchmark of model-shaped layers against the peers (table, JSON, PNG).
* ``tune``: kernel-config search on this GPU; writes the tuned table the triton backend loads.
* ``check``: correctness sweep of every backend (activations x formats x routing methods).
"""

from __future__ import annotations

import argparse
import platform
import sys
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
        from .backends.kernel_configs import table_source
        from .kernels import _host

        print("  " + table_source(p.name, p.multi_processor_count))
        if _host.e4m3_in_bytes(dev):
            print("  E4M3 numbers travel as bytes on this GPU (Triton has no e4m3 type below sm_89): FP8 weights "
                  "and activations run on bf16 tensor cores, the quantizers round through fp32")
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


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


def cmd_demo(args) -> int:
    """A Nemotron-3-Nano-shaped MoE layer (ReLU², DeepSeek-V3 ungrouped routing with bias and
    scale 2.5) through the auto backend, in BF16, FP8 and NVFP4, checked against the reference."""
    import fusedmoe as fm
    from .bench.timing import time_calls

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
            t = time_calls([lambda: moe(x, logits, bias)], dev).median_s  # graph replay on a GPU
            rows.append([fmt.name, moe.backend, str(T), f"{err_spec:.2e}", f"{err_ideal:.2e}",
                         f"{bounds[fmt]:.0e}", f"{t * 1e6:,.1f}", "ok" if ok else "FAIL"])
    _table("fusedmoe demo", ["weights", "backend", "tokens", "err vs spec ref", "err vs fp64 float model",
                             "bound", "µs/call", "check"], rows)
    print("err = ||out - ref|| / ||ref||. 'spec ref' is fm.reference_moe (same quantization, fp32 math; "
          "bound 2e-2); the fp64 float model uses the unquantized weights and activations, so it also "
          "shows each format's quantization error (bounds in the 'bound' column).")
    print(f"backend choice: {moe.backend_reason}")
    return 1 if failed else 0


# ---- bench / tune / check ----------------------------------------------------------------------


def _csv(text: str) -> List[str]:
    return [t.strip() for t in str(text).split(",") if t.strip()]


def _enum_value(enum_cls, text: str, what: str):
    """An enum member from its value or name (case-insensitive); ArgumentTypeError otherwise."""
    t = text.strip().lower().replace("-", "_")
    for m in enum_cls:
        if str(m.value).lower() == t or m.name.lower() == t:
            return m
    raise argparse.ArgumentTypeError(
        f"unknown {what} {text!r}; expected one of {', '.join(str(m.value).lower() if isinstance(m.value, str) else m.name.lower() for m in enum_cls)}")


def _enum_list(enum_cls, what: str):
    def parse(text: str):
        vals = [_enum_value(enum_cls, t, what) for t in _csv(text)]
        if not vals:
            raise argparse.ArgumentTypeError(f"empty {what} list")
        return vals
    return parse


def _tokens(text: str) -> List[int]:
    out = []
    for t in _csv(text):
        try:
            v = int(t)
        except ValueError:
            raise argparse.ArgumentTypeError(f"token counts must be integers, got {t!r}") from None
        if v < 1:
            raise argparse.ArgumentTypeError(f"token counts must be >= 1, got {v}")
        out.append(v)
    if not out:
        raise argparse.ArgumentTypeError("empty token list")
    return out


def _shape(text: str):
    parts = _csv(text)
    try:
        vals = [int(v) for v in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shape takes four integers H,I,E,TOP_K, got {text!r}") from None
    if len(vals) != 4 or min(vals) < 1:
        raise argparse.ArgumentTypeError(f"--shape takes four positive integers H,I,E,TOP_K, got {text!r}")
    return tuple(vals)


def _float_where(ok, what: str):
    """An argparse type: a number for which ``ok(value)`` holds (``what`` names the range in the error)."""
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not ok(v):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return v
    return parse


_positive_float = _float_where(lambda v: v > 0, "a number > 0")
_fraction = _float_where(lambda v: 0.0 <= v < 1.0, "a fraction in [0, 1)")


def _int_at_least(lo: int):
    """An argparse type: an integer >= ``lo``."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if v < lo:
            raise argparse.ArgumentTypeError(f"expected an integer >= {lo}, got {text!r}")
        return v
    return parse


_positive_int = _int_at_least(1)
_nonnegative_int = _int_at_least(0)


_DTYPES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16}


def _add_shape_args(p: argparse.ArgumentParser, *, default_note: str) -> None:
    from .config import Activation, Format, RoutingMethod

    g = p.add_argument_group("what to run")
    g.add_argument("--preset", action="append", default=None, metavar="NAME[,NAME...]",
                   help=f"model shape preset(s) (repeatable; see --list-presets); {default_note}")
    g.add_argument("--all-presets", action="store_true", help="every model preset (not the tiny test shapes)")
    g.add_argument("--shape", type=_shape, default=None, metavar="H,I,E,TOP_K",
                   help="an explicit shape instead of a preset (I per expert, unpadded)")
    g.add_argument("--activation", type=lambda t: _enum_value(Activation, t, "activation"), default=None,
                   help="with --shape: the expert activation (default swiglu)")
    g.add_argument("--routing", type=lambda t: _enum_value(RoutingMethod, t, "routing method"), default=None,
                   help="routing method (default: the preset's own; with --shape renormalize_naive)")
    g.add_argument("--n-group", type=_positive_int, default=1, help="expert groups (deepseek_v3 routing)")
    g.add_argument("--topk-group", type=_positive_int, default=1, help="groups kept (deepseek_v3 routing)")
    g.add_argument("--routed-scaling-factor", type=_positive_float, default=1.0,
                   help="routed scaling factor (deepseek_v3 / minimax2 routing)")
    g.add_argument("--weight-format", type=_enum_list(Format, "format"),
                   action="append", default=None, metavar="F[,F...]",
                   help="weight format(s): bf16, fp8_tensor, fp8_channel, fp8_block, mxfp8, nvfp4, mxfp4")
    g.add_argument("--tokens", type=_tokens, default=None, metavar="T[,T...]", help="token counts")
    g.add_argument("--list-presets", action="store_true", help="print the presets and exit")


def _flatten(lists):
    return [x for lst in (lists or []) for x in lst]


def _resolve_presets(p: argparse.ArgumentParser, args, default_names) -> list:
    """Presets from --preset / --all-presets / --shape (argparse errors for bad combinations)."""
    from .bench.presets import PRESETS, custom_preset, get_preset
    from .config import Activation, RoutingMethod

    names = [n for v in (args.preset or []) for n in _csv(v)]
    chosen = sum(bool(x) for x in (names, args.all_presets, args.shape))
    if chosen > 1:
        p.error("use one of --preset, --all-presets and --shape")
    if args.activation is not None and not args.shape:
        p.error("--activation applies to --shape only (a preset has its model's activation)")
    routing_override = args.routing is not None or args.n_group != 1 or args.topk_group != 1 or args.routed_scaling_factor != 1.0
    if args.shape:
        H, I, E, K = args.shape
        try:
            return [custom_preset(H, I, E, K, args.activation or Activation.SWIGLU,
                                  args.routing or RoutingMethod.RENORMALIZE_NAIVE, n_group=args.n_group,
                                  topk_group=args.topk_group, routed_scaling_factor=args.routed_scaling_factor)]
        except ValueError as exc:
            p.error(f"--shape: {exc}")
    if args.all_presets:
        presets = [q for q in PRESETS.values() if not q.name.startswith("tiny")]
    else:
        try:
            presets = [get_preset(n) for n in (names or default_names)]
        except ValueError as exc:
            p.error(str(exc))
    if routing_override:
        from dataclasses import replace

        out = []
        for q in presets:
            r = replace(q, routing=args.routing or q.routing, n_group=args.n_group, topk_group=args.topk_group,
                        routed_scaling_factor=args.routed_scaling_factor)
            try:
                r.routing_config()
            except ValueError as exc:
                p.error(f"--routing for preset {q.name}: {exc}")
            out.append(r)
        presets = out
    return presets


def _print_presets() -> None:
    from .bench.presets import PRESETS, formats_for

    rows = []
    for q in PRESETS.values():
        rows.append([q.name, q.model, str(q.hidden), str(q.intermediate), str(q.experts), str(q.top_k),
                     q.activation.value + (" + bias" if q.expert_bias else ""),
                     q.routing.name.lower() + (f" {q.n_group}/{q.topk_group}" if q.n_group > 1 else "")
                     + (f" x{q.routed_scaling_factor:g}" if q.routed_scaling_factor != 1 else ""),
                     ",".join(f.value for f in formats_for(q))])
    from .bench.table import print_table

    print_table("presets (docs/models.md section 9; -tp8 = one TP-8 shard of I)",
           ["preset", "model", "H (K in)", "I", "E", "top_k", "activation", "routing", "triton formats"], rows)


def _device_arg(p: argparse.ArgumentParser, args) -> torch.device:
    if args.device is None:
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    try:
        dev = torch.device(args.device)
    except (RuntimeError, ValueError):
        p.error(f"--device: not a device: {args.device!r}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device is visible")
    if dev.type not in ("cuda", "cpu"):
        p.error(f"--device must be cuda or cpu, got {args.device!r}")
    return dev


def cmd_bench(args) -> int:
    """Benchmark presets x formats x token counts against the peers; table, JSON and PNG."""
    import os

    from .bench.peers import PEER_NAMES
    from .bench.presets import DEFAULT_BENCH_PRESETS
    from .bench.runner import (CPU_TOKENS, DEFAULT_TOKENS, BenchOptions, print_results, run_bench, write_markdown,
                               write_results)
    from .bench.table import progress_bar
    from .config import Format

    p = args.parser
    if args.list_presets:
        _print_presets()
        return 0
    dev = _device_arg(p, args)
    cuda = dev.type == "cuda"
    presets = _resolve_presets(p, args, DEFAULT_BENCH_PRESETS if cuda else ("tiny",))
    fmts = _flatten(args.weight_format) or ([Format.BF16, Format.FP8_BLOCK] if cuda else [Format.BF16])
    bad = [f for f in fmts if not f.is_weight_format]
    if bad:
        p.error(f"--weight-format: {bad[0].value} is an activation format, not a weight format")
    act_fmt = None
    if args.act_format is not None:
        for f in fmts:
            if args.act_format not in f.allowed_activation_formats():
                p.error(f"--act-format {args.act_format.value} is not available with {f.value} weights "
                        f"(allowed: {', '.join(a.value for a in f.allowed_activation_formats())})")
        act_fmt = args.act_format
    dtype = _DTYPES[args.dtype] if args.dtype else (torch.bfloat16 if cuda else torch.float16)
    if args.peers:
        peers = [n for v in args.peers for n in _csv(v)]
        for n in peers:
            if n not in PEER_NAMES:
                p.error(f"--peers: unknown peer {n!r}; expected some of {', '.join(PEER_NAMES)}")
    else:
        peers = ["triton", "torch-grouped-mm", "sglang", "reference"]
    if args.compare_heuristic and "triton-heuristic" not in peers:
        peers.insert(peers.index("triton") + 1 if "triton" in peers else 0, "triton-heuristic")
    peers = list(dict.fromkeys(peers))
    if args.timing and not cuda:
        p.error("--timing applies to CUDA devices; a CPU run is timed with the wall clock")
    table = None
    if args.tuned_configs:
        from .backends.kernel_configs import load_tuned_configs

        try:
            table = load_tuned_configs(args.tuned_configs)
        except (OSError, ValueError) as exc:
            p.error(f"--tuned-configs: {exc}")
    tokens = args.tokens or list(DEFAULT_TOKENS if cuda else CPU_TOKENS)
    opts = BenchOptions(presets=presets, weight_formats=fmts, tokens=tokens, peers=peers, device=str(dev), dtype=dtype,
                        act_format=act_fmt, tuned_table=table, sglang_path=args.sglang_path, timing=args.timing,
                        seed=args.seed, budget_s=args.budget_s, check=not args.no_check,
                        quick_ceilings=args.quick_ceilings)
    n_points = len(opts.cases()) * len(tokens) * len(peers)
    print(f"fusedmoe bench on {dev}: {len(presets)} shape(s) x {len(fmts)} format(s) x {len(tokens)} token counts x "
          f"{len(peers)} peers = {n_points} points" + ("" if cuda else " (CPU: wall clock, plumbing only)"))
    with progress_bar(n_points, "bench", enabled=not args.no_progress) as update:
        doc = run_bench(opts, progress=update)
    print_results(doc)
    os.makedirs(args.out, exist_ok=True)
    jpath = write_results(doc, os.path.join(args.out, "bench.json"))
    print(f"results: {jpath}, {write_markdown(doc, os.path.join(args.out, 'bench.md'))}")
    if not args.no_plot:
        try:
            from .bench.plot import plot_results

            print(f"plot: {plot_results(doc, os.path.join(args.out, 'bench.png'))}")
        except ImportError:
            print("plot skipped: matplotlib is not installed (pip install matplotlib)")
    bad = doc["summary"]["counts"]
    return 1 if bad.get("check_failed") else 0


TUNE_COLUMNS = ("preset", "weights", "T", "heuristic", "table", "tuned", "speedup", "vs table", "tried", "rejected",
                "errors")


def _kept(pt) -> str:
    """A tune point's candidate count, with the search space's own where a ``--max-candidates`` cut dropped some."""
    n = pt["candidates"] if isinstance(pt["candidates"], int) else len(pt["candidates"])
    offered = pt.get("offered", n)
    return f"{n} of {offered}" if offered > n else str(n)


def tune_rows(points) -> list:
    """``fusedmoe tune``'s summary rows (:data:`TUNE_COLUMNS`) from ``run_tune``'s points: µs of the heuristic, of
    what the active table served before the tune ('=': the heuristic) and of the winner; the winner's speedup over
    each ("kept": the fastest candidate, re-timed, was not ``--min-gain`` ahead of what the point ran before, which
    stays); candidates tried / kept, and "of N" where ``--max-candidates`` cut the N the search space offered."""
    def us(v):
        return "-" if v is None else f"{v:.1f}"

    def x(v):
        return "-" if v is None else f"{v:.2f}x"

    return [[pt["preset"], pt["weight_format"], str(pt["tokens"]), us(pt["heuristic_us"]),
             "=" if pt.get("table_us") is None else us(pt["table_us"]), us(pt["tuned_us"]), x(pt["speedup"]),
             x(pt.get("vs_table")) + (" kept" if pt.get("confirmed") is False else ""), f"{pt['tried']}/{_kept(pt)}",
             str(pt["rejected"]), str(pt["errors"])]
            for pt in points if "tokens" in pt and pt.get("status") != "budget"]


def cmd_tune(args) -> int:
    """Search kernel configs per shape and token bucket; write the tuned table (needs CUDA)."""
    import os

    from .backends.kernel_configs import DEFAULT_TABLE_PATH
    from .bench.presets import PRESETS, triton_weight_formats
    from .bench.table import progress_bar
    from .bench.tune import DEFAULT_TUNE_TOKENS, TuneOptions, describe_config, plan, run_tune

    p = args.parser
    if args.list_presets:
        _print_presets()
        return 0
    all_models = tuple(n for n in PRESETS if not n.startswith("tiny"))
    presets = _resolve_presets(p, args, all_models)
    tri = triton_weight_formats()
    fmts = _flatten(args.weight_format) or list(tri)
    bad = [f for f in fmts if f not in tri]
    if bad:
        p.error(f"--weight-format: the triton backend (what is tuned) has no {bad[0].value} weights; "
                f"choose from {', '.join(f.value for f in tri)}")
    tokens = args.tokens or list(DEFAULT_TUNE_TOKENS)
    out = args.out or DEFAULT_TABLE_PATH
    opts = TuneOptions(presets=presets, weight_formats=fmts, tokens=tokens, out=out, report=args.report,
                       exhaustive=args.exhaustive, fp8_fast_accum=args.fp8_fast_accum, max_candidates=args.max_candidates, budget_s=args.budget_s,
                       confirm_rounds=args.confirm_rounds, min_gain=args.min_gain,
                       seed=args.seed, device=args.device or "cuda",
                       jobs=args.jobs if args.jobs is not None else min(8, (os.cpu_count() or 2) // 2))
    if args.dry_run:
        cuda = torch.cuda.is_available()
        name = args.device_name or (torch.cuda.get_device_name() if cuda else "NVIDIA H200")
        sms = torch.cuda.get_device_properties(0).multi_processor_count if cuda and not args.device_name else None
        pts = plan(opts, name, sms)
        total = 0
        rows = []
        for pt in pts:
            n = len(pt["candidates"])
            total += n
            rows.append([pt["preset"], pt["weight_format"], str(pt["tokens"]), str(pt["bucket"]), _kept(pt),
                         "skipped" if pt.get("skip") else describe_config(pt["candidates"][0].config) + "  (heuristic)"])
        _table(f"tune plan for {name}: {len(pts)} points, {total} candidates",
               ["preset", "weights", "T", "bucket", "candidates", "first candidate"], rows)
        skips = dict.fromkeys(f"  skipped {pt['preset']}/{pt['weight_format']}: {pt['skip']}" for pt in pts if pt.get("skip"))
        for line in skips:
            print(line)
        if args.verbose:
            for pt in pts:
                for c in pt["candidates"]:
                    print(f"{pt['preset']}/{pt['weight_format']} T={pt['tokens']} [{c.varies}] {describe_config(c.config)}")
        print(f"would write: {out}")
        return 0
    dev = _device_arg(p, args)
    if dev.type != "cuda":
        p.error("tune needs a CUDA GPU (it times kernels on the device it tunes for); "
                "use --dry-run to print the search space on this machine")
    target_dir = os.path.dirname(os.path.abspath(out))
    while not os.path.exists(target_dir):
        target_dir = os.path.dirname(target_dir)
    if not os.access(target_dir, os.W_OK):
        p.error(f"cannot write {out}; pass --out PATH (a file the triton backend can be pointed at)")
    n_cand = sum(len(pt["candidates"]) for pt in plan(opts, torch.cuda.get_device_name(dev),
                                                          torch.cuda.get_device_properties(dev).multi_processor_count))
    print(f"fusedmoe tune on {torch.cuda.get_device_name(dev)}: {len(presets)} shape(s) x {len(fmts)} format(s) x "
          f"{len(tokens)} token counts, {n_cand} candidates; table -> {out}")
    with progress_bar(n_cand, "tune", enabled=not args.no_progress) as update:
        res = run_tune(opts, progress=update)
    _table("tuned vs heuristic and vs the table's entry (µs per call, CUDA-graph replay; table '=': the heuristic)",
           list(TUNE_COLUMNS), tune_rows(res["points"]))
    print(f"table: {res['table']}" + (f"  report: {res['report']}" if res["report"] else ""))
    return 0


def cmd_check(args) -> int:
    """Correctness sweep of every backend against the reference on this device."""
    import json

    from . import backends as be
    from .bench.check import print_check, run_check
    from .bench.table import progress_bar

    p = args.parser
    dev = _device_arg(p, args)
    names = [n for v in (args.backends or []) for n in _csv(v)] or None
    if names:
        for n in names:
            if n not in be.available():
                p.error(f"--backends: unknown backend {n!r}; available: {', '.join(be.available())}")
    acts = _flatten(args.activations) or None
    fmts = _flatten(args.formats) or None
    meths = _flatten(args.routings) or None
    if args.quick:
        from .config import Activation as _A, RoutingMethod as _R

        acts = acts or [_A.SWIGLU, _A.SWIGLU_OAI, _A.RELU2]
        meths = meths or [_R.RENORMALIZE_NAIVE, _R.DEEPSEEK_V3, _R.LLAMA4, _R.MINIMAX2]
    if fmts:
        bad = [f for f in fmts if not f.is_weight_format]
        if bad:
            p.error(f"--formats: {bad[0].value} is an activation format, not a weight format")
    dtype = _DTYPES[args.dtype] if args.dtype else None
    from .bench.check import WEIGHT_FORMATS
    from .config import Activation, RoutingMethod

    n_acts = len(acts or list(Activation))
    n_fmts = len(fmts or WEIGHT_FORMATS)
    n_meth = len(meths or list(RoutingMethod))
    total = n_acts * n_fmts * n_meth if args.full else n_acts * n_fmts + n_meth
    with progress_bar(total, "check", enabled=not args.no_progress) as update:
        res = run_check(dev, backends=names, activations=acts, formats=fmts, routings=meths, full=args.full,
                        dtype=dtype, seed=args.seed, progress=update)
    failed = print_check(res)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1, default=str)
            f.write("\n")
        print(f"results: {args.json}")
    return 1 if failed else 0


def build_parser() -> argparse.ArgumentParser:
    """The ``fusedmoe`` argument parser (subcommands info, demo, bench, tune, check)."""
    from .bench.presets import DEFAULT_BENCH_PRESETS
    from .config import Activation, Format, RoutingMethod

    p = argparse.ArgumentParser(prog="fusedmoe", description="fused Mixture-of-Experts kernels")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("info", help="versions, device, backends and what each supports").set_defaults(fn=cmd_info)
    d = sub.add_parser("demo", help="a Nemotron-shaped MoE layer through the auto backend, checked")
    d.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    d.add_argument("--small", action="store_true", help="the scaled-down shape even on a GPU")
    d.set_defaults(fn=cmd_demo)

    b = sub.add_parser("bench", help="roofline-aware benchmark against the peers (table, JSON, PNG)",
                       description="Times the routed experts of model-shaped MoE layers for our triton backend and "
                                   "the peers in one process, against ceilings measured in the same run.")
    _add_shape_args(b, default_note="default on a GPU: " + ", ".join(DEFAULT_BENCH_PRESETS) + "; on a CPU: tiny")
    b.add_argument("--act-format", type=lambda t: _enum_value(Format, t, "format"), default=None,
                   help="activation format (default: the weight format's natural pairing)")
    b.add_argument("--peers", action="append", default=None, metavar="P[,P...]",
                   help="what to measure: triton, triton-heuristic, reference, torch-grouped-mm, sglang "
                        "(default: triton,torch-grouped-mm,sglang,reference)")
    b.add_argument("--compare-heuristic", action="store_true",
                   help="also measure triton with heuristic configs only (tuned vs heuristic)")
    b.add_argument("--tuned-configs", default=None, metavar="FILE",
                   help="tuned-config JSON for the triton peer instead of the shipped table")
    b.add_argument("--sglang-path", default=None, metavar="DIR",
                   help="directory holding sglang/ sources (default: the installed sglang package)")
    b.add_argument("--device", default=None, help="cuda or cpu (default: cuda if available)")
    b.add_argument("--dtype", choices=sorted(_DTYPES), default=None,
                   help="hidden-state dtype (default bf16 on a GPU, fp16 on a CPU: the interpreter's bf16 dot is wrong)")
    b.add_argument("--timing", choices=("graph", "events"), default=None,
                   help="graph: CUDA-graph replay (default); events: one call per CUDA-event pair, L2 flushed")
    b.add_argument("--out", default="bench_results", help="directory for bench.json, bench.md (Markdown tables) and bench.png (default ./bench_results)")
    b.add_argument("--no-plot", action="store_true", help="do not write the PNG plot")
    b.add_argument("--no-check", action="store_true", help="skip the correctness check before timing")
    b.add_argument("--budget-s", type=_positive_float, default=None,
                   help="stop starting new points after this many seconds (the rest is listed as skipped)")
    b.add_argument("--quick-ceilings", action="store_true", help="fewer repetitions of the ceiling measurements (same sizes: smaller ones under-measure)")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--no-progress", action="store_true", help="no progress bar")
    b.set_defaults(fn=cmd_bench, parser=b)

    t = sub.add_parser("tune", help="search kernel configs on this GPU and write the tuned table",
                       description="Searches block sizes, warps, stages and swap-AB per shape and token bucket, "
                                   "validating every candidate against the reference before timing it.")
    _add_shape_args(t, default_note="default: every model preset")
    t.add_argument("--out", default=None, metavar="FILE",
                   help="tuned table to merge into (default: the table the package loads automatically)")
    t.add_argument("--report", default=None, metavar="FILE", help="also write every candidate's result as JSON")
    t.add_argument("--dry-run", action="store_true", help="print the search space and exit (works without a GPU)")
    t.add_argument("--device-name", default=None, help="--dry-run: device whose heuristic to start from (default: this GPU, else NVIDIA H200)")
    t.add_argument("--verbose", action="store_true", help="--dry-run: list every candidate")
    t.add_argument("--exhaustive", action="store_true", help="grid of block_n x block_k x warps x stages per GEMM instead of single steps")
    t.add_argument("--fp8-fast-accum", action="store_true",
                   help="also try FP8 accumulation in the tensor cores (FP8 per-tensor / per-channel): faster prefill, "
                        "2.3-2.8x the RMS error of the default path (H200, K 2048); the tuned table then changes results")
    t.add_argument("--max-candidates", type=_positive_int, default=None, help="at most this many candidates per point")
    t.add_argument("--budget-s", type=_positive_float, default=None, help="stop trying new candidates after this many seconds")
    t.add_argument("--confirm-rounds", type=_nonnegative_int, default=2,
                   help="re-time the fastest candidate and what the point ran before (the table's entry, else the "
                        "heuristic) this many more times each, in turns, before replacing it (default 2; 0: one timing)")
    t.add_argument("--min-gain", type=_fraction, default=0.02,
                   help="the fastest candidate replaces what the point ran before only this far ahead on the median "
                        "(default 0.02: 2 %%)")
    t.add_argument("--jobs", type=int, default=None,
                   help="processes compiling candidates ahead of timing (default: min(8, CPUs / 2); 0 or 1: none)")
    t.add_argument("--device", default=None, help="the CUDA device to tune (default: cuda)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--no-progress", action="store_true", help="no progress bar")
    t.set_defaults(fn=cmd_tune, parser=t)

    c = sub.add_parser("check", help="correctness sweep of every backend against the reference on this device")
    c.add_argument("--device", default=None, help="cuda or cpu (default: cuda if available)")
    c.add_argument("--backends", action="append", default=None, metavar="B[,B...]", help="backends (default: all)")
    c.add_argument("--activations", type=_enum_list(Activation, "activation"), action="append", default=None,
                   metavar="A[,A...]", help="activations (default: all)")
    c.add_argument("--formats", type=_enum_list(Format, "format"), action="append", default=None, metavar="F[,F...]",
                   help="weight formats (default: all)")
    c.add_argument("--routings", type=_enum_list(RoutingMethod, "routing method"), action="append", default=None,
                   metavar="R[,R...]", help="routing methods (default: all)")
    c.add_argument("--full", action="store_true", help="the whole product activations x formats x routings")
    c.add_argument("--quick", action="store_true",
                   help="activations swiglu, swiglu_oai, relu2 and routings renormalize_naive, deepseek_v3, llama4, "
                        "minimax2 unless given (about 1 min on a CPU with TRITON_INTERPRET=1)")
    c.add_argument("--dtype", choices=sorted(_DTYPES), default=None, help="hidden-state dtype (default bf16 GPU, fp16 CPU)")
    c.add_argument("--json", default=None, metavar="FILE", help="write the rows as JSON")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--no-progress", action="store_true", help="no progress bar")
    c.set_defaults(fn=cmd_check, parser=c)
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
