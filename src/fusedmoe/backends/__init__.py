"""Backend registry: what each backend supports, and ``select`` with the reason for its choice.

Order of preference (fastest first): ``triton`` on CUDA devices, ``reference`` everywhere.
A FlashInfer (Blackwell) backend slots in ahead of ``triton`` when it exists.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple, Union

import torch

from ..weights import ExpertWeights
from .base import Backend, MoERequest, UnsupportedError
from .reference import ReferenceBackend, reference_moe
from .triton import TritonBackend

__all__ = ["available", "get", "select", "MoERequest", "UnsupportedError", "reference_moe", "describe"]

_REGISTRY: Dict[str, Backend] = {b.name: b for b in (TritonBackend(), ReferenceBackend())}
_PREFERENCE = ("triton", "reference")


def available() -> List[str]:
    """Names of all registered backends (whether or not they run on this machine)."""
    return list(_REGISTRY)


def get(name: str) -> Backend:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; available: {available()}") from None


def _as_request(config) -> MoERequest:
    """MoERequest, ExpertWeights, a FusedMoE layer, or a RoutingConfig (routing does not change
    the choice today, so it stands for the common BF16 SwiGLU request)."""
    from ..config import Activation, Format, RoutingConfig

    if isinstance(config, MoERequest):
        return config
    if isinstance(config, ExpertWeights):
        return MoERequest.from_weights(config)
    if isinstance(config, RoutingConfig):
        return MoERequest(Format.BF16, Format.BF16, Activation.SWIGLU, weight_on_input=config.weight_on_input)
    weights = getattr(config, "weights", None)
    if isinstance(weights, ExpertWeights):  # a FusedMoE layer
        return MoERequest.from_weights(weights, getattr(config, "activation_format", None))
    raise TypeError("select() takes a fm.backends.MoERequest, fm.ExpertWeights, fm.FusedMoE or "
                    f"fm.RoutingConfig, got {type(config).__name__}")


def select(config: Union[MoERequest, ExpertWeights], device=None) -> Tuple[str, str]:
    """Pick the fastest backend that supports ``config`` on ``device``; returns (name, reason)."""
    req = _as_request(config)
    if device is not None:
        dev = torch.device(device)
    elif isinstance(config, ExpertWeights):
        dev = config.device
    elif isinstance(getattr(config, "weights", None), ExpertWeights):
        dev = config.weights.device
    else:
        dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    skipped = []
    for name in _PREFERENCE:
        why_not = _REGISTRY[name].supports(req, dev)
        if why_not is None and name == "triton" and dev.type != "cuda":
            why_not = "runs on CPU only in Triton's interpreter, which is for testing (ask for it explicitly)"
        if why_not is None:
            reason = f"{name}: fastest backend supporting {req.describe()} on {dev}"
            if skipped:
                reason += " (skipped " + "; ".join(skipped) + ")"
            return name, reason
        skipped.append(f"{name}: {why_not}")
    raise UnsupportedError(f"no backend supports {req.describe()} on {dev}: " + "; ".join(skipped))


def resolve(backend: str, request: MoERequest, device) -> Backend:
    """``backend="auto"`` -> select(); an explicit name must support the request or it raises."""
    if backend == "auto":
        return _REGISTRY[select(request, device)[0]]
    b = get(backend)
    why_not = b.supports(request, torch.device(device))
    if why_not is not None:
        raise UnsupportedError(f"backend {backend!r} does not support {request.describe()} on {device}: {why_not}")
    return b


def describe(device=None) -> Dict[str, Optional[str]]:
    """Per backend: None if it can run on ``device`` at all, else why not (for ``fusedmoe info``)."""
    from ..config import Activation, Format

    dev = torch.device(device or "cpu")
    probe = MoERequest(Format.BF16, Format.BF16, Activation.SWIGLU)
    return {name: b.supports(probe, dev) for name, b in _REGISTRY.items()}
