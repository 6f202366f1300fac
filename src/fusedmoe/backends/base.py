"""Backend protocol, the request a backend is asked to run, and shared input validation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol

import torch

from ..config import Activation, Format, TopK
from ..weights import ExpertWeights

__all__ = ["MoERequest", "Backend", "UnsupportedError", "resolve_activation_format", "validate_call"]


class UnsupportedError(ValueError):
    """A backend was asked explicitly for a combination it does not support."""


@dataclass(frozen=True)
class MoERequest:
    """What a backend must support to run one MoE configuration (no tensors)."""

    weight_format: Format
    activation_format: Format
    activation: Activation
    weight_on_input: bool = False
    has_bias: bool = False
    expert_parallel: bool = False

    @classmethod
    def from_weights(cls, weights: ExpertWeights, activation_format: Optional[Format] = None, *,
                     weight_on_input: bool = False, expert_parallel: bool = False) -> "MoERequest":
        return cls(
            weight_format=weights.format,
            activation_format=resolve_activation_format(weights.format, activation_format),
            activation=weights.activation,
            weight_on_input=weight_on_input,
            has_bias=weights.w13_bias is not None or weights.w2_bias is not None,
            expert_parallel=expert_parallel,
        )

    def describe(self) -> str:
        return (f"{self.activation.name} with {self.weight_format.name} weights x "
                f"{self.activation_format.name} activations")


class Backend(Protocol):
    name: str

    def supports(self, request: MoERequest, device: torch.device) -> Optional[str]:
        """None if supported, else the reason it is not (a sentence a user can act on)."""

    def run(self, hidden: torch.Tensor, weights: ExpertWeights, topk: TopK, *, activation_format: Format,
            local_expert_offset: int, weight_on_input: bool) -> torch.Tensor:
        """The MoE experts for already-validated inputs; returns ``[T, H]`` in hidden's dtype."""


def resolve_activation_format(weight_format: Format, activation_format: Optional[Format]) -> Format:
    if activation_format is None:
        return weight_format.natural_activation_format()
    if not isinstance(activation_format, Format):
        raise TypeError(f"activation_format must be a fm.Format or None, got {activation_format!r}")
    allowed = weight_format.allowed_activation_formats()
    if activation_format not in allowed:
        raise ValueError(
            f"activation_format={activation_format!r} is not available with {weight_format!r} weights; "
            f"expected one of {list(allowed)}"
        )
    return activation_format


def validate_call(hidden, weights: ExpertWeights, topk: TopK, *, activation: Activation,
                  local_expert_offset: int = 0, num_experts: Optional[int] = None,
                  weight_on_input: bool = False, check_ids: bool = True) -> None:
    """Shape/dtype/device checks shared by every entry point. ``check_ids`` checks the expert-id
    range, which needs the ids' values (a host sync on a GPU)."""
    if not isinstance(weights, ExpertWeights):
        raise TypeError(f"weights must be a fm.ExpertWeights, got {type(weights).__name__}")
    if not isinstance(activation, Activation):
        raise TypeError(f"activation must be a fm.Activation, got {activation!r}")
    if activation is not weights.activation:
        raise ValueError(
            f"activation={activation!r} but the weights were prepared for {weights.activation!r} "
            "(gate/up layout and padding depend on it)"
        )
    if not isinstance(hidden, torch.Tensor):
        raise TypeError(f"hidden must be a torch.Tensor, got {type(hidden).__name__}")
    if hidden.dim() != 2:
        raise ValueError(f"hidden must be [T, H], got shape {tuple(hidden.shape)}")
    if hidden.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise TypeError(f"hidden must be bfloat16, float16 or float32, got {hidden.dtype}")
    if hidden.shape[1] != weights.hidden_size:
        raise ValueError(f"hidden has H={hidden.shape[1]} but the weights expect H={weights.hidden_size}")
    if hidden.device != weights.device:
        raise ValueError(f"hidden is on {hidden.device} but the weights are on {weights.device}")
    if not isinstance(topk, TopK):
        raise TypeError(f"topk must be a fm.TopK, got {type(topk).__name__}")
    topk.validate(name="topk")
    if topk.ids.shape[0] != hidden.shape[0]:
        raise ValueError(f"topk has {topk.ids.shape[0]} tokens but hidden has {hidden.shape[0]}")
    if topk.ids.device != hidden.device:
        raise ValueError(f"topk is on {topk.ids.device} but hidden on {hidden.device}")
    if weight_on_input and topk.ids.shape[1] != 1:
        raise ValueError(f"routing weights on the input need top_k == 1 (Llama4), got top_k={topk.ids.shape[1]}")
    E_loc = weights.num_experts
    E = E_loc if num_experts is None else num_experts
    if not isinstance(local_expert_offset, int) or local_expert_offset < 0 or local_expert_offset + E_loc > E:
        raise ValueError(
            f"local_expert_offset={local_expert_offset} with {E_loc} local experts must satisfy "
            f"0 <= offset and offset + {E_loc} <= num_experts={E}"
        )
    if check_ids and topk.ids.numel():
        lo, hi = torch.stack(torch.aminmax(topk.ids)).tolist()  # one reduction, one host sync
        if lo < 0 or hi >= E:
            raise ValueError(f"topk.ids must be in [0, {E}) (num_experts), got values in [{lo}, {hi}]")
