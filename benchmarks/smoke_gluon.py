"""First-run triage of the opt-in Gluon kernels: each variant in its own process with a time limit, so that one hang
or crash does not hide the others.

The warp-specialized kernels that have not run on a GPU yet (twenty-ninth and thirtieth sessions: the 16-bit / FP8
decode kernel ``kernels/_ws_dec.py``, the FP4 decode kernel ``kernels/_ws_fp4_dec.py``, NVFP4 / chunked / padded-
hand-off variants of ``kernels/_ws_fp4.py``) are switched on one variant at a time (their ``triton_moe.set_*``
switch), a small layer runs through ``run_weights`` (what ``fm.FusedMoE`` runs), and each variant reports:

    status          ok | not_taken (the automatic choice did not pick the kernel: a rule or a switch is wrong) |
                    mismatch (outside the bounds below) | error (an exception: its last lines in ``tail``) |
                    hang (no result within ``--timeout`` seconds: a barrier phase or expected byte count) | crash
    max_rel, rms    relative max / RMS error against ``fm.reference_moe`` (bounds: 2e-2 / 4e-3 for 16-bit
                    activations, 6e-2 / 1.2e-2 quantized -- the tests' and ``fusedmoe bench``'s)
    rms_triton      relative RMS error against the same layer with the switch off (the Triton kernels; <= 4e-3)
    same_bits       a second call gives the same bits
    config          the chosen configs (gemm1 / gemm2: block_m, block_n, block_k, split_k, stages)

Usage (on the GPU machine; a variant's first call compiles its kernels, ~10-40 s):

    python3 benchmarks/smoke_gluon.py [--only NAME,NAME] [--jobs 3] [--timeout 120] [--json results.json]
    python3 benchmarks/smoke_gluon.py --list
"""

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _f4(ctas: int = 3, x_gather: bool = True, s_smem: bool = False, t_rel: bool = False) -> tuple:
    """The FP4 decode kernel's switch on for every call with decode tiles, 8 stages of 128 K values."""
    return "set_ws_fp4_decode", (True, ctas, 8, 128, x_gather, s_smem, t_rel)


# name -> (switch: (setter of fusedmoe.backends.triton_moe, arguments), weight format, activation, T, H, I, E, top_k,
#          biases, static activation scales)
VARIANTS = {
    # the 16-bit / FP8 decode kernel (kernels/_ws_dec.py)
    "wsdec-bf16-swiglu-t1": (("set_ws_decode", (True,)), "bf16", "swiglu", 1, 2048, 768, 32, 8, False, False),
    "wsdec-bf16-swiglu-t1-tma": (("set_ws_decode", (True, 2, 0, 1, False)), "bf16", "swiglu", 1, 2048, 768, 32, 8,
                                 False, False),  # the token rows through a gather launch and TMA boxes
    "wsdec-bf16-relu2-t8": (("set_ws_decode", (True,)), "bf16", "relu2", 8, 2688, 1856, 32, 6, False, False),
    "wsdec-bf16-oai-3cta": (("set_ws_decode", (True, 3)), "bf16", "swiglu_oai", 4, 1024, 512, 16, 4, True, False),
    "wsdec-fp8t-static-t1": (("set_ws_decode", (True,)), "fp8_tensor", "swiglu", 1, 7168, 256, 32, 8, False, True),
    "wsdec-fp8t-dynamic-t8": (("set_ws_decode", (True,)), "fp8_tensor", "relu2", 8, 2688, 1856, 32, 6, False, False),
    "wsdec-fp8c-t1": (("set_ws_decode", (True,)), "fp8_channel", "swiglu", 1, 2048, 768, 32, 8, False, False),
    "wsdec-fp8b-t8-2blocks": (("set_ws_decode", (True, 2, 0, 2)), "fp8_block", "swiglu", 8, 7168, 256, 32, 8, False,
                              False),
    # both decode GEMMs in one launch (kernels/_ws_dec.py _ws_dec_fused_kernel)
    "wsdec-fused-bf16-t1": (("set_ws_decode", (True, 2, 0, 1, True, True)), "bf16", "swiglu", 1, 2048, 768, 32, 8,
                            False, False),
    "wsdec-fused-fp8t-static-t8": (("set_ws_decode", (True, 2, 0, 1, True, True)), "fp8_tensor", "relu2", 8, 2688,
                                   1856, 32, 6, False, True),
    # the FP4 decode kernel (kernels/_ws_fp4_dec.py) at every token count: _f4 (programs an SM, token rows by
    # cp.async, block scales through the ring, per-thread release -- the last two the defaults since s35)
    "ws4dec-mxfp4-oai-t1": (_f4(), "mxfp4", "swiglu_oai", 1, 2880, 2880, 32, 4, True, False),
    "ws4dec-nvfp4-relu2-t8": (_f4(), "nvfp4", "relu2", 8, 2688, 1856, 32, 6, False, False),
    "ws4dec-mxfp4-2cta-t8": (_f4(2), "mxfp4", "swiglu", 8, 2048, 768, 32, 8, False, False),
    # 4 programs an SM, 64 registers
    "ws4dec-nvfp4-relu2-4cta-t8": (_f4(4), "nvfp4", "relu2", 8, 2688, 1856, 32, 6, False, False),
    # the block scales through the ring
    "ws4dec-mxfp4-oai-t1-ssmem": (_f4(s_smem=True), "mxfp4", "swiglu_oai", 1, 2880, 2880, 32, 4, True, False),
    "ws4dec-nvfp4-relu2-t8-ssmem": (_f4(s_smem=True), "nvfp4", "relu2", 8, 2688, 1856, 32, 6, False, False),
    # + per-thread release
    "ws4dec-mxfp4-oai-t1-ssmem-trel": (_f4(s_smem=True, t_rel=True), "mxfp4", "swiglu_oai", 1, 2880, 2880, 32, 4,
                                       True, False),
    "wsdec-bf16-4cta-t1": (("set_ws_decode", (True, 4)), "bf16", "swiglu", 1, 2048, 768, 32, 8, False, False),
    # GEMM1's token rows through a gather launch and TMA boxes
    "ws4dec-mxfp4-oai-t1-tma": (_f4(x_gather=False), "mxfp4", "swiglu_oai", 1, 2880, 2880, 32, 4, True, False),
    # the FP4 prefill kernel's opt-in variants (kernels/_ws_fp4.py)
    "ws4nv-prefill": (("set_ws_fp4_nvfp4", (True,)), "nvfp4", "swiglu", 1024, 2048, 768, 32, 8, False, False),
    "ws4ch2-prefill": (("set_ws_fp4_chunks", (2,)), "mxfp4", "swiglu", 2048, 2048, 768, 32, 8, False, False),
    "ws4ch4-prefill": (("set_ws_fp4_chunks", (4,)), "mxfp4", "relu2", 2048, 2688, 1856, 32, 6, False, False),
    "ws4pad-prefill": (("set_ws_fp4_padded", (True,)), "mxfp4", "swiglu_oai", 1024, 2880, 2880, 16, 4, True, False),
    # the warp-specialized FP8 GEMMs with the promotion pipelined (thirty-sixth session: two partial sets in turn)
    "wspipe-fp8c-prefill": (("set_ws_pipelined_promotion", (True,)), "fp8_channel", "swiglu", 2048, 2048, 768, 32, 8,
                            False, False),
    "wspipe-fp8t-relu2-prefill": (("set_ws_pipelined_promotion", (True,)), "fp8_tensor", "relu2", 2048, 2688, 1856,
                                  32, 6, False, True),
}


def _rel(a, b):
    d = (a.double() - b.double())
    r = b.double()
    return (d.abs().max() / r.abs().max().clamp_min(1e-30)).item(), (d.pow(2).mean().sqrt()
                                                                      / r.pow(2).mean().sqrt().clamp_min(1e-30)).item()


def run_one(name: str, device: str = "cuda", tiny: bool = False) -> dict:
    """Run variant ``name`` in this process; returns its record (without status 'hang' / 'crash'). ``tiny`` (with
    ``device`` "cpu" and ``TRITON_INTERPRET=1``: the tests' plumbing check) shrinks the layer to 3 tokens, H = 256,
    I = 128, 4 experts, top 2 -- no Gluon kernel runs there, so the status is "not_taken"."""
    import torch

    import fusedmoe as fm
    from fusedmoe.backends import triton_moe
    from fusedmoe.backends.kernel_configs import choose_moe_config
    from fusedmoe.backends.triton import run_weights

    (setter, args), fname, aname, T, H, I, E, K, bias, static = VARIANTS[name]
    if tiny:
        T, H, I, E, K = min(T, 3), 256, 128, 4, min(K, 2)
    dev = torch.device(device)
    fmt, act = fm.Format(fname), fm.Activation(aname)
    af = fmt.natural_activation_format()
    g = torch.Generator(device=dev).manual_seed(7)
    M = 2 * I if act.is_gated else I
    w13 = torch.randn(E, M, H, generator=g, device=dev) * H ** -0.5
    w2 = torch.randn(E, H, I, generator=g, device=dev) * I ** -0.5
    x = torch.randn(T, H, generator=g, device=dev).to(torch.bfloat16)
    kw = {}
    if bias:
        kw.update(w13_bias=torch.randn(E, M, generator=g, device=dev) * 0.3,
                  w2_bias=torch.randn(E, H, generator=g, device=dev) * 0.3)
    if act is fm.Activation.SWIGLU_OAI:
        kw["act_params"] = fm.ActivationParams(alpha=1.702, beta=1.0, limit=7.0)
    if static:  # calibrated on this input: amax / 448 of hidden and of a generous intermediate bound
        kw.update(input_scale=x.float().abs().max().item() / 448.0, intermediate_scale=8.0 / 448.0)
    if fmt is fm.Format.BF16:
        kw["dtype"] = torch.bfloat16
    w = fm.ExpertWeights.from_float(w13, w2, activation=act, format=fmt, **kw).to(dev)
    logits = torch.randn(T, E, generator=g, device=dev)
    topk = fm.route(logits, fm.RoutingConfig(fm.RoutingMethod.RENORMALIZE, top_k=K))
    ref = fm.reference_moe(x, w, topk, activation=act, activation_format=af)
    fn = getattr(triton_moe, setter)
    # the Triton kernels (or the defaults): the FP4 decode kernel's switch off (by default it runs one-token calls)
    prev_b = triton_moe.set_ws_fp4_decode(False) if setter == "set_ws_fp4_decode" else None
    try:
        base = run_weights(x, w, topk, activation_format=af)
    finally:
        if prev_b is not None:
            triton_moe.set_ws_fp4_decode(*prev_b)
    prev = fn(*args)
    try:
        name_dev, sms = triton_moe._device_info(dev)
        cfg = choose_moe_config(T, H, w.padded_intermediate_size, E, K, fmt, act, name_dev, num_sms=sms)
        cfg = triton_moe.auto_ws(cfg, w.w13, w.w2, af, torch.bfloat16, dev, T, K, act)
        out = run_weights(x, w, topk, activation_format=af)
        again = run_weights(x, w, topk, activation_format=af)
        if dev.type == "cuda":
            torch.cuda.synchronize()
    finally:
        fn(*prev) if isinstance(prev, tuple) else fn(prev)
    mx, rms = _rel(out, ref)
    rms_t = _rel(out, base)[1]
    bmx, brms = (2e-2, 4e-3) if af is fm.Format.BF16 else (6e-2, 1.2e-2)
    c1, c2 = cfg.gemm1, cfg.gemm2
    conf = " / ".join(f"{c.block_m}x{c.block_n}x{c.block_k} s{c.split_k} st{c.num_stages}"
                      + ("" if c.warp_specialized else " triton") for c in (c1, c2))
    rec = dict(name=name, max_rel=mx, rms=rms, rms_triton=rms_t, same_bits=bool(torch.equal(out, again)),
               finite=bool(torch.isfinite(out).all()), config=conf)
    taken = c1.warp_specialized and c2.warp_specialized
    if setter in ("set_ws_decode", "set_ws_fp4_decode"):
        taken = taken and c1.block_m == 16
    # against the Triton kernels: FP8 re-quantizes the intermediate (e4m3: a 2^-4 step), so different accumulation
    # orders flip some values by a step (tests/test_ws_dec.py::_vs_triton)
    ok = rec["finite"] and mx <= bmx and rms <= brms and rms_t <= (4e-3 if af is fm.Format.BF16 else 1.2e-2)
    ok = ok and rec["same_bits"]
    rec["status"] = "not_taken" if not taken else ("ok" if ok else "mismatch")
    return rec


def _spawn(name: str, timeout: float) -> dict:
    t0 = time.time()
    try:
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", name], capture_output=True, text=True,
                           timeout=timeout, env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src")))
    except subprocess.TimeoutExpired as exc:
        tail = ((exc.stderr or b"").decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or ""))
        return dict(name=name, status="hang", seconds=round(time.time() - t0, 1), tail=tail[-800:])
    rec = None
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
    if rec is None:
        rec = dict(name=name, status="crash" if p.returncode else "error", rc=p.returncode)
    if rec.get("status") == "error" or p.returncode:
        rec["tail"] = (p.stderr or "")[-1500:]
    rec["seconds"] = round(time.time() - t0, 1)
    return rec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated variant names (default: all)")
    ap.add_argument("--jobs", type=int, default=3, help="variants at once (each its own process)")
    ap.add_argument("--timeout", type=float, default=150.0, help="seconds a variant may take (compiles included)")
    ap.add_argument("--json", default="", help="write the records here")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--one", default="", help=argparse.SUPPRESS)  # the child: run one variant, print its record
    a = ap.parse_args()
    if a.list:
        print("\n".join(VARIANTS))
        return
    if a.one:
        try:
            rec = run_one(a.one)
        except Exception as exc:  # noqa: BLE001  (reported, not raised: the parent prints every variant)
            import traceback

            traceback.print_exc()
            rec = dict(name=a.one, status="error", error=f"{type(exc).__name__}: {exc}"[:500])
        print(json.dumps(rec), flush=True)
        return
    names = [n for n in a.only.split(",") if n] or list(VARIANTS)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; --list shows them")
    with ThreadPoolExecutor(max(1, a.jobs)) as pool:
        recs = []
        for rec in pool.map(lambda n: _spawn(n, a.timeout), names):
            recs.append(rec)
            print(f"{rec['name']:24s} {rec['status']:10s} {rec.get('seconds', 0):6.1f} s  "
                  + (f"max {rec['max_rel']:.2e} rms {rec['rms']:.2e} vs triton {rec['rms_triton']:.2e} "
                     f"bits {'same' if rec['same_bits'] else 'DIFFER'}  {rec['config']}" if "rms" in rec
                     else rec.get("error", "")), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(recs, f, indent=1)
    bad = [r["name"] for r in recs if r["status"] != "ok"]
    print(f"{len(recs) - len(bad)} of {len(recs)} ok" + (f"; not ok: {', '.join(bad)}" if bad else ""), flush=True)


if __name__ == "__main__":
    main()
