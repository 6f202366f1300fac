"""The public entry points (FusedMoE, fused_moe, the custom ops) driving the triton backend.

On CPU machines the kernels run in Triton's interpreter (tests/conftest.py) at tiny shapes with
fp16 hidden states (the interpreter's bf16 dot is wrong); on a GPU the same tests run compiled
at the same shapes in bf16 (marker-free: they exercise glue, not speed).
"""

import pytest
import torch

import fusedmoe as fm

A, F = fm.Activation, fm.Format
DEV = "cuda" if torch.cuda.is_available() else "cpu"
DTYPE = torch.bfloat16 if DEV == "cuda" else torch.float16


def rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


def _moe(act, fmt, routing, E=8, H=128, I=128, **kw):
    g = torch.Generator().manual_seed(3)
    M = 2 * I if act.is_gated else I
    w13 = torch.randn(E, M, H, generator=g) * H ** -0.5
    w2 = torch.randn(E, H, I, generator=g) * I ** -0.5
    dtype = {"dtype": DTYPE} if fmt is F.BF16 else {}
    w = fm.ExpertWeights.from_float(w13, w2, activation=act, format=fmt, **dtype, **kw).to(DEV)
    return fm.FusedMoE(w, routing=routing, activation=act, backend="triton"), g


CASES = [
    (A.RELU2, F.BF16, fm.RoutingConfig(fm.RoutingMethod.DEEPSEEK_V3, top_k=2, routed_scaling_factor=2.5)),
    (A.SWIGLU, F.FP8_TENSOR, fm.RoutingConfig(fm.RoutingMethod.RENORMALIZE, top_k=2)),
    (A.GEGLU, F.FP8_BLOCK, fm.RoutingConfig(fm.RoutingMethod.DEEPSEEK_V3, top_k=2, n_group=4, topk_group=2)),
    (A.SILU, F.FP8_CHANNEL, fm.RoutingConfig(fm.RoutingMethod.SIGMOID, top_k=2)),
]
BOUND = {F.BF16: 1e-2, F.FP8_TENSOR: 3e-2, F.FP8_BLOCK: 3e-2, F.FP8_CHANNEL: 3e-2}


@pytest.mark.parametrize("act, fmt, routing", CASES, ids=lambda v: getattr(v, "name", None))
def test_fused_moe_layer_matches_reference(act, fmt, routing):
    moe, g = _moe(act, fmt, routing)
    assert moe.backend == "triton"
    T = 5
    x = torch.randn(T, 128, generator=g).to(DEV, DTYPE)
    logits = torch.randn(T, 8, generator=g).to(DEV)
    bias = torch.randn(8, generator=g).to(DEV) if routing.uses_bias else None
    out = moe(x, logits, bias)
    topk = fm.route(logits, routing, bias)
    ref = fm.reference_moe(x, moe.weights, topk, activation=act)
    assert out.dtype == DTYPE and out.shape == x.shape and torch.isfinite(out).all()
    assert rel(out, ref) < BOUND[fmt]
    # routed mode (packed) through the same kernels: weights are the bf16-rounded ones
    packed = fm.pack_topk(topk.ids, topk.weights)
    out_p = moe.forward_routed(x, packed)
    ref_p = fm.reference_moe(x, moe.weights, fm.unpack_topk(packed), activation=act)
    assert rel(out_p, ref_p) < BOUND[fmt]


def test_expert_parallel_and_static_scales_through_the_layer():
    act = A.RELU2
    routing = fm.RoutingConfig(fm.RoutingMethod.RENORMALIZE, top_k=2)
    full, g = _moe(act, F.FP8_TENSOR, routing, input_scale=3.0 / 448, intermediate_scale=0.5 / 448)
    x = torch.randn(6, 128, generator=g).to(DEV, DTYPE)
    logits = torch.randn(6, 8, generator=g).to(DEV)
    parts = []
    for off in (0, 4):
        w = full.weights.slice_experts(off, 4)
        layer = fm.FusedMoE(w, routing=routing, activation=act, backend="triton", num_experts=8, local_expert_offset=off)
        out = layer(x, logits)
        ref = fm.reference_moe(x, w, fm.route(logits, routing), activation=act, num_experts=8, local_expert_offset=off)
        assert rel(out, ref) < 3e-2
        parts.append(out.float())
    assert rel(parts[0] + parts[1], full(x, logits)) < 2e-2


def test_llama4_weight_on_input_through_the_layer():
    act = A.SWIGLU
    routing = fm.RoutingConfig(fm.RoutingMethod.LLAMA4, top_k=1)
    moe, g = _moe(act, F.BF16, routing)
    x = torch.randn(4, 128, generator=g).to(DEV, DTYPE)
    logits = torch.randn(4, 8, generator=g).to(DEV)
    out = moe(x, logits)
    ref = fm.reference_moe(x, moe.weights, fm.route(logits, routing), activation=act, weight_on_input=True)
    assert rel(out, ref) < 1e-2


def test_zero_tokens():
    moe, g = _moe(A.SWIGLU, F.BF16, fm.RoutingConfig(fm.RoutingMethod.RENORMALIZE, top_k=2))
    out = moe(torch.zeros(0, 128, device=DEV, dtype=DTYPE), torch.zeros(0, 8, device=DEV))
    assert out.shape == (0, 128)


def test_mxfp4_x_mxfp8_layer_runs_plain_nibbles_through_the_op():
    """FusedMoE with MXFP4 weights and MXFP8 activations keeps the swizzled words it was given (decode tiles
    dequantize, the default) or, where MXFP4 decode tiles run the E4M3 partial-sum path (``set_mx_e4m3_dot``), holds
    plain-nibble FP4 values (``ExpertWeights.for_activation_format``) -- and either way computes the same bits as
    fused_moe on the swizzled weights, eagerly and through the custom op under torch.compile (which rebuilds the
    weights from the layer's spec)."""
    from fusedmoe.backends import triton_moe

    routing = fm.RoutingConfig(fm.RoutingMethod.RENORMALIZE, top_k=2)
    moe, g = _moe(A.SWIGLU, F.MXFP4, routing, E=4, I=64)
    given = moe.weights
    assert given.w13.value_layout == "swizzled"
    x = torch.randn(5, 128, generator=g).to(DEV, DTYPE)
    logits = torch.randn(5, 4, generator=g).to(DEV)
    for e4m3, layout in (((F.MXFP8,), "swizzled"), ((F.MXFP4, F.MXFP8), "tiled")):
        prev = triton_moe.set_mx_e4m3_dot(e4m3)
        try:
            moe = fm.FusedMoE(given, routing=routing, activation=A.SWIGLU, backend="triton", activation_format=F.MXFP8)
            assert moe.weights.w13.value_layout == moe.weights.w2.value_layout == layout
            assert (moe.weights is given) == (layout == "swizzled")
            want = fm.fused_moe(x, given, fm.route(logits, routing), activation=A.SWIGLU, backend="triton",
                                activation_format=F.MXFP8)
            assert torch.equal(moe(x, logits), want)
            compiled = torch.compile(moe, fullgraph=True, backend="eager")
            assert torch.equal(compiled(x, logits), want)
        finally:
            triton_moe.set_mx_e4m3_dot(prev)
            torch._dynamo.reset()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the H200: pytest -m gpu)")
@pytest.mark.parametrize("T", [1, 8, 64])
def test_gpu_mxfp4_x_mxfp8_layer_cuda_graph(T):
    """fm.FusedMoE with MXFP4 weights (gpt-oss-120b's expert shape, clamped SwiGLU with biases) and MXFP8 activations,
    routing from logits, captured whole in a CUDA graph: a replay on new inputs gives the eager layer's bits on them
    (routing, MXFP8 quantization of hidden, both GEMMs and the combine all inside the graph), within the reference
    bound."""
    # drawn and quantized on the GPU (2 GB of float weights: as tests/test_triton_fp4.py's make_case)
    g = torch.Generator(device="cuda").manual_seed(11)

    def rn(*shape):
        return torch.randn(*shape, generator=g, device="cuda")

    E, H, I = 32, 2880, 2880
    act = A.SWIGLU_OAI
    w = fm.ExpertWeights.from_float(rn(E, 2 * I, H) * H ** -0.5, rn(E, H, I) * I ** -0.5, activation=act,
                                    format=F.MXFP4, w13_bias=rn(E, 2 * I) * 0.1, w2_bias=rn(E, H) * 0.1)
    routing = fm.RoutingConfig(fm.RoutingMethod.RENORMALIZE, top_k=4)
    moe = fm.FusedMoE(w, routing=routing, activation=act, backend="triton", activation_format=F.MXFP8)
    xs = [rn(T, H).to(torch.bfloat16) for _ in range(2)]
    ls = [rn(T, E) for _ in range(2)]
    x, logits = xs[0].clone(), ls[0].clone()
    moe(x, logits)  # compile / warm up outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = moe(x, logits)
    x.copy_(xs[1])
    logits.copy_(ls[1])
    graph.replay()
    torch.cuda.synchronize()
    eager = moe(xs[1], ls[1])
    assert torch.equal(out, eager)
    ref = fm.reference_moe(xs[1], moe.weights, fm.route(ls[1], routing), activation=act,
                           activation_format=F.MXFP8)
    assert rel(out, ref) < 3e-2
