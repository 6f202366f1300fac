"""Triton routing kernel vs the torch reference: ids identical, weights to 1e-6 relative.

Without CUDA the kernel runs in Triton's interpreter (tiny shapes: it is slow); the ``gpu`` tests
run the compiled kernel at T in {1, 7, 1000} and inside a CUDA graph.
"""

import os

import torch

if not torch.cuda.is_available():
    # must precede the first import of triton (triton.jit reads it when decorating)
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from fusedmoe.config import RoutingConfig, RoutingMethod  # noqa: E402
from fusedmoe.routing import route  # noqa: E402

M = RoutingMethod
RTOL = 1e-6

# (name, E, config kwargs); bias methods get a random bias
CASES = [
    ("default", 64, dict(method=M.DEFAULT, top_k=8)),
    ("renormalize", 128, dict(method=M.RENORMALIZE, top_k=8)),
    ("renormalize_k32", 64, dict(method=M.RENORMALIZE, top_k=32)),
    ("renormalize_naive", 60, dict(method=M.RENORMALIZE_NAIVE, top_k=4)),
    ("topk", 16, dict(method=M.TOPK, top_k=3)),
    ("topk_e2048", 2048, dict(method=M.TOPK, top_k=16)),
    ("sigmoid", 32, dict(method=M.SIGMOID, top_k=5)),
    ("topk_sigmoid", 32, dict(method=M.TOPK_SIGMOID, top_k=4)),
    ("llama4", 16, dict(method=M.LLAMA4, top_k=1)),
    ("sigmoid_renorm", 32, dict(method=M.SIGMOID_RENORM, top_k=6)),
    ("sigmoid_renorm_off", 32, dict(method=M.SIGMOID_RENORM, top_k=6, renormalize=False)),
    ("minimax2", 256, dict(method=M.MINIMAX2, top_k=8, routed_scaling_factor=2.0)),
    ("nemotron3_super", 512, dict(method=M.DEEPSEEK_V3, top_k=22, routed_scaling_factor=5.0)),
    ("deepseek_v3_grouped", 256, dict(method=M.DEEPSEEK_V3, top_k=8, n_group=8, topk_group=4,
                                      routed_scaling_factor=2.5)),
    ("deepseek_3groups_no_renorm", 96, dict(method=M.DEEPSEEK_V3, top_k=6, n_group=3, topk_group=2,
                                            renormalize=False)),
]


def _inputs(E, cfg, T, device, seed=0):
    """Random logits with ties: row 0 all equal, row 1 in equal pairs, row 2 ties across groups."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(T, E, generator=g)
    if T >= 3:
        logits[0] = 0.5
        logits[1] = torch.randn(E // 2, generator=g).repeat_interleave(2)
        logits[2] = torch.randn(E // 4, generator=g).repeat(4)
    bias = None
    if cfg.uses_bias:
        bias = (torch.randint(-4, 5, (E,), generator=g) / 8).float()
        if T >= 3 and cfg.n_group > 1:
            bias = bias.view(cfg.n_group, -1)[0].repeat(cfg.n_group)  # equal groups on row 2
    return logits.to(device), None if bias is None else bias.to(device)


def _compare(logits, cfg, bias=None):
    want = route(logits, cfg, bias, impl="reference")
    got = route(logits, cfg, bias, impl="triton")
    assert got.ids.dtype == torch.int32 and got.weights.dtype == torch.float32
    assert got.ids.shape == want.ids.shape and got.weights.shape == want.weights.shape
    assert torch.equal(got.ids, want.ids)
    torch.testing.assert_close(got.weights, want.weights, rtol=RTOL, atol=1e-30, equal_nan=True)
    return got


def _interpreter_device():
    return "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.interpreter
@pytest.mark.parametrize("name, E, kwargs", CASES, ids=[c[0] for c in CASES])
def test_kernel_matches_reference(name, E, kwargs):
    cfg = RoutingConfig(**kwargs)
    logits, bias = _inputs(E, cfg, 5, _interpreter_device())
    _compare(logits, cfg, bias)


@pytest.mark.interpreter
def test_kernel_deepseek_without_bias_and_bf16_inputs():
    cfg = RoutingConfig(M.DEEPSEEK_V3, top_k=8, n_group=8, topk_group=4, routed_scaling_factor=2.5)
    logits, bias = _inputs(256, cfg, 4, _interpreter_device(), seed=1)
    _compare(logits, cfg)
    _compare(logits.to(torch.bfloat16), cfg, bias.to(torch.bfloat16))


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_kernel_half_logits_and_strided_rows(dtype):
    cfg = RoutingConfig(M.RENORMALIZE, top_k=4)
    g = torch.Generator().manual_seed(2)
    base = torch.randn(32, 6, generator=g).to(dtype).to(_interpreter_device())
    _compare(base.t(), cfg)  # stride (1, 6)
    _compare(torch.randn(6, 64, generator=g).to(dtype).to(_interpreter_device())[:, ::2], cfg)


@pytest.mark.interpreter
def test_kernel_cancellation_case_large_bias():
    cfg = RoutingConfig(M.DEEPSEEK_V3, top_k=2, renormalize=False)
    dev = _interpreter_device()
    logits = torch.tensor([[-8.0, -7.5, -9.0, -6.0, -10.0, -8.5, -7.0, -11.0]], device=dev)
    bias = torch.tensor([12.0, 12.0, 12.0, 11.0, 12.0, 12.0, 11.5, 12.0], device=dev)
    got = _compare(logits, cfg, bias)
    torch.testing.assert_close(got.weights.cpu(), torch.sigmoid(torch.tensor([[-7.5, -8.0]])), rtol=RTOL, atol=0)


@pytest.mark.interpreter
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # inf - inf, on purpose
@pytest.mark.parametrize(
    "kwargs",
    [
        dict(method=M.DEFAULT, top_k=2),
        dict(method=M.RENORMALIZE, top_k=2),
        dict(method=M.TOPK, top_k=3),
        dict(method=M.SIGMOID_RENORM, top_k=2),
        dict(method=M.DEEPSEEK_V3, top_k=3, n_group=4, topk_group=1),
    ],
    ids=lambda kw: kw["method"].name,
)
def test_kernel_non_finite_logits(kwargs):
    """NaN counts as -inf; +inf / all -inf rows give the same (possibly NaN) weights."""
    cfg = RoutingConfig(**kwargs)
    nan, inf = float("nan"), float("inf")
    rows = [
        [nan, 1.0, nan, 2.0] + [0.0] * 12,
        [nan] * 16,
        [-inf] * 16,
        [0.0, inf, 1.0, inf] + [-inf] * 12,
        [3.0, 3.0, -inf, -inf] + [-2.0] * 4 + [-3.0] * 4 + [nan] * 4,
    ]
    _compare(torch.tensor(rows, device=_interpreter_device()), cfg)


@pytest.mark.interpreter
def test_kernel_nan_bias():
    cfg = RoutingConfig(M.MINIMAX2, top_k=2)
    bias = torch.zeros(8, device=_interpreter_device())
    bias[0] = float("nan")
    got = _compare(torch.zeros(3, 8, device=_interpreter_device()), cfg, bias)
    assert got.ids[0].tolist() == [1, 2]


def test_kernel_zero_tokens_no_launch():
    cfg = RoutingConfig(M.DEEPSEEK_V3, top_k=22)
    got = route(torch.empty(0, 512, device=_interpreter_device()), cfg, impl="triton")
    assert got.ids.shape == (0, 22) and got.ids.dtype == torch.int32
    assert got.weights.shape == (0, 22) and got.weights.dtype == torch.float32


# --- compiled kernel on a GPU ---------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("T", [1, 7, 1000])
@pytest.mark.parametrize("name, E, kwargs", CASES, ids=[c[0] for c in CASES])
def test_gpu_kernel_matches_reference(name, E, kwargs, T):
    cfg = RoutingConfig(**kwargs)
    logits, bias = _inputs(E, cfg, T, "cuda", seed=T)
    _compare(logits, cfg, bias)
    _compare(logits.to(torch.bfloat16), cfg, bias)


@pytest.mark.gpu
def test_gpu_auto_dispatch_uses_triton(monkeypatch):
    from fusedmoe.routing import triton_routing

    calls = []
    real = triton_routing.route_triton

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(triton_routing, "route_triton", spy)
    route(torch.randn(4, 64, device="cuda"), RoutingConfig(M.RENORMALIZE, top_k=4))
    assert calls == [1]


@pytest.mark.gpu
def test_gpu_cuda_graph_capture():
    cfg = RoutingConfig(M.DEEPSEEK_V3, top_k=8, n_group=8, topk_group=4, routed_scaling_factor=2.5)
    logits, bias = _inputs(256, cfg, 64, "cuda")
    route(logits, cfg, bias)  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = route(logits, cfg, bias)
    new_logits, _ = _inputs(256, cfg, 64, "cuda", seed=5)
    logits.copy_(new_logits)
    graph.replay()
    torch.cuda.synchronize()
    want = route(logits, cfg, bias, impl="reference")
    assert torch.equal(out.ids, want.ids)
    torch.testing.assert_close(out.weights, want.weights, rtol=RTOL, atol=1e-30)
