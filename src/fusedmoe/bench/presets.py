"""Model shape presets, weight and input generation for the benchmarks, tuner and sweep.

The presets are the expert shapes of ``docs/models.md`` section 9 (shared docs): ``hidden`` is
K of the first expert GEMM (the model's H, or the latent size 1024 for Nemotron-3-Super),
``intermediate`` the per-expert I of one tensor-parallel shard (``-tp8`` presets shard I only).
Each preset carries its model's expert activation, routing method and expert biases, so a
benchmark of a preset routes tokens the way the model does (grouped DeepSeek-V3 routing touches
fewer distinct experts than softmax routing, for instance).

Weights are ``randn / sqrt(fan_in)`` (outputs of order one, never zeros), generated and quantized
in chunks of experts on the target device so that even DeepSeek-V3 at TP1 (22.5 GB in BF16) never
needs an fp32 copy of all experts. Quantization is per expert in every supported format, so the
chunked result equals quantizing the whole tensor at once.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from ..config import Activation, ActivationParams, Format, RoutingConfig, RoutingMethod, TopK
from ..formats import QuantizedTensor
from ..weights import ExpertWeights

__all__ = [
    "Preset",
    "PRESETS",
    "DEFAULT_BENCH_PRESETS",
    "TRITON_WEIGHT_FORMATS",
    "triton_weight_formats",
    "BenchCase",
    "get_preset",
    "custom_preset",
    "formats_for",
    "format_problem",
    "make_weights",
    "make_inputs",
    "InputSet",
    "calibrate_static_scales",
]

#: Weight formats the triton backend implemented when this was written (see
#: :func:`triton_weight_formats` for what the installed backend supports).
TRITON_WEIGHT_FORMATS = (Format.BF16, Format.FP8_TENSOR, Format.FP8_CHANNEL, Format.FP8_BLOCK)


def triton_weight_formats() -> Tuple[Format, ...]:
    """Weight formats the installed triton backend supports on a CUDA device (asked through its
    ``supports``, so formats it gains later are benchmarked and tuned without changes here)."""
    from ..backends import get
    from ..backends.base import MoERequest

    b = get("triton")
    out = tuple(f for f in Format if f.is_weight_format and b.supports(
        MoERequest(f, f.natural_activation_format(), Activation.SWIGLU), torch.device("cuda")) is None)
    return out or TRITON_WEIGHT_FORMATS


@dataclass(frozen=True)
class Preset:
    """One expert shape of a model (one TP shard) with the model's activation and routing."""

    name: str
    model: str
    hidden: int  # K of GEMM1 (H, or the latent size)
    intermediate: int  # I per expert (per TP shard)
    experts: int
    top_k: int
    activation: Activation
    routing: RoutingMethod
    n_group: int = 1
    topk_group: int = 1
    routed_scaling_factor: float = 1.0
    expert_bias: bool = False  # gpt-oss: biases on both GEMMs
    tp: int = 1
    note: str = ""

    @property
    def gated(self) -> bool:
        return self.activation.is_gated

    @property
    def n1(self) -> int:
        """Rows of w13 per expert (logical, unpadded): 2I gated, I otherwise."""
        return 2 * self.intermediate if self.gated else self.intermediate

    @property
    def weight_on_input(self) -> bool:
        return self.routing is RoutingMethod.LLAMA4

    def routing_config(self) -> RoutingConfig:
        return RoutingConfig(self.routing, self.top_k, n_group=self.n_group, topk_group=self.topk_group,
                             routed_scaling_factor=self.routed_scaling_factor, num_experts=self.experts)

    def describe(self) -> str:
        act = self.activation.value + (" + bias" if self.expert_bias else "")
        r = self.routing.name.lower()
        if self.n_group > 1:
            r += f" {self.n_group}/{self.topk_group}"
        if self.routed_scaling_factor != 1.0:
            r += f" x{self.routed_scaling_factor:g}"
        return (f"{self.name}: H={self.hidden} I={self.intermediate} E={self.experts} top_k={self.top_k} "
                f"{act}, {r}")


def _model(name, model, H, I, E, K, act, routing, *, tp8_I, **kw) -> List[Preset]:
    return [Preset(name, model, H, I, E, K, act, routing, **kw),
            Preset(name + "-tp8", model + " (TP8 shard)", H, tp8_I, E, K, act, routing, tp=8, **kw)]


_S, _R2, _OAI = Activation.SWIGLU, Activation.RELU2, Activation.SWIGLU_OAI
_DS, _MM, _RN, _RS, _L4 = (RoutingMethod.DEEPSEEK_V3, RoutingMethod.MINIMAX2, RoutingMethod.RENORMALIZE_NAIVE,
                           RoutingMethod.RENORMALIZE, RoutingMethod.LLAMA4)

_ALL: List[Preset] = [
    *_model("nemotron-nano", "Nemotron-3-Nano-30B-A3B", 2688, 1856, 128, 6, _R2, _DS, tp8_I=232,
            routed_scaling_factor=2.5),
    *_model("nemotron-super", "Nemotron-3-Super-120B-A12B", 1024, 2688, 512, 22, _R2, _DS, tp8_I=336,
            routed_scaling_factor=5.0, note="latent experts: K = moe_latent_size 1024 (H = 4096)"),
    *_model("minimax-m2", "MiniMax-M2 / M2.5", 3072, 1536, 256, 8, _S, _MM, tp8_I=192),
    *_model("deepseek-v3", "DeepSeek-V3 / R1", 7168, 2048, 256, 8, _S, _DS, tp8_I=256, n_group=8, topk_group=4,
            routed_scaling_factor=2.5),
    *_model("qwen3-30b-a3b", "Qwen3-30B-A3B", 2048, 768, 128, 8, _S, _RN, tp8_I=96),
    *_model("qwen3-235b-a22b", "Qwen3-235B-A22B", 4096, 1536, 128, 8, _S, _RN, tp8_I=192),
    *_model("gpt-oss-20b", "gpt-oss-20b", 2880, 2880, 32, 4, _OAI, _RS, tp8_I=360, expert_bias=True),
    *_model("gpt-oss-120b", "gpt-oss-120b", 2880, 2880, 128, 4, _OAI, _RS, tp8_I=360, expert_bias=True),
    *_model("mixtral-8x7b", "Mixtral-8x7B", 4096, 14336, 8, 2, _S, _RN, tp8_I=1792),
    *_model("llama4-scout", "Llama-4-Scout-17B-16E", 5120, 8192, 16, 1, _S, _L4, tp8_I=1024,
            note="routing weight multiplies the expert input"),
    # small shapes for CPU runs and tests (not models)
    Preset("tiny", "tiny SwiGLU test shape", 128, 64, 8, 2, _S, _RN),
    Preset("tiny-relu2", "tiny ReLU2 test shape", 128, 96, 8, 2, _R2, _DS, routed_scaling_factor=2.5),
]

#: name -> preset, in table order.
PRESETS: Dict[str, Preset] = {p.name: p for p in _ALL}

#: What ``fusedmoe bench`` runs on a GPU without ``--preset``: a decode-heavy small-expert model,
#: the non-gated Nemotron and a DeepSeek-V3 TP8 shard (a few minutes on an H200 with all peers).
DEFAULT_BENCH_PRESETS = ("qwen3-30b-a3b", "nemotron-nano", "deepseek-v3-tp8")


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}") from None


def with_activation(preset: Preset, activation: "Activation | str | None") -> Preset:
    """``preset``'s shape and routing with another expert activation, named ``<name>:<activation>`` (the shared
    harness runs every gated model's shape with ReLU^2 too; the benchmark scripts' ``--activation``). Biases
    (``expert_bias``) stay. None or the preset's own activation: ``preset`` itself."""
    if activation is None:
        return preset
    act = activation if isinstance(activation, Activation) else Activation(activation)
    if act is preset.activation:
        return preset
    return replace(preset, name=f"{preset.name}:{act.value}", activation=act)


def custom_preset(hidden: int, intermediate: int, experts: int, top_k: int, activation: Activation,
                  routing: RoutingMethod = RoutingMethod.RENORMALIZE_NAIVE, *, n_group: int = 1, topk_group: int = 1,
                  routed_scaling_factor: float = 1.0, expert_bias: bool = False) -> Preset:
    """A preset from explicit sizes (``--shape H,I,E,K``); validates like the layer does."""
    for n, v in (("H", hidden), ("I", intermediate), ("E", experts), ("top_k", top_k)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{n} must be a positive integer, got {v!r}")
    p = Preset(f"custom-H{hidden}-I{intermediate}-E{experts}-k{top_k}", "custom", hidden, intermediate, experts,
               top_k, activation, routing, n_group=n_group, topk_group=topk_group,
               routed_scaling_factor=routed_scaling_factor, expert_bias=expert_bias)
    p.routing_config()  # raises ValueError with the routing rule that is broken
    return p


def format_problem(preset: Preset, weight_format: Format) -> Optional[str]:
    """None if ``weight_format`` can hold this shape, else why not (a sentence)."""
    b = weight_format.block_size
    if b and preset.hidden % b:
        return f"{weight_format.name} needs H to be a multiple of {b}; {preset.name} has H={preset.hidden}"
    return None


def formats_for(preset: Preset, candidates: Optional[Sequence[Format]] = None) -> List[Format]:
    """The weight formats of ``candidates`` (default: the triton backend's) this shape fits."""
    cands = triton_weight_formats() if candidates is None else candidates
    return [f for f in cands if format_problem(preset, f) is None]


@dataclass(frozen=True)
class BenchCase:
    """One measured layer: a shape, a weight format and an activation format, a routing."""

    preset: Preset
    weight_format: Format
    act_format: Format
    routing: RoutingConfig
    dtype: torch.dtype = torch.bfloat16  # hidden states / output / BF16 weights

    @property
    def key(self) -> str:
        af = "" if self.act_format is self.weight_format.natural_activation_format() else f"/a:{self.act_format.value}"
        return f"{self.preset.name}/{self.weight_format.value}{af}/{self.preset.activation.value}"

    @property
    def weight_on_input(self) -> bool:
        return self.routing.weight_on_input


def _dtype_name(dt: torch.dtype) -> str:
    return str(dt).replace("torch.", "")


def _cat_q(parts: List[QuantizedTensor]) -> QuantizedTensor:
    cat = lambda xs: None if xs[0] is None else torch.cat(xs, dim=0)  # noqa: E731
    p0 = parts[0]
    if any(p.value_tile_k != p0.value_tile_k or p.value_layout != p0.value_layout for p in parts):
        parts = [p.linear_values() for p in parts]
    # FP4 tiles lie within an expert: the experts' concatenation keeps the layout
    return QuantizedTensor(cat([p.data for p in parts]), p0.fmt, cat([p.scale for p in parts]),
                           cat([p.global_scale for p in parts]), p0.block_rows, value_layout=parts[0].value_layout)


@torch.no_grad()
def make_weights(preset: Preset, weight_format: Format, *, device, dtype: torch.dtype = torch.bfloat16,
                 seed: int = 0, chunk_bytes: int = 1 << 30) -> ExpertWeights:
    """Random expert weights of ``preset`` in ``weight_format`` on ``device`` (deterministic per
    seed and device type). Generated and quantized ``chunk_bytes`` of fp32 at a time."""
    why = format_problem(preset, weight_format)
    if why:
        raise ValueError(why)
    dev = torch.device(device)
    H, I, E = preset.hidden, preset.intermediate, preset.experts
    n1 = preset.n1
    per_expert_f32 = 4 * (n1 * H + H * I)
    chunk = max(1, min(E, chunk_bytes // max(per_expert_f32, 1)))
    g = torch.Generator(device=dev).manual_seed(seed)
    parts13, parts2, b13s, b2s = [], [], [], []
    kw = {"dtype": dtype} if weight_format is Format.BF16 else {}
    act_params = ActivationParams() if preset.activation is Activation.SWIGLU_OAI else None
    first = None
    for e0 in range(0, E, chunk):
        ec = min(chunk, E - e0)
        w13 = torch.randn(ec, n1, H, generator=g, device=dev) * H ** -0.5
        w2 = torch.randn(ec, H, I, generator=g, device=dev) * I ** -0.5
        b13 = b2 = None
        if preset.expert_bias:
            b13 = torch.randn(ec, n1, generator=g, device=dev) * 0.1
            b2 = torch.randn(ec, H, generator=g, device=dev) * 0.1
        ew = ExpertWeights.from_float(w13, w2, activation=preset.activation, format=weight_format, w13_bias=b13,
                                      w2_bias=b2, act_params=act_params, **kw)
        del w13, w2
        first = first or ew
        parts13.append(ew.w13)
        parts2.append(ew.w2)
        if ew.w13_bias is not None:
            b13s.append(ew.w13_bias)
            b2s.append(ew.w2_bias)
    if len(parts13) == 1:
        return first
    return ExpertWeights(
        w13=_cat_q(parts13), w2=_cat_q(parts2), activation=preset.activation, intermediate_size=I,
        w13_bias=torch.cat(b13s) if b13s else None, w2_bias=torch.cat(b2s) if b2s else None, act_params=act_params)


@dataclass
class InputSet:
    """One set of inputs of a measured point: hidden states and routing (never zeros)."""

    x: torch.Tensor  # [T, H]
    topk: TopK  # ids int32 [T, K], weights fp32 [T, K]

    @property
    def tokens(self) -> int:
        return self.x.shape[0]


@torch.no_grad()
def make_inputs(case: BenchCase, tokens: int, *, device, nsets: int = 1, seed: int = 0,
                route_impl: str = "auto") -> List[InputSet]:
    """``nsets`` input sets of ``tokens`` tokens: ``x ~ randn``, router logits ``~ randn`` routed
    with the case's routing (selection bias ``~ 0.1 randn`` for the methods that take one)."""
    from ..routing import route

    if tokens < 1:
        raise ValueError(f"tokens must be >= 1, got {tokens}")
    dev = torch.device(device)
    p = case.preset
    g = torch.Generator(device=dev).manual_seed(10_000 + 7919 * seed + tokens)
    bias = torch.randn(p.experts, generator=g, device=dev) * 0.1 if case.routing.uses_bias else None
    sets = []
    for _ in range(nsets):
        x = torch.randn(tokens, p.hidden, generator=g, device=dev).to(case.dtype)
        logits = torch.randn(tokens, p.experts, generator=g, device=dev)
        topk = route(logits, case.routing, bias, impl=route_impl)
        sets.append(InputSet(x, topk))
    return sets


@torch.no_grad()
def calibrate_static_scales(weights: ExpertWeights, case: BenchCase, *, device, tokens: int = 256,
                            seed: int = 1) -> ExpertWeights:
    """FP8 per-tensor checkpoints carry static activation scales: derive them from one
    calibration batch (amax of GEMM1's input and of the activation output, / 448, x 1.25 for
    headroom) and return ``weights`` with ``input_scale`` / ``intermediate_scale`` set."""
    from ..activations import apply_activation
    from ..formats import dequantize

    if weights.format is not Format.FP8_TENSOR or case.act_format is not Format.FP8_TENSOR:
        return weights
    (s,) = make_inputs(case, tokens, device=device, nsets=1, seed=seed, route_impl="reference")
    amax_in = float(s.x.float().abs().amax())
    amax_mid = 0.0
    ids = s.topk.ids.long()
    for e in torch.unique(ids).tolist()[:16]:
        rows = (ids == e).any(dim=1)
        w13 = dequantize(weights.w13.index_select0(slice(e, e + 1)), torch.float32)[0]
        h = s.x[rows].float() @ w13.t()
        if weights.w13_bias is not None:
            h = h + weights.w13_bias[e]
        amax_mid = max(amax_mid, float(apply_activation(h, weights.activation, weights.act_params).abs().amax()))
    to_scale = lambda a: torch.tensor([max(a, 1e-6) * 1.25 / 448.0], dtype=torch.float32, device=device)  # noqa: E731
    return replace(weights, input_scale=to_scale(amax_in), intermediate_scale=to_scale(amax_mid))


def clone_weights(weights: ExpertWeights) -> ExpertWeights:
    """A copy with its own storage (several copies rotate so weights are not L2-resident)."""
    cl = lambda t: None if t is None else t.clone()  # noqa: E731
    # the measured scale-code range (and the value layout) travel with the copy
    q = lambda t: dataclasses.replace(t, data=cl(t.data), scale=cl(t.scale), global_scale=cl(t.global_scale))  # noqa: E731
    return replace(weights, w13=q(weights.w13), w2=q(weights.w2), w13_bias=cl(weights.w13_bias),
                   w2_bias=cl(weights.w2_bias))


def weights_nbytes(weights: ExpertWeights) -> int:
    """Bytes of all stored tensors of ``weights`` (padding included)."""
    n = 0
    for q in (weights.w13, weights.w2):
        for t in (q.data, q.scale, q.global_scale):
            if t is not None:
                n += t.numel() * t.element_size()
    for t in (weights.w13_bias, weights.w2_bias):
        if t is not None:
            n += t.numel() * t.element_size()
    return n
