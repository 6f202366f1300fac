"""fusedmoe: fused Mixture-of-Experts layers for LLM inference (PyTorch + Triton).

Public API (stable names; see DESIGN.md): enums and configs, routing, formats, weight
preparation, the reference and the fused layer, and the backend registry.
"""

from . import backends
from .backends.reference import reference_moe
from .config import Activation, ActivationParams, Format, RoutingConfig, RoutingMethod, TopK
from .formats import QuantizedTensor, dequantize, quantize
from .layer import FusedMoE, fused_moe
from . import distributed, integrations  # noqa: E402  (transformers / torch.distributed: imported lazily inside)
from .integrations import quantize_model
from .routing import pack_topk, route, unpack_topk
from .weights import ExpertWeights, load_experts

__version__ = "0.1.0"

__all__ = [
    "Activation",
    "ActivationParams",
    "ExpertWeights",
    "Format",
    "FusedMoE",
    "QuantizedTensor",
    "RoutingConfig",
    "RoutingMethod",
    "TopK",
    "backends",
    "distributed",
    "integrations",
    "load_experts",
    "quantize_model",
    "dequantize",
    "fused_moe",
    "pack_topk",
    "quantize",
    "reference_moe",
    "route",
    "unpack_topk",
]
