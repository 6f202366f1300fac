"""Integrations with other libraries (optional dependencies, imported lazily).

``fusedmoe.integrations.hf``: Hugging Face transformers 5.x: fusedmoe as an experts
implementation (``ExpertsInterface``), Llama-4 block patching, and model quantization.
"""

from .hf import (
    IMPLEMENTATION_NAME,
    UnsupportedModelError,
    clear_cache,
    describe_experts,
    disable,
    enable,
    experts_forward,
    find_experts,
    is_registered,
    load_checkpoint_experts,
    patch_llama4_moe,
    prepare_experts,
    quantize_model,
    register,
    set_expert_weights,
)

__all__ = [
    "IMPLEMENTATION_NAME",
    "UnsupportedModelError",
    "clear_cache",
    "describe_experts",
    "disable",
    "enable",
    "experts_forward",
    "find_experts",
    "is_registered",
    "load_checkpoint_experts",
    "patch_llama4_moe",
    "prepare_experts",
    "quantize_model",
    "register",
    "set_expert_weights",
]
