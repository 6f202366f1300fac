import os, re, subprocess, sys, tempfile
os.environ.pop("TRITON_INTERPRET", None)
sys.path.insert(0, os.path.dirname(__file__))
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource
import gl_fp8
BIN = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
for BN, ST in ((128, 4), (128, 3), (256, 3)):
    al = gl.NVMMASharedLayout.get_default_for([64, 128], gl.float8e4nv)
    wl = gl.NVMMASharedLayout.get_default_for([BN, 128], gl.float8e4nv)
    sig = {"a_desc": f"tensordesc<fp8e4nv[64, 128],{al}>", "w_desc": f"tensordesc<fp8e4nv[{BN}, 128],{wl}>",
           "c_ptr": "*bf16", "a_s_ptr": "*fp32", "w_s_ptr": "*fp32", "expert_ptr": "*i32", "N": "i32", "K": "i32", "stride_c": "i32",
           "BN": "constexpr", "BK": "constexpr", "STAGES": "constexpr"}
    try:
        src = GluonASTSource(gl_fp8.gl_fp8_gemm, sig, constexprs={"BN": BN, "BK": 128, "STAGES": ST}, attrs={})
        k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))
    except Exception as ex:
        import traceback; traceback.print_exc(); break
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(k.asm["cubin"])
    sass = subprocess.run([os.path.join(BIN, "cuobjdump"), "-sass", f.name], capture_output=True, text=True).stdout
    res = subprocess.run([os.path.join(BIN, "cuobjdump"), "-res-usage", f.name], capture_output=True, text=True).stdout
    print(BN, ST, "regs", re.search(r"REG:(\d+)", res).group(1), "QGMMA", sass.count("QGMMA"), "USETMAXREG", sass.count("USETMAXREG"),
          "LDL", sass.count("LDL"), "smem", k.metadata.shared, "warps", k.metadata.num_warps)
