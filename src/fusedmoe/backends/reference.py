"""The executable spec: ``reference_moe`` (torch, float32 on dequantized operands) and the
``reference`` backend. Any device, slow (a Python loop over the experts hit).

Pipeline (semantics.md 1.1 and 7), per slot (t, k) whose expert e is local:

1. ``a = Q(hidden[t])`` in the activation format (static ``weights.input_scale`` if present,
   else dynamic; quantized once per token), dequantized to fp32.
2. ``h = a @ dequant(W13[e])ᵀ``; Llama4 weight-on-input: ``h *= w[t, k]``; ``h += b13[e]``.
3. ``z = act(h)`` in fp32, then **rounded to hidden's dtype**, then, if GEMM2's input is
   quantized, quantize-dequantized in the activation format (FP8 per-tensor: static
   ``weights.intermediate_scale`` or one dynamic scale over all local rows of this call).
4. ``y = z @ dequant(W2[e])ᵀ + b2[e]``, times ``w[t, k]`` (unless weight-on-input).
5. ``out[t] = Σ_k y`` in fp32, cast to hidden's dtype. Non-local experts contribute nothing.
"""

from __future__ import annotations

from typing import Optional

import torch

from ..activations import apply_activation
from ..config import Activation, Format, TopK
from ..formats import dequantize, quantize
from ..weights import ExpertWeights
from .base import MoERequest, resolve_activation_format, validate_call

__all__ = ["reference_moe", "ReferenceBackend", "quantize_dequantize_activation"]


def quantize_dequantize_activation(x: torch.Tensor, fmt: Format, static_scale: Optional[torch.Tensor]) -> torch.Tensor:
    """``dequantize(quantize(x))`` in activation format ``fmt`` (fp32 result). ``static_scale``
    is in the dequant convention (FP8_TENSOR ``x ≈ q*s``; NVFP4 ``s = 1/g``)."""
    if fmt is Format.BF16:
        return x.float()
    if x.shape[0] == 0:
        return x.float()
    if fmt is Format.FP8_TENSOR:
        q = quantize(x, fmt, scale=static_scale)
    elif fmt is Format.NVFP4:
        q = quantize(x, fmt, global_scale=None if static_scale is None else 1.0 / static_scale)
    else:
        q = quantize(x, fmt)
    return dequantize(q, torch.float32)


def _expert(q, e: int) -> torch.Tensor:
    return dequantize(q.index_select0(slice(e, e + 1)), torch.float32)[0]


@torch.no_grad()
def reference_moe(
    hidden: torch.Tensor,
    weights: ExpertWeights,
    topk: TopK,
    *,
    activation: Activation,
    activation_format: Optional[Format] = None,
    local_expert_offset: int = 0,
    num_experts: Optional[int] = None,
    weight_on_input: bool = False,
) -> torch.Tensor:
    """The MoE experts exactly as specified (module docstring). Returns ``[T, H]`` in hidden's
    dtype. ``topk``: global ids and weights (used as given); experts outside
    ``[local_expert_offset, local_expert_offset + weights.num_experts)`` contribute nothing."""
    validate_call(hidden, weights, topk, activation=activation, local_expert_offset=local_expert_offset,
                  num_experts=num_experts, weight_on_input=weight_on_input)
    act_fmt = resolve_activation_format(weights.format, activation_format)
    T, H = hidden.shape
    out = torch.zeros(T, H, dtype=torch.float32, device=hidden.device)
    if T == 0:
        return out.to(hidden.dtype)
    E_loc = weights.num_experts
    ids = topk.ids.long() - local_expert_offset
    w = topk.weights.float()
    a1, a2 = weights.static_scales_for(act_fmt)
    a = quantize_dequantize_activation(hidden, act_fmt, a1)

    local = (ids >= 0) & (ids < E_loc)
    tok, slot = local.nonzero(as_tuple=True)
    if tok.numel() == 0:
        return out.to(hidden.dtype)
    exp = ids[tok, slot]
    sw = w[tok, slot]
    # GEMM1 + activation for every local slot (rows ordered by expert, then token)
    order = torch.argsort(exp * (T * topk.ids.shape[1]) + tok * topk.ids.shape[1] + slot)
    tok, slot, exp, sw = tok[order], slot[order], exp[order], sw[order]
    inter = torch.empty(tok.numel(), weights.padded_intermediate_size, dtype=torch.float32, device=hidden.device)
    experts_hit = torch.unique_consecutive(exp).tolist()
    bounds = {}
    start = 0
    counts = torch.bincount(exp, minlength=E_loc).tolist()
    for e in experts_hit:
        n = counts[e]
        rows = slice(start, start + n)
        bounds[e] = rows
        start += n
        h = a[tok[rows]] @ _expert(weights.w13, e).t()
        if weight_on_input:
            h = h * sw[rows, None]
        if weights.w13_bias is not None:
            h = h + weights.w13_bias[e]
        inter[rows] = apply_activation(h, activation, weights.act_params)
    inter = inter.to(hidden.dtype)
    inter = quantize_dequantize_activation(inter, act_fmt, a2)
    for e in experts_hit:
        rows = bounds[e]
        y = inter[rows] @ _expert(weights.w2, e).t()
        if weights.w2_bias is not None:
            y = y + weights.w2_bias[e]
        if not weight_on_input:
            y = y * sw[rows, None]
        out.index_add_(0, tok[rows], y)
    return out.to(hidden.dtype)


class ReferenceBackend:
    """Torch reference; supports every combination the spec defines, on any device."""

    name = "reference"

    def supports(self, request: MoERequest, device: torch.device) -> Optional[str]:
        return None

    def run(self, hidden, weights, topk, *, activation_format, local_expert_offset, weight_on_input, num_experts=None):
        return reference_moe(hidden, weights, topk, activation=weights.activation, activation_format=activation_format,
                             local_expert_offset=local_expert_offset, num_experts=num_experts,
                             weight_on_input=weight_on_input)
