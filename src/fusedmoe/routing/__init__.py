"""Routing: router logits -> top-k expert ids and weights (``docs/semantics.md`` section 2),
and the packed routed format (section 3).

:func:`route` validates and dispatches: CUDA tensors run the Triton kernel, everything else the
torch reference :func:`route_reference`. Both follow the formulas, tie-break (lower expert index
wins) and NaN policy written in ``fusedmoe.routing.reference``.
"""

from __future__ import annotations

from typing import Optional

import torch

from ..config import RoutingConfig, TopK
from .pack import MAX_PACKED_EXPERT_ID, pack_topk, unpack_topk
from .reference import RENORM_EPS, check_route_args, route_reference, route_reference_unchecked

__all__ = [
    "route",
    "route_reference",
    "pack_topk",
    "unpack_topk",
    "MAX_PACKED_EXPERT_ID",
    "RENORM_EPS",
]

_IMPLS = ("auto", "reference", "triton")


def _use_triton(logits: torch.Tensor) -> bool:
    """The ``impl="auto"`` choice: the Triton kernel for CUDA tensors, the reference otherwise."""
    return logits.is_cuda


def route(
    router_logits: torch.Tensor,
    config: RoutingConfig,
    bias: Optional[torch.Tensor] = None,
    *,
    impl: str = "auto",
) -> TopK:
    """Select the top-K experts of every token and their weights.

    ``router_logits`` [T, E] float32 / bfloat16 / float16; ``config`` a :class:`RoutingConfig`
    (``config.num_experts``, when set, must equal E; E is checked with
    ``config.check_num_experts``); ``bias`` [E] float on the same device, the selection
    (correction) bias of DEEPSEEK_V3 and MINIMAX2: None means zeros, and passing one to any other
    method is a ``ValueError``.

    Returns ``TopK(ids int32 [T, K], weights fp32 [T, K])``, slots in selection order (largest
    selection key first, ties to the lower expert index). The formulas per method are in
    ``fusedmoe.routing.reference``; in short, with ``σ`` the sigmoid and ``S`` the selected set:
    DEFAULT ``softmax(l)_i``; RENORMALIZE ``softmax(l[S])_i``; RENORMALIZE_NAIVE
    ``p_i / Σ_S p_j`` with ``p = softmax(l)``; TOPK ``l_i``; SIGMOID, TOPK_SIGMOID, LLAMA4
    ``σ(l_i)``; SIGMOID_RENORM ``σ_i / (Σ_S σ_j + 1e-20)`` (``σ_i`` if not ``renormalize``);
    MINIMAX2 and DEEPSEEK_V3 select on ``σ(l) + b`` (DEEPSEEK_V3 within the ``topk_group`` best
    groups when ``n_group > 1``) and weigh ``σ_i / (Σ_S σ_j + 1e-20) · routed_scaling_factor``
    (DEEPSEEK_V3 without ``renormalize``: ``σ_i · routed_scaling_factor``). NaN logits count as
    ``-inf``.

    ``impl``: ``"auto"`` (Triton for CUDA tensors, the reference otherwise), ``"reference"``, or
    ``"triton"`` (on CPU tensors only under ``TRITON_INTERPRET=1``; a ``RuntimeError`` otherwise).
    Validation reads only shapes, dtypes and devices, so the Triton path is CUDA-graph capturable.
    """
    check_route_args(router_logits, config, bias)
    if impl not in _IMPLS:
        raise ValueError(f"route: impl must be one of {_IMPLS}, got {impl!r}")
    if impl == "reference" or (impl == "auto" and not _use_triton(router_logits)):
        return route_reference_unchecked(router_logits, config, bias)
    from .triton_routing import route_triton

    return route_triton(router_logits, config, bias)
