"""Triton MoE expert kernels (``fusedmoe.backends.triton_moe``) against an independent float64
torch computation of docs/semantics.md 7, plus the align invariants and the config machinery.

On machines without CUDA the kernels run in Triton's interpreter (``TRITON_INTERPRET=1``, set
below before Triton is imported): tiny shapes, fp16 / fp32 hidden states (the interpreter's bf16
``tl.dot`` is wrong). GPU tests (marker ``gpu``) use real shapes.

Error metrics (``_errors``): max |out - ref| / max |ref| and RMS(out - ref) / RMS(ref). The
reference emulates every rounding point of the kernels (activation output rounded to hidden's
dtype, the FP8 re-quantization of the intermediate with ``fm.quantize``, the per-slot y rounded to
hidden's dtype), so the remaining differences are fp32-vs-float64 arithmetic and the rare FP8
rounding flip it causes. Bounds (max, rms):

    fp32 hidden, BF16 path            1e-5, 1e-6
    fp16 hidden, BF16 path            4e-3, 1e-3   (fp16 roundings of intermediate, y, output)
    fp16/fp32 hidden, FP8 paths       3e-2, 6e-3   (a flipped E4M3 rounding moves one element
                                                   of the intermediate by 1/16 of its value)
    GPU bf16 hidden, BF16 path        2e-2, 4e-3
    GPU bf16 hidden, FP8 paths        6e-2, 1.2e-2
"""

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from fusedmoe.backends.kernel_configs import (  # noqa: E402
    KernelConfig,
    MoEKernelConfig,
    TunedTable,
    choose_config,
    choose_moe_config,
    fp8_fast_accum_variant,
    load_tuned_configs,
    save_tuned_configs,
    token_bucket,
)
from fusedmoe.backends.triton_moe import align_slots, max_padded_rows, triton_experts  # noqa: E402
from fusedmoe.config import Activation, ActivationParams, Format  # noqa: E402
from fusedmoe.formats import QuantizedTensor, dequantize, quantize, quantize_weight  # noqa: E402
from moe_cases import distinct_topk_ids, env_starts  # noqa: E402

INTERP = os.environ.get("TRITON_INTERPRET") == "1"
DEV = "cuda" if torch.cuda.is_available() else "cpu"
ALL_ACTS = list(Activation)
ACT_FMT = {
    Format.BF16: Format.BF16,
    Format.FP8_TENSOR: Format.FP8_TENSOR,
    Format.FP8_CHANNEL: Format.FP8_TOKEN,
    Format.FP8_BLOCK: Format.FP8_BLOCK,
}

interpreter = pytest.mark.interpreter
gpu = pytest.mark.gpu


# ---- independent reference ---------------------------------------------------------------------


def _act64(h: torch.Tensor, act: Activation, p: ActivationParams, I: int) -> torch.Tensor:
    if act.is_gated:
        g, u = h[:, :I], h[:, I:]
        if act is Activation.SWIGLU:
            return g * torch.sigmoid(g) * u
        if act is Activation.GEGLU:
            return 0.5 * g * (1 + torch.erf(g / 2**0.5)) * u
        g = g.clamp(max=p.limit)
        u = u.clamp(-p.limit, p.limit)
        return g * torch.sigmoid(p.alpha * g) * (u + p.beta)
    if act is Activation.RELU2:
        return F.relu(h) ** 2
    if act is Activation.GELU:
        return 0.5 * h * (1 + torch.erf(h / 2**0.5))
    if act is Activation.SILU:
        return h * torch.sigmoid(h)
    if act is Activation.RELU:
        return F.relu(h)
    return h


def _qdq(x: torch.Tensor, fmt: Format, scale=None) -> torch.Tensor:
    """quantize -> dequantize in activation format ``fmt`` with the torch reference (float64)."""
    if fmt is Format.BF16:
        return x.double()
    return dequantize(quantize(x, fmt, scale=scale) if fmt is Format.FP8_TENSOR else quantize(x, fmt)).double()


def reference(hidden, q13, q2, ids, tw, *, act, params, act_fmt, I_pad, b13=None, b2=None, a1=None, a2=None,
              offset=0, woi=False):
    """semantics.md 7 in float64 on dequantized operands, with the kernels' rounding points."""
    T, H = hidden.shape
    K = ids.shape[1]
    E = q13.shape[0]
    dt = hidden.dtype
    p = params or ActivationParams()
    a = _qdq(hidden, act_fmt, a1)

    def W13(e):  # dequantized per expert: the whole tensor in float64 can be tens of GB
        return dequantize(q13.index_select0(slice(e, e + 1)))[0].double()

    def W2(e):
        return dequantize(q2.index_select0(slice(e, e + 1)))[0].double()

    e_loc = ids.long() - offset
    local = (e_loc >= 0) & (e_loc < E)
    slots = local.reshape(-1).nonzero().flatten()
    tok = slots // K
    exp = e_loc.reshape(-1)[slots]
    w = tw.reshape(-1)[slots].double()
    inter = torch.zeros(slots.numel(), I_pad, dtype=torch.float64, device=hidden.device)
    for e in exp.unique().tolist():
        r = (exp == e).nonzero().flatten()
        h = a[tok[r]] @ W13(e).T
        if woi:
            h = h * w[r, None]
        if b13 is not None:
            h = h + b13[e].double()
        inter[r] = _act64(h, act, p, I_pad)
    z = inter.to(dt)
    if act_fmt is not Format.BF16 and slots.numel():
        z = _qdq(z, act_fmt, a2)
    else:
        z = z.double()
    out = torch.zeros(T, H, dtype=torch.float64, device=hidden.device)
    for e in exp.unique().tolist():
        r = (exp == e).nonzero().flatten()
        y = z[r] @ W2(e).T
        if b2 is not None:
            y = y + b2[e].double()
        if not woi:
            y = y * w[r, None]
        out.index_add_(0, tok[r], y.to(dt).double())  # the kernels store y in hidden's dtype
    return out.to(dt)


def _errors(out: torch.Tensor, ref: torch.Tensor):
    d = (out.double() - ref.double())
    r = ref.double()
    mx = d.abs().max().item() / max(r.abs().max().item(), 1e-30)
    rms = d.pow(2).mean().sqrt().item() / max(r.pow(2).mean().sqrt().item(), 1e-30)
    return mx, rms


def _bounds(wfmt: Format, dtype: torch.dtype):
    if wfmt is Format.BF16:
        # fp32: summation-order differences over K up to a few thousand products (H200, K 2048:
        # RMS 1.3e-6-1.5e-6)
        return {torch.float32: (1e-5, 4e-6), torch.float16: (4e-3, 1e-3), torch.bfloat16: (2e-2, 4e-3)}[dtype]
    return (6e-2, 1.2e-2) if dtype is torch.bfloat16 else (3e-2, 6e-3)


# ---- problem construction ----------------------------------------------------------------------


def make_problem(*, T, H, I, I_pad, E, K, act, wfmt, dtype, bias=False, offset=0, E_glob=None, static=True,
                 seed=0, device=DEV):
    """Random weights with I real rows padded to I_pad per half (zero), random routing."""
    # tensors are drawn on the target device (real shapes: building and quantizing GBs of weights
    # on the host is slow and, with several test workers, exhausts host memory); routing on the host
    g = torch.Generator().manual_seed(seed)
    gd = torch.Generator(device=device).manual_seed(seed)
    E_glob = E_glob or (E + offset)
    gated = act.is_gated
    wdt = dtype if wfmt is Format.BF16 else torch.float32

    def rn(*s, scale=1.0):
        return torch.randn(*s, generator=gd, device=device) * scale

    def pad_half(w):  # [E, I, H] -> [E, I_pad, H]
        return torch.cat([w, torch.zeros(E, I_pad - I, w.shape[2], device=device)], 1)

    if gated:
        w13 = torch.cat([pad_half(rn(E, I, H, scale=H**-0.5)), pad_half(rn(E, I, H, scale=H**-0.5))], 1)
    else:
        w13 = pad_half(rn(E, I, H, scale=H**-0.5))
    w2 = torch.cat([rn(E, H, I, scale=I**-0.5), torch.zeros(E, H, I_pad - I, device=device)], 2)
    q13 = quantize_weight(w13.to(wdt), wfmt if wfmt is not Format.BF16 else Format.BF16)
    q2 = quantize_weight(w2.to(wdt), wfmt if wfmt is not Format.BF16 else Format.BF16)
    hidden = rn(T, H).to(dtype)
    ids = distinct_topk_ids(T, K, E, offset, E_glob, g)
    tw = (torch.rand(T, K, generator=g) + 0.1).to(device)
    ids = ids.to(device)
    b13 = b2 = None
    if bias:
        M = w13.shape[1]
        b13 = rn(E, M, scale=0.3)
        if gated:
            b13[:, I:I_pad] = 0
            b13[:, I_pad + I:] = 0
        else:
            b13[:, I:] = 0
        b2 = rn(E, H, scale=0.3)
    a1 = a2 = None
    if wfmt is Format.FP8_TENSOR and static:
        a1 = (hidden.float().abs().max() / 448 * 1.25).reshape(1)
        a2 = torch.tensor([0.02 / 448 * 1.0], dtype=torch.float32, device=device)  # reset below from the data
    prob = dict(hidden=hidden, q13=q13, q2=q2, ids=ids, tw=tw, b13=b13, b2=b2, a1=a1, a2=a2, I_pad=I_pad)
    if wfmt is Format.FP8_TENSOR and static:
        # a calibrated-looking intermediate scale: 90 % of the observed amax (so some values clip)
        z = reference_intermediate_amax(prob, act, offset)
        prob["a2"] = torch.tensor([max(z, 1e-3) * 0.9 / 448], dtype=torch.float32, device=device)
    return {k: v.to(device) if isinstance(v, (torch.Tensor, QuantizedTensor)) else v for k, v in prob.items()}


def reference_intermediate_amax(prob, act, offset):
    E = prob["q13"].shape[0]
    a = dequantize(quantize(prob["hidden"], Format.FP8_TENSOR, scale=prob["a1"])).double()
    ids = prob["ids"].long() - offset
    amax = 0.0
    for e in range(E):
        t = ((ids == e).any(1)).nonzero().flatten()
        if t.numel():
            h = a[t] @ dequantize(prob["q13"].index_select0(slice(e, e + 1)))[0].double().T
            if prob["b13"] is not None:
                h = h + prob["b13"][e].double()
            amax = max(amax, _act64(h, act, ActivationParams(limit=0.5), prob["I_pad"]).abs().max().item())
    return amax


def run_case(prob, *, act, wfmt, params=None, offset=0, woi=False, config=None, out=None, static=True):
    act_fmt = ACT_FMT[wfmt]
    kw = dict(act=act, params=params, act_fmt=act_fmt, I_pad=prob["I_pad"], b13=prob["b13"], b2=prob["b2"],
              a1=prob["a1"] if static else None, a2=prob["a2"] if static else None, offset=offset, woi=woi)
    got = triton_experts(
        prob["hidden"], prob["q13"], prob["q2"], prob["ids"], prob["tw"], activation=act, act_params=params,
        act_format=act_fmt, intermediate_size_padded=prob["I_pad"], w13_bias=prob["b13"], w2_bias=prob["b2"],
        a1_scale=kw["a1"], a2_scale=kw["a2"], local_expert_offset=offset, weight_on_input=woi, config=config,
        out=out,
    )
    ref = reference(prob["hidden"], prob["q13"], prob["q2"], prob["ids"], prob["tw"], **kw)
    return got, ref


OAI = ActivationParams(alpha=1.702, beta=1.0, limit=0.5)  # a small limit so the clamps are exercised


def _params(act):
    return OAI if act is Activation.SWIGLU_OAI else None


def _run_within_bound(prob, *, act, wfmt, dtype, tag, **kw):
    """``run_case`` whose output must be within the format's bound of the reference; returns it."""
    got, ref = run_case(prob, act=act, wfmt=wfmt, **kw)
    mx, rms = _errors(got, ref)
    bmx, brms = _bounds(wfmt, dtype)
    assert mx <= bmx and rms <= brms, (tag, mx, rms)
    return got


# ---- interpreter tests: align ------------------------------------------------------------------


def _check_align(ids: torch.Tensor, E: int, BM: int, offset: int, include_nonlocal: bool):
    al = align_slots(ids, E, BM, local_expert_offset=offset, include_nonlocal=include_nonlocal)
    flat = ids.reshape(-1).long().cpu() - offset
    TK = flat.numel()
    sid = al.sorted_ids.cpu().long()
    be = al.block_expert.cpu().long()
    n = int(al.num_post_padded.cpu()[0])
    groups = E + (1 if include_nonlocal else 0)
    assert sid.numel() == max_padded_rows(TK, groups, BM) and sid.numel() % BM == 0
    assert be.numel() == sid.numel() // BM
    grp = torch.where((flat >= 0) & (flat < E), flat, torch.full_like(flat, E if include_nonlocal else -1))
    expected, blocks = [], []
    for e in range(groups):
        mine = (grp == e).nonzero().flatten().tolist()  # increasing slot order
        padded = -(-len(mine) // BM) * BM
        expected += mine + [TK] * (padded - len(mine))
        blocks += [e] * (padded // BM)
    assert n == len(expected), (n, len(expected))
    assert sid[:n].tolist() == expected  # every laid-out slot exactly once, ordered, groups padded
    assert (sid[n:] == TK).all()  # sentinel everywhere else
    assert be[: n // BM].tolist() == blocks and (be[n // BM:] == -1).all()


@interpreter
@pytest.mark.parametrize(
    "T,K,E,offset,E_glob,BM,include",
    [
        (1, 8, 16, 0, 16, 16, False),  # decode: every slot its own group
        (5, 2, 4, 0, 4, 16, False),  # several slots per expert
        (7, 3, 8, 4, 16, 32, False),  # expert parallel: about half the ids non-local
        (9, 1, 4, 2, 8, 16, True),  # K = 1: the non-local group is laid out too
        (700, 2, 12, 0, 12, 64, False),  # 1400 slots: the two-kernel path (2 chunks)
        (900, 2, 6, 3, 12, 16, True),  # two-kernel path with the non-local group
        (3, 2, 200, 0, 200, 16, False),  # many experts (bins > slots)
        (8, 22, 512, 0, 512, 16, False),  # Nemotron-3-Super decode: 512 bins, the groups' padding in runs
        (8, 22, 512, 0, 512, 128, False),  # 128-row blocks: 32 groups a run, 16 runs
        (300, 4, 256, 64, 512, 16, False),  # several chunks, many groups, expert parallel
    ],
)
def test_align_invariants(T, K, E, offset, E_glob, BM, include):
    g = torch.Generator().manual_seed(T * 131 + E)
    ids = torch.randint(0, E_glob, (T, K), generator=g, dtype=torch.int32).to(DEV)
    _check_align(ids, E, BM, offset, include)


@interpreter
def test_align_empty_and_int64():
    ids = torch.randint(0, 8, (6, 2), dtype=torch.int64).to(DEV)
    _check_align(ids, 8, 16, 0, False)
    al = align_slots(torch.empty(0, 2, dtype=torch.int32, device=DEV), 4, 16)
    assert int(al.num_post_padded.cpu()[0]) == 0


# ---- interpreter tests: the forward ------------------------------------------------------------

# (weight format, hidden dtype, H, I_pad, T): FP8_BLOCK needs H and I_pad multiples of 128
_FMT_CASES = {
    Format.BF16: (torch.float16, 64, 32),
    Format.FP8_TENSOR: (torch.float16, 64, 32),
    Format.FP8_CHANNEL: (torch.float32, 64, 32),
    Format.FP8_BLOCK: (torch.float16, 128, 128),
}


@interpreter
@pytest.mark.parametrize("act", ALL_ACTS, ids=lambda a: a.name)
@pytest.mark.parametrize("mode", ["bf16", "fp8_tensor_static", "fp8_tensor_dynamic", "fp8_channel", "fp8_block"])
def test_formats_x_activations(mode, act):
    """Every activation with every format; biases, expert parallelism and T vary across cases."""
    wfmt = {"bf16": Format.BF16, "fp8_tensor_static": Format.FP8_TENSOR, "fp8_tensor_dynamic": Format.FP8_TENSOR,
            "fp8_channel": Format.FP8_CHANNEL, "fp8_block": Format.FP8_BLOCK}[mode]
    static = mode != "fp8_tensor_dynamic"
    dtype, H, I_pad = _FMT_CASES[wfmt]
    idx = ALL_ACTS.index(act)
    bias = idx % 2 == 0
    offset, E_glob = (2, 8) if idx % 3 == 1 else (0, 4)
    T = 5 if idx % 4 != 3 else 1
    I = I_pad if wfmt is Format.FP8_BLOCK or idx % 2 else I_pad - 8  # some cases carry padding
    prob = make_problem(T=T, H=H, I=I, I_pad=I_pad, E=4, K=2, act=act, wfmt=wfmt, dtype=dtype, bias=bias,
                        offset=offset, E_glob=E_glob, static=static, seed=idx)
    got, ref = run_case(prob, act=act, wfmt=wfmt, params=_params(act), offset=offset, static=static)
    assert got.shape == (T, H) and got.dtype == dtype
    mx, rms = _errors(got, ref)
    bmx, brms = _bounds(wfmt, dtype)
    if not INTERP and wfmt is not Format.BF16:
        # compiled on a GPU, the FP8 MMAs sum in another order than the float32 reference: now and then
        # an intermediate value lands on the other side of an e4m3 rounding (one ulp: up to 12.5 %), which
        # a 5-token, 64-column output cannot average out -- H200, sixteenth session: RMS 0.0215 (static
        # IDENTITY) and 0.0102 (dynamic GeGLU) against the 6e-3 meant for real shapes. Here the RMS error
        # is held to the max error's bound; the real-shape GPU tests keep the tight one.
        brms = bmx
    assert mx <= bmx and rms <= brms, (mode, act, mx, rms)


@interpreter
@pytest.mark.parametrize("wfmt", [Format.FP8_TENSOR, Format.FP8_CHANNEL], ids=lambda f: f.name)
@pytest.mark.parametrize("act", [Activation.SWIGLU, Activation.RELU2], ids=lambda a: a.name)
def test_fp8_fast_accum_config(wfmt, act):
    """KernelConfig.fp8_fast_accum reaches both GEMMs (plumbing: the interpreter accumulates
    exactly either way; the H200 precision is test_gpu_fp8_fast_accum_prefill's)."""
    dtype, H, I_pad = _FMT_CASES[wfmt]
    prob = make_problem(T=5, H=H, I=I_pad, I_pad=I_pad, E=4, K=2, act=act, wfmt=wfmt, dtype=dtype, seed=21)
    cfg = MoEKernelConfig(KernelConfig(16, 32, 32, fp8_fast_accum=True), KernelConfig(16, 64, 32, fp8_fast_accum=True))
    got, ref = run_case(prob, act=act, wfmt=wfmt, config=cfg)
    mx, rms = _errors(got, ref)
    bmx, brms = _bounds(wfmt, dtype)
    assert mx <= bmx and rms <= brms, (mx, rms)
    with pytest.raises(TypeError, match="fp8_fast_accum"):
        KernelConfig(16, 32, 32, fp8_fast_accum=1)
    assert KernelConfig.from_dict({"block_m": 16, "block_n": 32, "block_k": 32}).fp8_fast_accum is False


@interpreter
@pytest.mark.parametrize("wfmt", [Format.BF16, Format.FP8_TENSOR, Format.FP8_CHANNEL, Format.FP8_BLOCK],
                         ids=lambda f: f.name)
@pytest.mark.parametrize("act", [Activation.SWIGLU_OAI, Activation.RELU2], ids=lambda a: a.name)
def test_split_k(wfmt, act):
    """GEMM1 and GEMM2 with their K loops split over programs (decode): the last program of every
    tile sums the partials in split order -> same bound as the unsplit kernels, bit-identical over
    repeated calls, counters left at zero for the next launch; uneven splits (K-blocks not a
    multiple of split_k, empty last split) included. Bias, the clamped activation and the routing
    weight run after the sum; one case splits GEMM2 alone, one adds the atomic combine."""
    dtype, H, I_pad = _FMT_CASES[wfmt]
    H2 = 3 * H  # several K-blocks per split
    I2 = 3 * I_pad if wfmt is not Format.FP8_BLOCK else I_pad
    bk = 128 if wfmt is Format.FP8_BLOCK else 32
    bn = 128 if wfmt is Format.FP8_BLOCK else 32
    prob = make_problem(T=3, H=H2, I=I2, I_pad=I2, E=4, K=2, act=act, wfmt=wfmt, dtype=dtype, bias=True,
                        seed=17)
    cfgs = [MoEKernelConfig(KernelConfig(16, bn, bk, split_k=s1), KernelConfig(16, 32, bk, split_k=s2), atomic_combine=at)
            for s1, s2, at in ((2, 2, False), (4, 3, False), (1, 4, False), (2, 2, True))]
    for cfg in cfgs:
        got, ref = run_case(prob, act=act, wfmt=wfmt, params=_params(act), config=cfg)
        mx, rms = _errors(got, ref)
        bmx, brms = _bounds(wfmt, dtype)
        assert mx <= bmx and rms <= brms, (cfg, mx, rms)
        if not cfg.atomic_combine:
            again, _ = run_case(prob, act=act, wfmt=wfmt, params=_params(act), config=cfg)
            assert torch.equal(got, again)
    from fusedmoe.backends.triton_moe import _SCRATCH, split_scratch

    assert not _SCRATCH  # the interpreter runs on the CPU: no cached buffers there
    cnt, part = split_scratch(64, 100, torch.device("cpu"))
    assert int(cnt.abs().sum()) == 0 and cnt.numel() == 64 and part.numel() == 100


@interpreter
@pytest.mark.parametrize("act", [Activation.SWIGLU, Activation.RELU2], ids=lambda a: a.name)
def test_fp8_block_one_weight_scale_a_tile_same_bits(act):
    """FP8 128 x 128 blocks in the Triton GEMMs: tiles of at most 128 weight rows read one weight scale a K block
    (``_moe_gemm._block_w_ptrs``: their rows lie in one scale block) where wider tiles read a scale vector over their
    rows -- the same factors, so the same bits: GEMM1 / GEMM2 at 64 and 128 rows against 256 (the vector path),
    prefill (weights on the MMA's N side) and decode (swapped, split-K) tiles, both halves of a gated tile (the up
    half's scales from row N), expert parallel, and with ``set_block_w1(False)`` (the vector on the same tiles);
    within the reference's bound."""
    dtype, H, I_pad = torch.float16, 256, 256
    prob = make_problem(T=12, H=H, I=I_pad, I_pad=I_pad, E=4, K=2, act=act, wfmt=Format.FP8_BLOCK, dtype=dtype,
                        offset=2, E_glob=6, seed=23)
    kw = dict(act=act, wfmt=Format.FP8_BLOCK, params=_params(act), offset=2)
    wide = MoEKernelConfig(KernelConfig(32, 256, 128, num_warps=4, num_stages=2),
                           KernelConfig(32, 256, 128, num_warps=4, num_stages=2))
    base, ref = run_case(prob, config=wide, **kw)
    mx, rms = _errors(base, ref)
    bmx, brms = _bounds(Format.FP8_BLOCK, dtype)
    assert mx <= bmx and rms <= brms, (mx, rms)
    from fusedmoe.backends.triton_moe import set_block_w1

    for bn1, bn2, swap, split in ((128, 128, False, 1), (64, 64, False, 1), (128, 64, True, 2), (64, 128, True, 1)):
        cfg = MoEKernelConfig(KernelConfig(32 if not swap else 16, bn1, 128, num_warps=4, num_stages=2,
                                           swap_ab=swap, split_k=split),
                              KernelConfig(32 if not swap else 16, bn2, 128, num_warps=4, num_stages=2,
                                           swap_ab=swap, split_k=split))
        got, _ = run_case(prob, config=cfg, **kw)
        assert torch.equal(got, base), (bn1, bn2, swap, split)
        prev = set_block_w1(False)  # the same tiles with the scale vector
        try:
            vec, _ = run_case(prob, config=cfg, **kw)
        finally:
            set_block_w1(prev)
        assert prev is True and torch.equal(vec, base), (bn1, bn2, swap, split)


def test_combine_blocks_cover_the_sms_at_decode():
    """The combine's tiles (``combine_blocks``): [4, 1024] at prefill; at decode they shrink until the grid has a
    program per SM (or 128-column single rows), with 8 elements a thread (4 in the 128-column tiles)."""
    from fusedmoe.backends.triton_moe import combine_blocks

    assert combine_blocks(4096, 4096, 132) == (4, 1024, 4)
    assert combine_blocks(4096, 4096, None) == (4, 1024, 4)  # the interpreter: no SM count
    assert combine_blocks(1, 4096, 132) == (1, 128, 1)  # 32 programs: the smallest tile
    assert combine_blocks(8, 4096, 132) == (1, 128, 1)  # 256 programs (8 of 1024 columns: 8 x 8 < 132)
    assert combine_blocks(64, 4096, 132) == (1, 1024, 4)  # 256 programs
    assert combine_blocks(64, 2880, 132) == (1, 1024, 4)  # 192 programs
    assert combine_blocks(8, 7168, 132) == (1, 256, 1)  # 8 x 28 = 224 programs
    for T, H in ((1, 2880), (8, 4096), (64, 7168), (512, 4096), (3, 200)):
        bt, bh, w = combine_blocks(T, H, 132)
        assert bt * bh >= 4 * 32 * w, (T, H, bt, bh, w)


@interpreter
@pytest.mark.parametrize("blocks", [(4, 256, 4), (1, 128, 1), (2, 64, 1)], ids=str)
def test_combine_kernel_tiles_same_bits(blocks):
    """The combine kernel with decode-sized tiles (``combine_blocks``) and the prefill ones: the fp32 sum of each
    token's local slots in k order, cast to the output dtype -- the same bits for any tiles; non-local slots
    (their rows never written: NaN here) contribute nothing."""
    from fusedmoe.kernels import _combine

    T, H, K, E, off = 5, 300, 3, 4, 2
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 8, (T, K), generator=g, dtype=torch.int32)
    y = torch.randn(T * K, H, generator=g).to(torch.float16)
    local = ((ids >= off) & (ids < off + E)).reshape(-1)
    y[~local] = float("nan")
    want = torch.zeros(T, H)
    for k in range(K):
        want += torch.where(local.reshape(T, K)[:, k, None], y.reshape(T, K, H)[:, k].float(), 0.0)
    out = torch.full((T, H), 7.0, dtype=torch.float16)
    BT, BH, warps = blocks
    _combine._combine_kernel[(-(-T // BT), -(-H // BH))](
        y, ids, out, T, H, off, y.stride(0), out.stride(0), E_LOC=E, TOP_K=K, BLOCK_T=BT, BLOCK_H=BH, USE_GDC=False,
        num_warps=warps)
    assert torch.equal(out, want.to(torch.float16))


@interpreter
@pytest.mark.parametrize("wfmt", [Format.BF16, Format.FP8_TENSOR], ids=lambda f: f.name)
def test_fused_combine_same_bits(wfmt):
    """The top-k combine inside GEMM2 (last of a token's slots sums its rows) gives the combine
    kernel's bits: expert parallel with tokens that have no local slot (their rows are exact
    zeros), several column tiles, GEMM2 split-K, K = 1 (GEMM2 writes the output itself: no
    combine to fuse) and K = 3."""
    from fusedmoe.backends.triton_moe import set_fused_combine

    dtype, H, I_pad = _FMT_CASES[wfmt]
    act = Activation.SWIGLU
    with pytest.raises(TypeError, match="max_tokens"):
        set_fused_combine(-1)
    prev = set_fused_combine(64)
    try:
        for T, K, offset, E_glob, s2 in ((6, 2, 4, 12, 1), (5, 3, 0, 4, 2), (4, 1, 2, 8, 1)):
            prob = make_problem(T=T, H=H, I=I_pad, I_pad=I_pad, E=4, K=K, act=act, wfmt=wfmt, dtype=dtype,
                                offset=offset, E_glob=E_glob, seed=T)
            if T == 6:  # two tokens routed to other ranks' experts only
                prob["ids"][0] = torch.tensor([0, 1], dtype=prob["ids"].dtype)
                prob["ids"][3] = torch.tensor([11, 10], dtype=prob["ids"].dtype)
            cfg = MoEKernelConfig(KernelConfig(16, 32, 32), KernelConfig(16, 32, 32, split_k=s2))
            assert H // 32 >= 2  # several column tiles per token
            set_fused_combine(64)
            fused, ref = run_case(prob, act=act, wfmt=wfmt, offset=offset, config=cfg)
            set_fused_combine(0)
            plain, _ = run_case(prob, act=act, wfmt=wfmt, offset=offset, config=cfg)
            assert torch.equal(fused, plain), (T, K, offset)
            mx, rms = _errors(fused, ref)
            bmx, brms = _bounds(wfmt, dtype)
            assert mx <= bmx and rms <= brms
            ids = prob["ids"].cpu()
            none_local = ~((ids >= offset) & (ids < offset + 4)).any(1)
            assert torch.equal(fused[none_local.to(fused.device)], torch.zeros_like(fused[none_local.to(fused.device)]))
            assert none_local.sum() == (2 if T == 6 else 0)
    finally:
        set_fused_combine(prev)


@interpreter
@pytest.mark.parametrize("wfmt", [Format.BF16, Format.FP8_TENSOR], ids=lambda f: f.name)
def test_align_launch_zeroes_split_k_counters(wfmt, monkeypatch):
    """``set_align_zero_fill`` (what a call captured in a CUDA graph does with it on, made to happen here): the
    split-K and fused-combine arrival counters, handed over poisoned (filled with 7), are zeroed by the align
    launch -- the one-program align (decode; FP8 per tensor: the align launch that also quantizes hidden) and the
    two-kernel align (T * K above one chunk) -- giving the bits of the default path, within the reference's bound."""
    from fusedmoe.backends import triton_moe

    scratch = triton_moe.split_scratch

    def poisoned_scratch(*args, zero_later=False, **kw):
        cnt, part = scratch(*args, zero_later=zero_later, **kw)
        if zero_later:
            cnt.fill_(7)
        return cnt, part

    dtype, H, I_pad = _FMT_CASES[wfmt]
    act = Activation.SWIGLU
    with pytest.raises(TypeError, match="bool"):
        triton_moe.set_align_zero_fill(1)
    monkeypatch.setitem(triton_moe._FUSED_COMBINE, "max_tokens", 64)
    for T, K in ((6, 2), (triton_moe._SINGLE_ALIGN_MAX // 2 + 3, 2)):
        prob = make_problem(T=T, H=H, I=I_pad, I_pad=I_pad, E=4, K=K, act=act, wfmt=wfmt, dtype=dtype, seed=T)
        cfg = MoEKernelConfig(KernelConfig(16, 32, 32, split_k=2), KernelConfig(16, 32, 32, split_k=2))
        plain, ref = run_case(prob, act=act, wfmt=wfmt, config=cfg)
        with monkeypatch.context() as mp:
            mp.setattr(triton_moe, "_align_zeroes_counters", lambda dev: True)
            mp.setattr(triton_moe, "split_scratch", poisoned_scratch)
            zeroed, _ = run_case(prob, act=act, wfmt=wfmt, config=cfg)
        assert torch.equal(zeroed, plain), T
        mx, rms = _errors(zeroed, ref)
        bmx, brms = _bounds(wfmt, dtype)
        assert mx <= bmx and rms <= brms, (T, mx, rms)


@interpreter
@pytest.mark.parametrize("fmt", [Format.FP8_TENSOR, Format.FP8_TOKEN, Format.FP8_BLOCK, Format.MXFP8],
                         ids=lambda f: f.name)
def test_align_launch_quantizes_hidden(fmt):
    """Decode: the align launch also quantizes hidden (its other programs run the quantizer's
    programs): the slot layout and the quantized tensor equal align_slots + quantize_act bit for bit,
    with several row and group blocks, a static scale that clips, and expert parallelism."""
    from fusedmoe.backends.triton_moe import _SINGLE_ALIGN_MAX
    from fusedmoe.formats import quantize_act
    from fusedmoe.formats.triton_quant import plan_fp8

    g = torch.Generator().manual_seed(3)
    T, H, K, E = 9, 1024 + 256, 4, 16
    x = (torch.randn(T, H, generator=g) * 3).to(torch.bfloat16)
    x[0, :5] = 0.0
    static = (x.float().abs().max() / 448 * 0.5).reshape(1) if fmt is Format.FP8_TENSOR else None
    ids = distinct_topk_ids(T, K, E, 2, E + 2, g).to(torch.int32)
    plan = plan_fp8(x, fmt, static_scale=static, out_fp32=True)
    assert plan.programs > 1
    fused = align_slots(ids, E, 16, local_expert_offset=2, quant=plan)
    got = plan.result()
    ref_al = align_slots(ids, E, 16, local_expert_offset=2)
    ref = quantize_act(x, fmt, static_scale=static)
    for a, b in ((fused.sorted_ids, ref_al.sorted_ids), (fused.block_expert, ref_al.block_expert),
                 (fused.num_post_padded, ref_al.num_post_padded)):
        assert torch.equal(a, b)
    assert torch.equal(got.data.view(torch.uint8), ref.data.view(torch.uint8))
    assert torch.equal(got.scale, ref.scale) and got.fmt is ref.fmt
    big = torch.zeros(_SINGLE_ALIGN_MAX + 1, 1, dtype=torch.int32)
    with pytest.raises(ValueError, match="one-program align"):
        align_slots(big, E, 16, quant=plan_fp8(x, fmt, static_scale=static, out_fp32=True))


@interpreter
@pytest.mark.parametrize("wfmt", [Format.FP8_TENSOR, Format.FP8_CHANNEL, Format.FP8_BLOCK], ids=lambda f: f.name)
def test_forward_with_align_quant_same_bits(wfmt, monkeypatch):
    """A decode forward with the quantization of hidden in the align launch gives the bits of the
    separate quantization kernel (gated and not, split-K)."""
    from fusedmoe.backends import triton_moe as tm

    dtype, H, I_pad = _FMT_CASES[wfmt]
    for act, s1 in ((Activation.SWIGLU, 1), (Activation.RELU2, 2)):
        prob = make_problem(T=5, H=2 * H, I=I_pad, I_pad=I_pad, E=4, K=2, act=act, wfmt=wfmt, dtype=dtype, seed=s1)
        bk = 128 if wfmt is Format.FP8_BLOCK else 32
        cfg = MoEKernelConfig(KernelConfig(16, 128 if wfmt is Format.FP8_BLOCK else 32, bk, split_k=s1),
                              KernelConfig(16, 32, bk))
        fused, ref = run_case(prob, act=act, wfmt=wfmt, config=cfg)
        monkeypatch.setattr(tm, "_ALIGN_QUANT", False)
        plain, _ = run_case(prob, act=act, wfmt=wfmt, config=cfg)
        monkeypatch.setattr(tm, "_ALIGN_QUANT", True)
        assert torch.equal(fused, plain), act
        mx, rms = _errors(fused, ref)
        bmx, brms = _bounds(wfmt, dtype)
        assert mx <= bmx and rms <= brms


def test_programmatic_dependent_launch_switch(monkeypatch):
    from fusedmoe.backends import triton_moe as tm

    with pytest.raises(TypeError, match="bool or 'auto'"):
        tm.set_programmatic_dependent_launch(1)
    with pytest.raises(TypeError, match="bool or 'auto'"):
        tm.set_programmatic_dependent_launch("on")
    cuda = torch.device("cuda", 0)
    monkeypatch.setattr(tm, "_cuda_major", lambda index: 9)  # a Hopper without a GPU here
    prev = tm.set_programmatic_dependent_launch(True)
    try:
        assert prev == "auto"  # the default
        on = {"USE_GDC": True, "launch_pdl": True}
        assert tm._pdl_args(cuda, False, 100000) == on
        # never on the CPU / in the interpreter (griddepcontrol is inline PTX)
        assert tm._pdl_args(torch.device("cpu"), interp=True, tokens=1) == {"USE_GDC": False}
        assert tm._pdl_args(cuda, True, 1) == {"USE_GDC": False}
        assert tm.set_programmatic_dependent_launch("auto") is True
        # auto: decode-sized calls only, up to the documented threshold
        assert tm._pdl_args(cuda, False, 1) == on
        assert tm._pdl_args(cuda, False, tm.PDL_AUTO_MAX_TOKENS) == on
        assert tm._pdl_args(cuda, False, tm.PDL_AUTO_MAX_TOKENS + 1) == {"USE_GDC": False}
        assert tm.set_programmatic_dependent_launch(False) == "auto"
        assert tm._pdl_args(cuda, False, 1) == {"USE_GDC": False}
        monkeypatch.setattr(tm, "_cuda_major", lambda index: 8)  # Ampere: no PDL
        tm.set_programmatic_dependent_launch(True)
        assert tm._pdl_args(cuda, False, 1) == {"USE_GDC": False}
    finally:
        tm.set_programmatic_dependent_launch(prev)


def test_align_early_trigger_switch(monkeypatch):
    """``set_align_early_trigger``: a bool switch, on by default; on, the one-program align launches (plain and with
    the fused FP8 quantizer) get ``EARLY_TRIGGER`` where programmatic dependent launch is on, and no other align
    launch does (the two-kernel align of more slots, or without programmatic dependent launch)."""
    from fusedmoe.backends import triton_moe as tm
    from fusedmoe.formats.triton_quant import plan_fp8

    with pytest.raises(TypeError, match="bool"):
        tm.set_align_early_trigger(1)
    seen = []
    monkeypatch.setattr(tm, "launch", lambda kernel, grid, *args, **kw: seen.append((kernel.__name__, kw)))
    pdl_on = [True]
    monkeypatch.setattr(tm, "_pdl_args", lambda dev, interp, tokens: (
        {"USE_GDC": True, "launch_pdl": True} if pdl_on[0] else {"USE_GDC": False}))
    x = torch.randn(3, 256, dtype=torch.bfloat16)

    def launches(T, early, pdl=True, quant=False):
        seen.clear()
        pdl_on[0] = pdl
        ids = torch.randint(0, 8, (T, 2), dtype=torch.int32)
        plan = plan_fp8(x, Format.FP8_TOKEN) if quant else None
        prev = tm.set_align_early_trigger(early)
        try:
            tm.align_slots(ids, 8, 16, quant=plan)
        finally:
            assert tm.set_align_early_trigger(prev) is early
        return {name: kw.get("EARLY_TRIGGER", False) for name, kw in seen}

    assert tm._ALIGN_TRIGGER["enabled"] is True  # the default (fortieth session)
    assert launches(3, False) == {"_align_scatter_kernel": False}
    assert launches(3, True) == {"_align_scatter_kernel": True}
    assert launches(3, True, quant=True) == {"_align_scatter_quant_kernel": True}
    assert launches(3, True, pdl=False) == {"_align_scatter_kernel": False}
    big = tm._SINGLE_ALIGN_MAX // 2 + 1  # two chunks: the count and scatter kernels
    assert launches(big, True) == {"_align_count_kernel": False, "_align_scatter_kernel": False}
    # FUSEDMOE_ALIGN_TRIGGER=0 starts a process with it off (anything else: on)
    env_starts("set_align_early_trigger", "FUSEDMOE_ALIGN_TRIGGER", {"0": False, "1": True})


def _graph_replay_matches(prob, wfmt, I_pad, expected, *, offset=0, replays=1, config=None):
    """Capture one ``triton_experts`` call of ``prob`` (SwiGLU; ``config`` or the chosen one) in a
    CUDA graph (after an eager warm-up) and check that every replay writes exactly ``expected``."""
    out = torch.empty_like(expected)

    def call():
        triton_experts(prob["hidden"], prob["q13"], prob["q2"], prob["ids"], prob["tw"],
                       activation=Activation.SWIGLU, act_params=None, act_format=ACT_FMT[wfmt],
                       intermediate_size_padded=I_pad, a1_scale=prob["a1"], a2_scale=prob["a2"],
                       local_expert_offset=offset, config=config, out=out)

    call()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    for _ in range(replays):
        out.zero_()
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, expected)


@gpu
@pytest.mark.parametrize("wfmt", [Format.BF16, Format.FP8_TENSOR], ids=lambda f: f.name)
@pytest.mark.parametrize("T", [1, 300])
def test_gpu_programmatic_dependent_launch_same_bits(wfmt, T):
    """With programmatic dependent launch on (Hopper), eager and CUDA-graph results are
    bit-identical to the plain launch (every kernel waits for its prior grid before loading) -- also with the
    align letting the next grid launch right after its wait (``set_align_early_trigger``, decode)."""
    from fusedmoe.backends.triton_moe import set_align_early_trigger, set_programmatic_dependent_launch

    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("programmatic dependent launch needs compute capability >= 9")
    prob = make_problem(T=T, H=2048, I=768, I_pad=768, E=128, K=8, act=Activation.SWIGLU, wfmt=wfmt,
                        dtype=torch.bfloat16, seed=9)
    prev = set_programmatic_dependent_launch(False)
    base, _ = run_case(prob, act=Activation.SWIGLU, wfmt=wfmt)
    set_programmatic_dependent_launch(True)
    prev_early = set_align_early_trigger(False)
    try:
        for early in (False, True):  # (the early trigger is the default: both set explicitly)
            set_align_early_trigger(early)
            got, _ = run_case(prob, act=Activation.SWIGLU, wfmt=wfmt)
            assert torch.equal(got, base), early
            _graph_replay_matches(prob, wfmt, 768, base)
    finally:
        set_programmatic_dependent_launch(prev)
        set_align_early_trigger(prev_early)


def test_reciprocal_quant_arithmetic_matches_division():
    """The arithmetic of ``_quant._div_by_rcp`` (emulated exactly in float64 by
    benchmarks/div_by_reciprocal_check.py) gives IEEE division's fp32 quotient and e4m3 byte for every
    finite bf16 / fp16 value over 40 scales; a plain multiply by the reciprocal does not."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks",
                        "div_by_reciprocal_check.py")
    spec = importlib.util.spec_from_file_location("div_by_reciprocal_check", path)
    chk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(chk)
    assert chk.main(["--scales", "40"]) == 0
    exact = chk.divide_by_reciprocal
    def plain(h, s):
        with np.errstate(over="ignore"):
            return (h * (np.float32(1.0) / s)).astype(np.float32)

    try:
        chk.divide_by_reciprocal = plain
        assert chk.main(["--scales", "40"]) == 1  # the correction step is what makes it exact
    finally:
        chk.divide_by_reciprocal = exact


def test_reciprocal_quant_switch():
    from fusedmoe.backends import triton_moe as tm

    with pytest.raises(TypeError, match="bool"):
        tm.set_reciprocal_quant(1)
    prev = tm.set_reciprocal_quant(True)
    try:
        assert prev is True  # the default since the H200 same-bits tests (sixteenth session)
        assert tm.set_reciprocal_quant(False) is True
    finally:
        tm.set_reciprocal_quant(prev)


@interpreter
def test_gemm1_amax_same_bits(monkeypatch):
    """The dynamic per-tensor scale of GEMM2's FP8 input from GEMM1's epilogue (``set_gemm1_amax``,
    default on) gives the bits of the zero-filled intermediate and its absmax pass: gated and not,
    with and without non-local experts (rows never written), one token and several. Its amax starts at 0 by the
    align launch (``set_align_zero_fill``, default on: the buffer the align gets is filled with garbage first here,
    so an amax the align did not zero shows) or, with that off, by a fill of its own."""
    from fusedmoe.backends import triton_moe as tm
    from fusedmoe.backends.triton_moe import set_align_zero_fill, set_gemm1_amax

    with pytest.raises(TypeError, match="bool"):
        set_gemm1_amax(1)
    zeroed = []
    align = tm.align_slots

    def align_on_garbage(*args, zero=None, **kw):
        if zero is not None:
            zero.fill_(0x7F000000)  # the bits of 1.7e38f: an amax left at this wipes out GEMM2's input
            zeroed.append(zero.numel())
        return align(*args, zero=zero, **kw)

    monkeypatch.setattr(tm, "align_slots", align_on_garbage)
    wfmt = Format.FP8_TENSOR
    dtype, H, I_pad = _FMT_CASES[wfmt]
    for act, offset, E_glob, T in ((Activation.SWIGLU, 0, 4, 5), (Activation.RELU2, 2, 8, 6),
                                   (Activation.SWIGLU, 2, 8, 1)):
        prob = make_problem(T=T, H=H, I=I_pad, I_pad=I_pad, E=4, K=2, act=act, wfmt=wfmt, dtype=dtype, offset=offset,
                            E_glob=E_glob, static=False, seed=T + offset)
        outs = []
        for on, by_align in ((False, True), (True, True), (True, False)):
            prev, prev_z = set_gemm1_amax(on), set_align_zero_fill(by_align)
            zeroed.clear()
            try:
                got, ref = run_case(prob, act=act, wfmt=wfmt, params=_params(act), offset=offset, static=False)
            finally:
                set_gemm1_amax(prev)
                set_align_zero_fill(prev_z)
            assert bool(zeroed) == (on and by_align), (act, offset, on, by_align, zeroed)
            mx, rms = _errors(got, ref)
            bmx, brms = _bounds(wfmt, dtype)
            assert mx <= bmx and rms <= brms, (act, offset, on, mx, rms)
            outs.append(got)
        assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2]), (act, offset, T)
    assert set_gemm1_amax(True) is True  # the default


@interpreter
@pytest.mark.skipif(not INTERP, reason="the interpreter ignores the switch (its fma is not fused)")
def test_reciprocal_quant_ignored_by_the_interpreter():
    """The interpreter always divides (its fma rounds twice): the switch on gives the same bits."""
    from fusedmoe.backends.triton_moe import set_reciprocal_quant

    act, wfmt = Activation.RELU2, Format.FP8_TENSOR
    prob = make_problem(T=5, H=64, I=128, I_pad=128, E=4, K=2, act=act, wfmt=wfmt, dtype=torch.float16, seed=3)
    prev = set_reciprocal_quant(False)
    try:
        base, _ = run_case(prob, act=act, wfmt=wfmt)
        set_reciprocal_quant(True)
        got, _ = run_case(prob, act=act, wfmt=wfmt)
    finally:
        set_reciprocal_quant(prev)
    assert torch.equal(got, base)


@gpu
@pytest.mark.parametrize("wfmt", [Format.FP8_TENSOR, Format.FP8_BLOCK], ids=lambda f: f.name)
@pytest.mark.parametrize("act", [Activation.SWIGLU, Activation.RELU2, Activation.SWIGLU_OAI], ids=lambda a: a.name)
def test_gpu_reciprocal_quant_same_bits(act, wfmt):
    """GEMM1's FP8 re-quantization by reciprocals (``set_reciprocal_quant``; static per-tensor scale,
    and the 1 x 128 groups of FP8 blocks) gives the bits of the IEEE divisions: decode and prefill
    token counts, bf16 and fp16 hidden, eager and in a CUDA graph."""
    from fusedmoe.backends.triton_moe import set_reciprocal_quant

    params = _params(act)
    for T, dtype in ((3, torch.bfloat16), (40, torch.float16), (700, torch.bfloat16)):
        prob = make_problem(T=T, H=1024, I=384, I_pad=384, E=16, K=4, act=act, wfmt=wfmt, dtype=dtype, seed=T)
        prev = set_reciprocal_quant(False)
        try:
            base, _ = run_case(prob, act=act, wfmt=wfmt, params=params)
            set_reciprocal_quant(True)
            got = _run_within_bound(prob, act=act, wfmt=wfmt, dtype=dtype, tag=T, params=params)
            assert torch.equal(got, base), (T, dtype)
            if act is Activation.SWIGLU and T == 40:
                _graph_replay_matches(prob, wfmt, 384, base, replays=2)
        finally:
            set_reciprocal_quant(prev)


@gpu
@pytest.mark.parametrize("wfmt", [Format.BF16, Format.FP8_BLOCK], ids=lambda f: f.name)
def test_gpu_direct_launch_same_bits(wfmt, monkeypatch):
    """Direct launches of the compiled kernels (``_host.launch``) give the bits of Triton's own
    launcher, eager and in a CUDA graph, over token counts whose ints specialize differently."""
    from fusedmoe.kernels import _host

    def run_all():
        outs = []
        for T in (1, 16, 17, 300, 1, 17):
            prob = make_problem(T=T, H=1024, I=384, I_pad=384, E=32, K=4, act=Activation.SWIGLU, wfmt=wfmt,
                                dtype=torch.bfloat16, seed=T)
            outs.append(run_case(prob, act=Activation.SWIGLU, wfmt=wfmt)[0])
        return outs, prob

    monkeypatch.setattr(_host, "_DIRECT", False)
    base, prob = run_all()
    monkeypatch.setattr(_host, "_DIRECT", True)
    got, _ = run_all()
    for a, b in zip(got, base):
        assert torch.equal(a, b)
    from fusedmoe.kernels import _moe_gemm

    assert _moe_gemm._gemm1_kernel._fusedmoe_sig.cache and _moe_gemm._gemm2_kernel._fusedmoe_sig.cache
    _graph_replay_matches(prob, wfmt, 384, base[-1])


@gpu
@pytest.mark.parametrize("wfmt", [Format.BF16, Format.FP8_BLOCK, Format.FP8_TENSOR], ids=lambda f: f.name)
def test_gpu_fused_combine_same_bits(wfmt):
    """The combine inside GEMM2 gives the combine kernel's bits on the GPU (decode token counts,
    expert parallel with tokens routed elsewhere only), eager, repeated (counters left at zero)
    and in a CUDA graph."""
    from fusedmoe.backends.triton_moe import set_fused_combine

    prev = set_fused_combine(64)
    try:
        for T, offset, E_glob in ((1, 0, 64), (8, 16, 128), (64, 0, 64), (33, 32, 128)):
            prob = make_problem(T=T, H=2048, I=768, I_pad=768, E=64, K=8, act=Activation.SWIGLU, wfmt=wfmt,
                                dtype=torch.bfloat16, offset=offset, E_glob=E_glob, seed=T)
            if offset:
                prob["ids"][0] = torch.arange(8, dtype=prob["ids"].dtype) + (offset + 64) % E_glob
            set_fused_combine(0)
            base, ref = run_case(prob, act=Activation.SWIGLU, wfmt=wfmt, offset=offset)
            set_fused_combine(64)
            for _ in range(3):
                got, _ = run_case(prob, act=Activation.SWIGLU, wfmt=wfmt, offset=offset)
                assert torch.equal(got, base), (T, offset)
            if offset:
                assert torch.equal(got[0], torch.zeros_like(got[0]))
            _graph_replay_matches(prob, wfmt, 768, base, offset=offset, replays=2)
    finally:
        set_fused_combine(prev)


@gpu
@pytest.mark.parametrize("wfmt", [Format.FP8_TENSOR, Format.FP8_CHANNEL, Format.FP8_BLOCK], ids=lambda f: f.name)
def test_gpu_align_quant_same_bits(wfmt, monkeypatch):
    """The quantization of hidden inside the align launch (decode) gives the separate kernel's
    bits on the GPU (its e4m3 cast), eager and in a CUDA graph, up to T*K = 256."""
    from fusedmoe.backends import triton_moe as tm

    for T in (1, 8, 32):
        prob = make_problem(T=T, H=2048, I=768, I_pad=768, E=64, K=8, act=Activation.SWIGLU, wfmt=wfmt,
                            dtype=torch.bfloat16, seed=T)
        monkeypatch.setattr(tm, "_ALIGN_QUANT", False)
        base, _ = run_case(prob, act=Activation.SWIGLU, wfmt=wfmt)
        monkeypatch.setattr(tm, "_ALIGN_QUANT", True)
        got, _ = run_case(prob, act=Activation.SWIGLU, wfmt=wfmt)
        assert torch.equal(got, base), T
        _graph_replay_matches(prob, wfmt, 768, base)


def test_split_k_config_rules():
    with pytest.raises(ValueError, match="split_k"):
        KernelConfig(16, 32, 32, split_k=0)
    assert MoEKernelConfig(KernelConfig(16, 32, 32), KernelConfig(16, 32, 32, split_k=2)).gemm2.split_k == 2
    assert KernelConfig.from_dict({"block_m": 16, "block_n": 32, "block_k": 32}).split_k == 1
    h = choose_moe_config(1, 7168, 256, 256, 8, Format.FP8_BLOCK, Activation.SWIGLU, "NVIDIA H200", table=TunedTable())
    # one token of a DeepSeek-V3 TP8 shard: 8 experts x 2 column tiles -> K split 8 ways (128 programs)
    assert h.gemm1.split_k == 8 and h.gemm2.split_k == 1
    h = choose_moe_config(4096, 7168, 256, 256, 8, Format.FP8_BLOCK, Activation.SWIGLU, "NVIDIA H200",
                          table=TunedTable())
    assert h.gemm1.split_k == 1
    # block-scaled weights (dequantized in registers) aim at four programs per SM: one token of
    # Nemotron-Nano (6 experts x 30 column tiles = 180) splits in four, FP8 does not
    nano = dict(M_tokens=1, hidden_size=2688, intermediate_size_padded=1920, E_loc=128, top_k=6,
                activation=Activation.RELU2, device_name="NVIDIA H200", table=TunedTable())
    assert choose_moe_config(weight_format=Format.NVFP4, **nano).gemm1.split_k == 4
    assert choose_moe_config(weight_format=Format.FP8_TENSOR, **nano).gemm1.split_k == 1
    # GEMM2 by the same rule: 6 experts x 42 column tiles of H = 2688 = 252, but only 15 K-blocks
    # of 128 (>= 4 per program): split 2
    assert choose_moe_config(weight_format=Format.NVFP4, **nano).gemm2.split_k == 2
    assert choose_moe_config(weight_format=Format.FP8_TENSOR, **nano).gemm2.split_k == 1


@interpreter
@pytest.mark.parametrize("wfmt", [Format.BF16, Format.FP8_TENSOR, Format.FP8_BLOCK], ids=lambda f: f.name)
def test_top1_weight_on_input_expert_parallel(wfmt):
    """K = 1 (Llama4 weight on input): GEMM2 writes the output directly, non-local tokens get 0
    (also with GEMM2 split-K)."""
    dtype, H, I_pad = _FMT_CASES[wfmt]
    act = Activation.SWIGLU
    prob = make_problem(T=6, H=H, I=I_pad, I_pad=I_pad, E=4, K=1, act=act, wfmt=wfmt, dtype=dtype, bias=True,
                        offset=4, E_glob=12, seed=3)
    prob["ids"][0, 0] = 0  # at least one non-local token and one local token
    prob["ids"][1, 0] = 5
    bk = 128 if wfmt is Format.FP8_BLOCK else 32
    # default configs, then GEMM2 split in two: the non-local group's zeros come from every split
    # program, a local tile's rows from its last arrival
    split2 = MoEKernelConfig(KernelConfig(16, 128 if wfmt is Format.FP8_BLOCK else 32, bk),
                             KernelConfig(16, 32, bk, split_k=2))
    for cfg in (None, split2):
        out = torch.full((6, H), float("nan"), dtype=dtype, device=DEV)  # every row must be written
        got, ref = run_case(prob, act=act, wfmt=wfmt, offset=4, woi=True, out=out, config=cfg)
        assert got.data_ptr() == out.data_ptr()
        assert (got[0] == 0).all()
        mx, rms = _errors(got, ref)
        bmx, brms = _bounds(wfmt, dtype)
        assert mx <= bmx and rms <= brms, (cfg, mx, rms)


@interpreter
@pytest.mark.parametrize("wfmt", [Format.BF16, Format.FP8_TENSOR, Format.FP8_CHANNEL, Format.FP8_BLOCK],
                         ids=lambda f: f.name)
def test_persistent_gemm2_same_bits(wfmt):
    """GEMM2 launched persistent (a fixed grid of programs walking the tiles in one flattened
    (tile, K-block) loop; on the CPU 1 and 2 programs for every tile) gives the bits of one
    program per tile: several M-blocks and column tiles per program, a partial last column tile
    (H not a multiple of block_n), bias and the clamped activation; expert parallel with K = 1
    (GEMM2 writes the output: the non-local group's rows must be exact zeros, from a program that
    also computes local tiles) and K = 2 with non-local slots; the atomic combine within the bound."""
    dtype, H, I_pad = _FMT_CASES[wfmt]
    bk = 128 if wfmt is Format.FP8_BLOCK else 32
    bn1 = 128 if wfmt is Format.FP8_BLOCK else 32
    H3 = H + 32 if wfmt is not Format.FP8_BLOCK else H  # FP8 block: H is whole 128-blocks
    for T, K, offset, E_glob, act, bn2 in ((7, 2, 4, 12, Activation.SWIGLU_OAI, 64 if H3 % 64 else 32),
                                           (6, 1, 4, 12, Activation.RELU2, 32), (9, 2, 0, 4, Activation.SWIGLU, 32)):
        prob = make_problem(T=T, H=H3, I=I_pad, I_pad=I_pad, E=4, K=K, act=act, wfmt=wfmt, dtype=dtype, bias=True,
                            offset=offset, E_glob=E_glob, seed=T + K)
        if K == 1:
            prob["ids"][0, 0] = 0  # a non-local token (other rank's expert) and a local one
            prob["ids"][1, 0] = 5
        outs = {}
        for pers, atomic in ((0, False), (1, False), (2, False), (1, True)):
            cfg = MoEKernelConfig(KernelConfig(16, bn1, bk), KernelConfig(16, bn2, bk, persistent=pers),
                                  atomic_combine=atomic)
            out = torch.full((T, H3), float("nan"), dtype=dtype, device=DEV) if K == 1 and not atomic else None
            outs[(pers, atomic)] = _run_within_bound(prob, act=act, wfmt=wfmt, dtype=dtype,
                                                     tag=(T, K, pers, atomic), params=_params(act), offset=offset,
                                                     woi=K == 1, out=out, config=cfg)
        if K == 1:
            assert (outs[(1, False)][0] == 0).all()
        assert torch.equal(outs[(1, False)], outs[(0, False)]), (T, K)
        assert torch.equal(outs[(2, False)], outs[(0, False)]), (T, K)


@interpreter
@pytest.mark.parametrize("wfmt", [Format.BF16, Format.FP8_CHANNEL], ids=lambda f: f.name)
def test_persistent_gemm2_k_tail_same_bits(wfmt):
    """Persistent GEMM2 with a K tail (I_pad 48 in 32-wide K-blocks: the last block masked, as
    Nemotron's unpadded I = 1856 in 128-wide blocks): the bits of one program per tile, within the
    reference's bound."""
    dtype = _FMT_CASES[wfmt][0]
    prob = make_problem(T=9, H=64, I=40, I_pad=48, E=4, K=2, act=Activation.RELU2, wfmt=wfmt, dtype=dtype,
                        seed=5)
    outs = []
    for pers in (0, 2):
        cfg = MoEKernelConfig(KernelConfig(16, 32, 32), KernelConfig(16, 32, 32, persistent=pers))
        outs.append(_run_within_bound(prob, act=Activation.RELU2, wfmt=wfmt, dtype=dtype, tag=pers, config=cfg))
    assert torch.equal(outs[1], outs[0])


@interpreter
@pytest.mark.parametrize("I_pad", [128, 256])
def test_held_a_gemm2_fp8_block_same_bits(I_pad):
    """FP8 128 x 128 blocks with the activation tile held (``KernelConfig.n_tiles``): one or two
    128-wide K-blocks with their 1 x 128 scales, each column tile scaled per K-block as one program
    per tile does -- the same bits; a short last group of column tiles, bias, expert parallel with
    non-local slots."""
    act = Activation.SWIGLU
    prob = make_problem(T=5, H=256, I=I_pad - 56, I_pad=I_pad, E=4, K=2, act=act, wfmt=Format.FP8_BLOCK,
                        dtype=torch.float16, bias=True, offset=4, E_glob=12, seed=I_pad)
    outs = []
    for nt in (1, 3, 8):
        cfg = MoEKernelConfig(KernelConfig(16, 128, 128), KernelConfig(16, 32, 128, n_tiles=nt))
        outs.append(_run_within_bound(prob, act=act, wfmt=Format.FP8_BLOCK, dtype=torch.float16, tag=nt, offset=4,
                                      config=cfg))
    assert torch.equal(outs[1], outs[0]) and torch.equal(outs[2], outs[0])


@interpreter
@pytest.mark.parametrize("wfmt", [Format.BF16, Format.FP8_TENSOR, Format.FP8_CHANNEL], ids=lambda f: f.name)
def test_held_a_gemm2_same_bits(wfmt):
    """GEMM2 with several column tiles per program (``KernelConfig.n_tiles``: the activation tile,
    the whole K, loaded once) gives the bits of one program per tile with the same block_k: a K
    tail (I_pad 48 in a 64-wide block), a partial last column tile, a last program with fewer
    tiles than n_tiles, bias and the clamped activation; expert parallel with K = 1 (GEMM2 writes
    the output: the non-local group's rows exact zeros) and K = 2 with non-local slots; the atomic
    combine within the bound."""
    dtype = _FMT_CASES[wfmt][0]
    H3, I_pad = 112, 48  # 4 column tiles of 32, the last partial
    for T, K, offset, E_glob, act in ((7, 2, 4, 12, Activation.SWIGLU_OAI), (6, 1, 4, 12, Activation.RELU2),
                                      (9, 2, 0, 4, Activation.SWIGLU)):
        prob = make_problem(T=T, H=H3, I=40, I_pad=I_pad, E=4, K=K, act=act, wfmt=wfmt, dtype=dtype, bias=True,
                            offset=offset, E_glob=E_glob, seed=T + K)
        if K == 1:
            prob["ids"][0, 0] = 0  # a non-local token (other rank's expert) and a local one
            prob["ids"][1, 0] = 5
        outs = {}
        for nt, atomic in ((1, False), (2, False), (3, False), (8, False), (2, True)):
            cfg = MoEKernelConfig(KernelConfig(16, 32, 32), KernelConfig(16, 32, 64, n_tiles=nt), atomic_combine=atomic)
            out = torch.full((T, H3), float("nan"), dtype=dtype, device=DEV) if K == 1 and not atomic else None
            outs[(nt, atomic)] = _run_within_bound(prob, act=act, wfmt=wfmt, dtype=dtype, tag=(T, K, nt, atomic),
                                                   params=_params(act), offset=offset, woi=K == 1, out=out,
                                                   config=cfg)
        if K == 1:
            assert (outs[(2, False)][0] == 0).all()
        for nt in (2, 3, 8):
            assert torch.equal(outs[(nt, False)], outs[(1, False)]), (T, K, nt)


def test_held_a_config_rules():
    """KernelConfig.n_tiles: bad values and combinations are refused, the auto persistent rule
    leaves an n_tiles GEMM2 one program per tile group, the launcher refuses block_k < K and the
    block-scaled formats with a clear message."""
    from fusedmoe.backends.kernel_configs import auto_persistent

    # the heuristic: prefill GEMM2 of short K (DeepSeek-V3 TP8, K = 256) on Hopper, FP8 (per tensor /
    # channel / 128 x 128 blocks) at 64+ rows, BF16 at 128 rows; 1792 columns per program in equal groups
    h200 = "NVIDIA H200"
    for wfmt, T in ((Format.FP8_TENSOR, 2048), (Format.FP8_CHANNEL, 8192), (Format.BF16, 8192)):
        g2 = choose_moe_config(T, 7168, 256, 256, 8, wfmt, Activation.SWIGLU, h200, table=TunedTable()).gemm2
        assert (g2.n_tiles, g2.block_n, g2.block_k, g2.num_warps) == (28, 64, 256, 4), (wfmt, T, g2)
    assert choose_moe_config(2048, 4096, 192, 128, 8, Format.FP8_TENSOR, Activation.SWIGLU, h200,
                             table=TunedTable()).gemm2.n_tiles == 32  # one group: 64 tiles of 64 columns
    # FP8 128 x 128 blocks: two held 128-wide K-blocks at 64 rows
    g2 = choose_moe_config(8192, 7168, 256, 256, 8, Format.FP8_BLOCK, Activation.SWIGLU, h200, table=TunedTable()).gemm2
    assert (g2.block_m, g2.n_tiles, g2.block_n, g2.block_k, g2.num_warps) == (64, 28, 64, 128, 4), g2
    for args in ((2048, 2048, 768, 128, 8, Format.FP8_TENSOR),  # K 768: per tile
                 (1024, 7168, 256, 256, 8, Format.BF16),  # BF16 64-row tiles: per tile
                 (8, 7168, 256, 256, 8, Format.FP8_TENSOR),  # decode
                 (8, 7168, 256, 256, 8, Format.FP8_BLOCK),
                 (8192, 7168, 512, 256, 8, Format.FP8_BLOCK)):  # K 512: more than two held blocks
        g2 = choose_moe_config(*args, Activation.SWIGLU, h200, table=TunedTable()).gemm2
        assert g2.n_tiles == 1, (args, g2)
    assert choose_moe_config(8192, 7168, 256, 256, 8, Format.FP8_TENSOR, Activation.SWIGLU, "cpu",
                             table=TunedTable()).gemm2.n_tiles == 1  # not Hopper
    assert auto_persistent(KernelConfig(64, 128, 256, num_warps=4, n_tiles=8), Format.BF16, 2) == 0
    assert KernelConfig.from_dict(KernelConfig(64, 128, 256, n_tiles=4).to_dict()).n_tiles == 4
    assert KernelConfig.from_dict({"block_m": 64, "block_n": 128, "block_k": 128}).n_tiles == 1
    with pytest.raises(ValueError, match="n_tiles"):
        KernelConfig(64, 128, 256, n_tiles=0)
    with pytest.raises(ValueError, match="split_k 1"):
        KernelConfig(64, 128, 256, n_tiles=2, split_k=2)
    with pytest.raises(ValueError, match="persistent"):
        KernelConfig(64, 128, 256, n_tiles=2, persistent=1)
    with pytest.raises(TypeError, match="n_tiles"):
        KernelConfig(64, 128, 256, n_tiles=2.0)
    prob = make_problem(T=3, H=64, I=40, I_pad=48, E=4, K=2, act=Activation.SWIGLU, wfmt=Format.BF16,
                        dtype=torch.float16, seed=1)
    with pytest.raises(ValueError, match="block_k >= intermediate_size_padded"):
        run_case(prob, act=Activation.SWIGLU, wfmt=Format.BF16, params=_params(Activation.SWIGLU),
                 config=MoEKernelConfig(KernelConfig(16, 32, 32), KernelConfig(16, 32, 32, n_tiles=2)))
    probq = make_problem(T=3, H=128, I=384, I_pad=384, E=4, K=2, act=Activation.SWIGLU, wfmt=Format.FP8_BLOCK,
                         dtype=torch.float16, seed=1)
    with pytest.raises(ValueError, match="at most two 128-wide K-blocks"):
        run_case(probq, act=Activation.SWIGLU, wfmt=Format.FP8_BLOCK, params=_params(Activation.SWIGLU),
                 config=MoEKernelConfig(KernelConfig(16, 128, 128), KernelConfig(16, 128, 128, n_tiles=2)))
    probm = make_problem(T=3, H=64, I=64, I_pad=64, E=4, K=2, act=Activation.SWIGLU, wfmt=Format.MXFP4,
                         dtype=torch.float16, seed=1)
    with pytest.raises(ValueError, match="n_tiles > 1 supports"):
        triton_experts(probm["hidden"], probm["q13"], probm["q2"], probm["ids"], probm["tw"],
                       activation=Activation.SWIGLU, act_params=None, act_format=Format.BF16,
                       intermediate_size_padded=64,
                       config=MoEKernelConfig(KernelConfig(16, 32, 64), KernelConfig(16, 32, 64, n_tiles=2)))


def test_table_lookup_of_unpadded_intermediate():
    """Weights without the non-gated 128-alignment padding (I_pad 1856, as the shared harness builds
    Nemotron's) get the entries tuned at I_pad rounded up to 128 (1920); an entry at the exact size
    wins; without either, the heuristic."""
    h200, act, fmt = "NVIDIA H200", Activation.RELU2, Format.FP8_TENSOR
    g1 = KernelConfig(64, 256, 128, num_warps=8, num_stages=4)
    g2 = KernelConfig(64, 128, 128, num_warps=4, num_stages=3, persistent=2)
    tbl = TunedTable()
    for gemm, N, K, c in (("gemm1", 1920, 2688, g1), ("gemm2", 2688, 1920, g2)):
        tbl.add(device=h200, weight_format=fmt, activation=act, gemm=gemm, N=N, K=K, E=128, tokens=8192, config=c)
    got = choose_moe_config(8192, 2688, 1856, 128, 6, fmt, act, h200, table=tbl)
    assert (got.gemm1, got.gemm2) == (g1, g2)
    heur = choose_moe_config(8192, 2688, 1856, 128, 6, fmt, act, h200, table=TunedTable())
    assert (heur.gemm1, heur.gemm2) != (g1, g2)
    # 1792 is a multiple of 128: looked up as it is (no entry: the heuristic)
    assert choose_moe_config(8192, 2688, 1792, 128, 6, fmt, act, h200, table=tbl) == choose_moe_config(
        8192, 2688, 1792, 128, 6, fmt, act, h200, table=TunedTable())
    exact = KernelConfig(64, 64, 128, num_warps=4, num_stages=3)
    for gemm, N, K in (("gemm1", 1856, 2688), ("gemm2", 2688, 1856)):
        tbl.add(device=h200, weight_format=fmt, activation=act, gemm=gemm, N=N, K=K, E=128, tokens=8192, config=exact)
    got = choose_moe_config(8192, 2688, 1856, 128, 6, fmt, act, h200, table=tbl)
    assert (got.gemm1, got.gemm2) == (exact, exact)


def test_persistent_config_rules():
    """KernelConfig.persistent: None = the auto rule (prefill tiles of 16-bit and, at 4 warps, FP8
    formats: as many programs per SM as their pipeline buffers fit, at most 2; decode tiles,
    split-K, FP8 at 8 warps, > 64 accumulators per thread and the block-scaled formats: 0), an
    explicit value wins; bad values are refused."""
    from fusedmoe.backends.kernel_configs import auto_persistent

    pre = KernelConfig(64, 128, 128, num_warps=4, num_stages=3)
    assert auto_persistent(pre, Format.FP8_CHANNEL, 1) == 2  # 3 x 24 KB stages
    assert auto_persistent(KernelConfig(64, 128, 128, num_warps=8, num_stages=3), Format.FP8_CHANNEL, 1) == 0
    assert auto_persistent(KernelConfig(128, 128, 64, num_warps=8, num_stages=4), Format.BF16, 2) == 1  # 4 x 32 KB
    assert auto_persistent(KernelConfig(64, 128, 64, num_warps=4, num_stages=5), Format.BF16, 2) == 1  # 5 x 24 KB
    assert auto_persistent(KernelConfig(128, 128, 64, num_warps=4, num_stages=3), Format.BF16, 2) == 0  # 128 acc/thread
    assert auto_persistent(KernelConfig(16, 128, 128), Format.FP8_TENSOR, 1) == 0  # decode tile
    assert auto_persistent(KernelConfig(64, 128, 128), Format.MXFP4, 2) == 0
    assert auto_persistent(KernelConfig(64, 128, 128, split_k=2), Format.BF16, 2) == 0
    assert auto_persistent(KernelConfig(64, 128, 128, persistent=0), Format.BF16, 2) == 0
    assert auto_persistent(KernelConfig(16, 128, 128, persistent=3), Format.MXFP4, 2) == 3
    assert KernelConfig.from_dict(KernelConfig(64, 128, 128, persistent=1).to_dict()).persistent == 1
    assert KernelConfig.from_dict({"block_m": 64, "block_n": 128, "block_k": 128}).persistent is None
    with pytest.raises(ValueError, match="split_k 1"):
        KernelConfig(64, 128, 128, split_k=2, persistent=1)
    with pytest.raises(ValueError, match="persistent"):
        KernelConfig(64, 128, 128, persistent=9)
    with pytest.raises(TypeError, match="persistent"):
        KernelConfig(64, 128, 128, persistent=True)


@interpreter
def test_fp32_exact_paths_and_masks():
    """fp32 hidden: BF16 path to 1e-5; K and N tails (H, I_pad not multiples of the tiles), swap_ab,
    group_m > 1, and the atomic combine."""
    act = Activation.GEGLU
    prob = make_problem(T=5, H=96, I=40, I_pad=48, E=4, K=3, act=act, wfmt=Format.BF16, dtype=torch.float32,
                        bias=True, offset=1, E_glob=6, seed=7)
    cfgs = [
        None,
        MoEKernelConfig(KernelConfig(16, 32, 64, group_m=2, swap_ab=True), KernelConfig(16, 64, 32, swap_ab=True)),
        MoEKernelConfig(KernelConfig(32, 16, 32), KernelConfig(32, 32, 16), atomic_combine=True),
        {"gemm1": {"block_m": 16, "block_n": 64, "block_k": 32}},
    ]
    for cfg in cfgs:
        got, ref = run_case(prob, act=act, wfmt=Format.BF16, offset=1, config=cfg)
        mx, rms = _errors(got, ref)
        assert mx <= 1e-5 and rms <= 1e-6, (cfg, mx, rms)


@interpreter
def test_fp8_block_plain_intermediate_path():
    """FP8 block with GEMM1 block_n = 64: the intermediate goes through quantize_act instead of the
    in-epilogue group quantization; both must agree with the reference."""
    act = Activation.RELU2
    prob = make_problem(T=5, H=128, I=128, I_pad=128, E=4, K=2, act=act, wfmt=Format.FP8_BLOCK,
                        dtype=torch.float16, seed=11)
    cfg = MoEKernelConfig(KernelConfig(16, 64, 128, swap_ab=True), KernelConfig(16, 64, 128))
    got, ref = run_case(prob, act=act, wfmt=Format.FP8_BLOCK, config=cfg)
    mx, rms = _errors(got, ref)
    assert mx <= 3e-2 and rms <= 6e-3, (mx, rms)


@interpreter
def test_deterministic_and_empty():
    act = Activation.SWIGLU
    prob = make_problem(T=5, H=64, I=32, I_pad=32, E=4, K=2, act=act, wfmt=Format.FP8_TENSOR, dtype=torch.float16)
    a, _ = run_case(prob, act=act, wfmt=Format.FP8_TENSOR)
    b, _ = run_case(prob, act=act, wfmt=Format.FP8_TENSOR)
    assert torch.equal(a, b)
    out = triton_experts(prob["hidden"][:0], prob["q13"], prob["q2"], prob["ids"][:0], prob["tw"][:0],
                         activation=act, act_params=None, act_format=Format.FP8_TENSOR, intermediate_size_padded=32,
                         a1_scale=prob["a1"], a2_scale=prob["a2"])
    assert out.shape == (0, 64) and out.dtype == torch.float16


@interpreter
def test_errors():
    act = Activation.SWIGLU
    prob = make_problem(T=2, H=64, I=32, I_pad=32, E=4, K=2, act=act, wfmt=Format.BF16, dtype=torch.float16)
    base = dict(activation=act, act_params=None, intermediate_size_padded=32)
    args = (prob["hidden"], prob["q13"], prob["q2"], prob["ids"], prob["tw"])
    with pytest.raises(ValueError, match="act_format"):
        triton_experts(*args, act_format=Format.FP8_TENSOR, **base)
    with pytest.raises(ValueError, match="w13"):
        triton_experts(*args, act_format=Format.BF16, **{**base, "intermediate_size_padded": 48})
    w = torch.randn(4, 64, 64)
    mx13 = quantize_weight(w, Format.MXFP8)
    mx2 = quantize_weight(torch.randn(4, 64, 32), Format.MXFP8)
    with pytest.raises(ValueError, match="act_format"):  # MXFP8 weights pair with MXFP8 activations only
        triton_experts(prob["hidden"], mx13.to(DEV), mx2.to(DEV), prob["ids"], prob["tw"], act_format=Format.BF16,
                       **base)
    with pytest.raises(NotImplementedError, match="FP8_TOKEN"):  # an activation format, not a weight format
        q = QuantizedTensor(w.to(torch.float8_e4m3fn), Format.FP8_TOKEN, torch.ones(4, 64))
        q2 = QuantizedTensor(torch.randn(4, 64, 32).to(torch.float8_e4m3fn), Format.FP8_TOKEN, torch.ones(4, 64))
        triton_experts(prob["hidden"], q.to(DEV), q2.to(DEV), prob["ids"], prob["tw"], act_format=Format.FP8_TOKEN,
                       **base)
    with pytest.raises(ValueError, match="block_m"):
        MoEKernelConfig(KernelConfig(16, 32, 32), KernelConfig(32, 32, 32))


# ---- configs (no kernels) ----------------------------------------------------------------------


def test_heuristic_shapes():
    # decode on an H200: 16-row tiles, fp8 swaps A/B (and takes K tiles of 256 at one token)
    c = choose_config(1, 1536, 2048, 128, 8, Format.FP8_TENSOR, "gemm1", "NVIDIA H200", activation=Activation.SWIGLU,
                      table=TunedTable())
    assert c.block_m == 16 and c.swap_ab and c.block_k == 256 and c.block_n == 64
    c = choose_config(8, 1536, 2048, 128, 8, Format.FP8_TENSOR, "gemm1", "NVIDIA H200", activation=Activation.SWIGLU,
                      table=TunedTable())
    assert c.block_m == 16 and c.swap_ab and c.block_k == 128
    c = choose_config(1, 2048, 768, 128, 8, Format.BF16, "gemm2", "NVIDIA H200", table=TunedTable())
    assert c.block_m == 16 and not c.swap_ab
    # prefill on Hopper: 256 weight rows per program (a gated GEMM1 holds two 128-row accumulators)
    c1 = choose_config(8192, 1536, 2048, 128, 8, Format.BF16, "gemm1", "NVIDIA H200", activation=Activation.SWIGLU,
                       table=TunedTable())
    c2 = choose_config(8192, 2048, 768, 128, 8, Format.BF16, "gemm2", "NVIDIA H200", table=TunedTable())
    assert c1.block_m == c2.block_m == 128 and c1.block_n == 128 and c2.block_n == 256
    assert c1.num_warps == c2.num_warps == 8 and c1.num_stages == c2.num_stages == 4
    # FP8 per tensor / channel with I >= 512 at 512 rows per expert: both GEMMs warp-specialized (Gluon:
    # GEMM1 the wide 2 x 128 tile from 256 rows per expert, 4 stages of 48 KB; GEMM2 128 columns, 5 stages;
    # 4 warps + the kernel's own)
    f1 = choose_config(8192, 1536, 2048, 128, 8, Format.FP8_TENSOR, "gemm1", "NVIDIA H200",
                       activation=Activation.SWIGLU, table=TunedTable())
    f2 = choose_config(8192, 2048, 768, 128, 8, Format.FP8_TENSOR, "gemm2", "NVIDIA H200", table=TunedTable())
    assert f1.warp_specialized and f2.warp_specialized
    assert (f1.block_m, f1.block_n, f1.block_k, f1.num_warps, f1.num_stages) == (128, 128, 128, 4, 4)
    assert (f2.block_n, f2.num_stages) == (128, 5)
    # ... not below 512 (TP shards: the held-activation GEMM2), not on other GPUs, not for FP8 block
    tp = choose_moe_config(8192, 7168, 256, 256, 8, Format.FP8_TENSOR, Activation.SWIGLU, "NVIDIA H200",
                           table=TunedTable())
    assert not tp.gemm1.warp_specialized and not tp.gemm2.warp_specialized and tp.gemm2.n_tiles > 1
    for wf, dev in ((Format.FP8_CHANNEL, "NVIDIA A100-SXM4-80GB"), (Format.FP8_BLOCK, "NVIDIA H200")):
        o = choose_moe_config(8192, 2048, 768, 128, 8, wf, Activation.SWIGLU, dev, table=TunedTable())
        assert not o.gemm1.warp_specialized and not o.gemm2.warp_specialized
    # a GEMM taking the other's block_m leaves the warp-specialized kernel (128 rows only)
    m = choose_moe_config(8192, 2048, 768, 128, 8, Format.FP8_TENSOR, Activation.SWIGLU, "NVIDIA H200",
                          table=TunedTable(), override={"gemm2": KernelConfig(64, 128, 128, num_warps=8)})
    assert m.block_m == 64 and not m.gemm1.warp_specialized and m.gemm1.block_n == 128 and m.gemm1.num_warps == 8
    # FP8 per tensor / channel (promoted accumulation): 64-row token tiles from 43 to 63 rows per
    # expert (Nemotron-Nano at 1024 tokens: 48), with 128 weight rows (per half) and 8 warps; from 64
    # rows (Nemotron-Nano at 4096 tokens: 192; Qwen3-30B at 2048: 128) the warp-specialized kernels
    # (tests/test_ws_gemm.py::test_ws_heuristic_rows_per_expert)
    for wf in (Format.FP8_TENSOR, Format.FP8_CHANNEL):
        m = choose_moe_config(1024, 2688, 1856, 128, 6, wf, Activation.RELU2, "NVIDIA H200", table=TunedTable())
        assert (m.block_m, m.gemm1.block_n, m.gemm1.num_warps, m.gemm2.block_n, m.gemm2.num_warps) == (64, 128, 8, 128, 8)
        g = choose_moe_config(768, 2048, 768, 128, 8, wf, Activation.SWIGLU, "NVIDIA H200", table=TunedTable())
        assert (g.block_m, g.gemm1.block_n, g.gemm1.num_warps) == (64, 128, 8)
        for T, H, I, k, act in ((4096, 2688, 1856, 6, Activation.RELU2), (2048, 2048, 768, 8, Activation.SWIGLU)):
            w = choose_moe_config(T, H, I, 128, k, wf, act, "NVIDIA H200", table=TunedTable())
            assert w.block_m == 128 and w.gemm1.warp_specialized and w.gemm2.warp_specialized
    # block-scaled formats (weight tile dequantized in registers): FP4 GEMM1 as W @ A^T with gate and up joined in
    # 128 rows, MXFP8 2 x 64 (tests/test_triton_fp4.py: the rest)
    for wf, bn in ((Format.NVFP4, 64), (Format.MXFP4, 64), (Format.MXFP8, 64)):
        assert choose_config(8192, 1536, 2048, 128, 8, wf, "gemm1", "NVIDIA H200", activation=Activation.SWIGLU,
                             table=TunedTable()).block_n == bn
    # other GPUs keep the 128-row tiles
    a1 = choose_config(8192, 1536, 2048, 128, 8, Format.BF16, "gemm1", "NVIDIA A100-SXM4-80GB",
                       activation=Activation.SWIGLU, table=TunedTable())
    assert a1.block_n == 64
    # FP8 block: GEMM1 tiles hold whole 128-groups
    c = choose_config(4, 1536, 2048, 128, 8, Format.FP8_BLOCK, "gemm1", "NVIDIA H200", activation=Activation.SWIGLU,
                      table=TunedTable())
    assert c.block_n % 128 == 0 and c.block_k == 128
    m = choose_moe_config(64, 2048, 768, 128, 8, Format.BF16, Activation.RELU2, "NVIDIA H200", table=TunedTable())
    assert m.gemm1.block_m == m.gemm2.block_m
    assert [token_bucket(x) for x in (0, 1, 3, 64, 65)] == [1, 1, 4, 64, 128]


def test_fit_stages_to_shared_memory():
    from fusedmoe.backends.triton_moe import fit_stages

    h200 = 232448  # opt-in shared memory per block
    c = choose_config(8192, 2048, 768, 128, 8, Format.BF16, "gemm2", "NVIDIA H200", table=TunedTable())
    assert (c.block_m, c.block_n, c.block_k, c.num_stages) == (128, 256, 64, 4)
    assert fit_stages(c, 2, 2, 1, h200) == c  # 16-bit operands: 4 x 48 KiB fit
    f = fit_stages(c, 4, 2, 1, h200)  # fp32 hidden states: 64 KiB per stage
    assert f.num_stages == 3 and f.block_n == c.block_n and 3 * 64 * (128 * 4 + 256 * 2) <= h200
    assert fit_stages(c, 4, 4, 1, h200).num_stages == 2  # fp32 weights too: 96 KiB per stage
    assert fit_stages(c, 4, 4, 1, 0) == c  # unknown shared memory: unchanged
    g = KernelConfig(128, 256, 64, num_warps=8, num_stages=4)
    assert fit_stages(g, 4, 4, 2, h200).num_stages == 1  # 160 KiB per stage: one, never fewer


def test_trim_stages_to_the_k_loop():
    """``trim_stages``: at most one stage more than a program's K blocks (split-K shares counted),
    never below 2; persistent, column-tile-holding and warp-specialized GEMMs and the switch's off
    position leave the config as it is."""
    from fusedmoe.backends import triton_moe as tm

    c = KernelConfig(16, 64, 256, num_warps=4, num_stages=5, swap_ab=True)
    assert tm.trim_stages(c, 256).num_stages == 2  # one K block (DeepSeek-V3 TP8's GEMM2 at decode)
    assert tm.trim_stages(c, 768).num_stages == 4  # three
    assert tm.trim_stages(c, 1024) == c  # four: all five stages can be in use
    assert tm.trim_stages(KernelConfig(16, 64, 128, num_stages=5, split_k=4), 7168).num_stages == 5  # 14 blocks each
    assert tm.trim_stages(KernelConfig(16, 64, 256, num_stages=5, split_k=4), 2048).num_stages == 3  # 2 blocks each
    assert tm.trim_stages(KernelConfig(16, 64, 256, num_stages=1), 256).num_stages == 1  # never raised
    assert tm.trim_stages(c, 256, persistent=True) == c
    assert tm.trim_stages(KernelConfig(64, 64, 256, num_stages=5, n_tiles=4), 256).num_stages == 5
    prev = tm.set_trim_stages(False)
    try:
        assert tm.trim_stages(c, 256) == c
    finally:
        tm.set_trim_stages(prev)


def test_tuned_table_json_roundtrip_and_fallback(tmp_path):
    tuned = KernelConfig(block_m=32, block_n=128, block_k=64, group_m=4, num_warps=8, num_stages=4, swap_ab=True)
    doc = {"format_version": 1, "entries": [
        {"device": "NVIDIA H200", "weight_format": "fp8_tensor", "activation": "relu2", "gemm": "gemm1",
         "N": 1920, "K": 2048, "E": 128, "tokens": 16, "config": tuned.to_dict()},
        {"device": "NVIDIA H200", "weight_format": "fp8_tensor", "activation": "*", "gemm": "gemm2",
         "N": 2048, "K": 1920, "E": 128, "tokens": 256, "config": {"block_m": 64, "block_n": 64, "block_k": 128}},
    ]}
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps(doc))
    table = load_tuned_configs(path)
    assert len(table) == 2
    kw = dict(weight_format=Format.FP8_TENSOR, device_name="NVIDIA H200", table=table)
    # exact key, nearest bucket (13 tokens -> bucket 16; 50 -> bucket 64, two powers of two away)
    assert choose_config(13, 1920, 2048, 128, 8, gemm="gemm1", activation=Activation.RELU2, **kw) == tuned
    assert choose_config(50, 1920, 2048, 128, 8, gemm="gemm1", activation=Activation.RELU2, **kw) == tuned
    # ... but not further (MAX_BUCKET_OCTAVES): 100 tokens (bucket 128) and 1 token (bucket 1, four
    # octaves below) get the heuristic, not tiles tuned for 16 tokens
    for T in (100, 4096, 1):
        assert choose_config(T, 1920, 2048, 128, 8, gemm="gemm1", activation=Activation.RELU2, **kw) == \
            choose_config(T, 1920, 2048, 128, 8, Format.FP8_TENSOR, "gemm1", "NVIDIA H200",
                          activation=Activation.RELU2, table=TunedTable())
    # wildcard activation
    assert choose_config(300, 2048, 1920, 128, 8, gemm="gemm2", activation=Activation.RELU2, **kw).block_m == 64
    # fallback to the heuristic: other device (not a sibling of the H200: test_table_siblings), other shape
    heur = choose_config(13, 1920, 2048, 128, 8, Format.FP8_TENSOR, "gemm1", "NVIDIA A100-SXM4-80GB",
                         activation=Activation.RELU2, table=TunedTable())
    assert choose_config(13, 1920, 2048, 128, 8, gemm="gemm1", activation=Activation.RELU2,
                         weight_format=Format.FP8_TENSOR, device_name="NVIDIA A100-SXM4-80GB", table=table) == heur
    assert choose_config(13, 1920, 4096, 128, 8, gemm="gemm1", activation=Activation.RELU2, **kw) != tuned
    # override wins over the table
    ov = KernelConfig(16, 16, 16)
    assert choose_config(13, 1920, 2048, 128, 8, gemm="gemm1", activation=Activation.RELU2, override=ov, **kw) == ov
    # choose_moe_config reconciles block_m between the GEMMs
    m = choose_moe_config(13, 2048, 1920, 128, 8, Format.FP8_TENSOR, Activation.RELU2, "NVIDIA H200", table=table)
    assert m.gemm1 == tuned and m.gemm2.block_m == 32
    # save -> load round trip
    save_tuned_configs(table, tmp_path / "again.json")
    assert load_tuned_configs(tmp_path / "again.json").to_json_dict() == table.to_json_dict()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format_version": 1, "entries": [{"device": "x"}]}))
    with pytest.raises(ValueError, match="entry 0"):
        load_tuned_configs(bad)
    with pytest.raises(ValueError, match="power of two"):
        KernelConfig(24, 32, 32)


def test_table_siblings():
    """A GPU with no entry of its own for a shape takes its tuned sibling's (same chip, same SM count: an H100 SXM
    the H200's); its own entries win; PCIe cards (114 SMs), other chips and set_table_siblings(False) get the
    heuristic; choose_moe_config's cache follows the switch."""
    from fusedmoe.backends.kernel_configs import set_table_siblings, table_devices, table_nearest

    h100, h200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"
    assert table_devices(h200, 132) == (h200,)
    for name in (h100, "NVIDIA H100 NVL", "NVIDIA H800", "NVIDIA GH200 480GB", "NVIDIA H200 NVL"):
        assert table_devices(name, 132) == (name, h200), name
        assert table_devices(name) == (name, h200), name  # known by name only
    for name, sms in (("NVIDIA H100 PCIe", 114), ("NVIDIA H100 PCIe", None), ("NVIDIA H20", 78),
                      ("NVIDIA A100-SXM4-80GB", 108), ("NVIDIA H100 80GB HBM3", 114)):
        assert table_devices(name, sms) == (name,), (name, sms)
    mine = KernelConfig(block_m=16, block_n=32, block_k=32, num_warps=2, num_stages=2)
    other = KernelConfig(block_m=16, block_n=64, block_k=64, num_warps=4, num_stages=3)
    own = KernelConfig(block_m=16, block_n=128, block_k=64, num_warps=4, num_stages=4)
    tbl = TunedTable()
    key = dict(weight_format="bf16", activation="swiglu", E=128, tokens=1)
    tbl.add(device=h200, gemm="gemm1", N=1536, K=2048, config=mine, **key)
    tbl.add(device=h200, gemm="gemm2", N=2048, K=768, config=other, **key)
    args = (1, 2048, 768, 128, 8, Format.BF16, Activation.SWIGLU)
    heur = choose_moe_config(*args, h100, table=TunedTable(), num_sms=132)
    assert (heur.gemm1, heur.gemm2) != (mine, other)
    got = choose_moe_config(*args, h100, table=tbl, num_sms=132)
    assert (got.gemm1, got.gemm2) == (mine, other)
    assert table_nearest(tbl, h100, 132, gemm="gemm1", N=1536, K=2048, **key) == (h200, 1, mine)
    assert choose_moe_config(*args, "NVIDIA H100 PCIe", table=tbl, num_sms=114) == choose_moe_config(
        *args, "NVIDIA H100 PCIe", table=TunedTable(), num_sms=114)
    # an H100 entry two buckets away: the H200's exact one is nearer the call's tokens
    tbl.add(device=h100, gemm="gemm1", N=1536, K=2048, config=own, **dict(key, tokens=4))
    assert table_nearest(tbl, h100, 132, gemm="gemm1", N=1536, K=2048, **key) == (h200, 1, mine)
    assert table_nearest(tbl, h100, 132, gemm="gemm1", N=1536, K=2048, **dict(key, tokens=3)) == (h100, 4, own)
    tbl.add(device=h100, gemm="gemm1", N=1536, K=2048, config=own, **key)  # the H100's own entry wins a tie
    got = choose_moe_config(*args, h100, table=tbl, num_sms=132)
    assert (got.gemm1, got.gemm2) == (own, other)
    assert table_nearest(tbl, h100, 132, gemm="gemm1", N=1536, K=2048, **key) == (h100, 1, own)
    from fusedmoe.backends.kernel_configs import use_tuned_configs

    try:
        use_tuned_configs(tbl)
        assert choose_moe_config(*args, h100, num_sms=132).gemm2 == other  # cached ...
        prev = set_table_siblings(False)
        try:
            assert prev is True
            assert table_devices(h100, 132) == (h100,)
            assert choose_moe_config(*args, h100, num_sms=132).gemm2 == heur.gemm2  # ... and recomputed
            with pytest.raises(TypeError, match="bool"):
                set_table_siblings(1)
        finally:
            set_table_siblings(prev)
        assert choose_moe_config(*args, h100, num_sms=132).gemm2 == other
    finally:
        use_tuned_configs(None)


def test_table_siblings_env_switch():
    """FUSEDMOE_TABLE_SIBLINGS=0 starts with the siblings off (a fresh interpreter)."""
    code = ("import fusedmoe.backends.triton_moe as tm; from fusedmoe.backends import kernel_configs as kc; "
            "print(kc.table_devices('NVIDIA H100 80GB HBM3', 132))")
    for val, want in (("0", "('NVIDIA H100 80GB HBM3',)"), ("1", "('NVIDIA H100 80GB HBM3', 'NVIDIA H200')")):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={**os.environ, "FUSEDMOE_TABLE_SIBLINGS": val}).stdout.strip()
        assert out == want, (val, out)


def test_use_tuned_configs_switches_the_table_calls_consult(tmp_path):
    """use_tuned_configs(file) makes calls without an explicit table look the file up (a table
    tuned with `fusedmoe tune --out FILE`); None restores the shipped table."""
    from fusedmoe.backends.kernel_configs import use_tuned_configs

    mine = KernelConfig(block_m=16, block_n=32, block_k=32, num_warps=2, num_stages=2)
    doc = {"format_version": 1, "entries": [
        {"device": "NVIDIA H200", "weight_format": "bf16", "activation": "swiglu", "gemm": "gemm1",
         "N": 1536, "K": 2048, "E": 128, "tokens": 1, "config": mine.to_dict()}]}
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(doc))
    args = (1, 1536, 2048, 128, 8, Format.BF16, "gemm1", "NVIDIA H200")
    shipped = choose_config(*args, activation=Activation.SWIGLU)
    assert shipped != mine
    try:
        use_tuned_configs(path)
        assert choose_config(*args, activation=Activation.SWIGLU) == mine
        # shapes the file does not cover: the heuristic, not the shipped table
        assert choose_config(1, 1536, 4096, 128, 8, Format.BF16, "gemm1", "NVIDIA H200",
                             activation=Activation.SWIGLU) == choose_config(
            1, 1536, 4096, 128, 8, Format.BF16, "gemm1", "NVIDIA H200", activation=Activation.SWIGLU,
            table=TunedTable())
        with pytest.raises(TypeError, match="path, a TunedTable or None"):
            use_tuned_configs(3)
    finally:
        use_tuned_configs(None)
    assert choose_config(*args, activation=Activation.SWIGLU) == shipped


def test_moe_config_cache_follows_the_active_table():
    """choose_moe_config without a table or override is computed once per shape and token count
    (the eager per-call path), and recomputed when the active table changes: use_tuned_configs,
    or an entry added to the active table."""
    from fusedmoe.backends.kernel_configs import use_tuned_configs

    args = (1, 2048, 768, 128, 8, Format.BF16, Activation.SWIGLU, "NVIDIA H200")
    first = choose_moe_config(*args)
    assert choose_moe_config(*args) is first  # cached
    assert first == choose_moe_config(*args, table=None, override=None)
    mine = KernelConfig(block_m=16, block_n=32, block_k=32, num_warps=2, num_stages=2)
    other = KernelConfig(block_m=16, block_n=64, block_k=64, num_warps=4, num_stages=3)
    tbl = TunedTable()
    try:
        use_tuned_configs(tbl)
        heur = choose_moe_config(*args)
        assert heur == choose_moe_config(*args, table=TunedTable())  # empty table: the heuristic
        tbl.add(device="NVIDIA H200", weight_format="bf16", activation="swiglu", gemm="gemm1",
                N=1536, K=2048, E=128, tokens=1, config=mine)
        tbl.add(device="NVIDIA H200", weight_format="bf16", activation="swiglu", gemm="gemm2",
                N=2048, K=768, E=128, tokens=1, config=other)
        got = choose_moe_config(*args)
        assert (got.gemm1, got.gemm2) == (mine, other)  # not the cached heuristic
    finally:
        use_tuned_configs(None)
    assert choose_moe_config(*args) == first


def test_neighbor_bucket_entry_keeps_its_tile_only_if_it_fits():
    """An entry tuned at another token count is used only if its token tile still holds a typical
    expert's rows (heuristic_block_m) or has 64+ rows; otherwise the heuristic decides."""
    tile32 = KernelConfig(block_m=32, block_n=64, block_k=128, num_warps=4, num_stages=4)
    tile64 = KernelConfig(block_m=64, block_n=128, block_k=64, num_warps=8, num_stages=4)
    tbl = TunedTable()
    for gemm, N, K in (("gemm1", 28672, 4096), ("gemm2", 4096, 14336)):
        tbl.add(device="NVIDIA H200", weight_format="bf16", activation="swiglu", gemm=gemm, N=N, K=K, E=8,
                tokens=64, config=tile32)
        tbl.add(device="NVIDIA H200", weight_format="bf16", activation="swiglu", gemm=gemm, N=N, K=K, E=8,
                tokens=4096, config=tile64)

    def pick(T):
        return choose_moe_config(T, 4096, 14336, 8, 2, Format.BF16, Activation.SWIGLU, "NVIDIA H200", table=tbl)

    def heur(T):
        return choose_moe_config(T, 4096, 14336, 8, 2, Format.BF16, Activation.SWIGLU, "NVIDIA H200",
                                 table=TunedTable())

    assert pick(64).gemm1 == tile32  # its own bucket
    assert pick(32).gemm1 == tile32  # 8 rows per expert: the 32-row tile holds them
    assert heur(128).block_m == 64 and pick(128) == heur(128)  # 32 rows per expert: 32-row tile refused
    assert pick(16384).gemm1 == tile64  # 64-row tiles are kept (compute-bound)


def test_host_launch_arithmetic():
    from fusedmoe.kernels._host import cdiv, next_pow2

    for a in range(0, 70):
        for b in (1, 2, 3, 16, 64):
            assert cdiv(a, b) == (a + b - 1) // b
    assert [next_pow2(n) for n in (0, 1, 2, 3, 4, 5, 64, 65, 1000)] == [1, 1, 2, 4, 4, 8, 64, 128, 1024]


def test_direct_launch_keys_and_reuse(monkeypatch):
    """``_host.launch`` goes through ``kernel[grid]`` once per specialization (what Triton
    specializes on: constexpr values, tensor dtype / 16-byte alignment, ints == 1 / % 16 / 32-bit,
    launch options), then calls the compiled kernel's launcher with every parameter in order."""
    import inspect
    from types import SimpleNamespace

    from fusedmoe.kernels import _host

    P = SimpleNamespace
    params = [P(name="x", is_constexpr=False, default=inspect.Parameter.empty),
              P(name="n", is_constexpr=False, default=inspect.Parameter.empty),
              P(name="s", is_constexpr=False, default=2.0),
              P(name="B", is_constexpr=True, default=inspect.Parameter.empty),
              P(name="C", is_constexpr=True, default=7)]
    slow, fast = [], []

    class Compiled:
        function, packed_metadata = "fn", "meta"

        def run(self, *a):
            fast.append(a)

    class Kernel:
        def __init__(self):
            self.params = params

        def __getitem__(self, grid):
            def runner(*args, **kw):
                slow.append((grid, args, kw))
                return Compiled()
            return runner

    monkeypatch.setattr(_host, "_DIRECT", True)
    monkeypatch.setattr(_host, "interpreted", lambda k: False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda d: 1234, raising=False)
    k = Kernel()
    x = torch.zeros(64, dtype=torch.float16)
    _host.launch(k, (3,), x, 32, B=4, num_warps=4)
    _host.launch(k, (5, 2), x, 48, B=4, num_warps=4)  # same specialization: direct
    assert len(slow) == 1 and fast == [(5, 2, 1, 1234, "fn", "meta", None, None, None, x, 48, 2.0, 4, 7)]
    for args, kw in [((x, 33), dict(B=4, num_warps=4)),  # not divisible by 16
                     ((x, 1), dict(B=4, num_warps=4)),  # == 1
                     ((x, 2 ** 31 + 16), dict(B=4, num_warps=4)),  # 64-bit
                     ((x, 32), dict(B=8, num_warps=4)),  # constexpr value
                     ((x, 32), dict(B=4, num_warps=8)),  # launch option
                     ((x.float(), 32), dict(B=4, num_warps=4)),  # dtype
                     ((x[1:], 32), dict(B=4, num_warps=4))]:  # 2-byte aligned pointer
        before = len(slow)
        _host.launch(k, (1,), *args, **kw)
        assert len(slow) == before + 1, (args, kw)
    assert len(fast) == 1
    _host.launch(k, (1,), x, 33, B=4, num_warps=4)  # now known: direct
    assert len(fast) == 2 and len(slow) == 8
    _host.launch(k, (1,), x, 32, B=[1], num_warps=4)  # unhashable constexpr: Triton decides
    _host.launch(k, (1,), object(), 32, B=4, num_warps=4)  # unknown argument type: Triton decides
    assert len(slow) == 10 and len(fast) == 2
    monkeypatch.setattr(_host, "_DIRECT", False)
    _host.launch(k, (1,), x, 32, B=4, num_warps=4)
    assert len(slow) == 11 and len(fast) == 2
    # a launch hook (profilers) takes Triton's path: Triton 3.6 keeps an empty HookChain otherwise
    from triton.knobs import HookChain

    chain = HookChain()
    assert not _host._hooked(None) and not _host._hooked(chain)
    chain.add(print)
    assert _host._hooked(chain)


# ---- GPU tests (real shapes) -------------------------------------------------------------------

_GPU_FMTS = [Format.BF16, Format.FP8_TENSOR, Format.FP8_CHANNEL, Format.FP8_BLOCK]


def _assert_auto_within_bound(prob, *, act, wfmt, params=None, offset=0):
    """The call without a config (the tuned table's choice) within the format's bound of the reference -- or, where
    the table chose the Gluon decode kernel for FP8 weights and the heuristic's Triton kernels are already near the
    bound, within 15 % of their error: both re-quantize the intermediate to e4m3 (steps of 2^-4), and the kernels'
    different accumulation orders flip a few values by a step (BENCHMARKS.md section 0, thirty-first session)."""
    got, ref = run_case(prob, act=act, wfmt=wfmt, params=params, offset=offset)
    mx, rms = _errors(got, ref)
    bmx, brms = _bounds(wfmt, torch.bfloat16)
    if mx <= bmx and rms <= brms:
        return
    T, H = prob["hidden"].shape
    E, K = prob["q13"].shape[0], prob["ids"].shape[1]
    name = torch.cuda.get_device_name()
    chosen = choose_moe_config(T, H, prob["I_pad"], E, K, wfmt, act, name)
    assert wfmt is not Format.BF16 and chosen.gemm1.warp_specialized and chosen.block_m == 16, (mx, rms, chosen)
    heur = choose_moe_config(T, H, prob["I_pad"], E, K, wfmt, act, name, table=TunedTable())
    base, _ = run_case(prob, act=act, wfmt=wfmt, params=params, offset=offset, config=heur)
    bx, br = _errors(base, ref)
    assert mx <= max(bmx, 1.15 * bx) and rms <= max(brms, 1.15 * br), (mx, rms, bx, br)


@gpu
@pytest.mark.parametrize("T", [1, 8, 128, 512])
@pytest.mark.parametrize("wfmt", _GPU_FMTS, ids=lambda f: f.name)
@pytest.mark.parametrize("act", [Activation.SWIGLU, Activation.RELU2, Activation.SWIGLU_OAI], ids=lambda a: a.name)
def test_gpu_qwen3_shapes(T, wfmt, act):
    """Qwen3-30B-A3B-like: H 2048, I 768, E 128, K 8; ReLU2 / gpt-oss SwiGLU on the same shapes."""
    prob = make_problem(T=T, H=2048, I=768, I_pad=768, E=128, K=8, act=act, wfmt=wfmt, dtype=torch.bfloat16,
                        bias=act is Activation.SWIGLU_OAI, seed=T)
    _assert_auto_within_bound(prob, act=act, wfmt=wfmt, params=_params(act))


@gpu
@pytest.mark.parametrize("T", [1, 8, 128, 512])
@pytest.mark.parametrize("wfmt", [Format.BF16, Format.FP8_TENSOR, Format.FP8_CHANNEL], ids=lambda f: f.name)
def test_gpu_nemotron_relu2_padded(T, wfmt):
    """Nemotron-3-Nano-sized non-gated ReLU2 (H 2688, I 1856 padded to 1920 by the 128
    alignment) with Super-like routing: 128 local experts of 512 (expert parallel), top-22."""
    prob = make_problem(T=T, H=2688, I=1856, I_pad=1920, E=128, K=22, act=Activation.RELU2, wfmt=wfmt,
                        dtype=torch.bfloat16, offset=128, E_glob=512, seed=T + 1)
    _assert_auto_within_bound(prob, act=Activation.RELU2, wfmt=wfmt, offset=128)


@gpu
@pytest.mark.parametrize("wfmt", [Format.FP8_TENSOR, Format.FP8_CHANNEL], ids=lambda f: f.name)
@pytest.mark.parametrize("act", [Activation.SWIGLU, Activation.RELU2], ids=lambda a: a.name)
def test_gpu_fp8_fast_accum_prefill(wfmt, act):
    """Prefill (4096 tokens, block_m 128) with FP8 accumulated in the tensor cores and 256-row
    weight tiles (GEMM2; non-gated GEMM1 too): within the FP8 bounds of the promoted path."""
    prob = make_problem(T=4096, H=2048, I=768, I_pad=768, E=128, K=8, act=act, wfmt=wfmt, dtype=torch.bfloat16,
                        seed=31)
    # the heuristic (the shipped tuned table picks block_m 64 for this Qwen3-30B shape; the heuristic
    # itself 128 from 256 rows per expert on)
    heur = choose_moe_config(4096, 2048, 768, 128, 8, wfmt, act, torch.cuda.get_device_name(), table=TunedTable())
    assert heur.block_m == 128
    got, ref = run_case(prob, act=act, wfmt=wfmt, config=fp8_fast_accum_variant(heur, act.is_gated))
    mx, rms = _errors(got, ref)
    base, _ = run_case(prob, act=act, wfmt=wfmt)  # the default (promoted) accumulation
    _, base_rms = _errors(base, ref)
    # Hopper's FP8 tensor-core accumulation adds rounding on top of the FP8 operand error: at
    # K = 2048 the H200 measured RMS 1.03e-2-1.39e-2, 2.3-2.8x the promoted path's 4.3e-3-5.3e-3
    # on the same data (and above its bound of 1.2e-2 for channel x token). Stated bound for the
    # opt-in path: max 6e-2, RMS 2e-2 and at most 3.5x the promoted path's RMS.
    assert mx <= 6e-2 and rms <= 2e-2, (mx, rms)
    assert rms <= 3.5 * base_rms, (rms, base_rms)


@gpu
@pytest.mark.parametrize("wfmt", [Format.BF16, Format.FP8_BLOCK], ids=lambda f: f.name)
def test_gpu_split_k_cuda_graph(wfmt):
    """Split-K at one token (DeepSeek-V3 TP8 shape, GEMM1 8 splits, GEMM2 2): within the bound,
    bit-identical eager and in a captured CUDA graph replayed twice and on a second stream (the
    graph owns its arrival counters: a captured launch never shares the eager cache's buffer) --
    with the counters zeroed by a memset node and by the align launch (``set_align_zero_fill``), and with the align
    letting GEMM1 launch right after its own wait (``set_align_early_trigger``)."""
    prob = make_problem(T=1, H=7168, I=256, I_pad=256, E=256, K=8, act=Activation.SWIGLU, wfmt=wfmt,
                        dtype=torch.bfloat16, seed=5)
    bn = 128 if wfmt is Format.FP8_BLOCK else 64
    cfg = MoEKernelConfig(KernelConfig(16, bn, 128, num_stages=4, swap_ab=wfmt is not Format.BF16, split_k=8),
                          KernelConfig(16, 64, 128, num_stages=4, swap_ab=wfmt is not Format.BF16, split_k=2))
    eager, ref = run_case(prob, act=Activation.SWIGLU, wfmt=wfmt, config=cfg)
    mx, rms = _errors(eager, ref)
    bmx, brms = _bounds(wfmt, torch.bfloat16)
    assert mx <= bmx and rms <= brms, (mx, rms)
    out = torch.empty_like(eager)

    def launch():
        triton_experts(prob["hidden"], prob["q13"], prob["q2"], prob["ids"], prob["tw"], activation=Activation.SWIGLU,
                       act_params=None,
                       act_format=ACT_FMT[wfmt], intermediate_size_padded=256, a1_scale=prob["a1"],
                       a2_scale=prob["a2"], config=cfg, out=out)

    launch()
    assert torch.equal(out, eager)
    from fusedmoe.backends.triton_moe import set_align_early_trigger, set_align_zero_fill

    # the counters zeroed by a memset node, or by the align launch; the align's early trigger off / on
    for zero_in_align, early in ((False, False), (True, False), (True, True)):
        prev, prev_early = set_align_zero_fill(zero_in_align), set_align_early_trigger(early)
        try:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                launch()
            out.zero_()
            launch()  # eager, the same switches
            torch.cuda.synchronize()
            assert torch.equal(out, eager), (zero_in_align, early)
        finally:
            set_align_zero_fill(prev)
            set_align_early_trigger(prev_early)
        for stream in (torch.cuda.current_stream(), torch.cuda.Stream(), torch.cuda.current_stream()):
            out.zero_()
            torch.cuda.synchronize()
            with torch.cuda.stream(stream):
                graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(out, eager), (zero_in_align, early)


@gpu
@pytest.mark.parametrize("wfmt", [Format.BF16, Format.FP8_TENSOR, Format.FP8_CHANNEL, Format.FP8_BLOCK],
                         ids=lambda f: f.name)
def test_gpu_persistent_gemm2_same_bits(wfmt):
    """Persistent GEMM2 at prefill (DeepSeek-V3 TP8 shape, K = I = 256: two K-blocks per tile; 2048
    tokens, expert parallel with half the experts local): 1 and 2 programs per SM give the bits of
    one program per tile, eager and in a CUDA graph, within the bound of the reference."""
    T, act = 2048, Activation.SWIGLU
    prob = make_problem(T=T, H=7168, I=256, I_pad=256, E=128, K=8, act=act, wfmt=wfmt, dtype=torch.bfloat16,
                        offset=64, E_glob=256, seed=11)
    bn1 = 128 if wfmt is Format.FP8_BLOCK else 64
    g1 = KernelConfig(64, bn1, 128 if wfmt is not Format.BF16 else 64, group_m=8, num_warps=8, num_stages=3)
    outs = []
    for pers in (0, 1, 2):
        cfg = MoEKernelConfig(g1, KernelConfig(64, 128, g1.block_k, group_m=8, num_warps=8, num_stages=3,
                                               persistent=pers))
        outs.append(_run_within_bound(prob, act=act, wfmt=wfmt, dtype=torch.bfloat16, tag=pers, offset=64,
                                      config=cfg))
    assert torch.equal(outs[1], outs[0]) and torch.equal(outs[2], outs[0])
    _graph_replay_matches(prob, wfmt, 256, outs[0], offset=64, config=cfg)


@gpu
@pytest.mark.parametrize("wfmt", [Format.BF16, Format.FP8_TENSOR, Format.FP8_CHANNEL, Format.FP8_BLOCK],
                         ids=lambda f: f.name)
def test_gpu_held_a_gemm2_same_bits(wfmt):
    """GEMM2 with the activation tile held across column tiles (``KernelConfig.n_tiles``) at the
    DeepSeek-V3 TP8 shape (K = I = 256 in one block; expert parallel with half the experts local;
    256 tokens, where PDL is on, and 2048): 8, 14 and all 56 column tiles per program give the bits
    of one per program with the same tile, eager and in a CUDA graph, within the reference's bound.
    FP8 128 x 128 blocks: two held 128-wide K-blocks."""
    act = Activation.SWIGLU
    block = wfmt is Format.FP8_BLOCK
    g1 = KernelConfig(64, 128 if block else 64, 128 if wfmt is not Format.BF16 else 64, group_m=8, num_warps=8,
                      num_stages=3)
    bk2 = 128 if block else 256
    for T in (256, 2048):
        prob = make_problem(T=T, H=7168, I=256, I_pad=256, E=128, K=8, act=act, wfmt=wfmt, dtype=torch.bfloat16,
                            offset=64, E_glob=256, seed=13)
        for bm, bn, nw in ((64, 128, 4), (128, 128, 8)):
            outs = []
            for nt in (1, 8, 14, 56):
                cfg = MoEKernelConfig(dataclasses.replace(g1, block_m=bm),
                                      KernelConfig(bm, bn, bk2, num_warps=nw, num_stages=3, n_tiles=nt))
                outs.append(_run_within_bound(prob, act=act, wfmt=wfmt, dtype=torch.bfloat16, tag=(T, bm, nt),
                                              offset=64, config=cfg))
            for o in outs[1:]:
                assert torch.equal(o, outs[0]), (T, bm)
    _graph_replay_matches(prob, wfmt, 256, outs[0], offset=64, config=cfg)


@gpu
@pytest.mark.parametrize("act", [Activation.SWIGLU, Activation.RELU2], ids=lambda a: a.name)
def test_gpu_fp32_prefill_fits_shared_memory(act):
    """fp32 hidden states and weights at a prefill size: the heuristic's 128 x 256 tiles are
    sized for 16-bit operands; fit_stages lowers num_stages so the launch fits shared memory."""
    prob = make_problem(T=2048, H=2048, I=768, I_pad=768, E=128, K=8, act=act, wfmt=Format.BF16,
                        dtype=torch.float32, seed=41)
    got, ref = run_case(prob, act=act, wfmt=Format.BF16)
    mx, rms = _errors(got, ref)
    bmx, brms = _bounds(Format.BF16, torch.float32)
    assert mx <= bmx and rms <= brms, (mx, rms)


@gpu
@pytest.mark.parametrize("wfmt", _GPU_FMTS, ids=lambda f: f.name)
def test_gpu_cuda_graph_and_determinism(wfmt):
    act = Activation.SWIGLU
    prob = make_problem(T=8, H=2048, I=768, I_pad=768, E=128, K=8, act=act, wfmt=wfmt, dtype=torch.bfloat16)
    kw = dict(activation=act, act_params=None, act_format=ACT_FMT[wfmt], intermediate_size_padded=768,
              a1_scale=prob["a1"], a2_scale=prob["a2"])
    args = (prob["hidden"], prob["q13"], prob["q2"], prob["ids"], prob["tw"])
    eager = triton_experts(*args, **kw)
    assert torch.equal(eager, triton_experts(*args, **kw))
    out = torch.empty_like(eager)
    triton_experts(*args, out=out, **kw)  # warm-up (compilation) outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        triton_experts(*args, out=out, **kw)
    out.zero_()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)


@gpu
@pytest.mark.parametrize("T", [1, 64])
def test_gpu_atomic_combine_and_top1(T):
    act = Activation.SWIGLU
    prob = make_problem(T=T, H=2048, I=768, I_pad=768, E=64, K=1, act=act, wfmt=Format.BF16, dtype=torch.bfloat16,
                        offset=64, E_glob=256, seed=5)
    got, ref = run_case(prob, act=act, wfmt=Format.BF16, offset=64, woi=True)
    mx, rms = _errors(got, ref)
    assert mx <= 2e-2 and rms <= 4e-3, (mx, rms)
    prob = make_problem(T=T, H=2048, I=768, I_pad=768, E=64, K=4, act=act, wfmt=Format.BF16, dtype=torch.bfloat16,
                        seed=6)
    cfg = choose_moe_config(T, 2048, 768, 64, 4, Format.BF16, act, torch.cuda.get_device_name())
    cfg = MoEKernelConfig(cfg.gemm1, cfg.gemm2, atomic_combine=True)
    got, ref = run_case(prob, act=act, wfmt=Format.BF16, config=cfg)
    mx, rms = _errors(got, ref)
    assert mx <= 3e-2 and rms <= 6e-3, (mx, rms)
