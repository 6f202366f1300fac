"""Expert and tensor parallelism over torch.distributed (fusedmoe.distributed).

CPU: one gloo group of 2 and one of 4 processes (``torch.multiprocessing`` spawn, ``file://``
rendezvous in a temporary directory, no network ports), plus world size 1 in this process. Each
group runs every case of ``_CASES`` once; every rank compares its own output with a
single-process reference (``fm.fused_moe`` / ``fm.FusedMoE`` on the full weights, reference
backend) on the same inputs and reports back; the tests below read the reports.
Shard exactness (dequantized TP shards equal the slices of the full weights, every format) needs
no process group and runs in-process. GPU: the same cases over NCCL at world size 1 (and 2 when
two GPUs exist), marked ``gpu``.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import traceback
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

import fusedmoe as fm
from fusedmoe.weights.expert_weights import default_alignment, round_up
from fusedmoe.distributed import (ExpertParallelMoE, TensorParallelMoE, choose_dispatch, expert_partition,
                                  intermediate_shards, shard_expert_weights, shard_float_weights)

A, F, RM = fm.Activation, fm.Format, fm.RoutingMethod
E, H, K = 8, 128, 2
_TOKENS = [5, 0, 7, 3]            # tokens per rank (rank 1 has none)
_CASES: dict = {}                 # name -> (fn, worlds)


def case(*worlds):
    def deco(fn):
        _CASES[fn.__name__] = (fn, worlds or (1, 2, 4))
        return fn
    return deco


# --- shared helpers (run inside the workers) --------------------------------------------------

def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _float_weights(act, I, seed=0, bias=False, n_experts=E):
    g = _gen(seed)
    M = 2 * I if act.is_gated else I
    w13 = torch.randn(n_experts, M, H, generator=g) / 8
    w2 = torch.randn(n_experts, H, I, generator=g) / 8
    b13 = torch.randn(n_experts, M, generator=g) / 4 if bias else None
    b2 = torch.randn(n_experts, H, generator=g) / 4 if bias else None
    return w13, w2, b13, b2


def _weights(act, fmt, I=48, seed=0, device="cpu", **kw):
    w13, w2, _, _ = _float_weights(act, I, seed)
    return fm.ExpertWeights.from_float(w13, w2, activation=act, format=fmt, **kw).to(device)


def _rank_inputs(ctx, seed, dtype=torch.float32, *, tokens=None, same=False, avoid_rank=None):
    """Every rank's (hidden, logits, topk); identical on all ranks (same seed), this rank's
    returned. ``same``: all ranks get rank 0's tokens (replicated inputs). ``avoid_rank``: routed
    ids never hit that rank's experts (it receives no tokens)."""
    g = _gen(seed)
    W, dev = ctx["world"], ctx["device"]
    counts = tokens or [_TOKENS[r % len(_TOKENS)] for r in range(W)]
    per_rank = []
    for r in range(W):
        T = counts[r]
        x = torch.randn(T, H, generator=g).to(dtype)
        logits = torch.randn(T, E, generator=g)
        allowed = torch.arange(E)
        if avoid_rank is not None:
            lo, n = expert_partition(E, W)[avoid_rank]
            allowed = allowed[(allowed < lo) | (allowed >= lo + n)]
        ids = torch.stack([allowed[torch.randperm(len(allowed), generator=g)[:K]] for _ in range(T)]) \
            if T else torch.empty(0, K, dtype=torch.int64)
        wts = torch.rand(T, K, generator=g) + 0.1
        per_rank.append((x.to(dev), logits.to(dev), fm.TopK(ids.to(torch.int32).to(dev), wts.to(dev))))
    return per_rank[0 if same else ctx["rank"]]


def _errors(out, ref):
    d = (out.float() - ref.float())
    scale = max(ref.float().abs().max().item() if ref.numel() else 0.0, 1e-6)
    if not d.numel():
        return 0.0, 0.0
    return d.abs().max().item() / scale, d.pow(2).mean().sqrt().item() / scale


_ROUTING = fm.RoutingConfig(RM.RENORMALIZE, top_k=K)
_TOL_FLOOR = {"max": 0.0, "rms": 0.0}  # raised on GPUs (Triton kernels vs the same kernels, other tiles)


def _ref(ctx, full, act, x, *, topk=None, logits=None, bias=None, routing=_ROUTING):
    """The single-process layer on the full weights, same device: the reference backend on CPU,
    the auto backend (the Triton kernels where they support the format) on a GPU."""
    layer = fm.FusedMoE(full, routing=routing, activation=act, backend=ctx["ref_backend"])
    return layer.forward_routed(x, topk) if topk is not None else layer(x, logits, bias)


def _close(out, ref, tol, rms=None):
    tol = max(tol, _TOL_FLOOR["max"])
    if rms is not None or _TOL_FLOOR["rms"]:
        rms = max(rms or 0.0, _TOL_FLOOR["rms"])
    if out.shape != ref.shape or out.dtype != ref.dtype:
        return {"ok": False, "detail": f"shape/dtype {tuple(out.shape)} {out.dtype} vs {tuple(ref.shape)} {ref.dtype}"}
    mx, rm = _errors(out, ref)
    ok = mx <= tol and (rms is None or rm <= rms)
    return {"ok": ok, "detail": f"max_rel={mx:.2e} rms_rel={rm:.2e} (tol {tol}, rms {rms})"}


def _all(*results):
    return {"ok": all(r["ok"] for r in results), "detail": " | ".join(r["detail"] for r in results)}


def _raises(fn, exc, text):
    try:
        fn()
    except exc as e:
        return {"ok": text in str(e), "detail": f"{type(e).__name__}: {e}"[:400]}
    except Exception as e:  # noqa: BLE001 - report the wrong type
        return {"ok": False, "detail": f"expected {exc.__name__}, got {type(e).__name__}: {e}"[:400]}
    return {"ok": False, "detail": f"expected {exc.__name__}, nothing raised"}


# --- expert parallel cases ----------------------------------------------------------------------

def _ep_case(ctx, fmt, act, dispatch, routed, dtype=torch.float32, tol=1e-5, seed=1, routing=_ROUTING,
             bias=None, **ep_kw):
    full = _weights(act, fmt, seed=seed, device=ctx["device"])
    x, logits, topk = _rank_inputs(ctx, seed + 100, dtype, same=dispatch == "all_reduce")
    ep = ExpertParallelMoE.from_global_weights(full, routing=routing, activation=act, dispatch=dispatch, **ep_kw)
    b = None if bias is None else bias.to(ctx["device"])
    if routed:
        out, ref = ep.forward_routed(x, topk), _ref(ctx, full, act, x, topk=topk, routing=routing)
    else:
        out, ref = ep(x, logits, b), _ref(ctx, full, act, x, logits=logits, bias=b, routing=routing)
    res = _close(out, ref, tol)
    if dispatch != "auto" and ep.last_dispatch != dispatch:
        res = {"ok": False, "detail": f"used {ep.last_dispatch}, asked {dispatch}"}
    return res


def _make_ep_cases():
    # the main matrix: BF16 and FP8 block, gated and not, both token-moving variants, routed
    # and from logits; fp32 hidden, so a lost or doubled contribution cannot hide in rounding
    for fmt in (F.BF16, F.FP8_BLOCK):
        for act in (A.SWIGLU, A.RELU2):
            for dispatch in ("all_to_all", "all_gather"):
                for routed in (True, False):
                    name = f"ep_{fmt.name.lower()}_{act.name.lower()}_{dispatch}_{'routed' if routed else 'logits'}"

                    def fn(ctx, fmt=fmt, act=act, dispatch=dispatch, routed=routed):
                        return _ep_case(ctx, fmt, act, dispatch, routed)
                    fn.__name__ = name
                    case()(fn)


_make_ep_cases()


@case()
def ep_all_reduce_replicated_bf16_hidden(ctx):
    # bf16 hidden: every rank's partial is rounded to bf16 once before the fp32 sum
    return _ep_case(ctx, F.BF16, A.SWIGLU, "all_reduce", routed=False, dtype=torch.bfloat16, tol=2e-2)


@case()
def ep_all_reduce_replicated_fp8_block_routed(ctx):
    return _ep_case(ctx, F.FP8_BLOCK, A.RELU2, "all_reduce", routed=True)


@case()
def ep_all_to_all_bf16_hidden(ctx):
    return _ep_case(ctx, F.BF16, A.RELU2, "all_to_all", routed=True, dtype=torch.bfloat16, tol=2e-2)


@case()
def ep_fp8_tensor_static_scales(ctx):
    # static activation scales (deployment): the result does not depend on which rows a rank holds
    full = _weights(A.SWIGLU, F.FP8_TENSOR, device=ctx["device"], input_scale=0.02, intermediate_scale=0.01)
    x, _, topk = _rank_inputs(ctx, 7)
    ep = ExpertParallelMoE.from_global_weights(full, routing=_ROUTING, activation=A.SWIGLU, dispatch="all_to_all")
    return _close(ep.forward_routed(x, topk), _ref(ctx, full, A.SWIGLU, x, topk=topk), 1e-5)


@case()
def ep_minimax2_routing_bias_and_packed_topk(ctx):
    routing = fm.RoutingConfig(RM.MINIMAX2, top_k=K)
    bias = torch.randn(E, generator=_gen(3)) / 4
    r1 = _ep_case(ctx, F.BF16, A.SWIGLU, "all_to_all", routed=False, routing=routing, bias=bias)
    full = _weights(A.SWIGLU, F.BF16, device=ctx["device"])
    x, _, topk = _rank_inputs(ctx, 11)
    ep = ExpertParallelMoE.from_global_weights(full, routing=routing, activation=A.SWIGLU, dispatch="all_gather")
    rounded = fm.TopK(topk.ids, topk.weights.bfloat16().float())   # the packed form carries bf16 weights
    r2 = _close(ep.forward_routed(x, fm.pack_topk(topk.ids, topk.weights)),
                _ref(ctx, full, A.SWIGLU, x, topk=rounded, routing=routing), 1e-5)
    return _all(r1, r2)


@case()
def ep_llama4_weight_on_input(ctx):
    return _ep_case(ctx, F.BF16, A.SWIGLU, "all_to_all", routed=False, routing=fm.RoutingConfig(RM.LLAMA4, top_k=1))


@case()
def ep_auto_rule_picks_by_total_tokens(ctx):
    full = _weights(A.SWIGLU, F.BF16, device=ctx["device"])
    x, _, topk = _rank_inputs(ctx, 5)
    ref = _ref(ctx, full, A.SWIGLU, x, topk=topk)
    total = sum(_TOKENS[i % len(_TOKENS)] for i in range(ctx["world"]))
    results = []
    for thr, want in ((10_000, "all_gather"), (0, "all_to_all")):
        ep = ExpertParallelMoE.from_global_weights(full, routing=_ROUTING, activation=A.SWIGLU,
                                                   all_gather_max_tokens=thr)
        r = _close(ep.forward_routed(x, topk), ref, 1e-5)
        ok = ep.last_dispatch == want == choose_dispatch(total, all_gather_max_tokens=thr)
        results.append({"ok": r["ok"] and ok, "detail": f"{ep.last_dispatch} (want {want}) {r['detail']}"})
    return _all(*results)


@case()
def ep_rank_receives_no_tokens(ctx):
    # routed ids avoid the last rank's experts: it receives nothing in all_to_all
    full = _weights(A.RELU2, F.BF16, device=ctx["device"])
    x, _, topk = _rank_inputs(ctx, 9, avoid_rank=ctx["world"] - 1 if ctx["world"] > 1 else None)
    ref = _ref(ctx, full, A.RELU2, x, topk=topk)
    out = []
    for d in ("all_to_all", "all_gather"):
        ep = ExpertParallelMoE.from_global_weights(full, routing=_ROUTING, activation=A.RELU2, dispatch=d)
        out.append(_close(ep.forward_routed(x, topk), ref, 1e-5))
    return _all(*out)


@case()
def ep_all_ranks_empty(ctx):
    full = _weights(A.SWIGLU, F.BF16, device=ctx["device"])
    x, logits, _ = _rank_inputs(ctx, 2, tokens=[0] * ctx["world"])
    res = []
    for d in ("all_to_all", "all_gather", "all_reduce"):
        ep = ExpertParallelMoE.from_global_weights(full, routing=_ROUTING, activation=A.SWIGLU, dispatch=d)
        out = ep(x, logits)
        res.append({"ok": tuple(out.shape) == (0, H), "detail": f"{d}: {tuple(out.shape)}"})
    return _all(*res)


@case(2)
def ep_triton_kernels_interpreted(ctx):
    # the fused Triton kernels (CPU: Triton's interpreter) behind the expert-parallel layer
    if ctx["device"].type == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        # tests/conftest.py sets it on machines without CUDA, and the spawned workers inherit it
        return {"ok": False, "detail": "TRITON_INTERPRET=1 is not set in the worker: the Triton case cannot run"}
    return _all(_ep_case(ctx, F.BF16, A.SWIGLU, "all_to_all", routed=True, backend="triton"),
                _ep_case(ctx, F.FP8_BLOCK, A.RELU2, "all_gather", routed=False, backend="triton", tol=2e-2))


@case(2, 4)
def ep_uneven_expert_counts(ctx):
    counts = [5, 3] if ctx["world"] == 2 else [3, 1, 2, 2]
    return _all(_ep_case(ctx, F.BF16, A.SWIGLU, "all_to_all", routed=True, expert_counts=counts),
                _ep_case(ctx, F.BF16, A.RELU2, "all_gather", routed=False, expert_counts=counts))


@case(2, 4)
def ep_negative_control_wrong_offset(ctx):
    # every rank builds its layer from the next rank's experts: the outputs must NOT match
    W, r = ctx["world"], ctx["rank"]
    full = _weights(A.SWIGLU, F.BF16, device=ctx["device"])
    off, n = expert_partition(E, W)[(r + 1) % W]
    ep = ExpertParallelMoE(full.slice_experts(off, n), routing=_ROUTING, activation=A.SWIGLU, num_experts=E,
                           dispatch="all_to_all")
    x, _, topk = _rank_inputs(ctx, 4)
    mx, _ = _errors(ep.forward_routed(x, topk), _ref(ctx, full, A.SWIGLU, x, topk=topk))
    return {"ok": mx > 0.05 or x.shape[0] == 0, "detail": f"max_rel={mx:.2e} (must be large)"}


@case()
def ep_error_local_weights_count(ctx):
    full = _weights(A.SWIGLU, F.BF16, device=ctx["device"])
    if ctx["world"] == 1:
        return _raises(lambda: ExpertParallelMoE(full, routing=_ROUTING, activation=A.SWIGLU, num_experts=E,
                                                 expert_counts=[E + 1]), ValueError, "sum to")
    return _raises(lambda: ExpertParallelMoE(full, routing=_ROUTING, activation=A.SWIGLU, num_experts=E),
                   ValueError, "local_weights holds 8")


@case(2, 4)
def ep_error_ranks_disagree(ctx):
    full = _weights(A.SWIGLU, F.BF16, device=ctx["device"])
    d = "all_to_all" if ctx["rank"] == 0 else "all_gather"
    return _raises(lambda: ExpertParallelMoE.from_global_weights(full, routing=_ROUTING, activation=A.SWIGLU,
                                                                 dispatch=d), ValueError, "disagree on dispatch")


@case(2, 4)
def ep_error_construction_fails_on_one_rank(ctx):
    # rank 0 passes the full expert set: it raises ValueError, the others RuntimeError (no hang)
    full = _weights(A.SWIGLU, F.BF16, device=ctx["device"])
    off, n = expert_partition(E, ctx["world"])[ctx["rank"]]
    local = full if ctx["rank"] == 0 else full.slice_experts(off, n)
    exc, text = (ValueError, "local_weights holds 8") if ctx["rank"] == 0 else (RuntimeError, "rank(s) [0] failed")
    return _raises(lambda: ExpertParallelMoE(local, routing=_ROUTING, activation=A.SWIGLU, num_experts=E), exc, text)


@case(2, 4)
def tp_error_construction_fails_on_one_rank(ctx):
    w = _weights(A.SWIGLU, F.BF16, device=ctx["device"])
    act = A.GEGLU if ctx["rank"] == 0 else A.SWIGLU           # rank 0: activation does not match
    exc, text = (ValueError, "prepared for") if ctx["rank"] == 0 else (RuntimeError, "rank(s) [0] failed")
    return _raises(lambda: TensorParallelMoE(w, routing=_ROUTING, activation=act), exc, text)


@case(2, 4)
def ep_error_bad_input_on_one_rank(ctx):
    # rank 0 passes a wrong hidden size: it raises ValueError, the others RuntimeError instead of
    # hanging; the next call (good input everywhere) still works
    full = _weights(A.SWIGLU, F.BF16, device=ctx["device"])
    ep = ExpertParallelMoE.from_global_weights(full, routing=_ROUTING, activation=A.SWIGLU, dispatch="all_to_all")
    x, _, topk = _rank_inputs(ctx, 3)
    if ctx["rank"] == 0:
        r = _raises(lambda: ep.forward_routed(x[:, :64], topk), ValueError, "hidden must be [T, H=128]")
    else:
        r = _raises(lambda: ep.forward_routed(x, topk), RuntimeError, "rank(s) [0] rejected")
    return _all(r, _close(ep.forward_routed(x, topk), _ref(ctx, full, A.SWIGLU, x, topk=topk), 1e-5))


@case(2, 4)
def ep_error_hidden_dtypes_differ(ctx):
    full = _weights(A.SWIGLU, F.BF16, device=ctx["device"])
    ep = ExpertParallelMoE.from_global_weights(full, routing=_ROUTING, activation=A.SWIGLU, dispatch="all_gather")
    x, _, topk = _rank_inputs(ctx, 3)
    x = x.bfloat16() if ctx["rank"] == 0 else x
    return _raises(lambda: ep.forward_routed(x, topk), ValueError, "hidden dtypes differ across ranks")


@case()
def ep_error_ids_out_of_range(ctx):
    full = _weights(A.SWIGLU, F.BF16, device=ctx["device"])
    ep = ExpertParallelMoE.from_global_weights(full, routing=_ROUTING, activation=A.SWIGLU, dispatch="all_gather")
    x, _, topk = _rank_inputs(ctx, 3, tokens=[2] * ctx["world"])
    bad = fm.TopK(topk.ids + E, topk.weights)
    return _raises(lambda: ep.forward_routed(x, bad), ValueError, "global expert ids in [0, 8)")


# --- tensor parallel cases ----------------------------------------------------------------------

def _tp_case(ctx, fmt, act, *, I, source, routed, tol, rms=None, dtype=torch.float32, bias=False, seed=21,
             shard_tol=1e-5, granularity=1):
    """TP layer vs (1) the unsharded single-process layer (``tol``) and (2) the single-process sum
    of the shards' outputs (``shard_tol``: checks the all-reduce itself, exact up to fp32)."""
    dev, W = ctx["device"], ctx["world"]
    w13, w2, b13, b2 = (None if t is None else t.to(dev) for t in _float_weights(act, I, seed, bias))
    full = fm.ExpertWeights.from_float(w13, w2, activation=act, format=fmt, w13_bias=b13, w2_bias=b2)
    if source == "float":
        tp = TensorParallelMoE.from_float(w13, w2, activation=act, routing=_ROUTING, format=fmt, w13_bias=b13,
                                          w2_bias=b2, backend=ctx["ref_backend"], granularity=granularity)
        shards = []
        for r in range(W):
            s = shard_float_weights(w13, w2, rank=r, world_size=W, activation=act, w13_bias=b13, w2_bias=b2,
                                    granularity=granularity)
            shards.append(fm.ExpertWeights.from_float(s.w13, s.w2, activation=act, format=fmt, w13_bias=s.w13_bias,
                                                      w2_bias=s.w2_bias))
    else:
        tp = TensorParallelMoE.from_weights(full, routing=_ROUTING, backend=ctx["ref_backend"], granularity=granularity)
        shards = [shard_expert_weights(full, rank=r, world_size=W, granularity=granularity) for r in range(W)]
    x, logits, topk = _rank_inputs(ctx, seed + 1, dtype, same=True)
    out = tp.forward_routed(x, topk) if routed else tp(x, logits)
    if not routed:
        topk = fm.route(logits, _ROUTING)
    ref = _ref(ctx, full, act, x, topk=topk)
    parts = torch.zeros(x.shape, dtype=torch.float32, device=dev)
    for s in shards:
        parts += fm.fused_moe(x, s, topk, activation=act, backend=ctx["ref_backend"]).float()
    return _all(_close(out, ref, tol, rms), _close(out, parts.to(dtype), shard_tol))


@case()
def tp_float_bf16_swiglu_i192(ctx):
    # shards of 96 (W=2) / 48 (W=4): gated 16-alignment holds, per-shard padding otherwise
    return _tp_case(ctx, F.BF16, A.SWIGLU, I=192, source="float", routed=True, tol=1e-5)


@case()
def tp_float_bf16_relu2_i464_logits(ctx):
    # shards of 232 / 116: break the non-gated 128 alignment; each shard pads on its own
    return _tp_case(ctx, F.BF16, A.RELU2, I=464, source="float", routed=False, tol=1e-5)


@case()
def tp_float_bf16_biases_bf16_hidden(ctx):
    # GEMM1 bias sliced per half, GEMM2 bias added once (rank 0); bf16 partials rounded once
    return _tp_case(ctx, F.BF16, A.SWIGLU, I=192, source="float", routed=True, tol=2e-2, dtype=torch.bfloat16,
                    bias=True, shard_tol=2e-2)


@case()
def tp_float_fp8_channel_swiglu(ctx):
    # per-shard quantization and per-shard FP8 re-quantization of the intermediate: within FP8 rounding
    return _tp_case(ctx, F.FP8_CHANNEL, A.SWIGLU, I=192, source="float", routed=True, tol=0.1, rms=0.03)


@case()
def tp_weights_fp8_block_relu2_i464(ctx):
    # pre-quantized 128x128 blocks cut by the 232 / 116 shard bounds: blocks keep their scales
    return _tp_case(ctx, F.FP8_BLOCK, A.RELU2, I=464, source="weights", routed=True, tol=0.1, rms=0.03)


@case()
def tp_float_fp8_block_on_block_grid(ctx):
    # granularity=128: shard bounds on the 128 grid, so per-shard quantization reproduces the
    # unsharded blocks and the 1x128 intermediate groups: exact up to fp32 sums
    return _tp_case(ctx, F.FP8_BLOCK, A.SWIGLU, I=464, source="float", routed=False, tol=1e-5, granularity=128)


@case()
def tp_weights_fp8_tensor_swiglu(ctx):
    return _tp_case(ctx, F.FP8_TENSOR, A.SWIGLU, I=192, source="weights", routed=False, tol=0.1, rms=0.03)


@case()
def tp_weights_nvfp4_swiglu_i464(ctx):
    # W4A16: the intermediate stays in hidden's dtype, so TP is exact up to fp32 sums
    return _tp_case(ctx, F.NVFP4, A.SWIGLU, I=464, source="weights", routed=True, tol=1e-5)


@case()
def tp_weights_mxfp4_relu2(ctx):
    return _tp_case(ctx, F.MXFP4, A.RELU2, I=192, source="weights", routed=False, tol=1e-5)


@case(2, 4)
def tp_error_w2_bias_on_every_rank(ctx):
    w13, w2, _, b2 = _float_weights(A.SWIGLU, 64, 0, bias=True)
    s = fm.ExpertWeights.from_float(w13, w2, activation=A.SWIGLU, w2_bias=b2).to(ctx["device"])
    return _raises(lambda: TensorParallelMoE(s, routing=_ROUTING, activation=A.SWIGLU), ValueError,
                   "would be added")


# --- the worker and the process groups ---------------------------------------------------------

def _worker(rank: int, world: int, init_file: str, out_dir: str, device: str = "cpu", backend: str = "gloo"):
    """Run every case for this world size on this rank; write ``{name: {ok, detail}}`` as JSON."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    if device == "cuda":
        torch.cuda.set_device(rank)
        _TOL_FLOOR.update(max=2e-2, rms=5e-3)
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    ctx = {"rank": rank, "world": world,
           "device": torch.device("cuda", rank) if device == "cuda" else torch.device("cpu"),
           "ref_backend": "auto" if device == "cuda" else "reference"}
    results = {}
    try:
        for name, (fn, worlds) in _CASES.items():
            if world not in worlds:
                continue
            t0 = time.perf_counter()
            try:
                res = fn(ctx)
            except Exception:  # noqa: BLE001 - reported to the test
                res = {"ok": False, "detail": traceback.format_exc()[-3000:]}
            res["seconds"] = round(time.perf_counter() - t0, 3)
            results[name] = res
    finally:
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump(results, f)
        dist.destroy_process_group()
        torch.set_num_threads(threads)
        _TOL_FLOOR.update(max=0.0, rms=0.0)


def _run_group(world: int, device: str = "cpu", backend: str = "gloo", timeout: float = 240.0):
    """Run all cases in a group of ``world`` processes (world 1: in this process)."""
    import torch.multiprocessing as mp

    tmp = tempfile.mkdtemp(prefix=f"fusedmoe_dist{world}_")
    init_file = os.path.join(tmp, "rendezvous")
    if world == 1:
        # every group this module creates is destroyed by _worker: one left over is a leak to fix
        assert not dist.is_initialized(), "a default process group leaked into this process"
        _worker(0, 1, init_file, tmp, device, backend)
    else:
        ctx = mp.start_processes(_worker, args=(world, init_file, tmp, device, backend), nprocs=world,
                                 join=False, start_method="spawn")
        deadline = time.monotonic() + timeout
        try:
            while not ctx.join(timeout=1.0):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"distributed test group of {world} did not finish in {timeout} s")
        finally:
            for p in ctx.processes:
                if p.is_alive():
                    p.kill()
    out = []
    for r in range(world):
        with open(os.path.join(tmp, f"rank{r}.json")) as f:
            out.append(json.load(f))
    return out


def _failures(results, world):
    """One line per (case, rank) that failed or did not run."""
    bad = []
    for name, (_, worlds) in _CASES.items():
        if world not in worlds:
            continue
        for r, res in enumerate(results):
            if name not in res:
                bad.append(f"{name} rank {r}: did not run")
            elif not res[name]["ok"]:
                bad.append(f"{name} rank {r}: {res[name]['detail']}")
    return bad


@pytest.mark.parametrize("world", [1, 2, 4])
def test_process_group_cases(world):
    """Every case of ``_CASES`` for this world size, one process group (one spawn) for all:
    EP (both token-moving variants and all-reduce, routed and from logits, gated and not, BF16 /
    FP8 block / FP8 tensor with static scales, ranks without tokens, uneven expert counts, the
    auto rule, Llama4 weight-on-input, packed top-k, the Triton kernels interpreted), TP (from
    float and from quantized weights, shard sizes that break alignment and cut scale blocks,
    biases), a negative control, and the errors (bad input on one rank, ranks that disagree)."""
    bad = _failures(_run_group(world), world)
    assert not bad, f"{len(bad)} failure(s) at world size {world}:\n" + "\n".join(bad)


# --- no process group needed ---------------------------------------------------------------------

@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny tensors: intra-op threads only add contention (badly so on a loaded CI machine)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_not_initialized_is_a_clear_error():
    assert not dist.is_initialized(), "a default process group leaked into this process"
    w = _weights(A.SWIGLU, F.BF16)
    with pytest.raises(RuntimeError, match="not initialized.*init_process_group"):
        ExpertParallelMoE(w, routing=_ROUTING, activation=A.SWIGLU, num_experts=E)
    with pytest.raises(RuntimeError, match="not initialized"):
        TensorParallelMoE.from_weights(w, routing=_ROUTING)


def test_expert_partition_even_uneven_and_errors():
    assert expert_partition(8, 4) == [(0, 2), (2, 2), (4, 2), (6, 2)]
    assert expert_partition(8, 3, [3, 3, 2]) == [(0, 3), (3, 3), (6, 2)]
    with pytest.raises(ValueError, match="num_experts=10 is not divisible by world_size=4"):
        expert_partition(10, 4)
    with pytest.raises(ValueError, match="one entry per rank"):
        expert_partition(8, 2, [8])
    with pytest.raises(ValueError, match="positive"):
        expert_partition(8, 2, [8, 0])
    assert choose_dispatch(256) == "all_gather" and choose_dispatch(257) == "all_to_all"


def test_intermediate_shards():
    assert intermediate_shards(192, 2) == [(0, 96), (96, 192)]
    assert intermediate_shards(10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert intermediate_shards(2688, 8, granularity=128) == [  # Nemotron-3-Super TP8: 21 blocks, no cut block
        (0, 384), (384, 768), (768, 1152), (1152, 1536), (1536, 1920), (1920, 2176), (2176, 2432), (2432, 2688)]
    assert intermediate_shards(464, 2, granularity=128) == [(0, 256), (256, 464)]
    with pytest.raises(ValueError, match="some rank would hold no intermediate rows"):
        intermediate_shards(3, 4)
    with pytest.raises(ValueError, match="some rank would hold no intermediate rows"):
        intermediate_shards(768, 8, granularity=128)


@pytest.mark.parametrize("fmt", [F.BF16, F.FP8_TENSOR, F.FP8_CHANNEL, F.FP8_BLOCK, F.MXFP8, F.NVFP4, F.MXFP4])
@pytest.mark.parametrize("act", [A.SWIGLU, A.RELU2])
@pytest.mark.parametrize("I,W", [(232, 2), (100, 3)])
def test_shard_expert_weights_is_exact(fmt, act, I, W):
    """Dequantized, every shard holds exactly the full weights' rows [a, b) (per half), zeros
    elsewhere; shard sizes 116 / 34 break every alignment, cut FP8/MX/NVFP4 blocks, and put an
    FP4 shard bound inside a byte (odd bound 67)."""
    w13, w2, b13, b2 = _float_weights(act, I, 5, bias=True, n_experts=2)
    full = fm.ExpertWeights.from_float(w13, w2, activation=act, format=fmt, w13_bias=b13, w2_bias=b2)
    D13, D2, Ip = fm.dequantize(full.w13), fm.dequantize(full.w2), full.padded_intermediate_size
    halves = 2 if act.is_gated else 1
    for r, (a, b) in enumerate(intermediate_shards(I, W)):
        s = shard_expert_weights(full, rank=r, world_size=W)
        A0 = b - s.intermediate_size                       # start of the widened shard
        sp = s.padded_intermediate_size
        assert sp % default_alignment(fmt, act.is_gated) == 0
        d13, d2 = fm.dequantize(s.w13), fm.dequantize(s.w2)
        for h in range(halves):
            blk = d13[:, h * sp:(h + 1) * sp]
            assert torch.equal(blk[:, a - A0:b - A0], D13[:, h * Ip + a:h * Ip + b])
            assert not blk[:, :a - A0].any() and not blk[:, b - A0:].any()
            bb = s.w13_bias[:, h * sp:(h + 1) * sp]
            assert torch.equal(bb[:, a - A0:b - A0], full.w13_bias[:, h * Ip + a:h * Ip + b])
            assert not bb[:, :a - A0].any() and not bb[:, b - A0:].any()
        assert torch.equal(d2[..., a - A0:b - A0], D2[..., a:b])
        assert not d2[..., :a - A0].any() and not d2[..., b - A0:].any()
        assert (s.w2_bias is not None) == (r == 0)


def test_block_grid_shards_need_no_widening():
    w13, w2, _, _ = _float_weights(A.RELU2, 464, 2, n_experts=2)
    full = fm.ExpertWeights.from_float(w13, w2, activation=A.RELU2, format=F.FP8_BLOCK)
    for r, (a, b) in enumerate(intermediate_shards(464, 2, granularity=128)):
        s = shard_expert_weights(full, rank=r, world_size=2, granularity=128)
        assert s.intermediate_size == b - a and s.padded_intermediate_size == round_up(b - a, 128)
        assert torch.equal(s.w13.scale, full.w13.scale[:, a // 128:-(-b // 128)])


def test_shard_sum_equals_whole_bf16_activations():
    # NVFP4 W4A16 with fp32 hidden: the shards' outputs sum to the unsharded layer (fp32 rounding)
    w13, w2, _, _ = _float_weights(A.SWIGLU, 336, 6)
    full = fm.ExpertWeights.from_float(w13, w2, activation=A.SWIGLU, format=F.NVFP4)
    g = _gen(8)
    x = torch.randn(6, H, generator=g)
    topk = fm.route(torch.randn(6, E, generator=g), _ROUTING)
    ref = fm.reference_moe(x, full, topk, activation=A.SWIGLU)
    tot = sum(fm.reference_moe(x, shard_expert_weights(full, rank=r, world_size=4), topk, activation=A.SWIGLU)
              for r in range(4))
    torch.testing.assert_close(tot, ref, rtol=1e-5, atol=1e-5)


def test_shard_helpers_reject_bad_input():
    w13, w2, _, _ = _float_weights(A.SWIGLU, 64, 0)
    with pytest.raises(ValueError, match="rank must be"):
        shard_float_weights(w13, w2, rank=2, world_size=2, activation=A.SWIGLU)
    with pytest.raises(ValueError, match=r"w13 must be \[E, 64, H\]"):
        shard_float_weights(w13, w2, rank=0, world_size=2, activation=A.RELU2)
    full = fm.ExpertWeights.from_float(w13, w2, activation=A.SWIGLU, format=F.MXFP8)
    with pytest.raises(ValueError, match="multiple of 32"):
        shard_expert_weights(full, rank=0, world_size=2, alignment=16)
    with pytest.raises(TypeError, match="ExpertWeights"):
        shard_expert_weights(w13, rank=0, world_size=2)


# --- GPU: the same cases over NCCL -------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("world", [1, 2])
def test_nccl_process_group_cases(world):
    """The same cases over NCCL on GPUs (world size 1: the NCCL code paths on one GPU), compared
    with the single-process layer on the same GPU (auto backend: the Triton kernels)."""
    if torch.cuda.device_count() < world:
        pytest.skip(f"needs {world} GPUs")
    bad = _failures(_run_group(world, device="cuda", backend="nccl"), world)
    assert not bad, f"{len(bad)} failure(s) over NCCL at world size {world}:\n" + "\n".join(bad)
