"""One shape: the Gluon warp-specialized promoted FP8 GEMM vs the plain Triton TMA kernel (non-WS)."""
import json, os, sys
sys.path.insert(0, os.path.dirname(__file__)); sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import torch, triton
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GDesc
from triton.tools.tensor_descriptor import TensorDescriptor
import gl_fp8, ws_kernel as W
from ws_bench import SHAPES, setup, tm
shape, T, gemm, which, ST = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
BN = 128
N, Kd, a, sa, w, sw, eob, nb, slots = setup(*SHAPES[shape], T, gemm, 128)
c = torch.empty(a.shape[0], N, device="cuda", dtype=torch.bfloat16)
w2 = w.view(-1, Kd)
if which == "gluon":
    ad = GDesc.from_tensor(a, [64, 128], gl.NVMMASharedLayout.get_default_for([64, 128], gl.float8e4nv))
    wd = GDesc.from_tensor(w2, [BN, 128], gl.NVMMASharedLayout.get_default_for([BN, 128], gl.float8e4nv))
    grid = (nb * triton.cdiv(N, BN),)
    f = lambda: gl_fp8.gl_fp8_gemm[grid](ad, wd, c, sa, sw, eob, N, Kd, c.stride(0), BN=BN, BK=128, STAGES=ST, num_warps=4)
else:
    ad = TensorDescriptor.from_tensor(a, [128, 128]); wd = TensorDescriptor.from_tensor(w2, [BN, 128])
    grid = (nb * triton.cdiv(N, BN),)
    f = lambda: W.ws_gemm2d[grid](ad, wd, c, sa, sw, eob, nb, N, Kd, c.stride(0), BM=128, BN=BN, BK=128, GROUP_M=8,
                                  WS=False, STAGES=ST, PROMOTE=True, num_warps=8, num_stages=ST)
t = tm(f)
errs = []
for blk in (0, nb // 2, nb - 1):
    e0 = int(eob[blk]); r0 = blk * 128
    refm = (a[r0:r0 + 128].float() * sa[r0:r0 + 128, None]) @ (w[e0].float() * sw[e0][:, None]).T
    errs.append(((c[r0:r0 + 128].float() - refm).pow(2).mean().sqrt() / refm.pow(2).mean().sqrt()).item())
print(json.dumps(dict(shape=shape, T=T, gemm=gemm, which=which, stages=ST, us=round(t, 1),
                      tflops=round(2.0 * slots * N * Kd / t * 1e-6), rms=max(errs))), flush=True)
