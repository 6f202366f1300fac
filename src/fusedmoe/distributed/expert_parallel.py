"""Expert parallelism (EP): each rank holds a contiguous range of the experts.

Routing is global (every rank routes its own tokens over all E experts, ``fm.route``); the local
experts run through the fused layer (``fm.FusedMoE.forward_routed`` with ``num_experts=E`` and
``local_expert_offset``: slots whose expert is not local contribute nothing). Three ways to move
the tokens, all over ``torch.distributed``:

``all_to_all`` (each rank passes its own tokens; token counts may differ, 0 included)
    1. one small all-gather of ``[status, T, dtype, rows for rank 0..W-1]`` per rank (split sizes,
       input agreement); the host reads it (one sync);
    2. every token goes once to every rank that owns at least one of its experts, with its
       *global* ids and fp32 weights (``all_to_all_single``, variable splits), ordered by
       destination rank then token;
    3. each rank runs its local experts on what it received (the routing weights are applied
       there);
    4. a second ``all_to_all_single`` returns the per-(token, rank) partial outputs, which the
       source rank sums in fp32 **in rank order** (deterministic), then casts to hidden's dtype.

``all_gather`` (each rank passes its own tokens)
    Step 1 as above; then all tokens are all-gathered (padded to the largest count), every rank
    computes its local experts' contribution for all of them, and a reduce-scatter (fp32) sums
    the contributions and hands every rank its own rows. Moves ``W / min(K, W)`` times the bytes
    of ``all_to_all`` but on equal-size contiguous buffers with no index computation: the better
    choice for small (decode) batches.

``all_reduce`` (every rank passes *the same* tokens, e.g. after a tensor-parallel attention)
    Each rank computes its local contribution for all tokens; an fp32 all-reduce sums them. No
    metadata exchange, no host sync.

``auto`` picks ``all_gather`` when the group holds at most ``all_gather_max_tokens`` tokens in
total and ``all_to_all`` otherwise (:func:`choose_dispatch`; every rank sees the same totals, so
every rank makes the same choice).

Numerics: every rank's partial output is rounded once to hidden's dtype (the fused layer's output
dtype) before the fp32 sum, so the result equals the single-process layer within that rounding
(a few ulps of hidden's dtype), for formats whose activation quantization is per token or per
group (BF16, FP8_CHANNEL/TOKEN, FP8_BLOCK, MX, NVFP4 x BF16) or uses static scales. A dynamic
per-tensor FP8 activation scale is computed over the rows a rank holds, as on a single GPU with
a different batch.

Uneven partitions are supported through ``expert_counts`` (one count >= 1 per rank); without it
``num_experts`` must be divisible by the world size (ValueError naming both otherwise).
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple, Union

import torch

from ..config import Activation, Format, RoutingConfig, TopK
from ..layer import FusedMoE, _as_topk
from ..weights import ExpertWeights
from ._comm import (DTYPE_CODES, LAYER_FIELDS, GroupInfo, all_gather_rows, all_reduce_sum, all_to_all_rows,
                    check_same, gather_build_status, gather_int_vectors, group_info, layer_fields, meta_device,
                    reduce_scatter_rows)

__all__ = ["ExpertParallelMoE", "expert_partition", "choose_dispatch", "DISPATCH_MODES",
           "DEFAULT_ALL_GATHER_MAX_TOKENS"]

DISPATCH_MODES = ("auto", "all_to_all", "all_gather", "all_reduce")
DEFAULT_ALL_GATHER_MAX_TOKENS = 256
_STATUS, _TOKENS, _DTYPE, _COUNTS = 0, 1, 2, 3  # columns of the per-call metadata vector


def expert_partition(num_experts: int, world_size: int,
                     expert_counts: Optional[Sequence[int]] = None) -> List[Tuple[int, int]]:
    """``(local_expert_offset, num_local_experts)`` for every rank, in rank order.

    Without ``expert_counts`` the experts are split evenly and ``num_experts`` must be divisible
    by ``world_size``; ``expert_counts`` (one positive count per rank, summing to
    ``num_experts``) gives an uneven split. Rank r owns ids ``[offset_r, offset_r + count_r)``.
    """
    for name, v in (("num_experts", num_experts), ("world_size", world_size)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if expert_counts is None:
        if num_experts % world_size:
            raise ValueError(
                f"num_experts={num_experts} is not divisible by world_size={world_size}: expert parallelism "
                f"splits the experts evenly by default; pass expert_counts=[...] (one count per rank, "
                f"summing to {num_experts}) for an uneven split")
        counts = [num_experts // world_size] * world_size
    else:
        counts = list(expert_counts)
        if len(counts) != world_size:
            raise ValueError(f"expert_counts must have one entry per rank (world_size={world_size}), got {len(counts)}")
        if any(not isinstance(c, int) or isinstance(c, bool) or c < 1 for c in counts):
            raise ValueError(f"expert_counts must be positive ints (every rank holds >= 1 expert), got {counts}")
        if sum(counts) != num_experts:
            raise ValueError(f"expert_counts {counts} sum to {sum(counts)}, expected num_experts={num_experts}")
    out, off = [], 0
    for c in counts:
        out.append((off, c))
        off += c
    return out


def choose_dispatch(total_tokens: int, *, all_gather_max_tokens: int = DEFAULT_ALL_GATHER_MAX_TOKENS) -> str:
    """The ``dispatch="auto"`` rule: ``"all_gather"`` when the whole group holds at most
    ``all_gather_max_tokens`` tokens (decode: latency-bound, equal-size collectives win),
    ``"all_to_all"`` above (bandwidth-bound: each token travels only to the ranks that own one of
    its experts). ``benchmarks/bench_distributed.py`` measures the crossover on a given machine."""
    if total_tokens < 0:
        raise ValueError(f"total_tokens must be >= 0, got {total_tokens}")
    return "all_gather" if total_tokens <= all_gather_max_tokens else "all_to_all"




def _ids_checkable(t: torch.Tensor) -> bool:
    """Reading id values syncs a GPU: skipped while a CUDA graph is captured or compile traces."""
    if t.device.type != "cuda":
        return True
    if torch.compiler.is_compiling():
        return False
    return not torch.cuda.is_current_stream_capturing()


def _pack_rows(hidden: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """One uint8 row per token: hidden's bytes, then int32 ids, then fp32 weights (bit-exact
    transport in a single collective; NCCL and gloo both move uint8)."""
    parts = [hidden.contiguous().view(torch.uint8),
             ids.to(torch.int32).contiguous().view(torch.uint8),
             weights.to(torch.float32).contiguous().view(torch.uint8)]
    return torch.cat(parts, dim=1)


def _unpack_rows(buf: torch.Tensor, H: int, dtype: torch.dtype, K: int):
    """Inverse of :func:`_pack_rows` -> (hidden [n, H], ids int32 [n, K], weights fp32 [n, K])."""
    hb = H * torch.empty((), dtype=dtype).element_size()
    hidden = buf[:, :hb].contiguous().view(dtype)
    ids = buf[:, hb:hb + 4 * K].contiguous().view(torch.int32)
    w = buf[:, hb + 4 * K:hb + 8 * K].contiguous().view(torch.float32)
    return hidden, ids, w


class ExpertParallelMoE(torch.nn.Module):
    """A MoE layer whose experts are split over the ranks of a process group (module docstring).

    Args:
        local_weights: this rank's experts, ``fm.ExpertWeights`` holding
            ``expert_partition(num_experts, world_size, expert_counts)[rank][1]`` experts
            (:meth:`from_global_weights` slices them out of the full set).
        routing: ``fm.RoutingConfig`` (routing runs over all ``num_experts`` on every rank).
        activation: the experts' activation (must match the weights).
        num_experts: global expert count E.
        group: the process group (None: the default group). NCCL for CUDA tensors, gloo for CPU.
        expert_counts: optional uneven partition, one count per rank (identical on every rank).
        dispatch: ``"auto"``, ``"all_to_all"``, ``"all_gather"`` or ``"all_reduce"`` (the last
            requires identical tokens on every rank).
        all_gather_max_tokens: the ``"auto"`` threshold on the group's total token count.
        backend, activation_format: as for ``fm.FusedMoE``.
        check_consistency: all-gather the configuration once here and raise ``ValueError`` on
            every rank when the ranks disagree (a collective: every rank must construct the layer).

    Raises RuntimeError when torch.distributed is not initialized. A rank whose arguments are
    rejected raises its ValueError/TypeError; with ``check_consistency`` the other ranks then
    raise RuntimeError naming it instead of waiting in a collective. Per call, the
    ``all_to_all``/``all_gather`` variants share input errors the same way (module docstring).
    """

    def __init__(self, local_weights: ExpertWeights, *, routing: RoutingConfig, activation: Activation,
                 num_experts: int, group=None, expert_counts: Optional[Sequence[int]] = None,
                 dispatch: str = "auto", all_gather_max_tokens: int = DEFAULT_ALL_GATHER_MAX_TOKENS,
                 backend: str = "auto", activation_format: Optional[Format] = None,
                 check_consistency: bool = True):
        super().__init__()
        info = group_info(group, who="ExpertParallelMoE")
        self.info: GroupInfo = info
        self.last_dispatch: Optional[str] = None  # the variant the latest forward used
        err: Optional[BaseException] = None
        try:
            self._setup(local_weights, routing, activation, num_experts, expert_counts, dispatch,
                        all_gather_max_tokens, backend, activation_format)
        except (ValueError, TypeError) as e:  # shared with the other ranks first (no hang)
            err = e
        if check_consistency:
            self._check_consistency(err, routing, expert_counts is not None)
        elif err is not None:
            raise err

    def _setup(self, local_weights, routing, activation, num_experts, expert_counts, dispatch,
               all_gather_max_tokens, backend, activation_format) -> None:
        info = self.info
        if not isinstance(local_weights, ExpertWeights):
            raise TypeError(f"local_weights must be a fm.ExpertWeights, got {type(local_weights).__name__}")
        if dispatch not in DISPATCH_MODES:
            raise ValueError(f"dispatch must be one of {DISPATCH_MODES}, got {dispatch!r}")
        if not isinstance(all_gather_max_tokens, int) or isinstance(all_gather_max_tokens, bool) \
                or all_gather_max_tokens < 0:
            raise ValueError(f"all_gather_max_tokens must be an int >= 0, got {all_gather_max_tokens!r}")
        parts = expert_partition(num_experts, info.world_size, expert_counts)
        offset, count = parts[info.rank]
        if local_weights.num_experts != count:
            raise ValueError(
                f"ExpertParallelMoE: rank {info.rank} of {info.world_size} owns {count} of num_experts={num_experts} "
                f"experts (ids [{offset}, {offset + count})), but local_weights holds {local_weights.num_experts}; "
                "pass this rank's slice (ExpertParallelMoE.from_global_weights slices a full set)")
        self.experts = FusedMoE(local_weights, routing=routing, activation=activation, backend=backend,
                                activation_format=activation_format, num_experts=num_experts,
                                local_expert_offset=offset)
        self.num_experts = num_experts
        self.partition = parts
        self.dispatch = dispatch
        self.all_gather_max_tokens = all_gather_max_tokens
        counts = torch.tensor([c for _, c in parts], device=local_weights.device)
        # owner rank of every global expert id (uneven partitions included)
        self.register_buffer("_owner", torch.repeat_interleave(
            torch.arange(info.world_size, device=local_weights.device), counts).to(torch.int64), persistent=False)
        self._meta_device = meta_device(info, local_weights.device)

    # --- construction helpers -----------------------------------------------------------------
    @classmethod
    def from_global_weights(cls, weights: ExpertWeights, *, routing: RoutingConfig, activation: Activation,
                            group=None, expert_counts: Optional[Sequence[int]] = None,
                            **kwargs) -> "ExpertParallelMoE":
        """Build the layer from the full expert set (every rank passes the same ``weights``;
        this rank keeps its slice). Other keyword arguments as for the constructor."""
        if not isinstance(weights, ExpertWeights):
            raise TypeError(f"weights must be a fm.ExpertWeights, got {type(weights).__name__}")
        info = group_info(group, who="ExpertParallelMoE.from_global_weights")
        offset, count = expert_partition(weights.num_experts, info.world_size, expert_counts)[info.rank]
        return cls(weights.slice_experts(offset, count), routing=routing, activation=activation,
                   num_experts=weights.num_experts, group=group, expert_counts=expert_counts, **kwargs)

    _FIELDS = LAYER_FIELDS + ("dispatch", "all_gather_max_tokens")

    def _check_consistency(self, err: Optional[BaseException], routing: RoutingConfig, uneven: bool) -> None:
        """One all-gather of this rank's configuration (or of its construction error): every rank
        raises when any rank failed or when the ranks disagree."""
        W = self.info.world_size
        vec = None
        if err is None:
            vec = (layer_fields(self.num_experts, self.experts.weights, self.experts.activation_format, routing)
                   + [DISPATCH_MODES.index(self.dispatch), self.all_gather_max_tokens]
                   + [c for _, c in self.partition])
        device = self._meta_device if err is None else meta_device(self.info, None)
        rows = gather_build_status(vec, len(self._FIELDS) + W, err, self.info, device, who="ExpertParallelMoE")
        check_same(rows, self._FIELDS, who="ExpertParallelMoE", first=1)
        check_same(rows, [f"the expert count of rank {r}" + (" (expert_counts)" if uneven else "")
                          for r in range(W)], who="ExpertParallelMoE", first=1 + len(self._FIELDS))

    # --- properties ---------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return self.info.rank

    @property
    def world_size(self) -> int:
        return self.info.world_size

    @property
    def local_expert_offset(self) -> int:
        return self.experts.local_expert_offset

    @property
    def num_local_experts(self) -> int:
        return self.experts.weights.num_experts

    def extra_repr(self) -> str:
        return (f"rank={self.rank}/{self.world_size}, experts=[{self.local_expert_offset}, "
                f"{self.local_expert_offset + self.num_local_experts}) of {self.num_experts}, "
                f"dispatch={self.dispatch!r}, backend={self.experts.backend!r}")

    # --- forward ------------------------------------------------------------------------------
    def forward(self, hidden: torch.Tensor, router_logits: torch.Tensor,
                routing_bias: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Route this rank's tokens over all experts, run them where their experts live, and
        return ``[T, H]`` in hidden's dtype (this rank's tokens)."""
        def get_topk():
            self._check_hidden(hidden)
            if not isinstance(router_logits, torch.Tensor) or router_logits.dim() != 2:
                raise ValueError(f"router_logits must be a [T, E] tensor, got "
                                 f"{getattr(router_logits, 'shape', type(router_logits).__name__)}")
            if router_logits.shape[0] != hidden.shape[0]:
                raise ValueError(f"hidden has {hidden.shape[0]} tokens but router_logits has {router_logits.shape[0]}")
            return self.experts.route(router_logits, routing_bias)
        return self._run(hidden, get_topk)

    def forward_routed(self, hidden: torch.Tensor, topk: Union[TopK, torch.Tensor, tuple]) -> torch.Tensor:
        """Precomputed routing of this rank's tokens: ``fm.TopK`` (global ids, weights used as
        given), an ``(ids, weights)`` pair, or a packed int32 ``[T, K]`` tensor."""
        def get_topk():
            self._check_hidden(hidden)
            tk = _as_topk(topk)
            tk.validate(name="topk")
            if tk.ids.shape[0] != hidden.shape[0]:
                raise ValueError(f"topk has {tk.ids.shape[0]} tokens but hidden has {hidden.shape[0]}")
            if tk.ids.shape[1] != self.experts.routing.top_k:
                raise ValueError(f"topk has K={tk.ids.shape[1]} slots, the routing config says top_k="
                                 f"{self.experts.routing.top_k}")
            if tk.ids.device != hidden.device or tk.weights.device != hidden.device:
                raise ValueError(f"topk is on {tk.ids.device} but hidden on {hidden.device}")
            if tk.ids.numel() and _ids_checkable(tk.ids):
                lo, hi = int(tk.ids.min()), int(tk.ids.max())
                if lo < 0 or hi >= self.num_experts:
                    raise ValueError(f"topk.ids must be global expert ids in [0, {self.num_experts}), "
                                     f"got values in [{lo}, {hi}]")
            return TopK(tk.ids.to(torch.int32), tk.weights.to(torch.float32))
        return self._run(hidden, get_topk)

    def _check_hidden(self, hidden) -> None:
        w = self.experts.weights
        if not isinstance(hidden, torch.Tensor):
            raise TypeError(f"hidden must be a torch.Tensor, got {type(hidden).__name__}")
        if hidden.dim() != 2 or hidden.shape[1] != w.hidden_size:
            raise ValueError(f"hidden must be [T, H={w.hidden_size}], got shape {tuple(hidden.shape)}")
        if hidden.dtype not in DTYPE_CODES:
            raise TypeError(f"hidden must be bfloat16, float16 or float32, got {hidden.dtype}")
        if hidden.device != w.device:
            raise ValueError(f"hidden is on {hidden.device} but the local experts are on {w.device}")

    def _run(self, hidden: torch.Tensor, get_topk) -> torch.Tensor:
        if self.dispatch == "all_reduce":
            # every rank holds the same tokens: no metadata exchange; input errors raise locally
            topk = get_topk()
            self.last_dispatch = "all_reduce"
            out = self.experts.forward_routed(hidden, topk).float()
            return all_reduce_sum(out, self.info).to(hidden.dtype)

        W, rank = self.world_size, self.rank
        err: Optional[BaseException] = None
        topk = None
        send_counts = [0] * W
        mask = None
        try:
            topk = get_topk()
        except (ValueError, TypeError) as e:  # shared with the other ranks below, then re-raised
            err = e
        if err is None and self.dispatch != "all_gather":
            owner = self._owner[topk.ids.long()]                                  # [T, K]
            mask = torch.zeros(hidden.shape[0], W, dtype=torch.bool, device=hidden.device)
            mask.scatter_(1, owner, True)                                          # [T, W]
            send_counts = mask.sum(0).tolist()
        vec = [int(err is not None), 0 if err else hidden.shape[0],
               0 if err else DTYPE_CODES[hidden.dtype]] + send_counts
        rows = gather_int_vectors(vec, self.info, self._meta_device)
        if err is not None:
            raise err
        bad = [r for r, row in enumerate(rows) if row[_STATUS]]
        if bad:
            raise RuntimeError(f"ExpertParallelMoE: rank(s) {bad} rejected their input (see the error raised "
                               f"there); rank {rank} stops as well instead of waiting in a collective")
        dtypes = [row[_DTYPE] for row in rows]
        if any(d != dtypes[0] for d in dtypes):
            names = {v: k for k, v in DTYPE_CODES.items()}
            raise ValueError(f"ExpertParallelMoE: hidden dtypes differ across ranks: {[str(names[d]) for d in dtypes]}")
        tokens = [row[_TOKENS] for row in rows]
        mode = self.dispatch if self.dispatch != "auto" else choose_dispatch(
            sum(tokens), all_gather_max_tokens=self.all_gather_max_tokens)
        self.last_dispatch = mode
        if mode == "all_gather":
            return self._all_gather(hidden, topk, tokens)
        if mask is None:  # pragma: no cover - all_to_all always computed the mask above
            raise RuntimeError("internal: all_to_all without destination mask")
        recv_counts = [row[_COUNTS + rank] for row in rows]
        return self._all_to_all(hidden, topk, mask, send_counts, recv_counts)

    def _all_to_all(self, hidden, topk: TopK, mask, send_counts: List[int], recv_counts: List[int]) -> torch.Tensor:
        T, H = hidden.shape
        K = topk.ids.shape[1]
        # (destination, token) pairs, sorted by destination rank, then token
        _, tok = mask.t().nonzero(as_tuple=True)
        send = _pack_rows(hidden[tok], topk.ids[tok], topk.weights[tok])
        recv = all_to_all_rows(send, sum(recv_counts), send_counts, recv_counts, self.info)
        h, ids, w = _unpack_rows(recv, H, hidden.dtype, K)
        y = self.experts.forward_routed(h, TopK(ids, w))                     # [N_recv, H], partials
        back = all_to_all_rows(y, tok.numel(), recv_counts, send_counts, self.info)
        out = torch.zeros(T, H, dtype=torch.float32, device=hidden.device)
        start = 0
        for c in send_counts:  # fixed rank order; unique tokens within a chunk -> deterministic
            if c:
                out.index_add_(0, tok[start:start + c], back[start:start + c].float())
            start += c
        return out.to(hidden.dtype)

    def _all_gather(self, hidden, topk: TopK, tokens: List[int]) -> torch.Tensor:
        T, H = hidden.shape
        K = self.experts.routing.top_k
        W, Tmax = self.world_size, max(tokens)
        if Tmax == 0:
            return hidden.new_zeros(0, H)
        packed = _pack_rows(hidden, topk.ids, topk.weights)
        if T < Tmax:
            packed = torch.cat([packed, packed.new_zeros(Tmax - T, packed.shape[1])])
        allrows = all_gather_rows(packed, self.info)                         # [W * Tmax, bytes]
        uniform = all(t == Tmax for t in tokens)
        if uniform:
            idx = None
        else:
            idx = torch.cat([torch.arange(r * Tmax, r * Tmax + t, device=hidden.device)
                             for r, t in enumerate(tokens)])
            allrows = allrows[idx]
        h, ids, w = _unpack_rows(allrows, H, hidden.dtype, K)
        y = self.experts.forward_routed(h, TopK(ids, w)).float()             # local contributions
        if idx is not None:
            full = torch.zeros(W * Tmax, H, dtype=torch.float32, device=hidden.device)
            full[idx] = y
            y = full
        mine = reduce_scatter_rows(y, self.info)                               # [Tmax, H] fp32 sum
        return mine[:T].to(hidden.dtype)
