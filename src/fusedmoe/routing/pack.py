"""Packed routed format: one int32 per (token, slot) (``docs/semantics.md`` section 3).

``packed = (id << 16) | (bf16_bits(w) & 0xFFFF)``: the high 16 bits hold the signed int16 global
expert id, the low 16 bits the bfloat16 bit pattern of the weight. It is the little-endian image
of FlashInfer's ``PackedScoreIdx<bf16> { bf16 score; int16_t idx; }``.

Unlike SGLang's packer, the weight bits are masked with ``0xFFFF`` before the OR, so a negative
weight (sign bit set, which sign-extends to all high bits in an int16 -> int32 conversion) cannot
corrupt the id.
"""

from __future__ import annotations

import torch

from ..config import TopK

__all__ = ["pack_topk", "unpack_topk", "MAX_PACKED_EXPERT_ID"]

#: Largest expert id the packed format can hold (int16).
MAX_PACKED_EXPERT_ID = 32767

_INT_DTYPES = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)


def pack_topk(ids: torch.Tensor, weights: torch.Tensor, *, check_ids: bool = True) -> torch.Tensor:
    """Pack ``ids`` [T, K] (integer) and ``weights`` [T, K] (float) into int32 [T, K].

    ``packed = (ids << 16) | (weights.to(bfloat16).view(int16) & 0xFFFF)``; the weight is rounded
    to bfloat16 (round to nearest even). ``check_ids`` rejects ids outside ``[0, 32767]`` with a
    ``ValueError``; that check reads the ids on the host (one device sync), pass
    ``check_ids=False`` inside a CUDA graph, where out-of-range ids then wrap silently.
    """
    if not isinstance(ids, torch.Tensor) or not isinstance(weights, torch.Tensor):
        raise TypeError("pack_topk: ids and weights must be tensors")
    if ids.dtype not in _INT_DTYPES:
        raise TypeError(f"pack_topk: ids must be an integer tensor, got {ids.dtype}")
    if not weights.is_floating_point():
        raise TypeError(f"pack_topk: weights must be a floating-point tensor, got {weights.dtype}")
    if ids.dim() != 2 or ids.shape != weights.shape:
        raise ValueError(
            f"pack_topk: ids and weights must both be [T, K]; got ids {tuple(ids.shape)}, "
            f"weights {tuple(weights.shape)}"
        )
    if ids.device != weights.device:
        raise ValueError(f"pack_topk: ids on {ids.device} but weights on {weights.device}")
    if check_ids and ids.numel() > 0:
        lo, hi = torch.stack(torch.aminmax(ids)).tolist()
        if lo < 0 or hi > MAX_PACKED_EXPERT_ID:
            bad = lo if lo < 0 else hi
            raise ValueError(
                f"pack_topk: expert ids must be in [0, {MAX_PACKED_EXPERT_ID}] for the packed format, got {bad}"
            )
    id_bits = ids.to(torch.int32) << 16
    w_bits = weights.to(torch.bfloat16).contiguous().view(torch.int16).to(torch.int32) & 0xFFFF
    return id_bits | w_bits


def unpack_topk(packed: torch.Tensor) -> TopK:
    """Inverse of :func:`pack_topk`: ``ids = packed >> 16`` (arithmetic), int32; ``weights`` =
    the bfloat16 in the low 16 bits, returned as fp32 (exact)."""
    if not isinstance(packed, torch.Tensor):
        raise TypeError("unpack_topk: packed must be a tensor")
    if packed.dtype != torch.int32:
        raise TypeError(f"unpack_topk: packed must be int32, got {packed.dtype}")
    if packed.dim() != 2:
        raise ValueError(f"unpack_topk: packed must be [T, K], got shape {tuple(packed.shape)}")
    ids = packed >> 16
    low = packed & 0xFFFF  # in [0, 65535]
    signed_low = (low ^ 0x8000) - 0x8000  # same 16 bits as a value in [-32768, 32767]
    weights = signed_low.to(torch.int16).view(torch.bfloat16).to(torch.float32)
    return TopK(ids, weights)
