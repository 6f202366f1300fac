"""Block-scaled formats in the Triton MoE kernels: NVFP4, MXFP4 and MXFP8 weights with every
activation format ``Format.allowed_activation_formats()`` allows, against ``fm.reference_moe``.

    NVFP4 x BF16 (W4A16), NVFP4 x FP8_TENSOR (W4A8), NVFP4 x NVFP4 (W4A4, TRTLLM-Gen numerics),
    MXFP4 x BF16, MXFP4 x MXFP8 (gpt-oss), MXFP8 x MXFP8

On machines without CUDA the kernels run in Triton's interpreter (tiny shapes; fp16 / fp32 hidden
states: the interpreter's bf16 ``tl.dot`` is wrong). ``gpu`` tests use real shapes.

Error metrics (``_errors``): max |out - ref| / max |ref| and RMS(out - ref) / RMS(ref).
``fm.reference_moe`` emulates every quantization point of the kernels (activations, the
intermediate rounded to hidden's dtype and re-quantized with the same scale source), and the
in-register dequantization is exact, so what remains is (a) the per-slot output y stored in
hidden's dtype before the combine (the reference sums fp32), (b) fp32 summation order, and (c) the
rare quantization flip (b) causes when an intermediate value sits on a rounding boundary. Bounds
(max, rms):

    fp32 hidden, interpreter          1e-5, 1e-6   (observed <= 5e-7: fp32 order only)
    fp16 hidden, interpreter          4e-3, 1e-3   (observed <= 1e-3: fp16 roundings of y / out)
    bf16 hidden, GPU                  6e-2, 1.2e-2 (as the FP8 paths: bf16 y, and over T*K*I
                                                   ~ 10^6 intermediate elements a few FP4 / E4M3
                                                   flips, each moving one element by a code step)

Bit-level tests: the tiles the GEMMs multiply equal ``fm.dequantize`` bit for bit (a test-only
kernel entry running the same ``_load_tile``), a one-hot GEMM1 reproduces the dequantized weight
columns exactly, and the intermediate quantized in GEMM1's epilogue (or by the two-step path)
equals ``fm.quantize`` byte for byte.
"""

import os
from dataclasses import dataclass, replace
from typing import Optional

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

import fusedmoe as fm  # noqa: E402
from fusedmoe.backends.kernel_configs import KernelConfig, MoEKernelConfig, TunedTable, choose_config, choose_moe_config  # noqa: E402
from fusedmoe.backends import triton_moe  # noqa: E402
from fusedmoe.kernels import _blockscaled as _bs  # noqa: E402
from fusedmoe.backends.triton_moe import dequantize_tiles, triton_experts  # noqa: E402
from fusedmoe.config import Activation, ActivationParams, Format, TopK  # noqa: E402
from fusedmoe.formats import QuantizedTensor, dequantize, quantize  # noqa: E402
from moe_cases import distinct_topk_ids  # noqa: E402

A, F = Activation, Format
DEV = "cuda" if torch.cuda.is_available() else "cpu"
E4M3 = torch.float8_e4m3fn
interpreter = pytest.mark.interpreter
gpu = pytest.mark.gpu
OAI_SMALL = ActivationParams(alpha=1.702, beta=1.0, limit=0.5)  # exercises both clamps at test scale


# ---- problems ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    wfmt: Format
    afmt: Format
    act: Activation
    T: int = 5
    H: int = 64
    I: int = 32
    align: Optional[int] = None  # None: ExpertWeights' default (16 gated / 128 non-gated, >= block)
    E: int = 4
    K: int = 2
    offset: int = 0  # local_expert_offset (E_glob = E + 2 * offset when offset > 0)
    bias: bool = False
    static: bool = False  # static input / intermediate scales (NVFP4 x NVFP4 only: the weights' static
    #                       scales belong to the weight format's own activations, ExpertWeights.static_scales_for)
    dtype: torch.dtype = torch.float16
    params: Optional[ActivationParams] = None
    x_scale: float = 1.0  # hidden-state scale (large values reach gpt-oss's clamp at limit 7)
    seed: int = 0

    @property
    def E_glob(self):
        return self.E + 2 * self.offset if self.offset else self.E


def _routing(c: Case, g: torch.Generator, device=DEV) -> TopK:
    """Distinct experts per token; every token keeps one local expert (in a random slot)."""
    ids = distinct_topk_ids(c.T, c.K, c.E, c.offset, c.E_glob, g)
    return TopK(ids.to(device), (torch.rand(c.T, c.K, generator=g) + 0.1).to(device))


def _intermediate_amax(hidden, w13, b13, act, params, ids, offset) -> float:
    """Calibration for static intermediate scales: amax of act(hidden @ w13^T + b) over local slots
    (float weights, no quantization: a calibrated-looking value is all that is needed)."""
    E = w13.shape[0]
    amax = 0.0
    for e in range(E):
        t = ((ids.long() - offset) == e).any(1).nonzero().flatten()
        if t.numel():
            h = hidden[t].float() @ w13[e].T
            if b13 is not None:
                h = h + b13[e]
            amax = max(amax, fm.activations.apply_activation(h, act, params).abs().max().item())
    return amax


def make_case(c: Case, device=DEV):
    # weights are drawn and quantized on the target device (real shapes: GBs of float weights on
    # the host are slow and, with several test workers, exhaust host memory); routing on the host
    g = torch.Generator().manual_seed(c.seed)
    gd = torch.Generator(device=device).manual_seed(c.seed)
    M = 2 * c.I if c.act.is_gated else c.I

    def rn(*s):
        return torch.randn(*s, generator=gd, device=device)

    w13 = rn(c.E, M, c.H) * c.H**-0.5
    w2 = rn(c.E, c.H, c.I) * c.I**-0.5
    b13 = rn(c.E, M) * 0.3 if c.bias else None
    b2 = rn(c.E, c.H) * 0.3 if c.bias else None
    hidden = (rn(c.T, c.H) * c.x_scale).to(c.dtype)
    topk = _routing(c, g, device=device)
    scales = {}
    if c.static:
        assert c.afmt is c.wfmt is F.NVFP4
        top = 448.0 * 6.0  # dequant convention: s = 1/g = amax / 2688
        z = _intermediate_amax(hidden, w13, b13, c.act, c.params, topk.ids, c.offset)
        # inputs calibrated with 10 % headroom; the intermediate at 90 % of its amax (some values clip)
        scales = dict(input_scale=hidden.float().abs().max().item() * 1.1 / top,
                      intermediate_scale=max(z, 1e-3) * 0.9 / top)
    W = fm.ExpertWeights.from_float(w13, w2, activation=c.act, format=c.wfmt, w13_bias=b13, w2_bias=b2,
                                    alignment=c.align, act_params=c.params, **scales)
    return hidden.to(device), W.to(device), TopK(topk.ids.to(device), topk.weights.to(device))


def run_triton(hidden, W, topk, afmt, *, offset=0, config=None, woi=False, out=None, capture=None, scales=None):
    """triton_experts with the weights' static scales where they apply (as the triton backend
    passes them), or explicit ``scales = (a1, a2)``."""
    a1, a2 = W.static_scales_for(afmt) if scales is None else scales
    return triton_experts(
        hidden, W.w13, W.w2, topk.ids, topk.weights, activation=W.activation, act_params=W.act_params,
        act_format=afmt, intermediate_size_padded=W.padded_intermediate_size, w13_bias=W.w13_bias,
        w2_bias=W.w2_bias, a1_scale=a1, a2_scale=a2, local_expert_offset=offset, weight_on_input=woi,
        config=config, out=out, _capture=capture,
    )


def run_reference(hidden, W, topk, afmt, *, offset=0, E_glob=None, woi=False):
    return fm.reference_moe(hidden, W, topk, activation=W.activation, activation_format=afmt,
                            local_expert_offset=offset, num_experts=E_glob or (W.num_experts + offset),
                            weight_on_input=woi)


def _errors(out: torch.Tensor, ref: torch.Tensor):
    d = out.double() - ref.double()
    r = ref.double()
    mx = d.abs().max().item() / max(r.abs().max().item(), 1e-30)
    rms = d.pow(2).mean().sqrt().item() / max(r.pow(2).mean().sqrt().item(), 1e-30)
    return mx, rms


def _bounds(dtype):
    return {torch.float32: (1e-5, 1e-6), torch.float16: (4e-3, 1e-3), torch.bfloat16: (6e-2, 1.2e-2)}[dtype]


def check_case(c: Case, config=None, device=DEV):
    hidden, W, topk = make_case(c, device)
    got = run_triton(hidden, W, topk, c.afmt, offset=c.offset, config=config)
    ref = run_reference(hidden, W, topk, c.afmt, offset=c.offset, E_glob=c.E_glob)
    assert got.shape == (c.T, c.H) and got.dtype == c.dtype
    mx, rms = _errors(got, ref)
    bmx, brms = _bounds(c.dtype)
    assert mx <= bmx and rms <= brms, (c, mx, rms)
    if c.afmt is not F.BF16:
        # the activation-format emulation matters: the same (dequantized) experts with unquantized
        # activations are far off
        Wf = replace(W, w13=QuantizedTensor(dequantize(W.w13), F.BF16), w2=QuantizedTensor(dequantize(W.w2), F.BF16),
                     input_scale=None, intermediate_scale=None)
        ref16 = run_reference(hidden, Wf, topk, F.BF16, offset=c.offset, E_glob=c.E_glob)
        assert _errors(got, ref16)[1] > max(3 * rms, 1e-2), c
    return got, ref


# ---- end-to-end: every format pair, gated and non-gated ------------------------------------------

_CASES = [
    # NVFP4 x BF16 (W4A16, Hopper's natural pairing)
    Case(F.NVFP4, F.BF16, A.SWIGLU),  # decode-ish, no padding
    Case(F.NVFP4, F.BF16, A.RELU2, T=1, I=96, offset=2),  # non-gated: I 96 -> 128 (alignment 128), EP
    Case(F.NVFP4, F.BF16, A.GEGLU, I=48, align=32, bias=True, dtype=torch.float32),  # 48 -> 64 per half
    # NVFP4 x FP8_TENSOR (W4A8: E2M1 * s_blk and E4M3 both exact in bf16; dynamic per-tensor
    # scales: the weights' static scales are NVFP4 scales)
    Case(F.NVFP4, F.FP8_TENSOR, A.SWIGLU),
    Case(F.NVFP4, F.FP8_TENSOR, A.RELU2, I=128, offset=2, seed=1),
    Case(F.NVFP4, F.FP8_TENSOR, A.SILU, T=1, I=96, bias=True),  # padded non-gated
    # NVFP4 x NVFP4 (W4A4 emulation of TRTLLM-Gen's numerics)
    Case(F.NVFP4, F.NVFP4, A.SWIGLU, I=48, align=32, static=True),  # static global 1/a2: epilogue NVFP4
    Case(F.NVFP4, F.NVFP4, A.RELU2, I=96, offset=2, seed=2),  # dynamic g over the local intermediate
    Case(F.NVFP4, F.NVFP4, A.RELU2, T=1, I=128, static=True),  # Nemotron-H style ReLU2, static scales
    Case(F.NVFP4, F.NVFP4, A.SWIGLU, bias=True, dtype=torch.float32, seed=3),  # dynamic, fp32 hidden
    # MXFP4 x BF16
    Case(F.MXFP4, F.BF16, A.SWIGLU_OAI, I=48, bias=True, params=OAI_SMALL),  # gpt-oss: 48 -> 64, clamps
    Case(F.MXFP4, F.BF16, A.RELU2, T=1, I=96, offset=2),  # MXFP4 + ReLU2, padded, EP
    Case(F.MXFP4, F.BF16, A.SWIGLU, I=64, dtype=torch.float32, seed=4),
    # MXFP4 x MXFP8 (gpt-oss with MXFP8 activations)
    Case(F.MXFP4, F.MXFP8, A.SWIGLU_OAI, bias=True, x_scale=8.0),  # gpt-oss constants, limit 7 reached
    Case(F.MXFP4, F.MXFP8, A.RELU2, I=96, offset=2, seed=5),
    Case(F.MXFP4, F.MXFP8, A.GELU, T=1, I=64, H=96, dtype=torch.float32),  # H = 3 x 32
    # MXFP8 x MXFP8
    Case(F.MXFP8, F.MXFP8, A.SWIGLU, I=48),  # 48 -> 64 (alignment raised to the 32-block)
    Case(F.MXFP8, F.MXFP8, A.RELU2, I=96, offset=2, seed=6),
    Case(F.MXFP8, F.MXFP8, A.RELU, T=1, bias=True, dtype=torch.float32),
]


def _case_id(c: Case) -> str:
    return f"{c.wfmt.name}x{c.afmt.name}-{c.act.name}-T{c.T}-I{c.I}" + ("-static" if c.static else "") + \
        ("-ep" if c.offset else "") + ("-bias" if c.bias else "") + ("-fp32" if c.dtype == torch.float32 else "")


@interpreter
@pytest.mark.parametrize("case", _CASES, ids=_case_id)
def test_formats_against_reference(case):
    check_case(case)


# (kernel path exercised, config): swap_ab (the H200 decode shape), group_m, K tails (H = 96 with
# block_k 64), block_n = 16 (MXFP8 intermediate through quantize_act instead of the epilogue),
# the atomic combine, block_m 32 (the largest tile of the E4M3 partial-sum path of MX x MXFP8),
# block_m 64 (MX x MXFP8 dequantized to the MMA dtype instead); split-K of both GEMMs (uneven: 3
# K-blocks over 2 programs; and a K tail) in the swap_ab and the E4M3 partial-sum paths
_CFGS = [
    MoEKernelConfig(KernelConfig(16, 64, 32, group_m=2, swap_ab=True, split_k=2),
                    KernelConfig(16, 64, 32, swap_ab=True, split_k=2)),
    MoEKernelConfig(KernelConfig(16, 16, 64), KernelConfig(16, 32, 32)),
    MoEKernelConfig(KernelConfig(32, 32, 64, split_k=2), KernelConfig(32, 64, 32, split_k=2), atomic_combine=True),
    MoEKernelConfig(KernelConfig(64, 32, 64), KernelConfig(64, 32, 32)),
    # prefill tiles as W @ A^T (swap_ab at 64 token rows: tuner candidates, the FP4 heuristic's GEMM1 from 128 rows)
    MoEKernelConfig(KernelConfig(64, 64, 32, swap_ab=True), KernelConfig(64, 64, 32, swap_ab=True)),
]


@interpreter
@pytest.mark.parametrize("cfg_idx", range(len(_CFGS)))
@pytest.mark.parametrize("pair", [(F.NVFP4, F.NVFP4), (F.MXFP4, F.MXFP8), (F.MXFP8, F.MXFP8)],
                         ids=lambda p: f"{p[0].name}x{p[1].name}")
def test_kernel_configs(pair, cfg_idx):
    wfmt, afmt = pair
    act = A.SWIGLU if cfg_idx != 1 else A.RELU2
    c = Case(wfmt, afmt, act, T=5, H=96, I=48 if act.is_gated else 96, align=32 if act.is_gated else None,
             K=3, offset=1, static=afmt is F.NVFP4 and cfg_idx == 0, bias=cfg_idx == 2, seed=10 + cfg_idx)
    check_case(c, config=_CFGS[cfg_idx])


@interpreter
@pytest.mark.parametrize("case,cfg,expect", [
    # K tails in both GEMMs (H = I_pad = 192 = 128 + 64), split-K in GEMM1, gated (gate and up joined): hidden in the
    # dot order of GEMM1's 128-wide steps and its 64-wide tail; the intermediate natural (GEMM2 has a tail)
    (Case(F.MXFP4, F.BF16, A.SWIGLU_OAI, T=40, H=192, I=192, align=64, E=3, bias=True, params=OAI_SMALL, seed=71),
     MoEKernelConfig(KernelConfig(64, 64, 128, swap_ab=True, split_k=2), KernelConfig(64, 64, 128, swap_ab=True)),
     (True, False)),
    # whole 64-wide steps, non-gated, not swapped, expert parallel: both
    (Case(F.NVFP4, F.BF16, A.RELU2, T=40, H=128, I=128, offset=2, seed=72),
     MoEKernelConfig(KernelConfig(64, 64, 64), KernelConfig(64, 64, 64)), (True, True)),
    # GEMM1 tiles of two GEMM2 K steps (block_n 128, block_k 64), gated and joined
    (Case(F.MXFP4, F.BF16, A.SWIGLU_OAI, T=40, H=128, I=256, align=128, E=3, params=OAI_SMALL, seed=73),
     MoEKernelConfig(KernelConfig(64, 128, 64, swap_ab=True), KernelConfig(64, 64, 64, swap_ab=True)), (True, True)),
], ids=["mxfp4-tails", "nvfp4-relu2", "mxfp4-two-steps"])
def test_act_dot_order_prefill_tiles(case, cfg, expect, monkeypatch):
    """FP4 x 16-bit prefill tiles with the activations stored in the dot order (hidden copied by ``to_dot_order``,
    the intermediate stored so by GEMM1's epilogue, both GEMMs loading without the register permutation): the same
    bits as the register permutation, the intermediate the same values in the dot order, and the reference. (64-row
    tiles here: the 128-row threshold is a speed choice, lowered for the interpreter.)"""
    monkeypatch.setitem(triton_moe._A_DOT_ORDER, "min_block_m", 64)
    hidden, W, topk = make_case(case)
    runs = {}
    for on in (False, True):
        prev = triton_moe.set_act_dot_order(on, formats=(F.MXFP4, F.NVFP4))
        try:
            cap = {}
            runs[on] = (run_triton(hidden, W, topk, F.BF16, offset=case.offset, config=cfg, capture=cap), cap)
        finally:
            triton_moe.set_act_dot_order(*prev)
        assert cap["dot_order"] == (expect if on else (False, False)), cap["dot_order"]
    (off, cap_off), (got, cap_on) = runs[False], runs[True]
    assert torch.equal(got, off)
    inter_off = cap_off["inter"]
    rows = (topk.ids >= case.offset).reshape(-1) & (topk.ids < case.offset + case.E).reshape(-1)  # local slots
    want = _bs.to_dot_order(inter_off[rows], cfg.gemm2.block_k) if expect[1] else inter_off[rows]
    assert torch.equal(cap_on["inter"][rows], want)
    mx, rms = _errors(got, run_reference(hidden, W, topk, F.BF16, offset=case.offset, E_glob=case.E_glob))
    bmx, brms = _bounds(case.dtype)
    assert mx <= bmx and rms <= brms, (mx, rms)
    with pytest.raises(ValueError, match="to_dot_order"):
        _bs.to_dot_order(hidden[:, :96], 64)  # 96 is not a whole number of 64-wide steps


def test_act_dot_order_choice():
    """Where the activations are stored in the dot order by default: MXFP4 (not NVFP4) prefill tiles of 128+ rows,
    whole K steps or a tail, never a swapped tile of two warpgroups (a race in Triton 3.6's pipeline on the H200)."""
    from fusedmoe.backends.triton_moe import _dot_order_ok

    prev = triton_moe.set_act_dot_order(True, formats=(F.MXFP4,))
    try:
        ok = lambda c, f=F.MXFP4, k=2880, tail=0, g="gemm1": _dot_order_ok(c, f, k, tail, g)  # noqa: E731
        assert ok(KernelConfig(128, 64, 64, swap_ab=True, num_warps=4))
        assert ok(KernelConfig(128, 128, 128, num_warps=8), k=2880, tail=64)  # 22 steps and a tail
        assert ok(KernelConfig(128, 256, 128, num_warps=8), k=1920, g="gemm2")
        assert not ok(KernelConfig(128, 64, 64, swap_ab=True, num_warps=8))  # two warpgroups, swapped
        assert not ok(KernelConfig(64, 64, 64, swap_ab=True))  # below 128 rows
        assert not ok(KernelConfig(16, 64, 128, swap_ab=True))  # decode
        assert not ok(KernelConfig(128, 64, 64), f=F.NVFP4)
        assert not ok(KernelConfig(128, 128, 128), k=2880)  # a K mask, no tail
        triton_moe.set_act_dot_order(True, False)
        assert ok(KernelConfig(128, 64, 64)) and not ok(KernelConfig(128, 64, 64), g="gemm2")
    finally:
        triton_moe.set_act_dot_order(*prev)


@interpreter
@pytest.mark.parametrize("wfmt", [F.MXFP4, F.MXFP8], ids=lambda f: f.name)
def test_mx_x_mxfp8_decode_tiles_dequantized(wfmt):
    """MX weights x MXFP8 activations at decode tiles with the E4M3 partial-sum path switched off
    (``set_mx_e4m3_dot``): both tiles dequantized to the MMA dtype, as at prefill, with a K tail (H = 192 =
    128 + 64) and split-K -- against the reference; the switch is honoured (``mxdot`` False / True)."""
    c = Case(wfmt, F.MXFP8, A.SWIGLU_OAI if wfmt is F.MXFP4 else A.RELU2, T=3, H=192, I=64, E=3, K=2,
             bias=True, params=OAI_SMALL if wfmt is F.MXFP4 else None, seed=60)
    hidden, W, topk = make_case(c)
    cfg = MoEKernelConfig(KernelConfig(16, 64, 128, swap_ab=True, split_k=2), KernelConfig(16, 64, 64, swap_ab=True))
    ref = run_reference(hidden, W, topk, F.MXFP8)
    outs = {}
    for fmts in ((), (wfmt,)):
        prev = triton_moe.set_mx_e4m3_dot(fmts)
        try:
            cap = {}
            outs[bool(fmts)] = got = run_triton(hidden, W, topk, F.MXFP8, config=cfg, capture=cap)
        finally:
            triton_moe.set_mx_e4m3_dot(prev)
        assert cap["mxdot"] is bool(fmts)
        assert cap["k_tail"] == ((0, 0) if fmts else (64, 0)), cap["k_tail"]
        mx, rms = _errors(got, ref)
        assert mx <= 4e-3 and rms <= 1e-3, (fmts, mx, rms)
    with pytest.raises(ValueError, match="only mxfp4 / mxfp8"):
        triton_moe.set_mx_e4m3_dot((F.NVFP4,))


@interpreter
@pytest.mark.parametrize("case", [Case(F.MXFP4, F.BF16, A.SWIGLU_OAI, T=40, I=64, bias=True, params=OAI_SMALL, seed=21),
                                  Case(F.NVFP4, F.BF16, A.RELU2, T=40, I=128, offset=2, seed=22),
                                  Case(F.NVFP4, F.FP8_TENSOR, A.SWIGLU, T=40, I=64, seed=23)], ids=_case_id)
def test_swap_ab_prefill_tiles(case):
    """W4A16 / W4A8 with 64-row token tiles run as W @ A^T (the dequantized weight tile on wgmma's register side;
    a gated GEMM1 joins gate and up): several token tiles per expert, against the reference."""
    check_case(case, config=MoEKernelConfig(KernelConfig(64, 64, 32, swap_ab=True), KernelConfig(64, 64, 32, swap_ab=True)))


@interpreter
@pytest.mark.parametrize("pair", [(F.MXFP4, F.BF16), (F.NVFP4, F.NVFP4), (F.MXFP8, F.MXFP8)],
                         ids=lambda p: f"{p[0].name}x{p[1].name}")
def test_k_tail_step(pair):
    """K = n block_k + block_k / 2 (gpt-oss's 2880 = 22 x 128 + 64): n full K tiles and one half-wide step
    (K_TAIL), FP4 values tiled by 64 read 128 wide across two pieces, with split-K (the tail in the split that
    ends with the last full tile, also when a split gets no tile) -- against the reference; the narrowing to the
    tiles and the K mask are not used."""
    wfmt, afmt = pair
    bm = 64 if afmt is F.MXFP8 else 16  # MX x MXFP8 decode tiles take the E4M3 path (per 32-block, no tail)
    for H, split in ((192, 2), (320, 2), (320, 3)):  # n = 1 (the second split empty), n = 2 (one tile each), 3 splits
        c = Case(wfmt, afmt, A.SWIGLU_OAI if wfmt is F.MXFP4 else A.SWIGLU, T=3, H=H, I=64, E=3, K=2, bias=True,
                 params=OAI_SMALL if wfmt is F.MXFP4 else None, seed=40 + H + split)
        hidden, W, topk = make_case(c)
        if wfmt is not F.MXFP8:
            assert W.w13.value_tile_k == 64 and W.w2.value_tile_k == 64
        cap = {}
        cfg = MoEKernelConfig(KernelConfig(bm, 64, 128, swap_ab=True, split_k=split), KernelConfig(bm, 64, 64))
        got = run_triton(hidden, W, topk, afmt, config=cfg, capture=cap)
        assert cap["k_tail"] == (64, 0), cap["k_tail"]  # GEMM2: K = I_pad = 64, one 64-wide tile
        ref = run_reference(hidden, W, topk, afmt)
        mx, rms = _errors(got, ref)
        assert mx <= 4e-3 and rms <= 1e-3, (H, split, mx, rms)
    # GEMM2 with a tail (K = I_pad = 192 = 128 + 64)
    c = Case(wfmt, afmt, A.RELU2, T=3, H=128, I=192, align=64, E=3, K=2, seed=47)
    hidden, W, topk = make_case(c)
    cap = {}
    got = run_triton(hidden, W, topk, afmt, capture=cap, config=MoEKernelConfig(
        KernelConfig(bm, 64, 128, swap_ab=True), KernelConfig(bm, 64, 128, swap_ab=True)))
    assert cap["k_tail"] == (0, 64), cap["k_tail"]
    if afmt is F.MXFP8:  # the E4M3 path of decode tiles: no tail (a K mask per 32-block)
        run_triton(hidden, W, topk, afmt, capture=cap, config=MoEKernelConfig(
            KernelConfig(16, 64, 128, swap_ab=True), KernelConfig(16, 64, 128, swap_ab=True)))
        assert cap["k_tail"] == (0, 0)
    mx, rms = _errors(got, run_reference(hidden, W, topk, afmt))
    assert mx <= 4e-3 and rms <= 1e-3, (mx, rms)


@interpreter
@pytest.mark.parametrize("pair", [(F.NVFP4, F.FP8_TENSOR), (F.MXFP4, F.BF16)], ids=lambda p: f"{p[0].name}x{p[1].name}")
def test_top1_weight_on_input_expert_parallel(pair):
    """K = 1 (Llama4 weight on input): GEMM2 writes the output directly, non-local tokens get 0."""
    wfmt, afmt = pair
    c = Case(wfmt, afmt, A.SWIGLU, T=6, K=1, offset=4, bias=True, seed=7)
    hidden, W, topk = make_case(c)
    topk.ids[0, 0] = 0  # a non-local token
    out = torch.full((c.T, c.H), float("nan"), dtype=c.dtype, device=DEV)  # every row must be written
    got = run_triton(hidden, W, topk, afmt, offset=4, woi=True, out=out)
    ref = run_reference(hidden, W, topk, afmt, offset=4, E_glob=c.E_glob, woi=True)
    assert got.data_ptr() == out.data_ptr() and (got[0] == 0).all()
    mx, rms = _errors(got, ref)
    assert mx <= 4e-3 and rms <= 1e-3, (mx, rms)


@interpreter
def test_through_fused_moe_static_scales():
    """fm.fused_moe(backend="triton"): the backend passes the weights' static scales only to the
    activation format they belong to (NVFP4 W4A4 uses them; W4A16 and W4A8 do not)."""
    c = Case(F.NVFP4, F.NVFP4, A.RELU2, T=5, I=128, static=True, offset=1, seed=8)
    hidden, W, topk = make_case(c)
    for afmt in (F.NVFP4, F.BF16, F.FP8_TENSOR):
        got = fm.fused_moe(hidden, W, topk, activation=c.act, backend="triton", activation_format=afmt,
                           num_experts=c.E_glob, local_expert_offset=c.offset)
        ref = run_reference(hidden, W, topk, afmt, offset=c.offset, E_glob=c.E_glob)
        mx, rms = _errors(got, ref)
        assert mx <= 4e-3 and rms <= 1e-3, (afmt, mx, rms)
    req = fm.backends.MoERequest(F.MXFP4, F.MXFP8, A.SWIGLU_OAI, has_bias=True)
    assert fm.backends.get("triton").supports(req, torch.device("cuda")) is None


# ---- padding -------------------------------------------------------------------------------------


@interpreter
@pytest.mark.parametrize("pair,act", [((F.NVFP4, F.NVFP4), A.SWIGLU), ((F.MXFP4, F.MXFP8), A.RELU2),
                                      ((F.MXFP8, F.MXFP8), A.SWIGLU_OAI)],
                         ids=lambda v: v.name if isinstance(v, Activation) else f"{v[0].name}x{v[1].name}")
def test_padding_leaves_results_unchanged(pair, act):
    """I = 48 padded to 64 or to 128 (per half when gated): bit-identical outputs (zero rows and
    columns add exact zeros; zero groups never raise a scale)."""
    wfmt, afmt = pair
    outs = []
    for align in (32, 128):
        c = Case(wfmt, afmt, act, T=5, I=48, align=align, bias=True, dtype=torch.float32,
                 params=OAI_SMALL if act is A.SWIGLU_OAI else None, seed=9)
        hidden, W, topk = make_case(c)
        assert W.padded_intermediate_size == (64 if align == 32 else 128)
        cfg = MoEKernelConfig(KernelConfig(16, 32, 32), KernelConfig(16, 32, 32))
        outs.append(run_triton(hidden, W, topk, afmt, config=cfg))
    assert torch.equal(outs[0], outs[1])


@interpreter
@pytest.mark.parametrize("H", [96, 128])
@pytest.mark.parametrize("pair", [(F.NVFP4, F.NVFP4), (F.MXFP4, F.BF16), (F.MXFP8, F.MXFP8)],
                         ids=lambda p: f"{p[0].name}x{p[1].name}")
def test_dirty_strides_are_never_read(pair, H):
    """Weights, scales and hidden as views into wider buffers whose gaps hold 0xFF (NaN for E4M3 /
    UE8M0): the kernels follow the strides and mask tails, so the result is bit-identical. H 96:
    K tails in GEMM1 (96 = 64 + 32), linear FP4 values; H 128: FP4 w13 values tiled by 128 columns,
    read in 64-column K tiles, gaps between the row tiles."""
    wfmt, afmt = pair
    c = Case(wfmt, afmt, A.SWIGLU, T=5, H=H, I=48, align=32, K=2, seed=11)
    hidden, W, topk = make_case(c)
    cfg = MoEKernelConfig(KernelConfig(16, 32, 64), KernelConfig(16, 64, 64))
    clean = run_triton(hidden, W, topk, afmt, config=cfg)

    def dirty(t, width=None):
        if t is None:
            return None
        buf = torch.empty(t.shape[:-1] + (width or t.shape[-1] + 16,), dtype=torch.uint8, device=t.device)
        buf.fill_(0xFF)
        view = buf.view(t.dtype)[..., : t.shape[-1]] if t.dtype.itemsize == 1 else None
        if view is None:
            buf = torch.full(t.shape[:-1] + (t.shape[-1] + 16,), float("nan"), dtype=t.dtype, device=t.device)
            view = buf[..., : t.shape[-1]]
        view.copy_(t)
        return view

    def dirty_k_major(t):
        # ExpertWeights keeps NVFP4 block scales K-major (QuantizedTensor.k_major_scales): a
        # transposed view into a buffer with 0xFF gaps along both dims
        E, R, C = t.shape
        buf = torch.full((E, C + 2, R + 16), 0xFF, dtype=torch.uint8, device=t.device)
        view = buf.view(t.dtype)[:, :C, :R].transpose(1, 2)
        view.copy_(t)
        assert view.stride(1) == 1
        return view

    def dirty_tiles(t):
        # tiled FP4 values (QuantizedTensor.value_layout): the tiles stay dense, gaps between row tiles
        buf = torch.full(t.shape[:2] + (t[0, 0].numel() + 16,), 0xFF, dtype=torch.uint8, device=t.device)
        view = buf[..., : t[0, 0].numel()].view(t.shape)
        view.copy_(t)
        return view

    def dirty_q(q: QuantizedTensor):
        # row-major MX scales: rows 16 bytes past the next multiple of 16 (ExpertWeights keeps rows
        # that start 16-byte aligned as they are, QuantizedTensor.padded_scale_rows; the kernels'
        # scale loads then see 16-byte alignment) next to 0xFF (NaN) gaps
        if q.scale.stride(1) == 1:
            scale = dirty_k_major(q.scale)
        else:
            scale = dirty(q.scale, -(-q.scale.shape[-1] // 16) * 16 + 16)
        data = dirty_tiles(q.data) if q.value_tile_k else dirty(q.data)
        return replace(q, data=data, scale=scale)

    Wd = replace(W, w13=dirty_q(W.w13), w2=dirty_q(W.w2))
    if wfmt.is_fp4:  # w13 [4, 128, H], w2 [4, H, 64]
        assert W.w13.value_tile_k == (128 if H == 128 else 0) and W.w2.value_tile_k == (64 if H == 128 else 0)
    assert Wd.w13.data.stride(1) != Wd.w13.data[0, 0].numel() and Wd.w2.data.stride(1) != Wd.w2.data.shape[2]
    if wfmt is F.NVFP4:
        assert Wd.w13.scale.stride(2) == Wd.w13.shape[1] + 16  # still the dirty view (not copied)
    else:
        assert Wd.w13.scale.stride(1) == -(-Wd.w13.scale.shape[2] // 16) * 16 + 16
    got = run_triton(dirty(hidden), Wd, topk, afmt, config=cfg)
    assert torch.equal(got, clean)


@interpreter
@pytest.mark.parametrize("pair,act", [((F.NVFP4, F.BF16), A.SWIGLU), ((F.MXFP4, F.MXFP8), A.RELU2),
                                      ((F.MXFP8, F.MXFP8), A.SWIGLU_OAI), ((F.MXFP4, F.BF16), A.GELU)],
                         ids=lambda v: v.name if isinstance(v, Activation) else f"{v[0].name}x{v[1].name}")
def test_row_major_and_k_major_scales_same_bits(pair, act):
    """The kernels read block scales row-major (the linear checkpoint layout; ExpertWeights' MX
    layout) and K-major (ExpertWeights' NVFP4 layout) alike: the same bits, K tails included."""
    wfmt, afmt = pair
    c = Case(wfmt, afmt, act, T=6, H=96, I=64, align=32, bias=True, dtype=torch.float32,
             params=OAI_SMALL if act is A.SWIGLU_OAI else None, seed=13)
    hidden, W, topk = make_case(c)
    cfg = MoEKernelConfig(KernelConfig(16, 32, 64), KernelConfig(16, 32, 32))
    outs = []
    for k_major in (False, True):
        Wl = replace(W)
        for name in ("w13", "w2"):
            q = getattr(W, name)
            q = q.k_major_scales() if k_major else replace(q, scale=q.scale.contiguous())
            assert q.scale.stride(1 if k_major else 2) == 1
            object.__setattr__(Wl, name, q)  # bypass ExpertWeights' choice of layout
        outs.append(run_triton(hidden, Wl, topk, afmt, config=cfg))
    assert torch.equal(outs[0], outs[1])


@interpreter
@pytest.mark.parametrize("wfmt,afmt,act,bk", [(F.MXFP4, F.BF16, A.SWIGLU_OAI, 64), (F.MXFP4, F.MXFP8, A.RELU2, 64),
                                              (F.MXFP8, F.MXFP8, A.SWIGLU, 32)],
                         ids=["MXFP4xBF16-bk64", "MXFP4xMXFP8-bk64", "MXFP8xMXFP8-bk32"])
def test_scale_runs_same_bits(wfmt, afmt, act, bk):
    """MX weight scales read in aligned 4-byte runs (``triton_moe._scale_run``: K steps of 1-2 scale bytes a row,
    tiles of >= 128 weight rows, ExpertWeights' padded rows) give the bits of the per-step loads: both steps of a run
    (block_k 64) or all four (block_k 32), GEMM1 joined gate + up rows and GEMM2, at a decode config."""
    from fusedmoe.backends import triton_moe

    c = Case(wfmt, afmt, act, T=3, H=256, I=128, E=4, K=2, bias=wfmt is F.MXFP4, dtype=torch.float32,
             params=OAI_SMALL if act is A.SWIGLU_OAI else None, seed=29)
    prev_dot = triton_moe.set_mx_e4m3_dot([])  # MXFP8 weights: the dequantizing path (the E4M3 one reads no runs)
    try:
        hidden, W, topk = make_case(c)
        assert W.w13.scale.stride(1) % 16 == 0 and W.w2.scale.stride(1) % 16 == 0
        gated = act.is_gated
        c1 = KernelConfig(16, 64 if gated else 128, bk, swap_ab=True, num_warps=4, num_stages=3)
        c2 = KernelConfig(16, 128, bk, swap_ab=True, num_warps=4, num_stages=3)
        rows1 = c1.block_n * (2 if gated and triton_moe.join_gate_up(wfmt, True) else 1)
        assert triton_moe._scale_run(wfmt, W.w13.scale, c1, rows1, True, False) == 4
        assert triton_moe._scale_run(wfmt, W.w2.scale, c2, 128, True, False) == 4
        cfg = MoEKernelConfig(c1, c2)
        runs = run_triton(hidden, W, topk, afmt, config=cfg)
        prev = triton_moe.set_scale_runs(False)
        try:
            steps = run_triton(hidden, W, topk, afmt, config=cfg)
        finally:
            triton_moe.set_scale_runs(prev)
    finally:
        triton_moe.set_mx_e4m3_dot(prev_dot)
    assert torch.equal(runs, steps)
    ref = run_reference(hidden, W, topk, afmt)
    assert torch.isfinite(runs).all() and (runs - ref).norm() <= 2e-2 * ref.norm()


def test_scale_run_choice():
    """When ``_scale_run`` reads runs: MX row-major scales in 16-byte rows with room for the run, 1-2 bytes a step,
    at least a thread per weight row; not for 128-wide steps (4 bytes already), fewer rows than threads, unpadded
    or K-major scales, NVFP4, the E4M3 partial-sum path, K tails in every step, prefill tiles or the dot order."""
    from fusedmoe.backends import triton_moe as tm

    q = quantize(torch.randn(2, 128, 2880), F.MXFP4)
    pad = q.padded_scale_rows().scale
    assert q.scale.stride(1) == 90 and pad.stride(1) == 96
    c = KernelConfig(16, 64, 64, swap_ab=True, num_warps=4)
    assert tm._scale_run(F.MXFP4, pad, c, 128, True, False) == 4
    assert tm._scale_run(F.MXFP8, pad, KernelConfig(16, 128, 32, swap_ab=True), 128, True, False) == 4
    assert tm._scale_run(F.MXFP4, q.scale, c, 128, True, False) == 0  # 90-byte rows: no alignment
    assert tm._scale_run(F.MXFP4, pad, KernelConfig(16, 64, 128, swap_ab=True), 128, True, False) == 0
    assert tm._scale_run(F.MXFP4, pad, c, 64, True, False) == 0  # 64 rows, 128 threads
    assert tm._scale_run(F.MXFP4, pad, KernelConfig(16, 64, 64, swap_ab=True, num_warps=8), 128, True, False) == 0
    assert tm._scale_run(F.MXFP4, pad, c, 128, False, False) == 0
    assert tm._scale_run(F.MXFP4, pad, c, 128, True, True) == 0
    assert tm._scale_run(F.MXFP4, pad, c, 128, True, False, a_permuted=True) == 0  # with the dot order: a race
    assert tm._scale_run(F.MXFP4, pad, KernelConfig(128, 64, 64, swap_ab=True), 128, True, False) == 0  # prefill
    assert tm._scale_run(F.NVFP4, pad, c, 128, True, False) == 0
    assert tm._scale_run(F.MXFP4, pad.transpose(-1, -2).contiguous().transpose(-1, -2), c, 128, True, False) == 0
    tight = torch.zeros(2 * 128 * 96 - 6, dtype=torch.uint8).as_strided((2, 128, 90), (128 * 96, 96, 1))
    assert tm._scale_run(F.MXFP4, tight, c, 128, True, False) == 0  # the last row's run would pass the storage
    prev = tm.set_scale_runs(False)
    try:
        assert tm._scale_run(F.MXFP4, pad, c, 128, True, False) == 0
    finally:
        tm.set_scale_runs(prev)


def test_padded_scale_rows():
    """``QuantizedTensor.padded_scale_rows``: zero-padded 16-byte rows, the same values, idempotent
    (rows any multiple of 16 apart are kept), K-major / scale-free tensors untouched; ExpertWeights
    pads MX scales (not NVFP4's, which are K-major)."""
    g = torch.Generator().manual_seed(5)
    q = quantize(torch.randn(3, 64, 288, generator=g), F.MXFP4)  # 9 scale bytes per row
    p = q.padded_scale_rows()
    assert p.scale.shape == q.scale.shape and p.scale.stride() == (64 * 16, 16, 1)
    assert torch.equal(p.scale, q.scale) and torch.equal(dequantize(p), dequantize(q))
    assert (p.scale.as_strided((3, 64, 16), (64 * 16, 16, 1))[..., 9:] == 0).all()
    assert p.padded_scale_rows() is p and p.padded_scale_rows(8) is p and p.padded_scale_rows(32) is not p
    shifted = p.scale.as_strided(p.scale.shape, p.scale.stride(), p.scale.storage_offset() + 1)
    assert replace(p, scale=shifted).padded_scale_rows().scale.storage_offset() == 0  # re-stored
    assert p.k_major_scales().padded_scale_rows().scale.stride(-2) == 1
    with pytest.raises(ValueError, match="align"):
        q.padded_scale_rows(0)
    fp8 = quantize(torch.randn(2, 32, 64, generator=g), F.FP8_CHANNEL)
    assert fp8.padded_scale_rows() is fp8
    w13, w2 = torch.randn(2, 64, 288, generator=g), torch.randn(2, 288, 32, generator=g)
    for fmt in (F.MXFP4, F.MXFP8):
        W = fm.ExpertWeights.from_float(w13, w2, activation=A.SWIGLU, format=fmt)
        assert W.w13.scale.stride(1) == 16 and W.w2.scale.stride(1) == 16 and W.w2.scale.shape[-1] == 1
    W = fm.ExpertWeights.from_float(w13, w2, activation=A.SWIGLU, format=F.NVFP4)
    assert W.w13.scale.stride(1) == 1


def test_expert_weights_scale_layouts():
    """from_float, the constructor and replace() leave NVFP4 block scales K-major and MX block
    scales row-major, values unchanged; the normalization is idempotent (no copy the second time)
    and leaves other formats alone; scales contiguous along neither dim are refused by the kernel."""
    g = torch.Generator().manual_seed(3)
    w13, w2 = torch.randn(2, 64, 64, generator=g), torch.randn(2, 64, 32, generator=g)
    for fmt in (F.NVFP4, F.MXFP4, F.MXFP8):
        W = fm.ExpertWeights.from_float(w13, w2, activation=A.SWIGLU, format=fmt)
        for q in (W.w13, W.w2):
            assert q.scale.stride(-2 if fmt is F.NVFP4 else -1) == 1
        again = replace(W)
        assert again.w13.scale.data_ptr() == W.w13.scale.data_ptr()
        row = replace(W.w13, scale=W.w13.scale.contiguous())
        km = row.k_major_scales()
        assert km.scale.stride(-2) == 1 and km.k_major_scales() is km
        assert torch.equal(dequantize(km), dequantize(row)) and torch.equal(dequantize(row), dequantize(W.w13))
        # neither dim contiguous: a strided view of a wider tensor
        E, R, C = row.scale.shape
        wide = torch.zeros(E, 2 * R, 2 * C, dtype=row.scale.dtype)[:, ::2, ::2]
        wide.copy_(row.scale)
        bad = replace(W.w13, scale=wide)
        hidden = torch.randn(3, 64)
        topk = torch.tensor([[0, 1]] * 3, dtype=torch.int32), torch.ones(3, 2)
        with pytest.raises(ValueError, match="contiguous along its rows or along K"):
            triton_experts(hidden, bad, W.w2, *topk, activation=A.SWIGLU, act_params=None,
                           act_format=fmt.natural_activation_format(),
                           intermediate_size_padded=W.padded_intermediate_size)
    Wb = fm.ExpertWeights.from_float(w13, w2, activation=A.SWIGLU, format=F.FP8_CHANNEL)
    assert Wb.w13.k_major_scales() is Wb.w13


# ---- bit level: in-register dequantization and epilogue quantizers ------------------------------


def _random_operand(fmt: Format, shape, g: torch.Generator, mx_codes=None) -> QuantizedTensor:
    """Random storage bytes (every E2M1 code incl. -0; E4M3 without NaN; UE8M0 codes 0..240, the
    documented exact range of FP4 x UE8M0 (MXFP8 also 241..254), or ``mx_codes = (lo, hi)``;
    positive E4M3 block scales)."""
    *B, R, C = shape
    if fmt.is_fp4:
        data = torch.randint(0, 256, (*B, R, C // 2), generator=g, dtype=torch.uint8)
    else:
        codes = torch.randint(0, 254, (*B, R, C), generator=g, dtype=torch.uint8)
        codes = torch.where((codes & 0x7F) == 0x7F, codes ^ 1, codes)  # no NaN
        data = codes.view(E4M3)
    if fmt is F.NVFP4:
        s = torch.randint(0, 0x7F, (*B, R, C // 16), generator=g, dtype=torch.uint8).view(E4M3)
        gs = torch.rand(B, generator=g) * 1000 + 1.0
        return QuantizedTensor(data, fmt, s, gs)
    if fmt in (F.MXFP4, F.MXFP8):
        lo, hi = mx_codes or (0, 241 if fmt is F.MXFP4 else 255)
        return QuantizedTensor(data, fmt, torch.randint(lo, hi, (*B, R, C // 32), generator=g, dtype=torch.uint8))
    return QuantizedTensor(data, fmt, torch.rand(B, generator=g) + 0.5)


@interpreter
@pytest.mark.parametrize("fmt", [F.NVFP4, F.MXFP4, F.MXFP8, F.FP8_TENSOR], ids=lambda f: f.name)
@pytest.mark.parametrize("block_k", [32, 64])
def test_tile_dequantization_is_bit_exact(fmt, block_k):
    """The tiles the GEMMs multiply (kernels/_blockscaled._load_tile, via a test-only kernel entry)
    equal fm.dequantize bit for bit: NVFP4 after the epilogue's IEEE division by g, FP8 after the
    per-tensor scale. Row and K tails (37 rows in tiles of 16; 96 = 64 + 32 columns)."""
    g = torch.Generator().manual_seed(block_k)
    q = _random_operand(fmt, (2, 37, 96), g)
    tiles = dequantize_tiles(q.to(DEV), block_rows=16, block_k=block_k).cpu()
    ref = dequantize(q)
    if fmt is F.NVFP4:
        got = torch.div(tiles, q.global_scale[:, None, None])
    elif fmt is F.FP8_TENSOR:
        assert torch.equal(tiles, q.data.float())
        got = tiles * q.scale[:, None, None]
    else:
        got = tiles
    assert torch.equal(got.view(torch.int32), ref.view(torch.int32))  # signed zeros included


def test_mx_fold_choice():
    """The MX_FOLD conversion only for MXFP4 weights whose known code range lies in [11, 144], on the
    fast path, while enabled; the general path otherwise."""
    from fusedmoe.backends import triton_moe
    from fusedmoe.backends.triton_moe import _mx_fold_cvt

    g = torch.Generator().manual_seed(0)
    q = _random_operand(F.MXFP4, (1, 4, 64), g, mx_codes=(20, 21))
    assert q.scale_code_range is None and _mx_fold_cvt(q, True) is True
    for rng, want in (((11, 144), 2), ((10, 100), True), ((11, 145), True), ((0, 255), True)):
        qr = replace(q, scale_code_range=rng)
        assert _mx_fold_cvt(qr, True) == want and type(_mx_fold_cvt(qr, True)) is type(want)
        assert _mx_fold_cvt(qr, False) is False
    # the E4M3 partial-sum path (MX x MXFP8 at decode) keeps its own fast converter, never folds
    assert _mx_fold_cvt(replace(q, scale_code_range=(11, 144)), True, mxdot=True) is True
    prev = triton_moe.set_mx_fold(False)
    try:
        assert prev is True
        assert _mx_fold_cvt(replace(q, scale_code_range=(11, 144)), True) is True
    finally:
        triton_moe.set_mx_fold(prev)
    q8 = replace(_random_operand(F.MXFP8, (1, 4, 64), g, mx_codes=(20, 21)), scale_code_range=(20, 20))
    assert _mx_fold_cvt(q8, True) is True  # MXFP8 values need no restore


@pytest.mark.parametrize("restore", [False, True], ids=["folded", "restored"])
def test_swizzled_e2m1_converter_ptx(restore):
    """The swizzled words' E2M1 -> bf16 converter (``_e2m1_swz_asm``; the linear words' one is
    test_nibble_aligned_e2m1_converter_ptx), emulated on every 16-bit word swizzled by
    formats.tensor.swizzle_fp4_words, in both halves of a register next to another word: output s holds
    value s of each half's own word as bf16 ``e2m1 * 2^-126`` (``e2m1`` restored), signed zeros and the
    subnormal 0.5 * 2^-126 included."""
    from fusedmoe.formats.reference import e2m1_to_float
    from fusedmoe.formats.tensor import swizzle_fp4_words
    from fusedmoe.kernels import _blockscaled as B

    def swizzled(words):
        w = words.to(torch.int32).to(torch.int16).view(torch.uint8)
        return swizzle_fp4_words(w).view(torch.int16).to(torch.int64) & 0xFFFF

    plain = torch.arange(1 << 16, dtype=torch.int64)
    other = plain.flip(0) ^ 0x5A5A  # the register's other word: no bits may cross between the halves
    stored, other_stored = swizzled(plain), swizzled(other)
    asm = B._e2m1_swz_asm(restore)
    for lo_word, hi_word, lo_st, hi_st in ((plain, other, stored, other_stored), (other, plain, other_stored, stored)):
        regs = _emulate_ptx(asm, [0, 0, 0, 0, lo_st | (hi_st << 16)])
        for s in range(4):
            out = regs[f"${s}"]
            for half, word in ((out & 0xFFFF, lo_word), (out >> 16, hi_word)):
                v = e2m1_to_float(((word >> (4 * s)) & 0xF).to(torch.uint8))
                want = (v if restore else v * 2.0 ** -126).to(torch.bfloat16).view(torch.int16).to(torch.int64) & 0xFFFF
                assert torch.equal(half, want), (s, restore)


@pytest.mark.parametrize("swz", [False, True], ids=["tiled", "swizzled"])
def test_e2m1_to_e4m3_converter_ptx(swz):
    """The E2M1 -> E4M3 converters' PTX (MX x MXFP8 partial sums; ``_E2M1_E4M3_SWZ_ASM`` on swizzled
    words), emulated on 4-byte registers (two words): output 0 holds the low nibbles' values (K 2i),
    output 1 the high nibbles' (K 2i + 1), each E4M3 ``e2m1 * 2^-6`` of its byte i."""
    from fusedmoe.formats.reference import e2m1_to_float
    from fusedmoe.formats.tensor import swizzle_fp4_words
    from fusedmoe.kernels import _blockscaled as B

    g = torch.Generator().manual_seed(9)
    b = torch.randint(0, 256, (1 << 16, 4), dtype=torch.uint8, generator=g)
    b[:256, 0] = torch.arange(256, dtype=torch.uint8)  # every byte value in every position
    b[256:512, 1] = b[512:768, 2] = b[768:1024, 3] = torch.arange(256, dtype=torch.uint8)
    st = swizzle_fp4_words(b) if swz else b
    reg = st.to(torch.int64)
    reg = reg[:, 0] | (reg[:, 1] << 8) | (reg[:, 2] << 16) | (reg[:, 3] << 24)
    regs = _emulate_ptx((B._E2M1_E4M3_SWZ_ASM if swz else B._E2M1_E4M3_ASM).value, [0, 0, reg])
    lo, hi = regs["$0"], regs["$1"]
    for out, shift in ((lo, 0), (hi, 4)):
        for i in range(4):
            v = e2m1_to_float(((b[:, i] >> shift) & 0xF).to(torch.uint8)) * 2.0 ** -6
            want = v.to(torch.float8_e4m3fn).view(torch.uint8).to(torch.int64)
            assert torch.equal((out >> (8 * i)) & 0xFF, want), (i, shift, swz)


@interpreter
@pytest.mark.parametrize("fmt", [F.NVFP4, F.MXFP4], ids=lambda f: f.name)
def test_tile_dequantization_tiled_layout(fmt):
    """The tiles of FP4 values stored tiled or swizzled (QuantizedTensor.value_layout) equal
    fm.dequantize bit for bit, as the linear layout's: K tiles as wide as a tile (one run per 64 rows)
    and narrower (their offsets within a tile, ``_blockscaled._k_base``); rows past the last whole row
    tile masked; swizzled words through the portable unswizzle (``_blockscaled._unswizzle_bytes``)."""
    g = torch.Generator().manual_seed(2)
    q = _random_operand(fmt, (2, 192, 256), g)
    ref = dequantize(q)
    for tk, bk, br, swz in ((128, 128, 32, False), (128, 32, 256, True), (64, 64, 16, False), (32, 32, 64, True),
                            (128, 64, 32, True)):  # 384 rows: 2 x 256 masked
        t = q.tiled_values(tk, swizzle=swz)
        assert t.value_tile_k == tk and t.value_swizzled == swz
        tiles = dequantize_tiles(t.to(DEV), block_rows=br, block_k=bk).cpu()
        got = torch.div(tiles, q.global_scale[:, None, None]) if fmt is F.NVFP4 else tiles
        assert torch.equal(got.view(torch.int32), ref.view(torch.int32)), (tk, bk, swz)
    with pytest.raises(ValueError, match="must divide"):
        dequantize_tiles(q.tiled_values(64).to(DEV), block_k=128)


def _with_values(W, how: str):
    """A copy of ExpertWeights ``W`` with both FP4 weights converted by ``QuantizedTensor.<how>()``
    (``replace`` would run ExpertWeights' own layout choice again: bypassed, as the padded-scale test does)."""
    out = replace(W)
    for name in ("w13", "w2"):
        object.__setattr__(out, name, getattr(getattr(W, name), how)())
    return out


@interpreter
@pytest.mark.parametrize("pair", [(F.NVFP4, F.BF16), (F.MXFP4, F.BF16), (F.MXFP4, F.MXFP8)],
                         ids=lambda p: f"{p[0].name}x{p[1].name}")
def test_tiled_and_linear_weights_same_bits(pair):
    """ExpertWeights store FP4 values swizzled (tiled, bit-swizzled words); the kernels read that,
    the tiled and the linear layout and give the same bits (the E4M3 partial-sum path of MX x MXFP8
    at 16-row tiles included)."""
    c = Case(pair[0], pair[1], A.SWIGLU_OAI if pair[0] is F.MXFP4 else A.SWIGLU, T=3, H=64, I=64, E=4, K=2,
             bias=pair[0] is F.MXFP4, dtype=torch.float16)
    hidden, W, topk = make_case(c)
    assert W.w13.value_tile_k == W.w2.value_tile_k == 64 and W.w13.value_swizzled and W.w2.value_swizzled
    lin, tiled = _with_values(W, "linear_values"), W.with_fp4_layout("tiled")
    assert lin.w13.value_layout == lin.w2.value_layout == "linear"
    assert tiled.w13.value_layout == tiled.w2.value_layout == "tiled"
    # the heuristic's K tiles (as wide as the tiles) and 32-wide ones (two per tile)
    for cfg in (None, MoEKernelConfig(KernelConfig(16, 64, 32), KernelConfig(16, 64, 32))):
        want = run_triton(hidden, lin, topk, c.afmt, config=cfg)
        assert torch.equal(run_triton(hidden, W, topk, c.afmt, config=cfg), want)
        assert torch.equal(run_triton(hidden, tiled, topk, c.afmt, config=cfg), want)
    # a K tile wider than the tiles: narrowed to them (triton_moe._fit_tile_k), same result as linear
    wide = MoEKernelConfig(KernelConfig(16, 64, 128), KernelConfig(16, 64, 128))
    torch.testing.assert_close(run_triton(hidden, W, topk, c.afmt, config=wide),
                               run_triton(hidden, lin, topk, c.afmt, config=wide), rtol=2e-3, atol=2e-3)


@interpreter
def test_tile_dequantization_nan_scale():
    """UE8M0 code 255 is NaN, as fm.dequantize."""
    g = torch.Generator().manual_seed(0)
    for fmt in (F.MXFP4, F.MXFP8):
        q = _random_operand(fmt, (1, 16, 64), g)
        q.scale[0, 3, 1] = 255
        tiles = dequantize_tiles(q.to(DEV), block_rows=16, block_k=64).cpu()
        assert torch.equal(torch.isnan(tiles), torch.isnan(dequantize(q)))
        assert torch.isnan(tiles[0, 3, 32:64]).all()


def _one_hot_problem(wfmt, act, dtype, E=4, H=64, I=64, T=6, seed=0):
    """hidden row t = e_{j_t} (exact in every activation format): GEMM1 of slot (t, k) is the
    dequantized column W13[e, :, j_t], computed exactly (one product per output)."""
    g = torch.Generator().manual_seed(seed)
    M = 2 * I if act.is_gated else I
    w13 = torch.randn(E, M, H, generator=g) * 0.3
    w2 = torch.randn(E, H, I, generator=g) * 0.1
    W = fm.ExpertWeights.from_float(w13, w2, activation=act, format=wfmt)
    j = torch.randint(0, H, (T,), generator=g)
    hidden = torch.zeros(T, H, dtype=dtype)
    hidden[torch.arange(T), j] = 1.0
    ids = torch.stack([torch.randperm(E, generator=g)[:2] for _ in range(T)]).int()
    topk = TopK(ids, torch.rand(T, 2, generator=g) + 0.1)
    # expected GEMM1 output per slot x = t*2 + k
    w13d = dequantize(W.w13)
    h = torch.stack([w13d[ids[t, k], :, j[t]] for t in range(T) for k in range(2)]) + 0.0  # a dot gives +0, not -0
    return hidden.to(DEV), W.to(DEV), TopK(ids.to(DEV), topk.weights.to(DEV)), h


@interpreter
@pytest.mark.parametrize("wfmt", [F.NVFP4, F.MXFP4], ids=lambda f: f.name)
def test_one_hot_gemm1_reproduces_dequantized_weights(wfmt):
    """IDENTITY activation, fp32 hidden, BF16 activation format: the intermediate GEMM1 writes is
    fm.dequantize(w13)[e, :, j] bit for bit (the in-register dequantization inside the real GEMM,
    including NVFP4's 1/g in the epilogue)."""
    hidden, W, topk, h = _one_hot_problem(wfmt, A.IDENTITY, torch.float32)
    cap = {}
    cfg = MoEKernelConfig(KernelConfig(16, 32, 32, swap_ab=True), KernelConfig(16, 32, 32))
    run_triton(hidden, W, topk, F.BF16, config=cfg, capture=cap)
    assert torch.equal(cap["inter"].cpu().view(torch.int32), h.view(torch.int32))


# (weights, activation format, static intermediate scale, GEMM1 block_n) -> which quantizer runs
_INTER_CASES = [
    (F.NVFP4, F.NVFP4, True, 32),  # NVFP4 in GEMM1's epilogue (static global scale g2 = 1/a2)
    (F.NVFP4, F.NVFP4, False, 32),  # dynamic g over the local intermediate: quantize_act after GEMM1
    (F.MXFP4, F.MXFP8, False, 64),  # MXFP8 1x32 groups in the epilogue
    (F.MXFP8, F.MXFP8, False, 16),  # block_n 16 < 32: MXFP8 through quantize_act
    (F.NVFP4, F.FP8_TENSOR, True, 32),  # FP8 static per tensor in the epilogue (triton_experts' a1 / a2)
]


@interpreter
@pytest.mark.parametrize("wfmt,afmt,static,bn", _INTER_CASES,
                         ids=lambda v: v.name if isinstance(v, Format) else str(v))
@pytest.mark.parametrize("act", [A.IDENTITY, A.RELU2], ids=lambda a: a.name)
def test_intermediate_quantization_is_bit_exact(wfmt, afmt, static, bn, act):
    """GEMM2's input equals fm.quantize(round_to_hidden_dtype(act(h))) byte for byte: values /
    packed codes, block scales (computed from the rounded values) and the global scale."""
    dtype = torch.float16
    hidden, W, topk, h = _one_hot_problem(wfmt, act, dtype, seed=1)
    a2, scales = None, (None, None)
    if static:
        amax = h.abs().max().item() ** (2 if act is A.RELU2 else 1)
        a2 = torch.tensor([amax * 0.8 / (448 * (6 if afmt is F.NVFP4 else 1))])
        # one-hot hidden rows stay exact: NVFP4 g1 = 1 / (1/2688) = 2688, FP8 a1 = 1
        scales = (torch.ones(1, device=DEV) * (1.0 / 2688 if afmt is F.NVFP4 else 1.0), a2.to(DEV))
    z = fm.activations.apply_activation(h, act).to(dtype)
    if afmt is F.NVFP4:
        want = quantize(z, afmt, global_scale=None if a2 is None else 1.0 / a2)
    elif afmt is F.FP8_TENSOR:
        want = quantize(z, afmt, scale=a2)
    else:
        want = quantize(z, afmt)
    cap = {}
    cfg = MoEKernelConfig(KernelConfig(16, bn, 32), KernelConfig(16, 32, 32))
    run_triton(hidden, W, topk, afmt, config=cfg, capture=cap, scales=scales)
    data = cap["inter"].cpu()
    assert data.dtype == want.data.dtype
    assert torch.equal(data.view(torch.uint8), want.data.view(torch.uint8))
    if afmt is F.FP8_TENSOR:
        assert torch.equal(cap["inter_scale"].cpu().reshape(()), want.scale.reshape(()))
        return
    assert torch.equal(cap["inter_scale"].cpu().view(torch.uint8), want.scale.view(torch.uint8))
    if afmt is F.NVFP4:
        assert torch.equal(cap["inter_g"].cpu().reshape(()), want.global_scale.reshape(()))


# ---- sm_90 compilation (no GPU needed) -----------------------------------------------------------

_SM90_SCRIPT = r'''
"""Compile the block-scaled Triton MoE kernels for sm_90 (no GPU needed: Triton's bundled ptxas).
Prints one line per variant: name, registers, spills (LDL/STL in SASS), instructions."""
import os, re, subprocess, sys, tempfile
os.environ.pop("TRITON_INTERPRET", None)
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from fusedmoe.kernels import _blockscaled as B
from fusedmoe.kernels import _moe_gemm as G

F = {"plain": 0, "fp8": 1, "nvfp4": 2, "mxfp4": 3, "mxfp8": 4}
VAL = {"plain": "*bf16", "fp8": "*fp8e4nv", "nvfp4": "*u8", "mxfp4": "*u8", "mxfp8": "*fp8e4nv"}
SCL = {"plain": "*fp32", "fp8": "*fp32", "nvfp4": "*fp8e4nv", "mxfp4": "*u8", "mxfp8": "*u8"}
NODIV = ("num_slots", "num_blocks_m", "act_alpha", "act_beta", "act_limit", "R")
BIN = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")


def compile_kernel(fn, types, constexprs, num_warps, num_stages):
    sig, attrs = {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in constexprs:
            sig[name] = "constexpr"
            continue
        sig[name] = types.get(name, "i32")
        if name not in NODIV and not sig[name].startswith("fp"):
            attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(fn, sig, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options=dict(num_warps=num_warps, num_stages=num_stages))


def sass_of(k):
    """(SASS text, registers per thread) of a compiled kernel, by the bundled cuobjdump."""
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(k.asm["cubin"])
    try:
        tool = os.path.join(BIN, "cuobjdump")
        sass = subprocess.run([tool, "-sass", f.name], capture_output=True, text=True).stdout
        res = subprocess.run([tool, "-res-usage", f.name], capture_output=True, text=True).stdout
        m = re.search(r"REG:(\d+)", res)
        return sass, int(m.group(1)) if m else -1
    finally:
        os.unlink(f.name)


def _kperm(w, micro, BK):
    """The launcher's K order for weight format ``w``."""
    from fusedmoe import Format
    from fusedmoe.backends.triton_moe import _k_order

    return _k_order(Format[w.upper()], BK) if micro else 0


def _join(w, micro, swap):
    """The launcher's choice of one joined gate + up weight tile for weight format ``w``."""
    from fusedmoe import Format
    from fusedmoe.backends.kernel_configs import join_gate_up

    return micro and join_gate_up(Format[w.upper()], swap)


def gemm(which, w, a, *, out_q=0, act=0, gated=True, mxdot=False, BM=16, BN=64, BK=128, nw=4, ns=4, bias=False,
         even=True, fast=False, quant=4, split=1, gdc=False, fuse=False, cvt=None, kperm=None, pers=False, nt=1,
         hk=1, rcp=False, tiled=0, wsk1=False, swz=False, swap=None, ktail=0, aperm=False, odbk=0, srun=0,
         blkw1=True):
    """quant 4 (MICRO, the default here): block-scaled operands w / a as named in F; 0-3 (NONE, TENSOR,
    ROW, BLOCK): 16-bit ("plain") or FP8 operands with fp32 scales (tests/test_sm90_compile.py). swap: W @ A^T,
    by default below 64 token rows."""
    swap = BM < 64 if swap is None else swap
    micro = quant == 4
    fast_cvt = micro if cvt is None else cvt
    val16 = lambda f: "*i16" if fast_cvt and not mxdot and f in ("nvfp4", "mxfp4") else VAL[f]  # noqa: E731
    common = dict(a_ptr=val16(a), a_scale_ptr=SCL[a], w_ptr=val16(w), w_scale_ptr=SCL[w], bias_ptr="*fp32",
                  topk_w_ptr="*fp32", sorted_ids_ptr="*i32", block_expert_ptr="*i32", num_post_padded_ptr="*i32",
                  a_gs_ptr="*fp32", w_gs_ptr="*fp32", act_alpha="fp32", act_beta="fp32", act_limit="fp32")
    ce = dict(TOP_K=8, E_LOC=128, QUANT=quant, A_FMT=F[a] if micro else 0, W_FMT=F[w] if micro else 0,
              CD=tl.bfloat16, FAST_CVT=micro if cvt is None else cvt, KPERM=_kperm(w, micro, BK) if kperm is None else kperm,
              MXDOT=mxdot, HAS_BIAS=bias, BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, GROUP_M=1 if swap else 8,
              SWAP_AB=swap, EVEN_K=even, EVEN_N=even, UPCAST=False, PRECISION="tf32", FAST_ACC=fast,
              USE_GDC=gdc, W_TK=tiled, W_SWZ=swz, K_TAIL=ktail, A_PERMUTED=aperm)
    if wsk1:  # row-major weight block scales: Triton specializes the stride 1 at run time
        ce["stride_wsk"] = 1
    ce["W_SRUN"] = srun  # > 0: weight block scales read in aligned runs (padded rows)
    ce["BLOCK_W1"] = blkw1  # FP8 blocks: one weight scale a tile of <= 128 rows (triton_moe.set_block_w1)
    if which == 1:
        types = dict(common, ws_ptr="*fp32", cnt_ptr="*i32",
                     out_ptr={0: "*bf16", 1: "*fp8e4nv", 2: "*fp8e4nv", 3: "*fp8e4nv", 4: "*u8", 5: "*bf16"}[out_q],
                     out_scale_ptr={0: "*fp32", 1: "*fp32", 2: "*fp32", 3: "*u8", 4: "*u8", 5: "*i32"}[out_q],
                     out_qscale_ptr="*fp32")
        ce.update(ACT=act, GATED=gated, OUT_Q=out_q, ROUND_DTYPE=tl.bfloat16, Q_AS_FP32=False, WEIGHT_ON_INPUT=False,
                  SPLIT_K=split, JOIN=_join(w, micro, swap), RCP_DIV=rcp, OUT_DOT_BK=odbk)
        return compile_kernel(G._gemm1_kernel, types, ce, nw, ns)
    types = dict(common, out_ptr="*bf16", ws_ptr="*fp32", cnt_ptr="*i32", comb_cnt_ptr="*i32", comb_out_ptr="*bf16")
    ce.update(MUL_ROUTING_WEIGHT=True, OUT_ATOMIC=False, FUSE_COMBINE=fuse, SPLIT_K=split, PERSISTENT=pers, N_TILES=nt,
              HELD_KB=hk)
    return compile_kernel(G._gemm2_kernel, types, ce, nw, ns)


VARIANTS = {
    # decode (swap_ab, block_m 16): the weight tile is wgmma's register operand
    "g1 NVFP4xBF16 swiglu": lambda: gemm(1, "nvfp4", "plain"),
    "g1 NVFP4xBF16 swiglu split-K 8": lambda: gemm(1, "nvfp4", "plain", split=8),
    "g1 NVFP4xFP8 relu2 fp8-static-out": lambda: gemm(1, "nvfp4", "fp8", out_q=1, act=3, gated=False),
    "g1 NVFP4xNVFP4 swiglu nvfp4-out": lambda: gemm(1, "nvfp4", "nvfp4", out_q=4),
    "g1 MXFP4xBF16 swiglu_oai bias": lambda: gemm(1, "mxfp4", "plain", act=2, bias=True),
    "g1 MXFP4xMXFP8 e4m3-mma mxfp8-out": lambda: gemm(1, "mxfp4", "mxfp8", out_q=3, mxdot=True),
    "g1 MXFP8xMXFP8 e4m3-mma mxfp8-out": lambda: gemm(1, "mxfp8", "mxfp8", out_q=3, mxdot=True),
    "g2 NVFP4xNVFP4": lambda: gemm(2, "nvfp4", "nvfp4"),
    "g2 MXFP4xBF16 split-K 2": lambda: gemm(2, "mxfp4", "plain", BK=64, split=2),
    "g2 MXFP4xMXFP8 e4m3-mma": lambda: gemm(2, "mxfp4", "mxfp8", mxdot=True),
    "g1 MXFP4xMXFP8 e4m3-mma K/N tails": lambda: gemm(1, "mxfp4", "mxfp8", out_q=3, mxdot=True, BK=64, even=False),
    "g2 NVFP4xBF16 K/N tails": lambda: gemm(2, "nvfp4", "plain", BK=64, even=False),
    # prefill (block_m 128 / 64, 8 warps): the dequantized weight tile goes through shared memory
    "g1 NVFP4xBF16 prefill": lambda: gemm(1, "nvfp4", "plain", BM=128, nw=8, ns=3),
    "g2 NVFP4xBF16 prefill K/N tails": lambda: gemm(2, "nvfp4", "plain", BM=128, nw=8, ns=3, BK=32, even=False),
    "g2 NVFP4xBF16 decode block_k 16": lambda: gemm(2, "nvfp4", "plain", BK=16),
    "g1 MXFP8xMXFP8 prefill dequant": lambda: gemm(1, "mxfp8", "mxfp8", out_q=3, BM=64, nw=8, ns=3),
    "g2 MXFP4xBF16 prefill": lambda: gemm(2, "mxfp4", "plain", BM=128, BN=128, nw=8, ns=3),
    # prefill as W @ A^T (swap_ab at 128 token rows): the FP4 heuristic's GEMM1 (joined gate + up, one warpgroup)
    # and a GEMM2 tuner candidate, swizzled words
    "g1 MXFP4xBF16 prefill swap_ab": lambda: gemm(1, "mxfp4", "plain", act=2, bias=True, BM=128, BK=64, ns=4, tiled=64,
                                                   swz=True, swap=True),
    "g2 NVFP4xBF16 prefill swap_ab": lambda: gemm(2, "nvfp4", "plain", BM=128, BN=128, BK=64, nw=8, ns=4, tiled=128,
                                                   swz=True, swap=True),
    # the same with the activations stored in the dot order (A_PERMUTED; GEMM1 stores the intermediate so)
    "g1 MXFP4xBF16 prefill swap_ab dot order": lambda: gemm(1, "mxfp4", "plain", act=2, bias=True, BM=128, BK=64, ns=4,
                                                             tiled=64, swz=True, swap=True, aperm=True, odbk=64),
    "g2 NVFP4xBF16 prefill swap_ab dot order": lambda: gemm(2, "nvfp4", "plain", BM=128, BN=128, BK=64, nw=8, ns=4,
                                                             tiled=128, swz=True, swap=True, aperm=True),
    "g1 NVFP4xBF16 prefill dot order": lambda: gemm(1, "nvfp4", "plain", BM=128, BN=128, nw=8, ns=3, aperm=True,
                                                     odbk=64),
    # FP4 values stored tiled (QuantizedTensor.value_layout): 16-byte runs (and a tile narrower than a run)
    "g1 MXFP4xBF16 swiglu_oai bias tiled": lambda: gemm(1, "mxfp4", "plain", act=2, bias=True, tiled=128),
    "g2 NVFP4xBF16 swizzled": lambda: gemm(2, "nvfp4", "plain", tiled=128, swz=True),
    "g1 MXFP4xMXFP8 e4m3-mma swizzled": lambda: gemm(1, "mxfp4", "mxfp8", out_q=3, mxdot=True, tiled=128, swz=True),
    "g1 MXFP4xMXFP8 e4m3-mma tiled N tails": lambda: gemm(1, "mxfp4", "mxfp8", out_q=3, mxdot=True, BK=64,
                                                        even=False, tiled=64),
    "g2 NVFP4xBF16 decode block_k 16 tiled": lambda: gemm(2, "nvfp4", "plain", BK=16, tiled=128),
    # K = n x 128 + 64 (gpt-oss): 128-wide steps over 64-wide tiles and the 64-wide tail step (K_TAIL)
    "g1 MXFP4xBF16 swiglu_oai K tail": lambda: gemm(1, "mxfp4", "plain", act=2, bias=True, tiled=64, swz=True,
                                                    ktail=64, split=2),
    "g2 NVFP4xBF16 K tail": lambda: gemm(2, "nvfp4", "plain", tiled=64, swz=True, ktail=64),
    "dequant tiles fast": lambda: compile_kernel(
        B._dequant_kernel, dict(ptr="*i16", s_ptr="*u8", out_ptr="*fp32"),
        dict(FMT=3, BR=32, BK=64, EVEN_K=True, CD=tl.bfloat16, FAST_CVT=True, TK=0, SWZ=False), 4, 1),
}

if __name__ == "__main__":
    names = sys.argv[1:] or list(VARIANTS)
    for name in names:
        sass, regs = sass_of(VARIANTS[name]())
        spills = len(re.findall(r"\b(?:LDL|STL)\b", sass))
        print(f"{name}|regs={regs}|spills={spills}", flush=True)
'''


def run_sm90_script(tmp_path, text: str):
    """Run a compile script (``_SM90_SCRIPT`` or one built on its helpers) in a subprocess with the
    JIT instead of the interpreter; returns its output lines split at ``|``. Skips when Triton's
    bundled ptxas / cuobjdump are absent (a Triton build without the NVIDIA backend tools)."""
    import subprocess
    import sys

    import triton

    bin_dir = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    if not (os.path.exists(os.path.join(bin_dir, "ptxas")) and os.path.exists(os.path.join(bin_dir, "cuobjdump"))):
        pytest.skip("Triton's bundled ptxas / cuobjdump not found")
    script = tmp_path / "sm90_script.py"
    script.write_text(text)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "cache")
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    return [line.split("|") for line in res.stdout.strip().splitlines()]


def test_kernels_compile_for_sm90_without_spills(tmp_path):
    """Every block-scaled kernel path (decode and prefill tiles, each operand format, the E4M3
    partial-sum path, the epilogue quantizers, the inline-PTX conversions) compiles for sm_90 with
    Triton's bundled ptxas and cuobjdump, and without register spills. Runs in a subprocess (the
    tests interpret Triton; compiling needs the JIT). Needs no GPU."""
    rows = run_sm90_script(tmp_path, _SM90_SCRIPT)
    assert len(rows) == 30, rows
    for name, regs, spills in rows:
        assert spills == "spills=0", (name, regs, spills)


# ---- errors and configs (no kernels needed for most) ---------------------------------------------


@interpreter
def test_errors():
    c = Case(F.MXFP4, F.BF16, A.SWIGLU, T=2)
    hidden, W, topk = make_case(c)
    base = dict(activation=c.act, act_params=None, intermediate_size_padded=W.padded_intermediate_size)
    args = (hidden, W.w13, W.w2, topk.ids, topk.weights)
    with pytest.raises(ValueError, match="act_format"):
        triton_experts(*args, act_format=F.NVFP4, **base)  # MXFP4 pairs with BF16 / MXFP8 only
    with pytest.raises(ValueError, match="static"):
        triton_experts(*args, act_format=F.MXFP8, a1_scale=torch.ones(1, device=DEV), **base)
    with pytest.raises(ValueError, match="block_k"):
        cfg = MoEKernelConfig(KernelConfig(16, 32, 16), KernelConfig(16, 32, 32))  # MX needs whole 32-blocks
        triton_experts(*args, act_format=F.BF16, config=cfg, **base)
    with pytest.raises(ValueError, match="dequantize_tiles"):
        dequantize_tiles(QuantizedTensor(torch.zeros(2, 4, 32, device=DEV), F.BF16))


def _emulate_ptx(asm: str, inputs):
    """Run the straight-line PTX of an inline-asm converter on 32-bit registers -- Python ints, or int64
    tensors of them (every element one register) -- (mov, shl, shr, and, or, mul.rn.bf16x2 / fma.rn.bf16x2 with
    exact results): the register file after the block."""
    def bf16x2_mul(a, b, c=None):
        halves = lambda t: (torch.stack([t & 0xFFFF, (t >> 16) & 0xFFFF], -1) << 16).to(torch.int32).view(  # noqa: E731
            torch.float32)
        p = halves(torch.as_tensor(a, dtype=torch.int64)) * halves(torch.as_tensor(b, dtype=torch.int64))
        if c is not None:  # (an exact product plus c, exact in fp32 for the -0 addend the converters use)
            p = p + halves(torch.as_tensor(c, dtype=torch.int64))
        bits = p.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
        assert bool(bits.bitwise_and(0xFFFF).eq(0).all()), "inexact bf16 result"
        r = (bits[..., 0] >> 16) | ((bits[..., 1] >> 16) << 16)
        return r if isinstance(a, torch.Tensor) else int(r)

    regs = {f"${i}": v for i, v in enumerate(inputs)}
    val = (lambda t: regs[t] if t in regs else int(t, 0))
    for line in asm.splitlines():
        line = line.strip().rstrip(";")
        if not line or line[0] in "{}" or line.startswith(".reg"):
            continue
        op, rest = line.split(None, 1)
        d, *src = [t.strip() for t in rest.split(",")]
        x = [val(t) for t in src]
        if op == "mov.b32":
            r = x[0]
        elif op == "shl.b32":
            r = (x[0] << x[1]) & 0xFFFFFFFF
        elif op in ("shr.b32", "shr.u32"):
            r = x[0] >> x[1]
        elif op == "and.b32":
            r = x[0] & x[1]
        elif op == "or.b32":
            r = x[0] | x[1]
        elif op == "mul.rn.bf16x2":
            r = bf16x2_mul(x[0], x[1])
        elif op == "fma.rn.bf16x2":
            r = bf16x2_mul(x[0], x[1], x[2])
        else:
            raise AssertionError(f"opcode {op} not emulated")
        regs[d] = r
    return regs


@pytest.mark.parametrize("restore", [False, True], ids=["nvfp4-unrestored", "mx-restored"])
def test_nibble_aligned_e2m1_converter_ptx(restore):
    """The nibble-aligned converter's PTX (``_E2M1_BF16_NIB`` / ``_RESTORED``), emulated, on 16-bit
    words holding every nibble value in every position (and random ones), in both register halves: output $s, half h = nibble s (bits 4s .. 4s + 3)
    of word h -- elementwise in the words, as inline_asm_elementwise requires; values
    ``e2m1 * 2^-126`` (NVFP4: the rest of 2^126 is in the block scale and the accumulator factor) or
    ``e2m1`` when restored; signed zeros kept."""
    import math
    import struct

    from fusedmoe.kernels._blockscaled import _E2M1_BF16_NIB, _E2M1_BF16_NIB_RESTORED, _NIB_ACC_FACTOR

    table = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    unit = 1.0 if restore else 2.0 ** -126
    asm = str(getattr(_E2M1_BF16_NIB_RESTORED if restore else _E2M1_BF16_NIB, "value", None))
    assert float(getattr(_NIB_ACC_FACTOR, "value", _NIB_ACC_FACTOR)) == 2.0 ** 16  # 2^126 = 2^110 * 2^16

    def bf(bits):
        return struct.unpack("<f", struct.pack("<I", (bits & 0xFFFF) << 16))[0]

    g = torch.Generator().manual_seed(5)
    words = [i | (i + 5) % 16 << 4 | (i + 9) % 16 << 8 | (i + 13) % 16 << 12 for i in range(16)]  # every
    words += torch.randint(0, 1 << 16, (2048,), generator=g).tolist()  # nibble value in every position
    for w in words:
        other = (w * 40503 + 12345) & 0xFFFF
        for h in range(2):
            regs = _emulate_ptx(asm, [0, 0, 0, 0, (w << 16 | other) if h else (other << 16 | w)])
            for s_ in range(4):
                n = (w >> (4 * s_)) & 15
                got = bf(regs[f"${s_}"] >> (16 * h))
                want = math.copysign(table[n & 7] * unit, -1.0 if n & 8 else 1.0)
                assert struct.pack("<f", got) == struct.pack("<f", want), (w, h, s_, got, want)


def test_heuristic_block_scaled():
    kw = dict(device_name="NVIDIA H200", table=TunedTable())
    # gpt-oss: H = 2880 = 45 * 64 -> block_k 64 (no K mask); decode swaps A/B with 64-row weight tiles
    c = choose_config(1, 2 * 2880, 2880, 32, 4, F.MXFP4, "gemm1", activation=A.SWIGLU_OAI, **kw)
    assert c.block_k == 64 and c.swap_ab and c.block_n >= 64 and c.block_m == 16
    # NVFP4 decode: 128-wide K steps and a 64-wide tail step for K = 2880 (MXFP4 keeps 64); prefill GEMM1 64
    for T, gemm, N, K, bk in ((8, "gemm1", 5760, 2880, 128), (64, "gemm2", 2880, 2880, 128),
                              (4096, "gemm1", 5760, 2880, 64), (8, "gemm1", 5760, 2816, 128)):
        c = choose_config(T, N, K, 128, 4, F.NVFP4, gemm, activation=A.SWIGLU_OAI, **kw)
        assert c.block_k == bk, (T, gemm, K, c)
        assert choose_config(T, N, K, 128, 4, F.MXFP4, gemm, activation=A.SWIGLU_OAI, **kw).block_k == (
            64 if K % 128 else 128), (T, gemm, K)
    for fmt in (F.NVFP4, F.MXFP4, F.MXFP8):
        for K in (2048, 2688, 1856, 768):
            c = choose_config(8, 4096, K, 128, 8, fmt, "gemm2", **kw)
            # a divisor of K, or (NVFP4 decode) 128 with a 64-wide tail step
            tail = fmt is F.NVFP4 and K % 128 == 64 and c.block_k == 128
            assert c.block_k % 32 == 0 and c.block_k <= 128 and (K % c.block_k == 0 or tail), (fmt, K, c)
        c = choose_config(8192, 1536, 2048, 128, 8, fmt, "gemm1", activation=A.SWIGLU, **kw)
        if fmt is F.MXFP8:  # two 64-row tiles in turn, 8 warps
            assert c.block_m == 128 and not c.swap_ab and c.block_k == 128 and c.block_n == 64 and c.num_warps == 8
        else:
            # FP4 prefill GEMM1 as W @ A^T: gate + up joined, 128 weight rows in one warpgroup, block_k 64
            assert (c.block_m, c.block_n, c.block_k, c.num_warps, c.swap_ab) == (128, 64, 64, 4, True), (fmt, c)
            c = choose_config(8192, 1536, 2048, 128, 8, fmt, "gemm1", activation=A.RELU2, **kw)
            assert (c.block_m, c.block_n, c.block_k, c.num_warps, c.swap_ab) == (128, 128, 64, 4, True), (fmt, c)
            c = choose_config(64, 1536, 2048, 128, 8, fmt, "gemm1", activation=A.RELU2, **kw)  # 4 rows per expert
            assert c.block_m < 64 and c.swap_ab
        assert c.num_stages >= 2
        # GEMM2 (not swapped): 256 weight rows per program for FP4, 128 for MXFP8
        c = choose_config(8192, 2048, 1536, 128, 8, fmt, "gemm2", **kw)
        assert c.block_n == (128 if fmt is F.MXFP8 else 256) and c.num_warps == 8, (fmt, c)


def test_configs_avoid_the_fp4_compiler_abort():
    """Triton 3.6 aborts the process compiling FP4 tiles with block_k 32, 64+ token rows and 128+
    weight rows per warpgroup (Qwen3-30B TP8: GEMM2 K = 96): never chosen, refused as overrides,
    never tried by the tuner."""
    from fusedmoe.backends.kernel_configs import compile_problem
    from fusedmoe.bench.tune import search_space

    bad = KernelConfig(64, 128, 32, num_warps=4, num_stages=3)
    assert compile_problem(bad, F.NVFP4) and compile_problem(bad, F.MXFP4)
    assert compile_problem(bad, F.MXFP8) is None and compile_problem(bad, F.BF16) is None
    assert compile_problem(KernelConfig(64, 128, 32, num_warps=8, num_stages=3), F.NVFP4) is None
    assert compile_problem(KernelConfig(128, 256, 32, num_warps=8, num_stages=3), F.NVFP4)
    assert compile_problem(KernelConfig(32, 128, 32, num_warps=4, num_stages=3), F.NVFP4) is None
    # the 512-row tiles that compile but give wrong results on the H200 (not swap_ab, dequantized weights)
    wide = KernelConfig(128, 512, 128, num_warps=8, num_stages=2)
    assert all("wrong results" in compile_problem(wide, f) for f in (F.NVFP4, F.MXFP4, F.MXFP8))
    assert compile_problem(wide, F.BF16) is None and compile_problem(KernelConfig(128, 256, 128, num_warps=8), F.NVFP4) is None
    for fmt in (F.NVFP4, F.MXFP4):
        for T in (1, 64, 256, 512, 1024, 4096, 16384):
            c = choose_moe_config(T, 2048, 96, 128, 8, fmt, A.SWIGLU, "NVIDIA H200", table=TunedTable())
            assert compile_problem(c.gemm1, fmt) is None and compile_problem(c.gemm2, fmt) is None, (T, c)
            for cand in search_space(T, 2048, 96, 128, 8, fmt, A.SWIGLU, "NVIDIA H200", max_candidates=64):
                assert all(compile_problem(g, fmt) is None for g in (cand.config.gemm1, cand.config.gemm2))
        with pytest.raises(ValueError, match="do not compile"):
            choose_moe_config(512, 2048, 96, 128, 8, fmt, A.SWIGLU, "NVIDIA H200", override={"gemm2": bad})
        with pytest.raises(ValueError, match="gemm2: FP4"):  # a whole MoEKernelConfig is checked too
            choose_moe_config(512, 2048, 96, 128, 8, fmt, A.SWIGLU, "NVIDIA H200",
                              override=MoEKernelConfig(KernelConfig(64, 64, 128, num_warps=4, num_stages=3), bad))


# ---- GPU tests (real shapes) -------------------------------------------------------------------

_PAIRS = [(F.NVFP4, F.BF16), (F.NVFP4, F.FP8_TENSOR), (F.NVFP4, F.NVFP4), (F.MXFP4, F.BF16), (F.MXFP4, F.MXFP8),
          (F.MXFP8, F.MXFP8)]


@gpu
@pytest.mark.parametrize("T", [1, 8, 128, 512])
@pytest.mark.parametrize("pair", _PAIRS, ids=lambda p: f"{p[0].name}x{p[1].name}")
@pytest.mark.parametrize("act", [A.SWIGLU, A.RELU2], ids=lambda a: a.name)
def test_gpu_qwen3_shapes(T, pair, act):
    """Qwen3-30B-A3B-like: H 2048, I 768, E 128, K 8, bf16; static scales for FP8 / NVFP4."""
    c = Case(pair[0], pair[1], act, T=T, H=2048, I=768, E=128, K=8, static=pair == (F.NVFP4, F.NVFP4),
             dtype=torch.bfloat16, seed=T)
    check_case(c)


@gpu
@pytest.mark.parametrize("pair", _PAIRS, ids=lambda p: f"{p[0].name}x{p[1].name}")
@pytest.mark.parametrize("act", [A.SWIGLU, A.RELU2], ids=lambda a: a.name)
def test_gpu_swap_ab_prefill_tiles(pair, act):
    """Prefill tiles as W @ A^T (swap_ab with 128 token rows; the FP4 heuristic's GEMM1 and tuner candidates for
    both GEMMs): 128 rows per expert on average, 64 and 128 weight rows per warpgroup, block_k 64 and 128."""
    c = Case(pair[0], pair[1], act, T=2048, H=2048, I=768, E=128, K=8, static=pair == (F.NVFP4, F.NVFP4),
             dtype=torch.bfloat16, seed=31)
    bn1 = 64 if act.is_gated else 128
    for g1, g2 in ((KernelConfig(128, bn1, 64, num_warps=4, num_stages=4, swap_ab=True),
                    KernelConfig(128, 128, 64, num_warps=4, num_stages=4, swap_ab=True)),
                   (KernelConfig(128, bn1, 128, num_warps=8, num_stages=3, swap_ab=True),
                    KernelConfig(128, 128, 128, num_warps=8, num_stages=3, swap_ab=True))):
        check_case(c, config=MoEKernelConfig(g1, g2))


@gpu
@pytest.mark.parametrize("wfmt,act", [(F.MXFP4, A.SWIGLU_OAI), (F.NVFP4, A.RELU2)], ids=lambda v: v.name)
def test_gpu_act_dot_order_same_bits(wfmt, act):
    """FP4 x BF16 prefill tiles with the activations stored in the dot order (hidden copied, the intermediate stored
    so by GEMM1's epilogue, both GEMMs loading without the register permutation; the fast converters) give the same
    bits as the register permutation (also in 8 more runs), swapped and not, one and two GEMM2 K steps per GEMM1
    tile, and a GEMM1 K tail (gpt-oss-20b-sized experts: H = 2880 = 22 x 128 + 64) -- and the reference."""
    c = Case(wfmt, F.BF16, act, T=1024, H=2880, I=2880 if act.is_gated else 1920, align=64, E=32, K=4,
             bias=act.is_gated, dtype=torch.bfloat16, x_scale=4.0, seed=81)
    hidden, W, topk = make_case(c)
    ref = run_reference(hidden, W, topk, F.BF16)
    for g1, g2, expect in (
            (KernelConfig(128, 64, 64, num_stages=4, swap_ab=True), KernelConfig(128, 128, 64, num_stages=4,
                                                                                 swap_ab=True), (True, True)),
            (KernelConfig(128, 128, 128, num_warps=8, num_stages=3), KernelConfig(128, 256, 64, num_warps=8,
                                                                                  num_stages=3), (True, True)),
            (KernelConfig(128, 128, 64, num_warps=8, num_stages=3), KernelConfig(128, 128, 128, num_warps=8,
                                                                                 num_stages=3),
             (True, not act.is_gated)),  # GEMM2's K = 2880 = 22 x 128 + 64 has a tail (stored natural), 1920 not
            # a swapped GEMM1 of two warpgroups never takes it (a race: different results from run to run)
            (KernelConfig(128, 64, 64, num_warps=8, num_stages=4, swap_ab=True), KernelConfig(128, 128, 64,
                                                                                              swap_ab=True),
             (False, True))):
        cfg = MoEKernelConfig(g1, g2)
        outs = {}
        for on in (False, True):
            prev = triton_moe.set_act_dot_order(on, formats=(F.MXFP4, F.NVFP4))
            try:
                cap = {}
                outs[on] = run_triton(hidden, W, topk, F.BF16, config=cfg, capture=cap)
                again = [run_triton(hidden, W, topk, F.BF16, config=cfg) for _ in range(8)] if on else []
            finally:
                triton_moe.set_act_dot_order(*prev)
            assert cap["dot_order"] == (expect if on else (False, False)), (cfg, cap["dot_order"])
        assert torch.equal(outs[True], outs[False]), cfg
        assert all(torch.equal(o, outs[False]) for o in again), cfg  # the same bits run after run
        mx, rms = _errors(outs[True], ref)
        bmx, brms = _bounds(c.dtype)
        assert mx <= bmx and rms <= brms, (cfg, mx, rms)


@gpu
@pytest.mark.parametrize("T", [8, 512])
@pytest.mark.parametrize("pair", [(F.MXFP4, F.BF16), (F.NVFP4, F.BF16), (F.MXFP4, F.MXFP8), (F.NVFP4, F.FP8_TENSOR)],
                         ids=lambda p: f"{p[0].name}x{p[1].name}")
def test_gpu_k_tail_gpt_oss_shapes(T, pair):
    """gpt-oss-20b-sized experts with I = 2880 unpadded (align 64): both GEMMs have K = 2880 = 22 x 128 + 64 and
    run 128-wide K steps over the 64-wide FP4 tiles plus the 64-wide tail step (K_TAIL), split-K at decode,
    swap_ab prefill tiles -- against the reference."""
    c = Case(pair[0], pair[1], A.SWIGLU_OAI, T=T, H=2880, I=2880, align=64, E=32, K=4, bias=True,
             dtype=torch.bfloat16, x_scale=4.0, seed=T + 5)
    bm = 16 if T == 8 else 128
    # MXFP8 activations on the E4M3 path of decode tiles (MXFP4 weights: only where set_mx_e4m3_dot asks): no tail there
    mx8 = pair[1] is F.MXFP8 and bm == 16 and pair[0] in triton_moe.mx_e4m3_dot_formats()
    cfg = MoEKernelConfig(KernelConfig(bm, 64, 128, swap_ab=True, split_k=4 if bm == 16 else 1, num_stages=4),
                          KernelConfig(bm, 128 if bm == 16 else 64, 128, swap_ab=True, split_k=2 if bm == 16 else 1,
                                       num_stages=4))
    hidden, W, topk = make_case(c)
    cap = {}
    got = run_triton(hidden, W, topk, c.afmt, config=cfg, capture=cap)
    assert cap["k_tail"] == ((0, 0) if mx8 else (64, 64)), cap["k_tail"]
    ref = run_reference(hidden, W, topk, c.afmt)
    mx, rms = _errors(got, ref)
    bmx, brms = _bounds(c.dtype)
    assert mx <= bmx and rms <= brms, (mx, rms)


@gpu
@pytest.mark.parametrize("T", [1, 8, 128, 512])
@pytest.mark.parametrize("afmt", [F.BF16, F.MXFP8], ids=lambda f: f.name)
def test_gpu_gpt_oss_shapes(T, afmt):
    """gpt-oss-20b MXFP4 experts: H 2880, I 2880 padded to 3072 (SGLang pads to 256), E 32, K 4,
    clamped SwiGLU with biases on both GEMMs (the 120b model differs only in E = 128, which costs
    4x the memory: ~50 GB per test process with the float weights and the reference)."""
    c = Case(F.MXFP4, afmt, A.SWIGLU_OAI, T=T, H=2880, I=2880, align=256, E=32, K=4, bias=True,
             dtype=torch.bfloat16, x_scale=4.0, seed=T + 1)
    check_case(c)


@gpu
@pytest.mark.parametrize("T", [1, 8, 128, 512])
# static scales exist only for NVFP4 activations (the weights' static scales are NVFP4 scales)
@pytest.mark.parametrize("afmt, static", [(F.BF16, False), (F.FP8_TENSOR, False), (F.NVFP4, False), (F.NVFP4, True)],
                         ids=["BF16", "FP8_TENSOR", "NVFP4-dynamic", "NVFP4-static"])
def test_gpu_nemotron_nvfp4_relu2(T, afmt, static):
    """Nemotron-3-Nano-sized NVFP4 ReLU2 (H 2688, I 1856 padded to 1920 by the non-gated 128
    alignment), expert parallel: 128 local experts (offset 128) of 384, top-22."""
    c = Case(F.NVFP4, afmt, A.RELU2, T=T, H=2688, I=1856, E=128, K=22, offset=128, static=static,
             dtype=torch.bfloat16, seed=T + 2)
    check_case(c)


@gpu
@pytest.mark.parametrize("T", [512, 4096])
@pytest.mark.parametrize("pair", [(F.NVFP4, F.BF16), (F.MXFP4, F.MXFP8)], ids=lambda p: f"{p[0].name}x{p[1].name}")
def test_gpu_qwen3_tp8_shard_k96(T, pair):
    """Qwen3-30B TP8 shard (I = 96: GEMM2 runs 32-wide K tiles), at the token counts whose default
    tiles used to abort Triton's compiler (see ``compile_problem``)."""
    c = Case(pair[0], pair[1], A.SWIGLU, T=T, H=2048, I=96, E=128, K=8, dtype=torch.bfloat16, seed=T + 3)
    check_case(c)


@gpu
@pytest.mark.parametrize("pair", _PAIRS, ids=lambda p: f"{p[0].name}x{p[1].name}")
def test_gpu_cuda_graph_and_determinism(pair):
    c = Case(pair[0], pair[1], A.SWIGLU, T=8, H=2048, I=768, E=128, K=8, static=pair == (F.NVFP4, F.NVFP4),
             dtype=torch.bfloat16)
    hidden, W, topk = make_case(c)
    eager = run_triton(hidden, W, topk, c.afmt)
    assert torch.equal(eager, run_triton(hidden, W, topk, c.afmt))
    out = torch.empty_like(eager)
    run_triton(hidden, W, topk, c.afmt, out=out)  # warm-up (compilation) outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run_triton(hidden, W, topk, c.afmt, out=out)
    out.zero_()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)


@gpu
@pytest.mark.parametrize("fast", [False, True], ids=["portable", "fast_cvt"])
@pytest.mark.parametrize("fmt", [F.NVFP4, F.MXFP4, F.MXFP8], ids=lambda f: f.name)
def test_gpu_tile_dequantization_is_bit_exact(fmt, fast):
    """The compiled dequantization, fp32 (portable) and bf16 through the inline-PTX conversions
    (fast_cvt: the nibble-aligned E2M1 converter -- MX values restored by a bf16 multiply that
    must keep the subnormal 0.5 * 2^-126, NVFP4 tiles short of 2^16, which dequantize_tiles
    restores -- and bf16 block-scale products), vs fm.dequantize bit for bit. The bf16 products are
    checked where they are normal numbers (UE8M0 codes 10..240)."""
    g = torch.Generator().manual_seed(0)
    q = _random_operand(fmt, (4, 256, 2880), g, mx_codes=(10, 241) if fast else None)
    tiles = dequantize_tiles(q.to("cuda"), block_rows=32, block_k=64, fast_cvt=fast).cpu()
    ref = dequantize(q)
    got = torch.div(tiles, q.global_scale[:, None, None]) if fmt is F.NVFP4 else tiles
    assert torch.equal(got.view(torch.int32), ref.view(torch.int32))


@gpu
def test_gpu_mx_fold_tiles_are_bit_exact():
    """MXFP4 weights with a known scale-code range in [11, 144] (the MX_FOLD path: no bf16 restore
    multiply, the block scale 2^(e - 17) and 2^16 on the accumulator): the tiles equal
    fm.dequantize bit for bit, the boundary codes 11 and 144 and every E2M1 code (incl. -0) in."""
    from fusedmoe.backends.triton_moe import _mx_fold_cvt

    g = torch.Generator().manual_seed(1)
    q = _random_operand(F.MXFP4, (2, 128, 1024), g, mx_codes=(11, 145))
    q.scale[0, 0, :2] = torch.tensor([11, 144], dtype=torch.uint8)
    q = q.with_scale_code_range()
    assert q.scale_code_range == (11, 144) and _mx_fold_cvt(q, True) == 2
    tiles = dequantize_tiles(q.to("cuda"), block_rows=32, block_k=64, fast_cvt=True).cpu()
    assert torch.equal(tiles.view(torch.int32), dequantize(q).view(torch.int32))


@gpu
@pytest.mark.parametrize("fast", [False, True], ids=["portable", "fast_cvt"])
@pytest.mark.parametrize("fmt", [F.NVFP4, F.MXFP4], ids=lambda f: f.name)
def test_gpu_tiled_value_tiles_are_bit_exact(fmt, fast):
    """FP4 values stored tiled or swizzled (QuantizedTensor.value_layout), compiled: K tiles as wide
    as the tile width and narrower (``_blockscaled._k_base``'s two paths) equal fm.dequantize bit for
    bit -- the swizzled words through the fast converter's own bit moves (``_e2m1_swz_asm``)."""
    g = torch.Generator().manual_seed(3)
    q = _random_operand(fmt, (4, 256, 2816), g, mx_codes=(10, 241) if fast else None)
    ref = dequantize(q)
    for tk, bk in ((128, 128), (128, 64), (128, 32), (64, 64)):
        for swz in (False, True):
            t = q.tiled_values(tk, swizzle=swz).to("cuda")
            tiles = dequantize_tiles(t, block_rows=32, block_k=bk, fast_cvt=fast).cpu()
            got = torch.div(tiles, q.global_scale[:, None, None]) if fmt is F.NVFP4 else tiles
            assert torch.equal(got.view(torch.int32), ref.view(torch.int32)), (tk, bk, swz)


@gpu
@pytest.mark.parametrize("T", [1, 64, 512])
@pytest.mark.parametrize("pair", [p for p in _PAIRS if p[0].is_fp4], ids=lambda p: f"{p[0].name}x{p[1].name}")
def test_gpu_tiled_and_linear_weights_same_bits(pair, T):
    """ExpertWeights store FP4 values swizzled (128-column tiles here, bit-swizzled words); the whole
    MoE gives the same bits from the tiled and the linear layout (same tiles, same MMAs) at decode,
    split-K and prefill tiles (the E4M3 partial-sum path of MX x MXFP8 included)."""
    c = Case(pair[0], pair[1], A.SWIGLU_OAI if pair[0] is F.MXFP4 else A.SWIGLU, T=T, H=2048, I=768, E=64, K=4,
             bias=pair[0] is F.MXFP4, static=pair == (F.NVFP4, F.NVFP4), dtype=torch.bfloat16)
    hidden, W, topk = make_case(c)
    assert W.w13.value_tile_k == W.w2.value_tile_k == 128 and W.w13.value_swizzled and W.w2.value_swizzled
    lin, tiled = _with_values(W, "linear_values"), _with_values(W, "tiled_values")
    assert lin.w13.value_layout == "linear" and tiled.w13.value_layout == "tiled"
    want = run_triton(hidden, lin, topk, c.afmt)
    assert torch.equal(run_triton(hidden, W, topk, c.afmt), want)
    assert torch.equal(run_triton(hidden, tiled, topk, c.afmt), want)


@gpu
@pytest.mark.parametrize("T", [1, 64, 512])
@pytest.mark.parametrize("pair", [(F.MXFP4, F.BF16), (F.MXFP8, F.MXFP8), (F.MXFP4, F.MXFP8)],
                         ids=lambda p: f"{p[0].name}x{p[1].name}")
def test_gpu_padded_scale_rows_same_bits(pair, T):
    """gpt-oss's H = I = 2880 (90 MX scale bytes a row; K tails for 128-wide K steps): the MoE with
    ExpertWeights' scale rows padded to 96 bytes and with the unpadded rows give the same bits
    (the padding only changes the scale loads' alignment)."""
    c = Case(pair[0], pair[1], A.SWIGLU_OAI if pair[0] is F.MXFP4 else A.SWIGLU, T=T, H=2880, I=2880, E=16, K=4,
             bias=pair[0] is F.MXFP4, dtype=torch.bfloat16)
    hidden, W, topk = make_case(c)
    assert W.w13.scale.stride(1) == 96 and W.w2.scale.stride(1) == 96
    Wu = replace(W)
    for name in ("w13", "w2"):
        q = getattr(W, name)
        object.__setattr__(Wu, name, replace(q, scale=q.scale.contiguous()))  # bypass ExpertWeights' padding
    assert Wu.w13.scale.stride(1) == 90
    assert torch.equal(run_triton(hidden, W, topk, c.afmt), run_triton(hidden, Wu, topk, c.afmt))


@gpu
@pytest.mark.parametrize("T", [1, 8, 64])
@pytest.mark.parametrize("afmt", [F.BF16, F.MXFP8], ids=lambda f: f.name)
def test_gpu_scale_runs_same_bits(afmt, T):
    """gpt-oss-120b's MXFP4 layer (H = I = 2880: 64-wide K steps, 2 scale bytes a row) with the shipped configs: the
    weight scales read in 4-byte runs (``triton_moe._scale_run``, the default) and per step give the same bits, and
    the runs are taken (GEMM1's joined 128-row tiles), and the bits do not change from run to run."""
    from fusedmoe.backends import kernel_configs

    c = Case(F.MXFP4, afmt, A.SWIGLU_OAI, T=T, H=2880, I=2880, E=32, K=4, bias=True, dtype=torch.bfloat16)
    hidden, W, topk = make_case(c)
    cfg = kernel_configs.choose_moe_config(T, 2880, W.padded_intermediate_size, 32, 4, F.MXFP4, A.SWIGLU_OAI,
                                           torch.cuda.get_device_name())
    c1 = cfg.gemm1
    assert triton_moe._scale_run(F.MXFP4, W.w13.scale, c1, 2 * c1.block_n, True, False) == 4, c1
    runs = run_triton(hidden, W, topk, afmt)
    assert all(torch.equal(run_triton(hidden, W, topk, afmt), runs) for _ in range(20))  # the same bits run after run
    prev = triton_moe.set_scale_runs(False)
    try:
        steps = run_triton(hidden, W, topk, afmt)
    finally:
        triton_moe.set_scale_runs(prev)
    assert torch.equal(runs, steps)


@gpu
@pytest.mark.parametrize("T", [1, 64])
def test_gpu_mx_fold_layer_is_bit_identical(T):
    """The whole MXFP4 MoE (gpt-oss activation, biases) with the folded conversion and with the
    restore multiply: the same bits (the fold moves an exact factor of 2^16 to the accumulator)."""
    from fusedmoe.backends import triton_moe

    c = Case(F.MXFP4, F.BF16, A.SWIGLU_OAI, T=T, H=2048, I=768, E=64, K=4, bias=True, dtype=torch.bfloat16)
    hidden, W, topk = make_case(c)
    assert W.w13.scale_code_range is not None and triton_moe._mx_fold_cvt(W.w13, True) == 2
    folded = run_triton(hidden, W, topk, c.afmt)
    prev = triton_moe.set_mx_fold(False)
    try:
        restored = run_triton(hidden, W, topk, c.afmt)
    finally:
        triton_moe.set_mx_fold(prev)
    assert torch.equal(folded, restored)


@gpu
@pytest.mark.parametrize("T", [1, 64])
@pytest.mark.parametrize("pair", _PAIRS, ids=lambda p: f"{p[0].name}x{p[1].name}")
def test_gpu_fast_conversions_are_bit_identical(pair, T):
    """The inline-PTX conversions (E2M1 -> bf16 / E4M3) change instructions, not values: the whole
    MoE is bit-identical with them on and off (same tiles, same MMAs)."""
    c = Case(pair[0], pair[1], A.SWIGLU_OAI if pair[0] is F.MXFP4 else A.SWIGLU, T=T, H=2048, I=768, E=64, K=4,
             bias=pair[0] is F.MXFP4, static=pair == (F.NVFP4, F.NVFP4), dtype=torch.bfloat16)
    hidden, W, topk = make_case(c)
    a1, a2 = W.static_scales_for(c.afmt)
    kw = dict(activation=W.activation, act_params=W.act_params, act_format=c.afmt,
              intermediate_size_padded=W.padded_intermediate_size, w13_bias=W.w13_bias, w2_bias=W.w2_bias,
              a1_scale=a1, a2_scale=a2)
    args = (hidden, W.w13, W.w2, topk.ids, topk.weights)
    portable = triton_experts(*args, _fast_cvt=False, **kw)
    assert torch.equal(triton_experts(*args, _fast_cvt=True, **kw), portable)
