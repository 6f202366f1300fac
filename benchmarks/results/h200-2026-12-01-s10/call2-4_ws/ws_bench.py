"""Device: the WS / non-WS TMA grouped FP8 GEMM probe on the harness prefill shapes."""
import json, os, sys
sys.path.insert(0, os.path.dirname(__file__))
import torch, triton
from triton.tools.tensor_descriptor import TensorDescriptor
from ws_kernel import ws_gemm
FP8 = torch.float8_e4m3fn
SHAPES = {"dsv3": (7168, 2048, 256, 8, True), "dsv3_tp8": (7168, 256, 256, 8, True),
          "qwen3_30b_a3b": (2048, 768, 128, 8, True), "minimax_m2.5": (3072, 1536, 256, 8, True),
          "mixtral": (4096, 14336, 8, 2, True), "nemotron": (2688, 1856, 128, 6, False)}
VARIANTS = [  # name, BM, BN, warps, stages, WS, GROUP_M
    ("base8w", 128, 128, 8, 4, False, 8), ("ws", 128, 128, 4, 4, True, 8), ("ws_s3", 128, 128, 4, 3, True, 8),
    ("ws_s5", 128, 128, 4, 5, True, 8), ("ws_bm64", 64, 128, 4, 4, True, 8), ("ws_bn64", 128, 64, 4, 6, True, 8)]

def tm(fn, reps=10):
    fn(); torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(reps):
        s.record(); fn(); e.record(); e.synchronize(); ts.append(s.elapsed_time(e) * 1e3)
    return sorted(ts)[len(ts) // 2]

def setup(H, I, E, K, gated, T, gemm, BM):
    N, Kd = ((2 if gated else 1) * I, H) if gemm == "gemm1" else (H, I)
    torch.manual_seed(0)
    ids = torch.rand(T, E, device="cuda").topk(K, dim=1).indices.flatten()
    counts = torch.bincount(ids, minlength=E)
    blocks = (counts + BM - 1) // BM
    expert_of_block = torch.repeat_interleave(torch.arange(E, device="cuda", dtype=torch.int32), blocks)
    nb = int(blocks.sum())
    S = nb * BM
    a = (torch.randn(S, Kd, device="cuda") * 2).to(FP8)
    sa = torch.rand(S, device="cuda") * 0.01 + 0.005
    w = (torch.randn(E, N, Kd, device="cuda") * 2).to(FP8)
    sw = torch.rand(E, N, device="cuda") * 0.01 + 0.005
    return N, Kd, a, sa, w, sw, expert_of_block, nb, T * K

def run_variant(v, N, Kd, a, sa, w, sw, eob, nb):
    name, BM, BN, warps, stages, WS, GM = v
    ad = TensorDescriptor.from_tensor(a, [BM, 128])
    wd = TensorDescriptor.from_tensor(w, [1, BN, 128])
    c = torch.empty(a.shape[0], N, device="cuda", dtype=torch.bfloat16)
    grid = (nb * triton.cdiv(N, BN),)
    f = lambda: ws_gemm[grid](ad, wd, c, sa, sw, eob, nb, N, Kd, c.stride(0), BM=BM, BN=BN, BK=128, GROUP_M=GM,
                              WS=WS, STAGES=stages, PROMOTE=True, num_warps=warps, num_stages=stages)
    return f, c

def main():
    out = []
    for name, (H, I, E, K, gated) in SHAPES.items():
        for T in (2048, 8192):
            for gemm in ("gemm1", "gemm2"):
                ref = None
                for v in VARIANTS:
                    try:
                        N, Kd, a, sa, w, sw, eob, nb, slots = setup(H, I, E, K, gated, T, gemm, v[1])
                        f, c = run_variant(v, N, Kd, a, sa, w, sw, eob, nb)
                        t = tm(f)
                        # check against fp32 on the first block's expert rows
                        e0 = int(eob[0]); r = v[1]
                        refm = (a[:r].float() * sa[:r, None]) @ (w[e0].float() * sw[e0][:, None]).T
                        err = ((c[:r].float() - refm).pow(2).mean().sqrt() / refm.pow(2).mean().sqrt()).item()
                        tf = 2.0 * slots * N * Kd / t * 1e-6  # useful flops (no padding rows)
                        rec = dict(shape=name, T=T, gemm=gemm, variant=v[0], us=t, tflops=tf, rms=err)
                    except Exception as ex:
                        rec = dict(shape=name, T=T, gemm=gemm, variant=v[0], error=str(ex)[-300:])
                    out.append(rec); print(json.dumps(rec), flush=True)
                    del a, w; torch.cuda.empty_cache()
    json.dump(out, open(os.path.join(os.environ.get("R", "."), "ws_bench.json"), "w"), indent=1)
    print("\nsummary (us, TF/s)")
    import collections
    tab = collections.defaultdict(dict)
    for r in out:
        tab[(r["shape"], r["T"], r["gemm"])][r["variant"]] = f"{r['us']:8.1f} {r['tflops']:5.0f} {r['rms']:.0e}" if "us" in r else "ERR"
    for k, d in tab.items():
        print(f"{k[0]:14s} {k[1]:5d} {k[2]} | " + " | ".join(f"{n}: {d.get(n,'-')}" for n, *_ in VARIANTS))


if __name__ == '__main__':
    main()
