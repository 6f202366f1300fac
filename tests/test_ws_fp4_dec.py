"""The FP4 decode GEMMs (``kernels/_ws_fp4_dec.py``; OPT-IN: ``set_ws_fp4_decode`` / ``FUSEDMOE_WS_FP4_DECODE=1``,
twenty-ninth session; run on the H200 since the thirty-first. GEMM1's token rows by cp.async from the align
launch's dot-order copy of hidden: thirty-third session, compiled for sm_90 only until the GPU tests here run).

CPU (CI): every variant compiles for sm_90 with the weights as the wgmma's register operand, no BF16 tile through
shared memory in the K loop, asynchronous wgmmas (ptxas did not serialize them), no spills, three programs within
an SM's shared memory, the token rows by TMA or by cp.async (with its barrier arrival and proxy fence); the
dot-order gather and the align launch's dot-order copy against ``dot64_cols`` (interpreter); the kernel's index
math mirrored in torch on ExpertWeights' layouts, for both token-row sources (mutations of the mirror's dot order,
scale index or cp.async row fail it); the config rules, the split-K rule, the switch, the automatic choice and the
forward's hand-over of the dot-order rows. GPU (marker ``gpu``): against the reference and the Triton kernels for
MXFP4 / NVFP4 x gated (clamped SwiGLU with biases) / non-gated (ReLU^2), split-K 1 / 2 / 4, expert parallelism,
blocks of more and fewer than 8 real rows (the loader's two token boxes), the same bits with the token rows by
cp.async and by the gather launch, K = 1 with the weight on the input, the same bits on repeated calls and in a
CUDA graph, gpt-oss-120b's and Nemotron-3-Nano's shapes at one and eight tokens.
"""

import dataclasses
import os

import pytest
import torch

from gluon_sm90 import SCRIPT_HEAD, LaunchCapture
from test_triton_fp4 import Case, make_case, run_reference, run_sm90_script, run_triton
from test_triton_moe import DEV, gpu, interpreter
from test_ws_fp4 import OAI_SMALL, _rel

from fusedmoe.backends import triton_moe
from fusedmoe.backends.kernel_configs import (KernelConfig, MoEKernelConfig, warp_specialized_problem,
                                              ws_fp4_dec_config, ws_fp4_dec_stage_bytes, WS_DEC_FIXED_SMEM)
from fusedmoe.config import Activation, Format

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
A, F = Activation, Format


# ---- CPU: sm_90 compile --------------------------------------------------------------------------

_SCRIPT = SCRIPT_HEAD + r'''
from fusedmoe.kernels import _ws_fp4_dec as kd
# ACT, GATED, HAS_BIAS, WEIGHT_ON_INPUT, MUL_ROUTING_WEIGHT, FOLD, NV, TK, STAGES, SPLIT, KB, maxnreg, X_GATHER,
# S_SMEM (the block scales through the ring; 2: and T_RELEASE, every consumer thread frees the ring slots), EARLY_W,
# M_STATIC
for ACT, GATED, HB, WOI, MRW, FOLD, NV, TK, ST, SPLIT, KB, mr, XG, SS, EW, MS in (
        (2, True, True, False, False, True, False, 64, 8, 2, 2, 80, 0, 0, 0, 0),     # gpt-oss GEMM1, split 2, 3 an SM
        (3, False, False, False, False, False, True, 128, 8, 1, 2, 80, 0, 0, 0, 0),  # NVFP4 ReLU2 GEMM1
        (7, False, True, False, True, True, False, 64, 8, 4, 2, 80, 0, 0, 0, 0),     # GEMM2: bias, routing w., split 4
        (0, True, False, True, False, False, False, 128, 4, 1, 1, 128, 0, 0, 0, 0),  # weight on input, restoring, bk64
        (7, False, False, False, True, False, True, 64, 8, 2, 2, 80, 0, 0, 0, 0),    # NVFP4 GEMM2
        # GEMM1's token rows by cp.async from the align launch's dot-order copy of hidden (no gather launch)
        (2, True, True, False, False, True, False, 64, 8, 2, 2, 80, 4, 0, 0, 0),     # gpt-oss GEMM1, top_k 4
        (3, False, False, False, False, False, True, 128, 8, 1, 2, 80, 22, 0, 0, 0), # Nemotron-3-Super NVFP4 GEMM1
        (0, True, False, True, False, False, False, 128, 4, 1, 1, 128, 1, 0, 0, 0),  # top 1, weight on input, bk 64
        # 4 programs an SM: 64 registers a thread, the 6 stages of 128 K values that fit
        (2, True, True, False, False, True, False, 64, 6, 2, 2, 64, 4, 0, 0, 0),     # gpt-oss GEMM1, cp.async rows
        (7, False, False, False, True, False, True, 64, 6, 4, 2, 64, 0, 0, 0, 0),    # NVFP4 GEMM2, split 4
        # the block scales through the ring (MX words / NVFP4 8-byte runs), with and without cp.async token rows
        (2, True, True, False, False, True, False, 64, 8, 2, 2, 80, 4, 1, 0, 0),     # gpt-oss GEMM1
        (3, False, False, False, False, False, True, 128, 8, 1, 2, 80, 22, 1, 0, 0), # NVFP4 ReLU2 GEMM1
        (7, False, True, False, True, True, False, 64, 6, 4, 2, 64, 0, 1, 0, 0),     # MX GEMM2 (TMA rows), 4 an SM
        (0, True, False, True, False, False, True, 128, 4, 1, 1, 128, 1, 1, 0, 0),   # NVFP4, bk 64, top 1
        (2, True, True, False, False, True, False, 64, 8, 2, 2, 80, 4, 2, 0, 0),     # gpt-oss GEMM1, all three options
        (7, False, False, False, True, False, True, 64, 6, 4, 2, 64, 0, 2, 0, 0),    # NVFP4 GEMM2, 4 an SM
        # GEMM2's first steps' weights before its grid wait (EARLY_W, the default with the TMA token rows)
        (7, False, False, False, True, False, True, 64, 6, 4, 2, 64, 0, 2, 1, 0),  # NVFP4 GEMM2, 4 an SM
        (7, False, True, False, True, True, False, 64, 6, 4, 2, 64, 0, 1, 1, 0),  # MX GEMM2 (TMA rows), 4 an SM
        # the units over the align's block bound (M_STATIC): GEMM1 with cp.async rows, GEMM2 with the early weights
        (2, True, True, False, False, True, False, 64, 8, 2, 2, 80, 4, 2, 0, 1),  # gpt-oss GEMM1
        (7, False, False, False, True, False, True, 64, 6, 4, 2, 64, 0, 2, 1, 1),  # NVFP4 GEMM2, 4 an SM
        # the switch's 4-step ring (the default since the fifty-third session), without and with the bound
        (2, True, True, False, False, True, False, 64, 4, 1, 2, 80, 4, 2, 0, 0),  # gpt-oss GEMM1 at one token
        (2, True, True, False, False, True, False, 64, 4, 1, 2, 80, 4, 2, 0, 1)):
    xl = gl.NVMMASharedLayout.get_default_for([16, 64], gl.bfloat16)
    wl = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=16, rank=2)
    sig = {"x_desc": f"tensordesc<bf16[16, 64],{xl}>", "x8_desc": f"tensordesc<bf16[8, 64],{xl}>",
           "w_desc": f"tensordesc<i16[32, 16],{wl}>",
           "out_ptr": "*bf16", "s_ptr": "*fp8e4nv" if NV else "*u8", "gs_ptr": "*fp32", "bias_ptr": "*fp32",
           "topk_w_ptr": "*fp32", "sorted_ids_ptr": "*i32", "block_expert_ptr": "*i32", "num_post_padded_ptr": "*i32",
           "part_ptr": "*fp32", "cnt_ptr": "*i32", "x_ptr": "*bf16", "N": "i32", "n_k": "i32", "n64": "i32",
           "num_n": "i32", "num_slots": "i32", "R_TILES": "i32", "K_PIECES": "i32", "stride_se": "i32",
           "stride_sr": "i32", "stride_sk": "i32", "stride_om": "i32", "stride_be": "i32", "stride_x": "i32",
           "act_alpha": "fp32", "act_beta": "fp32", "act_limit": "fp32", "max_m": "i32"}
    cx = dict(E_LOC=32, ACT=ACT, GATED=GATED, HAS_BIAS=HB, WEIGHT_ON_INPUT=WOI, MUL_ROUTING_WEIGHT=MRW,
              ROUND_DTYPE=gl.bfloat16, SWZ=True, FOLD=FOLD, NV=NV, TK=TK, STAGES=ST, SPLIT=SPLIT, KB=KB,
              OUT_PADDED_DOT=not MRW,  # GEMM1: stores GEMM2's rows (padded positions, dot order)
              USE_GDC=SPLIT == 4 or EW == 1,  # programmatic dependent launch
              X_GATHER=XG > 0, TOP_K=max(XG, 1), S_SMEM=SS > 0, T_RELEASE=SS == 2, EARLY_W=EW == 1,
              M_STATIC=MS == 1)
    # (16-byte aligned arguments specialized as the JIT does; the launcher checks the scales' for S_SMEM)
    k, sass = compile_sm90(kd._ws_fp4_dec_kernel, sig, cx, maxnreg=mr,
                           aligned=(("x_ptr", "stride_x") if XG else ())
                           + (("s_ptr", "stride_se", "stride_sr", "stride_sk", "N") if SS else ()))
    ins = sass_instructions(sass)
    loop = k_loop(ins, "HGMMA")  # the K loop
    hg = [x for x in loop if "HGMMA" in x]
    print(ACT, NV, SPLIT, KB, mr, k.metadata.num_warps, k.metadata.shared, len(loop), len(hg),
          int(all(re.search(r"HGMMA[^,]*, R[0-9]+, gdesc", x) for x in hg)),
          sum("DEPBAR.LE gsb0, 0x0" in x for x in loop), sum(x.startswith("STS") for x in loop),
          sum(("LDL" in x) or ("STL" in x) for _, x in ins), int(SPLIT == 4 or EW == 1),
          sum(("ACQBULK" in x) or ("PREEXIT" in x) for _, x in ins), XG, sum("LDGSTS" in x for _, x in ins),
          sum("UTMALDG" in x for _, x in ins), sum("ARRIVES.LDGSTSBAR" in x for _, x in ins),
          sum("FENCE.VIEW.ASYNC.S" in x for x in loop), ST, SS, sum(bool(re.search(r"(^|\s)LDG\.", x)) for x in loop),
          sum("BAR.SYNC" in x for x in loop), EW, MS, sum(("LDL" in x) or ("STL" in x) for x in loop), sep="|",
          flush=True)
'''


def test_ws_fp4_dec_compiles_for_sm90(tmp_path):
    """Every variant: 8 warps (the consumer warpgroup, the loader warp, padding), 4 HGMMAs per 64-wide K block with
    the A operand in registers, none serialized (no ``DEPBAR.LE gsb0, 0x0`` in the K loop: ptxas keeps them
    asynchronous only while each block's A registers stay untouched until its wgmma retired), no shared-memory
    stores in the K loop (no BF16 tile round trip), no spills under the register cap that fits 2-3 programs an SM
    (unsplit with cp.async rows: one prologue value through local memory, outside the K loop), and 3 programs'
    shared memory within an SM's 228 KB at 8 stages; GEMM2's early weights (``EARLY_W``) and the units
    over the align's block bound (``M_STATIC``) as well, the early weights with their loader's wait and catch-up
    boxes, the K loop as long as without either (within 8 instructions)."""
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    rows = run_sm90_script(tmp_path, f"ROOT = {ROOT!r}\n" + _SCRIPT)
    assert len(rows) == 22, rows
    loops = {}
    for (act, nv, split, kb, mr, warps, smem, loop, hgmma, areg, serial, sts, spills, gdc, gdc_ops, xg, ldgsts, tma,
         arrives, fences, st, ss, ldg, bars, ew, ms, loop_spills) in rows:
        where = f"ACT={act} NV={nv} SPLIT={split} KB={kb} X_GATHER={xg} S_SMEM={ss} EARLY_W={ew} M_STATIC={ms}"
        loops.setdefault((act, nv, split, xg, ss, mr, st), {})[ew, ms] = int(loop)
        # the block scales: global loads in the K loop, or (S_SMEM) none there -- the loader's copies and arrival
        assert (int(ldg) == 0) == (ss != "0") and (ss == "0" or int(arrives) > 0), (where, ldg, arrives)
        # the slot release: one thread's arrive between warpgroup barriers, or (T_RELEASE) every thread's, which
        # leaves one warpgroup barrier in the loop (3 -> 1 at two blocks a step)
        assert (int(bars) == 1) == (ss == "2"), (where, bars)
        # the token rows by cp.async (16 bytes a copy: 16 rows x 8 copies a 64-wide block over 32 lanes, 4 a lane and
        # block) with their barrier arrival and the consumer's proxy fence, beside the weights' TMA boxes (2 a
        # block); or all by TMA (4 a block: the weights' two, the 16- and the 8-row token boxes)
        gather = xg != "0"
        assert (int(ldgsts) >= 4 * int(kb), int(fences) > 0) == (gather,) * 2, (where, ldgsts, fences)
        assert (int(arrives) > 0) == (gather or ss != "0"), (where, arrives)
        # (EARLY_W: the token boxes of its catch-up, inlined twice, as well)
        assert int(tma) == ((2 if gather else 4) + (4 if ew == "1" else 0)) * int(kb), (where, tma)
        assert int(warps) == 8, where
        assert int(hgmma) == 4 * int(kb) and int(areg) == 1, (where, hgmma, areg)
        assert int(serial) == 0 and int(sts) == 0 and int(loop_spills) == 0, (where, serial, sts, loop_spills)
        # no spills; unsplit with cp.async rows (one-token gpt-oss-120b's GEMM1) one value of the shared prologue
        # (the loader's lane offsets) goes through local memory across the partitions' register split: one store
        # before the split and one load in the loader, none in the K loop
        assert int(spills) <= (2 if split == "1" and xg != "0" else 0), (where, spills)
        assert int(loop) <= 60 + 100 * int(kb), (where, loop)  # 225-233 at KB 2 (~113 a 64 x 64 block), 155 at KB 1
        ctas = {"64": 4, "80": 3, "128": 2}[mr]  # the programs an SM the register cap is for
        assert (int(smem) + 1024) * ctas <= 228 * 1024, (where, smem)  # (1 KB a program reserved by the runtime)
        assert int(smem) <= WS_DEC_FIXED_SMEM - 1024 + int(st) * ws_fp4_dec_stage_bytes(64 * int(kb)), (
            where, smem)  # the rules' fixed share covers the rest
        # griddepcontrol.wait / launch_dependents (EARLY_W: the consumer's two and the loader's waits)
        assert int(gdc_ops) >= 4 if ew == "1" else int(gdc_ops) == (2 if gdc == "1" else 0), (where, gdc_ops)
    # GEMM2's early weights and the static block bound change the units' walk, not the K loop: within a few
    # instructions of the same variant's without them (the early weights against neither, the bound against the
    # same early-weights setting)
    for key, by in loops.items():
        for (ew, ms), n in by.items():
            if ew == "1" or ms == "1":
                base = ("0", "0") if ms == "0" else (ew, "0")
                assert base in by and abs(n - by[base]) <= 8, (key, by)


# ---- CPU: the dot-order gather, rules ------------------------------------------------------------------


@interpreter
@pytest.mark.parametrize("order", ["dot64", "pair8"])
def test_gather_slot_rows_in_order(order):
    """``_gather_slot_rows`` with ``dot64`` / ``pair8``: each row is the slot's token row with its K blocks permuted
    as ``dot64_cols`` says (the decode kernel's dot order: K position 16 c + 8 m + 4 p + s at 16 s + 8 m + 2 c + p of
    each 64-wide block) / ``pair8_cols`` (the FP4 prefill kernel's pair order: K position 8 g + 4 j + s at 8 g + 2 s +
    j); padding rows zero; rows of a K not a multiple of the block (64 / 8), 32-bit rows, and both orders at once are
    refused."""
    from fusedmoe.kernels._ws_fp4 import pair8_cols
    from fusedmoe.kernels._ws_fp4_dec import dot64_cols

    torch.manual_seed(0)
    # (pair8: 41 groups of 8 -- the last 256-byte column tile partly masked)
    cols_of, T, K, E, C = (dot64_cols, 9, 2, 4, 192) if order == "dot64" else (pair8_cols, 9, 2, 4, 328)
    kw = {order: True}
    ids = torch.stack([torch.randperm(E)[:K] for _ in range(T)]).to(torch.int32).to(DEV)
    al = triton_moe.align_slots(ids.reshape(-1), E, 16, tokens=T)
    a = torch.randn(T, C, device=DEV).to(torch.bfloat16)
    rows = triton_moe._gather_slot_rows(a, al, 16, K, T * K, E, **kw).view(torch.bfloat16).cpu()
    sid = al.sorted_ids.cpu().long()
    used = int(al.num_post_padded.cpu()[0])
    perm = cols_of(C)
    assert sorted(perm.tolist()) == list(range(C))
    if order == "dot64":
        assert perm[21].item() == 37  # (s, m, c, p) = (1, 0, 2, 1)
    else:
        assert perm[:8].tolist() == [0, 4, 1, 5, 2, 6, 3, 7]
    for r in range(used):
        exp = a.cpu()[sid[r] // K][perm] if sid[r] < T * K else torch.zeros(C, dtype=torch.bfloat16)
        assert torch.equal(rows[r], exp), r
    msg = "64-element blocks" if order == "dot64" else "8-element groups"
    for bad in (a[:, :160] if order == "dot64" else a[:, :324], a.float()):
        with pytest.raises(ValueError, match=msg):
            triton_moe._gather_slot_rows(bad, al, 16, K, T * K, E, **kw)
    with pytest.raises(ValueError, match="8-element groups"):
        triton_moe._gather_slot_rows(a[:, :320], al, 16, K, T * K, E, dot64=True, pair8=True)
    with pytest.raises(ValueError, match="64-wide" if order == "dot64" else "8-wide"):
        cols_of(100)


@interpreter
@pytest.mark.parametrize("T,C", [(1, 2880 // 15), (20, 512), (3, 1216)],
                         ids=["one-token-tail", "ten-programs", "column-tiles"])
def test_align_copies_dot_rows(T, C):
    """The decode align's launch with a :class:`triton_moe.DotRowsPlan` (the FP4 decode kernel's GEMM1 input with
    ``x_gather``): the align's outputs are those of the align alone, and the plan's result is hidden with each
    64-wide K block in the dot order (``dot64_cols``), whatever the programs' share of rows (1 row, 2 a program) and
    columns (one 256-wide tile past C = 192; three 512-wide tiles of 1216 columns, the last one partly past C).
    Rows that are not 16-bit, or of a C not a multiple of 64, are refused."""
    from fusedmoe.kernels._ws_fp4_dec import dot64_cols

    torch.manual_seed(3)
    E, K = 6, 4
    ids = torch.stack([torch.randperm(E)[:K] for _ in range(T)]).to(torch.int32).to(DEV)
    h = torch.randn(T, C, device=DEV).to(torch.bfloat16)
    plan = triton_moe.DotRowsPlan(h)
    assert plan.programs == {1: 1, 20: 10, 3: 9}[T]  # (3 rows of 3 column tiles)
    al = triton_moe.align_slots(ids.reshape(-1), E, 16, tokens=T, quant=plan)
    ref = triton_moe.align_slots(ids.reshape(-1), E, 16, tokens=T)
    assert torch.equal(al.num_post_padded, ref.num_post_padded) and torch.equal(al.block_expert, ref.block_expert)
    assert torch.equal(al.sorted_ids, ref.sorted_ids)
    assert torch.equal(plan.result().cpu(), h.cpu()[:, dot64_cols(C)])
    with pytest.raises(ValueError, match="16-bit rows"):
        triton_moe.DotRowsPlan(h.float())
    with pytest.raises(ValueError, match="multiple of 64"):
        triton_moe.DotRowsPlan(h[:, :C - 32])


def assert_decode_tiles_refused(fmt, K: int, wrong_block_k: int, k_why: str) -> None:
    """The decode kernels' tile rules (FP4 here, 16-bit / FP8 in ``test_ws_dec``) refuse a gated GEMM1 of ``fmt``
    weights over ``K`` with 64 output columns, a ``wrong_block_k`` (the reason naming ``k_why``), 8 warps and swap-AB,
    each with its reason."""
    bad = [(KernelConfig(16, 64, 128, num_warps=4, warp_specialized=True), "block_n 32"),
           (KernelConfig(16, 32, wrong_block_k, num_warps=4, warp_specialized=True), k_why),
           (KernelConfig(16, 32, 128, num_warps=8, warp_specialized=True), "num_warps 4"),
           (KernelConfig(16, 32, 128, num_warps=4, swap_ab=True, warp_specialized=True), "swap_ab")]
    for cfg, why in bad:
        msg = warp_specialized_problem(cfg, fmt, "gemm1", True, K)
        assert msg is not None and why in msg, (cfg, msg)


def test_ws_fp4_dec_config_rules(monkeypatch):
    """The decode tile (16 token rows, 32 gated GEMM1 / 64 output columns, block_k 64 / 128, split-K) passes the
    rules for MXFP4 and NVFP4; other shapes are refused with the reason. The split-K rule takes the fewest shares
    with the shortest busiest-program work, at least two ring steps a share; the switch is opt-in and validated;
    ``auto_ws_fp4`` picks the decode tiles only with it on, for decode tiles (block_m <= 16) only."""
    for gated, gemm, bn in ((True, "gemm1", 32), (False, "gemm1", 64), (False, "gemm2", 64)):
        for bk in (64, 128):
            c = ws_fp4_dec_config(gated, gemm, 2, 8, bk)
            assert (c.block_m, c.block_n, c.block_k, c.split_k, c.warp_specialized) == (16, bn, bk, 2, True)
            for fmt in (F.MXFP4, F.NVFP4):
                assert warp_specialized_problem(c, fmt, gemm, gated, 2880) is None
    assert_decode_tiles_refused(F.MXFP4, 2880, 256, "block_k 64 / 128")
    assert "multiple of 64" in warp_specialized_problem(ws_fp4_dec_config(False, "gemm2"), F.MXFP4, "gemm2", False, 96)
    # split-K by makespan: gpt-oss-120b at one token on 396 programs -- GEMM1 (4 experts x 90 column tiles) one
    # unit each, unsplit; GEMM2 (4 x 45) in two shares; Nemotron-3-Super GEMM1 (22 x 42, 8 steps): 3 units of 8
    # steps cost as much as 5 of 4, so unsplit
    assert triton_moe.ws_fp4_dec_split(360, 23, 396) == 1
    assert triton_moe.ws_fp4_dec_split(180, 23, 396) == 2
    assert triton_moe.ws_fp4_dec_split(924, 8, 396) == 1
    assert triton_moe.ws_fp4_dec_split(4000, 23, 396) == 1
    assert triton_moe.ws_fp4_dec_split(10, 23, 396) == 8  # 23 steps: 2.9 a share
    assert triton_moe.ws_fp4_dec_split(10, 12, 396) == 4  # 12 steps: not 1.5 a share
    prev = triton_moe.set_ws_fp4_decode(False)
    try:
        # by default one-token calls, the block scales through the ring, per-thread release (thirty-fifth session)
        # (4 ring stages since the fifty-third session)
        assert prev == (triton_moe.WS_FP4_DEC_AUTO_MAX_TOKENS, 3, 4, 128, True, True, True)
        assert triton_moe.WS_FP4_DEC_AUTO_MAX_TOKENS == 1
        assert triton_moe.set_ws_fp4_decode(True, 2, 4, 64) == (False,) + prev[1:]
        # the switch as it stands, in the setter's argument order
        assert triton_moe.ws_fp4_decode_settings() == (True, 2, 4, 64, True, True, True)
        with pytest.raises(ValueError, match="ctas"):
            triton_moe.set_ws_fp4_decode(True, 5)
        for bad in ("on", -1, 1.0, None):
            with pytest.raises(TypeError, match="number of tokens"):
                triton_moe.set_ws_fp4_decode(bad)
        # FUSEDMOE_WS_FP4_DECODE: unset -- the default reach; 1 / 0 -- every call / none; a number -- that many tokens
        env = triton_moe._env_decode_tokens
        assert (env(""), env("1"), env("0"), env("4")) == (1, True, False, 4)
        with pytest.raises(ValueError, match="FUSEDMOE_WS_FP4_DECODE"):
            env("yes")
        # the automatic choice
        monkeypatch.setattr(triton_moe, "_cuda_major", lambda index: 9)
        monkeypatch.setattr(triton_moe, "_device_info", lambda dev: ("NVIDIA H200", 132))
        cuda = torch.device("cuda", 0)
        dec = MoEKernelConfig(KernelConfig(16, 64, 128, swap_ab=True, split_k=2), KernelConfig(16, 64, 128))
        for fmt in (F.MXFP4, F.NVFP4):
            c = Case(fmt, F.BF16, A.SWIGLU, T=4, H=128, I=64, E=4, K=2, dtype=torch.bfloat16)
            _, W, _ = make_case(c, device="cpu")

            def auto(cfg, tokens=1):
                return triton_moe.auto_ws_fp4(cfg, W.w13, W.w2, F.BF16, torch.bfloat16, cuda, tokens, 2, A.SWIGLU)

            triton_moe.set_ws_fp4_decode(False)
            assert auto(dec) is dec
            triton_moe.set_ws_fp4_decode(True, 3, 8, 128)
            got = auto(dec)
            assert got.gemm1.block_m == 16 and got.gemm1.warp_specialized and got.gemm1.block_n == 32
            assert got.gemm2.block_n == 64 and got.gemm1.num_stages == 8 and got.gemm1.block_k == 128
            triton_moe.set_ws_fp4_decode(True, 4, 8, 128)  # 4 programs an SM: the 6 stages that fit
            assert auto(dec).gemm1.num_stages == auto(dec).gemm2.num_stages == 6
            triton_moe.set_ws_fp4_decode(True, 4, 8, 64)  # (4 KB steps: all 8)
            assert auto(dec).gemm1.num_stages == 8
            triton_moe.set_ws_fp4_decode(True, 3, 8, 128)
            # 2 blocks x 2 column tiles on 396 programs, K = 128 (one step): no split possible
            assert got.gemm1.split_k == 1
            mid = MoEKernelConfig(KernelConfig(64, 64, 64, swap_ab=True), KernelConfig(64, 128, 64, swap_ab=True))
            assert auto(mid, 64) is mid  # 64-row tiles: not decode tiles, and not the prefill kernel's either
            # a number of tokens: calls up to it take the decode kernel, longer ones keep the Triton tiles
            for reach, tokens, taken in ((1, 1, True), (1, 2, False), (4, 4, True), (4, 5, False), (0, 1, False)):
                triton_moe.set_ws_fp4_decode(reach)
                assert auto(dec, tokens).gemm1.warp_specialized is taken, (reach, tokens)
                assert (auto(dec, tokens) is dec) is not taken
    finally:
        triton_moe.set_ws_fp4_decode(*prev)


@pytest.mark.parametrize("fmt,gated,x_gather", [(F.MXFP4, True, False), (F.NVFP4, False, False),
                                                (F.MXFP4, True, True), (F.NVFP4, False, True)])
def test_ws_fp4_dec_launch_binds_every_argument(monkeypatch, fmt, gated, x_gather):
    """``triton_moe._ws_fp4_dec_launch``'s positional arguments bound to the kernel's signature: the rows and the
    tiled FP4 words' TMA boxes (16 / 8 token rows of 64, 32 weight rows of 16 words), the scale strides (MX row-major,
    NVFP4 K-major), the K steps, the constexprs (GEMM2's early weights where the rows come by TMA) and the
    persistent grid -- a count or order slip fails. ``x_gather``:
    the unsorted dot-order rows [T, K] as the cp.async source with their row stride and top_k, the token boxes'
    descriptors over the weights' bytes (shape and layout only: the source may have one row)."""
    import inspect

    from fusedmoe.kernels import _ws_fp4_dec as kd

    sig = inspect.signature(kd._ws_fp4_dec_kernel.fn)
    cap = LaunchCapture()
    monkeypatch.setattr(kd, "_ws_fp4_dec_kernel", cap)
    c = Case(fmt, F.BF16, A.SWIGLU if gated else A.RELU2, T=3, H=512, I=256, E=4, K=2, dtype=torch.bfloat16)
    _, W, _ = make_case(c, device="cpu")
    w = W.w13
    NB, TK = 5, 6
    rows = torch.zeros(3 if x_gather else NB * 16, 512, dtype=torch.bfloat16)
    al = triton_moe.AlignResult(torch.zeros(NB * 16, dtype=torch.int32), torch.zeros(NB, dtype=torch.int32),
                                torch.zeros(1, dtype=torch.int32), 16, NB)
    N = W.padded_intermediate_size
    out = torch.empty(TK, N, dtype=torch.bfloat16)
    tw = torch.ones(TK)
    part, cnt = torch.zeros(1 << 16), torch.zeros(64, dtype=torch.int32)
    cfg = ws_fp4_dec_config(gated, "gemm1", 2, 8, 128)
    p = triton_moe._DEFAULT_ACT_PARAMS
    # (the scales' ring and the per-thread slot release with the cp.async rows)
    prev = triton_moe.set_ws_fp4_decode(False, scales_smem=x_gather, thread_release=x_gather)
    try:
        triton_moe._ws_fp4_dec_launch(cfg, rows, w, tw, False, tw, al, out, N, TK, 4, 0, gated, p, None, False,
                                      False, 132, 0, part, cnt, out_padded=True,
                                      pdl={"USE_GDC": True, "launch_pdl": True}, x_gather=x_gather, top_k=2)
    finally:
        triton_moe.set_ws_fp4_decode(*prev)
    (grid, args, kw), = cap.calls
    kw = dict(kw)
    assert kw.pop("launch_pdl") is True
    ctas = triton_moe._WS_FP4_DEC["ctas"]
    assert kw.pop("num_warps") == 4 and kw.pop("maxnreg") == triton_moe._WS_FP4_DEC_MAXNREG[ctas]
    b = sig.bind(*args, **kw).arguments
    tk = w.value_tile_k
    num_n = N // 32 if gated else -(-N // 64)
    assert grid == (min(NB * num_n * 2, ctas * 132),)
    assert [b[n].block_shape for n in ("x_desc", "x8_desc", "w_desc")] == [[16, 64], [8, 64], [32, 16]]
    if x_gather:
        assert b["x_desc"].base.data_ptr() == w.data.data_ptr() and b["x_desc"].base.dtype == torch.bfloat16
        assert (b["x_ptr"], b["stride_x"], b["X_GATHER"], b["TOP_K"]) == (rows, 512, True, 2)
    else:
        assert b["x_desc"].base is rows and b["X_GATHER"] is False
    assert b["x8_desc"].base is b["x_desc"].base and b["w_desc"].base.data_ptr() == w.data.data_ptr()
    assert b["S_SMEM"] is x_gather and triton_moe._ws_fp4_scales_copyable(w, N)  # ExpertWeights' scales qualify
    assert b["T_RELEASE"] is x_gather
    # the early weights (the default) where the token rows come by TMA, under programmatic dependent launch
    assert b["EARLY_W"] is (not x_gather)
    buf = torch.zeros(w.scale.untyped_storage().nbytes() + 16, dtype=torch.uint8).view(w.scale.dtype)
    w_odd = dataclasses.replace(w, scale=buf.as_strided(w.scale.shape, w.scale.stride(), 1))  # 1 byte off
    assert not triton_moe._ws_fp4_scales_copyable(w_odd, N)  # (unaligned scales: the global loads instead)
    assert (b["out_ptr"], b["s_ptr"], b["part_ptr"], b["cnt_ptr"], b["topk_w_ptr"]) == (out, w.scale, part, cnt, tw)
    assert b["gs_ptr"] is (w.global_scale if fmt is F.NVFP4 else tw)
    assert (b["N"], b["n_k"], b["n64"], b["num_n"], b["num_slots"]) == (N, 4, 8, num_n, TK)
    assert (b["R_TILES"], b["K_PIECES"]) == (w.shape[-2] // 64, 512 // tk)
    assert (b["stride_se"], b["stride_sr"], b["stride_sk"]) == tuple(w.scale.stride())
    assert (b["stride_om"], b["stride_be"]) == (N, 0)
    assert (b["TK"], b["SPLIT"], b["KB"], b["STAGES"], b["GATED"], b["NV"]) == (tk, 2, 2, 8, gated, fmt is F.NVFP4)
    assert b["OUT_PADDED_DOT"] is True and b["E_LOC"] == 4 and b["SWZ"] == w.value_swizzled and b["USE_GDC"] is True


@interpreter
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (the combine of the uncomputed GEMM outputs)
@pytest.mark.parametrize("T,x_gather", [(3, True), (3, False), (80, True)], ids=["cpasync", "gather", "two-chunks"])
def test_ws_fp4_dec_gets_dot_rows_from_the_align(monkeypatch, T, x_gather):
    """``triton_experts`` with decode kernel configs for both GEMMs (the Gluon launches captured, the sm_90 checks
    off: the interpreter cannot run them): with ``x_gather`` and a one-program align (T x top_k <= 256) GEMM1 gets
    hidden in the dot order from the align's launch (``x_dot``) and GEMM2 none; with ``x_gather`` off, or past the
    one-program align (80 tokens x top 4), GEMM1 gathers its rows itself (no ``x_dot``)."""
    from fusedmoe.kernels._ws_fp4_dec import dot64_cols

    calls = []
    monkeypatch.setattr(triton_moe, "_ws_check", lambda *a, **k: None)
    monkeypatch.setattr(triton_moe, "_ws_fp4_problem", lambda *a, **k: None)
    monkeypatch.setattr(triton_moe, "_ws_fp4_gemm", lambda c, a, *args, **kw: calls.append((c, a, kw)))
    c = Case(F.MXFP4, F.BF16, A.SWIGLU, T=T, H=128, I=128, E=4, K=4, dtype=torch.bfloat16, seed=5)
    hidden, W, topk = make_case(c, device=DEV)
    cfg = MoEKernelConfig(ws_fp4_dec_config(True, "gemm1", 1), ws_fp4_dec_config(False, "gemm2", 1))
    prev = triton_moe.set_ws_fp4_decode(False, x_gather=x_gather)
    try:
        run_triton(hidden, W, topk, F.BF16, config=cfg)
    finally:
        triton_moe.set_ws_fp4_decode(*prev)
    (c1, a1, kw1), (c2, _, kw2) = calls
    assert c1.block_m == c2.block_m == 16 and a1 is hidden and kw2.get("x_dot") is None
    if x_gather and T * 4 <= 256:
        assert torch.equal(kw1["x_dot"].cpu(), hidden.cpu()[:, dot64_cols(128)])
    else:
        assert kw1.get("x_dot") is None


def test_ws_fp4_dec_tuner_candidates_and_table_entries(monkeypatch):
    """The tuner offers the FP4 decode kernel on Hopper at 1-64 tokens for MXFP4 / NVFP4 weights, at 3 and 4
    programs an SM as ``ws_fp4_decode_config`` gives it, each at 4 and 8 ring stages (those that fit: 8 / 6 of 128 K
    values; the split rule over that many programs), valid by the kernel's rules; not at 128 tokens, not off Hopper.
    A table entry naming the kernel runs as it is with the switch off; where it cannot run -- activations other than
    BF16, FP4 Gluon kernels off (``set_ws_fp4(False)``), an atomic combine -- the call gets the heuristic's Triton
    config."""
    from fusedmoe.bench.tune import search_space

    def dec(T, fmt, device="NVIDIA H200"):
        return [c.config for c in search_space(T, 2880, 2880, 128, 4, fmt, A.SWIGLU_OAI, device, num_sms=132)
                if c.config.gemm1.warp_specialized and c.config.gemm1.block_m == 16]

    for fmt in (F.MXFP4, F.NVFP4):
        for T in (1, 8, 64):
            got = dec(T, fmt)
            assert sorted((c.gemm1.persistent, c.gemm1.num_stages) for c in got) == [(3, 4), (3, 8), (4, 4), (4, 6)], (
                fmt, T, got)
            for cfg in got:
                n = cfg.gemm1.persistent
                want = triton_moe.ws_fp4_decode_config(T, 2880, 2880, 128, 4, True, 132, n, cfg.gemm1.num_stages)
                assert cfg == want and cfg.gemm2.persistent == n and cfg.gemm2.num_stages == cfg.gemm1.num_stages
                for gemm, c in (("gemm1", cfg.gemm1), ("gemm2", cfg.gemm2)):
                    assert warp_specialized_problem(c, fmt, gemm, gemm == "gemm1", 2880) is None, (fmt, gemm, c)
        assert not dec(128, fmt) and not dec(1, fmt, "NVIDIA A100-SXM4-80GB")
    # one gpt-oss-120b token: 360 GEMM1 units -- one round on 396 programs unsplit, 4 shares on 528
    assert [triton_moe.ws_fp4_decode_config(1, 2880, 2880, 128, 4, True, 132, n).gemm1.split_k
            for n in (3, 4)] == [1, 4]
    with pytest.raises(ValueError, match="ctas"):
        ws_fp4_dec_config(True, "gemm1", ctas=5)
    assert "at most 6 stages" in warp_specialized_problem(ws_fp4_dec_config(True, "gemm1", 1, 8, 128, 4), F.MXFP4,
                                                          "gemm1", True, 2880)
    # a table entry naming the kernel (the automatic choice, a CUDA sm_90 device pretended)
    monkeypatch.setattr(triton_moe, "_cuda_major", lambda index: 9)
    monkeypatch.setattr(triton_moe, "_device_info", lambda dev: ("NVIDIA H200", 132))
    cuda = torch.device("cuda", 0)
    c = Case(F.NVFP4, F.BF16, A.SWIGLU, T=4, H=128, I=64, E=4, K=2, dtype=torch.bfloat16)
    _, W, _ = make_case(c, device="cpu")
    tuned = triton_moe.ws_fp4_decode_config(1, 128, 64, 4, 2, True, 132, 4)
    prev = triton_moe.set_ws_fp4_decode(False)
    try:
        def auto(cfg, act=F.BF16):
            return triton_moe.auto_ws(cfg, W.w13, W.w2, act, torch.bfloat16, cuda, 1, 2, A.SWIGLU)

        assert auto(tuned) is tuned
        heur = triton_moe._triton_fallback(1, 128, 64, 4, 2, F.NVFP4, A.SWIGLU, "NVIDIA H200", 132, False)
        assert not heur.gemm1.warp_specialized and not heur.gemm2.warp_specialized
        assert auto(tuned, F.NVFP4) == heur  # W4A4 emulation: the kernel takes BF16 activations only
        atomic = MoEKernelConfig(tuned.gemm1, tuned.gemm2, True)
        assert auto(atomic) == MoEKernelConfig(heur.gemm1, heur.gemm2, True)
        was = triton_moe.set_ws_fp4(False)
        try:
            assert auto(tuned) == heur
        finally:
            triton_moe.set_ws_fp4(*was)
    finally:
        triton_moe.set_ws_fp4_decode(*prev)


# ---- CPU: the kernel's index math, emulated ---------------------------------------------------------------


def _emulate_dec(w, rows, al, N, gated, split, kb, num_slots, top_k=0, s_smem=False):
    """A torch mirror of ``_ws_fp4_dec``'s loader and consumer index math (the unit walk, the K shares, the TMA box
    coordinates in the tiled layout's 16-bit view -- out-of-range boxes zero as TMA leaves them --, the 8-row token
    boxes with the rows left out as NaN, the scale indices with their clamp, the A operand built from the words in
    the dot order, split-K in order) on the dot-order token rows ``rows`` that the real gather wrote; ``top_k`` > 0
    (``X_GATHER``): ``rows`` is [T, K] unsorted (the align launch's dot-order copy of hidden) and the loader's
    cp.async takes a block's row t from row ``slot // top_k``, zeros for padding rows and K past the end;
    ``s_smem`` (``S_SMEM``): the scales as the loader copies them into the ring -- MX each row's 4-byte word at
    ``(2 kb kk) // 4 * 4`` of its (padded) scale row and the consumer's byte ``(2 kb kk) % 4 + 2 (min(b, n64 - 1) -
    kb kk) + c // 2`` of it; NVFP4 the step's columns ``kk 4 kb + [0, 4 kb)`` clamped to the last K block's --
    instead of the global loads' indices. Returns {(pid_m, n0): acc [64, 16] float64} for the local blocks (rows
    0-31 gate / 32-63 up when gated)."""
    from fusedmoe.formats.reference import e2m1_to_float
    from fusedmoe.formats.tensor import swizzle_fp4_words

    E, R, K = w.shape
    tk = w.value_tile_k
    data = swizzle_fp4_words(w.data, inverse=True) if w.value_swizzled else w.data
    w2d = data.view(torch.int16).reshape(-1, tk // 4)
    R_TILES, K_PIECES, n64 = R // 64, K // tk, K // 64
    n_k = -(-n64 // kb)
    BT = 16
    num_m = int(al.num_post_padded[0]) // BT
    num_n = N // 32 if gated else -(-N // 64)
    nv = w.fmt is F.NVFP4
    sids, bexp = al.sorted_ids.long(), al.block_expert.long()
    c = torch.arange(4)
    out = {}
    for u in range(num_m * num_n * split):
        per_m = num_n * split
        pid_m, pid_n, ks = u // per_m, (u % per_m) // split, (u % per_m) % split
        e = int(bexp[pid_m])
        if e >= E:
            continue
        n8 = 1 + int(sids[pid_m * BT + 8] < num_slots)  # 8-row chunks with real rows (rows come first)
        if gated:
            n0 = pid_n * 32
            r0, r1 = n0, N + n0
            wrow = torch.cat([n0 + torch.arange(32), N + n0 + torch.arange(32)])
        else:
            n0 = pid_n * 64
            r0, r1 = n0, n0 + 32
            wrow = torch.clamp(n0 + torch.arange(64), max=N - 1)
        base0 = (e * R_TILES + r0 // 64) * K_PIECES
        base1 = (e * R_TILES + r1 // 64) * K_PIECES
        k0, k1 = (n_k * ks) // split, (n_k * (ks + 1)) // split
        b_last = min(k1 * kb, n64) - 1
        acc = torch.zeros(64, BT, dtype=torch.float64)
        for kk in range(k0, k1):
            for h in range(kb):
                kq = kk * kb + h
                piece, col = (kq * 64) // tk, ((kq * 64) % tk) // 4

                def box(row):
                    b = torch.zeros(32, 16, dtype=torch.int16)
                    if row < w2d.shape[0]:
                        part = w2d[row:row + 32, col:col + 16]
                        b[:part.shape[0]] = part
                    return b

                words = torch.cat([box((base0 + piece) * 64 + r0 % 64), box((base1 + piece) * 64 + r1 % 64)])
                x = torch.zeros(BT, 64, dtype=torch.float64)
                if top_k:  # cp.async: the real rows from the unsorted source, the rest zero-filled
                    for t in range(BT):
                        slot = int(sids[pid_m * BT + t])
                        if slot < num_slots and kq < n64:
                            x[t] = rows[slot // top_k, kq * 64:(kq + 1) * 64].double()
                elif kq < n64:
                    x = rows[pid_m * BT:(pid_m + 1) * BT, kq * 64:(kq + 1) * 64].double()
                if n8 == 1 and not top_k:
                    x = x.clone()
                    x[8:] = float("nan")  # the rows the 8-row box leaves: whatever the slot held
                bi = min(kq, b_last)  # the scale index's clamp
                if s_smem and nv:  # the ring slot's [4 kb, 64] columns, clamped to the last K block's
                    cols = torch.clamp(kk * 4 * kb + torch.arange(4 * kb), max=4 * n64 - 1)
                    slot_s = w.scale[e][wrow][:, cols]  # [64, 4 kb]
                    sc = slot_s[:, 4 * h + c].float().double()
                elif s_smem:  # each row's 4-byte word of codes, as the padded row-major storage holds it
                    flat = w.scale.as_strided((R * w.scale.stride(1),), (1,), w.scale.storage_offset()
                                              + e * w.scale.stride(0))  # the rows' bytes, padding included
                    start = wrow * w.scale.stride(1) + (2 * kb * kk) // 4 * 4
                    word = flat[start[:, None] + torch.arange(4)[None, :]]  # [64, 4] bytes
                    j = (2 * kb * kk) % 4 + 2 * (min(kq, n64 - 1) - kb * kk) + c // 2
                    code = word[:, j].double()
                    sc = torch.where(code == 255, float("nan"), torch.exp2(code - 127))  # (UE8M0 255: NaN)
                elif nv:
                    sc = w.scale[e][wrow][:, 4 * bi + c].float().double()  # [64, 4]: thread column c's block
                else:
                    sc = torch.exp2(w.scale[e][wrow][:, 2 * bi + c // 2].double() - 127)
                wi = words.to(torch.int32) & 0xFFFF
                a = torch.empty(64, 64, dtype=torch.float64)
                for cc in range(4):
                    for m in range(2):
                        for p in range(2):
                            word = wi[:, 4 * cc + 2 * m + p]
                            for sn in range(4):
                                v = e2m1_to_float(((word >> (4 * sn)) & 0xF).to(torch.uint8)).double()
                                a[:, 16 * sn + 8 * m + 2 * cc + p] = v * sc[:, cc]
                acc_h = a @ x.T
                acc += acc_h
        if nv:
            acc = acc / w.global_scale[e].double()
        key = (pid_m, n0)
        out[key] = out.get(key, torch.zeros(64, BT, dtype=torch.float64)) + acc  # (the shares in split order)
    return out


@interpreter
@pytest.mark.parametrize("fmt,H,gated,split,kb,x_gather,s_smem", [
    (F.MXFP4, 192, True, 2, 2, False, False), (F.NVFP4, 256, False, 1, 2, False, False),
    (F.MXFP4, 256, False, 3, 1, False, False), (F.NVFP4, 192, True, 2, 2, False, False),
    (F.MXFP4, 192, True, 2, 2, True, False), (F.NVFP4, 256, False, 1, 2, True, False),
    (F.MXFP4, 192, True, 2, 2, True, True), (F.NVFP4, 192, True, 2, 2, False, True),
    (F.MXFP4, 320, False, 2, 1, False, True), (F.NVFP4, 256, False, 3, 1, True, True)],
    ids=["mx-gated-tail", "nv-relu2", "mx-kb1-split3", "nv-gated-tail", "mx-gated-tail-cpasync", "nv-relu2-cpasync",
         "mx-gated-tail-ssmem", "nv-gated-tail-ssmem", "mx-kb1-ssmem", "nv-kb1-split3-ssmem"])
def test_ws_fp4_dec_index_math_emulated(fmt, H, gated, split, kb, x_gather, s_smem):
    """The decode kernel's addressing, mirrored in torch (``_emulate_dec``) on the tiled / swizzled FP4 values and
    the MX row-major / NVFP4 K-major scales that ExpertWeights stores, with the real dot-order gather (interpreter):
    every stored output (real slot rows) equals the slot's token row times the dequantized weight rows in fp64 (MX:
    the products are exact, only the sums' order differs; NVFP4 within the reference's fp32 rounding of ``s / g``), the NaN rows left by 8-row token boxes reach only padding
    columns, a K tail (H = 192: three 64-wide blocks in steps of two) adds nothing; and GEMM1's padded dot-order
    store (``_ws_fp4._fp4_epilogue``'s ``OUT_PADDED_DOT`` column map) equals the gather of its slot-ordered rows.
    ``x_gather``: GEMM1's rows from the align launch's dot-order copy of hidden (:class:`triton_moe.DotRowsPlan`),
    row ``slot // top_k`` (the loader's cp.async addressing); ``s_smem``: the block scales through the ring (the
    loader's MX words / NVFP4 columns and the consumer's byte index)."""
    from fusedmoe.formats import dequantize

    act = A.SWIGLU if gated else A.RELU2
    T, Kt, E = 11, 2, 3
    c = Case(fmt, F.BF16, act, T=T, H=H, I=128, E=E, K=Kt, dtype=torch.bfloat16, seed=31)
    hidden, W, topk = make_case(c, device="cpu")
    w = W.w13
    N = W.padded_intermediate_size
    assert w.value_tile_k == (128 if H % 128 == 0 else 64) and w.value_layout != "linear"
    assert (w.scale.stride(1) == 1) == (fmt is F.NVFP4)  # K-major NVFP4, row-major MX
    if s_smem and fmt is F.MXFP4:  # NaN codes in the scale rows' padding: the words copied reach into it, and only
        full = w.scale.as_strided((E, w.shape[-2], w.scale.stride(1)), (w.scale.stride(0), w.scale.stride(1), 1),
                                  w.scale.storage_offset())  # the consumer's clamp keeps them out of the products
        assert full.shape[-1] > w.scale.shape[-1]
        full[:, :, w.scale.shape[-1]:] = 255
    ids = topk.ids.reshape(-1).to(torch.int32)
    if x_gather:
        plan = triton_moe.DotRowsPlan(hidden)
        al = triton_moe.align_slots(ids, E, 16, tokens=T, quant=plan)
        got = _emulate_dec(w, plan.result(), al, N, gated, split, kb, T * Kt, top_k=Kt, s_smem=s_smem)
    else:
        al = triton_moe.align_slots(ids, E, 16, tokens=T)
        rows = triton_moe._gather_slot_rows(hidden, al, 16, Kt, T * Kt, E, dot64=True).view(torch.bfloat16)
        got = _emulate_dec(w, rows, al, N, gated, split, kb, T * Kt, s_smem=s_smem)
    if s_smem:
        assert triton_moe._ws_fp4_scales_copyable(w, N)  # ExpertWeights' scales: the copies' alignment holds
    wd = dequantize(w).double()  # [E, R, H]
    sids = al.sorted_ids.long()
    assert got
    y_slot = torch.zeros(T * Kt, 2 * N if gated else N, dtype=torch.float64)  # GEMM1's pre-activation rows, by slot
    for (pid_m, n0), acc in got.items():
        e = int(al.block_expert[pid_m])
        for t in range(16):
            slot = int(sids[pid_m * 16 + t])
            if slot >= T * Kt:
                continue
            x = hidden[slot // Kt].double()
            if gated:
                ref = torch.cat([wd[e, n0:n0 + 32] @ x, wd[e, N + n0:N + n0 + 32] @ x])
                y_slot[slot, n0:n0 + 32] = acc[:32, t]
                y_slot[slot, N + n0:N + n0 + 32] = acc[32:, t]
            else:
                ref = wd[e, n0:n0 + 64] @ x
                y_slot[slot, n0:n0 + 64] = acc[:, t]
            assert torch.isfinite(acc[:, t]).all(), (pid_m, n0, t)
            # (NVFP4: the reference dequantizes e2m1 * s / g in fp32, one rounding a weight; MX values are exact)
            tol = 1e-5 if fmt is F.NVFP4 else 1e-9
            torch.testing.assert_close(acc[:, t], ref, rtol=tol, atol=tol)
    # GEMM1's padded dot-order store: column n of a padded row p at d = 16 (n % 4) + 8 ((n // 8) % 2) + 2 (n // 16)
    # + (n // 4) % 2 of its 64-wide block -- what the gather of the slot-ordered rows writes
    y_bf = y_slot.to(torch.bfloat16)
    Nc = y_bf.shape[1]
    n = torch.arange(Nc)
    nb = n % 64
    dcol = n - nb + 16 * (nb % 4) + 8 * ((nb // 8) % 2) + 2 * (nb // 16) + (nb // 4) % 2
    used = int(al.num_post_padded[0])
    real = sids[:used] < T * Kt
    pad = torch.zeros(used, Nc, dtype=torch.bfloat16)
    pad[:, dcol] = y_bf[sids[:used].clamp(max=T * Kt - 1)]
    gathered = triton_moe._gather_slot_rows(y_bf, al, 16, 1, T * Kt, E, dot64=True).view(torch.bfloat16)
    assert real.any() and torch.equal(pad[real], gathered[:used][real])


# ---- GPU ------------------------------------------------------------------------------------------------


def _dec_call(hidden, W, topk, *, split=None, offset=0, woi=False, capture=None, x_gather=True, scales_smem=False,
              thread_release=False):
    """The layer through the decode kernel: the automatic choice with the switch on (``split`` None), or an
    explicit decode config with that split-K for both GEMMs; asserts that it ran. ``x_gather``: GEMM1's token rows
    by cp.async from the align launch's dot-order copy of hidden (the default), else the gather launch's TMA boxes;
    ``scales_smem``: the block scales through the ring; ``thread_release``: every consumer thread frees the slots."""
    cap = {} if capture is None else capture
    gated = W.activation.is_gated
    prev = triton_moe.set_ws_fp4_decode(True, x_gather=x_gather, scales_smem=scales_smem,
                                        thread_release=thread_release)
    try:
        # (each GEMM's split-K at most its 128-wide K steps: the rule that every share has a step)
        cfg = None if split is None else MoEKernelConfig(
            ws_fp4_dec_config(gated, "gemm1", min(split, -(-hidden.shape[-1] // 128))),
            ws_fp4_dec_config(False, "gemm2", min(split, -(-W.padded_intermediate_size // 128))))
        out = run_triton(hidden, W, topk, F.BF16, offset=offset, woi=woi, config=cfg, capture=cap)
    finally:
        triton_moe.set_ws_fp4_decode(*prev)
    c = cap["config"]
    assert c.block_m == 16 and c.gemm1.warp_specialized and c.gemm2.warp_specialized, c
    return out


@gpu
@pytest.mark.parametrize("fmt", [F.MXFP4, F.NVFP4], ids=lambda f: f.name)
@pytest.mark.parametrize("act", [A.SWIGLU_OAI, A.RELU2], ids=lambda a: a.name)
def test_gpu_ws_fp4_dec_matches_reference(act, fmt):
    """Decode (6 tokens, top 4 over 8 of 12 experts local): the decode kernel with split-K 1, 2 and 4 within 2e-2
    of the reference and 4e-3 RMS of the Triton kernels; clamped SwiGLU with biases on both GEMMs; the split
    shares add in split order, so repeated calls give the same bits; GEMM1 storing GEMM2's rows itself (padded
    positions, dot order; ``set_ws_padded_handoff``, the default) gives the bits of the gathered hand-off,
    GEMM1's token rows by cp.async (the default) those of the gather launch's TMA boxes, and the block scales
    through the ring (``scales_smem``, also with ``thread_release``) those of the global loads."""
    c = Case(fmt, F.BF16, act, T=6, H=576, I=384, E=8, K=4, offset=2, bias=act is A.SWIGLU_OAI,
             dtype=torch.bfloat16, params=OAI_SMALL if act is A.SWIGLU_OAI else None, seed=21)
    hidden, W, topk = make_case(c)
    ref = run_reference(hidden, W, topk, F.BF16, offset=2, E_glob=c.E_glob)
    base = run_triton(hidden, W, topk, F.BF16, offset=2)
    for split in (1, 2, 4):
        cap0 = {}
        got = _dec_call(hidden, W, topk, split=split, offset=2, capture=cap0)
        assert cap0["padded"]  # GEMM1 stored GEMM2's rows
        assert torch.isfinite(got).all()
        assert _rel(got, ref) <= 2e-2, (split, _rel(got, ref))
        assert _rel(got, base) <= 4e-3, (split, _rel(got, base))
        assert torch.equal(got, _dec_call(hidden, W, topk, split=split, offset=2))
        cap = {}
        prev = triton_moe.set_ws_padded_handoff(False)
        try:
            gathered = _dec_call(hidden, W, topk, split=split, offset=2, capture=cap)
        finally:
            triton_moe.set_ws_padded_handoff(prev)
        assert not cap["padded"] and torch.equal(got, gathered)
        assert torch.equal(got, _dec_call(hidden, W, topk, split=split, offset=2, x_gather=False))
        assert torch.equal(got, _dec_call(hidden, W, topk, split=split, offset=2, scales_smem=True))
        assert torch.equal(got, _dec_call(hidden, W, topk, split=split, offset=2, scales_smem=True,
                                          thread_release=True))


@gpu
@pytest.mark.parametrize("fmt", [F.MXFP4, F.NVFP4], ids=lambda f: f.name)
def test_gpu_ws_fp4_dec_full_blocks(fmt):
    """Blocks with more than 8 real rows (40 tokens, top 2 over 4 experts: ~20 rows an expert, so a full 16-row
    block and a partial one each): the loader's 16-row token boxes next to its 8-row ones; within the reference's
    bound and close to the Triton kernels, split-K 1 and 2; the token rows by cp.async (16 real rows of a block)
    and by the gather launch's TMA boxes give the same bits, as do the block scales through the ring."""
    c = Case(fmt, F.BF16, A.SWIGLU, T=40, H=512, I=256, E=4, K=2, dtype=torch.bfloat16, seed=26)
    hidden, W, topk = make_case(c)
    ref = run_reference(hidden, W, topk, F.BF16)
    base = run_triton(hidden, W, topk, F.BF16)
    for split in (1, 2):
        got = _dec_call(hidden, W, topk, split=split)
        assert _rel(got, ref) <= 2e-2 and _rel(got, base) <= 4e-3, (split, _rel(got, ref), _rel(got, base))
        assert torch.equal(got, _dec_call(hidden, W, topk, split=split, x_gather=False))
        assert torch.equal(got, _dec_call(hidden, W, topk, split=split, scales_smem=True))


@gpu
def test_gpu_ws_fp4_dec_top1_weight_on_input_and_graph():
    """K = 1 with the routing weight on the input (GEMM2 writes the output directly) within the reference's bound;
    a CUDA graph of the automatic choice (split-K counters zeroed by the align launch) replays to the eager bits on
    new inputs."""
    c = Case(F.MXFP4, F.BF16, A.SWIGLU, T=5, H=512, I=256, E=4, K=1, offset=1, dtype=torch.bfloat16, seed=22)
    hidden, W, topk = make_case(c)
    got = _dec_call(hidden, W, topk, offset=1, woi=True)
    ref = run_reference(hidden, W, topk, F.BF16, offset=1, E_glob=c.E_glob, woi=True)
    assert _rel(got, ref) <= 2e-2
    c2 = Case(F.MXFP4, F.BF16, A.SWIGLU_OAI, T=3, H=512, I=256, E=8, K=4, bias=True, dtype=torch.bfloat16, seed=23)
    hidden, W, topk = make_case(c2)
    static = hidden.clone()
    prev = triton_moe.set_ws_fp4_decode(True)
    try:
        eager_new = None
        run_triton(static, W, topk, F.BF16)  # compile outside the capture
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = run_triton(static, W, topk, F.BF16)
        h2 = torch.randn_like(hidden)
        static.copy_(h2)
        g.replay()
        torch.cuda.synchronize()
        eager_new = run_triton(h2, W, topk, F.BF16)
    finally:
        triton_moe.set_ws_fp4_decode(*prev)
    assert torch.equal(out, eager_new)


@pytest.mark.parametrize("setter,env,default", [("set_ws_fp4_decode_early_weights", "FUSEDMOE_WS_FP4_DECODE_EARLYW", True),
                                                ("set_ws_fp4_decode_static_blocks", "FUSEDMOE_WS_FP4_DECODE_MSTATIC",
                                                 True)])
def test_ws_fp4_decode_bool_switches(setter, env, default):
    """The decode kernel's bit-neutral switches, both on by default: ``set_ws_fp4_decode_early_weights`` and
    ``set_ws_fp4_decode_static_blocks``; each returns the previous setting and takes a bool only."""
    fn = getattr(triton_moe, setter)
    prev = fn(not default)
    try:
        assert fn(default) is (not default)
        with pytest.raises(TypeError):
            fn(1)
    finally:
        fn(prev)
    if env not in os.environ:
        assert prev is default


@gpu
@pytest.mark.parametrize("switch", ["set_ws_fp4_decode_early_weights", "set_ws_fp4_decode_static_blocks"])
@pytest.mark.parametrize("shape,T,offset", [("gpt-oss-120b", 1, 0), ("nemotron-nano", 1, 0), ("small-ep", 5, 1),
                                            ("gpt-oss-120b", 8, 0)])
def test_gpu_ws_fp4_dec_switches_same_bits(switch, shape, T, offset):
    """Switches of the decode kernel that move no bits, each off against on, also from a CUDA graph's replay: GEMM2's
    early weights (``set_ws_fp4_decode_early_weights``, the default: the weights and scales of its first ring steps
    before its wait for GEMM1, the token boxes after -- the same copies into the same slots) and the units over the
    align's block bound (``set_ws_fp4_decode_static_blocks``: the blocks past the rows in use skipped by their -1).
    gpt-oss-120b (MXFP4, clamped SwiGLU with biases) at one and eight tokens (more blocks bound than in use),
    Nemotron-3-Nano (NVFP4 + ReLU^2) at one, and a small expert-parallel case (one local expert skipped; fewer ring
    steps a program than the ring holds: the catch-up after the loop) at five."""
    if shape == "gpt-oss-120b":
        c = Case(F.MXFP4, F.BF16, A.SWIGLU_OAI, T=T, H=2880, I=2880, E=32, K=4, bias=True, dtype=torch.bfloat16,
                 seed=27)
    elif shape == "nemotron-nano":
        c = Case(F.NVFP4, F.BF16, A.RELU2, T=T, H=2688, I=1856, E=32, K=6, dtype=torch.bfloat16, seed=28)
    else:
        c = Case(F.NVFP4, F.BF16, A.SWIGLU, T=T, H=512, I=256, E=4, K=2, offset=offset, dtype=torch.bfloat16,
                 seed=29)
    hidden, W, topk = make_case(c)
    setter = getattr(triton_moe, switch)
    was = setter(False)
    try:
        off = _dec_call(hidden, W, topk, offset=offset)
        setter(True)
        on = _dec_call(hidden, W, topk, offset=offset)
        static = hidden.clone()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = _dec_call(static, W, topk, offset=offset)
        h2 = torch.randn_like(hidden)
        static.copy_(h2)
        g.replay()
        torch.cuda.synchronize()
        eager_new = _dec_call(h2, W, topk, offset=offset)
    finally:
        setter(was)
    ref = run_reference(hidden, W, topk, F.BF16, offset=offset, E_glob=c.E_glob)
    assert _rel(on, ref) <= 2e-2 and torch.equal(on, off) and torch.equal(out, eager_new)


@gpu
@pytest.mark.parametrize("shape", ["gpt-oss-120b", "nemotron-nano"])
@pytest.mark.parametrize("T", [1, 8])
def test_gpu_ws_fp4_dec_model_shapes(shape, T):
    """gpt-oss-120b's expert shape (MXFP4, clamped SwiGLU with biases, H = I = 2880: 45 64-wide blocks, the last
    ring step half past K) and Nemotron-3-Nano's (NVFP4 + ReLU^2, H = 2688, I_pad = 1920) at one and eight tokens,
    32 experts: the automatic decode choice within the reference's bound and close to the Triton kernels; the block
    scales through the ring give its bits."""
    if shape == "gpt-oss-120b":
        c = Case(F.MXFP4, F.BF16, A.SWIGLU_OAI, T=T, H=2880, I=2880, E=32, K=4, bias=True, dtype=torch.bfloat16,
                 seed=24)
    else:
        c = Case(F.NVFP4, F.BF16, A.RELU2, T=T, H=2688, I=1856, E=32, K=6, dtype=torch.bfloat16, seed=25)
    hidden, W, topk = make_case(c)
    got = _dec_call(hidden, W, topk)
    ref = run_reference(hidden, W, topk, F.BF16)
    assert _rel(got, ref) <= 2e-2
    prev = triton_moe.set_ws_fp4_decode(False)  # the Triton GEMMs (by default one token runs the decode kernel)
    try:
        cap = {}
        base = run_triton(hidden, W, topk, F.BF16, capture=cap)
    finally:
        triton_moe.set_ws_fp4_decode(*prev)
    assert not cap["config"].gemm1.warp_specialized
    assert _rel(got, base) <= 4e-3
    if T == 1:  # the default choice at one token: the decode kernel, its bits
        cap = {}
        assert torch.equal(got, run_triton(hidden, W, topk, F.BF16, capture=cap))
        assert cap["config"].gemm1.warp_specialized and cap["config"].block_m == 16
    # the block scales through the ring: the same bits (gpt-oss-120b: 45 K blocks, the last step's clamp)
    assert torch.equal(got, _dec_call(hidden, W, topk, scales_smem=True))
    assert torch.equal(got, _dec_call(hidden, W, topk, thread_release=True))
