"""Tensor parallelism (TP) of the experts: the intermediate dimension I is split across ranks.

Rank r holds, for every expert, the rows ``[a_r, b_r)`` of each GEMM1 half (gate and up
separately when gated) and the same columns of GEMM2; its partial output
``Σ_k w · W2[:, a:b] · act(W1[a:b] · x)`` summed over the ranks (an fp32 all-reduce) is the full
layer, because the activation acts element-wise along I. Every rank passes the same tokens.

Two ways to get a rank's shard:

* **from float** (:func:`shard_float_weights`, :meth:`TensorParallelMoE.from_float`): slice the
  float ``w13 [E, 2I | I, H]`` (per half) and ``w2 [E, H, I]``, then ``fm.ExpertWeights.from_float``
  on the slice: every format; each shard is padded to the kernel alignment on its own
  (semantics.md 8: shard sizes such as 96, 232 or 336 pad per shard) and quantized on its own,
  so per-tensor / per-row-of-w2 / 128x128-block scales are those of the shard (equal to the
  unsharded layer within quantization rounding, like an engine that quantizes at load time).
* **from prepared, possibly quantized weights** (:func:`shard_expert_weights`,
  :meth:`TensorParallelMoE.from_weights`): slice the stored values and their scales; the
  dequantized shard is bit-identical to the corresponding slice of the full weights, for every
  format. A shard boundary that cuts a scale block (FP8 128x128 blocks when ``a`` or ``b`` is
  not a multiple of 128, MX 32-column groups, NVFP4 16-column groups of GEMM2) is handled by
  widening the shard to whole blocks ``[A, B)`` (``A = a // g * g``, ``B = ceil(b / g) * g``)
  and zeroing the rows/columns outside ``[a, b)``: a cut block keeps its scale (semantics.md 5.5)
  and zero rows contribute exactly nothing (``act(0) = 0`` resp. ``act(0) · 0 = 0``, as padding,
  semantics.md 8.2). The cost is at most one block of extra rows at each end of the shard.

Shard bounds (:func:`intermediate_shards`) default to the engines' even split of I; with
``granularity`` set to the scale block (:func:`shard_granularity`, 128 for FP8_BLOCK) they fall
on the block grid instead (shard sizes differ by at most one block): no block is cut, no shard is
widened, and per-shard quantization from float reproduces the unsharded 128x128 blocks and 1x128
activation groups exactly.

GEMM2's bias (``w2_bias``) is added once: it stays on rank 0 only. GEMM1's bias is sliced with
the rows.

Numerics: each rank's partial output is rounded once to hidden's dtype before the fp32 sum. When
GEMM2's input is re-quantized with a *dynamic* scale (FP8 per tensor / per token / 1x128 groups,
MXFP8), each rank computes that scale over its own slice of the intermediate, as every TP engine
does, so quantized-activation results agree with the unsharded layer within that re-quantization
rounding; BF16-activation paths (BF16, NVFP4 and MXFP4 weights by default) and static scales
agree to the output rounding.
"""

from __future__ import annotations

from typing import List, NamedTuple, Optional, Tuple, Union

import torch

from ..config import Activation, ActivationParams, Format, RoutingConfig, TopK
from ..formats import QuantizedTensor, pack_fp4, quantize_weight, unpack_fp4
from ..layer import FusedMoE
from ..weights import ExpertWeights
from ..weights.expert_weights import default_alignment, round_up
from ._comm import (LAYER_FIELDS, GroupInfo, all_reduce_sum, check_same, gather_build_status, group_info,
                    layer_fields, meta_device)

__all__ = ["TensorParallelMoE", "FloatShard", "intermediate_shards", "shard_float_weights", "shard_expert_weights",
           "shard_granularity"]


# --- shard bounds --------------------------------------------------------------------------------

def intermediate_shards(intermediate_size: int, world_size: int, *, granularity: int = 1) -> List[Tuple[int, int]]:
    """``[a_r, b_r)`` of the intermediate dimension for every rank: contiguous and as even as
    possible in units of ``granularity`` rows (the first ranks get one unit more; the last shard
    ends at ``intermediate_size``).

    ``granularity=1`` is the engines' even split (``I / world_size``). A scale-block granularity
    (:func:`shard_granularity`: 128 for FP8_BLOCK) puts every bound on the block grid, so no
    block is cut: :func:`shard_expert_weights` then needs no widening and per-shard quantization
    from float reproduces the unsharded blocks. ValueError if a rank would get nothing.
    """
    for name, v in (("intermediate_size", intermediate_size), ("world_size", world_size),
                    ("granularity", granularity)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    units = -(-intermediate_size // granularity)
    if units < world_size:
        raise ValueError(f"intermediate_size={intermediate_size} has {units} unit(s) of granularity={granularity} "
                         f"for world_size={world_size}: some rank would hold no intermediate rows")
    base, extra = divmod(units, world_size)
    out, u = [], 0
    for r in range(world_size):
        v = u + base + (1 if r < extra else 0)
        out.append((min(u * granularity, intermediate_size), min(v * granularity, intermediate_size)))
        u = v
    return out


def _check_rank(rank, world_size) -> None:
    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be an int in [0, {world_size}), got {rank!r}")


# --- from float ----------------------------------------------------------------------------------

class FloatShard(NamedTuple):
    """One rank's slice of float expert weights, ready for ``fm.ExpertWeights.from_float``
    (same ``w13_order`` as the input)."""

    w13: torch.Tensor
    w2: torch.Tensor
    w13_bias: Optional[torch.Tensor]
    w2_bias: Optional[torch.Tensor]
    start: int  # the shard is rows [start, stop) of I
    stop: int


def shard_float_weights(w13: torch.Tensor, w2: torch.Tensor, *, rank: int, world_size: int,
                        activation: Activation, w13_bias: Optional[torch.Tensor] = None,
                        w2_bias: Optional[torch.Tensor] = None, granularity: int = 1) -> FloatShard:
    """Slice ``ExpertWeights.from_float`` inputs along I for ``rank`` of ``world_size``
    (bounds: :func:`intermediate_shards` with ``granularity``).

    ``w13`` ``[E, 2I, H]`` (gated: the slice is taken from each half, whatever its order) or
    ``[E, I, H]``; ``w2`` ``[E, H, I]``; ``w13_bias`` ``[E, 2I | I]`` sliced like the rows;
    ``w2_bias`` kept on rank 0 only (it must be added once). Returns views (no copy).
    """
    if not isinstance(activation, Activation):
        raise TypeError(f"activation must be a fm.Activation, got {activation!r}")
    _check_rank(rank, world_size)
    for name, t in (("w13", w13), ("w2", w2)):
        if not isinstance(t, torch.Tensor) or t.dim() != 3:
            raise ValueError(f"{name} must be a 3-D tensor, got {getattr(t, 'shape', type(t).__name__)}")
    E, M, H = w13.shape
    I = w2.shape[2]
    if tuple(w2.shape[:2]) != (E, H):
        raise ValueError(f"w2 must be [E={E}, H={H}, I]; got {tuple(w2.shape)}")
    gated = activation.is_gated
    if M != (2 * I if gated else I):
        raise ValueError(f"w13 must be [E, {2 * I if gated else I}, H] for a {'gated' if gated else 'non-gated'} "
                         f"activation with I={I} (from w2); got {tuple(w13.shape)}")
    a, b = intermediate_shards(I, world_size, granularity=granularity)[rank]
    halves = [(0, I), (I, 2 * I)] if gated else [(0, I)]
    w13_s = torch.cat([w13[:, h0 + a:h0 + b] for h0, _ in halves], dim=1) if gated else w13[:, a:b]
    b13 = None
    if w13_bias is not None:
        if not isinstance(w13_bias, torch.Tensor) or tuple(w13_bias.shape) != (E, M):
            raise ValueError(f"w13_bias must be [E={E}, {M}], got {getattr(w13_bias, 'shape', w13_bias)}")
        b13 = torch.cat([w13_bias[:, h0 + a:h0 + b] for h0, _ in halves], dim=1) if gated else w13_bias[:, a:b]
    if w2_bias is not None and (not isinstance(w2_bias, torch.Tensor) or tuple(w2_bias.shape) != (E, H)):
        raise ValueError(f"w2_bias must be [E={E}, H={H}], got {getattr(w2_bias, 'shape', w2_bias)}")
    return FloatShard(w13_s, w2[:, :, a:b], b13, w2_bias if rank == 0 else None, a, b)


# --- from prepared (quantized) weights -----------------------------------------------------------

def shard_granularity(weights: ExpertWeights) -> int:
    """Rows of I that share a scale somewhere in the weights: 128 for FP8_BLOCK (128x128 tiles),
    32 for MXFP8 / MXFP4 and 16 for NVFP4 (GEMM2's K groups), 1 otherwise. Shards whose bounds
    are multiples of it need no widening in :func:`shard_expert_weights`."""
    fmt = weights.format
    g = fmt.block_size or 1
    if fmt is Format.FP8_BLOCK:
        g = max(g, weights.w13.block_rows)
    return g


def _rows(q: QuantizedTensor, lo: int, hi: int) -> QuantizedTensor:
    """Rows ``[lo, hi)`` of dim 1 of an ``[E, R, C]`` weight, with their scales."""
    q = q.linear_values()  # slices of the logical layout (ExpertWeights tiles FP4 values again)
    s = q.scale
    if q.fmt is Format.FP8_BLOCK:
        br = q.block_rows
        s = s[:, lo // br:-(-hi // br)]
    elif q.fmt in (Format.FP8_CHANNEL, Format.MXFP8, Format.MXFP4, Format.NVFP4):
        s = s[:, lo:hi]
    return QuantizedTensor(q.data[:, lo:hi].contiguous(), q.fmt, None if s is None else s.contiguous(),
                           q.global_scale, q.block_rows)


def _cols(q: QuantizedTensor, lo: int, hi: int) -> QuantizedTensor:
    """Logical columns ``[lo, hi)`` (the K dim) of an ``[E, R, C]`` weight, with their scales;
    ``lo``/``hi`` are multiples of the format's K block (even for FP4)."""
    q = q.linear_values()  # slices of the logical layout (ExpertWeights tiles FP4 values again)
    fmt, s = q.fmt, q.scale
    data = q.data[..., lo // 2:hi // 2] if fmt.is_fp4 else q.data[..., lo:hi]
    if fmt.block_size:
        kb = fmt.block_size
        s = s[..., lo // kb:-(-hi // kb)]
    return QuantizedTensor(data.contiguous(), fmt, None if s is None else s.contiguous(), q.global_scale, q.block_rows)


def _zero_outside(q: QuantizedTensor, lo: int, hi: int, dim: int) -> QuantizedTensor:
    """Copy of ``q`` with the logical indices outside ``[lo, hi)`` along ``dim`` (1: rows,
    2: columns) set to +0; scales unchanged (0 times any scale is 0)."""
    q = q.linear_values()  # slices of the logical layout (ExpertWeights tiles FP4 values again)
    n = q.shape[dim]
    if lo == 0 and hi == n:
        return q
    fp4_cols = q.fmt.is_fp4 and dim == 2
    d = unpack_fp4(q.data) if fp4_cols else q.data.clone()
    raw = d.view(torch.uint8) if d.element_size() == 1 else d  # e4m3 / e2m1 +0 is the zero byte
    idx = [slice(None)] * 3
    idx[dim] = slice(0, lo)
    raw[tuple(idx)] = 0
    idx[dim] = slice(hi, n)
    raw[tuple(idx)] = 0
    data = pack_fp4(d) if fp4_cols else d
    return QuantizedTensor(data.contiguous(), q.fmt, q.scale, q.global_scale, q.block_rows)


def _zeros_like(q: QuantizedTensor, rows: int, cols: int) -> QuantizedTensor:
    """Zero weights ``[E, rows, cols]`` in q's format (what ``from_float`` stores for padding)."""
    E = q.shape[0]
    z = torch.zeros(E, rows, cols, dtype=torch.float32, device=q.device)
    if q.fmt is Format.BF16:
        return QuantizedTensor(z.to(q.data.dtype), q.fmt)
    zq = quantize_weight(z, q.fmt)
    return QuantizedTensor(zq.data, q.fmt, zq.scale, zq.global_scale, zq.block_rows)


def _cat(parts: List[QuantizedTensor], dim: int) -> QuantizedTensor:
    """Concatenate along dim 1 (rows) or 2 (columns); per-expert scales (FP8_TENSOR scale,
    NVFP4 global scale) are taken from the first part (the padding parts' are irrelevant)."""
    parts = [p.linear_values() for p in parts]
    q0 = parts[0]
    if len(parts) == 1:
        return q0
    fmt = q0.fmt
    data = torch.cat([p.data for p in parts], dim=dim)
    if fmt in (Format.BF16, Format.FP8_TENSOR) or (fmt is Format.FP8_CHANNEL and dim == 2):
        s = q0.scale
    else:
        s = torch.cat([p.scale for p in parts], dim=dim)
    return QuantizedTensor(data, fmt, s, q0.global_scale, q0.block_rows)


def shard_expert_weights(weights: ExpertWeights, *, rank: int, world_size: int,
                         alignment: Optional[int] = None, granularity: int = 1) -> ExpertWeights:
    """This rank's TP shard of prepared (possibly quantized) expert weights, exactly.

    The shard holds the intermediate rows ``[a, b)`` (:func:`intermediate_shards` of the logical
    ``weights.intermediate_size`` with ``granularity``; ``granularity=shard_granularity(weights)``
    avoids any widening), widened to whole scale blocks ``[A, B)`` with the rows outside
    ``[a, b)`` zeroed (module docstring), then zero-padded per half to ``alignment`` (default: the
    format's :func:`default_alignment`). Dequantized, the shard equals the full weights' rows
    ``[a, b)`` bit for bit; ``intermediate_size`` of the shard is ``b - A``. Works for every
    format; ``w2_bias`` stays on rank 0; static activation scales are copied.
    """
    if not isinstance(weights, ExpertWeights):
        raise TypeError(f"weights must be a fm.ExpertWeights, got {type(weights).__name__}")
    _check_rank(rank, world_size)
    fmt, gated = weights.format, weights.is_gated
    I, I_pad = weights.intermediate_size, weights.padded_intermediate_size
    g = shard_granularity(weights)
    align = default_alignment(fmt, gated) if alignment is None else alignment
    if not isinstance(align, int) or isinstance(align, bool) or align < 1 or align % g:
        raise ValueError(f"alignment must be a positive multiple of {g} for {fmt!r} shards, got {alignment!r}")
    if fmt is Format.FP8_BLOCK and I_pad % 128:
        raise ValueError(f"FP8_BLOCK weights with padded_intermediate_size={I_pad} (not a multiple of 128) "
                         "cannot be sharded along whole 128x128 blocks")
    a, b = intermediate_shards(I, world_size, granularity=granularity)[rank]
    A, B = a // g * g, min(-(-b // g) * g, I_pad)
    n = B - A
    n_pad = round_up(n, align)

    def one_half(h0: int) -> QuantizedTensor:
        part = _zero_outside(_rows(weights.w13, h0 + A, h0 + B), a - A, b - A, dim=1)
        if n_pad > n:
            part = _cat([part, _zeros_like(weights.w13, n_pad - n, weights.hidden_size)], dim=1)
        return part

    halves = (0, I_pad) if gated else (0,)
    w13 = _cat([one_half(h0) for h0 in halves], dim=1)
    w2 = _zero_outside(_cols(weights.w2, A, B), a - A, b - A, dim=2)
    if n_pad > n:
        w2 = _cat([w2, _zeros_like(weights.w2, weights.hidden_size, n_pad - n)], dim=2)

    b13 = None
    if weights.w13_bias is not None:
        segs = []
        for h0 in halves:
            seg = weights.w13_bias[:, h0 + A:h0 + B].clone()
            seg[:, :a - A] = 0
            seg[:, b - A:] = 0
            segs += [seg, seg.new_zeros(seg.shape[0], n_pad - n)]
        b13 = torch.cat(segs, dim=1).contiguous()
    return ExpertWeights(
        w13=w13, w2=w2, activation=weights.activation, intermediate_size=b - A,
        w13_bias=b13, w2_bias=weights.w2_bias if rank == 0 else None,
        input_scale=weights.input_scale, intermediate_scale=weights.intermediate_scale,
        act_params=weights.act_params)


# --- the layer -----------------------------------------------------------------------------------

class TensorParallelMoE(torch.nn.Module):
    """A MoE layer whose experts' intermediate dimension is split over a process group.

    Every rank passes the same tokens (and logits) and gets the full output: its shard's partial
    output, summed over the ranks with an fp32 all-reduce (module docstring for the numerics).

    Args:
        shard_weights: this rank's shard (:func:`shard_expert_weights`, or
            ``ExpertWeights.from_float`` of :func:`shard_float_weights`); see also
            :meth:`from_float` and :meth:`from_weights`.
        routing, activation, backend, activation_format: as for ``fm.FusedMoE``.
        group: the process group (None: the default group); NCCL for CUDA tensors, gloo for CPU.
        check_consistency: all-gather the configuration once here (a collective: every rank
            must construct the layer) and raise ``ValueError`` on every rank when the ranks
            disagree, or when more than one rank holds ``w2_bias``.

    Raises RuntimeError when torch.distributed is not initialized. A rank whose arguments are
    rejected raises its ValueError/TypeError; with ``check_consistency`` the other ranks then
    raise RuntimeError naming it instead of waiting in a collective.
    """

    def __init__(self, shard_weights: ExpertWeights, *, routing: RoutingConfig, activation: Activation,
                 group=None, backend: str = "auto", activation_format: Optional[Format] = None,
                 check_consistency: bool = True):
        super().__init__()
        info = group_info(group, who="TensorParallelMoE")
        self.info: GroupInfo = info
        err: Optional[BaseException] = None
        try:
            if not isinstance(shard_weights, ExpertWeights):
                raise TypeError(f"shard_weights must be a fm.ExpertWeights, got {type(shard_weights).__name__}")
            self.experts = FusedMoE(shard_weights, routing=routing, activation=activation, backend=backend,
                                    activation_format=activation_format)
        except (ValueError, TypeError) as e:  # shared with the other ranks first (no hang)
            err = e
        if not check_consistency:
            if err is not None:
                raise err
            return
        vec = None
        if err is None:
            w = shard_weights
            vec = layer_fields(w.num_experts, w, self.experts.activation_format, routing) + [int(w.w2_bias is not None)]
        device = meta_device(info, shard_weights.device if err is None else None)
        rows = gather_build_status(vec, len(LAYER_FIELDS) + 1, err, info, device, who="TensorParallelMoE")
        check_same(rows, LAYER_FIELDS, who="TensorParallelMoE", first=1)
        with_bias = [r for r, row in enumerate(rows) if row[-1]]
        if len(with_bias) > 1:
            raise ValueError(f"TensorParallelMoE: ranks {with_bias} all hold a w2_bias, which would be added "
                             f"{len(with_bias)} times; keep it on one rank (the shard helpers keep it on rank 0)")

    @classmethod
    def from_float(cls, w13: torch.Tensor, w2: torch.Tensor, *, activation: Activation, routing: RoutingConfig,
                   format: Format = Format.BF16, group=None, w13_order: str = "gate_up",
                   w13_bias: Optional[torch.Tensor] = None, w2_bias: Optional[torch.Tensor] = None,
                   alignment: Optional[int] = None, act_params: Optional[ActivationParams] = None,
                   input_scale=None, intermediate_scale=None, dtype: Optional[torch.dtype] = None,
                   backend: str = "auto", activation_format: Optional[Format] = None,
                   granularity: int = 1, check_consistency: bool = True) -> "TensorParallelMoE":
        """Shard full float weights (``ExpertWeights.from_float`` arguments, same on every
        rank) and prepare this rank's shard: sliced along I per half (bounds:
        :func:`intermediate_shards` with ``granularity``), padded and quantized per shard."""
        info = group_info(group, who="TensorParallelMoE.from_float")
        s = shard_float_weights(w13, w2, rank=info.rank, world_size=info.world_size, activation=activation,
                                w13_bias=w13_bias, w2_bias=w2_bias, granularity=granularity)
        weights = ExpertWeights.from_float(
            s.w13, s.w2, activation=activation, format=format, w13_order=w13_order, w13_bias=s.w13_bias,
            w2_bias=s.w2_bias, alignment=alignment, act_params=act_params, input_scale=input_scale,
            intermediate_scale=intermediate_scale, dtype=dtype)
        return cls(weights, routing=routing, activation=activation, group=group, backend=backend,
                   activation_format=activation_format, check_consistency=check_consistency)

    @classmethod
    def from_weights(cls, weights: ExpertWeights, *, routing: RoutingConfig, group=None,
                     alignment: Optional[int] = None, backend: str = "auto",
                     activation_format: Optional[Format] = None, granularity: int = 1,
                     check_consistency: bool = True) -> "TensorParallelMoE":
        """Shard full prepared (possibly quantized) weights exactly (:func:`shard_expert_weights`)."""
        info = group_info(group, who="TensorParallelMoE.from_weights")
        shard = shard_expert_weights(weights, rank=info.rank, world_size=info.world_size, alignment=alignment,
                                     granularity=granularity)
        return cls(shard, routing=routing, activation=weights.activation, group=group, backend=backend,
                   activation_format=activation_format, check_consistency=check_consistency)

    @property
    def rank(self) -> int:
        return self.info.rank

    @property
    def world_size(self) -> int:
        return self.info.world_size

    def extra_repr(self) -> str:
        w = self.experts.weights
        return (f"rank={self.rank}/{self.world_size}, I_shard={w.intermediate_size} "
                f"(padded {w.padded_intermediate_size}), backend={self.experts.backend!r}")

    def forward(self, hidden: torch.Tensor, router_logits: torch.Tensor,
                routing_bias: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Route (identically on every rank), run this shard, all-reduce: ``[T, H]``."""
        return all_reduce_sum(self.experts(hidden, router_logits, routing_bias).float(), self.info).to(hidden.dtype)

    def forward_routed(self, hidden: torch.Tensor, topk: Union[TopK, torch.Tensor]) -> torch.Tensor:
        """Precomputed routing (the same on every rank); weights used as given."""
        return all_reduce_sum(self.experts.forward_routed(hidden, topk).float(), self.info).to(hidden.dtype)
