"""Sweep of the FP4 decode GEMM (``kernels/_ws_fp4_dec.py``, opt-in, twenty-ninth session) alone, per model GEMM:
how close to the HBM bandwidth does it stream the weights of the experts hit, by programs an SM, ring depth, ring
step and split-K -- the settings ``triton_moe.set_ws_fp4_decode`` and ``ws_fp4_dec_split`` choose (1-4 programs an SM,
the stages capped to what fits; at one token 4 programs an SM need split-K to get work: 360 gpt-oss-120b GEMM1 units).

    PYTHONPATH=src python3 benchmarks/gluon_fp4_decode.py [--preset gpt-oss-120b,nemotron-super,nemotron-nano]
        [--weight-format mxfp4,nvfp4] [--tokens 1] [--quick] [--json out.json]

Each point: the preset's ExpertWeights (``bench.presets.make_weights``), ``tokens`` tokens routed to distinct
experts (top_k each), the align at 16-row blocks, then one GEMM launch (its input gather excluded) timed after an
L2 flush (CUDA events, median of ``--reps``): GEMM1 with the preset's activation and biases, GEMM2 with the routing
weight. TB/s = bytes of the hit experts' weights (values and block scales) over the time. GEMM2's output is checked
against ``fm.dequantize`` in fp32 (GEMM1's activations are the GPU tests' job: ``tests/test_ws_fp4_dec.py``).
Not a benchmark of record: the layer's numbers come from ``fusedmoe bench`` / ``benchmarks/decode_ab.py``
(setting ``ws4dec``).
"""

import argparse
import json

import torch
from fp4_stream_probe import _time  # (benchmarks/: median µs after an L2 flush)

from fusedmoe.backends import triton_moe as tm
from fusedmoe.backends.kernel_configs import ws_dec_max_stages, ws_fp4_dec_config, ws_fp4_dec_stage_bytes
from fusedmoe.bench.presets import get_preset, make_weights
from fusedmoe.config import ActivationParams, Format


def _routing(T: int, K: int, E: int, g: torch.Generator):
    ids = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(T)]).to(torch.int32).cuda()
    tw = torch.rand(T, K, generator=g).cuda()
    return ids, tw


def sweep(preset_name: str, fmt: Format, tokens: int, settings, reps: int, flush) -> list:
    from fusedmoe.formats import dequantize

    p = get_preset(preset_name)
    W = make_weights(p, fmt, device="cuda")
    E, K = W.num_experts, p.top_k
    H, I_pad = W.hidden_size, W.padded_intermediate_size
    gated = p.activation.is_gated
    g = torch.Generator().manual_seed(0)
    ids, tw = _routing(tokens, K, E, g)
    TK = tokens * K
    al = tm.align_slots(ids.reshape(-1), E, 16, tokens=tokens)
    hidden = torch.randn(tokens, H, generator=g).to(torch.bfloat16).cuda()
    inter = torch.randn(TK, I_pad, generator=g).to(torch.bfloat16).cuda()
    tw_flat = tw.reshape(-1).contiguous()
    hit = ids.unique().numel()
    params = W.act_params or ActivationParams()
    act_code = tm._ACT_CODE[p.activation]
    rows = []
    for gemm in ("gemm1", "gemm2"):
        w, bias = (W.w13, W.w13_bias) if gemm == "gemm1" else (W.w2, W.w2_bias)
        N = I_pad if gemm == "gemm1" else H
        R, Kd = w.shape[-2], w.shape[-1]
        nbytes = hit * R * (Kd // 2 + Kd // fmt.block_size)
        out = torch.empty(TK, N, dtype=torch.bfloat16, device="cuda")
        ref = None
        if gemm == "gemm2":  # y[slot] = tw[slot] * (inter[slot] @ W2[e]^T + b2[e])
            wd = dequantize(w.index_select0(ids.reshape(-1).long())).float()  # [TK, H, I_pad]
            ref = torch.einsum("snk,sk->sn", wd, inter.float())
            if bias is not None:
                ref = ref + bias[ids.reshape(-1).long()]
            ref = ref * tw_flat[:, None]
        for ctas, stages, block_k, split in settings:
            tm.set_ws_fp4_decode(True, ctas, stages, block_k)
            c = ws_fp4_dec_config(gated and gemm == "gemm1", gemm, split, stages, block_k)
            num_n = (N // 32 if gated and gemm == "gemm1" else -(-N // 64))
            tiles = al.max_blocks * num_n
            cnt, part = tm.split_scratch(tiles, tiles * split * 64 * 16 if split > 1 else 0, hidden.device)
            a, row_div = (hidden, K) if gemm == "gemm1" else (inter, 1)
            rows_in = tm._gather_slot_rows(a, al, 16, row_div, TK, E, dot64=True).view(torch.bfloat16)
            args = (c, rows_in, w, bias if bias is not None else tw_flat, bias is not None, tw_flat, al, out, N, TK,
                    E, act_code if gemm == "gemm1" else tm._ACT_CODE[tm.Activation.IDENTITY],
                    gated and gemm == "gemm1", params, tm._TL_DTYPE[torch.bfloat16], False, gemm == "gemm2",
                    torch.cuda.get_device_properties(0).multi_processor_count,
                    tm._mx_fold_cvt(w, True), part, cnt)
            tm._ws_fp4_dec_launch(*args)
            torch.cuda.synchronize()
            err = float("nan") if ref is None else ((out.float() - ref).norm() / ref.norm()).item()
            t = _time(lambda: tm._ws_fp4_dec_launch(*args), reps, flush)
            row = dict(preset=preset_name, fmt=fmt.name, gemm=gemm, tokens=tokens, hit=hit, R=R, K=Kd, ctas=ctas,
                       stages=stages, block_k=block_k, split=split, us=t, tbps=nbytes / t / 1e6, rel_err=err)
            rows.append(row)
            bad = "  WRONG" if err == err and err > 1e-2 else ""
            print(f"{preset_name:16s} {fmt.name:5s} {gemm} T={tokens} hit={hit:3d} R={R:5d} K={Kd:5d}  ctas={ctas} "
                  f"st={stages} bk={block_k:3d} split={split}  {t:7.1f} us  {row['tbps']:5.2f} TB/s  err {err:.1e}{bad}",
                  flush=True)
    tm.set_ws_fp4_decode(False)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="gpt-oss-120b,nemotron-super,nemotron-nano")
    ap.add_argument("--weight-format", default="mxfp4")
    ap.add_argument("--tokens", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="fewer settings")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", default="", help="write the results here")
    a = ap.parse_args()
    def fit(ctas, stages, block_k):  # at most the stages that let ``ctas`` programs share an SM's shared memory
        return min(stages, ws_dec_max_stages(ws_fp4_dec_stage_bytes(block_k), ctas))

    if a.quick:
        settings = [(c, fit(c, 8, 128), 128, sp) for c in (2, 3, 4) for sp in (1, 2, 4, 8)]
    else:
        settings = list(dict.fromkeys((c, fit(c, st, bk), bk, sp) for c in (1, 2, 3, 4) for st in (4, 8)
                                      for bk in (64, 128) for sp in (1, 2, 4, 8)))
    flush = torch.empty(256 * 2 ** 20, dtype=torch.int8, device="cuda")
    allr = []
    for preset in a.preset.split(","):
        for f in a.weight_format.split(","):
            allr += sweep(preset, Format[f.upper()], a.tokens, settings, a.reps, flush)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(allr, fh, indent=1)
    print("\nbest per GEMM:")
    for key in dict.fromkeys((r["preset"], r["fmt"], r["gemm"]) for r in allr):
        rs = [r for r in allr if (r["preset"], r["fmt"], r["gemm"]) == key and not r["rel_err"] > 1e-2]
        if rs:
            b = min(rs, key=lambda r: r["us"])
            print(f"  {' '.join(key):30s} {b['us']:7.1f} us {b['tbps']:5.2f} TB/s  (ctas={b['ctas']} st={b['stages']} "
                  f"bk={b['block_k']} split={b['split']})")


if __name__ == "__main__":
    main()
