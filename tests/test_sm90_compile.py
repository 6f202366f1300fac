"""The BF16 / FP8 expert kernels (issue 3's paths: QUANT none / tensor / row / 128x128 block, every
intermediate mode, decode and prefill tiles) compile for sm_90 with Triton's bundled ptxas,
without register spills and on wgmma (HGMMA / QGMMA in the SASS). Needs no GPU: it guards the GPU path on machines that cannot run it.

Reuses the compile helpers of tests/test_triton_fp4.py's sm_90 script (``compile_kernel``,
``sass_of``) and replaces its variant table with the 16-bit / FP8 ones.
"""

from test_triton_fp4 import _SM90_SCRIPT, run_sm90_script

_VARIANTS = r'''
def gemm8(which, quant, **kw):
    """QUANT 0 NONE (bf16), 1 TENSOR, 2 ROW, 3 BLOCK (fp8 operands, fp32 scales): the fp4 script's gemm()."""
    val = "plain" if quant == 0 else "fp8"
    return gemm(which, val, val, quant=quant, **kw)


VARIANTS = {
    "g1 BF16 swiglu decode": lambda: gemm8(1, 0),
    "g1 BF16 relu2 prefill": lambda: gemm8(1, 0, act=3, gated=False, BM=128, BN=128, BK=64, nw=8, ns=3),
    "g2 BF16 decode K/N tails": lambda: gemm8(2, 0, BK=64, even=False),
    "g2 BF16 prefill": lambda: gemm8(2, 0, BM=128, BN=128, BK=64, nw=8, ns=3),
    "g1 FP8 tensor relu2 static-out": lambda: gemm8(1, 1, out_q=1, act=3, gated=False),
    "g1 FP8 row geglu": lambda: gemm8(1, 2, act=1),
    "g1 FP8 block swiglu block-out": lambda: gemm8(1, 3, out_q=2, BN=128),
    "g1 FP8 block swiglu block-out split-K 8": lambda: gemm8(1, 3, out_q=2, BN=128, split=8),
    # the FP8 re-quantization by reciprocals (triton_moe.set_reciprocal_quant; the two above divide)
    "g1 FP8 tensor relu2 static-out reciprocal": lambda: gemm8(1, 1, out_q=1, act=3, gated=False, rcp=True),
    "g1 FP8 block swiglu block-out reciprocal": lambda: gemm8(1, 3, out_q=2, BN=128, rcp=True),
    # a 16-bit intermediate with its max |h| reduced by the epilogue (dynamic per-tensor FP8 scale next)
    "g1 FP8 tensor swiglu plain-out amax": lambda: gemm8(1, 1, out_q=5),
    "g1 FP8 tensor relu2 prefill plain-out amax": lambda: gemm8(1, 1, out_q=5, act=3, gated=False, BM=128, BN=128,
                                                               nw=8, ns=4),
    "g1 BF16 swiglu decode split-K 4": lambda: gemm8(1, 0, split=4),
    "g2 FP8 tensor decode split-K 4": lambda: gemm8(2, 1, split=4),
    "g2 BF16 decode combine in GEMM2": lambda: gemm8(2, 0, fuse=True),
    "g2 FP8 tensor decode split-K 4 combine in GEMM2": lambda: gemm8(2, 1, split=4, fuse=True),
    # programmatic dependent launch (griddepcontrol wait / launch_dependents around the main loop)
    "g1 BF16 swiglu decode PDL": lambda: gemm8(1, 0, gdc=True),
    "g2 FP8 tensor PDL": lambda: gemm8(2, 1, gdc=True),
    "g1 FP8 block prefill": lambda: gemm8(1, 3, out_q=2, BM=64, BN=128, nw=8, ns=3),
    "g2 FP8 tensor": lambda: gemm8(2, 1),
    "g2 FP8 block prefill": lambda: gemm8(2, 3, BM=128, BN=128, nw=8, ns=3),
    # the Hopper prefill tiles of the heuristic (256 weight rows per program)
    "g1 BF16 swiglu prefill 2x128": lambda: gemm8(1, 0, BM=128, BN=128, BK=64, nw=8, ns=4),
    "g2 BF16 prefill 256": lambda: gemm8(2, 0, BM=128, BN=256, BK=64, nw=8, ns=4),
    "g1 BF16 relu2 prefill 256": lambda: gemm8(1, 0, act=3, gated=False, BM=128, BN=256, BK=64, nw=8, ns=4),
    "g1 FP8 tensor swiglu prefill 2x128": lambda: gemm8(1, 1, out_q=1, BM=128, BN=128, BK=128, nw=8, ns=4),
    "g1 FP8 row swiglu prefill 2x128": lambda: gemm8(1, 2, BM=128, BN=128, BK=128, nw=8, ns=4),
    # KernelConfig.fp8_fast_accum: 128 x 256 FP8 tiles without the promotion accumulator
    "g2 FP8 tensor prefill 256 fast-acc": lambda: gemm8(2, 1, BM=128, BN=256, BK=128, nw=8, ns=4, fast=True),
    "g2 FP8 row prefill 256 fast-acc": lambda: gemm8(2, 2, BM=128, BN=256, BK=128, nw=8, ns=4, fast=True),
    "g1 FP8 tensor relu2 prefill 256 fast-acc": lambda: gemm8(1, 1, out_q=1, act=3, gated=False, BM=128, BN=256,
                                                              BK=128, nw=8, ns=4, fast=True),
    # persistent GEMM2 (prefill: one flattened (tile, K-block) loop per program)
    "g2 BF16 prefill persistent": lambda: gemm8(2, 0, BM=128, BN=128, BK=64, nw=8, ns=4, pers=True),
    "g2 FP8 row prefill persistent": lambda: gemm8(2, 2, BM=64, BN=128, BK=128, nw=8, ns=3, pers=True),
    "g2 FP8 block prefill persistent PDL": lambda: gemm8(2, 3, BM=64, BN=128, nw=4, ns=3, pers=True, gdc=True),
    # short-K GEMM2 holding its activation tile across column tiles (KernelConfig.n_tiles)
    "g2 BF16 prefill held A": lambda: gemm8(2, 0, BM=128, BN=64, BK=256, nw=4, ns=3, nt=28),
    "g2 FP8 tensor prefill held A PDL": lambda: gemm8(2, 1, BM=64, BN=64, BK=256, nw=4, ns=3, nt=28, gdc=True),
    "g2 FP8 row prefill held A 8 warps K/N tails": lambda: gemm8(2, 2, BM=128, BN=128, BK=256, nw=8, ns=3, nt=14,
                                                                 even=False),
    "g2 FP8 block prefill held A two K-blocks": lambda: gemm8(2, 3, BM=64, BN=64, BK=128, nw=4, ns=3, nt=28, hk=2),
}

if __name__ == "__main__":
    for name, build in VARIANTS.items():
        sass, regs = sass_of(build())
        spills = len(re.findall(r"\b(?:LDL|STL)\b", sass))
        gmma = len(re.findall(r"\b[HQ]GMMA\b", sass))
        fchk = len(re.findall(r"\bFCHK\b", sass))  # div.rn's slow-path checks
        print(f"{name}|regs={regs}|spills={spills}|wgmma={gmma}|fchk={fchk}", flush=True)
'''


def test_bf16_fp8_kernels_compile_for_sm90_without_spills(tmp_path):
    head, sep, _ = _SM90_SCRIPT.partition('if __name__ == "__main__":')
    assert sep, "the fp4 test's script changed shape: update this test"
    rows = run_sm90_script(tmp_path, head + _VARIANTS)
    assert len(rows) == 36, rows
    # the per-row FP8 prefill tile sits at the 255-register limit: a couple of spill instructions
    # (measured: 2) are tolerated there, not the hundreds of a tile that does not fit
    allowed = {"g1 FP8 row swiglu prefill 2x128": 8}
    fchk = {}
    for name, regs, spills, wgmma, divs in rows:
        fchk[name] = int(divs.split("=")[1])
        assert int(spills.split("=")[1]) <= allowed.get(name, 0), (name, regs, spills)
        # Hopper's warpgroup MMA (HGMMA bf16 / QGMMA fp8), not the older HMMA path
        assert wgmma != "wgmma=0", (name, wgmma)
    # by reciprocals: the static scale's one division instead of one per value; the block format's
    # per-group divisions (scale and reciprocal) instead of per value
    assert fchk["g1 FP8 tensor relu2 static-out reciprocal"] <= 1 < fchk["g1 FP8 tensor relu2 static-out"], fchk
    assert fchk["g1 FP8 block swiglu block-out reciprocal"] < fchk["g1 FP8 block swiglu block-out"] // 2, fchk


_PROBE = r'''
import importlib.util
_spec = importlib.util.spec_from_file_location("fp4_stream_probe", os.path.join(BENCH_DIR, "fp4_stream_probe.py"))
P = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(P)
SIG = dict(w_ptr="*i16", s_ptr="*u8", x_ptr="*bf16", out_ptr="*fp32", K_STEPS="i32", K="i32", stride_w="i32",
           stride_s="i32", ROWS_T="constexpr", BK="constexpr", MODE="constexpr", TILED="constexpr")

if __name__ == "__main__":
    for mode, tiled in ((0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (2, 0), (2, 2), (3, 0), (3, 2), (4, 2)):
        for rows_t, bk in ((128, 64), (64, 128)):
            src = ASTSource(P._ladder, SIG, constexprs=dict(ROWS_T=rows_t, BK=bk, MODE=mode, TILED=tiled),
                            attrs={(i,): [["tt.divisibility", 16]] for i in (0, 1, 2, 3, 5, 6)})
            k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4, num_stages=4))
            sass, regs = sass_of(k)
            spills = len(re.findall(r"\b(?:LDL|STL)\b", sass))
            ldgsts = len(re.findall(r"LDGSTS\.E\.BYPASS\.128", sass))
            print(f"{mode} {int(tiled)} {rows_t} {bk}|spills={spills}|wgmma={len(re.findall(r'HGMMA', sass))}|"
                  f"cp128={ldgsts}", flush=True)
'''


def test_fp4_stream_probe_compiles_for_sm90(tmp_path):
    """benchmarks/fp4_stream_probe.py's ladder kernel (plain stream, + wgmma, the decode GEMM's K step
    through _blockscaled._load_tile) compiles for sm_90 in every mode, without spills, the MMA modes
    on wgmma: the probe a GPU session runs first does not rot between sessions."""
    import os

    head, sep, _ = _SM90_SCRIPT.partition('if __name__ == "__main__":')
    assert sep, "the fp4 test's script changed shape: update this test"
    bench = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
    rows = run_sm90_script(tmp_path, head + f"BENCH_DIR = {bench!r}\n" + _PROBE)
    assert len(rows) == 22, rows
    for name, spills, wgmma, cp128 in rows:
        assert spills == "spills=0", name
        assert (wgmma == "wgmma=0") == name.startswith("0 "), (name, wgmma)
        if name.startswith(("1 ", "2 ", "3 ", "4 ")):  # the wgmma modes' weight words arrive by 16-byte cp.async, any layout
            assert cp128 != "cp128=0", (name, cp128)


_QUANT = r'''
from fusedmoe.kernels import _quant as Q

ROW_SIG = dict(x_ptr="*bf16", q_ptr="*fp8e4nv", s_ptr="*fp32", src_ptr="*fp32", T="i32", stride_x="i32",
               stride_q="i32")
GROUP_SIG = dict(x_ptr="*bf16", q_ptr="*fp8e4nv", s_ptr="*fp32", T="i32", C="i32", stride_x="i32", stride_q="i32",
                 stride_s="i32", rows_ptr="*i32")

if __name__ == "__main__":
    for rcp in (False, True):
        for name, fn, sig, cx, nw in (
                ("row decode", Q._fp8_row_kernel, ROW_SIG,
                 dict(C=1856, SCALE_MODE=2, OUT_FP32=False, BLOCK_T=1, BLOCK_C=2048), 8),
                ("row chunked", Q._fp8_row_kernel, ROW_SIG,
                 dict(C=14336, SCALE_MODE=2, OUT_FP32=False, BLOCK_T=1, BLOCK_C=2048), 8),
                ("group", Q._fp8_group_kernel, GROUP_SIG,
                 dict(GROUP=128, MX=False, OUT_FP32=False, BLOCK_T=2, BLOCK_G=8, ROWS_FROM_PTR=False), 4)):
            k = compile_kernel(fn, sig, dict(cx, RCP_DIV=rcp), nw, 1)
            sass, regs = sass_of(k)
            spills = len(re.findall(r"\b(?:LDL|STL)\b", sass))
            fchk = len(re.findall(r"\bFCHK\b", sass))
            print(f"{name} {'rcp' if rcp else 'div'}|spills={spills}|fchk={fchk}", flush=True)
'''


def test_fp8_quantizers_compile_for_sm90_with_reciprocals(tmp_path):
    """The FP8 activation quantizers (per token, in column chunks, 1 x 128 groups) compile for sm_90
    without spills, and with ``RCP_DIV`` (what compiled launches of 16-bit x with dynamic scales use:
    ``triton_quant._rcp_div``) keep only the per-scale divisions -- fewer ``FCHK`` (div.rn's slow-path
    checks) than the per-value IEEE divisions."""
    head, sep, _ = _SM90_SCRIPT.partition('if __name__ == "__main__":')
    assert sep, "the fp4 test's script changed shape: update this test"
    rows = {name: dict(kv.split("=") for kv in rest) for name, *rest in run_sm90_script(tmp_path, head + _QUANT)}
    assert len(rows) == 6, rows
    for name, r in rows.items():
        assert r["spills"] == "0", (name, r)
    for name in ("row decode", "row chunked", "group"):
        assert int(rows[f"{name} rcp"]["fchk"]) < int(rows[f"{name} div"]["fchk"]), (name, rows)


_PADDED_SCALES = r'''
def main_loop(sass):
    """The instructions of the longest backward branch's body (the K loop)."""
    ins = re.findall(r"/\*([0-9a-f]{4,5})\*/\s+((?:@!?U?P\w+\s+)?[A-Z][^;]*);", sass)
    addr = [int(a, 16) for a, _ in ins]
    best = (0, -1)
    for i, (_, t) in enumerate(ins):
        m = re.search(r"BRA (?:`\(\.L_x_\d+\) )?0x([0-9a-f]+)", t)
        if m and int(m.group(1), 16) < addr[i]:
            j = addr.index(int(m.group(1), 16))
            if i - j > best[1] - best[0]:
                best = (j, i)
    return [t for _, t in ins[best[0]:best[1] + 1]]

def loop_stats(name, k, **pats):
    """One ``name|spills=..|loop=..|hgmma=..|<key>=..`` line for kernel ``k``: its spills, then counts in its main
    loop (instructions, HGMMAs, and those matching each regex in ``pats``, predicates allowed)."""
    sass, regs = sass_of(k)
    loop = main_loop(sass)
    spills = len(re.findall(r"\b(?:LDL|STL)\b", sass))
    line = f"{name}|spills={spills}|loop={len(loop)}|hgmma={sum('HGMMA' in t for t in loop)}"
    pred = r"(?:@!?U?P\w+\s+)?"
    for key, pat in pats.items():
        n = sum(1 for t in loop if re.match(pred + pat, t))
        line += f"|{key}={n}"
    print(line, flush=True)

if __name__ == "__main__":
    base = NODIV
    for rows in ("unpadded", "padded"):
        # the scales' row stride: 84 / 90 bytes (K / 32 of real shapes) carry no divisibility hint,
        # rows padded to 16 bytes (ExpertWeights) carry Triton's 16
        NODIV = base + (("stride_wsn",) if rows == "unpadded" else ())
        k = gemm(1, "mxfp4", "plain", BK=128, act=2, bias=True, tiled=128, cvt=2, wsk1=True)
        sass, regs = sass_of(k)
        loop = main_loop(sass)
        spills = len(re.findall(r"\b(?:LDL|STL)\b", sass))
        narrow = sum(1 for t in loop if re.match(r"(?:@!?U?P\w+\s+)?LDG\.E\.(?:U8|U16)\b", t))
        cp4 = sum(1 for t in loop if re.match(r"(?:@!?U?P\w+\s+)?LDGSTS\.E\s", t))
        bars = sum(1 for t in loop if "BAR.SYNC" in t)
        print(f"{rows}|spills={spills}|narrow={narrow}|cp4={cp4}|bars={bars}|hgmma={sum('HGMMA' in t for t in loop)}",
              flush=True)
'''


def test_padded_mx_scale_rows_are_copied_ahead_for_sm90(tmp_path):
    """MXFP4 decode GEMM1 (128-wide K steps: 4 scale bytes per row): with scale rows a multiple of
    16 bytes apart (ExpertWeights' padded rows) Triton's pipeline copies each row's 4 bytes ahead
    by cp.async (``LDGSTS.E``) and reads them into the dequantized tile's layout; with rows 84 or
    90 bytes apart (no divisibility hint) every K step loads its scale bytes one by one
    (``LDG.E.U8`` in the loop) and moves them through shared memory behind one more barrier."""
    head, sep, _ = _SM90_SCRIPT.partition('if __name__ == "__main__":')
    assert sep, "the fp4 test's script changed shape: update this test"
    rows = run_sm90_script(tmp_path, head + _PADDED_SCALES)
    assert len(rows) == 2, rows
    got = {name: dict(f.split("=") for f in fields) for name, *fields in rows}
    un, pad = got["unpadded"], got["padded"]
    assert un["spills"] == pad["spills"] == "0", got
    assert int(un["narrow"]) > 0 and int(pad["narrow"]) == 0 and int(pad["cp4"]) > 0, got
    assert int(pad["bars"]) < int(un["bars"]), got
    assert pad["hgmma"] == un["hgmma"] != "0", got


_SWIZZLED = r'''
def loop_ops(sass):
    ins = main_loop(sass)
    alu = sum(1 for t in ins if re.match(r"(?:@!?U?P\w+\s+)?(?:LOP3|LEA|SHF|PRMT|IADD3)\b", t))
    return len(ins), alu

if __name__ == "__main__":
    for swz in (False, True):
        k = gemm(1, "mxfp4", "plain", BK=128, ns=5, act=2, bias=True, tiled=128, cvt=2, wsk1=True, swz=swz)
        sass, regs = sass_of(k)
        n, alu = loop_ops(sass)
        spills = len(re.findall(r"\b(?:LDL|STL)\b", sass))
        hgmma = sum("HGMMA" in t for t in main_loop(sass))
        print(f"{'swizzled' if swz else 'tiled'}|spills={spills}|loop={n}|alu={alu}|hgmma={hgmma}", flush=True)
'''


def _main_loop_counts(tmp_path, script: str, n_rows: int) -> dict:
    """Run ``script``'s main block on the fp4 test's compile helpers plus ``main_loop``; its ``name|key=int|...``
    lines as {name: {key: int}} (``n_rows`` of them)."""
    head, sep, _ = _SM90_SCRIPT.partition('if __name__ == "__main__":')
    assert sep, "the fp4 test's script changed shape: update this test"
    main_loop_src = _PADDED_SCALES.partition('if __name__ == "__main__":')[0]
    rows = run_sm90_script(tmp_path, head + main_loop_src + script)
    assert len(rows) == n_rows, rows
    return {name: {k: int(v) for k, v in (f.split("=") for f in fields)} for name, *fields in rows}


def test_swizzled_fp4_values_convert_in_fewer_instructions_for_sm90(tmp_path):
    """gpt-oss-120b's MXFP4 decode GEMM1 (128-wide K steps, 64-row tiles, the folded MX scales): with
    the FP4 words bit-swizzled (ExpertWeights' "swizzled" layout) the main loop is at least 12 %
    shorter and runs at least 25 % fewer integer-pipe instructions (LOP3 / LEA / SHF / PRMT / IADD3)
    than with the tiled layout's plain nibbles (Triton 3.6: 410 -> 346 instructions per K step, 192 -> 128
    of them on the integer pipe), the same MMAs, no spills."""
    got = _main_loop_counts(tmp_path, _SWIZZLED, 2)
    tiled, swz = got["tiled"], got["swizzled"]
    assert tiled["spills"] == swz["spills"] == 0, got
    assert swz["hgmma"] == tiled["hgmma"] > 0, got
    assert swz["loop"] <= 0.88 * tiled["loop"], got
    assert swz["alu"] <= 0.75 * tiled["alu"], got


_BLOCK_W1 = _VARIANTS.partition("VARIANTS = {")[0] + r'''
if __name__ == "__main__":
    for name, k in (("g1 block", gemm8(1, 3, BM=64, BN=128, nw=8, ns=4)), ("g1 tensor", gemm8(1, 1, BM=64, BN=128,
                                                                                           nw=8, ns=4)),
                    ("g1 block vector", gemm8(1, 3, BM=64, BN=128, nw=8, ns=4, blkw1=False)),
                    ("g2 block", gemm8(2, 3, BM=64, BN=128, nw=4, ns=4)), ("g1 block decode", gemm8(1, 3, BN=128))):
        loop_stats(name, k, fmul=r"FMUL\b", ffma=r"FFMA\b", ldg=r"LDG\.", qgmma=r"QGMMA\b")
'''


def test_fp8_block_tiles_read_one_weight_scale_for_sm90(tmp_path):
    """The Triton FP8 128 x 128 block GEMMs with tiles of at most 128 weight rows (``_moe_gemm._block_w_ptrs``): each K
    block loads one weight scale and multiplies it into the rows' activation scales instead of a 128-vector into
    every product -- the tuned table's 64 x 128 gated prefill tile at 189 instructions a K block against the per
    tensor tile's 180 (the scale vector: 328, 64 FMUL, 34 LDG), GEMM2 169 (256), the decode tile 209 (253); one
    FFMA a product either way (the partial times ``a_s * w_s`` plus the sum: ptxas contracts the multiply-add),
    hence the same bits; no spills."""
    got = _main_loop_counts(tmp_path, _BLOCK_W1, 5)
    blk, ten, vec = got["g1 block"], got["g1 tensor"], got["g1 block vector"]
    assert all(v["spills"] == 0 for v in got.values()), got
    assert blk["loop"] <= ten["loop"] + 16 and blk["fmul"] <= 4 and blk["ldg"] <= 4 and blk["ffma"] == 64, got
    assert vec["loop"] >= blk["loop"] + 100 and vec["fmul"] == 64 and vec["ffma"] == 64, got  # set_block_w1(False)
    assert got["g2 block"]["loop"] <= 190 and got["g2 block"]["fmul"] <= 4 and got["g2 block"]["ffma"] == 64, got
    assert got["g1 block decode"]["fmul"] <= 8 and got["g1 block decode"]["ffma"] == 32, got


_K_TAIL = r'''
if __name__ == "__main__":
    for name, kw in (("bk64", dict(BK=64)), ("tail", dict(BK=128, ktail=64))):
        k = gemm(1, "mxfp4", "plain", ns=5, act=2, bias=True, tiled=64, cvt=2, wsk1=True, swz=True, **kw)
        loop_stats(name, k, v128=r"LDGSTS\.E\.BYPASS\.128\b")
'''


def test_k_tail_steps_gpt_oss_decode_in_fewer_instructions_for_sm90(tmp_path):
    """gpt-oss-120b's MXFP4 decode GEMM1 (K = 2880 = 22 x 128 + 64, values tiled by 64): 128-wide K steps read
    across two tiles plus one 64-wide tail step (K_TAIL) need at least 10 % fewer main-loop instructions per weight
    value than 64-wide steps (Triton 3.6: 348 per 128 values against 202 per 64), with twice the MMAs and the
    16-byte cp.async copies of a step, and no spills."""
    got = _main_loop_counts(tmp_path, _K_TAIL, 2)
    b64, tail = got["bk64"], got["tail"]
    assert b64["spills"] == tail["spills"] == 0, got
    assert tail["hgmma"] == 2 * b64["hgmma"] > 0 and tail["v128"] == 2 * b64["v128"] > 0, got
    assert tail["loop"] <= 0.9 * 2 * b64["loop"], got


_DOT_ORDER = r'''
if __name__ == "__main__":
    for name, aperm in (("permute", False), ("dot_order", True)):
        k = gemm(1, "mxfp4", "plain", act=2, bias=True, BM=128, BK=64, ns=4, tiled=64, cvt=2, wsk1=True, swz=True,
                 swap=True, aperm=aperm)
        loop_stats(name, k, sts=r"STS\b")
'''


def test_dot_order_activations_skip_the_register_permutation_for_sm90(tmp_path):
    """gpt-oss-120b's MXFP4 prefill GEMM1 as W @ A^T (128 token rows, 64-wide K steps, swizzled words): with the
    activations stored in the dot order (``A_PERMUTED``) the activation tile goes from cp.async to wgmma as loaded
    -- the 32 shared-memory stores of its register permutation leave the main loop -- and the loop is at least
    10 % shorter (Triton 3.6: 281 -> 233 instructions a K step, 34 -> 2 STS), the same MMAs, no spills."""
    got = _main_loop_counts(tmp_path, _DOT_ORDER, 2)
    perm, dot = got["permute"], got["dot_order"]
    assert perm["spills"] == dot["spills"] == 0, got
    assert dot["hgmma"] == perm["hgmma"] > 0, got
    assert perm["sts"] - dot["sts"] >= 32, got
    assert dot["loop"] <= 0.9 * perm["loop"], got


_ALIGN = r'''
from fusedmoe.kernels import _align as AL

if __name__ == "__main__":
    for E, CH, BM in ((16, 32, 16), (512, 32, 16), (512, 256, 16), (512, 32, 128)):
        k = compile_kernel(AL._align_scatter_kernel, dict(topk_ids_ptr="*i32", counts_ptr="*i32",
                           sorted_ids_ptr="*i32", block_expert_ptr="*i32", num_post_padded_ptr="*i32",
                           zero_ptr="*i32"),
                           dict(E_LOC=E, INCLUDE_NONLOCAL=False, NUM_BINS=max(16, 1 << (E - 1).bit_length()),
                                CHUNK=CH, BLOCK_M=BM, SINGLE=True, CHUNKS_PER_ITER=1, BLOCKS_PER_ITER=16,
                                USE_GDC=True, ZERO_BLOCK=64), 4, 1)
        sass, regs = sass_of(k)
        n = len(re.findall(r"/\*[0-9a-f]{4,5}\*/\s+[A-Z@]", sass))
        print(f"{E} {CH} {BM}|{regs}|{len(re.findall(r'(?:LDL|STL)', sass))}|{n}", flush=True)
'''


def test_decode_align_does_not_grow_with_the_experts_for_sm90(tmp_path):
    """The one-program align (decode) works in slot space (``_align._align_single``): compiled for sm_90, 32 slots
    over 512 experts take about the instructions and registers of 32 slots over 16 (Triton 3.6: 512 experts with
    the per-group histogram, prefix sum and [groups, 128]-row sentinel store took 1400 instructions and 164 registers;
    now ~600 and 40), no spills."""
    head, sep, _ = _SM90_SCRIPT.partition('if __name__ == "__main__":')
    assert sep, "the fp4 test's script changed shape: update this test"
    rows = {name: [int(v) for v in rest] for name, *rest in run_sm90_script(tmp_path, head + _ALIGN)}
    assert len(rows) == 4, rows
    for name, (regs, spills, n) in rows.items():
        assert spills == 0 and regs <= 64, (name, rows[name])
    small, big = rows["16 32 16"], rows["512 32 16"]
    assert big[2] <= 1.1 * small[2] and big[0] <= small[0] + 8, rows


_ALIGN_TRIGGER = r'''
from fusedmoe.kernels import _align as AL

if __name__ == "__main__":
    ids = dict(topk_ids_ptr="*i32", counts_ptr="*i32", sorted_ids_ptr="*i32", block_expert_ptr="*i32",
               num_post_padded_ptr="*i32")
    meta = dict(E_LOC=128, INCLUDE_NONLOCAL=False, NUM_BINS=128, CHUNK=32, BLOCK_M=16, BLOCKS_PER_ITER=16,
                ZERO_BLOCK=0)
    quant = dict(x_ptr="*bf16", q_ptr="*fp8e4nv", s_ptr="*fp32", src_ptr="*fp32")
    qmeta = dict(C=2048, GROUPS=False, SCALE_MODE=0, GROUP=128, MX=False, OUT_FP32=False, BLOCK_T=1, BLOCK_C=2048,
                 RCP_DIV=False, DOT_ROWS=False)
    for gdc in (False, True):
        for early in (False, True):
            k1 = compile_kernel(AL._align_scatter_kernel, ids, dict(meta, SINGLE=True, CHUNKS_PER_ITER=1,
                                USE_GDC=gdc, EARLY_TRIGGER=early), 4, 1)
            k2 = compile_kernel(AL._align_scatter_quant_kernel, dict(ids, **quant), dict(meta, **qmeta,
                                USE_GDC=gdc, EARLY_TRIGGER=early), 4, 1)
            for name, k in (("scatter", k1), ("quant", k2)):
                ptx = k.asm["ptx"]
                ops = re.findall(r"griddepcontrol\.(wait|launch_dependents)", ptx)
                print(f"{name} {int(gdc)} {int(early)}|{' '.join(ops) or '-'}", flush=True)
'''


def test_align_early_trigger_for_sm90(tmp_path):
    """``set_align_early_trigger``: the one-program align launches (plain and with the fused quantizer) compiled
    for sm_90 call ``griddepcontrol.launch_dependents`` right after ``griddepcontrol.wait`` with ``EARLY_TRIGGER``
    under programmatic dependent launch, and only the wait without it (the next grid then launches as the align's
    programs exit); without programmatic dependent launch neither."""
    head, sep, _ = _SM90_SCRIPT.partition('if __name__ == "__main__":')
    assert sep, "the fp4 test's script changed shape: update this test"
    rows = dict(run_sm90_script(tmp_path, head + _ALIGN_TRIGGER))
    assert len(rows) == 8, rows
    for name in ("scatter", "quant"):
        assert rows[f"{name} 0 0"] == rows[f"{name} 0 1"] == "-", rows
        assert rows[f"{name} 1 0"] == "wait", rows
        assert rows[f"{name} 1 1"] == "wait launch_dependents", rows


_ALIGN_DOT_ROWS = r'''
from fusedmoe.kernels import _align as AL

if __name__ == "__main__":
    ids = dict(topk_ids_ptr="*i32", sorted_ids_ptr="*i32", block_expert_ptr="*i32", num_post_padded_ptr="*i32")
    meta = dict(E_LOC=128, INCLUDE_NONLOCAL=False, NUM_BINS=128, CHUNK=32, BLOCK_M=16, BLOCKS_PER_ITER=16,
                ZERO_BLOCK=0, USE_GDC=True, EARLY_TRIGGER=True)
    rows = dict(x_ptr="*bf16", q_ptr="*bf16", s_ptr="*bf16", src_ptr="*bf16")
    for C, BT, BC in ((2880, 1, 512), (1024, 4, 512), (2688, 8, 512)):
        qmeta = dict(C=C, GROUPS=False, SCALE_MODE=0, GROUP=0, MX=False, OUT_FP32=False, BLOCK_T=BT, BLOCK_C=BC,
                     RCP_DIV=False, DOT_ROWS=True)
        k = compile_kernel(AL._align_scatter_quant_kernel, dict(ids, **rows), dict(meta, **qmeta), 4, 1)
        sass, regs = sass_of(k)
        print(f"{C} {BT}|{regs}|{len(re.findall(r'(?:LDL|STL)', sass))}", flush=True)
'''


def test_align_dot_rows_for_sm90(tmp_path):
    """The decode align launch with the FP4 decode kernel's dot-order copy of hidden (``DOT_ROWS``: one row block x
    512-column tile a program, fiftieth session) compiles for sm_90 at gpt-oss-120b's, Nemotron-3-Super's and
    Nemotron-3-Nano's hidden sizes and 1-8 rows a program, within the align's register budget and without spills."""
    head, sep, _ = _SM90_SCRIPT.partition('if __name__ == "__main__":')
    assert sep, "the fp4 test's script changed shape: update this test"
    rows = dict((name, [int(v) for v in rest]) for name, *rest in run_sm90_script(tmp_path, head + _ALIGN_DOT_ROWS))
    assert len(rows) == 3, rows
    for name, (regs, spills) in rows.items():
        assert spills == 0 and regs <= 64, (name, regs, spills)


def test_dot_order_repro_keeps_the_failing_structure_for_sm90(tmp_path):
    """``benchmarks/dot_order_repro.py`` (the next device session's repro of the dot-order activations' 8-warp
    failure without FP4) compiles for sm_90 into the structure of the failing kernel: register A, the cp.async token
    tile transposed in place as B, four wgmmas a K step, the two warpgroups splitting M at 8 warps."""
    import os

    bench = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks",
                         "dot_order_repro.py")
    head, sep, _ = _SM90_SCRIPT.partition('if __name__ == "__main__":')
    assert sep, "the fp4 test's script changed shape: update this test"
    script = head + f'''
import runpy
if __name__ == "__main__":
    mod = runpy.run_path({bench!r})
    mod["_compile_only"]()
'''
    lines = [" ".join(r) for r in run_sm90_script(tmp_path, script)]
    assert len(lines) == 4, lines
    assert "warpsPerCTA = [4, 1]" in lines[0] and "warpsPerCTA = [8, 1]" in lines[2], lines
    for ln in (lines[1], lines[3]):
        assert "warp_group_dot 4" in ln and "memdesc_trans 1" in ln and "register A True" in ln, lines


_SCALE_RUNS = r'''
if __name__ == "__main__":
    # gpt-oss-120b's shipped decode GEMM1 (joined 2 x 64 rows, 64-wide K steps: 2 MX scale bytes a row) and GEMM2
    # tile of 128 rows, with each step's own scale bytes and with 4-byte runs (W_SRUN)
    g1 = dict(act=2, bias=True, BK=64, split=2, ns=5, swz=True, cvt=2, wsk1=True, tiled=64)
    g2 = dict(BN=128, BK=64, ns=5, swz=True, cvt=2, wsk1=True, tiled=64)
    for name, which, kw in (("g1", 1, g1), ("g2", 2, g2)):
        for srun in (0, 4):
            loop_stats(f"{name}-{srun}", gemm(which, "mxfp4", "plain", srun=srun, **kw),
                       narrow=r"LDG\.E\.(?:U8|U16)\b", cp4=r"LDGSTS\.E\s", bars=r"BAR\.SYNC")
'''


def test_scale_runs_are_copied_ahead_for_sm90(tmp_path):
    """MXFP4 decode tiles of 64-wide K steps (2 scale bytes a row: too few for Triton's pipeline) load every step's
    scale bytes from memory in the loop (``LDG.E.U16`` / ``U8``); read in 4-byte runs (``W_SRUN``, what the launcher
    chooses for gpt-oss-120b's tiles of 128 weight rows) they are copied ahead by cp.async (``LDGSTS.E``), with one
    barrier less a step, the same MMAs, no spills and at most 8 % more instructions (Triton 3.6: GEMM1 206 -> 206,
    GEMM2 202 -> 205)."""
    got = _main_loop_counts(tmp_path, _SCALE_RUNS, 4)
    for g in ("g1", "g2"):
        steps, runs = got[f"{g}-0"], got[f"{g}-4"]
        assert steps["spills"] == runs["spills"] == 0, got
        assert steps["narrow"] > 0 and runs["narrow"] == 0 and runs["cp4"] > steps["cp4"], got
        assert runs["bars"] < steps["bars"] and runs["hgmma"] == steps["hgmma"] > 0, got
        assert runs["loop"] <= 1.08 * steps["loop"], got
