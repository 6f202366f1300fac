"""Torch reference of the expert activations (semantics.md 4.2), fp32 in, fp32 out."""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from .config import Activation, ActivationParams

__all__ = ["apply_activation"]


def apply_activation(h: torch.Tensor, activation: Activation, params: Optional[ActivationParams] = None) -> torch.Tensor:
    """``h``: GEMM1 output ``[..., M]``; gated activations split it into (gate, up) halves."""
    if activation.is_gated:
        half = h.shape[-1] // 2
        gate, up = h[..., :half], h[..., half:]
        if activation is Activation.SWIGLU:
            return F.silu(gate) * up
        if activation is Activation.GEGLU:
            return F.gelu(gate) * up
        p = params or ActivationParams()
        g = torch.clamp(gate, max=p.limit)
        u = torch.clamp(up, min=-p.limit, max=p.limit)
        return g * torch.sigmoid(p.alpha * g) * (u + p.beta)
    if activation is Activation.RELU2:
        r = F.relu(h)
        return r * r
    if activation is Activation.GELU:
        return F.gelu(h)
    if activation is Activation.SILU:
        return F.silu(h)
    if activation is Activation.RELU:
        return F.relu(h)
    if activation is Activation.IDENTITY:
        return h
    raise ValueError(f"unknown activation {activation!r}")
