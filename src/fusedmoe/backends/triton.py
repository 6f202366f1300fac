"""The ``triton`` backend: fused Triton kernels (align, GEMM1 + activation, GEMM2 + combine)."""

from __future__ import annotations

import os
from typing import Optional

import torch

from ..config import Format
from .base import MoERequest

__all__ = ["TritonBackend", "run_weights"]

# Every weight format, each with every activation format of Format.allowed_activation_formats()
# (NVFP4 / MXFP4 / MXFP8 are dequantized in registers: Hopper has no FP4 or micro-scaled MMA).
_WEIGHT_FORMATS = (Format.BF16, Format.FP8_TENSOR, Format.FP8_CHANNEL, Format.FP8_BLOCK, Format.NVFP4,
                   Format.MXFP4, Format.MXFP8)


def _interpreter() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


class TritonBackend:
    name = "triton"

    def supports(self, request: MoERequest, device: torch.device) -> Optional[str]:
        device = torch.device(device)
        if device.type != "cuda" and not _interpreter():
            return f"needs a CUDA device (or TRITON_INTERPRET=1 for testing), got {device.type}"
        import importlib.util

        if importlib.util.find_spec("triton") is None:  # pragma: no cover - triton is a dependency
            return "triton is not installed"
        if request.weight_format not in _WEIGHT_FORMATS:
            return (f"{request.weight_format.name} weights are not implemented in the triton backend yet "
                    f"(supported: {', '.join(f.name for f in _WEIGHT_FORMATS)})")
        if request.activation_format not in request.weight_format.allowed_activation_formats():
            return (f"{request.activation_format.name} activations are not defined for "
                    f"{request.weight_format.name} weights")
        from .triton_moe import device_problem

        return device_problem(device)

    def run(self, hidden, weights, topk, *, activation_format, local_expert_offset, weight_on_input, num_experts=None):
        return run_weights(hidden, weights, topk, activation_format=activation_format,
                           local_expert_offset=local_expert_offset, weight_on_input=weight_on_input)


def run_weights(hidden, weights, topk, *, activation_format, local_expert_offset=0, weight_on_input=False,
                config=None):
    """``triton_experts`` on an ``ExpertWeights`` (the one place that unpacks it; the benchmark
    and the tuner call this too). ``config`` overrides the kernel configuration."""
    from .triton_moe import triton_experts

    # the stored static scales belong to the weight format's own activation format only
    a1, a2 = weights.static_scales_for(activation_format)
    return triton_experts(
        hidden,
        weights.w13,
        weights.w2,
        topk.ids if topk.ids.dtype == torch.int32 else topk.ids.to(torch.int32),
        topk.weights if topk.weights.dtype == torch.float32 else topk.weights.float(),
        activation=weights.activation,
        act_params=weights.act_params,
        act_format=activation_format,
        intermediate_size_padded=weights.padded_intermediate_size,
        w13_bias=weights.w13_bias,
        w2_bias=weights.w2_bias,
        a1_scale=a1,
        a2_scale=a2,
        local_expert_offset=local_expert_offset,
        weight_on_input=weight_on_input,
        config=config,
    )
