"""The warp-specialized Gluon GEMMs (``KernelConfig.warp_specialized``, ``kernels/_ws_gemm.py``):
FP8 per tensor / per channel / 128 x 128 blocks and 16-bit (BF16 / FP16) weights, sm_90, GEMM1 and GEMM2.

CPU (CI): it compiles for sm_90 with Triton's bundled ptxas for every epilogue variant, as a
warp-specialized kernel without spills; the slot-order gather of its input (interpreter) against
torch; the config rules and the errors on devices it cannot run on. GPU (marker ``gpu``): against
the float64 reference for every activation x both formats, with a K tail, column tails, biases,
weight on input, static and dynamic scales, expert parallelism, K = 1 (the non-local group) and a
CUDA graph -- with GEMM1 alone and with both GEMMs warp-specialized; and against the Triton
kernels of the same tiles on real shapes.
"""

import contextlib
import dataclasses
import os

import pytest
import torch

from gluon_sm90 import SCRIPT_HEAD
from moe_cases import assert_dyn_counters_zero, env_starts
from test_triton_fp4 import run_sm90_script
from test_triton_moe import (ACT_FMT, DEV, INTERP, _errors, _graph_replay_matches, _params,
                             _run_within_bound, gpu, interpreter, make_problem, run_case)

from fusedmoe.backends.kernel_configs import (KernelConfig, MoEKernelConfig, TunedTable, load_tuned_configs,
                                              save_tuned_configs, warp_specialized_config,
                                              warp_specialized_problem, ws_pipelined)
from fusedmoe.backends.triton_moe import align_slots, triton_experts
from fusedmoe.config import Activation, Format

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WS_FMTS = [Format.FP8_TENSOR, Format.FP8_CHANNEL]  # (FP8 128 x 128 blocks: test_gpu_ws_gemm_fp8_block)


def ws_config(gated: bool, *, stages=4, group_m=8, bn=None) -> KernelConfig:
    return dataclasses.replace(warp_specialized_config(gated, num_stages=stages, group_m=group_m),
                               **({"block_n": bn} if bn else {}))


_G2 = KernelConfig(128, 128, 128, group_m=8, num_warps=8, num_stages=3)  # the Triton GEMM2 at 128 rows


def moe_config(gated: bool, *, gemm2=False, **kw) -> MoEKernelConfig:
    """The warp-specialized GEMM1 with the Triton GEMM2, or (``gemm2``) both warp-specialized."""
    return MoEKernelConfig(ws_config(gated, **kw), ws_config(False, **kw) if gemm2 else _G2)


# ---- CPU: compile, config rules, gather -----------------------------------------------------------

# the head of the compile scripts below: gluon_sm90's, the kernel module and ``_ws_gemm_kernel``'s argument types
_SCRIPT_HEAD = SCRIPT_HEAD + r'''
from fusedmoe.kernels import _ws_gemm as ws


def ws_sig(dt, gdt, BK, BN, OD, OUT_Q):
    """The argument types of ``_ws_gemm_kernel`` for operands ``dt`` (Gluon type ``gdt``) in [64 / BN, BK] boxes."""
    al = gl.NVMMASharedLayout.get_default_for([64, BK], gdt)
    wl = gl.NVMMASharedLayout.get_default_for([BN, BK], gdt)
    return {"a_desc": f"tensordesc<{dt}[64, {BK}],{al}>", "w_desc": f"tensordesc<{dt}[{BN}, {BK}],{wl}>",
            "out_ptr": f"*{OD}", "a_scale_ptr": "*fp32", "w_scale_ptr": "*fp32", "bias_ptr": "*fp32",
            "topk_w_ptr": "*fp32", "out_qscale_ptr": "*i32" if OUT_Q == 5 else "*fp32", "sorted_ids_ptr": "*i32",
            "block_expert_ptr": "*i32", "num_post_padded_ptr": "*i32", "N": "i32", "K": "i32", "num_slots": "i32",
            "stride_om": "i32", "stride_asm": "i32", "stride_wse": "i32", "stride_wsn": "i32", "stride_be": "i32",
            "act_alpha": "fp32", "act_beta": "fp32", "act_limit": "fp32", "x_ptr": f"*{dt}", "stride_x": "i32",
            "tile_ctr_ptr": "*i32"}
'''

_SCRIPT = _SCRIPT_HEAD + r'''
# (ACT, GATED, QUANT, OUT_Q, HAS_BIAS, WEIGHT_ON_INPUT, MUL_ROUTING_WEIGHT, BN, STAGES, out dtype); QUANT 0:
# 16-bit operands of the out dtype (bf16 / fp16), 64-wide K blocks
for ACT, GATED, QUANT, OUT_Q, HB, WOI, MRW, BN, ST, OD in (
        (0, True, 1, 0, False, False, False, 64, 4, "bf16"),     # GEMM1 SwiGLU, per tensor
        (0, True, 2, 0, False, False, False, 64, 4, "bf16"),     # GEMM1 SwiGLU, per channel
        (2, True, 2, 0, True, True, False, 64, 4, "fp16"),       # clamped SwiGLU, biases, weight on input
        (1, True, 1, 1, False, False, False, 64, 5, "fp8e4nv"),  # GeGLU, static FP8 intermediate
        (3, False, 1, 0, False, False, False, 128, 4, "bf16"),   # ReLU2, per tensor
        (3, False, 2, 0, True, False, False, 128, 6, "bf16"),    # ReLU2, per channel, bias, 6 stages
        (4, False, 2, 0, False, True, False, 64, 4, "fp32"),     # GELU, 64 columns, fp32 hidden
        (7, False, 1, 0, False, False, True, 128, 4, "bf16"),    # GEMM2: identity, routing weight
        (7, False, 2, 0, True, False, True, 128, 4, "fp16"),     # GEMM2 per channel, bias
        (0, True, 3, 0, False, False, False, 64, 4, "bf16"),     # FP8 128 x 128 blocks: GEMM1 SwiGLU
        (3, False, 3, 0, True, False, False, 128, 5, "bf16"),    # GEMM1 ReLU2, bias
        (7, False, 3, 0, False, False, True, 128, 4, "bf16"),    # GEMM2
        (0, True, 0, 0, False, False, False, 128, 4, "bf16"),    # BF16: GEMM1 SwiGLU, 2 x 128 columns
        (2, True, 0, 0, True, True, False, 64, 4, "fp16"),       # fp16, clamped SwiGLU, biases, weight on input
        (2, True, 0, 0, True, False, False, 128, 3, "bf16"),     # 2 x 128 with biases (spills in the epilogue)
        (3, False, 0, 0, False, False, False, 256, 4, "bf16"),   # ReLU2, 256 columns
        (7, False, 0, 0, False, False, True, 256, 4, "bf16"),    # GEMM2, 256 columns
        (7, False, 0, 0, True, False, True, 128, 2, "fp16"),     # GEMM2, 128 columns, bias
        (3, False, 1, 1, False, False, False, 128, 5, "fp8e4nv"),  # ReLU2, static FP8 intermediate by reciprocals
        (0, True, 2, 5, False, False, False, 64, 5, "bf16"),    # SwiGLU, 16-bit intermediate + its amax (atomic)
        # one promoted partial set for two 128-column halves (ONE_PART): FP8 2 x 128 gated, 256 non-gated
        # (FP8 128 x 128 blocks: not offered -- their per-K-block scale vectors spill ~1100-1600 registers)
        (0, True, 1, 1, False, False, False, 128, 4, "fp8e4nv"),  # SwiGLU per tensor, static FP8 intermediate
        (0, True, 2, 0, False, False, False, 128, 4, "bf16"),    # SwiGLU per channel
        (2, True, 2, 0, True, True, False, 128, 4, "bf16"),      # clamped SwiGLU per channel, biases (epilogue spills)
        (3, False, 1, 1, False, False, False, 256, 4, "fp8e4nv"),  # ReLU2 per tensor, static FP8 intermediate
        (7, False, 1, 0, False, False, True, 256, 4, "bf16"),    # GEMM2 per tensor, routing weight
        (7, False, 2, 0, False, False, True, 256, 4, "bf16"),    # GEMM2 per channel
        (7, False, 2, 0, True, False, True, 256, 4, "bf16")):    # GEMM2 per channel, bias (epilogue spills)
    dt, BK, gdt = ("fp8e4nv", 128, gl.float8e4nv) if QUANT else (OD, 64, gl.float16 if OD == "fp16" else gl.bfloat16)
    sig = ws_sig(dt, gdt, BK, BN, OD, OUT_Q)
    rd = {"fp16": gl.float16, "fp32": gl.float32}.get(OD, gl.bfloat16)
    cx = dict(TOP_K=8, E_LOC=64, ACT=ACT, GATED=GATED, QUANT=QUANT, OUT_Q=OUT_Q, ROUND_DTYPE=rd, HAS_BIAS=HB,
              WEIGHT_ON_INPUT=WOI, MUL_ROUTING_WEIGHT=MRW, BN=BN, BK=BK, STAGES=ST, GROUP_M=8,
              SKIP_HALF=not (ACT == 3 and QUANT == 3),  # one variant without the padding-half skip
              RCP_DIV=ACT == 3 and OUT_Q == 1,  # the re-quantization by reciprocals (triton_moe.set_reciprocal_quant)
              OUT_PADDED=OUT_Q == 1 and ACT in (0, 1))  # stores at block-padded rows (triton_moe.set_ws_padded_handoff)
    k, sass = compile_sm90(ws._ws_gemm_kernel, sig, cx)
    print(ACT, GATED, QUANT, HB, BN, k.metadata.num_warps, sass.count("QGMMA" if QUANT else "HGMMA"),
          sass.count("USETMAXREG"), sass.count("FCHK"),
          sass.count("LDL") + sass.count("STL"), k.metadata.shared, OUT_Q, sass.count("ATOMG") + sass.count("RED."),
          sep="|", flush=True)
'''


def test_ws_gemm_compiles_for_sm90(tmp_path):
    """Every epilogue variant: 12 warps (two MMA warpgroups and the loader, rounded up), FP8 / 16-bit
    wgmma, register reallocation between the partitions, within Hopper's 227 KB, no spills -- except
    a gated 16-bit 2 x 128 tile with biases, whose epilogue (128 accumulators and 64 bias values a
    thread) spills a little once per tile, outside the K loop, and the FP8 one-partial-set tiles
    (2 x 128 / 256) with biases or per-channel scales, likewise (sm_90 compile: 2-252 local loads and
    stores; per tensor without bias none)."""
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    rows = run_sm90_script(tmp_path, f"ROOT = {ROOT!r}\n" + _SCRIPT)
    assert len(rows) == 27, rows
    fchk = {}
    for act, gated, quant, bias, bn, warps, gmma, setmaxnreg, divs, spills, smem, out_q, atomics in rows:
        where = f"ACT={act} GATED={gated} QUANT={quant} BN={bn}"
        assert int(warps) == 12, where
        assert int(gmma) > 0, f"{where}: no {'FP8' if int(quant) else '16-bit'} wgmma in the SASS"
        assert int(setmaxnreg) > 0, f"{where}: no register reallocation"
        epilogue_spill = quant == "0" and gated == "True" and bias == "True" and bn == "128"
        # FP8 one-partial-set tiles with biases or per-channel scales: 128 accumulators and the bias / scale
        # vectors in the epilogue (per tensor without bias: none)
        wide = quant != "0" and bn == ("128" if gated == "True" else "256")
        limit = 100 if epilogue_spill else 300 if wide and (bias == "True" or quant == "2") else 0
        assert int(spills) <= limit, f"{where}: {spills} local loads / stores"
        assert int(smem) <= 227 * 1024, f"{where}: {smem} bytes of shared memory"
        fchk[(act, quant, bias, bn)] = int(divs)
        # the intermediate's amax (OUT_PLAIN_AMAX): one atomic max per tile and warpgroup, none elsewhere
        assert (int(atomics) > 0) == (out_q == "5"), f"{where}: OUT_Q {out_q}, {atomics} atomics"
    # the static FP8 re-quantization: an IEEE division per value (div.rn's FCHK slow-path checks), or by
    # reciprocals one division per MMA warpgroup (the scale's reciprocal)
    assert fchk[("1", "1", "False", "64")] >= 32, fchk
    assert fchk[("3", "1", "False", "128")] <= 2, fchk


_PIPE_SCRIPT = _SCRIPT_HEAD + r'''
# (ACT, GATED, QUANT, OUT_Q, BN, out dtype): the tiles the pipelined promotion takes (FP8): the two-set ones and
# the wide one-set ones (gated 128, non-gated 256); FP8 blocks (QUANT 3) with one weight scale a column group
for ACT, GATED, QUANT, OUT_Q, BN, OD in ((0, True, 1, 0, 64, "bf16"), (1, True, 2, 1, 64, "fp8e4nv"),
                                        (3, False, 1, 0, 128, "bf16"), (7, False, 2, 0, 64, "fp16"),
                                        (0, True, 1, 0, 128, "bf16"), (3, False, 2, 0, 256, "bf16"),
                                        (0, True, 3, 0, 64, "bf16"), (7, False, 3, 0, 128, "bf16"),
                                        (0, True, 3, 0, 128, "bf16"), (3, False, 3, 0, 256, "bf16")):
    sig = ws_sig("fp8e4nv", gl.float8e4nv, 128, BN, OD, OUT_Q)
    for pipe in (False, True):
        cx = dict(TOP_K=8, E_LOC=64, ACT=ACT, GATED=GATED, QUANT=QUANT, OUT_Q=OUT_Q,
                  ROUND_DTYPE=gl.float16 if OD == "fp16" else gl.bfloat16, HAS_BIAS=False, WEIGHT_ON_INPUT=False,
                  MUL_ROUTING_WEIGHT=ACT == 7, BN=BN, BK=128, STAGES=4, GROUP_M=8, RCP_DIV=OUT_Q == 1, PIPE=pipe,
                  W_SCALAR=QUANT == 3)
        k, sass = compile_sm90(ws._ws_gemm_kernel, sig, cx)
        loop = k_loop(sass_instructions(sass), "QGMMA")
        waits = sorted({int(m.group(1), 16) for t in loop
                        for m in [re.search(r"DEPBAR.LE gsb0, (0x[0-9a-f]+)", t)] if m})
        print(ACT, GATED, QUANT, BN, pipe, sass.count("LDL") + sass.count("STL"), sum("QGMMA" in t for t in loop),
              ",".join(map(str, waits)), sep="|", flush=True)
'''


def test_ws_pipelined_promotion_compiles_for_sm90(tmp_path):
    """The pipelined promotion's kernel (PIPE) compiles for sm_90 without spills. In the two-set tiles the K loop
    keeps the next block's wgmmas in flight while it waits for a block's (``WARPGROUP.DEPBAR.LE`` 2 gated / 1
    non-gated: one wgmma group a partial set) -- two K blocks' wgmmas a loop trip; the base loop waits for all of
    them (0). In the wide one-set tiles a trip is one K block of four 64-column sub-tiles (16 QGMMAs against the base
    loop's 8 of 128 columns), every wait with one sub-tile in flight (1), the last one carried into the next trip --
    ptxas did not serialize the wgmmas (C7514 would leave only 0). FP8 blocks (one weight scale a column group)
    alike."""
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    rows = run_sm90_script(tmp_path, f"ROOT = {ROOT!r}\n" + _PIPE_SCRIPT)
    assert len(rows) == 20, rows
    for act, gated, quant, bn, pipe, spills, gmma, waits in rows:
        where = f"ACT={act} GATED={gated} QUANT={quant} BN={bn} PIPE={pipe}"
        assert int(spills) == 0, f"{where}: {spills} local loads / stores"
        wide = int(bn) == (128 if gated == "True" else 256)
        per_block = (2 if gated == "True" or wide else 1) * 4  # 128-deep K blocks of 32-deep QGMMAs: gate and up
        if pipe == "True" and wide:
            assert int(gmma) == 2 * per_block and waits == "1", (where, gmma, waits)
        elif pipe == "True":
            assert int(gmma) == 2 * per_block and waits == ("2" if gated == "True" else "1"), (where, gmma, waits)
        else:
            assert int(gmma) == per_block and waits == "0", (where, gmma, waits)


def test_ws_pipelined_promotion_switch():
    """Off by default (opt-in until measured), a bool only, ``FUSEDMOE_WS_PIPE=1`` starts with it on."""
    from fusedmoe.backends import triton_moe as tm

    prev = tm.set_ws_pipelined_promotion(True)
    try:
        assert prev is False
        with pytest.raises(TypeError, match="bool"):
            tm.set_ws_pipelined_promotion(1)
        assert tm.set_ws_pipelined_promotion(False) is True
    finally:
        tm.set_ws_pipelined_promotion(prev)
    env_starts("set_ws_pipelined_promotion", "FUSEDMOE_WS_PIPE", {"1": True, "0": False})


_XG_SCRIPT = _SCRIPT_HEAD + r'''
# X_GATHER: the A rows by cp.async (a four-warp loader); (ACT, GATED, QUANT, BN, PIPE, X_GATHER), each with its
# TMA twin: FP8 per channel GEMM1 / GEMM2 pipelined, FP8 blocks, BF16 2 x 128
for ACT, GATED, QUANT, BN, PIPE in ((0, True, 2, 64, True), (7, False, 2, 128, True), (0, True, 3, 64, False),
                                    (0, True, 0, 128, False)):
    for XG in (False, True):
        dt, BK, gdt = ("fp8e4nv", 128, gl.float8e4nv) if QUANT else ("bf16", 64, gl.bfloat16)
        cx = dict(TOP_K=8, E_LOC=64, ACT=ACT, GATED=GATED, QUANT=QUANT, OUT_Q=0, ROUND_DTYPE=gl.bfloat16,
                  HAS_BIAS=False, WEIGHT_ON_INPUT=False, MUL_ROUTING_WEIGHT=ACT == 7, BN=BN, BK=BK, STAGES=4,
                  GROUP_M=8, PIPE=PIPE, W_SCALAR=QUANT == 3, X_GATHER=XG)
        # (x_ptr, its row stride and K 16-byte aligned, as the JIT specializes them: cp.async needs 16-byte copies)
        k, sass = compile_sm90(ws._ws_gemm_kernel, ws_sig(dt, gdt, BK, BN, "bf16", 0), cx,
                               aligned=("x_ptr", "stride_x", "K"))
        loop = k_loop(sass_instructions(sass))
        print(ACT, QUANT, BN, XG, k.metadata.num_warps, sass.count("LDL") + sass.count("STL"), sass.count("LDGSTS"),
              sass.count("UTMALDG"), sass.count("ARRIVES.LDGSTSBAR"), sum("FENCE.VIEW.ASYNC" in x for x in loop),
              k.metadata.shared, sep="|", flush=True)
'''


def test_ws_gemm_x_gather_compiles_for_sm90(tmp_path):
    """``X_GATHER`` (``set_ws_x_gather``): the loader copies the A rows by cp.async (``LDGSTS``) and TMA-loads only
    the weight tiles (one or two boxes a K block against four with the A halves), each of its threads arrives on
    the ready barrier once its copies landed (``ARRIVES.LDGSTSBAR``), the consumers fence the generic proxy's writes
    in their K loops; 12 warps, no spills, the shared memory of the TMA twin."""
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    rows = run_sm90_script(tmp_path, f"ROOT = {ROOT!r}\n" + _XG_SCRIPT)
    assert len(rows) == 8, rows
    twins = {}
    for act, quant, bn, xg, warps, spills, ldgsts, tma, arrives, fences, smem in rows:
        where = f"ACT={act} QUANT={quant} BN={bn} X_GATHER={xg}"
        assert int(warps) == 12 and int(spills) == 0, (where, warps, spills)
        gated = act == "0"
        if xg == "True":
            assert int(ldgsts) > 0 and int(arrives) > 0 and int(fences) >= 1, (where, ldgsts, arrives, fences)
            assert int(tma) == (2 if gated else 1), (where, tma)
        else:
            assert int(ldgsts) == 0 and int(tma) == (4 if gated else 3), (where, ldgsts, tma)
        twins.setdefault((act, quant, bn), {})[xg] = int(smem)
    for t in twins.values():
        assert 0 <= t["True"] - t["False"] <= 64, twins  # (a larger ready barrier count, no more buffers)


def _check_mode_switch(setter, env: str) -> None:
    """A triton_moe switch with a rule: "auto" by default, True, False or "auto" and nothing else; ``env`` = 1 / 0
    starts a process forced on / off, unset or "auto" with the rule."""
    prev = setter(True)
    try:
        assert prev == "auto"
        for bad in (1, 0, 1.0, "on", None):
            with pytest.raises(TypeError, match="True, False or 'auto'"):
                setter(bad)
        assert setter(False) is True and setter("auto") is False
    finally:
        setter(prev)
    env_starts(setter.__name__, env, {"1": True, "0": False, "": "auto", "auto": "auto"})


def test_ws_x_gather_switch_and_rule(monkeypatch):
    """``set_ws_x_gather``: "auto" by default, True or False, nothing else; ``FUSEDMOE_WS_XGATHER=1`` / ``0`` start a
    process forced on / off. "auto" takes ``kernel_configs.ws_x_gather_auto`` per GEMM -- at most 2048 weight rows an
    expert (gated GEMM1: twice the intermediate) or at most 64 rows an expert (slots / local experts), or any GEMM of
    a gated layer -- or with FP8 per channel weights -- whose tiles come from the global counter -- and only for rows
    the loader can copy 16 bytes at a time, not for rows GEMM2 reads at their padded positions."""
    from gluon_sm90 import LaunchCapture

    from fusedmoe.backends import triton_moe as tm
    from fusedmoe.backends.kernel_configs import ws_x_gather_auto
    from fusedmoe.config import ActivationParams
    from fusedmoe.formats.tensor import QuantizedTensor
    from fusedmoe.kernels import _ws_gemm as ws

    _check_mode_switch(tm.set_ws_x_gather, "FUSEDMOE_WS_XGATHER")
    # the rule: Qwen3-30B-A3B's GEMMs (1536 / 2048 weight rows) yes; DeepSeek-V3's (4096 / 7168) only at <= 64 rows an
    # expert; Mixtral-8x7B's (28672 / 4096) at its prefill row counts no -- with static tiles
    def rule(weight_rows, rows_per_expert, dyn=False, gated=True, fmt=Format.FP8_TENSOR):
        return ws_x_gather_auto(weight_rows, rows_per_expert, dyn=dyn, gated=gated, weight_format=fmt)

    assert rule(1536, 512) and rule(2048, 2048) and not rule(2049, 65)
    assert rule(4096, 64) and rule(7168, 32) and not rule(4096, 256)
    assert not rule(28672, 512) and not rule(4096, 2048) and not rule(2688, 384, gated=False)
    # tiles from the global counter: every GEMM of a gated layer (DeepSeek-V3 / Qwen3-235B at 8192 tokens); a
    # non-gated layer's (Nemotron's GEMM2: 2688 weight rows, 384 rows an expert) with FP8 per channel weights, else
    # still by the rows alone
    assert rule(4096, 256, dyn=True) and rule(7168, 2048, dyn=True) and rule(28672, 512, dyn=True)
    assert not rule(2688, 384, dyn=True, gated=False) and rule(1920, 384, dyn=True, gated=False)
    assert rule(2688, 384, dyn=True, gated=False, fmt=Format.FP8_CHANNEL)
    assert not rule(2688, 384, gated=False, fmt=Format.FP8_CHANNEL)
    for fmt in (Format.FP8_BLOCK, Format.BF16):
        assert not rule(2688, 384, dyn=True, gated=False, fmt=fmt) and rule(2688, 384, dyn=True, fmt=fmt)

    monkeypatch.setattr(tm, "_gather_slot_rows", lambda a, al, BM, *r, **kw: torch.zeros(al.max_blocks * BM, a.shape[1],
                                                                                         dtype=a.dtype))
    E, K, NB, BM = 4, 256, 3, 128

    def x_gather(N, gated, TK, *, rows=None, a_padded=False, layer_gated=None, fmt=Format.FP8_TENSOR):
        cap = LaunchCapture()
        monkeypatch.setattr(ws, "_ws_gemm_kernel", cap)
        M = 2 * N if gated else N
        scale = torch.ones(E, M) if fmt is Format.FP8_CHANNEL else torch.ones(E)
        w = QuantizedTensor(torch.zeros(E, M, K, dtype=torch.float8_e4m3fn), fmt, scale)
        a = torch.zeros(TK // 2, K, dtype=torch.float8_e4m3fn) if rows is None else rows
        al = tm.AlignResult(torch.zeros(NB * BM, dtype=torch.int32), torch.zeros(NB, dtype=torch.int32),
                            torch.zeros(1, dtype=torch.int32), BM, NB)
        tw = torch.ones(TK)
        tm._ws_gemm(ws_config(gated), a, tw, 1, w, torch.ones(E), 1, 0, tw, False, tw, tw, 0, al,
                    torch.empty(TK, N, dtype=torch.bfloat16), N, 2, TK, E, 0 if gated else 3, gated,
                    ActivationParams(), None, False, False, 132, a_padded=a_padded, layer_gated=layer_gated)
        (grid, args, kw), = cap.calls
        return kw["X_GATHER"]

    assert x_gather(768, True, 2048) and not x_gather(2048, True, 1024) and x_gather(2048, True, 256)
    assert x_gather(2048, False, 1024) and not x_gather(4096, False, 1024)
    assert not x_gather(768, True, 2048, rows=torch.zeros(1024, K + 8, dtype=torch.float8_e4m3fn)[:, :K])  # stride
    assert not x_gather(768, True, 2048, a_padded=True)  # GEMM2 reading GEMM1's padded rows: no gather at all
    prev = tm.set_ws_dynamic_tiles(True)  # (4 experts: "auto" would leave the counter off)
    try:  # with counted tiles: a gated layer's GEMM1 and GEMM2 (layer_gated) copy, a non-gated layer's GEMM2 not
        assert x_gather(2048, True, 1024) and x_gather(4096, False, 1024, layer_gated=True)
        assert not x_gather(4096, False, 1024) and not x_gather(4096, False, 1024, layer_gated=False)
        assert x_gather(4096, False, 1024, fmt=Format.FP8_CHANNEL)  # the weights' format reaches the rule
    finally:
        tm.set_ws_dynamic_tiles(prev)
    for mode, want in ((True, True), (False, False)):
        prev = tm.set_ws_x_gather(mode)
        try:
            assert x_gather(2048, True, 1024) is want and x_gather(768, True, 2048) is want
        finally:
            tm.set_ws_x_gather(prev)


_DYN_SCRIPT = _SCRIPT_HEAD + r'''
# DYN (tiles by a global counter) off / on: FP8 per channel GEMM1 / GEMM2 pipelined, the wide GEMM1, FP8 blocks,
# BF16, the X_GATHER loader (four warps)
for ACT, GATED, QUANT, BN, PIPE, XG in ((0, True, 2, 64, True, False), (7, False, 2, 128, True, False),
                                        (0, True, 2, 128, True, False), (0, True, 3, 64, False, False),
                                        (0, True, 0, 128, False, False), (3, False, 2, 128, True, True)):
    dt, BK, gdt = ("fp8e4nv", 128, gl.float8e4nv) if QUANT else ("bf16", 64, gl.bfloat16)
    for DYN in (False, True):
        cx = dict(TOP_K=8, E_LOC=64, ACT=ACT, GATED=GATED, QUANT=QUANT, OUT_Q=0, ROUND_DTYPE=gl.bfloat16,
                  HAS_BIAS=False, WEIGHT_ON_INPUT=False, MUL_ROUTING_WEIGHT=ACT == 7, BN=BN, BK=BK, STAGES=4,
                  GROUP_M=8, PIPE=PIPE, W_SCALAR=QUANT == 3, X_GATHER=XG, DYN=DYN)
        k, sass = compile_sm90(ws._ws_gemm_kernel, ws_sig(dt, gdt, BK, BN, "bf16", 0), cx,
                               aligned=("x_ptr", "stride_x", "K") if XG else ())
        print(ACT, QUANT, BN, XG, DYN, k.metadata.num_warps, sass.count("LDL") + sass.count("STL"),
              sass.count("ATOMG.E.ADD"), sass.count("MEMBAR.ALL.GPU"), k.metadata.shared, sep="|", flush=True)
'''


def test_ws_dynamic_tiles_compiles_for_sm90(tmp_path):
    """``DYN`` (``set_ws_dynamic_tiles``): the loader fetches tile indices by relaxed atomics (``ATOMG.E.ADD``, no
    ``MEMBAR.ALL.GPU`` before them: the fetch publishes nothing) -- the first and one a tile -- and counts itself
    done by one acq_rel atomic (one ``MEMBAR.ALL.GPU``) -- only when it is on; 12 warps, no spills (the wide
    per-channel 2 x 128 tile: 2 on sm_90, outside the K loop), the tile queue's few hundred bytes of shared memory
    more."""
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    rows = run_sm90_script(tmp_path, f"ROOT = {ROOT!r}\n" + _DYN_SCRIPT)
    assert len(rows) == 12, rows
    smem = {}
    for act, quant, bn, xg, dyn, warps, spills, atomics, membars, shared in rows:
        where = (act, quant, bn, xg, dyn)
        wide = quant != "0" and act == "0" and bn == "128"
        assert int(warps) == 12 and int(spills) <= (16 if wide and dyn == "True" else 0), (where, warps, spills)
        on = dyn == "True"
        assert int(atomics) == (3 if on else 0) and int(membars) == (1 if on else 0), (where, atomics, membars)
        smem.setdefault((act, quant, bn, xg), {})[dyn] = int(shared)
    for key, v in smem.items():
        assert 0 < v["True"] - v["False"] <= 512, (key, v)


def test_ws_dynamic_tiles_switch_and_rule(monkeypatch):
    """``set_ws_dynamic_tiles``: "auto" by default, True or False, nothing else; ``FUSEDMOE_WS_DYN=1`` / ``0`` start
    a process forced on / off. "auto" takes ``kernel_configs.ws_dynamic_tiles_auto`` per GEMM -- FP8 weights (per
    tensor, per channel, blocks) and MXFP4 / NVFP4 ones with at least 64 local experts, never 16-bit ones. The
    launch passes ``DYN`` and, when on, a zeroed int32 [2] counter pair -- eager, two cached a device and stream,
    taken in turn; under capture (here: not CUDA) a fresh one."""
    from gluon_sm90 import LaunchCapture

    from fusedmoe.backends import triton_moe as tm
    from fusedmoe.backends.kernel_configs import WS_DYN_MIN_EXPERTS, ws_dynamic_tiles_auto
    from fusedmoe.config import ActivationParams
    from fusedmoe.formats.tensor import QuantizedTensor
    from fusedmoe.kernels import _ws_gemm as ws

    _check_mode_switch(tm.set_ws_dynamic_tiles, "FUSEDMOE_WS_DYN")
    # the rule: DeepSeek-V3 / MiniMax-M2 / Qwen3-30B FP8 (256 / 128 experts) yes; Mixtral (8) and 16-bit weights no
    assert WS_DYN_MIN_EXPERTS == 64
    for fmt in (Format.FP8_TENSOR, Format.FP8_CHANNEL, Format.FP8_BLOCK):
        assert ws_dynamic_tiles_auto(fmt, 256) and ws_dynamic_tiles_auto(fmt, 64) and not ws_dynamic_tiles_auto(fmt, 63)
        assert not ws_dynamic_tiles_auto(fmt, 8)
    for fmt in (Format.MXFP4, Format.NVFP4):  # the FP4 prefill kernel's (forty-sixth session)
        assert ws_dynamic_tiles_auto(fmt, 128) and ws_dynamic_tiles_auto(fmt, 64) and not ws_dynamic_tiles_auto(fmt, 32)
    assert not ws_dynamic_tiles_auto(Format.BF16, 256) and not ws_dynamic_tiles_auto(Format.MXFP8, 256)
    a, b = tm._ws_tile_counters(torch.device("cpu")), tm._ws_tile_counters(torch.device("cpu"))
    assert a.tolist() == b.tolist() == [0, 0] and a is not b and a.dtype == torch.int32
    ctr = torch.zeros(2, dtype=torch.int32)
    monkeypatch.setattr(tm, "_ws_tile_counters", lambda device: ctr)
    K, NB, BM, N, TK = 256, 3, 128, 768, 4096

    def launch(E, fmt=Format.FP8_TENSOR):
        cap = LaunchCapture()
        monkeypatch.setattr(ws, "_ws_gemm_kernel", cap)
        dt = torch.bfloat16 if fmt is Format.BF16 else torch.float8_e4m3fn
        w = QuantizedTensor(torch.zeros(E, 2 * N, K, dtype=dt), fmt, None if fmt is Format.BF16 else torch.ones(E))
        al = tm.AlignResult(torch.zeros(NB * BM, dtype=torch.int32), torch.zeros(NB, dtype=torch.int32),
                            torch.zeros(1, dtype=torch.int32), BM, NB)
        tm._ws_gemm(ws_config(True), torch.zeros(TK // 2, K, dtype=dt), torch.ones(TK), 1, w,
                    torch.ones(E), 1, 0, torch.ones(TK), False, torch.ones(TK), torch.ones(TK), 0, al,
                    torch.empty(TK, N, dtype=torch.bfloat16), N, 2, TK, E, 0, True, ActivationParams(), None, False,
                    False, 132)
        (grid, args, kw), = cap.calls
        return kw["DYN"], kw["tile_ctr_ptr"], al

    for E, fmt, want in ((4, Format.FP8_TENSOR, False), (64, Format.FP8_TENSOR, True), (64, Format.BF16, False)):
        dyn, ptr, al = launch(E, fmt)  # "auto"
        assert dyn is want and (ptr is ctr if want else ptr is al.num_post_padded), (E, fmt)  # off: never read
    for mode in (True, False):
        prev = tm.set_ws_dynamic_tiles(mode)
        try:
            for E in (4, 64):
                dyn, ptr, al = launch(E)
                assert dyn is mode and (ptr is ctr if mode else ptr is al.num_post_padded), (mode, E)
        finally:
            tm.set_ws_dynamic_tiles(prev)


_BLOCK_SCRIPT = _SCRIPT_HEAD + r'''
# FP8 128 x 128 blocks, (ACT, GATED, BN, W_SCALAR): the narrow tiles with per-column weight-scale vectors (the
# default) and one scalar a column group; the wide tiles (always scalar)
for ACT, GATED, BN, WS1 in ((0, True, 64, False), (0, True, 64, True), (3, False, 128, False), (3, False, 128, True),
                            (0, True, 128, True), (3, False, 256, True), (7, False, 256, True)):
    sig = ws_sig("fp8e4nv", gl.float8e4nv, 128, BN, "bf16", 0)
    cx = dict(TOP_K=8, E_LOC=64, ACT=ACT, GATED=GATED, QUANT=3, OUT_Q=0, ROUND_DTYPE=gl.bfloat16, HAS_BIAS=False,
              WEIGHT_ON_INPUT=False, MUL_ROUTING_WEIGHT=ACT == 7, BN=BN, BK=128, STAGES=4, GROUP_M=8, W_SCALAR=WS1)
    k, sass = compile_sm90(ws._ws_gemm_kernel, sig, cx)
    loop = k_loop(sass_instructions(sass), "QGMMA")
    print(ACT, GATED, BN, WS1, sass.count("LDL") + sass.count("STL"), len(loop), sum("QGMMA" in t for t in loop),
          sum("LDG" in t for t in loop), sum(t.startswith("FFMA") for t in loop), sep="|", flush=True)
'''


def test_ws_block_scales_compile_for_sm90(tmp_path):
    """FP8 128 x 128 block tiles (sm_90 compile): with one weight scale a column group (W_SCALAR) the narrow K loop
    loses the per-column scale loads and multiplies -- 145 instead of 326 instructions a K block in the gated
    2 x 64 tile -- and the wide one-set tiles (2 x 128 gated, 256) compile without spills, their K loop two 128-
    column halves of 4 QGMMAs each; every partial product fused into one FFMA with its scales, by the vector path
    too (ptxas contracts its multiply-add) -- why the scalar scales give the same bits."""
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    rows = run_sm90_script(tmp_path, f"ROOT = {ROOT!r}\n" + _BLOCK_SCRIPT)
    assert len(rows) == 7, rows
    got = {(int(a), g == "True", int(bn), ws == "True"): (int(sp), int(n), int(q), int(ldg), int(ffma))
           for a, g, bn, ws, sp, n, q, ldg, ffma in rows}
    for key, (spills, n, qgmma, ldg, ffma) in got.items():
        act, gated, bn, ws1 = key
        assert spills == 0, (key, spills)
        halves = 2 if gated or bn == 256 else 1  # 128-deep K blocks of 32-deep QGMMAs a half
        assert qgmma == 4 * halves, (key, qgmma)
        # one FFMA a product, partial * (a_s * w_s) + sum, with the vectors too: the same bits either way
        assert ffma == bn * (2 if gated else 1) // 2, (key, ffma)
        if ws1:  # a_s (a row's scale) and one weight scale a half, per K block
            assert ldg <= 4, (key, ldg)
    for gated, bn in ((True, 64), (False, 128)):
        act = 0 if gated else 3
        vec, one = got[(act, gated, bn, False)], got[(act, gated, bn, True)]
        assert one[1] <= 0.6 * vec[1] and vec[3] >= 16, (gated, vec, one)
    assert got[(0, True, 128, True)][4] == 128 and got[(3, False, 256, True)][4] == 128


def test_ws_block_scalar_rule():
    """Where FP8 block tiles read one weight scale a column group: the wide and the pipelined tiles always, the
    narrow ones under the switch; a gated tile whose groups would straddle two scale blocks (N not a multiple of
    block_n: a layer check refuses such intermediate sizes before) is an error, not a silent mix. The switch is on
    by default (fortieth session), a bool only, and ``FUSEDMOE_WS_BLOCK_SCALAR=0`` starts with it off; the Triton
    GEMMs' switch
    (``set_block_w1``) is on by default and ``FUSEDMOE_BLOCK_W1=0`` turns it off."""
    from fusedmoe.backends import triton_moe as tm

    narrow_g, narrow = ws_config(True), ws_config(False)
    wide_g, wide = ws_config(True, bn=128), ws_config(False, bn=256)
    prev = tm.set_ws_block_scalar_scales(False)
    try:
        assert prev is True  # the default
        assert tm._ws_block_w_scalar(wide_g, 2048, True) and tm._ws_block_w_scalar(wide, 1984, False)
        assert not tm._ws_block_w_scalar(narrow_g, 2048, True) and not tm._ws_block_w_scalar(narrow, 2048, False)
        assert tm._ws_block_w_scalar(narrow_g, 2048, True, pipe=True)  # the pipelined loops: always
        with pytest.raises(ValueError, match="N a multiple of 128"):
            tm._ws_block_w_scalar(wide_g, 192, True)
        assert tm.set_ws_block_scalar_scales(True) is False
        assert tm._ws_block_w_scalar(narrow_g, 192, True) and tm._ws_block_w_scalar(narrow, 160, False)
        with pytest.raises(ValueError, match="N a multiple of 64"):
            tm._ws_block_w_scalar(narrow_g, 160, True)
        with pytest.raises(TypeError, match="bool"):
            tm.set_ws_block_scalar_scales(1)
    finally:
        tm.set_ws_block_scalar_scales(prev)
    env_starts("set_ws_block_scalar_scales", "FUSEDMOE_WS_BLOCK_SCALAR", {"1": True, "0": False})
    # the Triton GEMMs' one weight scale a tile: on by default, FUSEDMOE_BLOCK_W1=0 turns it off
    prev = tm.set_block_w1(True)
    try:
        assert prev is True
        with pytest.raises(TypeError, match="bool"):
            tm.set_block_w1(0)
    finally:
        tm.set_block_w1(prev)
    env_starts("set_block_w1", "FUSEDMOE_BLOCK_W1", {"0": False, "1": True})


@pytest.mark.parametrize("wfmt", [Format.FP8_BLOCK, Format.FP8_TENSOR], ids=lambda f: f.name)
def test_ws_gemm_launch_flags(monkeypatch, wfmt):
    """``triton_moe._ws_gemm``'s launch bound to the kernel's signature: PIPE from the config or the switch (FP8 per
    tensor / channel / blocks), W_SCALAR for FP8 blocks -- the wide and the pipelined tiles always, the narrow ones
    under ``set_ws_block_scalar_scales`` -- BN and the grid from the config; a gated wide block tile over an N of
    half scale blocks is refused."""
    import inspect

    from gluon_sm90 import LaunchCapture

    from fusedmoe.backends import triton_moe as tm
    from fusedmoe.config import ActivationParams
    from fusedmoe.formats.tensor import QuantizedTensor
    from fusedmoe.kernels import _ws_gemm as ws

    sig = inspect.signature(ws._ws_gemm_kernel.fn)
    E, K, NB, BM, TK = 4, 256, 3, 128, 6

    def launch(c, N, gated=True):
        cap = LaunchCapture()
        monkeypatch.setattr(ws, "_ws_gemm_kernel", cap)
        M = 2 * N if gated else N
        data = torch.zeros(E, M, K, dtype=torch.float8_e4m3fn)
        scale = torch.ones(E, -(-M // 128), K // 128) if wfmt is Format.FP8_BLOCK else torch.ones(E)
        w = QuantizedTensor(data, wfmt, scale, block_rows=128 if wfmt is Format.FP8_BLOCK else 1)
        rows = torch.zeros(NB * BM, K, dtype=torch.float8_e4m3fn)
        al = tm.AlignResult(torch.zeros(NB * BM, dtype=torch.int32), torch.zeros(NB, dtype=torch.int32),
                            torch.zeros(1, dtype=torch.int32), BM, NB)
        out = torch.empty(TK, N, dtype=torch.bfloat16)
        tw, a_s = torch.ones(TK), torch.ones(NB * BM, K // 128)
        wse, wsn = (scale.stride(0), scale.stride(1)) if wfmt is Format.FP8_BLOCK else (1, 0)
        tm._ws_gemm(c, rows, a_s, a_s.stride(0), w, scale, wse, wsn, tw, False, tw, tw, 0, al, out, N, 2, TK, E,
                    0 if gated else 3, gated, ActivationParams(), None, False, False, 132, a_padded=True)
        (grid, args, kw), = cap.calls
        assert kw.pop("num_warps") == 4
        b = sig.bind(*args, **kw).arguments
        assert grid == (min(NB * -(-N // c.block_n), 132),) and b["BN"] == c.block_n, (grid, b["BN"])
        return b["PIPE"], b["W_SCALAR"]

    block = wfmt is Format.FP8_BLOCK
    narrow, wide = ws_config(True), ws_config(True, bn=128)
    assert launch(narrow, 256) == (False, block)  # the narrow block tiles' scalar scales: on by default
    assert launch(ws_config(False), 384, gated=False) == (False, block)
    prev = tm.set_ws_block_scalar_scales(False)
    try:
        assert launch(narrow, 256) == (False, False)
        assert launch(wide, 256) == (False, block)
        assert launch(ws_config(False, bn=256), 384, gated=False) == (False, block)
        assert launch(ws_pipelined(narrow, wfmt), 256) == (True, block)
        assert launch(ws_pipelined(wide, wfmt), 256) == (True, block)
    finally:
        tm.set_ws_block_scalar_scales(prev)
    prev = tm.set_ws_pipelined_promotion(True)
    try:
        assert launch(narrow, 256) == (True, block)
    finally:
        tm.set_ws_pipelined_promotion(prev)
    if block:
        with pytest.raises(ValueError, match="N a multiple of 128"):
            launch(wide, 192)


def test_ws_config_rules(tmp_path):
    ok = ws_config(True)
    assert warp_specialized_problem(ok, Format.FP8_TENSOR, "gemm1", True, 4096) is None
    assert warp_specialized_problem(ws_config(False), Format.FP8_CHANNEL, "gemm1", False, 4096) is None
    assert warp_specialized_problem(ws_config(False), Format.FP8_CHANNEL, "gemm2", True, 2048) is None  # GEMM2: never gated
    assert warp_specialized_problem(ok, Format.FP8_BLOCK, "gemm1", True, 7168) is None
    assert warp_specialized_problem(dataclasses.replace(ok, warp_specialized=False), Format.BF16, "gemm1", True, 8) is None
    # FP8 one-partial-set tiles (ONE_PART): 2 x 128 gated, 256 non-gated, 48 KB stages -> at most 4; never the default
    wide = warp_specialized_config(True, num_stages=5, block_n=128)
    assert (wide.block_n, wide.num_stages) == (128, 4)
    assert warp_specialized_problem(wide, Format.FP8_CHANNEL, "gemm1", True, 7168) is None
    assert warp_specialized_problem(wide, Format.FP8_BLOCK, "gemm1", True, 7168) is None  # one scale a half
    assert warp_specialized_problem(warp_specialized_config(False, block_n=256), Format.FP8_CHANNEL, "gemm2", False,
                                    2048) is None
    assert (ws_config(True).block_n, ws_config(False).block_n) == (64, 128)
    with pytest.raises(ValueError, match="block_n 256"):
        warp_specialized_config(True, block_n=256)
    bf = warp_specialized_config(True, weight_format=Format.BF16)
    assert (bf.block_n, bf.block_k, bf.num_stages) == (128, 64, 4)
    assert warp_specialized_problem(bf, Format.BF16, "gemm1", True, 4096) is None
    bf2 = warp_specialized_config(False, num_stages=5, weight_format=Format.BF16)
    assert (bf2.block_n, bf2.num_stages) == (256, 4)  # 48 KB stages: at most 4
    assert warp_specialized_problem(bf2, Format.BF16, "gemm2", False, 2048) is None
    assert warp_specialized_problem(dataclasses.replace(bf2, block_n=128, num_stages=6), Format.BF16, "gemm2",
                                    False, 2048) is None  # 32 KB stages
    bad = [
        (ok, Format.BF16, "gemm1", True, 4096, "block_k 64"),
        (bf, Format.FP8_TENSOR, "gemm1", True, 4096, "block_k 128"),
        (dataclasses.replace(bf2, num_stages=5), Format.BF16, "gemm2", False, 2048, "at most 4 stages"),
        (dataclasses.replace(bf, block_n=256), Format.BF16, "gemm1", True, 4096, "block_n"),
        (ok, Format.MXFP8, "gemm1", True, 4096, "weights"),  # (FP4: the _ws_fp4 tiles, test_ws_fp4.py)
        (ws_config(True, bn=256), Format.FP8_TENSOR, "gemm1", True, 4096, "block_n"),
        (ws_config(False, stages=5, bn=256), Format.FP8_TENSOR, "gemm1", False, 4096, "at most 4 stages"),  # 48 KB
        (dataclasses.replace(ok, block_m=64), Format.FP8_TENSOR, "gemm1", True, 4096, "block_m"),
        (dataclasses.replace(ok, block_k=64), Format.FP8_TENSOR, "gemm1", True, 4096, "block_k"),
        (dataclasses.replace(ok, num_warps=8), Format.FP8_TENSOR, "gemm1", True, 4096, "num_warps"),
        (dataclasses.replace(ok, num_stages=7), Format.FP8_TENSOR, "gemm1", True, 4096, "num_stages"),
        (dataclasses.replace(ok, split_k=2), Format.FP8_TENSOR, "gemm1", True, 4096, "split"),
        (dataclasses.replace(ok, fp8_fast_accum=True), Format.FP8_TENSOR, "gemm1", True, 4096, "tensor cores"),
        (dataclasses.replace(ok, persistent=2), Format.FP8_TENSOR, "gemm2", False, 4096, "persistent"),
        (dataclasses.replace(ok, n_tiles=4), Format.FP8_TENSOR, "gemm2", False, 256, "hold tiles"),
        (ok, Format.FP8_TENSOR, "gemm1", True, 4104, "multiple of 16"),
        (ok, Format.FP8_TENSOR, "gemm2", False, 232, "intermediate_size_padded"),
        # the pipelined promotion: FP8 prefill tiles only
        (dataclasses.replace(bf, pipelined_promotion=True), Format.BF16, "gemm1", True, 4096, "FP8 per tensor"),
    ]
    for cfg, fmt, gemm, gated, K, words in bad:
        why = warp_specialized_problem(cfg, fmt, gemm, gated, K)
        assert why is not None and words in why and gemm.upper() in why, (cfg, fmt, why)
    # (the two-set tiles and the wide one-set tiles: 2 x 128 gated, 256)
    for cfg, fmt, gemm, gated in ((ok, Format.FP8_TENSOR, "gemm1", True), (ws_config(False), Format.FP8_CHANNEL,
                                                                           "gemm2", False),
                                  (ws_config(False, bn=64), Format.FP8_TENSOR, "gemm1", False),
                                  (ws_config(True, bn=128), Format.FP8_TENSOR, "gemm1", True),
                                  (ws_config(False, bn=256, stages=4), Format.FP8_CHANNEL, "gemm2", False),
                                  (ok, Format.FP8_BLOCK, "gemm1", True), (ws_config(True, bn=128), Format.FP8_BLOCK,
                                                                          "gemm1", True)):
        piped = ws_pipelined(cfg, fmt)
        assert piped == dataclasses.replace(cfg, pipelined_promotion=True), (cfg, fmt)
        assert warp_specialized_problem(piped, fmt, gemm, gated, 4096) is None
        assert KernelConfig.from_dict(piped.to_dict()) == piped
    assert ws_pipelined(bf, Format.BF16) is None
    assert ws_pipelined(dataclasses.replace(ok, warp_specialized=False), Format.FP8_TENSOR) is None
    dec = KernelConfig(16, 64, 128, num_warps=4, num_stages=4, warp_specialized=True)  # a decode tile: its own loop
    assert ws_pipelined(dec, Format.FP8_TENSOR) is None
    assert "block_m" in warp_specialized_problem(dataclasses.replace(dec, pipelined_promotion=True), Format.FP8_TENSOR,
                                                 "gemm1", True, 4096)
    with pytest.raises(ValueError, match="needs warp_specialized"):
        dataclasses.replace(ok, warp_specialized=False, pipelined_promotion=True)
    with pytest.raises(TypeError, match="pipelined_promotion must be a bool"):
        dataclasses.replace(ok, pipelined_promotion=1)
    # a table entry written before the field reads as off
    assert not KernelConfig.from_dict({k: v for k, v in ok.to_dict().items() if k != "pipelined_promotion"}
                                      ).pipelined_promotion
    # the tuner offers the warp-specialized kernels at prefill, for FP8 and 16-bit weights, never for FP4 / MX
    from fusedmoe.bench.tune import search_space

    def ws_cands(T, fmt):
        return [c for c in search_space(T, 7168, 2048, 256, 8, fmt, Activation.SWIGLU, "NVIDIA H200")
                if c.config.gemm1.warp_specialized or c.config.gemm2.warp_specialized]

    assert ws_cands(8192, Format.FP8_TENSOR) and not ws_cands(64, Format.FP8_TENSOR)
    assert ws_cands(8192, Format.FP8_BLOCK) and ws_cands(8192, Format.BF16) and not ws_cands(8192, Format.NVFP4)
    assert {c.config.gemm1.num_stages for c in ws_cands(8192, Format.BF16) if c.config.gemm1.warp_specialized} == {3, 4}
    # the wide FP8 tiles: both GEMMs, GEMM1 wide with the narrow GEMM2 and the narrow GEMM1 with the wide GEMM2;
    # FP8 blocks where a gated intermediate is whole 128-row scale blocks (one weight scale a half)

    def wide_cands(fmt, I_pad=2048, act=Activation.SWIGLU):
        return [c for c in search_space(8192, 7168, I_pad, 256, 8, fmt, act, "NVIDIA H200")
                if c.config.gemm1.warp_specialized and (c.config.gemm1.block_n == 128 or c.config.gemm2.block_n == 256)]

    for fmt in (Format.FP8_CHANNEL, Format.FP8_BLOCK):
        got = {(c.config.gemm1.block_n, c.config.gemm2.block_n) for c in wide_cands(fmt)}
        assert {(128, 256), (128, 128), (64, 256)} <= got, (fmt, got)
    assert not wide_cands(Format.FP8_BLOCK, I_pad=1920 + 64)
    assert wide_cands(Format.FP8_BLOCK, I_pad=1920 + 64, act=Activation.RELU2)  # non-gated: any width
    with pytest.raises(TypeError, match="warp_specialized"):
        KernelConfig(128, 64, 128, warp_specialized=1)
    # the tuned table keeps the flag (and omits it when off)
    t = TunedTable()
    t.add(device="NVIDIA H200", weight_format=Format.FP8_TENSOR, activation=Activation.SWIGLU, gemm="gemm1", N=512,
          K=1024, E=8, tokens=4096, config=ok)
    t.add(device="NVIDIA H200", weight_format=Format.FP8_TENSOR, activation=Activation.SWIGLU, gemm="gemm2", N=1024,
          K=256, E=8, tokens=4096, config=KernelConfig(128, 128, 128))
    piped = dataclasses.replace(ok, pipelined_promotion=True)
    t.add(device="NVIDIA H200", weight_format=Format.FP8_TENSOR, activation=Activation.SWIGLU, gemm="gemm1", N=512,
          K=1024, E=8, tokens=8192, config=piped)
    p = tmp_path / "t.json"
    save_tuned_configs(t, p)
    assert p.read_text().count("warp_specialized") == 2 and p.read_text().count("pipelined_promotion") == 1
    back = load_tuned_configs(p)
    for tokens, want in ((4096, ok), (8192, piped)):
        assert back.lookup(device="NVIDIA H200", weight_format=Format.FP8_TENSOR, activation=Activation.SWIGLU,
                           gemm="gemm1", N=512, K=1024, E=8, tokens=tokens) == want


def test_ws_heuristic_rows_per_expert():
    """The heuristic's warp-specialized choice (FP8 per tensor / channel on Hopper): both GEMMs from 64
    rows per expert with an intermediate of 512+, GEMM1 in the wide tile from 256; below 64 rows the Triton 64-row tiles; TP shards
    (intermediate 256) keep the held-activation GEMM2; FP8 blocks, 16-bit weights and other GPUs
    never (tuned table only)."""
    from fusedmoe.backends.kernel_configs import WS_MIN_ROWS_PER_EXPERT, WS_WIDE_MIN_ROWS_PER_EXPERT, choose_moe_config

    empty = TunedTable()

    def cfg(T, H, I, E, k, fmt, dev="NVIDIA H200"):
        return choose_moe_config(T, H, I, E, k, fmt, Activation.SWIGLU, dev, table=empty, num_sms=132)

    assert WS_MIN_ROWS_PER_EXPERT == 64 and WS_WIDE_MIN_ROWS_PER_EXPERT == 256
    for fmt in (Format.FP8_TENSOR, Format.FP8_CHANNEL):
        for T in (2048, 8192):  # MiniMax-M2 shape: 64 / 256 rows per expert
            c = cfg(T, 3072, 1536, 256, 8, fmt)
            assert c.gemm1.warp_specialized and c.gemm2.warp_specialized, (fmt, T, c)
            assert c.gemm1.block_m == c.gemm2.block_m == 128
            # GEMM1's tile: 2 x 64 below 256 rows per expert, the wide 2 x 128 from there; GEMM2 128
            assert (c.gemm1.block_n, c.gemm1.num_stages, c.gemm2.block_n) == ((64, 5, 128) if T == 2048 else (128, 4, 128))
        c = choose_moe_config(8192, 2688, 1856, 128, 6, fmt, Activation.RELU2, "NVIDIA H200", table=empty, num_sms=132)
        assert c.gemm1.warp_specialized and c.gemm1.block_n == 256  # non-gated wide: 256 columns (384 rows per expert)
        c = cfg(1024, 3072, 1536, 256, 8, fmt)  # 32 rows per expert
        assert not c.gemm1.warp_specialized and not c.gemm2.warp_specialized and c.gemm1.block_m <= 64
        c = cfg(1536, 3072, 1536, 256, 8, fmt)  # 48 rows per expert: 64-row Triton tiles
        assert not c.gemm1.warp_specialized and c.gemm1.block_m == c.gemm2.block_m == 64
        c = cfg(2048, 7168, 256, 256, 8, fmt)  # TP shard: I = 256
        assert not c.gemm1.warp_specialized and not c.gemm2.warp_specialized and c.gemm2.n_tiles > 1
        c = cfg(2048, 3072, 1536, 256, 8, fmt, dev="NVIDIA A100-SXM4-80GB")
        assert not c.gemm1.warp_specialized and not c.gemm2.warp_specialized
    for fmt in (Format.FP8_BLOCK, Format.BF16):
        c = cfg(8192, 3072, 1536, 256, 8, fmt)
        assert not c.gemm1.warp_specialized and not c.gemm2.warp_specialized, fmt


@interpreter
@pytest.mark.skipif(not INTERP, reason="CPU variant (the GPU variant is below)")
def test_ws_refused_where_it_cannot_run():
    """The interpreter cannot run Gluon: a warp-specialized GEMM is refused with a reason; a bad
    tile or the atomic combine with a warp-specialized GEMM2 is a ValueError."""
    act, wfmt = Activation.SWIGLU, Format.FP8_TENSOR
    prob = make_problem(T=4, H=64, I=32, I_pad=32, E=4, K=2, act=act, wfmt=wfmt, dtype=torch.float16)
    g = KernelConfig(128, 32, 32)
    for cfg in (MoEKernelConfig(ws_config(True), g), MoEKernelConfig(g, ws_config(False))):
        with pytest.raises(NotImplementedError, match="interpreter"):
            run_case(prob, act=act, wfmt=wfmt, config=cfg)
    with pytest.raises(ValueError, match="atomic_combine"):
        run_case(prob, act=act, wfmt=wfmt, config=MoEKernelConfig(g, ws_config(False), atomic_combine=True))
    with pytest.raises(ValueError, match="block_n"):
        run_case(prob, act=act, wfmt=wfmt, config=MoEKernelConfig(ws_config(True, bn=256), g))


@interpreter
@pytest.mark.parametrize("offset,nonlocal_,real_only", [(0, False, False), (3, True, False), (3, False, True)])
def test_gather_slot_rows(offset, nonlocal_, real_only):
    """``_gather_slot_rows_kernel``: row r of the output is the input row of slot sorted_ids[r]'s
    token, padding rows are zero (``REAL_ONLY``, the decode kernels': left untouched), blocks of the
    non-local group and past num_post_padded untouched."""
    from fusedmoe.kernels import _align as _al
    from fusedmoe.kernels._host import launch

    torch.manual_seed(0)
    T, K, E, BM, C = 37, 3, 6, 16, 200
    ids = torch.randint(0, E + 4, (T, K), dtype=torch.int32, device=DEV)
    al = align_slots(ids.reshape(-1), E, BM, local_expert_offset=offset, include_nonlocal=nonlocal_, tokens=T)
    src = torch.randint(0, 256, (T, C), dtype=torch.uint8, device=DEV)
    dst = torch.full((al.max_blocks * BM, C), 7, dtype=torch.uint8, device=DEV)
    launch(_al._gather_slot_rows_kernel, (al.max_blocks, -(-C // 64)), src, dst, al.sorted_ids, al.block_expert,
           al.num_post_padded, T * K, C, src.stride(0), dst.stride(0), TOP_K=K, E_LOC=E, BLOCK_M=BM, BLOCK_C=64,
           REAL_ONLY=real_only)
    sid, be = al.sorted_ids.cpu().long(), al.block_expert.cpu().long()
    used = int(al.num_post_padded.cpu()[0])
    exp = torch.full_like(dst.cpu(), 7)
    for r in range(used):
        if be[r // BM] >= E:
            continue  # the non-local group: never read by GEMM1
        if sid[r] < T * K:
            exp[r] = src.cpu()[sid[r] // K]
        elif not real_only:
            exp[r] = 0
    assert torch.equal(dst.cpu(), exp)
    assert nonlocal_ == bool((be[: used // BM] >= E).any())


# ---- GPU ------------------------------------------------------------------------------------------


@gpu
@pytest.mark.parametrize("wfmt", WS_FMTS, ids=lambda f: f.name)
@pytest.mark.parametrize("act", list(Activation), ids=lambda a: a.name)
def test_gpu_ws_gemm_matches_reference(act, wfmt):
    """H = 704 (a K tail of 64 in the last 128-wide block, TMA zero fill), I = 96 (a column tail in
    each 64-wide tile), expert parallel (16 of 24 experts local), 600 tokens: within the reference's
    bound, and close to the Triton GEMMs with the same 128-row tiles -- GEMM1 warp-specialized, then
    both (GEMM2: K = 96, one 128-wide block with a tail). Then biases with and without weight on
    input, dynamic scales (FP8 per tensor), and CUDA graphs."""
    gated = act.is_gated
    params = _params(act)
    prob = make_problem(T=600, H=704, I=96, I_pad=96, E=16, K=4, act=act, wfmt=wfmt, dtype=torch.bfloat16,
                        offset=8, E_glob=24, seed=5)
    cfg = moe_config(gated)
    tri = MoEKernelConfig(KernelConfig(128, 64 if gated else 128, 128, group_m=8, num_warps=8, num_stages=3),
                          cfg.gemm2)
    got = _run_within_bound(prob, act=act, wfmt=wfmt, dtype=torch.bfloat16, tag="ws", params=params, offset=8,
                            config=cfg)
    base = _run_within_bound(prob, act=act, wfmt=wfmt, dtype=torch.bfloat16, tag="triton", params=params, offset=8,
                             config=tri)
    both = _run_within_bound(prob, act=act, wfmt=wfmt, dtype=torch.bfloat16, tag="ws both", params=params,
                             offset=8, config=moe_config(gated, gemm2=True))
    for o in (got, both):
        mx, rms = _errors(o, base)
        assert rms <= 4e-3, (mx, rms)  # the same products; summation order and rare roundings differ
    bprob = make_problem(T=300, H=704, I=96, I_pad=96, E=16, K=4, act=act, wfmt=wfmt, dtype=torch.bfloat16,
                         bias=True, offset=8, E_glob=24, seed=6)
    for woi in (True, False):
        _run_within_bound(bprob, act=act, wfmt=wfmt, dtype=torch.bfloat16, tag=("bias", woi), params=params,
                          offset=8, woi=woi, config=moe_config(gated, gemm2=True))
    if wfmt is Format.FP8_TENSOR:
        for g2 in (False, True):
            _run_within_bound(prob, act=act, wfmt=wfmt, dtype=torch.bfloat16, tag=("dynamic", g2), params=params,
                              offset=8, config=moe_config(gated, gemm2=g2), static=False)
    if act is Activation.SWIGLU:
        _graph_replay_matches(prob, wfmt, 96, got, offset=8, replays=2, config=cfg)
        _graph_replay_matches(prob, wfmt, 96, both, offset=8, replays=2, config=moe_config(gated, gemm2=True))


@gpu
@pytest.mark.parametrize("wfmt", WS_FMTS, ids=lambda f: f.name)
def test_gpu_ws_gemm_top1_and_stages(wfmt):
    """K = 1 (GEMM2 writes the output directly: the layout holds a non-local group, which every
    partition skips and whose rows the launcher zeroes), GEMM1 alone and both GEMMs, 2-6 stages, GROUP_M 1 and 8, fp16 hidden: within the bound, and every
    pipeline depth and tile order gives the same bits (one accumulation order per tile)."""
    act = Activation.SWIGLU
    prob = make_problem(T=1000, H=512, I=192, I_pad=192, E=8, K=1, act=act, wfmt=wfmt, dtype=torch.float16,
                        offset=4, E_glob=16, seed=7)
    for g2 in (False, True):
        outs = [_run_within_bound(prob, act=act, wfmt=wfmt, dtype=torch.float16, tag=(st, gm, g2), offset=4,
                                  config=moe_config(True, stages=st, group_m=gm, gemm2=g2))
                for st, gm in ((4, 8), (2, 1), (3, 8), (6, 1))]
        for o in outs[1:]:
            assert torch.equal(o, outs[0])


@gpu
@pytest.mark.parametrize("wfmt", WS_FMTS, ids=lambda f: f.name)
@pytest.mark.parametrize("act", [Activation.SWIGLU, Activation.RELU2], ids=lambda a: a.name)
def test_gpu_ws_gemm_real_shape(act, wfmt):
    """GEMM1 alone and both GEMMs warp-specialized on a DeepSeek-V3-like expert (H = 7168, I = 2048; 32 of the 256 experts, 2048 tokens, top-8
    of 256 routed to them) and Nemotron's unpadded I = 1856 (non-gated, 128-wide tiles with a
    column tail; GEMM2's K = 1856 ends in a 64-wide tail): within the reference's bound and close
    to the Triton kernels."""
    gated = act.is_gated
    H, I = (7168, 2048) if gated else (2688, 1856)
    prob = make_problem(T=2048, H=H, I=I, I_pad=I, E=32, K=8, act=act, wfmt=wfmt, dtype=torch.bfloat16,
                        E_glob=64, seed=9)
    cfg = moe_config(gated)
    tri = MoEKernelConfig(KernelConfig(128, 64 if gated else 128, 128, group_m=8, num_warps=8, num_stages=4),
                          cfg.gemm2)
    got = _run_within_bound(prob, act=act, wfmt=wfmt, dtype=torch.bfloat16, tag="ws", config=cfg)
    both = _run_within_bound(prob, act=act, wfmt=wfmt, dtype=torch.bfloat16, tag="ws both",
                             config=moe_config(gated, gemm2=True))
    base = _run_within_bound(prob, act=act, wfmt=wfmt, dtype=torch.bfloat16, tag="triton", config=tri)
    for o in (got, both):
        mx, rms = _errors(o, base)
        assert rms <= 4e-3, (mx, rms)


@gpu
@pytest.mark.parametrize("act", [Activation.SWIGLU, Activation.RELU2, Activation.SWIGLU_OAI], ids=lambda a: a.name)
def test_gpu_ws_gemm_fp8_block(act):
    """FP8 128 x 128 blocks (each K block's partial product scaled by a_s[row, kb] * w_s[col, kb]
    before it is added; the intermediate quantized in 1 x 128 groups by its own pass): H = 768,
    I = 256 and a DeepSeek-V3-sized expert, expert parallel, biases with the clamped SwiGLU; GEMM1
    alone and both GEMMs, within the reference's bound and close to the Triton kernels."""
    wfmt = Format.FP8_BLOCK
    gated = act.is_gated
    params = _params(act)
    for T, H, I, E, E_glob in ((600, 768, 256, 16, 24), (2048, 7168, 2048, 32, 64)):
        prob = make_problem(T=T, H=H, I=I, I_pad=I, E=E, K=4 if H == 768 else 8, act=act, wfmt=wfmt,
                            dtype=torch.bfloat16, bias=act is Activation.SWIGLU_OAI, offset=E_glob - E,
                            E_glob=E_glob, seed=11)
        kw = dict(act=act, wfmt=wfmt, dtype=torch.bfloat16, params=params, offset=E_glob - E)
        tri = MoEKernelConfig(KernelConfig(128, 64, 128, group_m=8, num_warps=8, num_stages=3), _G2)
        base = _run_within_bound(prob, tag=(T, "triton"), config=tri, **kw)
        for g2 in (False, True):
            got = _run_within_bound(prob, tag=(T, "ws", g2), config=moe_config(gated, gemm2=g2), **kw)
            mx, rms = _errors(got, base)
            assert rms <= 4e-3, (T, g2, mx, rms)


def bf16_config(gated: bool, *, gemm2=True, stages=4, group_m=8, bn=None, bn2=None) -> MoEKernelConfig:
    """The 16-bit warp-specialized GEMM1 (``bn`` columns) with GEMM2 warp-specialized too (``bn2``) or
    the Triton GEMM2 at 128 rows."""
    g1 = warp_specialized_config(gated, num_stages=stages, group_m=group_m, weight_format=Format.BF16)
    g2 = warp_specialized_config(False, num_stages=stages, group_m=group_m, weight_format=Format.BF16)
    g1 = dataclasses.replace(g1, **({"block_n": bn} if bn else {}))
    g2 = dataclasses.replace(g2, **({"block_n": bn2} if bn2 else {}))
    return MoEKernelConfig(g1, g2 if gemm2 else KernelConfig(128, 128, 64, group_m=8, num_warps=8, num_stages=3))


_BF16_TRITON = KernelConfig(128, 128, 64, group_m=8, num_warps=8, num_stages=3)


@gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("act", list(Activation), ids=lambda a: a.name)
def test_gpu_ws_gemm_bf16(act, dtype):
    """16-bit weights (one accumulator chain per tile, 64-wide K blocks): H = 736 (a K tail of 32 in
    the last block), I = 96 (column tails), expert parallel (16 of 24 experts local), 600 tokens --
    GEMM1 alone, both GEMMs at the default tiles (gated 2 x 128 / 256 columns) and at the narrow ones
    (2 x 64 / 128), 2 and 3 stages, GROUP_M 1: within the reference's bound and close to the Triton
    kernels; biases with and without weight on input; K = 1; a CUDA graph."""
    gated = act.is_gated
    params = _params(act)
    wfmt = Format.BF16
    kw = dict(act=act, wfmt=wfmt, dtype=dtype, params=params, offset=8)
    prob = make_problem(T=600, H=736, I=96, I_pad=96, E=16, K=4, act=act, wfmt=wfmt, dtype=dtype, offset=8,
                        E_glob=24, seed=5)
    base = _run_within_bound(prob, tag="triton", config=MoEKernelConfig(_BF16_TRITON, _BF16_TRITON), **kw)
    outs = []
    for cfg in (bf16_config(gated, gemm2=False), bf16_config(gated),
                bf16_config(gated, bn=64 if gated else 128, bn2=128, stages=3, group_m=1),
                bf16_config(gated, stages=2)):
        outs.append(_run_within_bound(prob, tag=cfg, config=cfg, **kw))
        mx, rms = _errors(outs[-1], base)
        assert rms <= 4e-3, (cfg, mx, rms)  # the same products; summation order and rare roundings differ
    assert torch.equal(outs[1], outs[3])  # pipeline depth does not change the accumulation order
    bprob = make_problem(T=300, H=736, I=96, I_pad=96, E=16, K=4, act=act, wfmt=wfmt, dtype=dtype, bias=True,
                         offset=8, E_glob=24, seed=6)
    for woi in (True, False):
        _run_within_bound(bprob, tag=("bias", woi), woi=woi, config=bf16_config(gated), **kw)
    top1 = make_problem(T=700, H=512, I=192, I_pad=192, E=8, K=1, act=act, wfmt=wfmt, dtype=dtype, offset=8,
                        E_glob=24, seed=7)
    _run_within_bound(top1, tag="top1", config=bf16_config(gated), **kw)
    if act is Activation.SWIGLU:
        _graph_replay_matches(prob, wfmt, 96, outs[1], offset=8, replays=2, config=bf16_config(gated))


@gpu
@pytest.mark.parametrize("act", [Activation.SWIGLU, Activation.RELU2], ids=lambda a: a.name)
def test_gpu_ws_gemm_bf16_real_shape(act):
    """BF16 on a DeepSeek-V3-like expert (H = 7168, I = 2048, 32 of 64 experts, 2048 tokens, top-8)
    and Nemotron's unpadded I = 1856 (non-gated: 256-wide tiles with a column tail; GEMM2's K = 1856
    ends in a 64-wide block): GEMM1 alone and both GEMMs, within the bound and close to the Triton kernels."""
    gated = act.is_gated
    H, I = (7168, 2048) if gated else (2688, 1856)
    wfmt, dtype = Format.BF16, torch.bfloat16
    prob = make_problem(T=2048, H=H, I=I, I_pad=I, E=32, K=8, act=act, wfmt=wfmt, dtype=dtype, E_glob=64, seed=9)
    kw = dict(act=act, wfmt=wfmt, dtype=dtype)
    base = _run_within_bound(prob, tag="triton", config=MoEKernelConfig(_BF16_TRITON, _BF16_TRITON), **kw)
    for cfg in (bf16_config(gated, gemm2=False), bf16_config(gated)):
        got = _run_within_bound(prob, tag=cfg, config=cfg, **kw)
        mx, rms = _errors(got, base)
        assert rms <= 4e-3, (cfg, mx, rms)


@gpu
def test_gpu_ws_gemm_bf16_refuses_mixed_dtypes():
    """16-bit warp-specialized GEMMs multiply hidden as is: fp32 hidden with bf16 weights is refused
    with a reason (the Triton kernels upcast instead)."""
    act, wfmt = Activation.SWIGLU, Format.BF16
    prob = make_problem(T=300, H=512, I=128, I_pad=128, E=8, K=2, act=act, wfmt=wfmt, dtype=torch.bfloat16)
    prob = dict(prob, hidden=prob["hidden"].float())
    with pytest.raises(ValueError, match="hidden must be torch.bfloat16"):
        run_case(prob, act=act, wfmt=wfmt, config=bf16_config(True))
    run_case(prob, act=act, wfmt=wfmt, config=MoEKernelConfig(_BF16_TRITON, _BF16_TRITON))  # the Triton kernels run it


@gpu
@pytest.mark.parametrize("wfmt,dtype", [(Format.FP8_TENSOR, torch.bfloat16), (Format.FP8_CHANNEL, torch.bfloat16),
                                        (Format.FP8_BLOCK, torch.bfloat16), (Format.BF16, torch.bfloat16),
                                        (Format.BF16, torch.float16)], ids=lambda v: getattr(v, "name", str(v)))
def test_gpu_ws_skip_padding_half_same_bits(wfmt, dtype):
    """A block whose second 64 rows are all padding is computed by one MMA warpgroup
    (``set_ws_skip_padding_half``; 16-bit weights: ``set_ws_skip_padding_half_16bit``, opt-in): the bits of both
    warpgroups running it, at 24-40 rows per expert (every block half empty), ~150 (some), top-1 with the non-local
    group, both GEMMs warp-specialized (16-bit: 64- and 128-column GEMM1 tiles), gated and not, eager and in a CUDA
    graph; within the reference's bound."""
    from fusedmoe.backends.triton_moe import set_ws_skip_padding_half, set_ws_skip_padding_half_16bit

    sixteen = wfmt is Format.BF16
    switch = set_ws_skip_padding_half_16bit if sixteen else set_ws_skip_padding_half
    for act in (Activation.SWIGLU, Activation.RELU2):
        for T, K, seed in ((160, 4, 11), (600, 4, 12), (900, 1, 13)):
            cfg = (bf16_config(act.is_gated, bn=128 if T == 600 else None) if sixteen
                   else moe_config(act.is_gated, gemm2=True))
            H, I = (768, 256) if wfmt is Format.FP8_BLOCK else (704, 192)  # 128 x 128 blocks: whole blocks
            prob = make_problem(T=T, H=H, I=I, I_pad=I, E=16, K=K, act=act, wfmt=wfmt, dtype=dtype,
                                offset=8, E_glob=24 if K > 1 else 32, seed=seed)
            kw = dict(act=act, wfmt=wfmt, dtype=dtype, params=_params(act), offset=8, config=cfg)
            _switch_same_bits(switch, prob, kw, (act, T, K), graph=I if act is Activation.SWIGLU and T == 160 else None)


@gpu
@pytest.mark.parametrize("wfmt", WS_FMTS + [Format.FP8_BLOCK], ids=lambda f: f.name)
def test_gpu_ws_pipelined_promotion_same_bits(wfmt):
    """The pipelined promotion (two partial sets taking turns) gives the bits of the base K loop, switched on for
    every tile (``set_ws_pipelined_promotion``) and by the configs (``KernelConfig.pipelined_promotion``, both GEMMs
    and GEMM2 alone), in the two-set tiles and in the wide one-set tiles (64-column sub-tiles; their base bits are
    the narrow tiles', ``test_gpu_ws_one_part_tiles``): an even and an odd number of K blocks (H 768 / 640: 6 / 5),
    a K tail (H 704; FP8 blocks, whole 128 x 128 blocks: H 896 instead, 7 blocks), one block (GEMM2, I 128), column
    tails, gated and not, both GEMMs warp-specialized, expert parallel, top-1 with the non-local group, eager and in
    a CUDA graph; within the reference's bound. FP8 blocks: against the base loop's per-column scale vectors."""
    from fusedmoe.backends.triton_moe import set_ws_pipelined_promotion

    dtype = torch.bfloat16
    for act in (Activation.SWIGLU, Activation.RELU2):
        cfg = moe_config(act.is_gated, gemm2=True)
        p1, p2 = ws_pipelined(cfg.gemm1, wfmt), ws_pipelined(cfg.gemm2, wfmt)
        w1, w2 = (ws_pipelined(ws_config(act.is_gated, bn=128 if act.is_gated else 256), wfmt),
                  ws_pipelined(ws_config(False, bn=256), wfmt))
        assert None not in (p1, p2, w1, w2), cfg
        shapes = ((600, 4, 768, 192, 21), (600, 4, 640, 128, 22), (900, 1, 704, 192, 23))
        if wfmt is Format.FP8_BLOCK:  # (H and I of whole 128 x 128 blocks)
            shapes = ((600, 4, 768, 256, 21), (600, 4, 640, 128, 22), (900, 1, 896, 384, 23))
        for T, K, H, I, seed in shapes:
            prob = make_problem(T=T, H=H, I=I, I_pad=I, E=16, K=K, act=act, wfmt=wfmt, dtype=dtype,
                                offset=8, E_glob=24 if K > 1 else 32, seed=seed)
            kw = dict(act=act, wfmt=wfmt, dtype=dtype, params=_params(act), offset=8, config=cfg)
            off = _switch_same_bits(set_ws_pipelined_promotion, prob, kw, (act, T, K, H, I),
                                    graph=I if act is Activation.SWIGLU and H == 768 else None)
            for pc in (MoEKernelConfig(p1, p2), MoEKernelConfig(cfg.gemm1, p2), MoEKernelConfig(w1, w2)):
                got = _run_within_bound(prob, tag=(act, T, K, H, I, "config"), **dict(kw, config=pc))
                assert torch.equal(got, off), (act, T, K, H, I, pc)


def _switch_same_bits(setter, prob, kw, tag, *, graph=None):
    """``prob`` run (``_run_within_bound(prob, **kw)``) with ``setter(False)``, then ``setter(True)``:
    both within the bound and the same bits; ``graph`` (the padded intermediate size): the switched-on
    call also replayed twice from a CUDA graph. The setting is restored; returns the switched-off result."""
    prev = setter(False)
    try:
        off = _run_within_bound(prob, tag=(tag, "off"), **kw)
        setter(True)
        on = _run_within_bound(prob, tag=(tag, "on"), **kw)
        assert torch.equal(on, off), tag
        if graph is not None:
            _graph_replay_matches(prob, kw["wfmt"], graph, on, offset=kw.get("offset", 0), replays=2,
                                  config=kw.get("config"))
    finally:
        setter(prev)
    return off


@gpu
def test_gpu_gemm1_amax_same_bits():
    """The dynamic per-tensor scale of the intermediate from GEMM1's epilogue (``set_gemm1_amax``):
    the warp-specialized GEMM1 (with the Triton or the warp-specialized GEMM2) and the Triton one
    give the bits of the zero-filled intermediate and its absmax pass -- non-local experts (rows never
    written), gated and not, prefill and decode token counts, eager and in a CUDA graph."""
    from fusedmoe.backends.triton_moe import set_gemm1_amax

    wfmt, dtype = Format.FP8_TENSOR, torch.bfloat16
    for act in (Activation.SWIGLU, Activation.RELU2):
        for T, cfg in ((300, moe_config(act.is_gated)), (300, moe_config(act.is_gated, gemm2=True)), (300, None),
                       (3, None)):
            prob = make_problem(T=T, H=704, I=192, I_pad=192, E=16, K=4, act=act, wfmt=wfmt, dtype=dtype, offset=8,
                                E_glob=24, static=False, seed=T)
            kw = dict(act=act, wfmt=wfmt, dtype=dtype, params=_params(act), offset=8, config=cfg, static=False)
            _switch_same_bits(set_gemm1_amax, prob, kw, (act, T, cfg), graph=192 if act is Activation.SWIGLU else None)


@gpu
@pytest.mark.parametrize("wfmt", [Format.FP8_TENSOR, Format.FP8_CHANNEL, Format.FP8_BLOCK], ids=lambda f: f.name)
def test_gpu_ws_one_part_tiles(wfmt):
    """FP8 tiles with one promoted partial set for two 128-column halves (2 x 128 gated, 256 non-gated:
    ``_ws_gemm``'s ONE_PART): within the reference's bound and the bits of the 2 x 64 / 128 tiles (every
    output element sums the same K-block partials in the same order; FP8 blocks: the same FMA with one weight
    scale a half as with the narrow tiles' per-column scales) -- gated and not, column tails (N not a multiple
    of the tile), biases, the non-local group, top-1, eager and in a CUDA graph."""
    dtype = torch.bfloat16
    for act in (Activation.SWIGLU, Activation.RELU2):
        gated = act.is_gated
        wide = MoEKernelConfig(ws_config(gated, bn=128 if gated else 256), ws_config(False, bn=256))
        narrow = moe_config(gated, gemm2=True)
        for T, K, H, I in ((600, 4, 768, 256), (300, 1, 640, 384)):  # N = 640 / 384: column tails
            prob = make_problem(T=T, H=H, I=I, I_pad=I, E=16, K=K, act=act, wfmt=wfmt, dtype=dtype, bias=T == 300,
                                offset=8, E_glob=24 if K > 1 else 32, seed=T + K)
            kw = dict(act=act, wfmt=wfmt, dtype=dtype, params=_params(act), offset=8)
            got = _run_within_bound(prob, tag=("wide", T), config=wide, **kw)
            ref = _run_within_bound(prob, tag=("narrow", T), config=narrow, **kw)
            assert torch.equal(got, ref), (act, T, K)
            if act is Activation.SWIGLU and T == 600:
                _graph_replay_matches(prob, wfmt, I, got, offset=8, replays=2, config=wide)


@gpu
def test_gpu_ws_block_scalar_scales_same_bits():
    """FP8 128 x 128 blocks: one weight scale a column group (``set_ws_block_scalar_scales``) gives the bits of the
    per-column scale vectors in the narrow tiles -- gated and not, GEMM1 alone and both GEMMs warp-specialized, a
    padded intermediate (I 192 of 256), a column tail of GEMM2 (H 640), expert parallel, top-1 with the non-local
    group, eager and in a CUDA graph; within the reference's bound."""
    from fusedmoe.backends.triton_moe import set_ws_block_scalar_scales

    wfmt, dtype = Format.FP8_BLOCK, torch.bfloat16
    for act in (Activation.SWIGLU, Activation.RELU2):
        gated = act.is_gated
        for T, K, H, I, I_pad, seed in ((600, 4, 768, 256, 256, 41), (600, 4, 640, 192, 256, 42),
                                        (900, 1, 768, 384, 384, 43)):
            prob = make_problem(T=T, H=H, I=I, I_pad=I_pad, E=16, K=K, act=act, wfmt=wfmt, dtype=dtype, offset=8,
                                E_glob=24 if K > 1 else 32, seed=seed)
            for g2 in (False, True):
                kw = dict(act=act, wfmt=wfmt, dtype=dtype, params=_params(act), offset=8,
                          config=moe_config(gated, gemm2=g2))
                _switch_same_bits(set_ws_block_scalar_scales, prob, kw, (act, T, H, I, g2),
                                  graph=I_pad if act is Activation.SWIGLU and H == 768 and K > 1 and g2 else None)


@gpu
def test_gpu_ws_padded_handoff_same_bits():
    """GEMM1 storing at block-padded rows for a warp-specialized GEMM2 that reads them without a gather
    (``set_ws_padded_handoff``): the bits of the slot-indexed hand-off -- static FP8 per tensor gated and
    not (the wide tiles too), BF16, and with the 1 x 128 group quantization pass between the GEMMs over the
    rows in use (FP8 blocks: GEMM2 reads the scales by padded row), the non-local group, top-1 (GEMM2 writes
    the output), eager and in a CUDA graph; and it is taken exactly where it should be (``_capture``; not
    with per-token scales: slower on the H200)."""
    from fusedmoe.backends.triton_moe import set_ws_padded_handoff

    for wfmt, dtype in ((Format.FP8_TENSOR, torch.bfloat16), (Format.BF16, torch.bfloat16),
                        (Format.FP8_BLOCK, torch.bfloat16)):
        H, I = (768, 256) if wfmt is Format.FP8_BLOCK else (704, 192)  # 128 x 128 blocks: whole blocks
        for act in (Activation.SWIGLU, Activation.RELU2):
            gated = act.is_gated
            cfgs = [bf16_config(gated)] if wfmt is Format.BF16 else [moe_config(gated, gemm2=True)]
            if wfmt is Format.FP8_TENSOR:
                cfgs.append(MoEKernelConfig(ws_config(gated, bn=128 if gated else 256), ws_config(False, bn=256)))
            for cfg in cfgs:
                for T, K, seed in ((600, 4, 31), (300, 1, 32)):
                    prob = make_problem(T=T, H=H, I=I, I_pad=I, E=16, K=K, act=act, wfmt=wfmt, dtype=dtype,
                                        offset=8, E_glob=24 if K > 1 else 32, seed=seed)
                    kw = dict(act=act, wfmt=wfmt, dtype=dtype, params=_params(act), offset=8, config=cfg)
                    _switch_same_bits(set_ws_padded_handoff, prob, kw, (wfmt, act, T, K, cfg.gemm1.block_n),
                                      graph=I if act is Activation.SWIGLU and K > 1 else None)
    # taken with a static FP8 scale and 1 x 128 groups; not with a dynamic per-tensor scale (its pass
    # needs the amax over every row first) nor per-token scales (measured slower)
    for wfmt, static, expect in ((Format.FP8_TENSOR, True, True), (Format.FP8_TENSOR, False, False),
                                 (Format.FP8_CHANNEL, False, False), (Format.FP8_BLOCK, False, True)):
        H, I = (768, 256) if wfmt is Format.FP8_BLOCK else (704, 192)
        prob = make_problem(T=300, H=H, I=I, I_pad=I, E=16, K=4, act=Activation.SWIGLU, wfmt=wfmt,
                            dtype=torch.bfloat16, offset=8, E_glob=24, seed=33)
        cap = {}
        triton_experts(prob["hidden"], prob["q13"], prob["q2"], prob["ids"], prob["tw"], activation=Activation.SWIGLU,
                       act_params=None, act_format=ACT_FMT[wfmt], intermediate_size_padded=I,
                       a1_scale=prob["a1"] if static else None, a2_scale=prob["a2"] if static else None,
                       local_expert_offset=8, config=moe_config(True, gemm2=True), _capture=cap)
        assert cap["padded"] is expect, (wfmt, static)


def _ws_both_configs(wfmt, gated: bool) -> list:
    """Configs with both GEMMs warp-specialized for the same-bits tests of a switch: the default tiles, and for FP8
    per tensor / channel the pipelined and the wide ones."""
    cfgs = [bf16_config(gated)] if wfmt is Format.BF16 else [moe_config(gated, gemm2=True)]
    if wfmt in WS_FMTS:
        cfgs.append(MoEKernelConfig(ws_pipelined(ws_config(gated), wfmt), ws_pipelined(ws_config(False), wfmt)))
        cfgs.append(MoEKernelConfig(ws_config(gated, bn=128 if gated else 256), ws_config(False, bn=256)))
    return cfgs


@gpu
@pytest.mark.parametrize("wfmt", [Format.FP8_TENSOR, Format.FP8_CHANNEL, Format.FP8_BLOCK, Format.BF16],
                         ids=lambda f: f.name)
def test_gpu_ws_x_gather_same_bits(wfmt, monkeypatch):
    """The A rows by cp.async from the unsorted rows (``set_ws_x_gather``): the bits of the gather launch and TMA
    boxes -- both GEMMs warp-specialized (GEMM2 reading the slot rows itself where no padded hand-off runs: per-token
    scales, or the hand-off off), gated and not, half-empty blocks (SKIP_HALF), K not a multiple of the K block (FP8:
    704 = 5.5 x 128), the non-local group, top-1, the pipelined and wide FP8 tiles, eager and in a CUDA graph; within
    the reference's bound; and no gather launch runs for a warp-specialized GEMM with it on. (Ran on an H100 in the
    forty-third session, 4 passed; in the forty-fourth with the loader-fence opt-in, since removed, 4 passed.)"""
    from fusedmoe.backends import triton_moe as tm

    dtype = torch.bfloat16
    real_gather, calls = tm._gather_slot_rows, []

    def counted(*a, **kw):
        calls.append(1)
        return real_gather(*a, **kw)

    monkeypatch.setattr(tm, "_gather_slot_rows", counted)
    H, I = (768, 256) if wfmt is Format.FP8_BLOCK else (704, 192)
    for act in (Activation.SWIGLU, Activation.RELU2):
        gated = act.is_gated
        for cfg in _ws_both_configs(wfmt, gated):
            for T, K, seed, handoff in ((160, 4, 41, True), (600, 4, 42, False), (900, 1, 43, True)):
                prob = make_problem(T=T, H=H, I=I, I_pad=I, E=16, K=K, act=act, wfmt=wfmt, dtype=dtype, offset=8,
                                    E_glob=24 if K > 1 else 32, seed=seed)
                kw = dict(act=act, wfmt=wfmt, dtype=dtype, params=_params(act), offset=8, config=cfg)
                prev = tm.set_ws_padded_handoff(handoff)
                try:
                    calls.clear()
                    _switch_same_bits(tm.set_ws_x_gather, prob, kw, (act, T, K, cfg.gemm1.block_n, handoff),
                                      graph=I if act is Activation.SWIGLU and T == 160 else None)
                finally:
                    tm.set_ws_padded_handoff(prev)
                assert len(calls) >= 1, (act, T)  # the switched-off run gathers (GEMM1 at least)
                prev_xg = tm.set_ws_x_gather(True)
                try:
                    calls.clear()
                    _run_within_bound(prob, tag=(act, T, "on"), **kw)
                finally:
                    tm.set_ws_x_gather(prev_xg)
                assert len(calls) == 0, (act, T, K, handoff, len(calls))  # no gather launch with it on


@gpu
@pytest.mark.parametrize("wfmt", [Format.FP8_TENSOR, Format.FP8_CHANNEL, Format.FP8_BLOCK, Format.BF16],
                         ids=lambda f: f.name)
def test_gpu_ws_dynamic_tiles_same_bits(wfmt):
    """Tiles by a global counter (``set_ws_dynamic_tiles``): the bits of the static tiles -- many tiles a program
    (4000 tokens of 16 local experts: ~8 blocks an expert) and fewer tiles than programs, gated and not, half-empty
    blocks, the non-local group, top-1, the pipelined and wide FP8 tiles, rows by cp.async and by the gather, eager
    (the cached counters left at zero for the next call) and in a CUDA graph; within the reference's bound."""
    from fusedmoe.backends import triton_moe as tm

    dtype = torch.bfloat16
    H, I = (768, 256) if wfmt is Format.FP8_BLOCK else (704, 192)
    for act in (Activation.SWIGLU, Activation.RELU2):
        for cfg in _ws_both_configs(wfmt, act.is_gated):
            for T, K, seed, xg in ((4000, 4, 71, False), (1500, 4, 72, True), (3000, 1, 73, False), (40, 4, 74, True)):
                prob = make_problem(T=T, H=H, I=I, I_pad=I, E=16, K=K, act=act, wfmt=wfmt, dtype=dtype, offset=8,
                                    E_glob=24 if K > 1 else 32, seed=seed)
                kw = dict(act=act, wfmt=wfmt, dtype=dtype, params=_params(act), offset=8, config=cfg)
                prev_xg = tm.set_ws_x_gather(xg)
                try:
                    _switch_same_bits(tm.set_ws_dynamic_tiles, prob, kw, (act, T, K, cfg.gemm1.block_n, xg),
                                      graph=I if act is Activation.SWIGLU and T == 1500 else None)
                finally:
                    tm.set_ws_x_gather(prev_xg)
                assert_dyn_counters_zero()


@contextlib.contextmanager
def _switched_off(setter):
    """An on / off switch of triton_moe: bools only, on by default; the body runs with it off and it
    is restored afterwards."""
    with pytest.raises(TypeError, match="bool"):
        setter(1)
    prev = setter(False)
    try:
        assert prev is True  # the default
        yield
    finally:
        setter(prev)


def test_ws_padded_handoff_switch():
    from fusedmoe.backends.triton_moe import set_ws_padded_handoff

    with _switched_off(set_ws_padded_handoff):
        assert set_ws_padded_handoff(True) is False


def test_ws_skip_padding_half_switch():
    from fusedmoe.backends.triton_moe import (_ws_skips_padding_half, set_ws_skip_padding_half,
                                              set_ws_skip_padding_half_16bit)

    with _switched_off(set_ws_skip_padding_half):
        assert not any(_ws_skips_padding_half(f) for f in Format)
        assert set_ws_skip_padding_half(True) is False
        # FP8 weights skip; 16-bit weights only with their own switch (slower at 8192 tokens on the H200)
        assert all(_ws_skips_padding_half(f) for f in (Format.FP8_TENSOR, Format.FP8_CHANNEL, Format.FP8_BLOCK))
        assert not _ws_skips_padding_half(Format.BF16)
        prev = set_ws_skip_padding_half_16bit(True)
        try:
            assert prev is False and _ws_skips_padding_half(Format.BF16)
            set_ws_skip_padding_half(False)
            assert not _ws_skips_padding_half(Format.BF16)  # the main switch off: nothing skips
        finally:
            set_ws_skip_padding_half_16bit(prev)
            set_ws_skip_padding_half(True)
        with pytest.raises(TypeError):
            set_ws_skip_padding_half_16bit("yes")


@gpu
@pytest.mark.parametrize("act", [Activation.SWIGLU, Activation.RELU2, Activation.GEGLU], ids=lambda a: a.name)
def test_gpu_ws_reciprocal_quant_same_bits(act):
    """The warp-specialized GEMM1's static FP8 re-quantization by reciprocals
    (``set_reciprocal_quant``) gives the bits of its IEEE divisions, eager and in a CUDA graph."""
    from fusedmoe.backends.triton_moe import set_reciprocal_quant

    wfmt, dtype = Format.FP8_TENSOR, torch.bfloat16
    prob = make_problem(T=600, H=704, I=192, I_pad=192, E=16, K=4, act=act, wfmt=wfmt, dtype=dtype, offset=8,
                        E_glob=24, seed=21)
    cfg = moe_config(act.is_gated, gemm2=True)
    kw = dict(act=act, wfmt=wfmt, dtype=dtype, params=_params(act), offset=8, config=cfg)
    _switch_same_bits(set_reciprocal_quant, prob, kw, act, graph=192 if act is Activation.SWIGLU else None)
