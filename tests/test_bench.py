"""fusedmoe.bench on the CPU: presets, byte/flop accounting (hand-computed), timing plumbing, the
bench loop and its JSON round trip, the tuner's search space, validation-before-timing and the
tuned table it writes (loaded by kernel_configs and picked by choose_moe_config), the correctness
sweep, and the peers' graceful absence. GPU numbers come from ``fusedmoe bench`` on the H200."""

import json
import math
import os
import time

import pytest
import torch

from fusedmoe.backends.kernel_configs import (KernelConfig, MoEKernelConfig, TunedTable, choose_moe_config,
                                              load_tuned_configs, triton_tile)
from fusedmoe.bench import roofline as rl
from fusedmoe.bench.peers import (GroupedMMPeer, SGLangPeer, TritonPeer, check_bound, find_sglang, make_peer,
                                  rel_errors)
from fusedmoe.bench.presets import (PRESETS, BenchCase, custom_preset, format_problem, formats_for, get_preset,
                                    make_inputs, make_weights, with_activation)
from fusedmoe.bench.runner import (BenchOptions, load_results, markdown_report, run_bench, summarize, write_markdown,
                                   write_results)
from fusedmoe.bench.timing import time_calls
from fusedmoe.bench.tune import (SMEM_LIMIT, Candidate, _smem_bytes, add_to_table, describe_config, merge_into_file,
                                 search_space, table_key, tune_point)
from fusedmoe.config import Activation, Format, RoutingMethod

INTERP = os.environ.get("TRITON_INTERPRET") == "1"


# ---- presets ------------------------------------------------------------------------------------


def test_presets_route_and_match_models_md():
    for p in PRESETS.values():
        cfg = p.routing_config()  # every preset's routing is valid for its E
        assert cfg.top_k == p.top_k
    nano, sup, ds8 = get_preset("nemotron-nano"), get_preset("nemotron-super-tp8"), get_preset("deepseek-v3-tp8")
    assert (nano.hidden, nano.intermediate, nano.experts, nano.top_k, nano.n1) == (2688, 1856, 128, 6, 1856)
    assert (sup.hidden, sup.intermediate, sup.experts, sup.top_k) == (1024, 336, 512, 22)  # latent K = 1024
    assert (ds8.intermediate, ds8.n1, ds8.n_group, ds8.topk_group) == (256, 512, 8, 4)
    assert get_preset("llama4-scout").weight_on_input and get_preset("gpt-oss-20b").expert_bias
    # gpt-oss H = 2880 is not a multiple of 128: no FP8 block weights
    assert Format.FP8_BLOCK not in formats_for(get_preset("gpt-oss-120b"))
    assert "multiple of 128" in format_problem(get_preset("gpt-oss-120b"), Format.FP8_BLOCK)
    assert set(formats_for(get_preset("qwen3-30b-a3b"))) >= {Format.BF16, Format.FP8_TENSOR, Format.FP8_CHANNEL,
                                                             Format.FP8_BLOCK}


def test_preset_errors():
    with pytest.raises(ValueError, match="unknown preset"):
        get_preset("nope")
    with pytest.raises(ValueError, match="top_k"):
        custom_preset(64, 32, 8, 8, Activation.SWIGLU)  # top_k must be < E
    with pytest.raises(ValueError, match="positive"):
        custom_preset(0, 32, 8, 2, Activation.SWIGLU)


def test_with_activation():
    """A preset's shape and routing with another activation (the benchmark scripts' ``--activation``): the weights
    it makes are the non-gated layout, the name says it, the model's own activation gives the preset back."""
    p = get_preset("tiny")
    r = with_activation(p, "relu2")
    assert (r.name, r.activation, r.hidden, r.intermediate, r.experts, r.top_k, r.routing) == (
        "tiny:relu2", Activation.RELU2, p.hidden, p.intermediate, p.experts, p.top_k, p.routing)
    assert with_activation(p, Activation.SWIGLU) is p and with_activation(p, "swiglu") is p
    assert with_activation(p, None) is p
    w = make_weights(r, Format.BF16, device="cpu")
    assert w.w13.shape[1] == w.padded_intermediate_size  # [E, I_pad, H]: one half, no gate
    assert with_activation(get_preset("gpt-oss-20b"), Activation.RELU2).expert_bias
    with pytest.raises(ValueError):
        with_activation(p, "nope")


def test_make_weights_chunked_and_inputs():
    p = get_preset("tiny")
    w = make_weights(p, Format.FP8_BLOCK, device="cpu", chunk_bytes=1)  # one expert per chunk
    assert w.num_experts == 8 and w.hidden_size == 128 and w.padded_intermediate_size == 128
    assert tuple(w.w13.scale.shape) == (8, 2, 1) and tuple(w.w2.scale.shape) == (8, 1, 1)
    w2 = make_weights(p, Format.FP8_BLOCK, device="cpu", chunk_bytes=1)
    assert torch.equal(w.w13.data.view(torch.uint8), w2.w13.data.view(torch.uint8))  # deterministic
    case = BenchCase(p, Format.BF16, Format.BF16, p.routing_config())
    sets = make_inputs(case, 5, device="cpu", nsets=3)
    assert len(sets) == 3 and sets[0].x.shape == (5, 128) and sets[0].topk.ids.shape == (5, 2)
    assert not torch.equal(sets[0].x, sets[1].x) and bool((sets[0].x != 0).all())


# ---- byte / flop accounting (hand-computed) -----------------------------------------------------


def test_expert_bytes_hand_computed():
    # Qwen3-30B-A3B: H 2048, I 768, gated: w13 2 x [768, 2048], w2 [2048, 768]
    n = 2 * 768 * 2048 + 2048 * 768  # 4,718,592 elements
    assert rl.expert_bytes(2048, 768, True, Format.BF16) == 2 * n == 9_437_184
    assert rl.expert_bytes(2048, 768, True, Format.FP8_TENSOR) == n + 3 * 4  # one scale per matrix
    assert rl.expert_bytes(2048, 768, True, Format.FP8_CHANNEL) == n + 4 * (768 + 768 + 2048)
    # 128x128 tiles: gate and up 6 x 16 each, w2 16 x 6 -> 288 fp32 scales
    assert rl.expert_bytes(2048, 768, True, Format.FP8_BLOCK) == n + 4 * 288 == 4_719_744
    # Nemotron-3-Nano, non-gated ReLU2: w13 [1856, 2688], w2 [2688, 1856]
    assert rl.expert_bytes(2688, 1856, False, Format.BF16) == 2 * 2 * 1856 * 2688 == 19_955_712
    # gpt-oss-120b: fp32 biases [2I] and [H] on top
    assert rl.expert_bytes(2880, 2880, True, Format.BF16, bias=True) == 2 * 3 * 2880 * 2880 + 4 * (5760 + 2880)
    # NVFP4: half a byte per element, one E4M3 per 16, one fp32 global per matrix (H=I=32, non-gated)
    assert rl.expert_bytes(32, 32, False, Format.NVFP4) == 2 * (512 + 32 * 2 + 4)
    assert rl.expert_bytes(32, 32, False, Format.MXFP4) == 2 * (512 + 32 * 1)


def test_moe_bytes_and_flops_hand_computed():
    bpe = rl.expert_bytes(2048, 768, True, Format.BF16)
    # decode: 8 experts hit, x read and out written once (bf16)
    assert rl.moe_bytes(1, 2048, 8, bpe) == 8 * 9_437_184 + 2 * 2048 * 2
    assert rl.moe_bytes(4096, 2048, 128, bpe) == 128 * 9_437_184 + 2 * 4096 * 2048 * 2
    # flops = 2 T k H (N1 + I): gated N1 = 2I
    assert rl.moe_flops(1, 2048, 768, 8, True) == 2 * 8 * 2048 * (1536 + 768) == 75_497_472
    assert rl.moe_flops(3, 2688, 1856, 6, False) == 2 * 3 * 6 * 2688 * (1856 + 1856)


def test_touched_experts_and_expectation():
    ids = torch.tensor([[0, 3], [3, 5], [7, 0]], dtype=torch.int32)
    assert rl.touched_experts(ids, 8) == 4
    assert rl.touched_experts(torch.tensor([[0, 9]]), 8) == 1  # EP sentinel ids >= E are not experts
    assert rl.expected_touched(8, 2, 1) == pytest.approx(2.0)
    assert rl.expected_touched(128, 8, 10_000) == pytest.approx(128.0)
    assert rl.expected_touched(256, 8, 2) == pytest.approx(256 * (1 - (1 - 8 / 256) ** 2))


def test_floor_pct_and_geomeans():
    c = rl.Ceilings("gpu", copy_gbps=1000.0, read_gbps=2000.0, bf16_tflops=100.0, fp8_tflops=200.0, meaningful=True)
    assert c.mem_gbps == 2000.0
    # memory-bound: 2 GB at 2000 GB/s = 1 ms; compute 1 TFLOP at 100 TFLOP/s = 10 ms -> floor 10 ms
    assert rl.floor_seconds(2e9, 1e12, c, Format.BF16) == pytest.approx(1e-2)
    assert rl.floor_seconds(2e9, 1e12, c, Format.FP8_BLOCK) == pytest.approx(5e-3)  # FP8 rate
    assert rl.floor_seconds(2e9, 1e9, c, Format.FP8_TOKEN) == pytest.approx(1e-3)  # bandwidth-bound
    assert rl.roofline_pct(2e-3, 1e-3) == pytest.approx(50.0)
    assert rl.geomean([1, 4, None, float("nan"), 0]) == pytest.approx(2.0)
    assert rl.geomean([]) is None
    assert [rl.region_of(t) for t in (1, 8, 9, 128, 1024, 4096)] == ["1-8", "1-8", "9-128", "9-128", "129-1024", ">1024"]
    assert rl.Ceilings.from_dict(c.to_dict()) == c


def test_summarize_speedups_by_region():
    recs = []
    for T, ours, other in ((1, 10.0, 20.0), (4, 10.0, 40.0), (512, 100.0, 50.0)):
        recs.append({"case": "c", "tokens": T, "backend": "triton", "status": "ok", "t_us": ours, "roofline_pct": 50.0})
        recs.append({"case": "c", "tokens": T, "backend": "sglang", "status": "ok", "t_us": other, "roofline_pct": 25.0})
    recs.append({"case": "c", "tokens": 1, "backend": "torch-grouped-mm", "status": "unsupported"})
    s = summarize(recs)
    sp = s["speedup_of_ours"]["sglang"]
    assert sp["1-8"]["geomean"] == pytest.approx(math.sqrt(2 * 4)) and sp["1-8"]["n"] == 2
    assert sp["129-1024"]["geomean"] == pytest.approx(0.5)
    assert sp["worst"] == {"case": "c", "tokens": 512, "speedup": 0.5}
    assert s["roofline_pct"]["triton"]["all"]["geomean"] == pytest.approx(50.0)
    assert s["counts"]["unsupported"] == 1 and "torch-grouped-mm" not in s["speedup_of_ours"]


def test_rel_errors_and_bounds():
    ref = torch.tensor([[1.0, -2.0], [0.5, 4.0]])
    out = ref.clone()
    out[1, 1] = 4.4
    mx, rms = rel_errors(out, ref)
    assert mx == pytest.approx(0.1) and rms == pytest.approx(0.4 / math.sqrt(21.25))
    assert rel_errors(torch.full((2, 2), float("nan")), ref) == (float("inf"), float("inf"))
    assert check_bound(Format.BF16, torch.bfloat16) == (2e-2, 4e-3)
    assert check_bound(Format.FP8_BLOCK, torch.bfloat16)[1] > check_bound(Format.BF16, torch.bfloat16)[1]


# ---- timing ---------------------------------------------------------------------------------------


def test_time_calls_cpu_wall_clock():
    calls = [lambda: torch.ones(64, 64) @ torch.ones(64, 64), lambda: torch.ones(64, 64) * 2]
    r = time_calls(calls, "cpu", reps=5)
    assert r.method == "wall" and r.reps == 5 and 0 < r.min_s <= r.median_s
    with pytest.raises(ValueError, match="CUDA"):
        time_calls(calls, "cpu", method="graph")
    with pytest.raises(ValueError, match="at least one"):
        time_calls([], "cpu")


# ---- the bench loop, JSON and plot ------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_doc():
    opts = BenchOptions(presets=[get_preset("tiny"), get_preset("tiny-relu2")], weight_formats=[Format.BF16],
                        tokens=[1, 3], peers=["reference", "torch-grouped-mm", "sglang"], device="cpu",
                        dtype=torch.bfloat16, sglang_path="/nonexistent/sglang-sources")
    return run_bench(opts, log=lambda s: None)


def test_bench_cpu_records(tiny_doc):
    recs = tiny_doc["results"]
    assert len(recs) == 2 * 2 * 3
    assert tiny_doc["ceilings"]["meaningful"] is False
    ok = [r for r in recs if r["status"] == "ok"]
    assert {r["backend"] for r in ok} == {"reference", "torch-grouped-mm"}
    for r in ok:
        assert r["t_us"] > 0 and r["timing"] == "wall" and r["bytes"] > 0 and r["flops"] > 0
        p = get_preset(r["preset"])
        bpe = rl.expert_bytes(p.hidden, p.intermediate, p.gated, Format.BF16)
        assert r["bytes_per_expert"] == bpe
        assert r["bytes"] == pytest.approx(r["touched_experts"] * bpe + 2 * r["tokens"] * p.hidden * 2)
        assert r["flops"] == rl.moe_flops(r["tokens"], p.hidden, p.intermediate, p.top_k, p.gated)
        assert r["roofline_pct"] == pytest.approx(100 * r["floor_us"] / r["t_us"])
    gm = [r for r in ok if r["backend"] == "torch-grouped-mm"]
    assert gm and all(r["check"] == "ok" for r in gm)
    # a missing peer is reported, not a crash
    sg = [r for r in recs if r["backend"] == "sglang"]
    assert sg and all(r["status"] == "unsupported" and "sglang" in r["error"] for r in sg)


def test_json_round_trip_and_plot(tiny_doc, tmp_path):
    path = write_results(tiny_doc, str(tmp_path / "bench.json"))
    doc = load_results(path)
    assert doc["results"] == json.loads(json.dumps(tiny_doc["results"]))
    assert doc["summary"]["counts"]["ok"] == sum(1 for r in tiny_doc["results"] if r["status"] == "ok")
    assert doc["schema"]["roofline_pct"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(ValueError, match="not a fusedmoe bench result"):
        load_results(str(bad))
    bad.write_text(json.dumps({"format": "fusedmoe-bench", "version": 99, "results": []}))
    with pytest.raises(ValueError, match="version"):
        load_results(str(bad))
    pytest.importorskip("matplotlib")
    from fusedmoe.bench.plot import plot_results

    png = plot_results(doc, str(tmp_path / "bench.png"))
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_markdown_report(tmp_path):
    """Hand-built records: one row per case, one column per token count, ours' µs and % of
    roofline and each peer's time ratio; unsupported / failed points say so; region table and
    worst point per peer."""
    def rec(case, T, backend, t_us, pct, status="ok"):
        return {"case": case, "tokens": T, "backend": backend, "status": status, "t_us": t_us,
                "roofline_pct": pct}

    recs = [rec("a/bf16/swiglu", 1, "triton", 10.0, 50.0), rec("a/bf16/swiglu", 1, "sglang", 12.0, 41.7),
            rec("a/bf16/swiglu", 4096, "triton", 100.0, 40.0), rec("a/bf16/swiglu", 4096, "sglang", 80.0, 50.0),
            rec("b/fp8_block/swiglu", 1, "triton", None, None, status="unsupported"),
            rec("b/fp8_block/swiglu", 4096, "triton", 20.0, 30.0), rec("b/fp8_block/swiglu", 4096, "sglang", None, None,
                                                                       status="error")]
    doc = {"results": recs, "env": {"gpu": "NVIDIA H200"},
           "ceilings": {"mem_gbps": 4000.0, "bf16_tflops": 700.0, "fp8_tflops": 1300.0, "meaningful": True}}
    doc["summary"] = summarize(recs)
    md = markdown_report(doc)
    lines = md.splitlines()
    assert "| case | T=1 | T=4096 |" in lines
    assert "| a/bf16/swiglu | 10.0 µs, 50 %, 1.20x | 100.0 µs, 40 %, 0.80x |" in lines
    assert "| b/fp8_block/swiglu | n/a | 20.0 µs, 30 % |" in lines  # the failed peer point has no ratio
    assert any(line.startswith("| sglang | t_sglang / t_triton |") and "0.98 (2)" in line for line in lines)
    assert "Worst point against sglang: a/bf16/swiglu at 4096 tokens, 0.80x." in lines
    assert "memory roofline 4000 GB/s" in lines[0]
    path = write_markdown(doc, str(tmp_path / "sub" / "bench.md"))
    with open(path) as f:
        assert f.read() == md


def test_peer_support_reasons():
    p = get_preset("tiny")
    fp8 = BenchCase(p, Format.FP8_BLOCK, Format.FP8_BLOCK, p.routing_config())
    assert "16-bit" in GroupedMMPeer().supports(fp8, torch.device("cpu"))
    root, why = find_sglang("/nonexistent/dir")
    assert root is None and "no sglang" in why
    assert SGLangPeer("/nonexistent/dir").supports(fp8, torch.device("cpu"))
    oai = get_preset("gpt-oss-20b")
    with pytest.raises(ValueError, match="unknown peer"):
        make_peer("vllm")
    bf = BenchCase(p, Format.BF16, Format.BF16, p.routing_config(), torch.bfloat16)
    if INTERP:
        assert "bf16" in TritonPeer().supports(bf, torch.device("cpu"))
    del oai


@pytest.mark.skipif(not INTERP, reason="needs TRITON_INTERPRET=1 on a CPU")
def test_bench_triton_interpreter_point():
    opts = BenchOptions(presets=[get_preset("tiny")], weight_formats=[Format.BF16], tokens=[3],
                        peers=["triton", "triton-heuristic"], device="cpu", dtype=torch.float16)
    doc = run_bench(opts, log=lambda s: None)
    recs = {r["backend"]: r for r in doc["results"]}
    for name in ("triton", "triton-heuristic"):
        assert recs[name]["status"] == "ok", recs[name]
        assert recs[name]["check"] == "ok" and recs[name]["config"]["gemm1"]["block_m"] >= 16
    assert recs["triton-heuristic"]["config_source"] == "heuristic"


@pytest.mark.skipif(not INTERP, reason="needs TRITON_INTERPRET=1 on a CPU")
def test_bench_triton_non_natural_activation_format():
    """``--act-format`` pairs weights with any activation format the backend takes (MXFP4 x MXFP8 here), checked
    against the reference like the natural pairing; one the backend refuses is listed with its reason."""
    tiny = get_preset("tiny")
    opts = BenchOptions(presets=[tiny], weight_formats=[Format.MXFP4], act_format=Format.MXFP8, tokens=[3],
                        peers=["triton"], device="cpu", dtype=torch.float16)
    doc = run_bench(opts, log=lambda s: None)
    (rec,) = [r for r in doc["results"] if r["backend"] == "triton"]
    assert rec["status"] == "ok" and rec["check"] == "ok" and rec["act_format"] == "mxfp8", rec
    bad = BenchCase(tiny, Format.MXFP4, Format.NVFP4, tiny.routing_config(), torch.float16)
    assert "NVFP4" in TritonPeer().supports(bad, torch.device("cpu"))


# ---- the tuner ------------------------------------------------------------------------------------------


def _heur(T, fmt=Format.BF16, act=Activation.SWIGLU, H=2048, I=768, E=128, K=8):
    return choose_moe_config(T, H, I, E, K, fmt, act, "NVIDIA H200", table=TunedTable())


@pytest.mark.parametrize("fmt", [Format.BF16, Format.FP8_TENSOR, Format.FP8_BLOCK])
@pytest.mark.parametrize("T", [1, 128, 4096])
def test_search_space(fmt, T):
    cands = search_space(T, 2048, 768, 128, 8, fmt, Activation.SWIGLU, "NVIDIA H200")
    h = _heur(T, fmt)
    assert cands[0].varies == "base" and (cands[0].config.gemm1, cands[0].config.gemm2) == (h.gemm1, h.gemm2)
    keys = [(c.config.gemm1, c.config.gemm2) for c in cands]
    assert len(keys) == len(set(keys)) and 8 <= len(cands) <= 56  # (FP8 blocks at prefill: 51)
    for c in cands:
        assert c.config.gemm1.block_m == c.config.gemm2.block_m
        if fmt is Format.FP8_BLOCK:
            assert c.config.gemm1.block_k == c.config.gemm2.block_k == 128
        if fmt is Format.BF16:
            assert not c.config.gemm1.swap_ab and not c.config.gemm2.swap_ab
    assert {c.varies for c in cands} >= {"base", "gemm1", "gemm2", "block_m"}
    # persistent GEMM2 at prefill tiles only: 2 programs per SM, <= 64 accumulators per thread at 4 warps
    pers = [c.config.gemm2 for c in cands if c.varies == "persistent"]
    assert bool(pers) == (h.block_m >= 64), pers
    assert all((g.persistent == 2 and g.block_m * g.block_n <= 64 * 128) or g.persistent == 0 for g in pers)
    assert not pers or any(g.num_warps == 4 for g in pers)
    # elsewhere GEMM2 keeps the rule's setting (None), except the shipped table's entry and the
    # warp-specialized variants' 128-row GEMM2 (with_block_m turns persistence off there: 0) and the decode kernel's
    # programs an SM (2 / 3)
    assert all(c.config.gemm2.persistent is None for c in cands if c.varies not in (
        "persistent", "table", "fp8_sibling", "warp_specialized", "ws_decode"))
    assert all(c.config.gemm2.persistent in (2, 3) for c in cands if c.varies == "ws_decode")
    assert all(c.config.gemm2.persistent in (None, 0) for c in cands if c.varies == "warp_specialized")
    # what the shipped table serves the point now is a candidate (when it is not the heuristic)
    cur = choose_moe_config(T, 2048, 768, 128, 8, fmt, Activation.SWIGLU, "NVIDIA H200")
    assert any((c.config.gemm1, c.config.gemm2) == (cur.gemm1, cur.gemm2) for c in cands)
    # FP8 fast accumulation changes numerics: never a candidate unless asked for
    assert not any(c.config.gemm1.fp8_fast_accum or c.config.gemm2.fp8_fast_accum for c in cands)
    # the pipelined promotion (same bits): FP8 per tensor / channel warp-specialized prefill tiles that can take it,
    # as the table's / the heuristic's tiles with it on, before the --max-candidates cut of the prefill tunes (8)
    pipe = [i for i, c in enumerate(cands) if c.varies == "pipelined"]
    ws = h.gemm1.warp_specialized or h.gemm2.warp_specialized
    assert bool(pipe) == ((fmt is Format.FP8_TENSOR and ws and h.block_m == 128)
                          or (fmt is Format.FP8_BLOCK and T >= 512)), (pipe, h)
    assert not pipe or pipe[0] < 8
    for c in cands:
        on = [g for g in (c.config.gemm1, c.config.gemm2) if g.pipelined_promotion]
        assert bool(on) == (c.varies == "pipelined") == (" pipe" in describe_config(c.config)), c
        assert all(g.warp_specialized and g.block_m == 128 and g.block_n in (64, 128, 256) for g in on), c
    # split-K (either GEMM) only at decode tile sizes
    assert all(c.config.gemm1.split_k == c.config.gemm2.split_k == 1 for c in cands if c.config.block_m > 32)
    if h.block_m <= 32:
        assert any(c.config.gemm1.split_k != h.gemm1.split_k for c in cands)
        assert any(c.config.gemm2.split_k != h.gemm2.split_k for c in cands)
    cands = search_space(T, 2048, 768, 128, 8, fmt, Activation.SWIGLU, "NVIDIA H200", fp8_fast_accum=True)
    fast = [c for c in cands if c.varies == "fast_accum"]
    if fmt is Format.FP8_TENSOR:
        # FP8 accumulation in the tensor cores on both GEMMs; at prefill (block_m 128) also with
        # GEMM2's weight tile doubled to 256 rows
        assert fast and all(c.config.gemm1.fp8_fast_accum and c.config.gemm2.fp8_fast_accum for c in fast)
        # (a warp-specialized heuristic -- which always promotes -- as its Triton tile)
        t1, t2 = triton_tile(h.gemm1), triton_tile(h.gemm2)
        assert fast[0].config.gemm1.block_n == t1.block_n and fast[0].config.gemm2.block_n == t2.block_n
        if h.block_m >= 128:
            assert len(fast) == 2 and fast[1].config.gemm2.block_n == 2 * t2.block_n
    else:
        assert not fast and not any(c.config.gemm1.fp8_fast_accum or c.config.gemm2.fp8_fast_accum for c in cands)
    big = search_space(T, 2048, 768, 128, 8, fmt, Activation.SWIGLU, "NVIDIA H200", exhaustive=True)
    assert len(big) > len(cands)
    # every candidate's operand buffers fit; a doubled K tile that would not fit at the base's stage
    # count is kept with fewer stages (FP8 prefill: 128 x 256 K tiles at 3 stages) rather than dropped
    for c in cands:
        for gemm, g in (("gemm1", c.config.gemm1), ("gemm2", c.config.gemm2)):
            assert _smem_bytes(g, fmt, gemm == "gemm1") <= SMEM_LIMIT
    if fmt is Format.FP8_TENSOR and h.block_m >= 128:
        wide_k = [c.config.gemm2 for c in cands if c.varies == "gemm2" and c.config.gemm2.block_k == 2 * h.gemm2.block_k]
        assert wide_k and wide_k[0].num_stages < h.gemm2.num_stages
    assert len(search_space(T, 2048, 768, 128, 8, fmt, Activation.SWIGLU, "NVIDIA H200", max_candidates=3)) == 3


@pytest.mark.parametrize("fmt", [Format.FP8_CHANNEL, Format.FP8_TENSOR, Format.FP8_BLOCK])
@pytest.mark.parametrize("T", [2048, 8192])
def test_search_space_short_k_pairs_the_wide_ws_gemm1_with_the_held_gemm2(fmt, T):
    """A TP shard's short GEMM2 K (DeepSeek-V3 TP8: 256): within the tune's usual 8 candidates, the warp-specialized
    GEMM1s -- narrow, and wide with and without the pipelined promotion -- each with the held-activation GEMM2 (the
    pair that won on the H100, forty-eighth session; no candidate had it before). Without a table: the shipped one
    holds that pair at 8192 tokens now, which would pass this test on its own."""
    from fusedmoe.backends.kernel_configs import use_tuned_configs
    use_tuned_configs(TunedTable())
    try:
        cands = search_space(T, 7168, 256, 256, 8, fmt, Activation.SWIGLU, "NVIDIA H100 80GB HBM3", num_sms=132,
                             max_candidates=8)
    finally:
        use_tuned_configs(None)
    held = [c.config.gemm1 for c in cands if c.config.gemm2.n_tiles > 1 and c.config.gemm1.warp_specialized]
    assert all(g.block_m == 128 for g in held)
    widths = {(g.block_n, g.pipelined_promotion) for g in held}
    assert {(64, False), (128, True), (128, False)} <= widths, widths


@pytest.mark.parametrize("fmt", [Format.NVFP4, Format.MXFP4, Format.FP8_TENSOR, Format.BF16])
def test_search_space_swap_prefill(fmt):
    """Prefill tiles (block_m >= 64) try swap-AB only for weights dequantized in registers (FP4 / MXFP8), for each
    GEMM alone (so the tuner combines the best of each), with >= 64 weight rows; at decode nothing changes."""
    cands = search_space(4096, 2048, 768, 128, 8, fmt, Activation.SWIGLU, "NVIDIA H200")
    swapped = [c for c in cands if c.config.block_m >= 64 and (c.config.gemm1.swap_ab or c.config.gemm2.swap_ab)]
    if fmt in (Format.NVFP4, Format.MXFP4):
        # the heuristic's own GEMM1 is swapped there (128 weight rows, one warpgroup); GEMM2 is not
        h = cands[0].config
        assert cands[0].varies == "base" and h.gemm1.swap_ab and h.gemm1.num_warps == 4 and not h.gemm2.swap_ab
        g1 = [c for c in swapped if c.varies == "gemm1" and c.config.gemm1.swap_ab and c.config.gemm2 == h.gemm2]
        g2 = [c for c in swapped if c.varies == "gemm2" and c.config.gemm2.swap_ab and c.config.gemm1 == h.gemm1]
        assert len(g1) >= 4 and len(g2) >= 4
        for c in swapped:
            for g in (c.config.gemm1, c.config.gemm2):
                assert g.block_n >= 64 and g.split_k == 1 and not g.warp_specialized
        assert {c.config.gemm1.num_warps for c in g1} == {4, 8} and {c.config.gemm1.block_k for c in g1} >= {64, 128}
    else:
        assert not swapped
    # the single-step flip of swap_ab stays a decode move for FP8 / BF16
    if fmt is not Format.BF16:
        assert any(c.config.gemm1.swap_ab for c in search_space(8, 2048, 768, 128, 8, fmt, Activation.SWIGLU,
                                                                  "NVIDIA H200") if c.config.block_m < 64)


def _kc(bm, bn, **kw):
    return KernelConfig(block_m=bm, block_n=bn, block_k=64, **kw)


def test_tune_point_validates_before_timing():
    base = MoEKernelConfig(_kc(16, 64), _kc(16, 64))
    g1_fast = MoEKernelConfig(_kc(16, 128), _kc(16, 64))
    g1_wrong = MoEKernelConfig(_kc(16, 32), _kc(16, 64))
    g1_crash = MoEKernelConfig(_kc(16, 64, num_warps=8), _kc(16, 64))
    g2_fast = MoEKernelConfig(_kc(16, 64), _kc(16, 128))
    cands = [Candidate(base, "base"), Candidate(g1_fast, "gemm1"), Candidate(g1_wrong, "gemm1"),
             Candidate(g1_crash, "gemm1"), Candidate(g2_fast, "gemm2")]
    times = {base: 10.0, g1_fast: 8.0, g1_wrong: 1.0, g2_fast: 9.0,
             MoEKernelConfig(_kc(16, 128), _kc(16, 128)): 7.0}
    timed, ran = [], []

    def run(cfg):
        ran.append(cfg)
        if cfg == g1_crash:
            raise RuntimeError("out of resources: shared memory")
        return "wrong" if cfg == g1_wrong else "right"

    def validate(out):
        return out == "right", "max_rel 1.0"

    def time_fn(cfg):
        assert ran[-1] == cfg  # timed only right after its own validated run
        timed.append(cfg)
        return times[cfg]

    res = tune_point(cands, run, validate, time_fn)
    assert g1_wrong not in timed and g1_crash not in timed  # never timed
    status = {r["varies"] + str(i): r["status"] for i, r in enumerate(res.rows)}
    assert sorted(status.values()) == ["error", "ok", "ok", "ok", "ok", "rejected"]
    combined = MoEKernelConfig(_kc(16, 128), _kc(16, 128))
    assert res.best == combined and res.best_s == 7.0 and res.heuristic_s == 10.0
    assert res.speedup == pytest.approx(10 / 7)
    assert res.table_s is None and res.vs_table == pytest.approx(10 / 7)  # no table entry: the table ran the heuristic
    assert res.rows[-1]["varies"] == "combined"


def test_tune_point_reports_the_gain_over_the_table():
    """``vs_table``: the time of what the active table served (the "table" candidate) over the winner's; the
    heuristic's time is the first "base" candidate's, not the Triton tile's that follows a warp-specialized one."""
    heur = MoEKernelConfig(_kc(16, 64), _kc(16, 64))
    heur_tile = MoEKernelConfig(_kc(16, 32), _kc(16, 64))
    table = MoEKernelConfig(_kc(16, 128), _kc(16, 64))
    other = MoEKernelConfig(_kc(16, 64), _kc(16, 128))
    times = {heur: 10.0, heur_tile: 12.0, table: 8.0, other: 7.5}
    res = tune_point([Candidate(heur, "base"), Candidate(heur_tile, "base"), Candidate(table, "table"),
                      Candidate(other, "gemm2")], lambda c: 0, lambda o: (True, ""), lambda c: times[c])
    assert (res.heuristic_s, res.table_s, res.best_s) == (10.0, 8.0, 7.5)
    assert res.speedup == pytest.approx(10 / 7.5) and res.vs_table == pytest.approx(8 / 7.5)


def test_tune_point_writes_no_entry_for_the_heuristic_it_already_ran():
    """``needs_entry``: no table entry where the winner is the heuristic and the point had no entry (it would only
    shadow the neighbouring buckets' heuristic and the sibling GPU's), but an entry wherever the winner differs from
    what ran before, and where the heuristic beats the table's entry (the entry must go)."""
    heur = MoEKernelConfig(_kc(16, 64), _kc(16, 64))
    table = MoEKernelConfig(_kc(16, 128), _kc(16, 64))
    other = MoEKernelConfig(_kc(16, 64), _kc(16, 128))
    ok = lambda o: (True, "")  # noqa: E731

    def outcome(cands, times, **kw):
        return tune_point(cands, lambda c: 0, ok, lambda c: times[c], **kw)
    res = outcome([Candidate(heur, "base"), Candidate(other, "gemm2")], {heur: 9.0, other: 10.0})
    assert (res.best, res.reference, res.reference_config) == (heur, "base", heur) and not res.needs_entry
    res = outcome([Candidate(heur, "base"), Candidate(other, "gemm2")], {heur: 10.0, other: 9.0})
    assert res.best == other and res.needs_entry
    # kept after the re-timing: the heuristic stays, still no entry
    res = outcome([Candidate(heur, "base"), Candidate(other, "gemm2")], {heur: 10.0, other: 9.95},
                  confirm_rounds=1, min_gain=0.02)
    assert res.best == heur and res.confirmed is False and not res.needs_entry
    # with a table entry: the heuristic winning replaces it, the entry winning is written again
    res = outcome([Candidate(heur, "base"), Candidate(table, "table")], {heur: 8.0, table: 10.0})
    assert (res.best, res.reference) == (heur, "table") and res.needs_entry
    res = outcome([Candidate(heur, "base"), Candidate(table, "table")], {heur: 10.0, table: 8.0})
    assert res.best == table and res.needs_entry
    # nothing valid: nothing to write
    res = tune_point([Candidate(heur, "base")], lambda c: 0, lambda o: (False, "bad"), lambda c: 1.0)
    assert res.best is None and res.reference is None and not res.needs_entry


def test_tune_point_budget_and_all_rejected():
    base = MoEKernelConfig(_kc(16, 64), _kc(16, 64))
    other = MoEKernelConfig(_kc(16, 128), _kc(16, 64))
    res = tune_point([Candidate(base, "base"), Candidate(other, "gemm1")], lambda c: 0,
                     lambda o: (False, "nan"), lambda c: 1.0)
    assert res.best is None and res.heuristic_s is None and all(r["status"] == "rejected" for r in res.rows)
    res = tune_point([Candidate(base, "base"), Candidate(other, "gemm1")], lambda c: 0, lambda o: (True, ""),
                     lambda c: 1.0, deadline=0.0)  # budget already spent: only the heuristic runs
    assert res.best == base and res.rows[-1]["status"] == "budget"


def test_tune_point_confirms_the_winner_before_it_replaces_the_table():
    """The fastest candidate is re-timed against what the point ran before (the "table" candidate, else the
    heuristic), in turns, and replaces it only ``min_gain`` ahead on the medians."""
    heur = MoEKernelConfig(_kc(16, 64), _kc(16, 64))
    table = MoEKernelConfig(_kc(16, 128), _kc(16, 64))
    lucky = MoEKernelConfig(_kc(16, 64), _kc(16, 128))
    cands = [Candidate(heur, "base"), Candidate(table, "table"), Candidate(lucky, "gemm2")]

    def timer(seq):
        calls = []

        def time_fn(c):
            calls.append(c)
            return seq[c].pop(0)
        return time_fn, calls

    # one lucky timing (1 % ahead), then slower: the table's entry stays
    time_fn, calls = timer({heur: [10.0], table: [8.0, 8.0, 8.1], lucky: [7.92, 8.3, 8.2]})
    res = tune_point(cands, lambda c: 0, lambda o: (True, ""), time_fn, confirm_rounds=2, min_gain=0.02)
    assert res.best == table and res.confirmed is False and res.vs_table == pytest.approx(1.0)
    assert res.table_s == 8.0 and res.best_s == 8.0 and res.heuristic_s == 10.0
    assert calls[3:] == [table, lucky, lucky, table]  # in turns, the order alternating each round
    row = res.rows[-1]
    assert row["varies"] == "confirm" and row["status"] == "kept" and row["against"] == "table"
    assert row["samples"] == 3 and "the table's config stays" in row["error"]
    # a real lead holds, at its median
    time_fn, _ = timer({heur: [10.0], table: [8.0, 8.2, 8.1], lucky: [7.0, 7.2, 7.1]})
    res = tune_point(cands, lambda c: 0, lambda o: (True, ""), time_fn, confirm_rounds=2, min_gain=0.02)
    assert res.best == lucky and res.confirmed is True and res.best_s == 7.1 and res.table_s == 8.1
    assert res.vs_table == pytest.approx(8.1 / 7.1) and res.rows[-1]["status"] == "ok"
    # no table entry: the heuristic is the reference; below the gain on the first timings alone (past the deadline)
    time_fn, calls = timer({heur: [10.0], lucky: [9.9]})

    def slow_time_fn(c):  # the budget runs out while the last candidate is timed
        if c == lucky:
            time.sleep(0.2)
        return time_fn(c)
    res = tune_point([Candidate(heur, "base"), Candidate(lucky, "gemm2")], lambda c: 0, lambda o: (True, ""),
                     slow_time_fn, confirm_rounds=2, min_gain=0.02, deadline=time.perf_counter() + 0.1)
    assert res.best == heur and res.best_s == 10.0 and res.confirmed is False and len(calls) == 2
    assert "not re-timed" in res.rows[-1]["error"]
    time_fn, calls = timer({heur: [10.0, 10.0, 10.0], lucky: [9.9, 9.0, 9.1]})
    res = tune_point([Candidate(heur, "base"), Candidate(lucky, "gemm2")], lambda c: 0, lambda o: (True, ""), time_fn,
                     confirm_rounds=2, min_gain=0.02)
    assert res.best == lucky and res.best_s == 9.1 and res.heuristic_s == 10.0 and len(calls) == 6
    # the winner is the reference (the table's entry): nothing to confirm
    time_fn, calls = timer({heur: [8.0], table: [7.0], lucky: [9.0]})
    res = tune_point(cands, lambda c: 0, lambda o: (True, ""), time_fn, confirm_rounds=2, min_gain=0.02)
    assert res.best == table and res.confirmed is None and len(calls) == 3 and res.rows[-1]["varies"] == "gemm2"
    # the defaults (no rounds, no gain): the fastest single timing wins, no confirm row
    time_fn, calls = timer({heur: [10.0], table: [8.0], lucky: [7.92]})
    res = tune_point(cands, lambda c: 0, lambda o: (True, ""), time_fn)
    assert res.best == lucky and res.confirmed is None and len(calls) == 3 and res.rows[-1]["varies"] == "gemm2"
    with pytest.raises(ValueError, match="confirm_rounds"):
        tune_point(cands, lambda c: 0, lambda o: (True, ""), lambda c: 1.0, confirm_rounds=-1)
    with pytest.raises(ValueError, match="min_gain"):
        tune_point(cands, lambda c: 0, lambda o: (True, ""), lambda c: 1.0, min_gain=1.0)


def test_tuned_table_written_loaded_and_picked(tmp_path):
    H, I_pad, E, K = 2048, 768, 128, 8
    tuned = MoEKernelConfig(KernelConfig(32, 128, 64, 1, 8, 3, False), KernelConfig(32, 64, 128, 1, 4, 4, False))
    t = TunedTable()
    add_to_table(t, tuned, device_name="NVIDIA H200", weight_format=Format.BF16, activation=Activation.SWIGLU,
                 hidden=H, intermediate_padded=I_pad, experts=E, tokens=16)
    path = str(tmp_path / "sub" / "tuned.json")
    merge_into_file(t, path)
    other = TunedTable()
    add_to_table(other, tuned, device_name="NVIDIA H200", weight_format=Format.FP8_TENSOR,
                 activation=Activation.RELU2, hidden=H, intermediate_padded=I_pad, experts=E, tokens=1024)
    merge_into_file(other, path)  # merged, not overwritten
    doc = json.load(open(path))
    assert doc["format_version"] == 1 and len(doc["entries"]) == 4
    e = [x for x in doc["entries"] if x["gemm"] == "gemm1" and x["weight_format"] == "bf16"][0]
    assert (e["device"], e["activation"], e["N"], e["K"], e["E"], e["tokens"]) == ("NVIDIA H200", "swiglu", 2 * I_pad,
                                                                                   H, E, 16)
    table = load_tuned_configs(path)
    for T in (9, 16, 24):  # bucket 16 (and nearest-bucket fallback)
        got = choose_moe_config(T, H, I_pad, E, K, Format.BF16, Activation.SWIGLU, "NVIDIA H200", table=table)
        assert got.gemm1 == tuned.gemm1 and got.gemm2 == tuned.gemm2
    # no entry for this device / format / shape: the heuristic, unchanged
    # (an H100 SXM would take the H200's entries: kernel_configs.table_devices)
    for dev, fmt, hh in (("NVIDIA A100-SXM4-80GB", Format.BF16, H), ("NVIDIA H200", Format.FP8_BLOCK, H),
                         ("NVIDIA H200", Format.BF16, 4096)):
        got = choose_moe_config(16, hh, I_pad, E, K, fmt, Activation.SWIGLU, dev, table=table)
        assert got == choose_moe_config(16, hh, I_pad, E, K, fmt, Activation.SWIGLU, dev, table=TunedTable())


# ---- the correctness sweep ---------------------------------------------------------------------------------


def test_check_reference_against_float64():
    from fusedmoe.bench.check import CheckShape, run_check

    res = run_check("cpu", backends=["reference"], activations=[Activation.SWIGLU, Activation.RELU2,
                                                                Activation.SWIGLU_OAI],
                    formats=[Format.BF16, Format.FP8_BLOCK, Format.NVFP4],
                    routings=[RoutingMethod.LLAMA4, RoutingMethod.DEEPSEEK_V3, RoutingMethod.RENORMALIZE_NAIVE],
                    shape=CheckShape(128, 96, 8, 2, (5,)))
    assert res["combos"] == 3 * 3 + 2
    rows = res["rows"]
    assert rows and all(r["status"] == "ok" for r in rows), [r for r in rows if r["status"] != "ok"]
    assert all(r["against"] == "float64" for r in rows)


def test_check_detects_a_wrong_backend(monkeypatch):
    """Negative control: a backend that drops the routing weights must fail the sweep."""
    from fusedmoe import backends as be
    from fusedmoe.bench.check import CheckShape, run_check

    ref = be.get("reference")

    class Broken:
        name = "broken"

        def supports(self, request, device):
            return None

        def run(self, hidden, weights, topk, **kw):
            return ref.run(hidden, weights, topk._replace(weights=topk.weights.roll(1, -1)), **kw)

    monkeypatch.setitem(be._REGISTRY, "broken", Broken())
    res = run_check("cpu", backends=["broken"], activations=[Activation.SWIGLU], formats=[Format.BF16],
                    routings=[RoutingMethod.RENORMALIZE_NAIVE], shape=CheckShape(128, 96, 8, 2, (9,)))
    assert [r["status"] for r in res["rows"]] == ["FAIL"]


@pytest.mark.skipif(not INTERP, reason="needs TRITON_INTERPRET=1 on a CPU")
def test_shipped_table_entries_are_reachable():
    """Every entry of the shipped tuned table keys a shape some model preset runs -- N and K of its GEMM with the
    intermediate padded as the weights pad it (``padded_intermediate``), E its experts. A hand-added entry under the
    unpadded intermediate is never read (the forty-ninth session shipped one: Nemotron-Nano FP8 per channel under
    I = 1856, where non-gated layers pad to 1920). The shared peer harness also runs the gated models' shapes with
    ReLU^2 in BF16 (its BF16 ReLU^2 cases): their entries are reachable too."""
    from fusedmoe.backends.kernel_configs import DEFAULT_TABLE_PATH
    from fusedmoe.weights.expert_weights import padded_intermediate

    keys = set()
    for p in PRESETS.values():
        runs = [(wf, p.activation) for wf in Format]
        if p.gated:
            runs.append((Format.BF16, Activation.RELU2))  # the harness's BF16 ReLU^2 case of the shape
        for wf, act in runs:
            I_pad = padded_intermediate(p.intermediate, wf, act.is_gated)
            for gemm, (N, K) in table_key("-", wf, act, p.hidden, I_pad, p.experts).items():
                keys.add((wf.value, act.value, gemm, N, K, p.experts))
    assert ("bf16", "relu2", "gemm1", 768, 2048, 128) in keys  # Qwen3-30B's shape with ReLU^2
    assert ("fp8_tensor", "relu2", "gemm1", 768, 2048, 128) not in keys  # (the harness runs it in BF16 only)
    assert ("fp8_channel", "relu2", "gemm1", 1856, 2688, 128) not in keys  # the dead entry's key
    assert ("fp8_channel", "relu2", "gemm1", 1920, 2688, 128) in keys
    entries = json.load(open(DEFAULT_TABLE_PATH))["entries"]
    dead = [e for e in entries if (e["weight_format"], e["activation"], e["gemm"], e["N"], e["K"], e["E"]) not in keys]
    assert len(entries) > 1000 and not dead, dead[:5]


def test_shipped_table_entries_can_launch():
    """Every entry of the shipped tuned table is a config the launcher takes at its own key's shape: it compiles
    (``compile_problem``), a warp-specialized tile keeps that kernel's tile rules at its K, a held-activation GEMM2
    covers its K, and a warp-specialized FP8 block GEMM1 keeps each gated column group in one 128-row scale block (the
    launcher's ``_ws_block_w_scalar``) -- so an entry edited in by hand, or carried over from another GPU's table,
    fails here instead of at a user's first call (the fifty-fourth session put ten wide-tile entries in by hand)."""
    from fusedmoe.backends.kernel_configs import (DEFAULT_TABLE_PATH, compile_problem, held_a_problem,
                                                  warp_specialized_problem, ws_block_scale_problem)

    entries = json.load(open(DEFAULT_TABLE_PATH))["entries"]
    bad = []
    for e in entries:
        fmt, act, gemm, K = Format(e["weight_format"]), Activation(e["activation"]), e["gemm"], e["K"]
        c = KernelConfig.from_dict(e["config"])
        gated = act.is_gated and gemm == "gemm1"
        why = (compile_problem(c, fmt) or warp_specialized_problem(c, fmt, gemm, gated, K)
               or (held_a_problem(c, fmt, K) if gemm == "gemm2" else None)
               or ws_block_scale_problem(c, fmt, gated, e["N"] // 2 if gated else e["N"]))
        if why:
            bad.append((e["device"], e["weight_format"], e["activation"], gemm, e["N"], K, e["E"], e["tokens"], why))
    assert len(entries) > 1000 and not bad, bad[:5]
    # (the rules do reject: a wide FP8 block GEMM1 at an intermediate of 64-row halves, a held GEMM2 short of K)
    wide = KernelConfig(128, 128, 128, num_warps=4, num_stages=4, warp_specialized=True, pipelined_promotion=True)
    assert "N a multiple of 128" in ws_block_scale_problem(wide, Format.FP8_BLOCK, True, 1984)
    assert ws_block_scale_problem(wide, Format.FP8_BLOCK, True, 2048) is None
    assert held_a_problem(KernelConfig(64, 64, 128, num_warps=4, num_stages=3, n_tiles=28), Format.FP8_TENSOR, 512)


def test_run_tune_driver_in_interpreter(tmp_path):
    """The whole tune driver (weights, reference, validation, timing, table and report) on the
    interpreter: the written table is what choose_moe_config then picks for this shape."""
    from fusedmoe.bench.tune import TuneOptions, run_tune

    out, rep = str(tmp_path / "t.json"), str(tmp_path / "r.json")
    p = get_preset("tiny-relu2")
    res = run_tune(TuneOptions(presets=[p], weight_formats=[Format.FP8_TENSOR], tokens=[4], out=out, report=rep,
                               max_candidates=3, device="cpu"), log=lambda s: None)
    (pt,) = res["points"]
    assert pt["tried"] >= 3 and pt["tuned_us"] > 0 and pt["heuristic_us"] > 0 and pt["best"]
    # (the shipped table has no "cpu" entries: the table served the heuristic)
    assert pt["table_us"] is None and pt["vs_table"] == pytest.approx(pt["heuristic_us"] / pt["tuned_us"])
    assert all(r["status"] in ("ok", "error", "rejected", "kept") for r in pt["rows"])
    # the file exists either way; with the winner's entry, or none where the winner is the heuristic (which the
    # point then runs anyway): the config chosen afterwards is the winner
    table = load_tuned_configs(out)
    assert len(table) == (2 if pt["entry_written"] else 0)
    got = choose_moe_config(4, p.hidden, pt["I_pad"], p.experts, p.top_k, Format.FP8_TENSOR, p.activation, "cpu",
                            table=table)
    assert got.gemm1.to_dict() == pt["best"]["gemm1"] and got.gemm2.to_dict() == pt["best"]["gemm2"]
    assert json.load(open(rep))["points"][0]["tokens"] == 4


# ---- GPU (run on the H200: pytest -m gpu tests/test_bench.py; about a minute) -------------------------


@pytest.mark.gpu
def test_gpu_bench_point_graph_timing():
    opts = BenchOptions(presets=[get_preset("qwen3-30b-a3b-tp8")], weight_formats=[Format.BF16, Format.FP8_TENSOR],
                        tokens=[1, 64], peers=["triton", "torch-grouped-mm", "reference", "sglang"], device="cuda",
                        quick_ceilings=True)
    doc = run_bench(opts, log=print)
    assert doc["ceilings"]["meaningful"] and doc["ceilings"]["mem_gbps"] > 1000
    by = {(r["weight_format"], r["tokens"], r["backend"]): r for r in doc["results"]}
    for fmt in ("bf16", "fp8_tensor"):
        for T in (1, 64):
            t = by[(fmt, T, "triton")]
            assert t["status"] == "ok" and t["check"] == "ok" and t["timing"] == "graph", t
            assert 0 < t["roofline_pct"] <= 100 * 1.05, t  # above the roofline means broken accounting
            assert by[(fmt, T, "reference")]["timing"] == "events"
    assert by[("bf16", 64, "torch-grouped-mm")]["status"] == "ok"
    assert by[("fp8_tensor", 64, "torch-grouped-mm")]["status"] == "unsupported"
    assert by[("bf16", 1, "sglang")]["status"] in ("ok", "unsupported")  # unsupported: no sglang sources here


@pytest.mark.gpu
def test_gpu_tune_small(tmp_path):
    from fusedmoe.bench.tune import TuneOptions, run_tune

    out = str(tmp_path / "t.json")
    p = get_preset("qwen3-30b-a3b-tp8")
    res = run_tune(TuneOptions(presets=[p], weight_formats=[Format.BF16], tokens=[16], out=out, max_candidates=4,
                               jobs=2, device="cuda"), log=print)
    (pt,) = res["points"]
    assert pt["best"] and pt["tuned_us"] <= pt["heuristic_us"] * 1.05
    table = load_tuned_configs(out)
    got = choose_moe_config(16, p.hidden, pt["I_pad"], p.experts, p.top_k, Format.BF16, p.activation,
                            torch.cuda.get_device_name(), table=table)
    assert got.gemm1.to_dict() == pt["best"]["gemm1"]


@pytest.mark.gpu
def test_gpu_check_quick():
    from fusedmoe.bench.check import run_check

    res = run_check("cuda", activations=[Activation.SWIGLU, Activation.RELU2], formats=[Format.BF16, Format.FP8_BLOCK],
                    routings=[RoutingMethod.DEEPSEEK_V3, RoutingMethod.LLAMA4])
    bad = [r for r in res["rows"] if r["status"] not in ("ok", "n/a")]
    assert not bad, bad
    assert all(r["status"] == "ok" for r in res["routing_rows"])


_FAKE_SGL_KERNELS = '''
import torch
from sglang.kernels.jit.utils import is_arch_support_pdl
from sglang.kernels.ops.quantization.fp8_kernel import scaled_fp8_quant, sglang_per_token_group_quant_fp8
from sglang.srt.environ import envs
from sglang.srt.utils import is_cuda, is_hip

_use_aiter = envs.SGLANG_USE_AITER.get() and is_hip()


def invoke_fused_moe_kernel(A, B, bias, C, A_scale, B_scale, B_zp, topk_weights, topk_ids, sorted_token_ids,
                            expert_ids, num_tokens_post_padded, mul_routed_weight, top_k, config, compute_type,
                            use_fp8_w8a8, use_int8_w8a8, use_int8_w8a16, use_int4_w4a16, per_channel_quant,
                            block_shape=None):
    assert not use_fp8_w8a8 and config["BLOCK_SIZE_M"] == 16
    ids = topk_ids.reshape(-1).long()
    rows = A.float()[torch.arange(ids.numel()) // top_k]
    y = torch.einsum("sk,snk->sn", rows, B.float()[ids])
    if mul_routed_weight:
        y = y * topk_weights.reshape(-1, 1)
    C.view(-1, C.shape[-1]).copy_(y.to(C.dtype))


def act_and_mul_triton(gateup, down, config, topk_ids=None, expert_ids=None, tma=False, activation="silu"):
    I = down.shape[1]
    g, u = gateup.float()[:, :I], gateup.float()[:, I:]
    down.copy_((torch.nn.functional.silu(g) * u).to(down.dtype))


def moe_sum_reduce_triton(inp, out, scale):
    out.copy_((inp.float().sum(1) * scale).to(out.dtype))
'''

_FAKE_SGL_CONFIG = '''
from sglang.srt.runtime_context import get_exec
from sglang.srt.utils import get_device_name


def get_config_file_name(E, N, dtype, block_shape=None, per_channel_quant=False, down_moe=False):
    return f"E={E},N={N},device_name={get_device_name().replace(' ', '_')}.json"


def try_get_optimal_moe_config(w1_shape, w2_shape, top_k, dtype, M, block_shape=None, per_channel_quant=False,
                               return_down_config=False):
    from sglang.srt.layers.moe.moe_runner.triton_utils import get_config

    assert get_config() is None and not get_exec().deterministic.enable_deterministic_inference
    return {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1}, (None, None)
'''


def test_sglang_loader_with_stand_ins(tmp_path):
    """The SGLang peer loads sources through stand-in modules and leaves sys.modules as it was
    (a fake sglang tree with SGLang's file layout and imports, torch math inside)."""
    import sys

    from fusedmoe.bench.peers import SGLangPeer

    k = tmp_path / "sglang/kernels/ops/moe/fused_moe_triton_kernels.py"
    c = tmp_path / "sglang/srt/layers/moe/moe_runner/triton_utils/fused_moe_triton_config.py"
    for path, text in ((k, _FAKE_SGL_KERNELS), (c, _FAKE_SGL_CONFIG)):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (c.parent / "configs/triton_9_9_9").mkdir(parents=True)
    before = {n for n in sys.modules if n == "sglang" or n.startswith("sglang.")}
    peer = SGLangPeer(str(tmp_path))
    p = get_preset("tiny")
    case = BenchCase(p, Format.BF16, Format.BF16, p.routing_config(), torch.float16)
    w = make_weights(p, Format.BF16, device="cpu", dtype=torch.float16)
    why = peer.supports(case, torch.device("cpu"))
    if why and "interpreter" not in why and "CUDA" not in why:
        pytest.fail(why)
    runner = peer.build(case, w)
    (s,) = make_inputs(case, 5, device="cpu")
    out = runner(s.x, s.topk)
    from fusedmoe.backends.reference import reference_moe

    ref = reference_moe(s.x, w, s.topk, activation=w.activation)
    mx, rms = rel_errors(out, ref)
    assert rms < 5e-3, (mx, rms)
    assert runner.info(5)["config_source"] == "default" and "sources at" in runner.info(5)["sglang"]
    assert {n for n in sys.modules if n == "sglang" or n.startswith("sglang.")} == before
    bad = SGLangPeer(str(tmp_path / "nowhere"))
    assert "no sglang" in bad.supports(case, torch.device("cpu"))
    gpt = get_preset("gpt-oss-20b")
    assert "SWIGLU_OAI" in peer.supports(BenchCase(gpt, Format.BF16, Format.BF16, gpt.routing_config()),
                                         torch.device("cuda"))
