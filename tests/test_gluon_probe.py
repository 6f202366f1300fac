"""The Gluon prototypes of the warp-specialized promoted FP8 GEMM and of the gated GEMM1 with SwiGLU
(benchmarks/gluon/gl_fp8.py, issue 3's lead for FP8 prefill) compile for sm_90 with Triton's bundled
ptxas -- no GPU needed -- as a
warp-specialized kernel: two MMA warpgroups and a loader (12 warps after rounding), register
reallocation, FP8 wgmma, no spills, shared memory within Hopper's 227 KB. Its speed and results
are measured on the H200 by benchmarks/gluon/gluon_fp8_probe.py (not in CI: it needs the GPU)."""

import os

import pytest

from test_triton_fp4 import run_sm90_script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_SCRIPT = r'''
import os, re, subprocess, sys, tempfile
os.environ.pop("TRITON_INTERPRET", None)
sys.path.insert(0, os.path.join(ROOT, "benchmarks", "gluon"))
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource
import gl_fp8
BIN = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
# (stages, GROUP_M, GATED, BN): the plain GEMM, and the gated GEMM1 (SwiGLU epilogue) at 64 columns
for ST, GM, GATED, BN in ((4, 1, False, 128), (4, 8, False, 128), (3, 8, False, 128), (4, 8, True, 64)):
    al = gl.NVMMASharedLayout.get_default_for([64, 128], gl.float8e4nv)
    wl = gl.NVMMASharedLayout.get_default_for([BN, 128], gl.float8e4nv)
    sig = {"a_desc": f"tensordesc<fp8e4nv[64, 128],{al}>", "w_desc": f"tensordesc<fp8e4nv[{BN}, 128],{wl}>",
           "c_ptr": "*bf16", "a_s_ptr": "*fp32", "w_s_ptr": "*fp32", "expert_ptr": "*i32", "num_m": "i32",
           "N": "i32", "K": "i32", "stride_c": "i32",
           "BN": "constexpr", "BK": "constexpr", "STAGES": "constexpr", "GROUP_M": "constexpr", "GATED": "constexpr"}
    src = GluonASTSource(gl_fp8.gl_fp8_gemm, sig, constexprs={"BN": BN, "BK": 128, "STAGES": ST, "GROUP_M": GM,
                                                              "GATED": GATED}, attrs={})
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(k.asm["cubin"])
    sass = subprocess.run([os.path.join(BIN, "cuobjdump"), "-sass", f.name], capture_output=True, text=True).stdout
    os.unlink(f.name)
    print(ST, GM, GATED, k.metadata.num_warps, sass.count("QGMMA"), sass.count("USETMAXREG"),
          sass.count("LDL") + sass.count("STL"), k.metadata.shared, sep="|")
# the probe's plain Triton baseline, without and with Triton's own warp specialization
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from triton.compiler import ASTSource
import gluon_fp8_probe
plain = gluon_fp8_probe._plain_kernel()
for ws, warps in ((False, 8), (True, 4)):
    sig = {"a_desc": "tensordesc<fp8e4nv[128,128]>", "w_desc": "tensordesc<fp8e4nv[128,128]>", "c_ptr": "*bf16",
           "a_s_ptr": "*fp32", "w_s_ptr": "*fp32", "expert_ptr": "*i32", "N": "i32", "K": "i32", "stride_c": "i32",
           "BM": "constexpr", "BN": "constexpr", "BK": "constexpr", "STAGES": "constexpr", "WS": "constexpr"}
    cx = dict(BM=128, BN=128, BK=128, STAGES=4, WS=ws)
    k = triton.compile(ASTSource(plain, sig, constexprs=cx, attrs={}), target=GPUTarget("cuda", 90, 32),
                       options=dict(num_warps=warps, num_stages=4))
    print("plain", ws, k.metadata.num_warps, sep="|")
'''


def test_gluon_fp8_prototype_compiles_for_sm90(tmp_path):
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    rows = run_sm90_script(tmp_path, f"ROOT = {ROOT!r}\n" + _SCRIPT)
    assert len(rows) == 6, rows
    # the probe's plain baseline: 8 warps unspecialized; Triton's warp specialization adds a
    # producer warpgroup to the 4 given (the variant that hung on the H200)
    assert rows[4:] == [["plain", "False", "8"], ["plain", "True", "12"]], rows[4:]
    assert [r[2] for r in rows[:4]] == ["False", "False", "False", "True"], rows[:4]
    for stages, group_m, gated, warps, qgmma, setmaxnreg, spills, smem in rows[:4]:
        where = f"STAGES={stages} GROUP_M={group_m} GATED={gated}"
        assert int(warps) == 12, where  # 4 (MMA) + 4 (MMA) + 1 (loader), rounded to warpgroups
        assert int(qgmma) > 0, f"{where}: no FP8 wgmma in the SASS"
        assert int(setmaxnreg) > 0, f"{where}: no register reallocation between the partitions"
        assert int(spills) == 0, f"{where}: {spills} local loads / stores"
        assert int(smem) <= 227 * 1024, f"{where}: {smem} bytes of shared memory"
