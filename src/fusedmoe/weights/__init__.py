"""Expert weight preparation (layouts, gate/up order, quantization, alignment padding)."""

from .expert_weights import ExpertWeights, default_alignment, round_up

__all__ = ["ExpertWeights", "default_alignment", "round_up"]
