"""Expert weight preparation (layouts, gate/up order, quantization, alignment padding) and
checkpoint loaders (ModelOpt FP8 / NVFP4, compressed-tensors FP8, DeepSeek/MiniMax FP8 block,
gpt-oss MXFP4)."""

from .expert_weights import ExpertWeights, default_alignment, padded_intermediate, round_up
from .loaders import (
    CHECKPOINT_FORMATS,
    CheckpointError,
    detect_checkpoint_format,
    load_bf16_experts,
    load_compressed_tensors_fp8_experts,
    load_experts,
    load_experts_from_safetensors,
    load_fp8_block_experts,
    load_gpt_oss_mxfp4_experts,
    load_modelopt_fp8_experts,
    load_modelopt_nvfp4_experts,
    safetensors_state_dict,
)

__all__ = [
    "ExpertWeights",
    "default_alignment",
    "padded_intermediate",
    "round_up",
    "CHECKPOINT_FORMATS",
    "CheckpointError",
    "detect_checkpoint_format",
    "load_bf16_experts",
    "load_compressed_tensors_fp8_experts",
    "load_experts",
    "load_experts_from_safetensors",
    "load_fp8_block_experts",
    "load_gpt_oss_mxfp4_experts",
    "load_modelopt_fp8_experts",
    "load_modelopt_nvfp4_experts",
    "safetensors_state_dict",
]
