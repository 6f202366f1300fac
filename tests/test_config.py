"""Config types: validation with named arguments, repr round trip, FlashInfer mapping."""

import pytest
import torch

import fusedmoe as fm
from fusedmoe.config import flashinfer_activation_name, flashinfer_routing_value


def test_activation_gatedness():
    gated = {a for a in fm.Activation if a.is_gated}
    assert gated == {fm.Activation.SWIGLU, fm.Activation.GEGLU, fm.Activation.SWIGLU_OAI}


def test_flashinfer_mapping_by_name():
    assert flashinfer_activation_name(fm.Activation.RELU2) == "Relu2"
    assert flashinfer_activation_name(fm.Activation.SWIGLU_OAI) == "Swiglu"
    assert flashinfer_activation_name(fm.Activation.IDENTITY) == "Identity"
    values = {m.name: flashinfer_routing_value(m) for m in fm.RoutingMethod}
    assert values == {"DEFAULT": 0, "RENORMALIZE": 1, "DEEPSEEK_V3": 2, "LLAMA4": 3, "RENORMALIZE_NAIVE": 4,
                      "TOPK": 5, "SIGMOID_RENORM": 6, "MINIMAX2": 7, "SIGMOID": 8, "TOPK_SIGMOID": 9}


CONFIGS = [
    fm.RoutingConfig(fm.RoutingMethod.RENORMALIZE, top_k=8),
    fm.RoutingConfig(fm.RoutingMethod.DEEPSEEK_V3, top_k=8, n_group=8, topk_group=4, routed_scaling_factor=2.5),
    fm.RoutingConfig(fm.RoutingMethod.DEEPSEEK_V3, top_k=22, routed_scaling_factor=5.0, num_experts=512),
    fm.RoutingConfig(fm.RoutingMethod.LLAMA4, top_k=1),
    fm.RoutingConfig(fm.RoutingMethod.SIGMOID_RENORM, top_k=4, renormalize=False),
    fm.RoutingConfig(fm.RoutingMethod.MINIMAX2, top_k=8),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=repr)
def test_routing_config_repr_round_trips(cfg):
    again = eval(repr(cfg), {"fm": fm})
    assert again == cfg and hash(again) == hash(cfg)


def test_routing_config_is_frozen():
    cfg = CONFIGS[0]
    with pytest.raises(Exception):
        cfg.top_k = 3


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(method=fm.RoutingMethod.LLAMA4, top_k=2), "top_k must be 1"),
        (dict(method=fm.RoutingMethod.RENORMALIZE, top_k=0), "top_k must be >= 1"),
        (dict(method=fm.RoutingMethod.RENORMALIZE, top_k=33), "top_k must be <= 32"),
        (dict(method=fm.RoutingMethod.RENORMALIZE, top_k=2, n_group=2), "n_group"),
        (dict(method=fm.RoutingMethod.DEEPSEEK_V3, top_k=8, n_group=4, topk_group=5), "topk_group"),
        (dict(method=fm.RoutingMethod.DEEPSEEK_V3, top_k=23), "top_k must be <= 22"),
        (dict(method=fm.RoutingMethod.DEEPSEEK_V3, top_k=8, n_group=0), "n_group"),
        (dict(method=fm.RoutingMethod.RENORMALIZE, top_k=2, routed_scaling_factor=2.0), "routed_scaling_factor"),
        (dict(method=fm.RoutingMethod.MINIMAX2, top_k=2, renormalize=False), "renormalize"),
        (dict(method=fm.RoutingMethod.DEEPSEEK_V3, top_k=8, routed_scaling_factor=-1.0), "routed_scaling_factor"),
        (dict(method=fm.RoutingMethod.DEEPSEEK_V3, top_k=9, num_experts=256), "top_k must be <= 8"),
        (dict(method=fm.RoutingMethod.DEEPSEEK_V3, top_k=8, n_group=3, topk_group=1, num_experts=256), "divisible"),
        (dict(method=fm.RoutingMethod.RENORMALIZE, top_k=2, num_experts=6), "multiple of 4"),
        (dict(method=fm.RoutingMethod.RENORMALIZE, top_k=8, num_experts=8), "top_k .* must be <"),
        (dict(method="nope", top_k=2), "unknown routing method"),
    ],
)
def test_routing_config_rejects(kwargs, match):
    with pytest.raises(ValueError, match=match):
        fm.RoutingConfig(**kwargs)


def test_routing_config_type_errors():
    with pytest.raises(TypeError, match="top_k"):
        fm.RoutingConfig(fm.RoutingMethod.RENORMALIZE, top_k=2.0)
    with pytest.raises(TypeError, match="renormalize"):
        fm.RoutingConfig(fm.RoutingMethod.DEEPSEEK_V3, top_k=2, renormalize=1)


def test_renormalize_default_follows_the_method():
    assert fm.RoutingConfig(fm.RoutingMethod.TOPK, top_k=2).renormalize is False
    assert fm.RoutingConfig(fm.RoutingMethod.DEEPSEEK_V3, top_k=2).renormalize is True
    assert fm.RoutingConfig(fm.RoutingMethod.RENORMALIZE, top_k=2).renormalize is True
    # True is the public signature's default: it reads back as the method's rule
    assert fm.RoutingConfig(fm.RoutingMethod.TOPK, top_k=2, renormalize=True).renormalize is False


def test_format_pairings():
    assert fm.Format.FP8_CHANNEL.natural_activation_format() is fm.Format.FP8_TOKEN
    assert fm.Format.NVFP4.natural_activation_format() is fm.Format.BF16
    assert fm.Format.FP8_TENSOR in fm.Format.NVFP4.allowed_activation_formats()
    with pytest.raises(ValueError):
        fm.Format.FP8_TOKEN.natural_activation_format()


def test_activation_params_validation():
    assert fm.ActivationParams() == fm.ActivationParams(1.702, 1.0, 7.0)
    with pytest.raises(ValueError, match="limit"):
        fm.ActivationParams(limit=0.0)
    with pytest.raises(TypeError, match="alpha"):
        fm.ActivationParams(alpha="x")


def test_topk_validate():
    ids = torch.zeros(3, 2, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"\[T, K\]"):
        fm.TopK(ids, torch.zeros(3, 3)).validate()
    with pytest.raises(TypeError, match="integer"):
        fm.TopK(ids.float(), torch.zeros(3, 2)).validate()
