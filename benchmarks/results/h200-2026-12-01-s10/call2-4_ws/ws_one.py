"""One variant, one shape, in its own process (a hang costs only its timeout)."""
import json, os, sys
sys.path.insert(0, os.path.dirname(__file__))
import torch, triton
from triton.tools.tensor_descriptor import TensorDescriptor
import ws_kernel as W
from ws_bench import SHAPES, setup, tm
shape, T, gemm, kern, BM, BN, warps, stages, WS = sys.argv[1:10]
T, BM, BN, warps, stages, WS = int(T), int(BM), int(BN), int(warps), int(stages), WS == "1"
N, Kd, a, sa, w, sw, eob, nb, slots = setup(*SHAPES[shape], T, gemm, BM)
ad = TensorDescriptor.from_tensor(a, [BM, 128])
if kern == "2d":
    fn = W.ws_gemm2d; wd = TensorDescriptor.from_tensor(w.view(-1, Kd), [BN, 128])
else:
    fn = W.ws_gemm; wd = TensorDescriptor.from_tensor(w, [1, BN, 128])
c = torch.empty(a.shape[0], N, device="cuda", dtype=torch.bfloat16)
grid = (nb * triton.cdiv(N, BN),)
f = lambda: fn[grid](ad, wd, c, sa, sw, eob, nb, N, Kd, c.stride(0), BM=BM, BN=BN, BK=128, GROUP_M=8,
                     WS=WS, STAGES=stages, PROMOTE=True, num_warps=warps, num_stages=stages)
t = tm(f)
e0 = int(eob[0]); r = BM
refm = (a[:r].float() * sa[:r, None]) @ (w[e0].float() * sw[e0][:, None]).T
err = ((c[:r].float() - refm).pow(2).mean().sqrt() / refm.pow(2).mean().sqrt()).item()
print(json.dumps(dict(shape=shape, T=T, gemm=gemm, kern=kern, BM=BM, BN=BN, warps=warps, stages=stages, WS=WS,
                      us=round(t, 1), tflops=round(2.0 * slots * N * Kd / t * 1e-6), rms=err)), flush=True)
