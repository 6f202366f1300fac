"""Routing reference (CPU): hand-computed cases per method, tie-breaks, DeepSeek-V3 groups,
validation, the packed routed format, and an independent float64 re-statement of every method
(``docs/semantics.md`` section 2) compared on hypothesis-generated logits."""

import math
import os

import torch

if not torch.cuda.is_available():
    # test_routing_kernel.py runs the kernel in Triton's interpreter, which must be switched on
    # before the first import of triton (importing fusedmoe imports it)
    os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import HealthCheck, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fusedmoe.config import RoutingConfig, RoutingMethod, TopK  # noqa: E402
from fusedmoe.routing import _use_triton, pack_topk, route, route_reference, triton_routing, unpack_topk  # noqa: E402

M = RoutingMethod


def sig(x):
    return 1.0 / (1.0 + math.exp(-x))


def _route(logits, cfg, bias=None, dtype=torch.float32):
    lg = torch.tensor(logits, dtype=torch.float32).to(dtype)
    if lg.dim() == 1:
        lg = lg[None]
    b = None if bias is None else torch.tensor(bias, dtype=torch.float32)
    return route(lg, cfg, b)


def _check(res, ids, weights, rtol=1e-6):
    assert res.ids.dtype == torch.int32 and res.weights.dtype == torch.float32
    assert res.ids[0].tolist() == ids
    np.testing.assert_allclose(res.weights[0].numpy(), np.array(weights), rtol=rtol, atol=0)


L8 = [1.0, 2.0, 3.0, 4.0, 0.0, 0.0, 0.5, -1.0]  # order: 3, 2, 1, 6, 4, 5, 0(=1.0 -> before 6) ...


# --- hand-computed cases, one per method ----------------------------------------------------------


def test_default_softmax_over_all_experts_no_renorm():
    z = sum(math.exp(x) for x in L8)
    _check(_route(L8, RoutingConfig(M.DEFAULT, top_k=2)), [3, 2], [math.exp(4) / z, math.exp(3) / z])


def test_renormalize_softmax_over_selected():
    z = math.exp(4) + math.exp(3) + math.exp(2)
    _check(
        _route(L8, RoutingConfig(M.RENORMALIZE, top_k=3)),
        [3, 2, 1],
        [math.exp(4) / z, math.exp(3) / z, math.exp(2) / z],
    )


def test_renormalize_naive_equals_renormalize():
    z = math.exp(4) + math.exp(3)
    _check(_route(L8, RoutingConfig(M.RENORMALIZE_NAIVE, top_k=2)), [3, 2], [math.exp(4) / z, math.exp(3) / z])


def test_topk_raw_logits():
    _check(_route(L8, RoutingConfig(M.TOPK, top_k=3)), [3, 2, 1], [4.0, 3.0, 2.0])


def test_topk_negative_logits_kept_raw():
    logits = [-5.0, -1.0, -3.0, -2.0]
    _check(_route(logits, RoutingConfig(M.TOPK, top_k=2)), [1, 3], [-1.0, -2.0])


@pytest.mark.parametrize("method", [M.SIGMOID, M.TOPK_SIGMOID])
def test_sigmoid_weights(method):
    _check(_route(L8, RoutingConfig(method, top_k=2)), [3, 2], [sig(4), sig(3)])


def test_llama4_top1_sigmoid():
    _check(_route(L8, RoutingConfig(M.LLAMA4, top_k=1)), [3], [sig(4)])


@pytest.mark.parametrize("renorm", [True, False])
def test_sigmoid_renorm(renorm):
    s = [sig(4), sig(3), sig(2)]
    want = [x / (sum(s) + 1e-20) for x in s] if renorm else s
    _check(_route(L8, RoutingConfig(M.SIGMOID_RENORM, top_k=3, renormalize=renorm)), [3, 2, 1], want)


def test_minimax2_bias_selects_weights_from_logits_scaled():
    bias = [0.0] * 8
    bias[7] = 2.0  # sigmoid(-1) + 2 = 2.27 beats sigmoid(4) = 0.98
    cfg = RoutingConfig(M.MINIMAX2, top_k=2, routed_scaling_factor=3.0)
    s = [sig(-1.0), sig(4.0)]
    _check(_route(L8, cfg, bias), [7, 3], [3.0 * x / (sum(s) + 1e-20) for x in s])


def test_minimax2_without_bias_uses_zeros():
    s = [sig(4.0), sig(3.0)]
    _check(_route(L8, RoutingConfig(M.MINIMAX2, top_k=2)), [3, 2], [x / sum(s) for x in s])


@pytest.mark.parametrize("renorm", [True, False])
def test_deepseek_ungrouped_renorm_and_scaling(renorm):
    bias = [0.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0, 0.0]  # expert 3 loses to 2, 1 and 6
    cfg = RoutingConfig(M.DEEPSEEK_V3, top_k=3, routed_scaling_factor=2.5, renormalize=renorm)
    s = [sig(3.0), sig(2.0), sig(1.0)]
    want = [2.5 * x / (sum(s) + 1e-20) for x in s] if renorm else [2.5 * x for x in s]
    # keys: 2 -> sig(3), 1 -> sig(2), 0 -> sig(1), 6 -> sig(.5), 3 -> sig(4) - 1 = -0.018
    _check(_route(L8, cfg, bias), [2, 1, 0], want)


def test_deepseek_grouped_hand_case():
    # E=16, 4 groups of 4, keep 2 groups, top-3. Keys = sigmoid(logits) (no bias).
    logits = [
        5.0, -5.0, -5.0, -5.0,   # group 0: one strong expert, top-2 sum = s(5) + s(-5) = 1.0
        1.0, 1.0, -5.0, -5.0,    # group 1: top-2 sum = 2 s(1) = 1.46
        0.5, 0.5, 0.5, -5.0,     # group 2: top-2 sum = 2 s(.5) = 1.245
        -1.0, -1.0, -1.0, -1.0,  # group 3: 2 s(-1) = 0.54
    ]
    cfg = RoutingConfig(M.DEEPSEEK_V3, top_k=3, n_group=4, topk_group=2)
    # groups 1 and 2 are kept; expert 0 (the best single expert) is in a dropped group
    s = [sig(1.0), sig(1.0), sig(0.5)]
    _check(_route(logits, cfg), [4, 5, 8], [x / sum(s) for x in s])


# --- tie-breaks -------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", [m for m in M if m is not M.LLAMA4])
def test_equal_logits_pick_lower_indices(method):
    cfg = RoutingConfig(method, top_k=3)
    res = _route([0.25] * 8, cfg)
    assert res.ids[0].tolist() == [0, 1, 2]
    res = _route([0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0], cfg)
    assert res.ids[0].tolist() == [1, 3, 5]


def test_llama4_tie_picks_lower_index():
    assert _route([0.0, 2.0, 1.0, 2.0], RoutingConfig(M.LLAMA4, top_k=1)).ids[0].tolist() == [1]


def test_ties_of_biased_keys_pick_lower_index():
    # sigmoid(0) + 0.25 == sigmoid(0) + 0.25 for experts 2 and 5; exact in fp32
    bias = [0.0, 0.0, 0.25, 0.0, 0.0, 0.25, 0.0, 0.0]
    for method in (M.MINIMAX2, M.DEEPSEEK_V3):
        res = _route([0.0] * 8, RoutingConfig(method, top_k=3), bias)
        assert res.ids[0].tolist() == [2, 5, 0]


def test_deepseek_group_ties_keep_lower_group():
    # four groups of 4 with identical scores: the lower groups are kept
    logits = [0.0, 1.0, 2.0, 3.0] * 4
    cfg = RoutingConfig(M.DEEPSEEK_V3, top_k=4, n_group=4, topk_group=2)
    res = _route(logits, cfg)
    assert res.ids[0].tolist() == [3, 7, 2, 6]
    # group 3 strictly better, groups 0..2 tied: group 3 and group 0 kept
    logits2 = logits[:12] + [0.0, 1.0, 2.0, 3.5]
    assert _route(logits2, cfg).ids[0].tolist() == [15, 3, 2, 14]  # 2 and 14 tie on logit 2


def test_deepseek_group_score_is_sum_of_top2_not_max():
    # group 0 has the single best expert but a weak second; group 1 wins on the top-2 sum
    logits = [4.0, -4.0, -4.0, -4.0, 1.0, 1.0, -4.0, -4.0]
    res = _route(logits, RoutingConfig(M.DEEPSEEK_V3, top_k=2, n_group=2, topk_group=1))
    assert res.ids[0].tolist() == [4, 5]


# --- DeepSeek-V3 pitfalls ---------------------------------------------------------------------------


def test_weights_use_sigmoid_of_logits_not_biased_minus_bias():
    # bias ~ 12 (GLM-5.2): (sigmoid + 12) - 12 keeps ~3 significant digits of sigmoid(-8) in fp32
    E = 8
    logits = [-8.0, -7.5, -9.0, -6.0, -10.0, -8.5, -7.0, -11.0]
    bias = [12.0, 12.0, 12.0, 11.0, 12.0, 12.0, 11.5, 12.0]
    cfg = RoutingConfig(M.DEEPSEEK_V3, top_k=2, renormalize=False, num_experts=E)
    res = _route(logits, cfg, bias)
    assert res.ids[0].tolist() == [1, 0]  # keys: 12 + s(-7.5) > 12 + s(-8) > ... > 11.5 + s(-7)
    np.testing.assert_allclose(res.weights[0].numpy(), [sig(-7.5), sig(-8.0)], rtol=1e-6)
    # the cancelling formula would be off by far more than that
    key = torch.sigmoid(torch.tensor(-8.0)) + torch.tensor(12.0)
    assert abs((key - 12.0).item() - sig(-8.0)) / sig(-8.0) > 1e-3


def test_dropped_groups_masked_with_minus_inf():
    # all biased scores negative; multiplying dropped groups by 0 would select them instead
    logits = [0.0] * 16
    bias = [-1.0, -1.1, -1.2, -1.3] + [-1.25] * 12
    cfg = RoutingConfig(M.DEEPSEEK_V3, top_k=2, n_group=4, topk_group=1)
    res = _route(logits, cfg, bias)
    assert res.ids[0].tolist() == [0, 1]
    np.testing.assert_allclose(res.weights[0].numpy(), [0.5, 0.5], rtol=1e-6)


def test_dropped_group_experts_never_selected_even_against_minus_inf():
    # kept group 0 holds -inf logits (sigmoid 0, key = bias = -inf): they are still preferred to
    # experts of dropped groups, whose keys are finite but masked
    inf = float("inf")
    logits = [3.0, 3.0, -inf, -inf] + [-2.0] * 4 + [-3.0] * 4 + [-4.0] * 4
    cfg = RoutingConfig(M.DEEPSEEK_V3, top_k=3, n_group=4, topk_group=1)
    res = _route(logits, cfg)
    assert res.ids[0].tolist() == [0, 1, 2]
    np.testing.assert_allclose(res.weights[0].numpy(), [0.5, 0.5, 0.0], rtol=1e-6)


# --- NaN policy and non-finite logits -----------------------------------------------------------------


@pytest.mark.parametrize("method", list(M))
def test_nan_logits_count_as_minus_inf(method):
    K = 1 if method is M.LLAMA4 else 2
    cfg = RoutingConfig(method, top_k=K)
    nan = float("nan")
    logits = torch.tensor([[nan, 1.0, nan, 2.0, 0.5, nan, 0.0, -1.0]])
    same = logits.nan_to_num(nan=float("-inf"), posinf=float("inf"), neginf=float("-inf"))
    a, b = route(logits, cfg), route(same, cfg)
    assert torch.equal(a.ids, b.ids)
    torch.testing.assert_close(a.weights, b.weights, rtol=0, atol=0)
    assert a.ids[0].tolist() == [3, 1][:K]
    assert not torch.isnan(a.weights).any()


def test_nan_row_selects_lowest_indices():
    cfg = RoutingConfig(M.SIGMOID, top_k=2)
    res = route(torch.full((1, 8), float("nan")), cfg)
    assert res.ids[0].tolist() == [0, 1]
    assert res.weights[0].tolist() == [0.0, 0.0]


def test_nan_bias_counts_as_minus_inf_for_selection():
    bias = torch.zeros(8)
    bias[0] = float("nan")
    res = route(torch.zeros(1, 8), RoutingConfig(M.MINIMAX2, top_k=2), bias)
    assert res.ids[0].tolist() == [1, 2]
    torch.testing.assert_close(res.weights[0], torch.tensor([0.5, 0.5]))


def test_plus_inf_logit_gives_nan_softmax_weights_like_torch():
    logits = torch.tensor([[0.0, float("inf"), 1.0, 2.0]])
    res = route(logits, RoutingConfig(M.DEFAULT, top_k=2))
    assert res.ids[0].tolist() == [1, 3]
    assert torch.isnan(res.weights).all() and torch.isnan(torch.softmax(logits, -1)).all()
    res = route(logits, RoutingConfig(M.TOPK, top_k=2))
    assert res.weights[0].tolist() == [float("inf"), 2.0]


# --- dtypes, shapes, layouts, dispatch -----------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("method", [M.RENORMALIZE, M.DEEPSEEK_V3])
def test_half_logits_are_routed_in_fp32(dtype, method):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 32, generator=g).to(dtype)
    cfg = RoutingConfig(method, top_k=4)
    bias = torch.randn(32, generator=g).to(torch.bfloat16) if cfg.uses_bias else None
    a = route(logits, cfg, bias)
    b = route(logits.float(), cfg, None if bias is None else bias.float())
    assert torch.equal(a.ids, b.ids)
    torch.testing.assert_close(a.weights, b.weights, rtol=0, atol=0)


def test_non_contiguous_logits():
    g = torch.Generator().manual_seed(1)
    base = torch.randn(16, 5, generator=g)
    cfg = RoutingConfig(M.RENORMALIZE_NAIVE, top_k=3)
    a, b = route(base.t(), cfg), route(base.t().contiguous(), cfg)
    assert torch.equal(a.ids, b.ids)
    torch.testing.assert_close(a.weights, b.weights, rtol=1e-6, atol=0)  # torch's sum order may differ


def test_zero_tokens():
    cfg = RoutingConfig(M.DEEPSEEK_V3, top_k=8, n_group=8, topk_group=4)
    res = route(torch.empty(0, 256), cfg, torch.zeros(256))
    assert res.ids.shape == (0, 8) and res.ids.dtype == torch.int32
    assert res.weights.shape == (0, 8) and res.weights.dtype == torch.float32


def test_result_is_topk_and_validates():
    res = route(torch.randn(3, 8), RoutingConfig(M.TOPK, top_k=2))
    assert isinstance(res, TopK)
    res.validate(num_experts=8)


def test_auto_dispatch_uses_reference_on_cpu(monkeypatch):
    x = torch.randn(2, 8)
    assert _use_triton(x) is False

    def boom(*args, **kwargs):
        raise AssertionError("the Triton launcher must not run for CPU tensors under impl='auto'")

    monkeypatch.setattr(triton_routing, "route_triton", boom)
    route(x, RoutingConfig(M.TOPK, top_k=2))


def test_triton_on_cpu_without_interpreter_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(triton_routing, "triton_can_run", lambda device: False)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
        route(torch.randn(2, 8), RoutingConfig(M.TOPK, top_k=2), impl="triton")


def test_reference_impl_equals_route_reference():
    x = torch.randn(4, 16)
    cfg = RoutingConfig(M.SIGMOID_RENORM, top_k=3)
    a, b = route(x, cfg, impl="reference"), route_reference(x, cfg)
    assert torch.equal(a.ids, b.ids) and torch.equal(a.weights, b.weights)


# --- validation ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", [m for m in M if m not in (M.DEEPSEEK_V3, M.MINIMAX2)])
def test_bias_for_a_method_without_bias_is_rejected(method):
    cfg = RoutingConfig(method, top_k=1)
    with pytest.raises(ValueError, match="takes no bias"):
        route(torch.randn(2, 8), cfg, torch.zeros(8))


def test_route_reference_checks_its_arguments_too():
    with pytest.raises(ValueError, match="takes no bias"):
        route_reference(torch.randn(2, 8), RoutingConfig(M.TOPK, top_k=2), torch.zeros(8))
    with pytest.raises(ValueError, match="multiple of 4"):
        route_reference(torch.randn(2, 10), RoutingConfig(M.TOPK, top_k=2))


@pytest.mark.parametrize(
    "logits, cfg, bias, exc, match",
    [
        (torch.randn(8), RoutingConfig(M.TOPK, top_k=2), None, ValueError, "2-D"),
        (torch.randn(2, 3, 8), RoutingConfig(M.TOPK, top_k=2), None, ValueError, "2-D"),
        (torch.randint(0, 5, (2, 8)), RoutingConfig(M.TOPK, top_k=2), None, TypeError, "float32"),
        (torch.randn(2, 8, dtype=torch.float64), RoutingConfig(M.TOPK, top_k=2), None, TypeError, "float32"),
        (torch.randn(2, 6), RoutingConfig(M.TOPK, top_k=2), None, ValueError, "multiple of 4"),
        (torch.randn(2, 8), RoutingConfig(M.TOPK, top_k=8), None, ValueError, r"top_k \(8\) must be <"),
        (torch.randn(2, 8), RoutingConfig(M.TOPK, top_k=2, num_experts=16), None, ValueError, "num_experts"),
        (torch.randn(2, 8), RoutingConfig(M.MINIMAX2, top_k=2), torch.zeros(16), ValueError, "shape"),
        (torch.randn(2, 8), RoutingConfig(M.MINIMAX2, top_k=2), torch.zeros(1, 8), ValueError, "shape"),
        (torch.randn(2, 8), RoutingConfig(M.MINIMAX2, top_k=2), torch.zeros(8, dtype=torch.int32), TypeError, "bias"),
        (torch.randn(2, 8), RoutingConfig(M.MINIMAX2, top_k=2), [0.0] * 8, TypeError, "bias"),
        (torch.randn(2, 8), RoutingConfig(M.DEEPSEEK_V3, top_k=4, n_group=2, topk_group=1), None, ValueError,
         r"top_k \(4\) must be < topk_group"),
        (torch.randn(2, 96), RoutingConfig(M.DEEPSEEK_V3, top_k=2, n_group=2, topk_group=1), None, ValueError,
         "at most 32 experts per group"),
        (torch.randn(2, 8).tolist(), RoutingConfig(M.TOPK, top_k=2), None, TypeError, "tensor"),
        (torch.randn(2, 8), "renormalize", None, TypeError, "RoutingConfig"),
    ],
)
def test_route_rejects(logits, cfg, bias, exc, match):
    with pytest.raises(exc, match=match):
        route(logits, cfg, bias)


def test_route_rejects_bias_on_another_device():
    meta_bias = torch.zeros(8, device="meta")
    with pytest.raises(ValueError, match="device|on meta"):
        route(torch.randn(2, 8), RoutingConfig(M.MINIMAX2, top_k=2), meta_bias)


def test_route_rejects_unknown_impl():
    with pytest.raises(ValueError, match="impl"):
        route(torch.randn(2, 8), RoutingConfig(M.TOPK, top_k=2), impl="cuda")


def test_deepseek_ungrouped_topk_group_must_not_exceed_n_group():
    with pytest.raises(ValueError, match="topk_group"):
        RoutingConfig(M.DEEPSEEK_V3, top_k=2, n_group=1, topk_group=2)


# --- packed routed format -----------------------------------------------------------------------------


def test_pack_layout_matches_spec():
    ids = torch.tensor([[3, 32767]], dtype=torch.int32)
    w = torch.tensor([[1.0, -2.0]])  # bf16 bits 0x3F80, 0xC000
    packed = pack_topk(ids, w)
    assert packed.dtype == torch.int32
    assert packed[0].tolist() == [(3 << 16) | 0x3F80, (32767 << 16) | 0xC000]


@pytest.mark.parametrize("id_dtype", [torch.int16, torch.int32, torch.int64])
def test_pack_unpack_round_trip_with_negative_weights(id_dtype):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 32768, (64, 8), generator=g).to(id_dtype)
    ids[0, 0], ids[0, 1] = 32767, 0
    w = torch.randn(64, 8, generator=g) * 3
    w[0, 2:] = torch.tensor([-0.0, -1e-30, -65504.0, float("-inf"), -1.0, -0.5])
    out = unpack_topk(pack_topk(ids, w))
    assert out.ids.dtype == torch.int32 and out.weights.dtype == torch.float32
    assert torch.equal(out.ids, ids.to(torch.int32))
    assert torch.equal(out.weights, w.to(torch.bfloat16).float())
    assert torch.equal(torch.signbit(out.weights), torch.signbit(w.to(torch.bfloat16).float()))


def test_pack_bf16_weights_exact_and_nan_preserved():
    ids = torch.tensor([[1, 2]], dtype=torch.int32)
    w = torch.tensor([[0.333, float("nan")]], dtype=torch.bfloat16)
    out = unpack_topk(pack_topk(ids, w))
    assert out.weights[0, 0].item() == w[0, 0].float().item() and math.isnan(out.weights[0, 1].item())
    assert out.ids[0].tolist() == [1, 2]


def test_pack_routes_output_round_trip():
    cfg = RoutingConfig(M.RENORMALIZE, top_k=4)
    topk = route(torch.randn(5, 64), cfg)
    out = unpack_topk(pack_topk(*topk))
    assert torch.equal(out.ids, topk.ids)
    torch.testing.assert_close(out.weights, topk.weights, rtol=2**-8, atol=0)


@pytest.mark.parametrize("bad", [32768, -1, 65535])
def test_pack_rejects_out_of_range_ids(bad):
    ids = torch.tensor([[0, bad]])
    with pytest.raises(ValueError, match="32767"):
        pack_topk(ids, torch.ones(1, 2))


def test_pack_type_and_shape_errors():
    with pytest.raises(TypeError, match="integer"):
        pack_topk(torch.tensor([[1.0, 2.0]]), torch.ones(1, 2))
    with pytest.raises(TypeError, match="integer"):
        pack_topk(torch.tensor([[True, False]]), torch.ones(1, 2))
    with pytest.raises(TypeError, match="floating"):
        pack_topk(torch.tensor([[1, 2]]), torch.ones(1, 2, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"\[T, K\]"):
        pack_topk(torch.tensor([[1, 2]]), torch.ones(1, 3))
    with pytest.raises(ValueError, match=r"\[T, K\]"):
        pack_topk(torch.tensor([1, 2]), torch.ones(2))
    with pytest.raises(TypeError, match="int32"):
        unpack_topk(torch.zeros(1, 2, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"\[T, K\]"):
        unpack_topk(torch.zeros(2, dtype=torch.int32))


def test_pack_empty():
    packed = pack_topk(torch.empty(0, 4, dtype=torch.int32), torch.empty(0, 4))
    assert packed.shape == (0, 4)
    assert unpack_topk(packed).ids.shape == (0, 4)


# --- independent float64 re-statement of semantics 2.2 ----------------------------------------------


def _top(keys, allowed, k):
    """The k largest keys among `allowed` indices, ties to the lower index."""
    return sorted(allowed, key=lambda i: (-keys[i], i))[:k]


def _restated(logits, method, k, n_group=1, topk_group=1, renorm=True, scale=1.0, bias=None):
    """Route one row per the table of semantics 2.2, in float64 Python arithmetic."""
    l = [float(x) for x in logits]
    E = len(l)
    s = [1.0 / (1.0 + math.exp(-x)) for x in l]
    everyone = range(E)
    if method in (M.DEFAULT, M.RENORMALIZE_NAIVE):
        mx = max(l)
        z = sum(math.exp(x - mx) for x in l)
        p = [math.exp(x - mx) / z for x in l]
        sel = _top(p, everyone, k)
        w = [p[i] for i in sel]
        if method is M.RENORMALIZE_NAIVE:
            w = [x / sum(w) for x in w]
    elif method is M.RENORMALIZE:
        sel = _top(l, everyone, k)
        mx = max(l[i] for i in sel)
        e = [math.exp(l[i] - mx) for i in sel]
        w = [x / sum(e) for x in e]
    elif method is M.TOPK:
        sel = _top(l, everyone, k)
        w = [l[i] for i in sel]
    elif method in (M.TOPK_SIGMOID, M.LLAMA4):
        sel = _top(l, everyone, k)
        w = [s[i] for i in sel]
    elif method in (M.SIGMOID, M.SIGMOID_RENORM):
        sel = _top(s, everyone, k)
        w = [s[i] for i in sel]
        if method is M.SIGMOID_RENORM and renorm:
            w = [x / (sum(w) + 1e-20) for x in w]
    else:  # DEEPSEEK_V3, MINIMAX2
        b = [0.0] * E if bias is None else [float(x) for x in bias]
        key = [s[i] + b[i] for i in everyone]
        gsize = E // n_group
        allowed = list(everyone)
        if n_group > 1:
            gscore = []
            for g in range(n_group):
                members = sorted((key[i] for i in range(g * gsize, (g + 1) * gsize)), reverse=True)
                gscore.append(members[0] + members[1])
            kept = _top(gscore, range(n_group), topk_group)
            allowed = [i for i in everyone if i // gsize in kept]
        sel = _top(key, allowed, k)
        w = [s[i] for i in sel]
        if renorm or method is M.MINIMAX2:
            w = [x / (sum(w) + 1e-20) for x in w]
        w = [x * scale for x in w]
    return sel, w


def _separated(values, gap):
    """No two values closer than `gap` unless exactly equal (so fp32 cannot reorder them)."""
    u = sorted(set(values))
    return all(b - a > gap for a, b in zip(u, u[1:]))


@st.composite
def _routing_case(draw):
    method = draw(st.sampled_from(list(M)))
    E = draw(st.sampled_from([8, 12, 16, 32, 64]))
    n_group, topk_group = 1, 1
    if method is M.DEEPSEEK_V3:
        n_group = draw(st.sampled_from([g for g in (1, 2, 4, 8) if E % g == 0 and 2 <= E // g <= 32]))
        topk_group = draw(st.integers(1, min(4, n_group))) if n_group > 1 else 1
        kmax = min(8, E - 1, topk_group * (E // n_group) - 1)
    elif method is M.LLAMA4:
        kmax = 1
    else:
        kmax = min(32, E - 1)
    k = draw(st.integers(1, kmax))
    renorm = draw(st.booleans()) if method in (M.DEEPSEEK_V3, M.SIGMOID_RENORM) else None
    scale = draw(st.sampled_from([1.0, 2.5])) if method in (M.DEEPSEEK_V3, M.MINIMAX2) else 1.0
    kwargs = dict(n_group=n_group, topk_group=topk_group, routed_scaling_factor=scale)
    if renorm is not None:
        kwargs["renormalize"] = renorm
    cfg = RoutingConfig(method, top_k=k, **kwargs)
    T = draw(st.integers(1, 3))
    # a coarse grid of logits (exact in fp32) makes ties frequent
    logits = draw(st.lists(st.lists(st.integers(-24, 24), min_size=E, max_size=E), min_size=T, max_size=T))
    logits = np.array(logits, dtype=np.float32) / 4
    bias = None
    if cfg.uses_bias and draw(st.booleans()):
        offset = draw(st.sampled_from([0.0, 12.0]))
        bias = np.array(draw(st.lists(st.integers(-8, 8), min_size=E, max_size=E)), dtype=np.float32) / 8 + offset
    return cfg, logits, bias


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(_routing_case())
def test_reference_matches_float64_restatement(case):
    cfg, logits, bias = case
    want = [
        _restated(row, cfg.method, cfg.top_k, cfg.n_group, cfg.topk_group, cfg.renormalize,
                  cfg.routed_scaling_factor, bias)
        for row in logits
    ]
    if cfg.uses_bias:  # fp32 rounding of sigmoid + bias must not be able to reorder the keys
        b = np.zeros(logits.shape[1]) if bias is None else bias.astype(np.float64)
        for row in logits.astype(np.float64):
            key = 1.0 / (1.0 + np.exp(-row)) + b
            assume(_separated(key.tolist(), 1e-5))
            if cfg.n_group > 1:
                gsz = len(key) // cfg.n_group
                g = [sum(sorted(key[i * gsz:(i + 1) * gsz])[-2:]) for i in range(cfg.n_group)]
                assume(_separated(g, 1e-5))
    res = route(torch.from_numpy(logits), cfg, None if bias is None else torch.from_numpy(bias))
    assert res.ids.tolist() == [sel for sel, _ in want]
    np.testing.assert_allclose(res.weights.numpy(), np.array([w for _, w in want]), rtol=1e-5, atol=1e-7)
