"""The warp-specialized FP4 x BF16 prefill GEMMs (``kernels/_ws_fp4.py``; ``KernelConfig.warp_specialized``
with MXFP4 or NVFP4 weights, chosen automatically for MXFP4 prefill tiles on sm_90, for NVFP4 ones from 64 rows an
expert (``set_ws_fp4_nvfp4``).

CPU (CI): every epilogue variant, MXFP4 and NVFP4, compiles for sm_90 with Triton's bundled ptxas as a
warp-specialized kernel (12 warps, register reallocation, wgmma, within Hopper's shared memory, no spills in the K
loop); the config rules; the calls it refuses. GPU (marker ``gpu``): against the reference for gated (SwiGLU,
clamped SwiGLU with biases) and non-gated (ReLU^2, GELU) activations with expert parallelism, MXFP4 and NVFP4,
128- and 256-token tiles, close to the Triton kernels of the same call, the MX fold and the restoring converter bit
for bit, K = 1 with the weight on the input, a CUDA graph, gpt-oss-120b's and Nemotron-3-Nano's (NVFP4 + ReLU^2)
expert shapes.
"""

import dataclasses
import os

import pytest
import torch

from gluon_sm90 import SCRIPT_HEAD, LaunchCapture
from moe_cases import assert_dyn_counters_zero, env_starts
from test_triton_fp4 import Case, make_case, run_reference, run_sm90_script, run_triton
from test_triton_moe import DEV, gpu, interpreter

from fusedmoe.backends import triton_moe
from fusedmoe.backends.kernel_configs import (_WS_SMEM, KernelConfig, MoEKernelConfig, _ws_fp4_fixed_bytes,
                                             _ws_fp4_stage_bytes, warp_specialized_problem, ws_fp4_config,
                                             ws_fp4_stages)
from fusedmoe.config import Activation, ActivationParams, Format

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
A, F = Activation, Format


# ---- CPU: sm_90 compile --------------------------------------------------------------------------

# the compile scripts' head: SCRIPT_HEAD, the kernel module, ``fp4_sig`` -- the kernel's runtime argument types for
# an x box of XT token rows (NV: e4m3 block scales, else UE8M0 bytes) -- and ``fp4_cx``: its constexprs for one tile
# with the launcher's defaults (swizzled values, the MX fold, 4 stages, scales ahead), ``kw`` the options under test
_FP4_HEAD = SCRIPT_HEAD + r'''
from fusedmoe.kernels import _ws_fp4 as k4


def fp4_sig(XT, NV):
    xl = gl.NVMMASharedLayout.get_default_for([XT, 64], gl.bfloat16)
    wl = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=16, rank=2)
    return {"x_desc": f"tensordesc<bf16[{XT}, 64],{xl}>", "w0_desc": f"tensordesc<i16[64, 16],{wl}>",
            "out_ptr": "*bf16", "s_ptr": "*fp8e4nv" if NV else "*u8", "bias_ptr": "*fp32", "topk_w_ptr": "*fp32",
            "sorted_ids_ptr": "*i32", "block_expert_ptr": "*i32", "num_post_padded_ptr": "*i32", "N": "i32",
            "K": "i32", "num_slots": "i32", "R_TILES": "i32", "K_PIECES": "i32", "stride_se": "i32",
            "stride_sr": "i32", "stride_om": "i32", "stride_be": "i32", "act_alpha": "fp32", "act_beta": "fp32",
            "act_limit": "fp32", "gs_ptr": "*fp32", "stride_sk": "i32", "tile_ctr_ptr": "*i32"}


# the JIT's specializations of the scale pointer, its strides and N (16-byte aligned, multiples of 16): what the
# S_SMEM copies need (the launcher checks them: triton_moe._ws_fp4_scales_copyable)
SCALE_ALIGNED = ("s_ptr", "stride_se", "stride_sr", "stride_sk", "N")


def fp4_build(sig, cx, aligned=()):
    """(compiled kernel, its SASS, its shortest K loop) of the FP4 prefill kernel for ``sig`` / ``cx``."""
    k, sass = compile_sm90(k4._ws_fp4_kernel, sig, cx, aligned=aligned)
    return k, sass, k_loop(sass_instructions(sass))


def fp4_cx(ACT, GATED, HB, MRW, TK, CH, NV, JN, **kw):
    return dict(dict(E_LOC=32, ACT=ACT, GATED=GATED, HAS_BIAS=HB, WEIGHT_ON_INPUT=False, MUL_ROUTING_WEIGHT=MRW,
                     ROUND_DTYPE=gl.bfloat16, SWZ=True, FOLD=not NV, BK=64, TK=TK, STAGES=4, GROUP_M=8, CHUNKS=CH,
                     NV=NV, SC_AHEAD=True, JOIN=JN, KS=1), **kw)
'''

_SCRIPT = _FP4_HEAD + r'''
# (ACT, GATED, HAS_BIAS, WEIGHT_ON_INPUT, MUL_ROUTING_WEIGHT, BT, STAGES, FOLD, SWZ, TK, CHUNKS, NV, SC_AHEAD, JOIN)
for ACT, GATED, HB, WOI, MRW, BT, ST, FOLD, SWZ, TK, CH, NV, SCA, JN in (
        (2, True, True, False, False, 128, 4, True, True, 64, 1, False, False, False),  # gpt-oss GEMM1, biases
        (0, True, False, True, False, 256, 4, False, True, 128, 1, False, False, False),  # weight on input, restoring
        (3, False, False, False, False, 256, 4, True, False, 128, 1, False, False, False),  # ReLU2, plain nibbles
        (7, False, True, False, True, 128, 4, True, True, 64, 1, False, False, False),  # GEMM2: bias, weight
        (7, False, False, False, True, 256, 4, True, True, 128, 1, False, True, False),  # GEMM2 256, scales ahead
        (2, True, True, False, False, 256, 4, True, True, 64, 2, False, True, False),  # two 128-row halves
        (7, False, True, False, True, 256, 4, True, True, 64, 2, False, False, False),
        (2, True, True, False, False, 256, 4, True, True, 64, 4, False, False, False),  # 64-row chunks (opt-in)
        (3, False, False, False, False, 256, 4, False, True, 128, 4, True, True, False),
        (3, False, False, False, False, 256, 4, False, True, 128, 1, True, False, False),  # NVFP4 GEMM1, ReLU2
        (2, True, True, False, False, 128, 4, False, True, 64, 1, True, True, False),  # NVFP4 OAI, ahead
        (7, False, False, False, True, 256, 4, False, True, 64, 1, True, False, False),  # NVFP4 GEMM2
        (2, True, True, False, False, 256, 4, True, True, 64, 4, False, True, True),  # chunks joined (the default)
        (3, False, False, False, False, 256, 4, False, True, 128, 4, True, True, True),
        (7, False, True, False, True, 256, 4, True, True, 64, 4, False, False, True)):
    XT = BT // CH  # the x box: a chunk
    sig = fp4_sig(XT, NV)
    cx = fp4_cx(ACT, GATED, HB, MRW, TK, CH, NV, JN, WEIGHT_ON_INPUT=WOI, SWZ=SWZ, FOLD=FOLD, STAGES=ST, SC_AHEAD=SCA)
    k, sass, loop = fp4_build(sig, cx)
    first = lambda op: min([i for i, x in enumerate(loop) if op in x], default=-1)
    print(ACT, GATED, BT, NV, CH, k.metadata.num_warps, sass.count("HGMMA.64x"), sass.count("USETMAXREG"),
          sass.count("LDL") + sass.count("STL"), k.metadata.shared, sass.count("UTMALDG"),
          sass.count("DEPBAR.LE gsb0, 0x0"), SCA, first("LDG.E"), first("SYNCS.PHASECHK"), JN,
          ",".join(sorted(set(re.findall(r"HGMMA\.64x(\d+)x", sass)), key=int)), sep="|", flush=True)
'''


def test_ws_fp4_compiles_for_sm90(tmp_path):
    """Every variant, the 256-token tiles in 2 / 4 chunks (CHUNKS) and NVFP4 weights (NV) too: 12 warps (two
    consumer warpgroups and the loader, rounded up), BF16 wgmma with 64 to 256 tokens, register reallocation, TMA
    loads, within Hopper's 227 KB; at most a few local stores (a 256-token GEMM2 epilogue: 128 accumulators a
    thread); the wgmmas asynchronous -- a full wait (``DEPBAR.LE gsb0, 0x0``) only at the end of a K loop, not
    after every wgmma as where ptxas serializes them (C7515: accumulators of unused chunks kept live did that); the
    block scales loaded in the K loop before its ring wait with ``SC_AHEAD`` (the next step's), after it without."""
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    rows = run_sm90_script(tmp_path, f"ROOT = {ROOT!r}\n" + _SCRIPT)
    assert len(rows) == 15, rows
    for (act, gated, bt, nv, ch, warps, gmma, setmaxnreg, spills, smem, tma, full_waits, ahead, ldg, wait, join,
         widths) in rows:
        where = f"ACT={act} GATED={gated} BT={bt} NV={nv} CHUNKS={ch} SC_AHEAD={ahead} JOIN={join}"
        # the wgmmas' token widths: a chunk's (64-row chunks: 64), or joined chunks' 64 / 128 / 256 (3 as 128 + 64)
        want = {"64", "128", "256"} if join == "True" else {str(int(bt) // int(ch))}
        assert set(widths.split(",")) == want, (where, widths)
        # the K loop's block-scale load: issued before the ring wait when loaded a step ahead, after it otherwise
        assert int(ldg) >= 0 and int(wait) >= 0, (where, ldg, wait)
        assert (int(ldg) < int(wait)) == (ahead == "True"), (where, ldg, wait)
        assert int(warps) == 12, where
        assert int(gmma) > 0 and int(setmaxnreg) > 0 and int(tma) > 0, (where, gmma, setmaxnreg, tma)
        assert int(spills) <= 8, (where, spills)
        assert int(smem) <= 227 * 1024, (where, smem)
        # the launcher's budget (kernel_configs._ws_fp4_fixed_bytes: converted tiles and epilogue scratch besides the
        # ring) is the compiled kernel's shared memory up to its barriers
        need = 4 * _ws_fp4_stage_bytes(int(bt), scales=False) + _ws_fp4_fixed_bytes(gated == "True")
        assert need <= int(smem) <= need + 512, (where, smem, need)
        assert 4 * int(full_waits) <= int(gmma), (where, full_waits, gmma)  # serialized: one a wgmma


_DYN_SCRIPT = _FP4_HEAD + r'''
# (ACT, GATED, HAS_BIAS, MUL_ROUTING_WEIGHT, BT, TK, CHUNKS, NV, JOIN): the defaults' shapes, static and DYN
for ACT, GATED, HB, MRW, BT, TK, CH, NV, JN in ((2, True, True, False, 256, 64, 4, False, True),
                                                (3, False, False, False, 256, 128, 4, True, True),
                                                (7, False, False, True, 128, 64, 1, False, False)):
    XT = BT // CH
    sig = fp4_sig(XT, NV)
    for DYN in (False, True):
        cx = fp4_cx(ACT, GATED, HB, MRW, TK, CH, NV, JN, DYN=DYN)
        k, sass = compile_sm90(k4._ws_fp4_kernel, sig, cx)
        print(ACT, NV, BT, DYN, k.metadata.num_warps, sass.count("LDL") + sass.count("STL"), sass.count("ATOMG.E.ADD"),
              sass.count("MEMBAR.ALL.GPU"), k.metadata.shared, sass.count("HGMMA.64x"), sep="|", flush=True)
'''


def test_ws_fp4_dynamic_tiles_compiles_for_sm90(tmp_path):
    """``DYN`` in the FP4 prefill kernel (``set_ws_dynamic_tiles(True)``; ``_ws_gemm_kernel``'s loader and tile
    queue): the relaxed tile fetches (``ATOMG.E.ADD``: the first, one a tile, the finished count) and one acq_rel
    fence (``MEMBAR.ALL.GPU``) only when on; 12 warps, no spills, the queue's few hundred bytes of shared memory more,
    the same wgmmas."""
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    rows = run_sm90_script(tmp_path, f"ROOT = {ROOT!r}\n" + _DYN_SCRIPT)
    assert len(rows) == 6, rows
    by = {}
    for act, nv, bt, dyn, warps, spills, atomics, membars, shared, gmma in rows:
        on = dyn == "True"
        where = (act, nv, bt, dyn)
        assert int(warps) == 12 and int(spills) == 0, (where, warps, spills)
        assert int(atomics) == (3 if on else 0) and int(membars) == (1 if on else 0), (where, atomics, membars)
        by.setdefault((act, nv, bt), {})[on] = (int(shared), int(gmma))
    for key, v in by.items():
        assert 0 < v[True][0] - v[False][0] <= 512 and v[True][1] == v[False][1], (key, v)


_SS_SCRIPT = _FP4_HEAD + r'''
# (ACT, GATED, HAS_BIAS, MUL_ROUTING_WEIGHT, BT, TK, CHUNKS, NV, JOIN, DYN): MX gated 128 / 256 in 2 chunks, NVFP4
# ReLU^2 in joined chunks with counted tiles, NVFP4 GEMM2
for ACT, GATED, HB, MRW, BT, TK, CH, NV, JN, DYN in ((2, True, True, False, 128, 64, 1, False, False, False),
                                                    (2, True, True, False, 256, 64, 2, False, False, False),
                                                    (3, False, False, False, 256, 128, 4, True, True, True),
                                                    (7, False, False, True, 128, 64, 1, True, False, False)):
    XT = BT // CH
    sig = fp4_sig(XT, NV)
    for SS in (False, True):
        cx = fp4_cx(ACT, GATED, HB, MRW, TK, CH, NV, JN, DYN=DYN, S_SMEM=SS)
        k, sass, loop = fp4_build(sig, cx, SCALE_ALIGNED)
        print(ACT, BT, CH, NV, SS, GATED, k.metadata.num_warps, sass.count("LDL") + sass.count("STL"),
              sass.count("LDGSTS"), sass.count("LDGSTS.E.BYPASS.128"), sum("LDG" in x for x in loop),
              sum("LDS" in x for x in loop), k.metadata.shared, sass.count("HGMMA.64x"), len(loop), sep="|",
              flush=True)
'''


def test_ws_fp4_scales_smem_compiles_for_sm90(tmp_path):
    """``S_SMEM`` in the FP4 prefill kernel (``set_ws_fp4_scales_smem``): the loader warp copies the block scales by
    cp.async (MX 4-byte words, NVFP4 16-byte runs), and the consumers' K loop has no global load left (the scales
    come from shared memory: more ``LDS``) -- without it the loop holds the scales' ``LDG``; 12 warps, no spills, the
    same wgmmas, the scales' ring within the launcher's budget (``_ws_fp4_stage_bytes`` counts it either way)."""
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    rows = run_sm90_script(tmp_path, f"ROOT = {ROOT!r}\n" + _SS_SCRIPT)
    assert len(rows) == 8, rows
    by = {}
    for act, bt, ch, nv, ss, gated, warps, spills, ldgsts, ldgsts16, loop_ldg, loop_lds, smem, gmma, n in rows:
        on, where = ss == "True", (act, bt, ch, nv, ss)
        assert int(warps) == 12 and int(spills) == 0, (where, warps, spills)
        assert (int(ldgsts) > 0) == on and (int(ldgsts16) > 0) == (on and nv == "True"), (where, ldgsts, ldgsts16)
        assert (int(loop_ldg) == 0) == on, (where, loop_ldg)
        need = 4 * _ws_fp4_stage_bytes(int(bt), scales=on) + _ws_fp4_fixed_bytes(gated == "True")
        assert need <= int(smem) <= need + 512, (where, smem, need)
        by.setdefault((act, bt, ch), {})[on] = (int(gmma), int(loop_lds))
    for key, v in by.items():
        assert v[True][0] == v[False][0] and v[True][1] > v[False][1], (key, v)


_ONE_SCRIPT = _FP4_HEAD + r'''
# (ACT, GATED, HAS_BIAS, MUL_ROUTING_WEIGHT, BT, TK, CHUNKS, NV, JOIN, DYN): gated MX 128, gated NVFP4 in joined chunks
# with counted tiles, non-gated NVFP4 (one store either way)
for ACT, GATED, HB, MRW, BT, TK, CH, NV, JN, DYN in ((2, True, True, False, 128, 64, 1, False, False, False),
                                                    (2, True, True, False, 256, 64, 4, True, True, True),
                                                    (3, False, False, False, 256, 128, 4, True, True, False)):
    XT = BT // CH
    sig = fp4_sig(XT, NV)
    for ONE in (False, True):
        cx = fp4_cx(ACT, GATED, HB, MRW, TK, CH, NV, JN, DYN=DYN, ONE_STORE=ONE)
        k, sass, loop = fp4_build(sig, cx)
        print(ACT, BT, NV, GATED, ONE, k.metadata.num_warps, sass.count("LDL") + sass.count("STL"),
              sum("BAR.SYNC" in x for x in loop), sum("STS" in x for x in loop), len(loop), k.metadata.shared,
              sass.count("HGMMA.64x"), sep="|", flush=True)
'''


def test_ws_fp4_one_store_compiles_for_sm90(tmp_path):
    """``ONE_STORE`` (``set_ws_fp4_one_store``): a gated tile's converted gate and up halves stored by one store take
    the warpgroup barrier between the two stores out of every K step (4 -> 3 in the shortest K loop) with the same
    shared-memory stores and the same instruction count within a few; a non-gated tile (one store already) compiles
    the same; 12 warps, no spills, the same wgmmas and shared memory."""
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    rows = run_sm90_script(tmp_path, f"ROOT = {ROOT!r}\n" + _ONE_SCRIPT)
    assert len(rows) == 6, rows
    by = {}
    for act, bt, nv, gated, one, warps, spills, bars, sts, n, smem, gmma in rows:
        assert int(warps) == 12 and int(spills) == 0, (act, bt, nv, one, warps, spills)
        by.setdefault((act, bt, nv, gated), {})[one == "True"] = (int(bars), int(sts), int(n), int(smem), int(gmma))
    for (act, bt, nv, gated), v in by.items():
        (bars0, sts0, n0, smem0, gmma0), (bars1, sts1, n1, smem1, gmma1) = v[False], v[True]
        assert bars1 == bars0 - (1 if gated == "True" else 0), ((act, bt, nv), v)
        assert sts1 == sts0 and abs(n1 - n0) <= 4 and smem1 == smem0 and gmma1 == gmma0, ((act, bt, nv), v)


_KS_SCRIPT = _FP4_HEAD + r'''
# (ACT, GATED, HAS_BIAS, TK, NV, DYN, S_SMEM): 128-token tiles -- gated MX with biases (gpt-oss's GEMM1), non-gated
# NVFP4 with the scales through the ring and counted tiles (Nemotron's), gated NVFP4 with global scale loads
# (and the first in two joined 64-row chunks: set_ws_fp4_join128)
for ACT, GATED, HB, TK, NV, DYN, SS, CH in ((2, True, True, 64, False, False, False, 1),
                                           (3, False, False, 128, True, True, True, 1),
                                           (1, True, False, 64, True, False, False, 1),
                                           (2, True, True, 64, False, True, False, 2)):
    sig = fp4_sig(128 // CH, NV)
    for KS, ST in ((1, 3), (2, 3)):  # (the same stages: the same ring arithmetic)
        cx = fp4_cx(ACT, GATED, HB, False, TK, CH, NV, CH == 2, DYN=DYN, S_SMEM=SS, ONE_STORE=GATED, KS=KS,
                    STAGES=ST)
        k, sass, loop = fp4_build(sig, cx, SCALE_ALIGNED)
        print(ACT, NV, f"{GATED}{CH}", KS, k.metadata.num_warps, sass.count("LDL") + sass.count("STL"),
              sum("BAR.SYNC" in x for x in loop), sum("MEMBAR" in x for x in loop),
              sum("HGMMA.64x" in x for x in loop), len(loop), k.metadata.shared, sep="|", flush=True)
'''


def test_ws_fp4_two_steps_a_slot_compile_for_sm90(tmp_path):
    """``KS`` 2 (``set_ws_fp4_block_k(128)``: two 64-wide K steps a ring slot) for 128-token tiles at 3 stages:
    12 warps, no spills; the shortest K loop holds both steps' wgmmas (8 HGMMA) behind the one-step loop's
    synchronization -- the same warpgroup barriers and one proxy fence a slot (the second step's tiles are their own
    buffer, so no hazard barrier between the steps' stores) -- in at least 30 instructions fewer than two one-step
    loops at the same 3 stages; the
    shared memory within ``ws_fp4_config``'s budget for the tile (``kernel_configs.ws_fp4_stages``: 3 stages)."""
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    rows = run_sm90_script(tmp_path, f"ROOT = {ROOT!r}\n" + _KS_SCRIPT)
    assert len(rows) == 8, rows
    by = {}
    for act, nv, gated, ks, warps, spills, bars, membar, gmma, n, smem in rows:
        assert int(warps) == 12 and int(spills) == 0, (act, nv, ks, warps, spills)
        by.setdefault((act, nv, gated), {})[int(ks)] = (int(bars), int(membar), int(gmma), int(n), int(smem))
    for (act, nv, gated), v in by.items():
        (bars1, mb1, g1, n1, _), (bars2, mb2, g2, n2, smem2) = v[1], v[2]
        assert (g1, g2) == (4, 8) and bars2 == bars1 and mb2 == mb1 == 1, ((act, nv), v)
        assert n2 < 2 * n1 - 30, ((act, nv), v)  # (sm_90, CPU compile, 3 stages: 271-290 against 2 x 157-166)
        g1_ = gated.startswith("True")
        assert ws_fp4_stages(g1_, "gemm1", 128, 128) == 3
        # the launcher's budget is the compiled kernel's shared memory up to its barriers (scales counted where
        # they come through the ring: the non-gated NVFP4 case)
        need = 3 * _ws_fp4_stage_bytes(128, scales=act == "3", block_k=128) + _ws_fp4_fixed_bytes(g1_, 128)
        assert need <= smem2 <= need + 512 and need <= _WS_SMEM, ((act, nv), v, need)


_PAIRS_SCRIPT = _FP4_HEAD + r'''
# (ACT, GATED, HAS_BIAS, BT, TK, CHUNKS, NV, DYN, S_SMEM, KS, STAGES, OUT_PADDED): gated MX with biases, 256-token tiles
# (gpt-oss's GEMM1, on the padded hand-off) and 128-token tiles with two steps a slot; non-gated NVFP4 with the
# scales through the ring (Nemotron's GEMM1 on the padded hand-off, and its GEMM2 with two steps a slot) -- each
# without and with the pair order (OUT_PAIRS where GEMM1 writes the padded hand-off)
for ACT, GATED, HB, BT, TK, CH, NV, DYN, SS, KS, ST, OP in (
        (2, True, True, 256, 64, 4, False, True, False, 1, 4, True),
        (2, True, True, 128, 64, 2, False, False, False, 2, 3, True),
        (3, False, False, 256, 128, 4, True, True, True, 1, 4, True),
        (3, False, False, 128, 128, 2, True, True, True, 2, 3, False)):
    sig = fp4_sig(BT // CH, NV)
    for PAIRS in (False, True):
        cx = fp4_cx(ACT, GATED, HB, False, TK, CH, NV, True, DYN=DYN, S_SMEM=SS, ONE_STORE=GATED, KS=KS, STAGES=ST,
                    OUT_PADDED=OP, PAIRS=PAIRS, OUT_PAIRS=PAIRS and OP)
        k, sass, loop = fp4_build(sig, cx, SCALE_ALIGNED)
        print(ACT, BT, KS, PAIRS, k.metadata.num_warps, sass.count("LDL") + sass.count("STL"),
              sum("PRMT" in x for x in loop), sum("STS" in x for x in loop), sum("HGMMA.64x" in x for x in loop),
              len(loop), k.metadata.shared, sep="|", flush=True)
'''


def test_ws_fp4_pair_order_compiles_for_sm90(tmp_path):
    """``PAIRS`` (``set_ws_fp4_pair_order``, opt-in): the converted weight tiles stored in the pair order as the
    converter's registers come -- the shortest K loop without the byte permutes between the converter and the
    shared-memory stores (16 ``PRMT`` a step fewer; at most 4 a step left, the scale bytes' moves), the same stores and
    wgmmas, at least 12 instructions a step fewer; 12 warps, no spills (GEMM1's ``OUT_PAIRS`` epilogue permutes
    each thread's 8 columns among its registers), within Hopper's 227 KB of shared memory a block; a 4-stage loop at
    most 142 instructions a step (its ring position's division and remainder unsigned)."""
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    rows = run_sm90_script(tmp_path, f"ROOT = {ROOT!r}\n" + _PAIRS_SCRIPT)
    assert len(rows) == 8, rows
    by = {}
    for act, bt, ks, pairs, warps, spills, prmt, sts, gmma, n, smem in rows:
        assert int(warps) == 12 and int(spills) == 0, (act, bt, ks, pairs, warps, spills)
        assert int(smem) <= 227 * 1024, (act, bt, ks, pairs, smem)
        by.setdefault((act, bt, ks), {})[pairs == "True"] = (int(prmt), int(sts), int(gmma), int(n))
    for key, v in by.items():
        (p0, st0, g0, n0), (p1, st1, g1, n1) = v[False], v[True]
        steps = int(key[2])
        assert p1 <= 4 * steps and p0 >= p1 + 16 * steps, (key, v)  # (sm_90: 16-20 -> 0-4 a step)
        assert (st1, g1) == (st0, g0) and n1 <= n0 - 12 * steps, (key, v)  # (156 -> 141 a step, gated 256)
        if steps == 1:  # 4 stages: the ring's position arithmetic unsigned (sm_90: 141 / 136 a step)
            assert n1 <= 142, (key, v)


# ---- CPU: the pair order's hand-off (its gather: test_ws_fp4_dec.test_gather_slot_rows_in_order) ----------


@interpreter
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (the combine of the uncomputed GEMM outputs)
@pytest.mark.parametrize("padded", [True, False], ids=["padded", "gathered"])
@pytest.mark.parametrize("act", [A.SWIGLU, A.RELU2], ids=lambda a: a.name)
def test_ws_fp4_pair_order_hand_off(monkeypatch, padded, act):
    """``triton_experts`` with prefill kernel configs for both GEMMs (the Gluon launches captured, the sm_90 checks
    off): where ``set_ws_fp4_pair_order`` takes the pair order (True; "auto" for the non-gated layer) both GEMMs get
    ``pairs`` and GEMM1 ``out_pairs`` exactly when it writes the padded hand-off (otherwise GEMM2 gathers the
    intermediate in the pair order itself); where not, neither."""
    calls = []
    monkeypatch.setattr(triton_moe, "_ws_check", lambda *a, **k: None)
    monkeypatch.setattr(triton_moe, "_ws_fp4_problem", lambda *a, **k: None)
    monkeypatch.setattr(triton_moe, "_ws_fp4_gemm", lambda c, a, *args, **kw: calls.append((c, kw)))
    c = Case(F.MXFP4, F.BF16, act, T=40, H=128, I=128, E=4, K=2, dtype=torch.bfloat16, seed=5)
    hidden, W, topk = make_case(c, device=DEV)
    cfg = MoEKernelConfig(ws_fp4_config(act.is_gated, "gemm1", 128), ws_fp4_config(False, "gemm2", 128))
    prev_pad = triton_moe.set_ws_fp4_padded(padded)
    try:
        for mode in (True, False, "auto"):
            on = mode is True or (mode == "auto" and not act.is_gated)
            prev = triton_moe.set_ws_fp4_pair_order(mode)
            try:
                calls.clear()
                run_triton(hidden, W, topk, F.BF16, config=cfg)
            finally:
                triton_moe.set_ws_fp4_pair_order(prev)
            (c1, kw1), (c2, kw2) = calls
            assert c1.block_m == c2.block_m == 128
            assert kw1["out_padded"] is padded and kw2["a_padded"] is padded, (mode, kw1, kw2)
            assert (kw1["pairs"], kw1["out_pairs"], kw2["pairs"]) == (on, on and padded, on), (mode, kw1, kw2)
    finally:
        triton_moe.set_ws_fp4_padded(prev_pad)


# ---- CPU: config rules and refusals ----------------------------------------------------------------


def test_ws_fp4_config_rules():
    """The FP4 tile: 64 output columns for a gated GEMM1, 128 otherwise, 64-wide K steps, 128 / 256 token rows;
    other shapes, split-K, swap-AB and K not a multiple of 64 are refused with the reason."""
    for gated, gemm, bn in ((True, "gemm1", 64), (False, "gemm1", 128), (False, "gemm2", 128)):
        for bm in (128, 256):
            c = ws_fp4_config(gated, gemm, bm)
            assert (c.block_m, c.block_n, c.block_k, c.num_warps, c.warp_specialized) == (bm, bn, 64, 4, True)
            assert warp_specialized_problem(c, F.MXFP4, gemm, gated, 2880) is None
            assert warp_specialized_problem(c, F.NVFP4, gemm, gated, 2688) is None
    c = ws_fp4_config(True, "gemm1")
    bad = [(KernelConfig(64, 64, 64, num_warps=4, warp_specialized=True), "block_m"),
           (KernelConfig(128, 64, 32, num_warps=4, warp_specialized=True), "block_k in (64, 128)"),
           (KernelConfig(128, 128, 64, num_warps=4, warp_specialized=True), "block_n 64"),
           (KernelConfig(128, 64, 64, num_warps=8, warp_specialized=True), "num_warps 4"),
           (KernelConfig(128, 64, 64, num_warps=4, num_stages=7, warp_specialized=True), "num_stages"),
           (KernelConfig(128, 64, 64, num_warps=4, split_k=2, warp_specialized=True), "split K"),
           (KernelConfig(128, 64, 64, num_warps=4, swap_ab=True, warp_specialized=True), "swap_ab")]
    for cfg, why in bad:
        msg = warp_specialized_problem(cfg, F.MXFP4, "gemm1", True, 2880)
        assert msg is not None and why in msg, (cfg, msg)
    assert "multiple of 64" in warp_specialized_problem(c, F.MXFP4, "gemm1", True, 2880 + 32)
    with pytest.raises(ValueError, match="block_m"):
        ws_fp4_config(True, "gemm1", 64)
    # stages capped with the epilogue's scratch counted: 256-token tiles fit 4 (5 would need 244 / 228 KB); a config
    # asking more is refused, not launched
    assert [ws_fp4_config(g, gm, 256, 6).num_stages for g, gm in ((True, "gemm1"), (False, "gemm2"))] == [4, 4]
    assert ws_fp4_config(True, "gemm1", 128, 6).num_stages == 6 and ws_fp4_config(True, "gemm1", 256, 1).num_stages == 2
    for gated, gemm in ((True, "gemm1"), (False, "gemm1"), (False, "gemm2")):
        five = dataclasses.replace(ws_fp4_config(gated, gemm, 256), num_stages=5)
        assert 5 * _ws_fp4_stage_bytes(256) + _ws_fp4_fixed_bytes(gated and gemm == "gemm1") > _WS_SMEM
        assert "use at most 4 stages" in warp_specialized_problem(five, F.MXFP4, gemm, gated, 2880)
    prev = triton_moe.set_ws_fp4(True)
    try:
        assert triton_moe.set_ws_fp4(False, 256) == prev
        assert triton_moe.set_ws_fp4(True) == (False, 256)
        with pytest.raises(ValueError, match="block_m"):
            triton_moe.set_ws_fp4(True, 64)
        with pytest.raises(TypeError):
            triton_moe.set_ws_fp4("yes")
        # defaults since the thirty-second session: chunks by format (0), the padded hand-off, NVFP4 from 64 rows
        assert triton_moe._WS_FP4["chunks"] == 0 and triton_moe.WS_FP4_AUTO_CHUNKS == {F.MXFP4: 2, F.NVFP4: 1}
        assert triton_moe.set_ws_fp4_skip_half(True) is True  # (0, by format, counts as set)
        assert triton_moe.set_ws_fp4_skip_half(False) is True
        assert triton_moe.set_ws_fp4_skip_half(False) is False
        with pytest.raises(TypeError):
            triton_moe.set_ws_fp4_skip_half(1)
        assert triton_moe.set_ws_fp4_padded(False) is True
        assert triton_moe.set_ws_fp4_padded(True) is False
        assert triton_moe.set_ws_fp4_chunks(4) == 1
        assert triton_moe.set_ws_fp4_skip_half(False) is True and triton_moe.set_ws_fp4_chunks(0) == 1
        for bad in (3, 8, -1, True):
            with pytest.raises(ValueError, match="chunks"):
                triton_moe.set_ws_fp4_chunks(bad)
        assert triton_moe._WS_FP4["nvfp4_min_rows"] == triton_moe.WS_NVFP4_MIN_ROWS_PER_EXPERT == 0
        assert triton_moe.set_ws_fp4_nvfp4(False) is True
        assert triton_moe.set_ws_fp4_nvfp4(True, 64) is False and triton_moe._WS_FP4["nvfp4_min_rows"] == 64
        assert triton_moe.set_ws_fp4_nvfp4(True) is True and triton_moe._WS_FP4["nvfp4_min_rows"] == 0
        with pytest.raises(TypeError):
            triton_moe.set_ws_fp4_nvfp4("on")
        with pytest.raises(ValueError, match="min_rows"):
            triton_moe.set_ws_fp4_nvfp4(True, -1)
    finally:
        triton_moe.set_ws_fp4(*prev)


@pytest.mark.parametrize("name,env,default", [
    ("set_ws_fp4_scales_ahead", "FUSEDMOE_WS_FP4_SC_AHEAD", True),  # the default since the forty-first session
    ("set_ws_fp4_join", "FUSEDMOE_WS_FP4_JOIN", True),  # since the forty-second
    ("set_ws_fp4_one_store", "FUSEDMOE_WS_FP4_ONESTORE", True),  # since the fifty-ninth
    ("set_ws_fp4_join128", "FUSEDMOE_WS_FP4_JOIN128", True)])  # since the sixtieth
def test_ws_fp4_switches(name, env, default):
    """The FP4 prefill kernel's on / off switches: their defaults, the environment variable that starts a process
    with either setting, the setters taking a bool only and returning the previous setting."""
    setter = getattr(triton_moe, name)
    prev = setter(default)
    try:
        assert setter(not default) is default
        assert setter(default) is (not default)
        with pytest.raises(TypeError):
            setter(1)
    finally:
        setter(prev)
    env_starts(name, env, {"0": False, "1": True, "": default})


def test_ws_fp4_scales_smem_switch_and_rule():
    """``set_ws_fp4_scales_smem``: "auto" by default (since the fifty-ninth session), True or False, nothing else;
    ``FUSEDMOE_WS_FP4_SSMEM=1`` / ``0`` start a process forced on / off. "auto" takes the block scales through the
    ring for NVFP4 weights only (``WS_FP4_SSMEM_AUTO_FORMATS``: the H100's A/B), True for both FP4 formats."""
    from test_ws_gemm import _check_mode_switch

    _check_mode_switch(triton_moe.set_ws_fp4_scales_smem, "FUSEDMOE_WS_FP4_SSMEM")
    assert triton_moe.WS_FP4_SSMEM_AUTO_FORMATS == (Format.NVFP4,)
    for mode, want in (("auto", {Format.NVFP4}), (True, {Format.NVFP4, Format.MXFP4}), (False, set())):
        prev = triton_moe.set_ws_fp4_scales_smem(mode)
        try:
            assert {f for f in (Format.MXFP4, Format.NVFP4) if triton_moe._ws_fp4_ssmem(f)} == want, mode
        finally:
            triton_moe.set_ws_fp4_scales_smem(prev)


def test_ws_fp4_pair_order_switch_and_rule():
    """``set_ws_fp4_pair_order``: "auto" by default (since the sixty-first session), True or False, nothing else;
    ``FUSEDMOE_WS_FP4_PAIRS=1`` / ``0`` start a process forced on / off. "auto" takes the pair order for non-gated
    layers only (the H100's A/B: Nemotron's ReLU^2 1.01-1.04x, gpt-oss-120b's clamped SwiGLU 0.97-1.02x)."""
    from test_ws_gemm import _check_mode_switch

    _check_mode_switch(triton_moe.set_ws_fp4_pair_order, "FUSEDMOE_WS_FP4_PAIRS")
    for mode, want in (("auto", {False}), (True, {True, False}), (False, set())):
        prev = triton_moe.set_ws_fp4_pair_order(mode)
        try:
            assert {g for g in (True, False) if triton_moe._ws_fp4_pairs(g)} == want, mode
        finally:
            triton_moe.set_ws_fp4_pair_order(prev)


def test_ws_fp4_block_k_config_switch_and_rule(monkeypatch):
    """``block_k`` 128 (two 64-wide K steps a ring slot; ``set_ws_fp4_block_k``, the default since the sixtieth
    session): 128-token tiles at 3 stages for every GEMM kind -- 256-token ones do not fit 2 stages and are refused
    by ``ws_fp4_config`` (so ``auto_ws_fp4`` keeps 64 for them), and with 64 ``auto_ws_fp4`` takes 64 everywhere;
    the setter takes 64 / 128 only and returns the previous value; ``FUSEDMOE_WS_FP4_BK`` starts a process with
    either (128 unset) and refuses others."""
    import subprocess
    import sys

    for gated, gemm in ((True, "gemm1"), (False, "gemm1"), (False, "gemm2")):
        c = ws_fp4_config(gated, gemm, 128, block_k=128)
        assert (c.block_k, c.num_stages) == (128, 3) == (128, ws_fp4_stages(gated, gemm, 128, 128))
        assert warp_specialized_problem(c, F.MXFP4, gemm, gated, 2880) is None
        more = dataclasses.replace(c, num_stages=4)
        assert "use at most 3 stages" in warp_specialized_problem(more, F.MXFP4, gemm, gated, 2880)
        assert ws_fp4_stages(gated, gemm, 256, 128) == 0
        with pytest.raises(ValueError, match="does not fit"):
            ws_fp4_config(gated, gemm, 256, block_k=128)
        wide = dataclasses.replace(ws_fp4_config(gated, gemm, 256), block_k=128, num_stages=2)
        assert "stages" in warp_specialized_problem(wide, F.MXFP4, gemm, gated, 2880)
    # (two sets of double-buffered tiles and 2 stages of 256-token slots would not fit; single-buffered ones did, and
    # ran 0.82-0.94x one step a slot on the H100: removed, sixty-first session)
    for g in (True, False):
        assert 2 * _ws_fp4_stage_bytes(256, block_k=128) + _ws_fp4_fixed_bytes(g, 128) > _WS_SMEM
    with pytest.raises(ValueError, match="block_k"):
        ws_fp4_config(True, "gemm1", 128, block_k=256)
    assert triton_moe.set_ws_fp4_block_k(128) == 128  # (the default)
    try:
        for bad in (96, 256, True, "128"):
            with pytest.raises(ValueError, match="64 or 128"):
                triton_moe.set_ws_fp4_block_k(bad)
        # the rule: 128-token tiles take it for both GEMMs, 256-token ones keep 64
        c = Case(F.MXFP4, F.BF16, A.SWIGLU, T=4, H=128, I=64, E=4, K=2, dtype=torch.bfloat16)
        _, W, _ = make_case(c, device="cpu")
        monkeypatch.setattr(triton_moe, "_cuda_major", lambda index: 9)
        pre = MoEKernelConfig(KernelConfig(128, 64, 64, swap_ab=True), KernelConfig(128, 128, 64, swap_ab=True))
        for tokens, bm, bk, setting in ((100, 128, 128, 128), (400, 256, 64, 128), (100, 128, 64, 64)):
            triton_moe.set_ws_fp4_block_k(setting)  # (50 / 200 rows an expert)
            got = triton_moe.auto_ws_fp4(pre, W.w13, W.w2, F.BF16, torch.bfloat16, torch.device("cuda", 0), tokens,
                                         2, A.SWIGLU)
            assert (got.block_m, got.gemm1.block_k, got.gemm2.block_k) == (bm, bk, bk), (tokens, setting)
            assert got.gemm1 == ws_fp4_config(True, "gemm1", bm, block_k=bk)
    finally:
        triton_moe.set_ws_fp4_block_k(64)
        assert triton_moe.set_ws_fp4_block_k(128) == 64
    code = "from fusedmoe.backends import triton_moe as tm; print(tm.set_ws_fp4_block_k(64))"
    for val, want in (("128", "128"), ("64", "64"), ("", "128")):
        env = {**os.environ, "FUSEDMOE_WS_FP4_BK": val} if val else {k: v for k, v in os.environ.items()
                                                                       if k != "FUSEDMOE_WS_FP4_BK"}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
        assert out.stdout.strip() == want, (val, out.stdout)
    bad = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "FUSEDMOE_WS_FP4_BK": "96"})
    assert bad.returncode != 0 and "FUSEDMOE_WS_FP4_BK must be 64 or 128" in bad.stderr


def test_ws_fp4_refused_where_it_cannot_run():
    """An explicit FP4 warp-specialized config on the CPU (interpreter or not), with MXFP8 activations, or for
    one GEMM only: a ValueError that says why -- never a silent fallback or a wrong launch."""
    c = Case(F.MXFP4, F.BF16, A.SWIGLU, T=4, H=128, I=64, E=2, K=1, dtype=torch.bfloat16)
    hidden, W, topk = make_case(c, device="cpu")
    ws = MoEKernelConfig(ws_fp4_config(True, "gemm1"), ws_fp4_config(False, "gemm2"))
    with pytest.raises(ValueError, match="sm_90|Gluon|TRITON_INTERPRET"):
        run_triton(hidden, W, topk, F.BF16, config=ws)
    w13, w2 = W.w13, W.w2
    why = triton_moe._ws_fp4_problem(w13, w2, F.MXFP8, torch.bfloat16, torch.device("cuda"), False, 128, 64)
    assert why is not None and "BF16 activations" in why
    why = triton_moe._ws_fp4_problem(w13, w2, F.BF16, torch.bfloat16, torch.device("cuda"), False, 128, 96)
    assert why is not None and "multiples of 64" in why


def test_ws_fp4_scale_layouts(monkeypatch):
    """The kernel reads MX scales row-major and NVFP4 scales K-major (``ExpertWeights``' layouts); the other layout,
    or NVFP4 weights with FP8 activations (W4A8), is refused with the reason."""
    monkeypatch.setattr(triton_moe, "_cuda_major", lambda index: 9)
    cuda = torch.device("cuda", 0)
    for fmt, other in ((F.MXFP4, "k_major"), (F.NVFP4, "row_major")):
        c = Case(fmt, F.BF16, A.SWIGLU, T=4, H=128, I=64, E=2, K=1, dtype=torch.bfloat16)
        _, W, _ = make_case(c, device="cpu")
        assert W.w13.value_tile_k == 128 and W.w2.value_tile_k == 64
        assert triton_moe._ws_fp4_problem(W.w13, W.w2, F.BF16, torch.bfloat16, cuda, False, 128, 64) is None
        if other == "k_major":
            w13 = W.w13.k_major_scales()
        else:
            s = W.w13.scale.contiguous()
            assert s.stride(2) == 1
            w13 = dataclasses.replace(W.w13, scale=s)
        why = triton_moe._ws_fp4_problem(w13, W.w2, F.BF16, torch.bfloat16, cuda, False, 128, 64)
        assert why is not None and ("K-major NVFP4" if fmt is F.NVFP4 else "row-major MX") in why, why
    why = triton_moe._ws_fp4_problem(W.w13, W.w2, F.FP8_TENSOR, torch.bfloat16, cuda, False, 128, 64)
    assert why is not None and "BF16 activations" in why


def test_auto_ws_fp4_rule(monkeypatch):
    """What a call without a config runs (``auto_ws_fp4``; ``fusedmoe bench`` records and passes the same): the FP4
    tiles for both GEMMs where the chosen config has prefill tiles (block_m >= 128), with 256 token rows from 64
    rows per local expert with the joined chunks (the default), from 128 without; the chosen config otherwise --
    decode tiles, MXFP8 activations, fp16 hidden states, the interpreter, an atomic combine, another GPU generation,
    the switch off."""
    c = Case(F.MXFP4, F.BF16, A.SWIGLU, T=4, H=128, I=64, E=4, K=2, dtype=torch.bfloat16)
    _, W, _ = make_case(c, device="cpu")
    cuda = torch.device("cuda", 0)
    major = {"v": 9}
    monkeypatch.setattr(triton_moe, "_cuda_major", lambda index: major["v"])
    pre = MoEKernelConfig(KernelConfig(128, 64, 64, swap_ab=True), KernelConfig(128, 128, 64, swap_ab=True))
    dec = MoEKernelConfig(KernelConfig(64, 64, 64, swap_ab=True), KernelConfig(64, 128, 64, swap_ab=True))

    def auto(cfg, tokens, act_format=F.BF16, dtype=torch.bfloat16, interp=False, act=A.SWIGLU):
        return triton_moe.auto_ws_fp4(cfg, W.w13, W.w2, act_format, dtype, cuda, tokens, 2, act, interp)

    prev = triton_moe.set_ws_fp4(True)
    prev_join = triton_moe.set_ws_fp4_join(True)
    try:
        assert auto(pre, 126).block_m == 128 and auto(pre, 128).block_m == 256  # 63 / 64 rows an expert
        triton_moe.set_ws_fp4_join(False)
        got = auto(pre, 200)  # 100 rows an expert; 128-token tiles take two K steps a slot (the default)
        assert got.gemm1 == ws_fp4_config(True, "gemm1", 128, block_k=128)
        assert got.gemm2 == ws_fp4_config(False, "gemm2", 128, block_k=128)
        assert auto(pre, 256).block_m == 256  # 128 rows an expert
        assert auto(pre, 256, act=A.RELU2).gemm1 == ws_fp4_config(False, "gemm1", 256)
        atomic = MoEKernelConfig(pre.gemm1, pre.gemm2, atomic_combine=True)
        for unchanged in (auto(dec, 4096), auto(pre, 256, act_format=F.MXFP8), auto(pre, 256, dtype=torch.float16),
                          auto(pre, 256, interp=True), auto(atomic, 256)):
            assert unchanged in (dec, pre, atomic) and not unchanged.gemm1.warp_specialized
        assert triton_moe.auto_ws_fp4(pre, W.w13, W.w2, F.BF16, torch.bfloat16, torch.device("cpu"), 256, 2,
                                      A.SWIGLU) is pre
        major["v"] = 10
        assert auto(pre, 256) is pre
        major["v"] = 9
        triton_moe.set_ws_fp4(True, 128)
        assert auto(pre, 4096).block_m == 128
        triton_moe.set_ws_fp4(False)
        assert auto(pre, 4096) is pre
        # smaller Triton tiles: the prefill kernel from set_ws_fp4_min_rows' rows per local expert (opt-in)
        triton_moe.set_ws_fp4(True)
        rows16 = 16 * W.w13.shape[0] // 2  # tokens of 16 rows an expert (top_k 2)
        assert triton_moe._WS_FP4["min_rows"] == 0 and auto(dec, rows16) is dec
        mr_prev = triton_moe.set_ws_fp4_min_rows(16)
        try:
            got = auto(dec, rows16)
            assert got.block_m == 128 and got.gemm1 == ws_fp4_config(
                True, "gemm1", 128, block_k=triton_moe._WS_FP4["block_k"])
            assert got.gemm2 == ws_fp4_config(False, "gemm2", 128, block_k=triton_moe._WS_FP4["block_k"])
            assert auto(dec, rows16 - 1) is dec  # one row an expert short
            assert auto(pre, 4096).block_m == 256  # prefill tiles: the rule as before
        finally:
            triton_moe.set_ws_fp4_min_rows(mr_prev)
        for bad in (-1, True, 2.0):
            with pytest.raises(ValueError, match="rows"):
                triton_moe.set_ws_fp4_min_rows(bad)
        assert triton_moe._env_min_rows("24") == 24
        for bad in ("-1", "x", ""):
            with pytest.raises(ValueError, match="FUSEDMOE_WS_FP4_MIN_ROWS"):
                triton_moe._env_min_rows(bad)
        # NVFP4 weights: under the switch (on by default), at every prefill tile as MXFP4, or from a threshold
        _, Wn, _ = make_case(dataclasses.replace(c, wfmt=F.NVFP4), device="cpu")
        nv_prev = triton_moe.set_ws_fp4_nvfp4(False)
        try:
            assert triton_moe.auto_ws_fp4(pre, Wn.w13, Wn.w2, F.BF16, torch.bfloat16, cuda, 256, 2, A.SWIGLU) is pre
            triton_moe.set_ws_fp4_nvfp4(True)
            E = Wn.w13.shape[0]
            got = triton_moe.auto_ws_fp4(pre, Wn.w13, Wn.w2, F.BF16, torch.bfloat16, cuda, 256, 2, A.SWIGLU)
            assert 256 * 2 / E >= 64 and got.gemm1 == ws_fp4_config(True, "gemm1", 256)
            few = 64 * E // 2 - 1  # one row an expert short of 64
            # the default: 48 rows an expert (prefill tiles from there) take the kernel, as MXFP4 does
            assert few * 2 / E < 64 and triton_moe.auto_ws_fp4(
                pre, Wn.w13, Wn.w2, F.BF16, torch.bfloat16, cuda, few, 2, A.SWIGLU).gemm1 == ws_fp4_config(
                    True, "gemm1", 128, block_k=triton_moe._WS_FP4["block_k"])
            triton_moe.set_ws_fp4_nvfp4(True, 64)  # a threshold: from 64 rows an expert
            assert triton_moe.auto_ws_fp4(pre, Wn.w13, Wn.w2, F.BF16, torch.bfloat16, cuda, few, 2, A.SWIGLU) is pre
            assert triton_moe.auto_ws_fp4(pre, Wn.w13, Wn.w2, F.BF16, torch.bfloat16, cuda, few + 1, 2,
                                          A.SWIGLU).gemm1.warp_specialized
            assert triton_moe.auto_ws_fp4(pre, Wn.w13, Wn.w2, F.FP8_TENSOR, torch.bfloat16, cuda, 256, 2,
                                          A.SWIGLU) is pre  # W4A8: the Triton kernels
        finally:
            triton_moe.set_ws_fp4_nvfp4(nv_prev)
    finally:
        triton_moe.set_ws_fp4(*prev)
        triton_moe.set_ws_fp4_join(prev_join)


# ---- GPU ------------------------------------------------------------------------------------------


def _ws_call(hidden, W, topk, *, offset=0, woi=False, block_m=0, cap=None):
    """The layer with the automatic choice (prefill tiles -> the FP4 kernel; NVFP4 weights at any rows an expert),
    asserting that it was taken."""
    cap = {} if cap is None else cap
    prev = triton_moe.set_ws_fp4(True, block_m)
    nv_prev = triton_moe.set_ws_fp4_nvfp4(True, 0)
    try:
        out = run_triton(hidden, W, topk, F.BF16, offset=offset, woi=woi, capture=cap)
    finally:
        triton_moe.set_ws_fp4(*prev)
        triton_moe.set_ws_fp4_nvfp4(nv_prev)
    cfg = cap["config"]
    assert cfg.gemm1.warp_specialized and cfg.gemm2.warp_specialized, cfg
    assert block_m == 0 or cfg.block_m == block_m, cfg
    return out


def _ep_case(act, fmt, T: int, seed: int):
    """A small expert-parallel case (8 local experts, 2-9 of 12; top 4; clamped SwiGLU with biases and the
    small-shape parameters) -> (case, hidden, weights, topk)."""
    c = Case(fmt, F.BF16, act, T=T, H=576, I=384, E=8, K=4, offset=2, bias=act is A.SWIGLU_OAI,
             dtype=torch.bfloat16, params=OAI_SMALL if act is A.SWIGLU_OAI else None, seed=seed)
    return (c, *make_case(c))


def _ep_check(c, out, hidden, W, topk, where) -> None:
    """``out`` of :func:`_ep_case`'s case within the reference's bound."""
    ref = run_reference(hidden, W, topk, F.BF16, offset=2, E_glob=c.E_glob)
    assert _rel(out, ref) <= 2e-2, where


def _triton_call(hidden, W, topk, *, offset=0, woi=False):
    prev = triton_moe.set_ws_fp4(False)
    try:
        return run_triton(hidden, W, topk, F.BF16, offset=offset, woi=woi)
    finally:
        triton_moe.set_ws_fp4(*prev)


def _rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


OAI_SMALL = ActivationParams(alpha=1.702, beta=1.0, limit=0.5)  # both clamps reached at test scale



@pytest.mark.parametrize("fmt,gated,chunks,padded,join", [
    (Format.MXFP4, True, 1, False, False), (Format.NVFP4, False, 4, True, False), (Format.MXFP4, False, 0, True, False),
    (Format.NVFP4, True, 0, False, False), (Format.MXFP4, True, 2, True, True), (Format.NVFP4, False, 0, False, True)])
def test_ws_fp4_launch_binds_every_argument(monkeypatch, fmt, gated, chunks, padded, join):
    """``triton_moe._ws_fp4_gemm``'s prefill launch (GEMM2 reading GEMM1's padded rows: no gather) bound to the
    kernel's signature: the TMA boxes (a chunk's token rows of 64, 64 weight rows of 16 words), the scale strides
    (MX row-major, NVFP4 K-major) and NVFP4's global scales, the constexprs (CHUNKS, NV, OUT_PADDED) and the
    persistent grid -- a count or order slip fails; the block scales through the ring by format ("auto": NVFP4) or
    forced; for the gated cases GEMM1's launch too, its halves by one store unless switched off."""
    import inspect

    from fusedmoe.kernels import _ws_fp4 as k4

    sig = inspect.signature(k4._ws_fp4_kernel.fn)
    cap = LaunchCapture()
    monkeypatch.setattr(k4, "_ws_fp4_kernel", cap)
    c = Case(fmt, Format.BF16, Activation.SWIGLU if gated else Activation.RELU2, T=3, H=512, I=256, E=4, K=2,
             dtype=torch.bfloat16)
    _, W, _ = make_case(c, device="cpu")
    w = W.w2
    NB, TK, BM = 3, 6, 256
    N, Kd = 512, W.padded_intermediate_size
    rows = torch.zeros(NB * BM, Kd, dtype=torch.bfloat16)
    al = triton_moe.AlignResult(torch.zeros(NB * BM, dtype=torch.int32), torch.zeros(NB, dtype=torch.int32),
                                torch.zeros(1, dtype=torch.int32), BM, NB)
    out = torch.empty(NB * BM if padded else TK, N, dtype=torch.bfloat16)
    tw = torch.ones(TK)
    cfg = ws_fp4_config(False, "gemm2", BM)
    prev = triton_moe.set_ws_fp4_chunks(chunks)
    ahead = fmt is Format.NVFP4  # (the switch, either way)
    prev_ahead = triton_moe.set_ws_fp4_scales_ahead(ahead)
    prev_join = triton_moe.set_ws_fp4_join(join)

    def launch(E=4):
        triton_moe._ws_fp4_gemm(cfg, rows, w, tw, False, tw, al, out, N, 1, TK, E, 7, False,
                                triton_moe._DEFAULT_ACT_PARAMS, None, False, True, 132, 0, tw, tw, a_padded=True,
                                out_padded=padded)
        args, kw = cap.calls[-1][1:]
        assert kw.pop("num_warps") == 4
        return sig.bind(*args, **kw).arguments

    try:
        b = launch()
    finally:
        triton_moe.set_ws_fp4_chunks(prev)
        triton_moe.set_ws_fp4_scales_ahead(prev_ahead)
        triton_moe.set_ws_fp4_join(prev_join)
    (grid, _, _), = cap.calls
    tk = w.value_tile_k
    chunks = 4 if join else chunks or triton_moe.WS_FP4_AUTO_CHUNKS[fmt]  # 0: by format (the default); join: 4
    assert grid == (min(NB * (N // 128), 132),)
    assert [b[n].block_shape for n in ("x_desc", "w0_desc")] == [[BM // chunks, 64], [64, 16]]
    assert b["x_desc"].base.data_ptr() == rows.data_ptr() and b["w0_desc"].base.data_ptr() == w.data.data_ptr()
    assert (b["out_ptr"], b["s_ptr"], b["topk_w_ptr"]) == (out, w.scale, tw)
    assert b["gs_ptr"] is (w.global_scale if fmt is Format.NVFP4 else tw)
    assert (b["N"], b["K"], b["num_slots"], b["R_TILES"], b["K_PIECES"]) == (N, Kd, TK, w.shape[-2] // 64, Kd // tk)
    assert (b["stride_se"], b["stride_sr"], b["stride_sk"]) == tuple(w.scale.stride())
    assert (b["stride_om"], b["stride_be"]) == (N, 0)
    assert (b["CHUNKS"], b["NV"], b["OUT_PADDED"], b["MUL_ROUTING_WEIGHT"], b["TK"]) == (chunks, fmt is Format.NVFP4,
                                                                                        padded, True, tk)
    assert b["SC_AHEAD"] is ahead and b["JOIN"] is join and b["KS"] == 1 and b["BK"] == 64
    # the scales through the ring: by default ("auto") NVFP4's; the one store: gated tiles only (this is GEMM2's)
    assert triton_moe._ws_fp4_scales_copyable(w, N)  # ExpertWeights' layouts
    assert b["S_SMEM"] is (fmt is Format.NVFP4) and b["ONE_STORE"] is False
    assert b["PAIRS"] is False and b["OUT_PAIRS"] is False  # (the pair order: opt-in, by the layer's argument)
    for mode in (True, False):
        prev_ss = triton_moe.set_ws_fp4_scales_smem(mode)
        try:
            assert launch()["S_SMEM"] is mode, mode
        finally:
            triton_moe.set_ws_fp4_scales_smem(prev_ss)
    if gated:  # GEMM1 of the gated layer: one store of its tiles' halves by default, two with the switch off
        w13, N13 = W.w13, W.padded_intermediate_size

        def launch1():
            triton_moe._ws_fp4_gemm(ws_fp4_config(True, "gemm1", BM), torch.zeros(NB * BM, 512, dtype=torch.bfloat16),
                                    w13, tw, False, tw, al, torch.empty(TK, N13, dtype=torch.bfloat16), N13, 1, TK, 4,
                                    triton_moe._ACT_CODE[Activation.SWIGLU], True, triton_moe._DEFAULT_ACT_PARAMS,
                                    None, False, False, 132, 0, tw, tw, a_padded=True)
            args, kw = cap.calls[-1][1:]
            kw.pop("num_warps")
            return sig.bind(*args, **kw).arguments

        assert launch1()["ONE_STORE"] is True and launch1()["GATED"] is True
        # the pair order: GEMM1 writing the padded hand-off in it, its input gathered in it
        triton_moe._ws_fp4_gemm(ws_fp4_config(True, "gemm1", BM), torch.zeros(NB * BM, 512, dtype=torch.bfloat16),
                                w13, tw, False, tw, al, torch.empty(NB * BM, N13, dtype=torch.bfloat16), N13, 1, TK, 4,
                                triton_moe._ACT_CODE[Activation.SWIGLU], True, triton_moe._DEFAULT_ACT_PARAMS,
                                None, False, False, 132, 0, tw, tw, a_padded=True, out_padded=True, pairs=True,
                                out_pairs=True)
        args, kw = cap.calls[-1][1:]
        kw.pop("num_warps")
        b1 = sig.bind(*args, **kw).arguments
        assert (b1["PAIRS"], b1["OUT_PAIRS"], b1["OUT_PADDED"]) == (True, True, True)
        prev_one = triton_moe.set_ws_fp4_one_store(False)
        try:
            assert launch1()["ONE_STORE"] is False
        finally:
            triton_moe.set_ws_fp4_one_store(prev_one)
    assert b["DYN"] is False and b["tile_ctr_ptr"] is al.num_post_padded  # "auto" with 4 local experts (< 64): static
    cfg = dataclasses.replace(cfg, block_k=128)  # two K steps a ring slot: 128-token tiles only
    with pytest.raises(ValueError, match="128-token tiles only"):
        launch()
    wide, cfg = cfg, ws_fp4_config(False, "gemm2", 128, block_k=128)
    b2 = launch()  # KS 2, the 64-wide boxes unchanged
    assert b2["KS"] == 2 and b2["BK"] == 64 and b2["w0_desc"].block_shape == [64, 16] and b2["STAGES"] == 3
    cfg = dataclasses.replace(wide, block_k=64)

    def launch_pairs(c, **kw):
        triton_moe._ws_fp4_gemm(c, rows, w, tw, False, tw, al, out, N, 1, TK, 4, 7, False,
                                triton_moe._DEFAULT_ACT_PARAMS, None, False, True, 132, 0, tw, tw, a_padded=True,
                                out_padded=padded, **kw)
        args, kw = cap.calls[-1][1:]
        kw.pop("num_warps")
        return sig.bind(*args, **kw).arguments

    bp = launch_pairs(cfg, pairs=True)
    assert bp["PAIRS"] is True and bp["OUT_PAIRS"] is False
    with pytest.raises(ValueError, match="decode kernel"):  # the pair order is the prefill kernel's
        launch_pairs(dataclasses.replace(cfg, block_m=16), pairs=True)
    if not padded:  # GEMM1's output in the pair order is the padded hand-off's
        with pytest.raises(ValueError, match="out_padded"):
            launch_pairs(cfg, pairs=True, out_pairs=True)
    # the tiles by a global counter: "auto" from 64 local experts (FP4 too since the forty-sixth session), forced on
    for E, mode in ((64, "auto"), (4, True)):
        prev_dyn = triton_moe.set_ws_dynamic_tiles(mode)
        try:
            b = launch(E)
        finally:
            triton_moe.set_ws_dynamic_tiles(prev_dyn)
        ctr = b["tile_ctr_ptr"]
        assert b["DYN"] is True and ctr.dtype == torch.int32 and ctr.tolist() == [0, 0], (E, mode)

@gpu
@pytest.mark.parametrize("fmt", [F.MXFP4, F.NVFP4], ids=lambda f: f.name)
@pytest.mark.parametrize("act", [A.SWIGLU_OAI, A.SWIGLU, A.RELU2, A.GELU], ids=lambda a: a.name)
def test_gpu_ws_fp4_matches_reference(act, fmt):
    """MXFP4 / NVFP4 x BF16 at prefill (768 tokens, 8 of 12 experts local, 384 rows an expert on average): the FP4
    warp-specialized GEMMs with 128- and 256-token tiles within 2e-2 of the reference and within 4e-3 RMS of the
    Triton kernels of the same call; clamped SwiGLU with biases on both GEMMs."""
    c = Case(fmt, F.BF16, act, T=768, H=576, I=384, E=8, K=4, offset=2, bias=act is A.SWIGLU_OAI,
             dtype=torch.bfloat16, params=OAI_SMALL if act is A.SWIGLU_OAI else None, seed=11)
    hidden, W, topk = make_case(c)
    assert W.w13.value_tile_k == 64 and W.w2.value_tile_k == 128  # H = 576 = 9 x 64, I = 384 = 3 x 128
    ref = run_reference(hidden, W, topk, F.BF16, offset=2, E_glob=c.E_glob)
    base = _triton_call(hidden, W, topk, offset=2)
    for bm in (128, 256):
        got = _ws_call(hidden, W, topk, offset=2, block_m=bm)
        assert torch.isfinite(got).all()
        assert _rel(got, ref) <= 2e-2, (bm, _rel(got, ref))
        assert _rel(got, base) <= 4e-3, (bm, _rel(got, base))


@gpu
@pytest.mark.parametrize("fmt", [F.MXFP4, F.NVFP4], ids=lambda f: f.name)
@pytest.mark.parametrize("act", [A.SWIGLU_OAI, A.RELU2], ids=lambda a: a.name)
def test_gpu_ws_fp4_min_rows(act, fmt):
    """``set_ws_fp4_min_rows``: a call whose config has small Triton tiles (48 tokens x top 4 over 12 experts, 8
    local: 16 rows an expert) runs the FP4 prefill kernel's 128-token tiles from 16 rows an expert -- within 2e-2 of
    the reference and 4e-3 RMS of the Triton kernels' result of the same call."""
    c = Case(fmt, F.BF16, act, T=48, H=576, I=384, E=8, K=4, offset=2, bias=act is A.SWIGLU_OAI,
             dtype=torch.bfloat16, params=OAI_SMALL if act is A.SWIGLU_OAI else None, seed=13)
    hidden, W, topk = make_case(c)
    ref = run_reference(hidden, W, topk, F.BF16, offset=2, E_glob=c.E_glob)
    cap = {}
    base = run_triton(hidden, W, topk, F.BF16, offset=2, capture=cap)
    assert cap["config"].block_m < 128 and not cap["config"].gemm1.warp_specialized, cap["config"]
    prev = triton_moe.set_ws_fp4_min_rows(1)
    try:
        cap = {}
        got = run_triton(hidden, W, topk, F.BF16, offset=2, capture=cap)
    finally:
        triton_moe.set_ws_fp4_min_rows(prev)
    cfg = cap["config"]
    assert cfg.block_m == 128 and cfg.gemm1.warp_specialized and cfg.gemm2.warp_specialized, cfg
    assert torch.isfinite(got).all()
    assert _rel(got, ref) <= 2e-2, _rel(got, ref)
    assert _rel(got, base) <= 4e-3, _rel(got, base)


@gpu
def test_gpu_ws_fp4_fold_same_bits_and_graph():
    """The MX fold (the converter's 2^126 moved to the scale and the accumulator) gives the bits of the restoring
    converter; a CUDA graph of the call replays to the eager bits on new inputs, twice -- with static tiles and with
    tiles by a global counter (``set_ws_dynamic_tiles(True)``: the graph's own zeroed counter pair, which each replay
    must leave at zero for the next)."""
    c = Case(F.MXFP4, F.BF16, A.SWIGLU, T=512, H=512, I=256, E=4, K=2, dtype=torch.bfloat16, seed=12)
    hidden, W, topk = make_case(c)
    assert triton_moe._mx_fold_cvt(W.w13, True) == 2
    folded = _ws_call(hidden, W, topk)
    prev = triton_moe.set_mx_fold(False)
    try:
        restored = _ws_call(hidden, W, topk)
    finally:
        triton_moe.set_mx_fold(prev)
    assert torch.equal(folded, restored)
    static = hidden.clone()
    for dyn in (False, True):
        prev_dyn = triton_moe.set_ws_dynamic_tiles(dyn)
        try:
            _ws_call(static, W, topk)  # compile outside the capture
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                out = run_triton(static, W, topk, F.BF16)
            for rep in range(2):
                h2 = torch.randn_like(hidden)
                static.copy_(h2)
                g.replay()
                torch.cuda.synchronize()
                assert torch.equal(out, _ws_call(h2, W, topk)), (dyn, rep)
        finally:
            triton_moe.set_ws_dynamic_tiles(prev_dyn)


@gpu
@pytest.mark.parametrize("fmt,chunks", [(F.MXFP4, 2), (F.MXFP4, 4), (F.MXFP4, "join"), (F.NVFP4, "join")],
                         ids=lambda v: getattr(v, "name", str(v)))
@pytest.mark.parametrize("act", [A.SWIGLU_OAI, A.RELU2], ids=lambda a: a.name)
def test_gpu_ws_fp4_chunks_same_bits(act, fmt, chunks):
    """The 256-token tiles in 2 / 4 chunks (``set_ws_fp4_chunks``; MXFP4's default 2; a block multiplies and loads
    only the chunks that hold real rows), or in 64-row chunks joined into wgmmas as wide as the real rows
    (``set_ws_fp4_join``: 64, 128, 128 + 64 or 256 token rows), give the bits of the whole tiles: each token row's
    sum runs over the same K steps in the same order. 130 / 300 / 560 / 700 tokens (top 4 over 8 of 12 experts:
    ~43 / 100 / 187 / 233 rows an expert) make blocks of one to four 64-row chunks; expert parallelism; within the
    reference's bound."""
    join = chunks == "join"
    for T in (130, 300, 560, 700):
        c, hidden, W, topk = _ep_case(act, fmt, T, 23 if join else 15)
        prev = triton_moe.set_ws_fp4_chunks(1)
        prev_join = triton_moe.set_ws_fp4_join(False)
        try:
            whole = _ws_call(hidden, W, topk, offset=2, block_m=256)
            if join:
                triton_moe.set_ws_fp4_join(True)
            else:
                triton_moe.set_ws_fp4_chunks(chunks)
            chunked = _ws_call(hidden, W, topk, offset=2, block_m=256)
        finally:
            triton_moe.set_ws_fp4_chunks(prev)
            triton_moe.set_ws_fp4_join(prev_join)
        assert torch.equal(chunked, whole), T
        _ep_check(c, chunked, hidden, W, topk, T)


def _switch_same_bits(act, fmt, setter, cases, seed: int, repeats: int = 1, after=None) -> None:
    """For each (tokens, block_m) of ``cases`` (:func:`_ep_case`): the layer with ``setter(False)``, then ``repeats``
    times with ``setter(True)`` -- the same bits each time, within the reference's bound; the setting restored;
    ``after()`` once a case."""
    for T, bm in cases:
        c, hidden, W, topk = _ep_case(act, fmt, T, seed)
        prev = setter(False)
        try:
            off = _ws_call(hidden, W, topk, offset=2, block_m=bm)
            setter(True)
            ons = [_ws_call(hidden, W, topk, offset=2, block_m=bm) for _ in range(repeats)]
        finally:
            setter(prev)
        for on in ons:
            assert torch.equal(on, off), (T, bm)
        if after is not None:
            after()
        _ep_check(c, ons[0], hidden, W, topk, (T, bm))


@gpu
@pytest.mark.parametrize("fmt", [F.MXFP4, F.NVFP4], ids=lambda f: f.name)
@pytest.mark.parametrize("act", [A.SWIGLU_OAI, A.RELU2], ids=lambda a: a.name)
def test_gpu_ws_fp4_scales_ahead_same_bits(act, fmt):
    """The block scales loaded a K step ahead (``set_ws_fp4_scales_ahead``) give the bits of the in-step loads: the
    same values multiply the same products. 128- and 256-token tiles (whole and in chunks), gated with biases and
    non-gated, expert parallelism; within the reference's bound."""
    _switch_same_bits(act, fmt, triton_moe.set_ws_fp4_scales_ahead, ((300, 128), (560, 256)), 19)


@gpu
@pytest.mark.parametrize("fmt", [F.MXFP4, F.NVFP4], ids=lambda f: f.name)
@pytest.mark.parametrize("act", [A.SWIGLU_OAI, A.RELU2], ids=lambda a: a.name)
def test_gpu_ws_fp4_dynamic_tiles_same_bits(act, fmt):
    """Tiles by a global counter (``set_ws_dynamic_tiles(True)``) give the bits of the static tiles: the same tiles,
    the same arithmetic. 128- and 256-token tiles (the 256-token ones in joined chunks), fewer tiles than programs
    (300 tokens) and several a program (3000: ~1500 rows an expert), gated with biases and non-gated, expert
    parallelism; twice with it on (the second with the counters the first left), the cached counters left at zero;
    within the reference's bound."""
    _switch_same_bits(act, fmt, triton_moe.set_ws_dynamic_tiles, ((300, 128), (3000, 128), (3000, 256)), 29,
                      repeats=2, after=assert_dyn_counters_zero)


@gpu
@pytest.mark.parametrize("fmt", [F.MXFP4, F.NVFP4], ids=lambda f: f.name)
@pytest.mark.parametrize("act", [A.SWIGLU_OAI, A.RELU2], ids=lambda a: a.name)
def test_gpu_ws_fp4_scales_smem_same_bits(act, fmt):
    """The block scales through the ring (``set_ws_fp4_scales_smem``) give the bits of the consumers' global loads a
    step ahead: the same scales multiply the same values. 128-token tiles (fewer tiles than programs, and several a
    program with counted tiles) and 256-token tiles in joined chunks; gated with biases and non-gated; GEMM2's last
    column tile half past N (H = 576: the rows past N read other rows' scales, never stored); expert parallelism;
    within the reference's bound."""
    _switch_same_bits(act, fmt, triton_moe.set_ws_fp4_scales_smem, ((300, 128), (3000, 128), (560, 256)), 43)


@gpu
@pytest.mark.parametrize("fmt", [F.MXFP4, F.NVFP4], ids=lambda f: f.name)
def test_gpu_ws_fp4_one_store_same_bits(fmt):
    """A gated tile's halves stored by one store (``set_ws_fp4_one_store``) give the bits of the two stores: the same
    values at the same places of the wgmma's tile. Clamped SwiGLU with biases, 128- and 256-token tiles (joined
    chunks), static and counted tiles, expert parallelism; within the reference's bound."""
    _switch_same_bits(A.SWIGLU_OAI, fmt, triton_moe.set_ws_fp4_one_store, ((300, 128), (3000, 128), (560, 256)), 47)


@gpu
@pytest.mark.parametrize("fmt", [F.MXFP4, F.NVFP4], ids=lambda f: f.name)
@pytest.mark.parametrize("act", [A.SWIGLU_OAI, A.RELU2], ids=lambda a: a.name)
def test_gpu_ws_fp4_two_steps_a_slot_same_bits(act, fmt):
    """Two 64-wide K steps a ring slot (``set_ws_fp4_block_k(128)``, the default for 128-token tiles) give the bits
    of one step a slot: each accumulator's wgmmas run over the same K steps in the same order, and an odd step
    count's step past K (GEMM1's K = 576: 9 steps; GEMM2's K = 320: 5) adds products of TMA-zeroed inputs, which
    changes no sum.
    Fewer tiles than programs (300 tokens), several a program (3000), counted tiles, expert parallelism; within the
    reference's bound; the configs that ran had block_k 128. With the tiles in two joined 64-row chunks too
    (``set_ws_fp4_join128``: 38-375 rows an expert, so blocks of one and two chunks)."""
    for T, I, dyn in ((300, 384, False), (3000, 384, True), (700, 320, False)):
        c = Case(fmt, F.BF16, act, T=T, H=576, I=I, E=8, K=4, offset=2, bias=act is A.SWIGLU_OAI,
                 dtype=torch.bfloat16, params=OAI_SMALL if act is A.SWIGLU_OAI else None, seed=53)
        hidden, W, topk = make_case(c)
        prev_dyn = triton_moe.set_ws_dynamic_tiles(dyn)
        prev = triton_moe.set_ws_fp4_block_k(64)
        prev_j = triton_moe.set_ws_fp4_join128(False)
        try:
            one = _ws_call(hidden, W, topk, offset=2, block_m=128)
            triton_moe.set_ws_fp4_block_k(128)
            cap = {}
            two = _ws_call(hidden, W, topk, offset=2, block_m=128, cap=cap)
            triton_moe.set_ws_fp4_join128(True)  # and in two joined 64-row chunks (the defaults)
            joined = _ws_call(hidden, W, topk, offset=2, block_m=128)
        finally:
            triton_moe.set_ws_dynamic_tiles(prev_dyn)
            triton_moe.set_ws_fp4_block_k(prev)
            triton_moe.set_ws_fp4_join128(prev_j)
        cfg = cap["config"]
        assert (cfg.gemm1.block_k, cfg.gemm2.block_k, cfg.gemm1.num_stages) == (128, 128, 3), cfg
        assert torch.equal(two, one) and torch.equal(joined, one), (T, I)
        _ep_check(c, two, hidden, W, topk, (T, I))


@gpu
@pytest.mark.parametrize("fmt", [F.MXFP4, F.NVFP4], ids=lambda f: f.name)
@pytest.mark.parametrize("act", [A.SWIGLU_OAI, A.RELU2], ids=lambda a: a.name)
def test_gpu_ws_fp4_pair_order(act, fmt):
    """Both GEMMs' K in the pair order (``set_ws_fp4_pair_order``): the same products, added in another order only
    inside a wgmma's 16-wide K step -- within 2e-3 of the layer in K order (a few last-bit differences of the rounded
    intermediate at most) and within the reference's bound. 128-token tiles with two steps a slot (fewer tiles than
    programs; several a program with counted tiles) and 256-token tiles in joined chunks, on the padded hand-off
    (GEMM1's epilogue writes the pair order) and the gathered one (GEMM2's gather does); gated with biases and
    non-gated; expert parallelism."""
    for T, bm in ((300, 128), (3000, 128), (560, 256)):
        c, hidden, W, topk = _ep_case(act, fmt, T, 61)
        prev_d = triton_moe.set_ws_dynamic_tiles(T > 1000)
        try:
            for handoff in (True, False):
                prev_h = triton_moe.set_ws_padded_handoff(handoff)
                prev = triton_moe.set_ws_fp4_pair_order(False)
                try:
                    k_order = _ws_call(hidden, W, topk, offset=2, block_m=bm)
                    triton_moe.set_ws_fp4_pair_order(True)
                    cap = {}
                    pairs = _ws_call(hidden, W, topk, offset=2, block_m=bm, cap=cap)
                finally:
                    triton_moe.set_ws_fp4_pair_order(prev)
                    triton_moe.set_ws_padded_handoff(prev_h)
                assert cap["padded"] is handoff and cap["pairs"] is True, (T, bm, handoff)
                assert torch.isfinite(pairs).all() and _rel(pairs, k_order) <= 2e-3, (T, bm, handoff,
                                                                                     _rel(pairs, k_order))
                _ep_check(c, pairs, hidden, W, topk, (T, bm, handoff))
        finally:
            triton_moe.set_ws_dynamic_tiles(prev_d)


@gpu
@pytest.mark.parametrize("fmt", [F.MXFP4, F.NVFP4], ids=lambda f: f.name)
def test_gpu_ws_fp4_padded_handoff_same_bits(fmt):
    """GEMM1 storing its rows at their block-padded positions and GEMM2 reading them without a gather (the default
    ``set_ws_fp4_padded``, under ``set_ws_padded_handoff``) gives the bits of the gathered hand-off, with whole
    256-token tiles and in 64-row chunks (the chunks past a block's real rows never written nor read)."""
    c = Case(fmt, F.BF16, A.SWIGLU_OAI, T=560, H=576, I=384, E=8, K=4, offset=2, bias=True, dtype=torch.bfloat16,
             params=OAI_SMALL, seed=17)
    hidden, W, topk = make_case(c)
    prev_pad = triton_moe.set_ws_fp4_padded(True)
    for chunks in (1, 4):
        prev_ch = triton_moe.set_ws_fp4_chunks(chunks)
        try:
            cap = {}
            padded = _ws_call(hidden, W, topk, offset=2, block_m=256, cap=cap)
            assert cap["padded"]
            prev = triton_moe.set_ws_padded_handoff(False)
            try:
                cap = {}
                gathered = _ws_call(hidden, W, topk, offset=2, block_m=256, cap=cap)
                assert not cap["padded"]
            finally:
                triton_moe.set_ws_padded_handoff(prev)
        finally:
            triton_moe.set_ws_fp4_chunks(prev_ch)
        assert torch.equal(padded, gathered), chunks
    triton_moe.set_ws_fp4_padded(False)
    try:
        cap = {}
        _ws_call(hidden, W, topk, offset=2, block_m=256, cap=cap)
        assert not cap["padded"]  # the switch turns it off
    finally:
        triton_moe.set_ws_fp4_padded(prev_pad)
    cap = {}
    _ws_call(hidden, W, topk, offset=2, block_m=256, cap=cap)
    assert cap["padded"]  # the default


@gpu
def test_gpu_ws_fp4_top1_weight_on_input():
    """K = 1 with the routing weight on the input (Llama4): GEMM2 writes the output directly; within the
    reference's bound, with non-local tokens (their rows zero)."""
    c = Case(F.MXFP4, F.BF16, A.SWIGLU, T=640, H=512, I=256, E=4, K=1, offset=1, dtype=torch.bfloat16, seed=13)
    hidden, W, topk = make_case(c)
    got = _ws_call(hidden, W, topk, offset=1, woi=True)
    ref = run_reference(hidden, W, topk, F.BF16, offset=1, E_glob=c.E_glob, woi=True)
    assert _rel(got, ref) <= 2e-2


@gpu
def test_gpu_ws_fp4_gpt_oss_shape():
    """gpt-oss-120b's expert shape (H = I = 2880: 64-column value tiles, 45 K steps; clamped SwiGLU with biases),
    2048 tokens over 32 experts: within the reference's bound and close to the Triton kernels."""
    c = Case(F.MXFP4, F.BF16, A.SWIGLU_OAI, T=2048, H=2880, I=2880, E=32, K=4, bias=True, dtype=torch.bfloat16,
             seed=14)
    hidden, W, topk = make_case(c)
    got = _ws_call(hidden, W, topk)
    ref = run_reference(hidden, W, topk, F.BF16)
    assert _rel(got, ref) <= 2e-2
    assert _rel(got, _triton_call(hidden, W, topk)) <= 4e-3


@gpu
def test_gpu_ws_fp4_nemotron_nano_nvfp4_relu2():
    """Nemotron-3-Nano's NVFP4 + ReLU^2 expert shape (H = 2688, I = 1856 padded to 1920: 128-column value tiles,
    the padding's scales and values zero), 1536 tokens over 16
    experts, top 6, with 256-token tiles: within the reference's bound and close to the Triton kernels."""
    c = Case(F.NVFP4, F.BF16, A.RELU2, T=1536, H=2688, I=1856, E=16, K=6, dtype=torch.bfloat16, seed=16)
    hidden, W, topk = make_case(c)
    assert W.padded_intermediate_size == 1920 and W.w13.value_tile_k == W.w2.value_tile_k == 128
    assert W.w13.scale.stride(1) == 1 and W.w2.scale.stride(1) == 1  # K-major
    got = _ws_call(hidden, W, topk, block_m=256)
    ref = run_reference(hidden, W, topk, F.BF16)
    assert _rel(got, ref) <= 2e-2
    assert _rel(got, _triton_call(hidden, W, topk)) <= 4e-3

