"""Launcher of the Triton routing kernel (``fusedmoe.kernels._routing.routing_kernel``).

Inputs are assumed validated by :func:`fusedmoe.routing.route`. The launch reads no tensor
value on the host (no device sync), so it can be captured in a CUDA graph. The kernel module is
imported on first use: ``triton.jit`` decides at decoration time whether it runs in the
interpreter (``TRITON_INTERPRET=1``), which is what runs it on CPU tensors.
"""

from __future__ import annotations

from typing import Optional

import torch

from ..config import RoutingConfig, RoutingMethod, TopK
from ..kernels._host import launch, next_pow2

__all__ = ["route_triton", "triton_can_run"]


_KERNEL = None


def _kernel():
    global _KERNEL
    if _KERNEL is None:
        from ..kernels._routing import routing_kernel

        _KERNEL = routing_kernel
    return _KERNEL


def _is_interpreted(kernel) -> bool:
    """Whether ``kernel`` and Triton's own ``@triton.jit`` library functions (``tl.max``,
    ``tl.sum``, ... are jitted too) were all created in interpreter mode."""
    try:
        import triton.language as tl
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:  # pragma: no cover - layout of older / newer Triton releases
        return False
    return isinstance(kernel, InterpretedFunction) and isinstance(tl.max, InterpretedFunction)


def triton_can_run(device: torch.device) -> bool:
    """Whether the routing kernel can run on tensors of ``device``: CUDA (or ROCm) devices, or
    any device under Triton's interpreter, which needs ``TRITON_INTERPRET=1`` in the environment
    before ``triton`` is first imported (``triton.jit`` reads it when decorating, and Triton's
    ``tl.max`` / ``tl.sum`` are decorated when ``triton`` is imported)."""
    try:
        kernel = _kernel()
    except ImportError:
        return False
    return torch.device(device).type == "cuda" or _is_interpreted(kernel)


def _num_warps(n: int) -> int:
    return 1 if n <= 64 else 2 if n <= 256 else 4 if n <= 1024 else 8


def route_triton(router_logits: torch.Tensor, config: RoutingConfig, bias: Optional[torch.Tensor] = None) -> TopK:
    """Route with the Triton kernel: same result as ``route_reference`` (ids identical, weights to
    fp32 rounding). ``router_logits`` [T, E] (any strides), ``bias`` [E] or None.

    Returns ``TopK(ids int32 [T, K], weights fp32 [T, K])``; T = 0 returns empty tensors without
    a launch.
    """
    T, E = router_logits.shape
    K = config.top_k
    dev = router_logits.device
    ids = torch.empty((T, K), dtype=torch.int32, device=dev)
    weights = torch.empty((T, K), dtype=torch.float32, device=dev)
    if T == 0:
        return TopK(ids, weights)
    if not triton_can_run(dev):
        raise RuntimeError(
            f"fusedmoe routing: the Triton kernel cannot run on {dev} tensors; it needs a CUDA "
            "device, or Triton's CPU interpreter: TRITON_INTERPRET=1 set in the environment "
            "before triton is first imported. Use impl='reference' otherwise."
        )
    m = config.method
    n_group = config.n_group if m is RoutingMethod.DEEPSEEK_V3 else 1
    topk_group = config.topk_group if n_group > 1 else 1
    renorm = config.renormalize or m is RoutingMethod.MINIMAX2
    has_bias = bias is not None and config.uses_bias
    block_g = next_pow2(n_group)
    block_gs = next_pow2(E // n_group)
    launch(_kernel(), (T,),
        router_logits,
        bias if has_bias else router_logits,
        ids,
        weights,
        router_logits.stride(0),
        router_logits.stride(1),
        bias.stride(0) if has_bias else 0,
        float(config.routed_scaling_factor),
        E=E,
        K=K,
        METHOD=m.value,
        N_GROUP=n_group,
        TOPK_GROUP=topk_group,
        RENORM=renorm,
        HAS_BIAS=has_bias,
        BLOCK_G=block_g,
        BLOCK_GS=block_gs,
        BLOCK_K=next_pow2(K),
        num_warps=_num_warps(block_g * block_gs),
    )
    return TopK(ids, weights)


