"""The reference MoE against an independent float64 re-statement of the math (per-slot loops,
written here without the library's reference), plus padding, order, EP and bad-input tests."""

import math

import pytest
import torch
import torch.nn.functional as F

import fusedmoe as fm

A = fm.Activation
GATED = [A.SWIGLU, A.GEGLU, A.SWIGLU_OAI]
ALL_ACTS = list(A)


def act64(h, act, I):
    """float64 activation, restated from semantics.md 4.2 (gate = first half)."""
    if act.is_gated:
        g, u = h[:I], h[I:]
        if act is A.SWIGLU:
            return g / (1 + torch.exp(-g)) * u
        if act is A.GEGLU:
            return 0.5 * g * (1 + torch.erf(g / math.sqrt(2))) * u
        gg = torch.minimum(g, torch.tensor(7.0, dtype=g.dtype))
        uu = u.clamp(-7.0, 7.0)
        return gg / (1 + torch.exp(-1.702 * gg)) * (uu + 1.0)
    return {
        A.RELU2: lambda z: torch.where(z > 0, z * z, torch.zeros_like(z)),
        A.GELU: lambda z: 0.5 * z * (1 + torch.erf(z / math.sqrt(2))),
        A.SILU: lambda z: z / (1 + torch.exp(-z)),
        A.RELU: lambda z: torch.where(z > 0, z, torch.zeros_like(z)),
        A.IDENTITY: lambda z: z,
    }[act](h)


def moe64(x, w13, w2, ids, wts, act, *, b13=None, b2=None, offset=0, on_input=False, qdq=None):
    """Per-slot float64 MoE on *unpadded* weights in gate_up order. ``qdq(z_rows)`` optionally
    emulates the intermediate re-quantization (applied to all local rows at once)."""
    T, K = ids.shape
    E, _, H = w13.shape
    I = w2.shape[2]
    x, w13, w2 = x.double(), w13.double(), w2.double()
    slots, zs = [], []
    for t in range(T):
        for k in range(K):
            e = int(ids[t, k]) - offset
            if not 0 <= e < E:
                continue
            h = w13[e] @ x[t]
            if on_input:
                h = h * float(wts[t, k])
            if b13 is not None:
                h = h + b13[e].double()
            slots.append((t, k, e))
            zs.append(act64(h, act, I))
    out = torch.zeros(T, H, dtype=torch.float64)
    if not zs:
        return out
    Z = torch.stack(zs)
    if qdq is not None:
        Z = qdq(Z)
    for (t, k, e), z in zip(slots, Z):
        y = w2[e] @ z
        if b2 is not None:
            y = y + b2[e].double()
        out[t] += y if on_input else float(wts[t, k]) * y
    return out


def rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


def make(E, H, I, act, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    M = 2 * I if act.is_gated else I
    w13 = torch.randn(E, M, H, generator=g) * H ** -0.5 * scale
    w2 = torch.randn(E, H, I, generator=g) * I ** -0.5
    return w13, w2, g


def rand_topk(T, K, E, g, lo=0):
    ids = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(T)]).to(torch.int32) + lo
    w = torch.rand(T, K, generator=g) + 0.1
    return fm.TopK(ids, w)


@pytest.mark.parametrize("act", ALL_ACTS, ids=lambda a: a.name)
def test_bf16_format_matches_float64_restatement(act):
    E, H, I, T, K = 6, 32, 24, 7, 3
    w13, w2, g = make(E, H, I, act, scale=3.0)
    b13 = torch.randn(E, w13.shape[1], generator=g) * 0.5
    b2 = torch.randn(E, H, generator=g) * 0.1
    weights = fm.ExpertWeights.from_float(w13, w2, activation=act, w13_bias=b13, w2_bias=b2, dtype=torch.float32)
    assert weights.padded_intermediate_size == (32 if act.is_gated else 128)
    x = torch.randn(T, H, generator=g)
    topk = rand_topk(T, K, E, g)
    out = fm.reference_moe(x, weights, topk, activation=act)
    exp = moe64(x, w13, w2, topk.ids, topk.weights, act, b13=b13, b2=b2)
    assert out.dtype == torch.float32
    assert rel(out, exp) < 1e-5


def _qdq(fmt, static=None):
    """Quantize-dequantize rows; zero columns pad the last dim to the format's block (what the
    padded intermediate of the layer holds) and are cropped again."""
    def f(z):
        n = z.shape[-1]
        blk = fmt.block_size or 1
        zp = F.pad(z.float(), (0, -n % blk))
        if fmt is fm.Format.FP8_TENSOR:
            q = fm.quantize(zp, fmt, scale=static)
        else:
            q = fm.quantize(zp, fmt)
        return fm.dequantize(q).double()[..., :n]
    return f


def _unpad(weights, I):
    """Dequantized weights back in the unpadded gate_up layout."""
    W13 = fm.dequantize(weights.w13)
    W2 = fm.dequantize(weights.w2)[:, :, :I]
    P = weights.padded_intermediate_size
    if weights.is_gated:
        W13 = torch.cat([W13[:, :I], W13[:, P:P + I]], dim=1)
    else:
        W13 = W13[:, :I]
    return W13, W2


@pytest.mark.parametrize(
    "fmt, act_fmt, act",
    [
        (fm.Format.FP8_TENSOR, fm.Format.FP8_TENSOR, A.SWIGLU),
        (fm.Format.FP8_TENSOR, fm.Format.FP8_TENSOR, A.RELU2),
        (fm.Format.FP8_CHANNEL, fm.Format.FP8_TOKEN, A.GEGLU),
        (fm.Format.FP8_BLOCK, fm.Format.FP8_BLOCK, A.RELU2),
        (fm.Format.FP8_BLOCK, fm.Format.FP8_BLOCK, A.SWIGLU),
        (fm.Format.MXFP8, fm.Format.MXFP8, A.SILU),
        (fm.Format.NVFP4, fm.Format.BF16, A.RELU2),
        (fm.Format.NVFP4, fm.Format.FP8_TENSOR, A.SWIGLU),
        (fm.Format.NVFP4, fm.Format.NVFP4, A.RELU2),
        (fm.Format.MXFP4, fm.Format.BF16, A.SWIGLU_OAI),
        (fm.Format.MXFP4, fm.Format.MXFP8, A.RELU2),
    ],
    ids=lambda v: getattr(v, "name", v),
)
def test_quantized_formats_match_restatement(fmt, act_fmt, act):
    E, H, I, T, K = 4, 128, 96, 5, 2
    w13, w2, g = make(E, H, I, act)
    weights = fm.ExpertWeights.from_float(w13, w2, activation=act, format=fmt)
    W13, W2 = _unpad(weights, I)
    x = torch.randn(T, H, generator=g)
    topk = rand_topk(T, K, E, g)
    out = fm.reference_moe(x, weights, topk, activation=act, activation_format=act_fmt)
    xq = x.double() if act_fmt is fm.Format.BF16 else _qdq(act_fmt)(x)
    exp = moe64(xq, W13, W2, topk.ids, topk.weights, act,
                qdq=None if act_fmt is fm.Format.BF16 else _qdq(act_fmt))
    # identical quantization decisions; only fp32 vs fp64 accumulation differs (a rare
    # last-bit flip of a quantized intermediate stays far below this bound)
    assert rel(out, exp) < 1e-3
    # and the whole format error against the unquantized float64 model stays bounded
    ideal = moe64(x, w13, w2, topk.ids, topk.weights, act)
    # FP4 weights (E2M1, 16/32-element blocks) ~0.1-0.2; 8-bit formats a few 1e-2
    bound = 0.3 if fmt.is_fp4 or act_fmt is fm.Format.NVFP4 else 0.1
    assert rel(out, ideal) < bound


def test_static_fp8_scales_are_used():
    act = A.RELU2
    E, H, I, T, K = 4, 64, 128, 6, 2
    w13, w2, g = make(E, H, I, act)
    x = torch.randn(T, H, generator=g)
    topk = rand_topk(T, K, E, g)
    a1, a2 = 4.0 / 448, 0.5 / 448
    weights = fm.ExpertWeights.from_float(w13, w2, activation=act, format=fm.Format.FP8_TENSOR,
                                          input_scale=a1, intermediate_scale=a2)
    out = fm.reference_moe(x, weights, topk, activation=act)
    W13, W2 = _unpad(weights, I)
    xq = _qdq(fm.Format.FP8_TENSOR, torch.tensor(a1))(x)
    exp = moe64(xq, W13, W2, topk.ids, topk.weights, act, qdq=_qdq(fm.Format.FP8_TENSOR, torch.tensor(a2)))
    assert rel(out, exp) < 1e-3
    dyn = fm.reference_moe(x, fm.ExpertWeights.from_float(w13, w2, activation=act, format=fm.Format.FP8_TENSOR),
                           topk, activation=act)
    assert not torch.equal(out, dyn)  # the static scales changed the quantization


@pytest.mark.parametrize("act", [A.SWIGLU, A.RELU2], ids=lambda a: a.name)
@pytest.mark.parametrize("I", [1856, 232, 336, 192])
def test_padding_does_not_change_the_output(act, I):
    E, H, T, K = 4, 16, 5, 2
    w13, w2, g = make(E, H, I, act)
    x = torch.randn(T, H, generator=g)
    topk = rand_topk(T, K, E, g)
    outs = []
    for align in (1, 16, 128, 256):
        w = fm.ExpertWeights.from_float(w13, w2, activation=act, alignment=align, dtype=torch.float32)
        assert w.padded_intermediate_size % align == 0 and w.intermediate_size == I
        outs.append(fm.reference_moe(x, w, topk, activation=act))
    for o in outs[1:]:
        assert rel(o, outs[0]) < 1e-6


@pytest.mark.parametrize("I", [232, 192])
def test_padding_quantized_fp8_block(I):
    act = A.SWIGLU
    E, H, T, K = 4, 128, 5, 2
    w13, w2, g = make(E, H, I, act)
    x = torch.randn(T, H, generator=g)
    topk = rand_topk(T, K, E, g)
    o1 = fm.reference_moe(x, fm.ExpertWeights.from_float(w13, w2, activation=act, format=fm.Format.FP8_BLOCK,
                                                         alignment=128), topk, activation=act)
    o2 = fm.reference_moe(x, fm.ExpertWeights.from_float(w13, w2, activation=act, format=fm.Format.FP8_BLOCK,
                                                         alignment=512), topk, activation=act)
    assert rel(o1, o2) < 1e-5


def test_gate_up_orders_agree():
    act = A.SWIGLU
    E, H, I, T, K = 4, 32, 40, 5, 2
    w13, w2, g = make(E, H, I, act)
    up_gate = torch.cat([w13[:, I:], w13[:, :I]], dim=1)
    x = torch.randn(T, H, generator=g)
    topk = rand_topk(T, K, E, g)
    a = fm.reference_moe(x, fm.ExpertWeights.from_float(w13, w2, activation=act, dtype=torch.float32), topk, activation=act)
    b = fm.reference_moe(x, fm.ExpertWeights.from_float(up_gate, w2, activation=act, w13_order="up_gate",
                                                        dtype=torch.float32), topk, activation=act)
    assert torch.equal(a, b)
    exp = moe64(x, w13, w2, topk.ids, topk.weights, act)
    assert rel(a, exp) < 1e-5


def test_expert_parallel_shards_sum_to_the_whole():
    act = A.GEGLU
    E, H, I, T, K = 8, 32, 16, 9, 3
    w13, w2, g = make(E, H, I, act)
    full = fm.ExpertWeights.from_float(w13, w2, activation=act, dtype=torch.float32)
    x = torch.randn(T, H, generator=g)
    topk = rand_topk(T, K, E, g)
    whole = fm.reference_moe(x, full, topk, activation=act)
    parts = [fm.reference_moe(x, full.slice_experts(o, 4), topk, activation=act, local_expert_offset=o, num_experts=E)
             for o in (0, 4)]
    assert rel(parts[0] + parts[1], whole) < 1e-6
    exp = moe64(x, w13[4:], w2[4:], topk.ids, topk.weights, act, offset=4)
    assert rel(parts[1], exp) < 1e-5


def test_weight_on_input_llama4():
    act = A.SWIGLU
    E, H, I, T = 4, 32, 16, 6
    w13, w2, g = make(E, H, I, act)
    b13 = torch.randn(E, 2 * I, generator=g)
    weights = fm.ExpertWeights.from_float(w13, w2, activation=act, w13_bias=b13, dtype=torch.float32)
    x = torch.randn(T, H, generator=g)
    topk = rand_topk(T, 1, E, g)
    out = fm.reference_moe(x, weights, topk, activation=act, weight_on_input=True)
    exp = moe64(x, w13, w2, topk.ids, topk.weights, act, b13=b13, on_input=True)
    assert rel(out, exp) < 1e-5
    assert rel(out, fm.reference_moe(x, weights, topk, activation=act)) > 1e-2  # not the same as on output


def test_bf16_hidden_gives_bf16_output_within_bound():
    act = A.RELU2
    E, H, I, T, K = 4, 64, 128, 8, 2
    w13, w2, g = make(E, H, I, act)
    weights = fm.ExpertWeights.from_float(w13, w2, activation=act)
    assert weights.w13.data.dtype == torch.bfloat16
    x = torch.randn(T, H, generator=g).bfloat16()
    topk = rand_topk(T, K, E, g)
    out = fm.reference_moe(x, weights, topk, activation=act)
    assert out.dtype == torch.bfloat16
    assert rel(out, moe64(x, w13, w2, topk.ids, topk.weights, act)) < 2e-2


def test_zero_tokens_and_no_local_expert():
    act = A.SILU
    w13, w2, g = make(4, 16, 8, act)
    weights = fm.ExpertWeights.from_float(w13, w2, activation=act, dtype=torch.float32)
    empty = fm.TopK(torch.zeros(0, 2, dtype=torch.int32), torch.zeros(0, 2))
    assert fm.reference_moe(torch.zeros(0, 16), weights, empty, activation=act).shape == (0, 16)
    x = torch.randn(3, 16, generator=g)
    far = fm.TopK(torch.full((3, 2), 7, dtype=torch.int32), torch.ones(3, 2))
    out = fm.reference_moe(x, weights, far, activation=act, local_expert_offset=0, num_experts=8)
    assert torch.equal(out, torch.zeros_like(out))


class TestBadInput:
    def setup_method(self):
        self.act = A.SWIGLU
        w13, w2, g = make(4, 16, 8, self.act)
        self.w = fm.ExpertWeights.from_float(w13, w2, activation=self.act)
        self.x = torch.randn(3, 16, generator=g).bfloat16()
        self.topk = rand_topk(3, 2, 4, g)

    def run(self, **kw):
        args = dict(hidden=self.x, weights=self.w, topk=self.topk, activation=self.act)
        args.update(kw)
        return fm.reference_moe(args.pop("hidden"), args.pop("weights"), args.pop("topk"), **args)

    def test_wrong_hidden_size(self):
        with pytest.raises(ValueError, match="H=8"):
            self.run(hidden=self.x[:, :8])

    def test_wrong_hidden_dtype(self):
        with pytest.raises(TypeError, match="hidden"):
            self.run(hidden=self.x.to(torch.int32))

    def test_hidden_not_2d(self):
        with pytest.raises(ValueError, match=r"\[T, H\]"):
            self.run(hidden=self.x[None])

    def test_ids_out_of_range(self):
        bad = fm.TopK(self.topk.ids.clone(), self.topk.weights)
        bad.ids[0, 0] = 4
        with pytest.raises(ValueError, match=r"topk.ids must be in \[0, 4\)"):
            self.run(topk=bad)

    def test_token_count_mismatch(self):
        with pytest.raises(ValueError, match="tokens"):
            self.run(topk=fm.TopK(self.topk.ids[:2], self.topk.weights[:2]))

    def test_activation_mismatch(self):
        with pytest.raises(ValueError, match="prepared for"):
            self.run(activation=A.GEGLU)

    def test_activation_format_not_allowed(self):
        with pytest.raises(ValueError, match="activation_format"):
            self.run(activation_format=fm.Format.FP8_TENSOR)

    def test_weight_on_input_needs_top1(self):
        with pytest.raises(ValueError, match="top_k == 1"):
            self.run(weight_on_input=True)

    def test_bad_offset(self):
        with pytest.raises(ValueError, match="local_expert_offset"):
            self.run(local_expert_offset=1)


def test_nvfp4_static_scales_apply_to_nvfp4_activations_only():
    act = A.RELU2
    E, H, I, T, K = 4, 64, 128, 5, 2
    w13, w2, g = make(E, H, I, act)
    x = torch.randn(T, H, generator=g)
    topk = rand_topk(T, K, E, g)
    kw = dict(activation=act, format=fm.Format.NVFP4)
    static = fm.ExpertWeights.from_float(w13, w2, input_scale=8.0 / 2688, intermediate_scale=2.0 / 2688, **kw)
    dynamic = fm.ExpertWeights.from_float(w13, w2, **kw)
    nv = fm.Format.NVFP4
    assert not torch.equal(fm.reference_moe(x, static, topk, activation=act, activation_format=nv),
                           fm.reference_moe(x, dynamic, topk, activation=act, activation_format=nv))
    # W4A8: the NVFP4 activation scales do not describe FP8 activations -> dynamic FP8 scales
    f8 = fm.Format.FP8_TENSOR
    assert torch.equal(fm.reference_moe(x, static, topk, activation=act, activation_format=f8),
                       fm.reference_moe(x, dynamic, topk, activation=act, activation_format=f8))
