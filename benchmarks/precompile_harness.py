"""Compile fusedmoe's Triton kernels for every point of the shared harness plan, in parallel.

    PYTHONPATH=src python3 benchmarks/precompile_harness.py [--quick] [--jobs 8] [--models dsv3,...]
        [--dtypes fp8_tensor,...] [--tokens 1,8,...]

The harness (``.peers/run_peers.py``) pre-compiles SGLang's kernels in parallel processes but
compiles a plugin's kernels lazily inside its single measuring process, where a few hundred
Triton compilations (one per kernel config x token-count specialization) would eat most of its
time budget. This script runs the plugin peers' ``run`` once per (case, token count) of the plan in
``--jobs`` spawned processes, so the kernels land in Triton's on-disk cache and the harness only
loads them. Weights are uninitialised (``torch.empty``): only the compiled code matters here, no
output is checked. Run it in the same environment (same ``TRITON_CACHE_DIR``) as the harness.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import os
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from types import SimpleNamespace

HERE = os.path.dirname(os.path.abspath(__file__))
PEERS_DIR = os.path.join(os.path.dirname(HERE), ".peers")


def _case(model: str, act: str, dtype: str, dims: dict):
    import torch

    dev = torch.device("cuda")
    E, H, I, k = dims["E"], dims["H"], dims["I"], dims["topk"]
    n1 = 2 * I if act == "swiglu" else I
    bf = torch.bfloat16
    w1 = torch.empty(E, n1, H, dtype=bf, device=dev)
    w2 = torch.empty(E, H, I, dtype=bf, device=dev)
    ns = SimpleNamespace(model=model, E=E, H=H, I=I, top_k=k, N1=n1, activation=act, dtype=dtype, device=dev,
                         act_dtype=bf, w1=w1, w2=w2, w1_q=None, w2_q=None, w1_scale=None, w2_scale=None,
                         a1_scale=None, a2_scale=None)
    if dtype != "bf16":
        f8 = torch.float8_e4m3fn
        ns.w1_q = torch.empty(E, n1, H, dtype=f8, device=dev)
        ns.w2_q = torch.empty(E, H, I, dtype=f8, device=dev)
        ns.w1, ns.w2 = None, None  # the plugin reads the quantized tensors only
        if dtype == "fp8_tensor":
            ns.w1_scale, ns.w2_scale = torch.ones(E, device=dev), torch.ones(E, device=dev)
            ns.a1_scale, ns.a2_scale = torch.ones(1, device=dev), torch.ones(1, device=dev)
        elif dtype == "fp8_channel":
            ns.w1_scale, ns.w2_scale = torch.ones(E, n1, device=dev), torch.ones(E, H, device=dev)
        else:
            c = lambda n: (n + 127) // 128  # noqa: E731
            ns.w1_scale = torch.ones(E, c(n1), c(H), device=dev)
            ns.w2_scale = torch.ones(E, c(H), c(I), device=dev)
    return ns


def _work(model: str, act: str, dtype: str, dims: dict, tokens) -> str:
    import torch

    sys.path.insert(0, HERE)
    import harness_plugin

    t0 = time.perf_counter()
    try:
        case = _case(model, act, dtype, dims)
        # the plugin's peers the harness will run (harness_run.sh's PEERS), plain fusedmoe at least
        names = [n for n in os.environ.get("PEERS", "fusedmoe").split(",") if n in harness_plugin.PEERS]
        for name in names or ["fusedmoe"]:
            try:
                prepare, run = harness_plugin.PEERS[name](case)
            except NotImplementedError:  # e.g. the FP8 fast-accumulation variant on a BF16 case
                continue
            for M in tokens:
                if prepare is not None:
                    prepare(M)
                x = torch.randn(M, dims["H"], dtype=torch.bfloat16, device="cuda")
                ids = torch.rand(M, dims["E"], device="cuda").topk(dims["topk"], dim=1).indices.to(torch.int32)
                w = torch.softmax(torch.randn(M, dims["topk"], device="cuda"), dim=1)
                run(x, w, ids)
        torch.cuda.synchronize()
        return f"{model}/{act}/{dtype}: {len(tokens)} token counts in {time.perf_counter() - t0:.0f} s"
    except NotImplementedError as exc:
        return f"{model}/{act}/{dtype}: unsupported ({exc})"
    except Exception:
        return f"{model}/{act}/{dtype}: ERROR\n{traceback.format_exc(limit=3)}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the harness's --quick plan")
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--models", default=None, help="comma-separated harness model names")
    ap.add_argument("--dtypes", default=None, help="comma-separated harness dtypes (bf16, fp8_tensor, ...)")
    ap.add_argument("--tokens", default=None, help="comma-separated token counts (the plan's, filtered)")
    ap.add_argument("--peers-dir", default=PEERS_DIR)
    args = ap.parse_args(argv)
    sys.path.insert(0, args.peers_dir)
    import run_peers  # the harness: its plan and model table

    plan = run_peers.quick_plan() if args.quick else run_peers.full_plan()
    if args.models:
        keep = set(args.models.split(","))
        plan = [it for it in plan if it.model in keep]
    if args.dtypes:
        keep = set(args.dtypes.split(","))
        plan = [it for it in plan if it.dtype in keep]
    if args.tokens:
        keep_t = {int(t) for t in args.tokens.split(",")}
        plan = [dataclasses.replace(it, tokens=[t for t in it.tokens if t in keep_t]) for it in plan]
        plan = [it for it in plan if it.tokens]
    # the largest cases first, so they do not end up alone at the tail
    plan.sort(key=lambda it: -run_peers.MODELS[it.model]["E"] * run_peers.MODELS[it.model]["H"] * run_peers.MODELS[it.model]["I"])
    t0 = time.perf_counter()
    print(f"[precompile] {len(plan)} cases x up to {max(len(it.tokens) for it in plan)} token counts in {args.jobs} processes",
          flush=True)
    ctx = multiprocessing.get_context("spawn")
    failed = 0
    # a case whose weights did not fit beside the other processes' (CUDA out of memory: the full-size
    # FP8 cases of DeepSeek-V3 next to five others) is compiled again alone once the pool is done
    retry = []
    for jobs, items in ((args.jobs, plan), (1, retry)):
        if not items:
            continue
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as ex:
            futs = {ex.submit(_work, it.model, it.act, it.dtype, dict(run_peers.MODELS[it.model]), list(it.tokens)): it
                    for it in items}
            for f in as_completed(futs):
                msg = f.result()
                if "OutOfMemoryError" in msg and items is plan:
                    retry.append(futs[f])
                    print(f"[precompile] {futs[f].name}: out of GPU memory beside the other processes, "
                          "retried alone at the end", flush=True)
                    continue
                failed += "ERROR" in msg
                print(f"[precompile] {msg}", flush=True)
    print(f"[precompile] done in {time.perf_counter() - t0:.0f} s, {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
