"""Thin helpers over ``torch.distributed`` shared by the expert- and tensor-parallel layers.

Only torch.distributed collectives are used (NCCL for CUDA tensors, gloo for CPU tensors); this
module adds the checks and the version shims, no transport of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence

import torch

from ..config import Activation, Format

__all__ = ["GroupInfo", "group_info", "meta_device", "gather_int_vectors", "all_gather_rows",
           "reduce_scatter_rows", "all_reduce_sum", "all_to_all_rows", "check_same", "DTYPE_CODES",
           "LAYER_FIELDS", "layer_fields", "gather_build_status"]

# dtype <-> small int, so the dtype of each rank's input can ride on an integer collective.
DTYPE_CODES = {torch.bfloat16: 1, torch.float16: 2, torch.float32: 3}


def _dist():
    """``torch.distributed``, or a RuntimeError when this torch build has no distributed support."""
    import torch.distributed as dist

    if not dist.is_available():
        raise RuntimeError("torch.distributed is not available in this torch build; fusedmoe.distributed "
                           "needs a torch with distributed support (gloo on CPU, NCCL on GPUs)")
    return dist


@dataclass(frozen=True)
class GroupInfo:
    """Where this process stands in a process group."""

    group: object  # a ProcessGroup, or None for the default group
    rank: int
    world_size: int
    backend: str


def group_info(group, *, who: str) -> GroupInfo:
    """Rank, world size and backend of ``group`` (None: the default group).

    Raises RuntimeError (naming ``who``, the caller) when the process group is not initialized,
    and ValueError when this process is not a member of ``group``.
    """
    dist = _dist()
    if not dist.is_initialized():
        raise RuntimeError(
            f"{who}: torch.distributed is not initialized; call torch.distributed.init_process_group("
            "backend='nccl' (CUDA tensors) or 'gloo' (CPU tensors), ...) on every rank first "
            "(torchrun sets the rendezvous variables)")
    rank = dist.get_rank(group)
    if rank < 0:
        raise ValueError(f"{who}: this process (global rank {dist.get_rank()}) is not a member of the given group")
    return GroupInfo(group, rank, dist.get_world_size(group), str(dist.get_backend(group)).lower())


def meta_device(info: GroupInfo, data_device: Optional[torch.device]) -> torch.device:
    """The device for small integer metadata collectives: CPU under gloo, the data's device
    otherwise (NCCL only moves CUDA tensors; None: the current CUDA device)."""
    if "gloo" in info.backend and "nccl" not in info.backend:
        return torch.device("cpu")
    if data_device is None:
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    return torch.device(data_device)


def gather_int_vectors(vec: Sequence[int], info: GroupInfo, device: torch.device) -> List[List[int]]:
    """All-gather one int64 vector per rank (same length everywhere); returns them as Python
    lists, indexed by rank. One small collective plus one host sync."""
    t = torch.tensor(list(vec), dtype=torch.int64, device=device)
    out = torch.empty(info.world_size * t.numel(), dtype=torch.int64, device=device)
    _all_gather_single(out, t, info.group)
    return out.view(info.world_size, -1).tolist() if t.numel() else [[] for _ in range(info.world_size)]


#: what every rank of a parallel MoE layer must agree on (``layer_fields`` encodes them as ints)
LAYER_FIELDS = ("num_experts", "hidden size", "weight format", "activation format", "activation",
                "routing method", "top_k")


def layer_fields(num_experts: int, weights, activation_format: Format, routing) -> List[int]:
    """The values of ``LAYER_FIELDS`` for one rank's layer (``weights``: its ``ExpertWeights``)."""
    return [num_experts, weights.hidden_size, list(Format).index(weights.format),
            list(Format).index(activation_format), list(Activation).index(weights.activation),
            list(type(routing.method)).index(routing.method), routing.top_k]


def gather_build_status(vec: Optional[Sequence[int]], length: int, err: Optional[BaseException],
                        info: GroupInfo, device: torch.device, *, who: str) -> List[List[int]]:
    """One all-gather after each rank built its layer: ``[0] + vec`` from a rank that succeeded
    (``length`` values), ``[1, 0, ...]`` from one that failed with ``err``. The failed rank
    re-raises its error; every other rank raises RuntimeError instead of waiting in a later
    collective. Returns the gathered rows (column 0 is the flag)."""
    row = [1] + [0] * length if err is not None else [0] + list(vec)
    rows = gather_int_vectors(row, info, device)
    if err is not None:
        raise err
    bad = [r for r, x in enumerate(rows) if x[0]]
    if bad:
        raise RuntimeError(f"{who}: rank(s) {bad} failed to build the layer (see the error raised there); "
                           f"rank {info.rank} stops as well instead of waiting in a collective")
    return rows


def _all_gather_single(out: torch.Tensor, inp: torch.Tensor, group) -> None:
    dist = _dist()
    fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    fn(out, inp, group=group)


def _reduce_scatter_single(out: torch.Tensor, inp: torch.Tensor, group) -> None:
    dist = _dist()
    fn = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    fn(out, inp, op=dist.ReduceOp.SUM, group=group)


def all_gather_rows(x: torch.Tensor, info: GroupInfo) -> torch.Tensor:
    """``[R, ...]`` on every rank (same R) -> ``[world * R, ...]``, rank-major."""
    x = x.contiguous()
    out = x.new_empty((info.world_size * x.shape[0],) + tuple(x.shape[1:]))
    if out.numel():
        _all_gather_single(out, x, info.group)
    return out


def reduce_scatter_rows(x: torch.Tensor, info: GroupInfo) -> torch.Tensor:
    """``[world * R, ...]`` -> this rank's ``[R, ...]`` slice of the sum over ranks."""
    x = x.contiguous()
    R = x.shape[0] // info.world_size
    out = x.new_empty((R,) + tuple(x.shape[1:]))
    if out.numel():
        _reduce_scatter_single(out, x, info.group)
    return out


def all_reduce_sum(x: torch.Tensor, info: GroupInfo) -> torch.Tensor:
    """Sum ``x`` over the group in place (returns it)."""
    if x.numel():
        _dist().all_reduce(x, op=_dist().ReduceOp.SUM, group=info.group)
    return x


def all_to_all_rows(x: torch.Tensor, out_rows: int, send_counts: List[int], recv_counts: List[int],
                    info: GroupInfo) -> torch.Tensor:
    """Variable-size all-to-all along dim 0: ``send_counts[d]`` rows of ``x`` go to rank d (in
    rank order), ``recv_counts[s]`` rows arrive from rank s."""
    x = x.contiguous()
    out = x.new_empty((out_rows,) + tuple(x.shape[1:]))
    _dist().all_to_all_single(out, x, output_split_sizes=list(recv_counts), input_split_sizes=list(send_counts),
                              group=info.group)
    return out


def check_same(rows: List[List[int]], names: Sequence[str], *, who: str, first: int = 0,
               skip: Optional[Sequence[int]] = None) -> None:
    """Raise ValueError (on every rank alike) unless the columns ``first + i`` of the gathered
    ``rows`` agree across ranks; ``names[i]`` labels column ``first + i``."""
    skip = set(skip or ())
    for i, name in enumerate(names):
        if i in skip:
            continue
        vals = [r[first + i] for r in rows]
        if any(v != vals[0] for v in vals):
            raise ValueError(f"{who}: the ranks disagree on {name}: {vals} (one value per rank); every rank "
                             "must build the layer with the same configuration")
