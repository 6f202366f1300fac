"""FusedMoE / fused_moe public entry points and the backend registry (CPU: reference backend)."""

import pytest
import torch

import fusedmoe as fm

A, F = fm.Activation, fm.Format


def _layer(act=A.RELU2, fmt=F.BF16, E=16, H=64, I=48, **kw):
    g = torch.Generator().manual_seed(1)
    M = 2 * I if act.is_gated else I
    w = fm.ExpertWeights.from_float(torch.randn(E, M, H, generator=g) / 8, torch.randn(E, H, I, generator=g) / 8,
                                    activation=act, format=fmt)
    routing = kw.pop("routing", fm.RoutingConfig(fm.RoutingMethod.DEEPSEEK_V3, top_k=4, routed_scaling_factor=2.5))
    return fm.FusedMoE(w, routing=routing, activation=act, **kw), g


def test_forward_equals_route_then_reference():
    moe, g = _layer()
    assert moe.backend == "reference" and "reference" in moe.backend_reason
    x = torch.randn(5, 64, generator=g).bfloat16()
    logits = torch.randn(5, 16, generator=g)
    bias = torch.randn(16, generator=g)
    out = moe(x, logits, bias)
    topk = fm.route(logits, moe.routing, bias)
    assert torch.equal(out, fm.reference_moe(x, moe.weights, topk, activation=A.RELU2))
    assert out.dtype == torch.bfloat16 and out.shape == x.shape


def test_forward_routed_packed_equals_unpacked():
    moe, g = _layer(act=A.SWIGLU)
    x = torch.randn(4, 64, generator=g).bfloat16()
    topk = fm.route(torch.randn(4, 16, generator=g), moe.routing, torch.zeros(16))
    packed = fm.pack_topk(topk.ids, topk.weights)
    rounded = fm.TopK(topk.ids, topk.weights.bfloat16().float())  # the packed form carries bf16 weights
    assert torch.equal(moe.forward_routed(x, packed), moe.forward_routed(x, rounded))
    assert torch.equal(fm.fused_moe(x, moe.weights, rounded, activation=A.SWIGLU), moe.forward_routed(x, rounded))


def test_llama4_routing_applies_weight_on_input():
    moe, g = _layer(act=A.SWIGLU, routing=fm.RoutingConfig(fm.RoutingMethod.LLAMA4, top_k=1))
    x = torch.randn(3, 64, generator=g)
    logits = torch.randn(3, 16, generator=g)
    out = moe(x, logits)
    topk = fm.route(logits, moe.routing)
    exp = fm.reference_moe(x, moe.weights, topk, activation=A.SWIGLU, weight_on_input=True)
    assert torch.equal(out, exp)


def test_expert_parallel_layer_sums_to_whole():
    moe, g = _layer(act=A.GELU, routing=fm.RoutingConfig(fm.RoutingMethod.RENORMALIZE, top_k=3))
    x = torch.randn(6, 64, generator=g)
    logits = torch.randn(6, 16, generator=g)
    parts = [fm.FusedMoE(moe.weights.slice_experts(o, 8), routing=moe.routing, activation=A.GELU,
                         num_experts=16, local_expert_offset=o)(x, logits) for o in (0, 8)]
    torch.testing.assert_close(parts[0] + parts[1], moe(x, logits), rtol=1e-5, atol=1e-6)


def test_select_on_cpu_is_reference_and_explicit_triton_is_refused(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    name, reason = fm.backends.select(fm.backends.MoERequest(F.BF16, F.BF16, A.SWIGLU), "cpu")
    assert name == "reference" and "triton" in reason  # says why triton was skipped
    assert set(fm.backends.available()) >= {"reference", "triton"}
    moe, _ = _layer()
    for cfg in (moe, moe.weights, moe.routing):
        assert fm.backends.select(cfg, "cpu")[0] == "reference"
    with pytest.raises(TypeError, match="select"):
        fm.backends.select(42, "cpu")
    with pytest.raises(fm.backends.UnsupportedError, match="CUDA"):
        _layer(backend="triton")
    with pytest.raises(ValueError, match="unknown backend"):
        _layer(backend="nope")


def test_triton_backend_refuses_what_it_lacks():
    triton_backend = fm.backends.get("triton")
    why = triton_backend.supports(fm.backends.MoERequest(F.NVFP4, F.MXFP8, A.SWIGLU), torch.device("cuda"))
    assert why is not None and "MXFP8" in why and "NVFP4" in why
    assert triton_backend.supports(fm.backends.MoERequest(F.BF16, F.BF16, A.SWIGLU), torch.device("cuda")) is None


class TestBadInput:
    def test_constructor_checks(self):
        moe, _ = _layer()
        with pytest.raises(ValueError, match="prepared for"):
            fm.FusedMoE(moe.weights, routing=moe.routing, activation=A.SILU)
        with pytest.raises(TypeError, match="routing"):
            fm.FusedMoE(moe.weights, routing="deepseek", activation=A.RELU2)
        with pytest.raises(ValueError, match="local_expert_offset"):
            fm.FusedMoE(moe.weights, routing=moe.routing, activation=A.RELU2, num_experts=16, local_expert_offset=4)
        with pytest.raises(ValueError, match="top_k"):
            fm.FusedMoE(moe.weights, routing=fm.RoutingConfig(fm.RoutingMethod.RENORMALIZE, top_k=16),
                        activation=A.RELU2)

    def test_call_checks(self):
        moe, g = _layer()
        x = torch.randn(4, 64)
        with pytest.raises(ValueError, match="router_logits has 8 experts"):
            moe(x, torch.randn(4, 8))
        with pytest.raises(ValueError, match="tokens"):
            moe(x, torch.randn(3, 16))
        plain, _ = _layer(routing=fm.RoutingConfig(fm.RoutingMethod.RENORMALIZE, top_k=2))
        with pytest.raises(ValueError, match="takes no bias"):
            plain(x, torch.randn(4, 16), torch.randn(16))
        with pytest.raises(TypeError, match="packed"):
            moe.forward_routed(x, torch.zeros(4, 4, dtype=torch.int64))
        ids = torch.full((4, 4), 16, dtype=torch.int32)
        with pytest.raises(ValueError, match="topk.ids"):
            moe.forward_routed(x, fm.TopK(ids, torch.ones(4, 4)))


def test_eager_calls_skip_the_dispatcher_with_the_same_results():
    """Eager inference runs the ops' implementations directly (no dispatcher); the result is the
    op's, bit for bit. Inputs that need autograd or the fake implementation still go through the
    ops: backward raises the op's error, fake tensors get fake outputs."""
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    from fusedmoe import layer as L

    moe, g = _layer(act=A.SWIGLU)
    x = torch.randn(3, 64, generator=g)
    logits = torch.randn(3, 16, generator=g)
    bias = torch.randn(16, generator=g)
    topk = moe.route(logits, bias)
    assert L._eager_direct((x, logits, bias))
    ids, w = L._route_op(logits, bias, moe._routing_spec)
    assert torch.equal(topk.ids, ids) and torch.equal(topk.weights, w)
    via_op = L._experts_op(x, topk.ids, topk.weights, *L._flatten(moe.weights), moe._experts_spec)
    assert torch.equal(moe(x, logits, bias), via_op)
    assert torch.equal(moe.forward_routed(x, topk), via_op)
    # autograd: the op path and its error, as before
    xg = x.clone().requires_grad_(True)
    assert not L._eager_direct((xg,))
    with torch.no_grad():
        assert L._eager_direct((xg,))
    y = moe(xg, logits, bias)
    assert y.grad_fn is not None
    with pytest.raises(RuntimeError, match="no autograd formula"):
        y.sum().backward()
    # fake tensors: the fake implementations
    with FakeTensorMode(allow_non_fake_inputs=True):
        xf, lf = torch.empty(3, 64), torch.empty(3, 16)
        assert not L._eager_direct((xf,))
        out = moe(xf, lf, bias)
    assert isinstance(out, FakeTensor) and out.shape == (3, 64)
    assert not L._eager_direct((torch.empty(3, 64, device="meta"),))


def test_torch_compile_traces_the_custom_ops():
    moe, g = _layer(act=A.SWIGLU)
    x = torch.randn(3, 64, generator=g)
    logits = torch.randn(3, 16, generator=g)
    bias = torch.randn(16, generator=g)
    eager = moe(x, logits, bias)
    compiled = torch.compile(moe, fullgraph=True, backend="eager")
    assert torch.equal(compiled(x, logits, bias), eager)


@pytest.mark.parametrize("fmt", [F.MXFP4, F.NVFP4], ids=lambda f: f.name)
def test_custom_op_keeps_the_weights_layout_and_code_range(fmt):
    """The experts op rebuilds ExpertWeights from plain tensors: the FP4 values' tiled layout and
    the measured UE8M0 code range (which the tensors do not carry) travel in the op's spec, so the
    op computes what the eager call does."""
    from fusedmoe import layer as L

    moe, g = _layer(act=A.SWIGLU, fmt=fmt, H=128, I=64)
    W = moe.weights
    assert W.w13.value_tile_k == 128 and W.w2.value_tile_k == 64
    assert (W.w13.scale_code_range is not None) == (fmt is F.MXFP4)
    back = L._unflatten(moe._experts_spec, *L._flatten(W))
    for a, b in ((W.w13, back.w13), (W.w2, back.w2)):
        assert (b.value_layout, b.scale_code_range, b.shape) == (a.value_layout, a.scale_code_range, a.shape)
    x = torch.randn(3, 128, generator=g)
    topk = moe.route(torch.randn(3, 16, generator=g))
    via_op = L._experts_op(x, topk.ids, topk.weights, *L._flatten(W), moe._experts_spec)
    assert torch.equal(moe.forward_routed(x, topk), via_op)


def test_mxfp4_weights_with_mxfp8_activations_keep_plain_nibbles(monkeypatch):
    """FusedMoE with MXFP4 weights and MXFP8 activations keeps the swizzled FP4 words given (the default dequantizing
    path runs fastest there); where MXFP4 decode tiles run the E4M3 partial-sum path (``set_mx_e4m3_dot``) it holds
    the FP4 values tiled without the bit swizzle (that path's cheaper E4M3 conversion), the same experts; with BF16
    activations, or FUSEDMOE_FP4_LAYOUT set, they stay as given."""
    from fusedmoe.backends import triton_moe

    monkeypatch.delenv("FUSEDMOE_FP4_LAYOUT", raising=False)
    routing = fm.RoutingConfig(fm.RoutingMethod.RENORMALIZE, top_k=2)
    g = torch.Generator().manual_seed(3)
    w = fm.ExpertWeights.from_float(torch.randn(4, 128, 128, generator=g) / 8, torch.randn(4, 128, 64, generator=g) / 8,
                                    activation=A.SWIGLU, format=F.MXFP4)
    assert w.w13.value_layout == w.w2.value_layout == "swizzled"
    assert F.MXFP4 not in triton_moe.mx_e4m3_dot_formats()
    assert fm.FusedMoE(w, routing=routing, activation=A.SWIGLU, activation_format=F.MXFP8).weights is w
    prev = triton_moe.set_mx_e4m3_dot((F.MXFP4, F.MXFP8))
    try:
        moe = fm.FusedMoE(w, routing=routing, activation=A.SWIGLU, activation_format=F.MXFP8)
    finally:
        triton_moe.set_mx_e4m3_dot(prev)
    assert moe.weights.w13.value_layout == moe.weights.w2.value_layout == "tiled"
    assert torch.equal(fm.dequantize(moe.weights.w13), fm.dequantize(w.w13))
    assert torch.equal(fm.dequantize(moe.weights.w2), fm.dequantize(w.w2))
    x, logits = torch.randn(3, 128, generator=g), torch.randn(3, 4, generator=g)
    want = fm.fused_moe(x, w, fm.route(logits, routing), activation=A.SWIGLU, activation_format=F.MXFP8)
    assert torch.equal(moe(x, logits), want)
    # through the custom op (an input that needs autograd skips the eager shortcut): the op rebuilds the weights
    # from the layer's spec, which must name the layout the layer holds
    with torch.enable_grad():
        assert torch.equal(moe(x.clone().requires_grad_(True), logits).detach(), want)
    assert fm.ExpertWeights.for_activation_format(w, F.BF16) is w and w.for_activation_format(None) is w
    assert fm.FusedMoE(w, routing=routing, activation=A.SWIGLU).weights is w
    monkeypatch.setenv("FUSEDMOE_FP4_LAYOUT", "swizzled")
    prev = triton_moe.set_mx_e4m3_dot((F.MXFP4, F.MXFP8))
    try:
        assert fm.FusedMoE(w, routing=routing, activation=A.SWIGLU, activation_format=F.MXFP8).weights is w
    finally:
        triton_moe.set_mx_e4m3_dot(prev)
