"""Expert-parallel and tensor-parallel scaling of one MoE layer: tokens/s and per-layer latency
versus the number of ranks. Documentation: benchmarks/DISTRIBUTED.md.

Run once per world size, appending to one results file, then summarize:

    torchrun --nproc-per-node 1 benchmarks/bench_distributed.py --model deepseek-v3 --out dist.jsonl
    torchrun --nproc-per-node 2 benchmarks/bench_distributed.py --model deepseek-v3 --out dist.jsonl
    torchrun --nproc-per-node 4 benchmarks/bench_distributed.py --model deepseek-v3 --out dist.jsonl
    torchrun --nproc-per-node 8 benchmarks/bench_distributed.py --model deepseek-v3 --out dist.jsonl
    python benchmarks/bench_distributed.py --summarize dist.jsonl

CUDA (NCCL, one GPU per rank, LOCAL_RANK) when a GPU is visible, otherwise CPU (gloo: a smoke
test of the script, e.g. ``--model tiny``). Every rank builds only its own share of the weights
(random, from float: ``--format`` quantizes at load).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from typing import Dict, List

import torch
import torch.distributed as dist

import fusedmoe as fm
from fusedmoe.bench.presets import PRESETS, make_weights
from fusedmoe.distributed import ExpertParallelMoE, TensorParallelMoE, expert_partition, intermediate_shards

F = fm.Format


# the checkpoint format each model ships in (the default of --format; others: bf16)
CHECKPOINT_FORMAT = {"deepseek-v3": "fp8_block", "minimax-m2": "fp8_block", "qwen3-235b-a22b": "fp8_block"}
# the model shapes: the package's presets (fusedmoe.bench.presets, docs/models.md), full models only
MODELS = sorted(n for n, p in PRESETS.items() if p.tp == 1)


def _csv(s: str, conv=str) -> List:
    return [conv(v) for v in s.split(",") if v.strip()]


def _parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="deepseek-v3", choices=MODELS,
                   help="a model preset of fusedmoe.bench.presets (`fusedmoe bench --list-presets`)")
    p.add_argument("--num-experts", type=int, help="override the model's expert count (e.g. to fit one GPU)")
    p.add_argument("--format", help="weight format (default: the model's checkpoint format)",
                   choices=[f.value for f in F if f.is_weight_format])
    p.add_argument("--modes", default="ep,tp", help="comma list of ep, tp")
    p.add_argument("--dispatch", default="auto,all_to_all,all_gather,all_reduce",
                   help="EP variants to time (comma list of auto, all_to_all, all_gather, all_reduce)")
    p.add_argument("--tokens", default="1,8,32,128,512,2048",
                   help="tokens per rank (EP all_to_all/all_gather/auto: each rank its own batch; "
                        "EP all_reduce and TP: the replicated batch every rank holds)")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--backend", default="auto")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--all-gather-max-tokens", type=int, default=None,
                   help="threshold of dispatch=auto (default: the library's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="append one JSON line per measurement (rank 0)")
    p.add_argument("--summarize", metavar="JSONL", help="print the scaling tables of a results file and exit")
    return p.parse_args(argv)


# --- setup ---------------------------------------------------------------------------------------

def _init():
    if torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        device, backend = torch.device("cuda", local), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    if "RANK" not in os.environ:  # plain `python bench_distributed.py`: a world of one
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29531")
        os.environ.update(RANK="0", WORLD_SIZE="1")
    dist.init_process_group(backend, device_id=device if device.type == "cuda" else None)
    return device


def _random_weights(m, fmt: F, n_experts: int, i_rows: int, device, seed: int) -> fm.ExpertWeights:
    """Random experts of preset ``m``: ``n_experts`` of them with ``i_rows`` intermediate rows
    (this rank's experts or TP shard), built like ``fusedmoe bench``'s weights."""
    return make_weights(replace(m, experts=n_experts, intermediate=i_rows), fmt, device=device, seed=seed)


# --- timing --------------------------------------------------------------------------------------

def _time(fn, device, warmup: int, iters: int) -> List[float]:
    """Per-iteration seconds of the slowest rank: every iteration starts after a barrier; each
    rank times its own call (CUDA events / wall clock); the max over ranks is the layer latency."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        dist.barrier()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    t = torch.tensor(times, dtype=torch.float64, device=device if device.type == "cuda" else "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def _env(device) -> dict:
    commit = None
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=os.path.dirname(os.path.abspath(__file__)), timeout=5).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        pass
    import triton

    return {"timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "host": platform.node(), "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "torch": torch.__version__, "triton": triton.__version__, "fusedmoe": fm.__version__, "commit": commit,
            "dist_backend": dist.get_backend()}


# --- the runs ------------------------------------------------------------------------------------

def run(args) -> None:
    device = _init()
    rank, W = dist.get_rank(), dist.get_world_size()
    m = PRESETS[args.model]
    if args.num_experts:
        m = replace(m, experts=args.num_experts)
    fmt = F(args.format or CHECKPOINT_FORMAT.get(m.name, "bf16"))
    act = m.activation
    routing = m.routing_config()
    dtype = getattr(torch, args.dtype)
    env = _env(device)
    modes = _csv(args.modes)
    dispatches = _csv(args.dispatch)
    token_list = _csv(args.tokens, int)
    ag_max = args.all_gather_max_tokens
    records = []
    gen = torch.Generator(device=device).manual_seed(args.seed + 1000 + rank)
    bias = torch.randn(m.experts, device=device) / 8 if routing.uses_bias else None

    def inputs(T, replicated):
        g = torch.Generator(device=device).manual_seed(args.seed + 7) if replicated else gen
        x = torch.randn(T, m.hidden, generator=g, device=device).to(dtype)
        logits = torch.randn(T, m.experts, generator=g, device=device)
        return x, logits

    def record(mode, dispatch, chosen, T, global_T, times, backend):
        med = statistics.median(times)
        q = sorted(times)
        rec = {**env, "world_size": W, "mode": mode, "dispatch": dispatch, "dispatch_used": chosen,
               "model": m.name, "num_experts": m.experts, "top_k": m.top_k, "hidden": m.hidden,
               "intermediate": m.intermediate, "activation": m.activation.value, "routing": m.routing.value,
               "format": fmt.value,
               "dtype": args.dtype, "backend": backend, "tokens_per_rank": T, "global_tokens": global_T,
               "latency_ms": med * 1e3, "p10_ms": q[len(q) // 10] * 1e3, "p90_ms": q[(len(q) * 9) // 10] * 1e3,
               "tokens_per_s": global_T / med if med > 0 else None, "iters": len(times)}
        records.append(rec)
        if rank == 0:
            print(f"[{mode:2s} W={W} {dispatch:10s}->{chosen or '-':10s}] T/rank={T:6d} global={global_T:7d} "
                  f"{med * 1e3:9.3f} ms  {rec['tokens_per_s'] or 0:12.0f} tok/s", flush=True)

    if "ep" in modes:
        off, n = expert_partition(m.experts, W)[rank]
        local = _random_weights(m, fmt, n, m.intermediate, device, args.seed + 17 * rank)
        kw = {} if ag_max is None else {"all_gather_max_tokens": ag_max}
        for d in dispatches:
            ep = ExpertParallelMoE(local, routing=routing, activation=act, num_experts=m.experts, dispatch=d,
                                   backend=args.backend, **kw)
            for T in token_list:
                replicated = d == "all_reduce"
                x, logits = inputs(T, replicated)
                with torch.inference_mode():
                    out = ep(x, logits, bias)
                    if not bool(torch.isfinite(out).all()):
                        raise RuntimeError(f"EP {d} T={T}: non-finite output")
                    times = _time(lambda: ep(x, logits, bias), device, args.warmup, args.iters)
                global_T = T if replicated else T * W
                chosen = ep.last_dispatch
                record("ep", d, chosen, T, global_T, times, ep.experts.backend)
            del ep
        del local
        if device.type == "cuda":
            torch.cuda.empty_cache()

    if "tp" in modes:
        a, b = intermediate_shards(m.intermediate, W)[rank]
        shard = _random_weights(m, fmt, m.experts, b - a, device, args.seed + 31 * rank)
        tp = TensorParallelMoE(shard, routing=routing, activation=act, backend=args.backend)
        for T in token_list:
            x, logits = inputs(T, True)
            with torch.inference_mode():
                out = tp(x, logits, bias)
                if not bool(torch.isfinite(out).all()):
                    raise RuntimeError(f"TP T={T}: non-finite output")
                times = _time(lambda: tp(x, logits, bias), device, args.warmup, args.iters)
            record("tp", "all_reduce", "all_reduce", T, T, times, tp.experts.backend)

    if rank == 0 and args.out:
        with open(args.out, "a") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
        print(f"appended {len(records)} records to {args.out}")
    dist.barrier()
    dist.destroy_process_group()


# --- summary -------------------------------------------------------------------------------------

def summarize(path: str) -> None:
    """Markdown tables: per (model, format, mode, dispatch, tokens per rank), latency and tokens/s
    per world size, and the speedup of tokens/s over the smallest world size measured."""
    with open(path) as f:
        recs = [json.loads(line) for line in f if line.strip()]
    if not recs:
        print(f"{path}: no records")
        return
    latest = {}
    for r in recs:  # the latest record per configuration wins
        key = (r["model"], r["format"], r["mode"], r["dispatch"], r["tokens_per_rank"], r["world_size"])
        latest[key] = r
    worlds = sorted({k[-1] for k in latest})
    groups: Dict[tuple, Dict[int, dict]] = {}
    for k, r in latest.items():
        groups.setdefault(k[:-1], {})[k[-1]] = r
    by_table: Dict[tuple, List[tuple]] = {}
    for k in sorted(groups, key=lambda k: (k[0], k[1], k[2], k[3], k[4])):
        by_table.setdefault(k[:4], []).append(k)
    for (model, fmt, mode, disp), keys in by_table.items():
        any_rec = next(iter(groups[keys[0]].values()))
        print(f"\n### {model} ({fmt}, {mode.upper()}, dispatch={disp}) — {any_rec['device']}, "
              f"torch {any_rec['torch']}, commit {any_rec['commit']}\n")
        head = ["tokens/rank"] + [f"W={w} ms (tok/s)" for w in worlds] + [f"speedup W={worlds[-1]}"]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for k in keys:
            row = [str(k[4])]
            per = groups[k]
            for w in worlds:
                r = per.get(w)
                if r is None:
                    row.append("—")
                    continue
                used = f" [{r['dispatch_used']}]" if disp == "auto" else ""  # what auto chose
                row.append(f"{r['latency_ms']:.3f} ({r['tokens_per_s']:.0f}){used}")
            base = per.get(min(per))
            top = per.get(worlds[-1])
            row.append("—" if top is None or base is None or not base["tokens_per_s"]
                       else f"{top['tokens_per_s'] / base['tokens_per_s']:.2f}x")
            print("| " + " | ".join(row) + " |")


def main(argv=None) -> int:
    args = _parse(argv)
    if args.summarize:
        summarize(args.summarize)
        return 0
    if args.all_gather_max_tokens is not None and args.all_gather_max_tokens < 0:
        print("--all-gather-max-tokens must be >= 0", file=sys.stderr)
        return 2
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
