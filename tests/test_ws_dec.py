"""The 16-bit / FP8 decode GEMMs (``kernels/_ws_dec.py``; OPT-IN: ``set_ws_decode`` / ``FUSEDMOE_WS_DECODE=1``,
thirtieth session, compiled for sm_90 only until the GPU tests here have run).

CPU (CI): every variant compiles for sm_90 as a warp-specialized kernel (the consumer warpgroup and the loader warp)
with 4 wgmmas a 128-byte K block, the 16-bit ones asynchronous, no spills under the register cap, the programs'
shared memory within an SM; the kernel's index math mirrored in torch (unit walk, K shares, TMA boxes with TMA's
zeros past K and past the weights, 8-row token boxes, FP8 block scales, split-K in order) against a float64 matmul;
the config rules, the stage rule, the switch and the automatic choice. GPU (marker ``gpu``): against the reference
and the Triton kernels for BF16 / FP16 and FP8 per tensor (static and dynamic scales), per channel and 128 x 128
blocks, gated (SwiGLU, clamped SwiGLU with biases) and non-gated (ReLU^2), split-K 1 / 2 / 4, expert parallelism,
blocks of more and fewer than 8 real rows, K = 1 with the weight on the input, the padded hand-off against the
gathered one bit for bit, the same bits on repeated calls and in a CUDA graph, and DeepSeek-V3 TP8's, Qwen3-30B's and
Nemotron's expert shapes at one and eight tokens.
"""

import contextlib
import dataclasses
import os

import pytest
import torch

from gluon_sm90 import SCRIPT_HEAD, LaunchCapture
from test_triton_fp4 import run_sm90_script
from test_ws_fp4_dec import assert_decode_tiles_refused
from test_triton_moe import (ACT_FMT, DEV, _errors, _graph_replay_matches, _params, _run_within_bound, gpu,
                             interpreter, make_problem, run_case)

from fusedmoe.backends import triton_moe
from fusedmoe.backends.kernel_configs import (KernelConfig, MoEKernelConfig, TunedTable, choose_moe_config,
                                              triton_tile, warp_specialized_config, warp_specialized_problem,
                                              ws_dec_block_k, ws_dec_config, ws_dec_max_blocks, ws_dec_stage_bytes)
from fusedmoe.backends.triton_moe import triton_experts
from fusedmoe.config import Activation, Format

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
A, F = Activation, Format
FMTS = [F.BF16, F.FP8_TENSOR, F.FP8_CHANNEL, F.FP8_BLOCK]


# ---- CPU: sm_90 compile --------------------------------------------------------------------------

_SCRIPT = SCRIPT_HEAD + r'''
from fusedmoe.kernels import _ws_dec as kd
# ACT, GATED, QUANT, OUT_Q, HAS_BIAS, WEIGHT_ON_INPUT, MUL_ROUTING_WEIGHT, dtype, STAGES, SPLIT, KB, maxnreg,
# OUT_PADDED, X_GATHER (the token rows by cp.async instead of TMA boxes of gathered rows), T_RELEASE (every
# consumer thread frees the ring slots)
for ACT, GATED, QUANT, OUT_Q, HB, WOI, MRW, DT, ST, SPLIT, KB, mr, OP, XG, TR in (
        (0, True, 0, 0, False, False, False, "bf16", 8, 1, 1, 128, True, True, False),  # BF16 SwiGLU GEMM1, padded
        (3, False, 0, 0, False, False, False, "bf16", 8, 2, 2, None, False, False, False),  # BF16 ReLU2, split 2, 2 blocks
        (7, False, 0, 0, True, False, True, "bf16", 6, 4, 1, 80, False, True, False),  # BF16 GEMM2: bias, routing weight
        (0, True, 1, 1, False, False, False, "fp8e4nv", 8, 1, 1, 128, True, True, False),  # FP8 tensor, static FP8 out
        (3, False, 2, 0, False, False, False, "fp8e4nv", 6, 2, 1, 80, False, False, False),  # FP8 channel ReLU2
        (7, False, 2, 0, False, False, True, "fp8e4nv", 4, 2, 2, 128, False, True, False),  # FP8 channel GEMM2, 2 blocks
        (0, True, 3, 0, False, False, False, "fp8e4nv", 8, 1, 1, 128, True, False, False),  # FP8 blocks SwiGLU, padded
        (7, False, 3, 0, False, False, True, "fp8e4nv", 6, 4, 1, 80, False, False, False),  # FP8 blocks GEMM2
        (2, True, 2, 5, True, True, False, "fp8e4nv", 4, 1, 2, 128, False, True, False),  # clamped SwiGLU, woi, amax
        (0, True, 0, 0, False, False, False, "fp16", 6, 1, 1, 80, False, False, False),  # fp16
        # 4 programs an SM: 64 registers a thread, the stages that fit (5 of one 128-byte block)
        (0, True, 0, 0, False, False, False, "bf16", 5, 1, 1, 64, True, True, False),  # BF16 SwiGLU GEMM1, cp.async
        (7, False, 3, 0, False, False, True, "fp8e4nv", 5, 4, 1, 64, False, False, False),  # FP8 blocks GEMM2, split 4
        # every consumer thread frees the ring slots (no warpgroup barriers around one thread's arrive)
        (0, True, 0, 0, False, False, False, "bf16", 8, 1, 1, 128, True, True, True),  # BF16 SwiGLU GEMM1, cp.async
        (7, False, 2, 0, False, False, True, "fp8e4nv", 4, 2, 2, 128, False, False, True)):  # FP8 channel, 2 blocks
    gdt = {"bf16": gl.bfloat16, "fp16": gl.float16, "fp8e4nv": gl.float8e4nv}[DT]
    BKE = 128 if DT == "fp8e4nv" else 64
    xl = gl.NVMMASharedLayout.get_default_for([16, BKE], gdt)
    wl = gl.NVMMASharedLayout.get_default_for([32, BKE], gdt)
    OD = "fp8e4nv" if OUT_Q == 1 else ("fp16" if DT == "fp16" else "bf16")
    sig = {"x_desc": f"tensordesc<{DT}[16, {BKE}],{xl}>", "x8_desc": f"tensordesc<{DT}[8, {BKE}],{xl}>",
           "w_desc": f"tensordesc<{DT}[32, {BKE}],{wl}>", "out_ptr": f"*{OD}", "a_scale_ptr": "*fp32",
           "w_scale_ptr": "*fp32", "bias_ptr": "*fp32", "topk_w_ptr": "*fp32",
           "out_qscale_ptr": "*i32" if OUT_Q == 5 else "*fp32", "sorted_ids_ptr": "*i32", "block_expert_ptr": "*i32",
           "num_post_padded_ptr": "*i32", "part_ptr": "*fp32", "cnt_ptr": "*i32", "x_ptr": f"*{DT}", "N": "i32",
           "R": "i32", "K": "i32", "n_k": "i32", "n_kb": "i32", "num_n": "i32", "num_slots": "i32", "stride_om": "i32",
           "stride_asm": "i32", "stride_wse": "i32", "stride_wsn": "i32", "stride_wsk": "i32", "stride_be": "i32",
           "stride_x": "i32", "act_alpha": "fp32", "act_beta": "fp32", "act_limit": "fp32"}
    cx = dict(TOP_K=8, E_LOC=32, ACT=ACT, GATED=GATED, QUANT=QUANT, OUT_Q=OUT_Q,
              ROUND_DTYPE=gl.float16 if DT == "fp16" else gl.bfloat16, HAS_BIAS=HB, WEIGHT_ON_INPUT=WOI,
              MUL_ROUTING_WEIGHT=MRW, RCP_DIV=OUT_Q == 1, STAGES=ST, SPLIT=SPLIT, KB=KB, OUT_PADDED=OP,
              A_PADDED=QUANT == 3 and MRW, X_GATHER=XG, USE_GDC=SPLIT == 2, T_RELEASE=TR)
    # (the JIT specializes the cp.async source, its row stride and K as 16-byte aligned: the launcher checks they are)
    k, sass = compile_sm90(kd._ws_dec_kernel, sig, cx, aligned=("x_ptr", "stride_x", "K"),
                           **({} if mr is None else {"maxnreg": mr}))
    ins = sass_instructions(sass)
    loop = k_loop(ins)  # the K loop
    print(QUANT, DT, SPLIT, KB, mr, ST, k.metadata.num_warps, k.metadata.shared, len(loop),
          sum(("HGMMA" in x) or ("QGMMA" in x) for x in loop), sum("DEPBAR.LE gsb0, 0x0" in x for x in loop),
          sum(("LDL" in x) or ("STL" in x) for _, x in ins), int(XG),
          sum(("LDGSTS" in x) and ("ARRIVES" not in x) for _, x in ins),
          sum("ARRIVES.LDGSTSBAR" in x for _, x in ins), sum("FENCE.VIEW.ASYNC.S" in x for x in loop),
          int(SPLIT == 2), sum(("ACQBULK" in x) or ("PREEXIT" in x) for _, x in ins), int(TR),
          sum("BAR.SYNC" in x for x in loop), sep="|", flush=True)
'''


def test_ws_dec_compiles_for_sm90(tmp_path):
    """Every variant: 8 warps (the consumer warpgroup, the loader warp, padding), 4 wgmmas per 128-byte K block in a
    short K loop, the 16-bit ones asynchronous (no ``DEPBAR.LE gsb0, 0x0`` in the loop) and FP8 waiting once a block
    (its promoted accumulation), no spills, and as many programs' shared memory in an SM as the register cap lets
    share it (80 registers: 3, 128: 2) at the stage count ``triton_moe.ws_dec_stages`` gives; with ``USE_GDC`` the
    programmatic-dependent-launch wait and trigger."""
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    rows = run_sm90_script(tmp_path, f"ROOT = {ROOT!r}\n" + _SCRIPT)
    assert len(rows) == 14, rows
    for (quant, dt, split, kb, mr, st, warps, smem, loop, mma, serial, spills, xg, ldgsts, arrives, fences, gdc,
         gdc_ops, tr, bars) in rows:
        where = f"QUANT={quant} {dt} SPLIT={split} KB={kb} STAGES={st} X_GATHER={xg} T_RELEASE={tr}"
        # X_GATHER: the loader's cp.async copies (16 bytes each) and their barrier arrival, the consumer's proxy fence
        assert (int(ldgsts) > 0, int(fences) > 0) == (xg == "1",) * 2, (where, ldgsts, fences)
        # T_RELEASE: the consumer's threads arrive on the empty barriers themselves (cp.async.mbarrier.arrive), and
        # no warpgroup barrier is left around the release (the loop keeps at most the one at its top)
        assert (int(arrives) > 0) == (xg == "1" or tr == "1"), (where, arrives)
        assert (int(bars) <= 1) == (tr == "1"), (where, bars)
        kb = int(kb)
        assert int(warps) == 8, where
        assert int(mma) == 4 * kb and int(loop) <= 40 + 50 * kb, (where, mma, loop)
        assert int(serial) == (0 if quant == "0" else kb), (where, serial)
        assert int(spills) == 0, where
        assert int(gdc_ops) == (2 if gdc == "1" else 0), (where, gdc_ops)  # griddepcontrol.wait / launch_dependents
        ctas = {"64": 4, "80": 3, "128": 2, "None": 1}[mr]
        fmt = F.BF16 if quant == "0" else F.FP8_TENSOR
        assert triton_moe.ws_dec_stages(fmt, kb, ctas) >= int(st), where  # the rule would allow this many stages
        assert int(smem) * ctas <= 228 * 1024 - ctas * 1024, (where, smem)


_FUSED_SCRIPT = SCRIPT_HEAD + r'''
from fusedmoe.kernels import _ws_dec as kd
# ACT, GATED, QUANT, OUT_Q1, HAS_BIAS, WEIGHT_ON_INPUT, dtype, STAGES, SPLIT1, SPLIT2, KB, maxnreg
for ACT, GATED, QUANT, OUT_Q1, HB, WOI, DT, ST, S1, S2, KB, mr in (
        (0, True, 0, 0, False, False, "bf16", 8, 2, 1, 1, 128),        # BF16 SwiGLU, GEMM1 split 2
        (3, False, 1, 1, True, False, "fp8e4nv", 6, 1, 2, 1, 80),      # FP8 tensor ReLU2, static FP8 intermediate
        (2, True, 0, 0, True, True, "bf16", 4, 1, 1, 2, 128)):         # clamped SwiGLU, biases, weight on input
    gdt = {"bf16": gl.bfloat16, "fp8e4nv": gl.float8e4nv}[DT]
    BKE = 128 if DT == "fp8e4nv" else 64
    xl = gl.NVMMASharedLayout.get_default_for([16, BKE], gdt)
    IT = "fp8e4nv" if OUT_Q1 == 1 else "bf16"
    sig = {"x_desc": f"tensordesc<{DT}[16, {BKE}],{xl}>", "x8_desc": f"tensordesc<{DT}[8, {BKE}],{xl}>",
           "w1_desc": f"tensordesc<{DT}[32, {BKE}],{xl}>", "w2_desc": f"tensordesc<{DT}[32, {BKE}],{xl}>",
           "hidden_ptr": f"*{DT}", "inter_ptr": f"*{IT}", "y_ptr": "*bf16", "a1_scale_ptr": "*fp32",
           "w1_scale_ptr": "*fp32", "b1_ptr": "*fp32", "a2_scale_ptr": "*fp32", "w2_scale_ptr": "*fp32",
           "b2_ptr": "*fp32", "topk_w_ptr": "*fp32", "sorted_ids_ptr": "*i32", "block_expert_ptr": "*i32",
           "num_post_padded_ptr": "*i32", "part1_ptr": "*fp32", "cnt1_ptr": "*i32", "part2_ptr": "*fp32",
           "cnt2_ptr": "*i32", "dep_ptr": "*i32", "I": "i32", "H": "i32", "R1": "i32", "n_k1": "i32", "n_k2": "i32",
           "num_n1": "i32", "num_n2": "i32", "num_slots": "i32", "stride_h": "i32", "stride_i": "i32",
           "stride_y": "i32", "stride_w1se": "i32", "stride_w1sn": "i32", "stride_w2se": "i32", "stride_w2sn": "i32",
           "stride_b1": "i32", "stride_b2": "i32", "act_alpha": "fp32", "act_beta": "fp32", "act_limit": "fp32"}
    cx = dict(TOP_K=8, E_LOC=32, ACT=ACT, GATED=GATED, QUANT=QUANT, OUT_Q1=OUT_Q1, ROUND_DTYPE=gl.bfloat16,
              HAS_BIAS1=HB, HAS_BIAS2=HB, WEIGHT_ON_INPUT=WOI, RCP_DIV=OUT_Q1 == 1, STAGES=ST, SPLIT1=S1, SPLIT2=S2,
              KB=KB, USE_GDC=True)
    k, sass = compile_sm90(kd._ws_dec_fused_kernel, sig, cx, maxnreg=mr,
                           aligned=("hidden_ptr", "inter_ptr", "stride_h", "stride_i", "I", "H"))
    lines = sass.splitlines()
    print(QUANT, DT, mr, k.metadata.num_warps, k.metadata.shared, sass.count("LDL") + sass.count("STL"),
          sum(("HGMMA" in x) or ("QGMMA" in x) for x in lines), int("LDGSTS" in sass),
          sum("ATOMG.E.ADD.STRONG.GPU" in x for x in lines), int("CCTL.IVALL" in sass),
          sum("REDG.E.ADD.STRONG.GPU" in x for x in lines), int("MEMBAR.ALL.GPU" in sass), sep="|", flush=True)
'''


def test_ws_dec_fused_compiles_for_sm90(tmp_path):
    """The fused kernel (both decode GEMMs in one launch): 8 warps, both phases' wgmmas, the cp.async token rows, no
    spills, two programs' shared memory in an SM; GEMM2's dependency wait is an acquire at GPU scope (atomic read and
    L1 invalidation) and GEMM1's signal a release (GPU fence, then the add) -- with split-K, the split counters'
    atomics next to them."""
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    rows = run_sm90_script(tmp_path, f"ROOT = {ROOT!r}\n" + _FUSED_SCRIPT)
    assert len(rows) == 3, rows
    for quant, dt, mr, warps, smem, spills, mma, ldgsts, acquires, inval, releases, fence in rows:
        where = f"QUANT={quant} {dt}"
        assert int(warps) == 8 and int(spills) == 0 and int(ldgsts) == 1, where
        assert int(mma) >= 8, (where, mma)  # both phases' K loops
        assert int(acquires) >= 1 and int(inval) == 1 and int(releases) >= 1 and int(fence) == 1, (where, acquires,
                                                                                                    releases)
        assert int(smem) * (3 if mr == "80" else 2) <= 228 * 1024 - 3 * 1024, (where, smem)


# ---- CPU: rules, the switch, the automatic choice ----------------------------------------------------


def test_ws_dec_config_rules(monkeypatch):
    """The decode tile (16 token rows, 32 gated GEMM1 / 64 output columns, one or two 128-byte K blocks a step,
    split-K) passes the rules for every 16-bit / FP8 format; other shapes are refused with the reason; the stage
    rule fits the programs an SM; the switch is opt-in and validated; ``auto_ws_decode`` (and ``auto_ws``) picks the
    decode tiles only with it on, for decode tiles (block_m <= 16), and never for FP4 weights."""
    for fmt in FMTS:
        bke = 64 if fmt is F.BF16 else 128
        for gated, gemm, bn in ((True, "gemm1", 32), (False, "gemm1", 64), (False, "gemm2", 64)):
            for blocks in (1, 2):
                c = ws_dec_config(gated, gemm, fmt, 2, 6, blocks)
                assert (c.block_m, c.block_n, c.block_k, c.split_k, c.warp_specialized) == (16, bn, blocks * bke, 2,
                                                                                              True)
                why = warp_specialized_problem(c, fmt, gemm, gated, 7168)
                if fmt is F.FP8_BLOCK and blocks == 2:  # one scale block a K step
                    assert why is not None and "block_k 128 and" in why, why
                else:
                    assert why is None, (fmt, gemm, why)
        assert ws_dec_stage_bytes(bke, fmt) == 80 * 128
    assert_decode_tiles_refused(F.FP8_TENSOR, 7168, 64, "block_k 128 / 256")
    assert "multiple of 16" in warp_specialized_problem(ws_dec_config(False, "gemm2", F.BF16), F.BF16, "gemm2",
                                                        False, 200)
    # every K share has a step (the fused kernel's per-block counters count every GEMM2 unit past its wait)
    assert "at most its 4 steps" in warp_specialized_problem(ws_dec_config(False, "gemm2", F.BF16, 8), F.BF16,
                                                             "gemm2", False, 256)
    assert warp_specialized_problem(ws_dec_config(False, "gemm2", F.BF16, 4), F.BF16, "gemm2", False, 256) is None
    # programs an SM in the config (persistent, split-K allowed on decode tiles): 1-3, the ring within a program's
    # share of the SM's shared memory (3 programs: 228 KB / 3 - 5.25 KB fixed = 7 stages of 10 KB)
    ok = ws_dec_config(False, "gemm2", F.BF16, 4, 7, 1, ctas=3)
    assert ok.persistent == 3 and warp_specialized_problem(ok, F.BF16, "gemm2", False, 256) is None
    assert "at most 7 stages" in warp_specialized_problem(ws_dec_config(False, "gemm2", F.BF16, 4, 8, 1, 3), F.BF16,
                                                          "gemm2", False, 256)
    assert "1 / 2 / 3 / 4 programs an SM" in warp_specialized_problem(
        KernelConfig(16, 64, 64, split_k=2, persistent=5, warp_specialized=True), F.BF16, "gemm2", False, 256)
    # 4 programs: 228 KB / 4 - 5.25 KB = 5 stages of 10 KB
    assert warp_specialized_problem(ws_dec_config(False, "gemm2", F.BF16, 4, 5, 1, 4), F.BF16, "gemm2", False,
                                    256) is None
    assert "at most 5 stages" in warp_specialized_problem(ws_dec_config(False, "gemm2", F.BF16, 4, 6, 1, 4), F.BF16,
                                                          "gemm2", False, 256)
    with pytest.raises(ValueError, match="needs split_k 1"):  # elsewhere a persistent GEMM2 does not split K
        KernelConfig(16, 64, 64, split_k=2, persistent=2)
    with pytest.raises(ValueError, match="weights"):
        ws_dec_config(True, "gemm1", F.MXFP4)
    with pytest.raises(ValueError, match="blocks"):
        ws_dec_config(True, "gemm1", F.BF16, blocks=3)
    # stages: as many as let the programs share an SM (10 KB a one-block step, 20 KB a two-block one)
    assert [triton_moe.ws_dec_stages(F.BF16, 1, n) for n in (1, 2, 3, 4)] == [8, 8, 7, 5]
    assert [triton_moe.ws_dec_stages(F.FP8_BLOCK, 2, n) for n in (1, 2, 3, 4)] == [8, 5, 3, 2]
    assert triton_moe.ws_dec_stages(F.BF16, 1, 3, 4) == 4
    prev = triton_moe.set_ws_decode(False)
    try:
        assert prev[0] is False  # opt-in
        assert triton_moe.set_ws_decode(True, 3, 0, 2) == (False,) + prev[1:]
        with pytest.raises(ValueError, match="ctas"):
            triton_moe.set_ws_decode(True, 5)
        with pytest.raises(ValueError, match="num_stages"):
            triton_moe.set_ws_decode(True, 2, 9)
        with pytest.raises(TypeError):
            triton_moe.set_ws_decode("on")
        # the automatic choice (a CUDA sm_90 device pretended)
        monkeypatch.setattr(triton_moe, "_cuda_major", lambda index: 9)
        monkeypatch.setattr(triton_moe, "_device_info", lambda dev: ("NVIDIA H200", 132))
        cuda = torch.device("cuda", 0)
        dec = MoEKernelConfig(KernelConfig(16, 64, 128, swap_ab=True, split_k=2), KernelConfig(16, 64, 128))
        for fmt in FMTS:
            prob = make_problem(T=2, H=7168, I=256, I_pad=256, E=8, K=4, act=A.SWIGLU, wfmt=fmt,
                                dtype=torch.bfloat16, seed=1, device="cpu")

            def auto(cfg, tokens=1):
                return triton_moe.auto_ws(cfg, prob["q13"], prob["q2"], ACT_FMT[fmt], torch.bfloat16, cuda, tokens, 4,
                                          A.SWIGLU)

            triton_moe.set_ws_decode(False)
            assert auto(dec) is dec
            triton_moe.set_ws_decode(True, 2, 0, 1)
            got = auto(dec)
            bke = 64 if fmt is F.BF16 else 128
            assert got.gemm1.block_m == 16 and got.gemm1.warp_specialized and got.gemm2.warp_specialized
            assert (got.gemm1.block_n, got.gemm2.block_n, got.gemm1.block_k, got.gemm1.num_stages) == (32, 64, bke, 8)
            # DeepSeek-V3 TP8 at one token: 4 blocks x 8 column tiles of GEMM1 on 264 programs -> K in 8 shares;
            # GEMM2: 4 x 112 units, K = 256 in 2-4 steps -> no split
            assert got.gemm1.split_k == 8 and got.gemm2.split_k == 1, got
            mid = MoEKernelConfig(KernelConfig(64, 64, 64, swap_ab=True), KernelConfig(64, 128, 64, swap_ab=True))
            assert auto(mid, 64) is mid  # 64-row tiles: not decode tiles
            atomic = MoEKernelConfig(dec.gemm1, dec.gemm2, True)
            assert auto(atomic) is atomic  # an atomic combine: left alone
            tuned = triton_moe.ws_decode_config(1, 7168, 256, 8, 4, fmt, True, 2, 132, 3)
            assert auto(tuned) is tuned  # the tuned table's decode-kernel entry, as it is (the switch on too)
            # ... but with an atomic combine (GEMM2 warp-specialized stores y by slot): the Triton kernels' config
            got = auto(MoEKernelConfig(tuned.gemm1, tuned.gemm2, True))
            assert got.atomic_combine and not got.gemm1.warp_specialized and not got.gemm2.warp_specialized
        # 16-bit weights in another dtype than hidden: refused by the layer rule
        prob = make_problem(T=2, H=256, I=128, I_pad=128, E=4, K=2, act=A.SWIGLU, wfmt=F.BF16, dtype=torch.float16,
                            seed=1, device="cpu")
        assert triton_moe.auto_ws(dec, prob["q13"], prob["q2"], F.BF16, torch.bfloat16, cuda, 1, 2, A.SWIGLU) is dec
        # ... and where a tuned table chose the decode kernel for such a layer: the heuristic's Triton config
        for on in (False, True):
            triton_moe.set_ws_decode(on)
            tuned = triton_moe.ws_decode_config(1, 256, 128, 4, 2, F.BF16, True, 1, 132, 3)
            got = triton_moe.auto_ws(tuned, prob["q13"], prob["q2"], F.BF16, torch.bfloat16, cuda, 1, 2, A.SWIGLU)
            assert not got.gemm1.warp_specialized and not got.gemm2.warp_specialized, got
            assert got == choose_moe_config(1, 256, 128, 4, 2, F.BF16, A.SWIGLU, "NVIDIA H200", table=TunedTable(),
                                            num_sms=132)
    finally:
        triton_moe.set_ws_decode(*prev)


def test_gluon_kernels_need_triton_3_6(monkeypatch):
    """With a Triton older than 3.6 (whose Gluon API the kernels are not written for) a call without a config never
    runs a Gluon kernel -- where the tuned table or the heuristic chose one, the heuristic's Triton config runs --
    and an explicit warp-specialized config raises NotImplementedError saying why."""
    assert triton_moe._triton_version("3.6.0+git1a2b") == (3, 6) and triton_moe._triton_version("3.10.0rc1") == (3, 10)
    assert triton_moe._triton_version("4") == (4, 0)
    assert triton_moe.gluon_problem("3.6.0") is None and triton_moe.gluon_problem("3.7.1") is None
    why = triton_moe.gluon_problem("3.5.1")
    assert why is not None and ">= 3.6" in why and "3.5.1" in why
    monkeypatch.setattr(triton_moe, "gluon_problem", lambda version=None: why)
    monkeypatch.setattr(triton_moe, "_cuda_major", lambda index: 9)
    monkeypatch.setattr(triton_moe, "_device_info", lambda dev: ("NVIDIA H200", 132))
    cuda = torch.device("cuda", 0)
    prob = make_problem(T=2, H=256, I=128, I_pad=128, E=4, K=2, act=A.SWIGLU, wfmt=F.FP8_TENSOR,
                        dtype=torch.bfloat16, seed=1, device="cpu")
    heur = choose_moe_config(1, 256, 128, 4, 2, F.FP8_TENSOR, A.SWIGLU, "NVIDIA H200", table=TunedTable(), num_sms=132)
    prev = triton_moe.set_ws_decode(True)
    try:
        for cfg in (triton_moe.ws_decode_config(1, 256, 128, 4, 2, F.FP8_TENSOR, True, 1, 132, 3), heur):
            got = triton_moe.auto_ws(cfg, prob["q13"], prob["q2"], F.FP8_TENSOR, torch.bfloat16, cuda, 1, 2, A.SWIGLU)
            assert not got.gemm1.warp_specialized and not got.gemm2.warp_specialized, got
            assert got == heur  # (the switch is on: with Triton 3.6 the decode kernel would take heur's place)
    finally:
        triton_moe.set_ws_decode(*prev)
    # a warp-specialized prefill choice: the Triton tile it replaced
    pre = MoEKernelConfig(warp_specialized_config(True, weight_format=F.FP8_TENSOR),
                          warp_specialized_config(False, weight_format=F.FP8_TENSOR))
    got = triton_moe.auto_ws(pre, prob["q13"], prob["q2"], F.FP8_TENSOR, torch.bfloat16, cuda, 4096, 2, A.SWIGLU)
    want = choose_moe_config(4096, 256, 128, 4, 2, F.FP8_TENSOR, A.SWIGLU, "NVIDIA H200", table=TunedTable(),
                             num_sms=132)
    assert got == MoEKernelConfig(triton_tile(want.gemm1), triton_tile(want.gemm2))
    assert not got.gemm1.warp_specialized and not got.gemm2.warp_specialized
    with pytest.raises(NotImplementedError, match=r"Triton >= 3\.6"):
        triton_moe._ws_check(cuda, False, prob["q13"], torch.bfloat16)


# ---- CPU: the launcher's arguments ----------------------------------------------------------------


def _stand_in(monkeypatch, kernel: str, wfmt, gated):
    """The launcher tests' setup: ``kernels/_ws_dec.<kernel>``'s signature, a ``LaunchCapture`` in its place, and a small
    layer's weights on the CPU (H = 768, I = 256, 4 experts, 3 tokens, top 2)."""
    import inspect

    from fusedmoe.kernels import _ws_dec as kd

    sig = inspect.signature(getattr(kd, kernel).fn)
    cap = LaunchCapture()
    monkeypatch.setattr(kd, kernel, cap)
    H, I, E, T, K = 768, 256, 4, 3, 2
    prob = make_problem(T=T, H=H, I=I, I_pad=I, E=E, K=K, act=A.SWIGLU if gated else A.RELU2, wfmt=wfmt,
                        dtype=torch.bfloat16, seed=2, device="cpu")
    return sig, cap, prob, (H, I, E, T, K)


@pytest.mark.parametrize("wfmt,gated,x_gather", [(F.BF16, True, True), (F.FP8_BLOCK, False, False),
                                                 (F.FP8_CHANNEL, True, False)])
def test_ws_dec_launch_binds_every_argument(monkeypatch, wfmt, gated, x_gather):
    """``triton_moe._ws_dec_launch`` passes ~50 positional arguments: bound to the kernel's signature (a count or
    order slip fails ``Signature.bind`` or a value check), each lands where its meaning says -- the shapes and strides
    of the rows, weights, scales, output and split-K scratch, the K steps, the TMA boxes (16 / 8 token rows, 32 weight
    rows of 128 bytes) over the right tensors, the constexprs, the persistent grid."""
    sig, cap, prob, (H, I, E, T, K) = _stand_in(monkeypatch, "_ws_dec_kernel", wfmt, gated)
    R = 2 * I if gated else I
    w = prob["q13"]
    dt = torch.bfloat16 if wfmt is F.BF16 else torch.float8_e4m3fn
    NB, TK = 5, T * K
    rows = torch.zeros(T if x_gather else NB * 16, H, dtype=dt)
    al = triton_moe.AlignResult(torch.zeros(NB * 16, dtype=torch.int32), torch.zeros(NB, dtype=torch.int32),
                                torch.zeros(1, dtype=torch.int32), 16, NB)
    out = torch.empty(TK, I, dtype=torch.bfloat16)
    a_s = torch.ones(T, H // 128) if wfmt is F.FP8_BLOCK else torch.ones(T)
    w_s = w.scale if w.scale is not None else torch.ones(1)
    bias, tw = torch.zeros(E, R), torch.ones(TK)
    part, cnt = torch.zeros(1 << 16), torch.zeros(64, dtype=torch.int32)
    ctas = 3 if wfmt is F.FP8_CHANNEL else None  # the config's programs an SM, else set_ws_decode's
    c = ws_dec_config(gated, "gemm1", wfmt, 2, 6, 2, ctas)
    n_sm = ctas or triton_moe._WS_DEC["ctas"]
    p = triton_moe._DEFAULT_ACT_PARAMS
    prev = triton_moe.set_ws_decode(False, thread_release=x_gather)  # (the per-thread slot release with cp.async)
    try:
        triton_moe._ws_dec_launch(c, rows, a_s, a_s.stride(0), w, w_s, w_s.stride(0) if w.scale is not None else 0,
                                  w_s.stride(1) if w_s.dim() >= 2 else 0, bias, True, tw, tw, 0, al, out, I, K, TK, E,
                                  0, gated, p, None, False, False, 132, part, cnt, out_padded=False,
                                  a_scales_padded=False, x_gather=x_gather,
                                  pdl={"USE_GDC": x_gather, "launch_pdl": True} if x_gather else None)
    finally:
        triton_moe.set_ws_decode(*prev)
    (grid, args, kw), = cap.calls
    kw = dict(kw)
    assert kw.pop("num_warps") == 4 and kw.pop("maxnreg") == triton_moe._WS_FP4_DEC_MAXNREG[n_sm]
    assert kw.pop("launch_pdl", False) is x_gather  # the programmatic-dependent-launch keywords pass through
    b = sig.bind(*args, **kw).arguments
    bke = 64 if wfmt is F.BF16 else 128
    num_n = I // 32 if gated else I // 64
    assert grid == (min(NB * num_n * 2, n_sm * 132),)
    assert [b[n].block_shape for n in ("x_desc", "x8_desc", "w_desc")] == [[16, bke], [8, bke], [32, bke]]
    # (x_gather: the x descriptors only carry the tile's shape and layout -- over the weights, at least 32 rows)
    assert (b["x_desc"].base.data_ptr() == w.data.data_ptr()) if x_gather else (b["x_desc"].base is rows)
    assert b["w_desc"].base.data_ptr() == w.data.data_ptr()
    assert tuple(b["w_desc"].shape) == (E * R, H)
    assert b["x_ptr"] is rows and b["stride_x"] == rows.stride(0) == H and b["K"] == H
    assert (b["out_ptr"], b["part_ptr"], b["cnt_ptr"], b["bias_ptr"]) == (out, part, cnt, bias)
    assert b["a_scale_ptr"] is a_s and b["w_scale_ptr"] is w_s and b["topk_w_ptr"] is tw
    assert (b["sorted_ids_ptr"], b["block_expert_ptr"], b["num_post_padded_ptr"]) == (al.sorted_ids, al.block_expert,
                                                                                      al.num_post_padded)
    assert (b["N"], b["R"], b["num_n"], b["num_slots"]) == (I, R, num_n, TK)
    assert (b["n_k"], b["n_kb"]) == (-(-(H // bke) // 2), H // 128)
    assert (b["stride_om"], b["stride_asm"], b["stride_be"]) == (I, a_s.stride(0), R)
    assert b["stride_wsk"] == (w_s.stride(2) if wfmt is F.FP8_BLOCK else 0)
    assert (b["act_alpha"], b["act_beta"], b["act_limit"]) == (float(p.alpha), float(p.beta), float(p.limit))
    assert (b["TOP_K"], b["E_LOC"], b["GATED"], b["KB"], b["STAGES"], b["SPLIT"]) == (K, E, gated, 2, 6, 2)
    assert b["QUANT"] == triton_moe._QUANT_CODE[wfmt] and b["X_GATHER"] is x_gather
    assert b["OUT_PADDED"] is False and b["A_PADDED"] is False and b["HAS_BIAS"] is True
    assert b.get("USE_GDC", False) is x_gather and b["T_RELEASE"] is x_gather


@pytest.mark.parametrize("wfmt,gated", [(F.BF16, True), (F.FP8_TENSOR, False)])
def test_ws_dec_fused_launch_binds_every_argument(monkeypatch, wfmt, gated):
    """``triton_moe._ws_dec_fused_launch``'s positional arguments bound to the fused kernel's signature and checked by
    meaning (both GEMMs' weights, scales, strides, K steps and column tiles, the intermediate, y, both split-K
    scratches, the dependency counters, the grid at most the programs that fit the SMs); and ``_ws_dec_fuses``: only
    with the switch, decode tiles of one ring, 16-bit weights or FP8 per tensor with a static intermediate scale,
    16-byte aligned 16-bit rows."""
    sig, cap, prob, (H, I, E, T, K) = _stand_in(monkeypatch, "_ws_dec_fused_kernel", wfmt, gated)
    R1 = 2 * I if gated else I
    w13, w2 = prob["q13"], prob["q2"]
    dt = torch.bfloat16 if wfmt is F.BF16 else torch.float8_e4m3fn
    NB, TK = 5, T * K
    a1 = torch.zeros(T, H, dtype=dt)
    al = triton_moe.AlignResult(torch.zeros(NB * 16, dtype=torch.int32), torch.zeros(NB, dtype=torch.int32),
                                torch.zeros(1, dtype=torch.int32), 16, NB)
    inter = torch.empty(NB * 16, I, dtype=dt)
    y = torch.empty(TK, H, dtype=torch.bfloat16)
    ones = torch.ones(1)
    w13_s = w13.scale if w13.scale is not None else ones
    w2_s = w2.scale if w2.scale is not None else ones
    b13, b2, tw = torch.zeros(E, R1), torch.zeros(E, H), torch.ones(TK)
    part1, cnt1, part2, cnt2, dep = torch.zeros(8), torch.zeros(8, dtype=torch.int32), torch.zeros(8), \
        torch.zeros(8, dtype=torch.int32), torch.zeros(NB, dtype=torch.int32)
    c1, c2 = ws_dec_config(gated, "gemm1", wfmt, 2, 6), ws_dec_config(False, "gemm2", wfmt, 1, 6)
    p = triton_moe._DEFAULT_ACT_PARAMS
    prev = triton_moe.set_ws_decode(True, 2, 0, 1, True, True)
    try:
        assert triton_moe._ws_dec_fuses(c1, c2, wfmt, ones, a1) is True
        assert triton_moe._ws_dec_fuses(c1, c2, F.FP8_TENSOR, None, a1) is False  # a dynamic intermediate scale
        assert triton_moe._ws_dec_fuses(c1, c2, F.FP8_CHANNEL, ones, a1) is False  # per-token: a pass in between
        c2b = ws_dec_config(False, "gemm2", wfmt, 1, 6, 2)
        assert triton_moe._ws_dec_fuses(c1, c2b, wfmt, ones, a1) is False  # one ring: the same K blocks a step
        if wfmt is F.BF16:
            assert triton_moe._ws_dec_fuses(c1, c2, wfmt, ones, torch.zeros(T, H + 1, dtype=dt)[:, 1:]) is False
        triton_moe._ws_dec_fused_launch(c1, c2, a1, ones, w13, w13_s, w13_s.stride(0) if w13.scale is not None else 0,
                                        0, b13, True, w2, w2_s, w2_s.stride(0) if w2.scale is not None else 0, 0, b2,
                                        True, tw, ones, 1, al, inter, y, K, TK, E, 0, gated, p, None, False, 132,
                                        part1, cnt1, part2, cnt2, dep, pdl={"USE_GDC": True, "launch_pdl": True})
        triton_moe.set_ws_decode(True, 2, 0, 1, True, False)
        assert triton_moe._ws_dec_fuses(c1, c2, wfmt, ones, a1) is False  # the switch
    finally:
        triton_moe.set_ws_decode(*prev)
    (grid, args, kw), = cap.calls
    kw = dict(kw)
    assert kw.pop("num_warps") == 4 and kw.pop("launch_pdl") is True
    assert kw.pop("maxnreg") == triton_moe._WS_FP4_DEC_MAXNREG[2]
    b = sig.bind(*args, **kw).arguments
    bke = 64 if wfmt is F.BF16 else 128
    num_n1, num_n2 = (I // 32 if gated else I // 64), H // 64
    assert grid == (min(NB * max(num_n1 * 2, num_n2), 2 * 132),)
    assert [b[n].block_shape for n in ("x_desc", "x8_desc", "w1_desc", "w2_desc")] == [[16, bke], [8, bke],
                                                                                      [32, bke], [32, bke]]
    assert tuple(b["w1_desc"].shape) == (E * R1, H) and tuple(b["w2_desc"].shape) == (E * H, I)
    assert (b["hidden_ptr"], b["inter_ptr"], b["y_ptr"], b["dep_ptr"]) == (a1, inter, y, dep)
    assert (b["part1_ptr"], b["cnt1_ptr"], b["part2_ptr"], b["cnt2_ptr"]) == (part1, cnt1, part2, cnt2)
    assert (b["w1_scale_ptr"], b["w2_scale_ptr"], b["b1_ptr"], b["b2_ptr"]) == (w13_s, w2_s, b13, b2)
    assert b["a1_scale_ptr"] is ones and b["a2_scale_ptr"] is ones and b["topk_w_ptr"] is tw
    assert (b["I"], b["H"], b["R1"], b["num_n1"], b["num_n2"], b["num_slots"]) == (I, H, R1, num_n1, num_n2, TK)
    assert (b["n_k1"], b["n_k2"]) == (H // bke, I // bke)
    assert (b["stride_h"], b["stride_i"], b["stride_y"], b["stride_b1"], b["stride_b2"]) == (H, I, H, R1, H)
    assert (b["TOP_K"], b["E_LOC"], b["GATED"], b["SPLIT1"], b["SPLIT2"], b["KB"], b["STAGES"]) == (K, E, gated, 2, 1,
                                                                                                  1, 6)
    assert b["QUANT"] == triton_moe._QUANT_CODE[wfmt] and b["OUT_Q1"] == 1 and b["USE_GDC"] is True
    assert b["HAS_BIAS1"] is True and b["HAS_BIAS2"] is True and b["WEIGHT_ON_INPUT"] is False


# ---- CPU: the kernel's index math, emulated ---------------------------------------------------------------


def _box(t: torch.Tensor, r: int, c: int, nr: int, nc: int) -> torch.Tensor:
    """A TMA box of ``t`` [rows, cols] at (r, c): zeros where it reaches past the tensor."""
    out = torch.zeros(nr, nc, dtype=t.dtype)
    rr, cc = max(0, min(nr, t.shape[0] - r)), max(0, min(nc, t.shape[1] - c))
    out[:rr, :cc] = t[r:r + rr, c:c + cc]
    return out


def _emulate_ws_dec(W, rows, al, N, gated, split, kb, bke, num_slots, E_loc, scales=None, x_src=None):
    """A torch mirror of ``_ws_dec``'s loader and consumer index math: the unit walk (``_dec_unit``), the K shares, the
    TMA boxes over the weights viewed [E * R, K] and the gathered rows (zeros past either tensor), the 8-row token
    boxes with the rows they leave out as NaN -- or with ``x_src = (x, top_k)`` (``X_GATHER``) the block's real rows
    copied from ``x`` (row ``slot // top_k``), the others and K past the end zero --, FP8 blocks' scales per 128-wide K
    block (the index clamped past K), split-K summed in split order. Returns {(pid_m, pid_n): acc [64, 16]
    float64}."""
    E, R, K = W.shape
    Wf = W.reshape(E * R, K)
    sid, be = al.sorted_ids.cpu().long(), al.block_expert.cpu().long()
    num_m = int(al.num_post_padded.cpu()[0]) // 16
    num_n = -(-N // 32) if gated else -(-N // 64)
    n_k = -(-(-(-K // bke)) // kb)
    n_kb = -(-K // 128)
    parts = {}
    for u in range(num_m * num_n * split):
        per_m = num_n * split
        pid_m, pid_n, ks = u // per_m, (u % per_m) // split, (u % per_m) % split
        e = int(be[pid_m])
        if e >= E_loc:
            continue
        n8 = 1 + int(sid[pid_m * 16 + 8] < num_slots)
        r0, r1 = (32 * pid_n, N + 32 * pid_n) if gated else (64 * pid_n, 64 * pid_n + 32)
        acc = torch.zeros(64, 16, dtype=torch.float64)
        for kk in range(n_k * ks // split, n_k * (ks + 1) // split):
            for h in range(kb):
                kc = (kk * kb + h) * bke
                if x_src is None:
                    xt = torch.full((16, bke), float("nan"), dtype=torch.float64)
                    nr = 8 if n8 == 1 else 16
                    xt[:nr] = _box(rows, pid_m * 16, kc, nr, bke)
                else:
                    xt = torch.zeros(16, bke, dtype=torch.float64)
                    for j in range(16):
                        if sid[pid_m * 16 + j] < num_slots:
                            xt[j] = _box(x_src[0], int(sid[pid_m * 16 + j]) // x_src[1], kc, 1, bke)[0]
                wt = torch.cat([_box(Wf, e * R + r0, kc, 32, bke), _box(Wf, e * R + r1, kc, 32, bke)])
                part = wt @ xt.T
                if scales is not None:  # FP8 blocks: a_s [tokens, K / 128], w_s [E, R / 128, K / 128]
                    a_s, w_s, top_k = scales
                    kbi = min(kk * kb + h, n_kb - 1)
                    r = torch.arange(64)
                    wr = torch.where(r < 32, r0 + r, r1 + r - 32).clamp(max=R - 1)
                    sl = sid[pid_m * 16:pid_m * 16 + 16]
                    tok = torch.where(sl < num_slots, sl, 0) // top_k
                    part = part * (w_s[e, wr // 128, kbi][:, None] * a_s[tok, kbi][None, :])
                acc += part
        parts[(pid_m, pid_n, ks)] = acc
    return {(m, n): sum(parts[(m, n, s)] for s in range(split)) for (m, n, s) in parts if s == 0}


@interpreter
@pytest.mark.parametrize("gated,N,K,split,kb,bke,blockwise,x_gather", [
    (True, 208, 704, 2, 2, 64, False, False),  # BF16: a column tail (the last gate box reaches the up rows), K tail
    (True, 208, 704, 2, 2, 64, False, True),   # the same, the token rows by cp.async
    (False, 200, 704, 4, 1, 128, False, True),  # FP8: 128-wide blocks, the last one half past K, 4 shares
    (True, 256, 768, 1, 2, 128, True, False),  # FP8 blocks: two blocks a step, the last past K (scale index clamped)
    (False, 128, 256, 2, 1, 128, True, True)])
def test_ws_dec_index_math_emulated(gated, N, K, split, kb, bke, blockwise, x_gather):
    """The mirror of ``_ws_dec``'s index math (``_emulate_ws_dec``) on the real align (16-row blocks, expert
    parallelism: 6 of 9 experts local) and the real slot-order gather: every stored (slot, column) of every unit --
    the epilogue's mapping: token row j of block pid_m is slot ``sorted_ids[16 pid_m + j]``, accumulator row r is gate
    column 32 pid_n + r / up column 32 pid_n + r - 32 (gated) or column 64 pid_n + r -- equals the float64 product of
    the slot's token row with the expert's weight row (FP8 blocks: each 128-wide K block scaled by its token's and its
    row block's scales), whether the token rows come as TMA boxes of the gathered rows or by cp.async from the
    unsorted ones; no NaN from the rows an 8-row box leaves out reaches a stored value, and the stored pairs
    are exactly the local slots x the N columns. Mutations of the mirror (the up rows' offset, a K step dropped from
    each share, 8-row token boxes for full blocks) fail it."""
    torch.manual_seed(3)
    T, TOPK, E_loc, off = 10, 3, 6, 2
    R = 2 * N if gated else N
    W = torch.randn(E_loc, R, K, dtype=torch.float64)
    x = torch.randn(T, K, dtype=torch.float64)
    others = torch.tensor([g for g in range(E_loc + 3) if g != off])
    # every token's first choice the first local expert: a block of 10 real rows (16-row token boxes) next to blocks of
    # 1-8 (8-row boxes); the others random over the 9 global experts (3 of them not local)
    ids = torch.stack([torch.cat([torch.tensor([off]), others[torch.randperm(len(others))[:TOPK - 1]]])
                       for _ in range(T)]).to(torch.int32)
    al = triton_moe.align_slots(ids.reshape(-1).to(DEV), E_loc, 16, local_expert_offset=off, tokens=T)
    sid = al.sorted_ids.cpu().long()
    used = int(al.num_post_padded.cpu()[0])
    rows = torch.zeros(used, K, dtype=torch.float64)
    for p in range(used):
        if sid[p] < T * TOPK:
            rows[p] = x[sid[p] // TOPK]
    scales = None
    if blockwise:
        a_s = torch.rand(T, -(-K // 128), dtype=torch.float64) + 0.5
        w_s = torch.rand(E_loc, -(-R // 128), -(-K // 128), dtype=torch.float64) + 0.5
        scales = (a_s, w_s, TOPK)
    accs = _emulate_ws_dec(W, rows, al, N, gated, split, kb, bke, T * TOPK, E_loc, scales,
                           (x, TOPK) if x_gather else None)
    flat = ids.reshape(-1).long() - off
    seen = set()
    for (pid_m, pid_n), acc in accs.items():
        e = int(al.block_expert.cpu()[pid_m])
        for j in range(16):
            s = int(sid[pid_m * 16 + j])
            if s >= T * TOPK:
                continue
            assert int(flat[s]) == e
            t = s // TOPK
            for r in range(64):
                if gated:
                    n = 32 * pid_n + r % 32
                    wrow = n if r < 32 else N + n
                else:
                    n = wrow = 64 * pid_n + r
                if n >= N:
                    continue
                if scales is None:
                    exp = (W[e, wrow] * x[t]).sum()
                else:
                    kbs = torch.arange(K) // 128
                    exp = (W[e, wrow] * x[t] * a_s[t, kbs] * w_s[e, wrow // 128, kbs]).sum()
                assert torch.isfinite(acc[r, j]) and abs(acc[r, j] - exp) <= 1e-9 * (1 + abs(exp)), (pid_m, j, r)
                key = (s, n, r < 32 or not gated)
                assert key not in seen
                seen.add(key)
    local = [s for s in range(T * TOPK) if 0 <= int(flat[s]) < E_loc]
    want = {(s, n, g) for s in local for n in range(N) for g in ((True, False) if gated else (True,))}
    assert seen == want


@interpreter
def test_smoke_script_plumbing():
    """``benchmarks/smoke_gluon.py`` (the first GPU call's triage of the opt-in Gluon kernels) builds its layers and
    runs them through the library on the CPU at tiny sizes: no Gluon kernel can run there, so every variant reports
    ``not_taken`` with the Triton kernels' output on both sides; an unknown variant is refused."""
    import sys

    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import smoke_gluon
    finally:
        sys.path.pop(0)
    for name in ("wsdec-fp8b-t8-2blocks", "ws4dec-mxfp4-oai-t1", "wsdec-bf16-oai-3cta", "wspipe-fp8t-relu2-prefill"):
        rec = smoke_gluon.run_one(name, "cpu", tiny=True)
        assert rec["status"] == "not_taken" and rec["finite"] and rec["same_bits"], rec
        assert rec["rms_triton"] == 0.0 and "triton" in rec["config"], rec
    with pytest.raises(KeyError):
        smoke_gluon.run_one("no-such-variant", "cpu", tiny=True)


# ---- GPU ------------------------------------------------------------------------------------------


def _dec_config(gated: bool, fmt: Format, split: int = 1, stages: int = 6, blocks: int = 1, H: int = 0,
                I: int = 0) -> MoEKernelConfig:
    """Both GEMMs' decode tiles; FP8 blocks take one block a step (one scale block); with ``H`` / ``I`` each GEMM's
    split-K is capped at its K steps (the rule: every share has a step)."""
    blocks = min(blocks, ws_dec_max_blocks(fmt))
    bk = blocks * ws_dec_block_k(fmt)
    s1 = min(split, -(-H // bk)) if H else split
    s2 = min(split, -(-I // bk)) if I else split
    return MoEKernelConfig(ws_dec_config(gated, "gemm1", fmt, s1, stages, blocks),
                           ws_dec_config(False, "gemm2", fmt, s2, stages, blocks))


def _vs_triton(fmt: Format) -> float:
    """RMS bound of the decode kernel against the Triton kernels: 4e-3 for 16-bit weights; FP8 re-quantizes the
    intermediate to e4m3 (a 2^-4 relative step), so the two kernels' different accumulation orders (wgmma shapes,
    split-K) flip some intermediate values by a step: up to 1e-2 RMS at the model shapes on the H200 (thirty-first
    session), each within the reference's bound."""
    return 4e-3 if fmt is F.BF16 else 1.2e-2


@contextlib.contextmanager
def _x_gather(on: bool, thread_release: bool = False):
    """The decode kernel's token rows by cp.async (``on``, the default) or through a gather launch and TMA boxes;
    ``thread_release``: every consumer thread frees the ring slots."""
    prev = triton_moe.set_ws_decode(triton_moe._WS_DEC["enabled"], triton_moe._WS_DEC["ctas"],
                                    triton_moe._WS_DEC["stages"], triton_moe._WS_DEC["blocks"], on,
                                    triton_moe._WS_DEC["fused"], thread_release)
    try:
        yield
    finally:
        triton_moe.set_ws_decode(*prev)


def _triton_config(prob, act, wfmt) -> MoEKernelConfig:
    """The Triton kernels' config for ``prob`` on this GPU: the heuristic's (the tuned table may choose the decode
    kernel itself)."""
    T, H = prob["hidden"].shape
    cfg = choose_moe_config(T, H, prob["I_pad"], prob["q13"].shape[0], prob["ids"].shape[1], wfmt, act,
                            torch.cuda.get_device_name(), table=TunedTable())
    assert not cfg.gemm1.warp_specialized, cfg
    return cfg


def _auto_call(prob, *, act, wfmt, params=None, offset=0, static=True):
    """The layer with the switch on and no config: asserts that the decode kernel ran; returns (out, capture)."""
    cap = {}
    prev = triton_moe.set_ws_decode(True)
    try:
        out = triton_experts(prob["hidden"], prob["q13"], prob["q2"], prob["ids"], prob["tw"], activation=act,
                             act_params=params, act_format=ACT_FMT[wfmt], intermediate_size_padded=prob["I_pad"],
                             w13_bias=prob["b13"], w2_bias=prob["b2"], a1_scale=prob["a1"] if static else None,
                             a2_scale=prob["a2"] if static else None, local_expert_offset=offset, _capture=cap)
    finally:
        triton_moe.set_ws_decode(*prev)
    c = cap["config"]
    assert c.block_m == 16 and c.gemm1.warp_specialized and c.gemm2.warp_specialized, c
    return out, cap


@gpu
@pytest.mark.parametrize("wfmt", FMTS, ids=lambda f: f.name)
@pytest.mark.parametrize("act", [A.SWIGLU, A.SWIGLU_OAI, A.RELU2], ids=lambda a: a.name)
def test_gpu_ws_dec_matches_reference(act, wfmt):
    """Decode (6 tokens, top 4 over 8 of 12 experts local; H = 704: the last ring step of two 64-wide BF16 blocks
    half past K, FP8's last 128-wide block half past K -- TMA's zeros --, I = 208: a column tail in the last tile,
    whose gate box reaches into the up rows; FP8 blocks H = 768, I = 256): the decode kernel with split-K 1, 2 and
    4, one and two blocks a step, within the reference's bound and 4e-3 RMS of the Triton kernels; the split shares
    add in split order, so repeated calls give the same bits; biases with the clamped SwiGLU; FP8 per tensor also
    with dynamic scales; the automatic choice; the padded hand-off against the gathered one, and the token rows by
    cp.async (the default) against a gather launch and TMA boxes, and the ring slots freed by every consumer thread
    against the default release, bit for bit."""
    params = _params(act)
    H, I = (768, 256) if wfmt is F.FP8_BLOCK else (704, 208)
    prob = make_problem(T=6, H=H, I=I, I_pad=I, E=8, K=4, act=act, wfmt=wfmt, dtype=torch.bfloat16,
                        bias=act is A.SWIGLU_OAI, offset=2, E_glob=12, seed=31)
    kw = dict(act=act, wfmt=wfmt, dtype=torch.bfloat16, params=params, offset=2)
    base = _run_within_bound(prob, tag="triton", config=_triton_config(prob, act, wfmt), **kw)
    for split, blocks in ((1, 1), (2, 1), (4, 2)):
        cfg = _dec_config(act.is_gated, wfmt, split, 6, blocks, H, I)
        got = _run_within_bound(prob, tag=(split, blocks), config=cfg, **kw)
        mx, rms = _errors(got, base)
        assert rms <= _vs_triton(wfmt), (split, blocks, mx, rms)
        again, _ = run_case(prob, act=act, wfmt=wfmt, params=params, offset=2, config=cfg)
        assert torch.equal(got, again)
        prev = triton_moe.set_ws_padded_handoff(False)
        try:
            gathered, _ = run_case(prob, act=act, wfmt=wfmt, params=params, offset=2, config=cfg)
        finally:
            triton_moe.set_ws_padded_handoff(prev)
        assert torch.equal(got, gathered), (split, blocks)
        with _x_gather(False):  # the token rows gathered by a launch and loaded by TMA: only padding rows differ
            tma_rows, _ = run_case(prob, act=act, wfmt=wfmt, params=params, offset=2, config=cfg)
        assert torch.equal(got, tma_rows), (split, blocks)
        with _x_gather(True, thread_release=True):  # every consumer thread frees the ring slots: the same bits
            released, _ = run_case(prob, act=act, wfmt=wfmt, params=params, offset=2, config=cfg)
        assert torch.equal(got, released), (split, blocks)
    if wfmt is F.FP8_TENSOR:
        _run_within_bound(prob, tag="dynamic", config=_dec_config(act.is_gated, wfmt, 2), static=False, **kw)
    out, _ = _auto_call(prob, act=act, wfmt=wfmt, params=params, offset=2)
    mx, rms = _errors(out, base)
    assert rms <= _vs_triton(wfmt), ("auto", mx, rms)


@gpu
@pytest.mark.parametrize("wfmt", [F.BF16, F.FP8_CHANNEL], ids=lambda f: f.name)
def test_gpu_ws_dec_full_blocks_fp16_and_top1(wfmt):
    """Blocks with more than 8 real rows (40 tokens, top 2 over 4 experts: a full 16-row block and a partial one per
    expert -- the loader's 16-row token boxes next to its 8-row ones), fp16 hidden states for 16-bit weights, and
    K = 1 with the routing weight on the input (GEMM2 writes the output directly; the non-local group's rows
    zeroed): within the reference's bound."""
    dtype = torch.float16 if wfmt is F.BF16 else torch.bfloat16
    prob = make_problem(T=40, H=512, I=192, I_pad=192, E=4, K=2, act=A.SWIGLU, wfmt=wfmt, dtype=dtype, seed=32)
    for split in (1, 2):
        _run_within_bound(prob, act=A.SWIGLU, wfmt=wfmt, dtype=dtype, tag=("full", split),
                          config=_dec_config(True, wfmt, split))
    prob = make_problem(T=5, H=512, I=192, I_pad=192, E=4, K=1, act=A.SWIGLU, wfmt=wfmt, dtype=dtype, offset=1,
                        E_glob=6, seed=33)
    _run_within_bound(prob, act=A.SWIGLU, wfmt=wfmt, dtype=dtype, tag="top1", offset=1, woi=True,
                      config=_dec_config(True, wfmt))


@gpu
@pytest.mark.parametrize("wfmt", [F.BF16, F.FP8_TENSOR], ids=lambda f: f.name)
def test_gpu_ws_dec_cuda_graph(wfmt):
    """The automatic choice captured in a CUDA graph (split-K counters zeroed by the align launch) replays to the eager
    bits."""
    prob = make_problem(T=3, H=1024, I=256, I_pad=256, E=8, K=4, act=A.SWIGLU, wfmt=wfmt, dtype=torch.bfloat16,
                        seed=34)
    eager, cap = _auto_call(prob, act=A.SWIGLU, wfmt=wfmt)
    assert cap["config"].gemm1.split_k > 1  # the counters are exercised
    prev = triton_moe.set_ws_decode(True)
    try:
        _graph_replay_matches(prob, wfmt, 256, eager, replays=2)
    finally:
        triton_moe.set_ws_decode(*prev)


@contextlib.contextmanager
def _fused(on: bool):
    """Both decode GEMMs in one launch (``on``) or two; the other settings as they are."""
    d = triton_moe._WS_DEC
    prev = triton_moe.set_ws_decode(d["enabled"], d["ctas"], d["stages"], d["blocks"], d["x_gather"], on)
    try:
        yield
    finally:
        triton_moe.set_ws_decode(*prev)


@gpu
@pytest.mark.parametrize("wfmt,act", [(F.BF16, A.SWIGLU), (F.BF16, A.SWIGLU_OAI), (F.FP8_TENSOR, A.RELU2),
                                      (F.FP8_TENSOR, A.SWIGLU)], ids=lambda v: v.name)
def test_gpu_ws_dec_fused_same_bits(wfmt, act):
    """Both decode GEMMs in one launch (GEMM2's loader waiting per block for GEMM1's stored column tiles) give the two
    launches' bits -- the same products, epilogues and orders -- with split-K 1 / 2 / 4, at 6 tokens (blocks of 1-8
    rows) and 40 (full 16-row blocks), expert parallelism, biases with the clamped SwiGLU, FP8 per tensor with its
    static intermediate scale; within the reference's bound; and a CUDA graph of the automatic choice replays to the
    eager bits."""
    params = _params(act)
    for T, K in ((6, 4), (40, 2)):
        prob = make_problem(T=T, H=704, I=208, I_pad=208, E=8, K=K, act=act, wfmt=wfmt, dtype=torch.bfloat16,
                            bias=act is A.SWIGLU_OAI, offset=2, E_glob=12, seed=36)
        kw = dict(act=act, wfmt=wfmt, params=params, offset=2)
        for split in (1, 2, 4):
            cfg = _dec_config(act.is_gated, wfmt, split, H=704, I=208)
            with _fused(False):
                two, _ = run_case(prob, config=cfg, **kw)
            with _fused(True):
                one = _run_within_bound(prob, dtype=torch.bfloat16, tag=(T, split), config=cfg, **kw)
            assert torch.equal(one, two), (T, split)
    if act is A.SWIGLU:
        prob = make_problem(T=3, H=1024, I=256, I_pad=256, E=8, K=4, act=act, wfmt=wfmt, dtype=torch.bfloat16, seed=37)
        with _fused(True):
            eager, cap = _auto_call(prob, act=act, wfmt=wfmt)
            prev = triton_moe.set_ws_decode(True, 2, 0, 1, True, True)
            try:
                _graph_replay_matches(prob, wfmt, 256, eager, replays=2)
            finally:
                triton_moe.set_ws_decode(*prev)


@gpu
@pytest.mark.parametrize("shape", ["deepseek-v3-tp8", "qwen3-30b-a3b", "nemotron"])
@pytest.mark.parametrize("wfmt", FMTS, ids=lambda f: f.name)
@pytest.mark.parametrize("T", [1, 8])
def test_gpu_ws_dec_model_shapes(shape, wfmt, T):
    """DeepSeek-V3 TP8's expert (H = 7168, I = 256, SwiGLU), Qwen3-30B's (2048, 768) and Nemotron's (2688, I = 1856,
    ReLU^2; FP8 blocks: 1920) at one and eight tokens, 32 local experts: the automatic decode choice within the
    reference's bound and close to the Triton kernels."""
    H, I, act, K = {"deepseek-v3-tp8": (7168, 256, A.SWIGLU, 8), "qwen3-30b-a3b": (2048, 768, A.SWIGLU, 8),
                    "nemotron": (2688, 1856, A.RELU2, 6)}[shape]
    I_pad = -(-I // 128) * 128 if wfmt is F.FP8_BLOCK else I
    prob = make_problem(T=T, H=H, I=I, I_pad=I_pad, E=32, K=K, act=act, wfmt=wfmt, dtype=torch.bfloat16, seed=35)
    got, _ = _auto_call(prob, act=act, wfmt=wfmt)
    base, ref = run_case(prob, act=act, wfmt=wfmt, config=_triton_config(prob, act, wfmt))
    mx, rms = _errors(got, ref)
    bmx, brms = (2e-2, 4e-3) if wfmt is F.BF16 else (6e-2, 1.2e-2)
    # (at most the bound, or 15 % above the Triton kernels' own error where that is already near it)
    assert mx <= bmx and rms <= max(brms, 1.15 * _errors(base, ref)[1]), (mx, rms, _errors(base, ref))
    assert _errors(got, base)[1] <= _vs_triton(wfmt), _errors(got, base)



def test_ws_dec_tuner_candidates():
    """The tuner offers the decode kernel on Hopper at 1-8 tokens for 16-bit and FP8 weights (one and two K blocks a
    step -- FP8 blocks one -- at 2 and 3 programs an SM), as ``ws_decode_config`` gives it -- at the switch's 2
    programs an SM the config ``auto_ws_decode`` runs with the switch on -- valid by the decode kernel's rules; never
    at 64 tokens or off Hopper; FP4 weights get the FP4 decode kernel's configs instead."""
    from fusedmoe.backends.kernel_configs import choose_moe_config
    from fusedmoe.bench.tune import search_space
    from fusedmoe.backends.triton_moe import ws_decode_config

    def dec(T, fmt, device="NVIDIA H200", H=7168, I=256):
        # (by config, not by ``varies``: where the shipped table serves one of them, it comes as "table")
        return [c.config for c in search_space(T, H, I, 256, 8, fmt, Activation.SWIGLU, device, num_sms=132)
                if c.config.gemm1.warp_specialized and c.config.gemm1.block_m == 16]

    for fmt in FMTS:
        for T in (1, 8):
            got = dec(T, fmt)
            assert len(got) == (2 if fmt is F.FP8_BLOCK else 4), (fmt, T, got)
            assert {c.gemm1.persistent for c in got} == {c.gemm2.persistent for c in got} == {2, 3}
            for cfg in got:
                for gemm, c, K in (("gemm1", cfg.gemm1, 7168), ("gemm2", cfg.gemm2, 256)):
                    assert c.block_m == 16 and c.warp_specialized, c
                    assert warp_specialized_problem(c, fmt, gemm, gemm == "gemm1", K) is None, (fmt, gemm, c)
            want = ws_decode_config(T, 7168, 256, 256, 8, fmt, True, 1, 132, 2)
            assert (want.gemm1, want.gemm2) in [(c.gemm1, c.gemm2) for c in got]
            auto = ws_decode_config(T, 7168, 256, 256, 8, fmt, True, 1, 132)  # the switch's ctas, left to the launch
            assert auto.gemm1 == dataclasses.replace(want.gemm1, persistent=None)
            assert {c.gemm1.block_k for c in got} == ({128} if fmt is F.FP8_BLOCK else
                                                      {want.gemm1.block_k, 2 * want.gemm1.block_k})
        assert not dec(64, fmt)
        assert not dec(1, fmt, "NVIDIA A100-SXM4-80GB")
    for fmt in (F.NVFP4, F.MXFP4):  # FP4 weights: the FP4 decode kernel's configs only (test_ws_fp4_dec)
        assert {c.gemm1.persistent for c in dec(1, fmt)} == {3, 4}
        assert all(warp_specialized_problem(c.gemm1, fmt, "gemm1", True, 7168) is None for c in dec(1, fmt))
    # the split rule: one token of DeepSeek-V3 TP8 hits 8 experts -- 8 blocks x 16 gated column tiles on 264 programs
    # (2 an SM): GEMM1's 56 K steps split
    c = ws_decode_config(1, 7168, 256, 256, 8, F.BF16, True, 1, 132)
    assert c.gemm1.split_k > 1 and c.gemm1.block_m == 16
    assert choose_moe_config(1, 7168, 256, 256, 8, F.BF16, Activation.SWIGLU, "NVIDIA H200").block_m <= 16
