"""Torch reference of every routing method (``docs/semantics.md`` section 2).

This is the literal statement the Triton kernel (``fusedmoe.kernels._routing``) is tested
against; the two use the same fp32 formulas in the same order.

Notation, per token (all math in fp32): ``l`` = logits row converted to fp32, ``b`` = selection
bias converted to fp32 (zeros when absent), ``σ(x) = 1 / (1 + exp(-x))``, ``S`` = the selected
set in selection order, ``topK(key)`` = the K largest keys, **ties to the lower index**.

Selection keys:

* DEFAULT, RENORMALIZE, RENORMALIZE_NAIVE, TOPK, SIGMOID, SIGMOID_RENORM, TOPK_SIGMOID, LLAMA4:
  ``key = l``. The table of semantics 2.2 selects on ``softmax(l)`` or ``σ(l)`` for some of
  these; both are strictly increasing functions of ``l``, so in exact arithmetic the selected
  set and its order are the same. Selecting on ``l`` keeps that exact: fp32 rounding of
  ``exp`` creates ties that do not exist in the logits (``σ(20) == σ(30) == 1.0`` in fp32,
  ``softmax`` underflows to 0), and the kernel's ``exp`` (an approximation on GPUs) would then
  decide ids differently from torch's.
* DEEPSEEK_V3, MINIMAX2: ``key = σ(l) + b``.

Weights ``w_i`` for ``i ∈ S``:

==================  =====================================================================
DEFAULT             ``exp(l_i - m) / Σ_{j<E} exp(l_j - m)``, ``m = max_j l_j``
RENORMALIZE         ``exp(l_i - m_S) / Σ_{j∈S} exp(l_j - m_S)``, ``m_S = max_{j∈S} l_j``
RENORMALIZE_NAIVE   ``p_i / Σ_{j∈S} p_j`` with ``p`` the DEFAULT softmax above
TOPK                ``l_i``
SIGMOID             ``σ(l_i)``
TOPK_SIGMOID        ``σ(l_i)``
LLAMA4              ``σ(l_i)`` (K = 1)
SIGMOID_RENORM      ``σ(l_i) / (Σ_{j∈S} σ(l_j) + 1e-20)`` if ``renormalize`` else ``σ(l_i)``
MINIMAX2            ``σ(l_i) / (Σ_{j∈S} σ(l_j) + 1e-20) · routed_scaling_factor``
DEEPSEEK_V3         ``σ(l_i) / (Σ_{j∈S} σ(l_j) + 1e-20) · routed_scaling_factor`` if
                    ``renormalize`` else ``σ(l_i) · routed_scaling_factor``
==================  =====================================================================

The renormalizing denominators always use ``sum + 1e-20`` (transformers and the FlashInfer
references; semantics 2.1), including SIGMOID_RENORM, whose FlashInfer kernel uses
``max(sum, 1e-20)``: the two differ only when every selected sigmoid is below ~1e-13. ``σ`` in
the weights is always computed from the logit, never as ``(σ + b) - b`` (that cancels when
``|b| ≫ σ``).

DEEPSEEK_V3 with ``n_group = G > 1``: group ``g`` holds experts ``[g·E/G, (g+1)·E/G)``; its
score is the sum of its two largest keys; the ``topk_group`` best groups are kept (ties to the
lower group); experts of the other groups are never selected (they count as ``-inf`` and lose
every tie). ``n_group = 1`` is the same computation with one group.

NaN policy (identical in the kernel): NaN logits are replaced by ``-inf`` before anything else
(so they are selected last and e.g. get weight ``σ(-inf) = 0``); a selection key or group
score that is NaN (from a NaN bias, or ``+inf + -inf``) counts as ``-inf`` for selection only.
Weights follow the formulas above, so ``+inf`` logits give NaN softmax weights, exactly as
``torch.softmax`` would. Nothing raises: the kernel cannot without a host sync.
"""

from __future__ import annotations

from typing import Optional

import torch

from ..config import RoutingConfig, RoutingMethod, TopK

__all__ = ["route_reference", "route_reference_unchecked", "check_route_args", "RENORM_EPS"]

#: Epsilon added to every renormalizing denominator (``w = s_i / (Σ s_j + RENORM_EPS)``).
RENORM_EPS = 1e-20

_NEG_INF = float("-inf")

_SELECT_ON_SIGMOID_PLUS_BIAS = (RoutingMethod.DEEPSEEK_V3, RoutingMethod.MINIMAX2)
_LOGIT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_BIAS_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def check_route_args(router_logits, config, bias) -> None:
    """The argument checks of ``route`` (shapes, dtypes, devices only: no device sync)."""
    if not isinstance(config, RoutingConfig):
        raise TypeError(f"route: config must be a fm.RoutingConfig, got {type(config).__name__}")
    if not isinstance(router_logits, torch.Tensor):
        raise TypeError(f"route: router_logits must be a tensor, got {type(router_logits).__name__}")
    if router_logits.dim() != 2:
        raise ValueError(f"route: router_logits must be 2-D [T, E], got shape {tuple(router_logits.shape)}")
    if router_logits.dtype not in _LOGIT_DTYPES:
        raise TypeError(f"route: router_logits must be float32, bfloat16 or float16, got {router_logits.dtype}")
    E = router_logits.shape[1]
    config.check_num_experts(E, name="router_logits.shape[1]")
    if config.num_experts is not None and config.num_experts != E:
        raise ValueError(
            f"route: router_logits.shape[1] ({E}) differs from RoutingConfig.num_experts ({config.num_experts})"
        )
    if bias is None:
        return
    if not config.uses_bias:
        raise ValueError(
            f"route: {config.method.name} routing takes no bias (only DEEPSEEK_V3 and MINIMAX2 do); "
            "fold it into the logits or pass bias=None"
        )
    if not isinstance(bias, torch.Tensor):
        raise TypeError(f"route: bias must be a tensor or None, got {type(bias).__name__}")
    if bias.dtype not in _BIAS_DTYPES:
        raise TypeError(f"route: bias must be float32, bfloat16 or float16, got {bias.dtype}")
    if bias.shape != (E,):
        raise ValueError(f"route: bias must have shape [E] = ({E},), got {tuple(bias.shape)}")
    if bias.device != router_logits.device:
        raise ValueError(f"route: bias is on {bias.device} but router_logits on {router_logits.device}")


def _nan_to_neg_inf(x: torch.Tensor) -> torch.Tensor:
    return torch.where(torch.isnan(x), torch.full_like(x, _NEG_INF), x)


def _stable_topk(key: torch.Tensor, k: int, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Indices [..., k] (int64) of the ``k`` largest ``key`` along the last dim, in selection order.

    Order: entries with ``valid`` first, then larger key first, then the lower index first.
    ``key`` must hold no NaN.
    """
    if valid is not None:
        key = key.masked_fill(~valid, _NEG_INF)
    # stable ascending sort of -key == descending key with ties kept in index order
    order = torch.argsort(-key, dim=-1, stable=True)
    if valid is not None:
        invalid_sorted = torch.gather(~valid, -1, order).to(torch.int32)
        order = torch.gather(order, -1, torch.argsort(invalid_sorted, dim=-1, stable=True))
    return order[..., :k]


def _grouped_valid(key: torch.Tensor, n_group: int, topk_group: int) -> torch.Tensor:
    """Bool [T, E]: experts of the ``topk_group`` best groups (group score = sum of top-2 keys)."""
    T, E = key.shape
    grouped = key.view(T, n_group, E // n_group)
    top2 = torch.sort(grouped, dim=-1, descending=True).values[..., :2]
    group_score = _nan_to_neg_inf(top2[..., 0] + top2[..., 1])  # [T, G]
    kept = _stable_topk(group_score, topk_group)  # [T, topk_group]
    group_mask = torch.zeros(T, n_group, dtype=torch.bool, device=key.device)
    group_mask.scatter_(1, kept, True)
    return group_mask.repeat_interleave(E // n_group, dim=1)


def route_reference(
    router_logits: torch.Tensor,
    config: RoutingConfig,
    bias: Optional[torch.Tensor] = None,
) -> TopK:
    """Route with plain torch ops; formulas, tie-break and NaN policy in the module docstring.

    ``router_logits`` [T, E] (fp32 / bf16 / fp16, converted to fp32), ``bias`` [E] or None (used by
    DEEPSEEK_V3 and MINIMAX2 only; None means zeros). Returns ``TopK(ids int32 [T, K],
    weights fp32 [T, K])`` with the slots in selection order. Arguments are checked as by
    :func:`fusedmoe.routing.route`.
    """
    check_route_args(router_logits, config, bias)
    return route_reference_unchecked(router_logits, config, bias)


def route_reference_unchecked(
    router_logits: torch.Tensor,
    config: RoutingConfig,
    bias: Optional[torch.Tensor] = None,
) -> TopK:
    """:func:`route_reference` without the argument checks (for callers that made them)."""
    m = config.method
    K = config.top_k
    l = _nan_to_neg_inf(router_logits.to(torch.float32))
    T, E = l.shape

    if m in _SELECT_ON_SIGMOID_PLUS_BIAS:
        sig = torch.sigmoid(l)
        b = torch.zeros(E, dtype=torch.float32, device=l.device) if bias is None else bias.to(torch.float32)
        key = _nan_to_neg_inf(sig + b)
        n_group = config.n_group if m is RoutingMethod.DEEPSEEK_V3 else 1
        valid = _grouped_valid(key, n_group, config.topk_group) if n_group > 1 else None
        idx = _stable_topk(key, K, valid)
        s = torch.gather(sig, 1, idx)
        if m is RoutingMethod.MINIMAX2 or config.renormalize:
            w = s / (s.sum(dim=-1, keepdim=True) + RENORM_EPS)
        else:
            w = s
        w = w * config.routed_scaling_factor
        return TopK(idx.to(torch.int32), w)

    idx = _stable_topk(l, K)
    ls = torch.gather(l, 1, idx)
    if m is RoutingMethod.DEFAULT or m is RoutingMethod.RENORMALIZE_NAIVE:
        mx = l.max(dim=-1, keepdim=True).values
        denom = torch.exp(l - mx).sum(dim=-1, keepdim=True)
        p = torch.exp(ls - mx) / denom
        w = p if m is RoutingMethod.DEFAULT else p / p.sum(dim=-1, keepdim=True)
    elif m is RoutingMethod.RENORMALIZE:
        e = torch.exp(ls - ls[:, :1])  # the first selected logit is the largest
        w = e / e.sum(dim=-1, keepdim=True)
    elif m is RoutingMethod.TOPK:
        w = ls
    elif m in (RoutingMethod.SIGMOID, RoutingMethod.TOPK_SIGMOID, RoutingMethod.LLAMA4):
        w = torch.sigmoid(ls)
    elif m is RoutingMethod.SIGMOID_RENORM:
        s = torch.sigmoid(ls)
        w = s / (s.sum(dim=-1, keepdim=True) + RENORM_EPS) if config.renormalize else s
    else:  # a RoutingMethod added to config.py without a routing formula here
        raise NotImplementedError(f"route_reference: no formula for {m!r}")
    return TopK(idx.to(torch.int32), w.contiguous())
