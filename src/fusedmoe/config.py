"""Enums, frozen configs and the small containers of the public API.

Everything here validates on creation and raises ``ValueError`` / ``TypeError`` naming the
argument; nothing uses ``assert`` for user input. ``docs/semantics.md`` (shared) is the spec.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import NamedTuple, Optional

import torch

__all__ = [
    "Activation",
    "ActivationParams",
    "RoutingMethod",
    "Format",
    "RoutingConfig",
    "TopK",
    "flashinfer_activation_name",
    "flashinfer_routing_value",
]


class Activation(enum.Enum):
    """Expert activation. Gated ones split GEMM1's output into (gate, up) halves."""

    SWIGLU = "swiglu"  # silu(gate) * up
    GEGLU = "geglu"  # gelu_erf(gate) * up
    SWIGLU_OAI = "swiglu_oai"  # gpt-oss: min(g, L) * sigmoid(a*min(g, L)) * (clamp(u, -L, L) + b)
    RELU2 = "relu2"  # relu(h)^2 (Nemotron-H)
    GELU = "gelu"  # gelu_erf(h)
    SILU = "silu"  # silu(h)
    RELU = "relu"  # relu(h)
    IDENTITY = "identity"  # h

    @property
    def is_gated(self) -> bool:
        return self in (Activation.SWIGLU, Activation.GEGLU, Activation.SWIGLU_OAI)

    def __repr__(self) -> str:
        return f"fm.Activation.{self.name}"


@dataclass(frozen=True)
class ActivationParams:
    """Parameters of the clamped SwiGLU of gpt-oss (``Activation.SWIGLU_OAI``).

    ``out = g * sigmoid(alpha * g) * (u + beta)`` with ``g = min(gate, limit)`` and
    ``u = clamp(up, -limit, limit)``. The defaults are gpt-oss's constants.
    """

    alpha: float = 1.702
    beta: float = 1.0
    limit: float = 7.0

    def __post_init__(self):
        for name in ("alpha", "beta", "limit"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or math.isnan(v):
                raise TypeError(f"ActivationParams.{name} must be a real number, got {v!r}")
        if self.limit <= 0:
            raise ValueError(f"ActivationParams.limit must be > 0, got {self.limit}")


class RoutingMethod(enum.Enum):
    """Routing methods; values are FlashInfer's stable ``RoutingMethodType`` values (0-9)."""

    DEFAULT = 0  # softmax over E -> top-k, no renormalization
    RENORMALIZE = 1  # top-k on logits -> softmax over the k selected
    DEEPSEEK_V3 = 2  # sigmoid + bias selection, groups, renormalize, routed scaling
    LLAMA4 = 3  # top-1, sigmoid(logit), weight applied on the input
    RENORMALIZE_NAIVE = 4  # softmax -> top-k -> renormalize
    TOPK = 5  # top-k, raw logits as weights
    SIGMOID_RENORM = 6  # sigmoid -> top-k -> renormalize (if renormalize)
    MINIMAX2 = 7  # sigmoid + bias selection -> renormalize -> * routed_scaling_factor
    SIGMOID = 8  # sigmoid -> top-k, sigmoid values as weights
    TOPK_SIGMOID = 9  # top-k on logits -> sigmoid of the selected

    def __repr__(self) -> str:
        return f"fm.RoutingMethod.{self.name}"


class Format(enum.Enum):
    """Numeric formats of weights and activations (``docs/semantics.md`` section 5).

    FP8_CHANNEL is the weight side (one scale per output row), FP8_TOKEN the activation side
    (one dynamic scale per token); FP8_BLOCK is 128x128 for weights and 1x128 for activations.
    """

    BF16 = "bf16"  # unquantized 16-bit (bf16 or fp16, the dtype of the tensor)
    FP8_TENSOR = "fp8_tensor"
    FP8_CHANNEL = "fp8_channel"
    FP8_TOKEN = "fp8_token"
    FP8_BLOCK = "fp8_block"
    MXFP8 = "mxfp8"
    NVFP4 = "nvfp4"
    MXFP4 = "mxfp4"

    @property
    def is_quantized(self) -> bool:
        return self is not Format.BF16

    @property
    def is_fp4(self) -> bool:
        return self in (Format.NVFP4, Format.MXFP4)

    @property
    def block_size(self) -> int:
        """Elements along the last (K) dim that share one scale (0: no per-block scale)."""
        return {
            Format.FP8_BLOCK: 128,
            Format.MXFP8: 32,
            Format.NVFP4: 16,
            Format.MXFP4: 32,
        }.get(self, 0)

    @property
    def is_weight_format(self) -> bool:
        return self is not Format.FP8_TOKEN

    @property
    def is_activation_format(self) -> bool:
        return self not in (Format.FP8_CHANNEL, Format.MXFP4)

    def natural_activation_format(self) -> "Format":
        """The activation format paired with this weight format when none is given.

        Hopper has no FP4 tensor cores, so NVFP4 and MXFP4 weights pair with BF16 activations
        (W4A16); the pairing does not depend on the device so results are reproducible.
        """
        if not self.is_weight_format:
            raise ValueError(f"{self!r} is an activation format, not a weight format")
        return {
            Format.BF16: Format.BF16,
            Format.FP8_TENSOR: Format.FP8_TENSOR,
            Format.FP8_CHANNEL: Format.FP8_TOKEN,
            Format.FP8_BLOCK: Format.FP8_BLOCK,
            Format.MXFP8: Format.MXFP8,
            Format.NVFP4: Format.BF16,
            Format.MXFP4: Format.BF16,
        }[self]

    def allowed_activation_formats(self) -> tuple["Format", ...]:
        """Activation formats the reference supports with this weight format."""
        return {
            Format.BF16: (Format.BF16,),
            Format.FP8_TENSOR: (Format.FP8_TENSOR,),
            Format.FP8_CHANNEL: (Format.FP8_TOKEN,),
            Format.FP8_BLOCK: (Format.FP8_BLOCK,),
            Format.MXFP8: (Format.MXFP8,),
            Format.NVFP4: (Format.BF16, Format.FP8_TENSOR, Format.NVFP4),
            Format.MXFP4: (Format.BF16, Format.MXFP8),
        }[self]

    def __repr__(self) -> str:
        return f"fm.Format.{self.name}"


# --- FlashInfer interoperability (semantics.md 10.1): map by name, never by value ------------

_FLASHINFER_ACTIVATION = {
    Activation.SWIGLU: "Swiglu",
    Activation.GEGLU: "Geglu",
    Activation.SWIGLU_OAI: "Swiglu",  # + gemm1_alpha / gemm1_beta / gemm1_clamp_limit
    Activation.RELU2: "Relu2",
    Activation.GELU: "Gelu",
    Activation.SILU: "Silu",
    Activation.RELU: "Relu",
    Activation.IDENTITY: "Identity",
}

_FLASHINFER_ROUTING = {
    RoutingMethod.DEFAULT: "Default",
    RoutingMethod.RENORMALIZE: "Renormalize",
    RoutingMethod.DEEPSEEK_V3: "DeepSeekV3",
    RoutingMethod.LLAMA4: "Llama4",
    RoutingMethod.RENORMALIZE_NAIVE: "RenormalizeNaive",
    RoutingMethod.TOPK: "TopK",
    RoutingMethod.SIGMOID_RENORM: "SigmoidRenorm",
    RoutingMethod.MINIMAX2: "MiniMax2",
    RoutingMethod.SIGMOID: "Sigmoid",
    RoutingMethod.TOPK_SIGMOID: "TopKSigmoid",
}


def flashinfer_activation_name(act: Activation) -> str:
    """Name of the FlashInfer ``ActivationType`` member (look the value up in the installed
    FlashInfer: ``ActivationType[name].value``; Identity's value moved between versions)."""
    return _FLASHINFER_ACTIVATION[Activation(act)]


def flashinfer_routing_value(method: RoutingMethod) -> int:
    """FlashInfer ``RoutingMethodType`` value (0-9 are stable across versions)."""
    return RoutingMethod(method).value


def flashinfer_routing_name(method: RoutingMethod) -> str:
    return _FLASHINFER_ROUTING[RoutingMethod(method)]


# --- routing configuration ------------------------------------------------------------------

_SOFTMAX_LIKE_MAX_K = 32
_NEVER_RENORMALIZE = (
    RoutingMethod.DEFAULT,
    RoutingMethod.TOPK,
    RoutingMethod.SIGMOID,
    RoutingMethod.TOPK_SIGMOID,
    RoutingMethod.LLAMA4,
)


@dataclass(frozen=True)
class RoutingConfig:
    """How router logits become top-k expert ids and weights (semantics.md section 2).

    ``num_experts`` is optional here; when given, the per-E rules (E % 4, E % n_group,
    top_k < E, ...) are checked at creation, otherwise at the first call of ``fm.route``.

    ``routed_scaling_factor`` multiplies the final weights for DEEPSEEK_V3 and MINIMAX2 (as
    FlashInfer does); for other methods a value other than 1.0 is rejected rather than ignored.
    ``renormalize`` is honoured by DEEPSEEK_V3 (transformers' ``norm_topk_prob``) and
    SIGMOID_RENORM (default True for both); the methods whose definition fixes it (RENORMALIZE,
    RENORMALIZE_NAIVE, MINIMAX2: always; DEFAULT, TOPK, SIGMOID, TOPK_SIGMOID, LLAMA4: never)
    resolve the default to their rule; ``renormalize=False`` with an always-renormalizing method
    is rejected rather than ignored (``True`` with a never-renormalizing method is the signature's
    default value and reads back as ``False``).
    """

    method: RoutingMethod
    top_k: int
    n_group: int = 1
    topk_group: int = 1
    routed_scaling_factor: float = 1.0
    renormalize: Optional[bool] = None  # None: the method's own rule (True where it is a choice)
    num_experts: Optional[int] = None

    def __post_init__(self):
        if isinstance(self.method, str):
            try:
                object.__setattr__(self, "method", RoutingMethod[self.method.upper()])
            except KeyError:
                raise ValueError(
                    f"RoutingConfig.method: unknown routing method {self.method!r}; expected one "
                    f"of {[m.name for m in RoutingMethod]}"
                ) from None
        if not isinstance(self.method, RoutingMethod):
            raise TypeError(f"RoutingConfig.method must be a fm.RoutingMethod, got {self.method!r}")
        for name in ("top_k", "n_group", "topk_group"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool):
                raise TypeError(f"RoutingConfig.{name} must be an int, got {v!r}")
        if self.num_experts is not None and (
            not isinstance(self.num_experts, int) or isinstance(self.num_experts, bool)
        ):
            raise TypeError(f"RoutingConfig.num_experts must be an int or None, got {self.num_experts!r}")
        if not isinstance(self.routed_scaling_factor, (int, float)) or isinstance(
            self.routed_scaling_factor, bool
        ):
            raise TypeError(
                f"RoutingConfig.routed_scaling_factor must be a float, got {self.routed_scaling_factor!r}"
            )
        object.__setattr__(self, "routed_scaling_factor", float(self.routed_scaling_factor))
        if not math.isfinite(self.routed_scaling_factor) or self.routed_scaling_factor <= 0:
            raise ValueError(
                f"RoutingConfig.routed_scaling_factor must be finite and > 0, got {self.routed_scaling_factor}"
            )
        if self.renormalize is None:
            object.__setattr__(self, "renormalize", self.method not in _NEVER_RENORMALIZE
                               if isinstance(self.method, RoutingMethod) else True)
        if not isinstance(self.renormalize, bool):
            raise TypeError(f"RoutingConfig.renormalize must be a bool, got {self.renormalize!r}")

        m = self.method
        if self.top_k < 1:
            raise ValueError(f"RoutingConfig.top_k must be >= 1, got {self.top_k}")
        if m is RoutingMethod.LLAMA4 and self.top_k != 1:
            raise ValueError(f"RoutingConfig.top_k must be 1 for LLAMA4 routing, got {self.top_k}")
        if m is RoutingMethod.DEEPSEEK_V3:
            if self.n_group < 1 or self.topk_group < 1:
                raise ValueError(
                    "RoutingConfig.n_group and topk_group must be >= 1 for DEEPSEEK_V3, got "
                    f"n_group={self.n_group}, topk_group={self.topk_group}"
                )
            if self.topk_group > self.n_group:
                raise ValueError(
                    f"RoutingConfig.topk_group ({self.topk_group}) must be <= n_group ({self.n_group})"
                )
            if self.n_group > 1:
                if self.topk_group > 4:
                    raise ValueError(f"RoutingConfig.topk_group must be <= 4, got {self.topk_group}")
                if self.n_group > 8:
                    raise ValueError(f"RoutingConfig.n_group must be <= 8 for grouped DEEPSEEK_V3, got {self.n_group}")
            if self.top_k > 22:
                raise ValueError(f"RoutingConfig.top_k must be <= 22 for DEEPSEEK_V3, got {self.top_k}")
        else:
            if self.n_group != 1 or self.topk_group != 1:
                raise ValueError(
                    f"RoutingConfig.n_group / topk_group: expert groups exist only for DEEPSEEK_V3; "
                    f"got n_group={self.n_group}, topk_group={self.topk_group} for {m.name}"
                )
            if self.top_k > _SOFTMAX_LIKE_MAX_K:
                raise ValueError(f"RoutingConfig.top_k must be <= {_SOFTMAX_LIKE_MAX_K} for {m.name}, got {self.top_k}")
        if self.routed_scaling_factor != 1.0 and m not in (RoutingMethod.DEEPSEEK_V3, RoutingMethod.MINIMAX2):
            raise ValueError(
                f"RoutingConfig.routed_scaling_factor: {m.name} routing does not apply a routed "
                f"scaling factor (only DEEPSEEK_V3 and MINIMAX2 do); got {self.routed_scaling_factor}. "
                "Scale the layer output instead."
            )
        always = (RoutingMethod.RENORMALIZE, RoutingMethod.RENORMALIZE_NAIVE, RoutingMethod.MINIMAX2)
        if m in always and not self.renormalize:
            raise ValueError(f"RoutingConfig.renormalize: {m.name} always renormalizes; renormalize=False is not possible")
        if m in _NEVER_RENORMALIZE and self.renormalize:
            # True is the documented default of the public signature, so it cannot mean "please
            # renormalize" here: these methods define their weights without renormalization.
            object.__setattr__(self, "renormalize", False)
        if self.num_experts is not None:
            self.check_num_experts(self.num_experts)

    @property
    def uses_bias(self) -> bool:
        """Whether the method takes a selection (correction) bias."""
        return self.method in (RoutingMethod.DEEPSEEK_V3, RoutingMethod.MINIMAX2)

    @property
    def weight_on_input(self) -> bool:
        """Llama4 multiplies the expert input (GEMM1 accumulator) by the routing weight."""
        return self.method is RoutingMethod.LLAMA4

    def check_num_experts(self, num_experts: int, *, name: str = "num_experts") -> None:
        E = num_experts
        if E < 1:
            raise ValueError(f"{name} must be >= 1, got {E}")
        if E % 4 != 0:
            raise ValueError(f"{name} must be a multiple of 4 (FlashInfer routing rule), got {E}")
        if self.top_k >= E:
            raise ValueError(f"RoutingConfig.top_k ({self.top_k}) must be < {name} ({E})")
        if E > 2048:
            raise ValueError(f"{name} must be <= 2048, got {E}")
        if self.method is RoutingMethod.DEEPSEEK_V3:
            if E % self.n_group != 0:
                raise ValueError(f"{name} ({E}) must be divisible by RoutingConfig.n_group ({self.n_group})")
            if self.n_group > 1:
                per_group = E // self.n_group
                if per_group > 32:
                    raise ValueError(
                        f"grouped DEEPSEEK_V3 allows at most 32 experts per group; {name}={E} with "
                        f"n_group={self.n_group} gives {per_group}"
                    )
                if per_group < 2:
                    raise ValueError(f"grouped DEEPSEEK_V3 needs >= 2 experts per group, got {per_group}")
                if self.top_k >= self.topk_group * per_group:
                    raise ValueError(
                        f"RoutingConfig.top_k ({self.top_k}) must be < topk_group * experts per group "
                        f"({self.topk_group} * {per_group})"
                    )
            if E <= 384 and self.top_k > 8:
                raise ValueError(
                    f"RoutingConfig.top_k must be <= 8 for DEEPSEEK_V3 with <= 384 experts, got {self.top_k}"
                )
            if E > 512:
                raise ValueError(f"DEEPSEEK_V3 routing supports at most 512 experts, got {name}={E}")

    def __repr__(self) -> str:
        parts = [f"method={self.method!r}", f"top_k={self.top_k}"]
        if self.n_group != 1 or self.topk_group != 1:
            parts += [f"n_group={self.n_group}", f"topk_group={self.topk_group}"]
        if self.routed_scaling_factor != 1.0:
            parts.append(f"routed_scaling_factor={self.routed_scaling_factor!r}")
        parts.append(f"renormalize={self.renormalize}")
        if self.num_experts is not None:
            parts.append(f"num_experts={self.num_experts}")
        return f"fm.RoutingConfig({', '.join(parts)})"


class TopK(NamedTuple):
    """Routing result: ``ids`` int32 [T, K] (global expert ids), ``weights`` fp32 [T, K]."""

    ids: torch.Tensor
    weights: torch.Tensor

    def validate(self, *, num_experts: Optional[int] = None, name: str = "topk") -> None:
        ids, w = self.ids, self.weights
        if not isinstance(ids, torch.Tensor) or not isinstance(w, torch.Tensor):
            raise TypeError(f"{name}: ids and weights must be tensors")
        if ids.dim() != 2 or w.dim() != 2 or ids.shape != w.shape:
            raise ValueError(
                f"{name}: ids and weights must both be [T, K]; got ids {tuple(ids.shape)}, weights {tuple(w.shape)}"
            )
        if ids.dtype not in (torch.int32, torch.int64, torch.int16):
            raise TypeError(f"{name}.ids must be an integer tensor (int32 preferred), got {ids.dtype}")
        if not w.is_floating_point():
            raise TypeError(f"{name}.weights must be floating point, got {w.dtype}")
        if ids.device != w.device:
            raise ValueError(f"{name}: ids on {ids.device} but weights on {w.device}")
