"""``FusedMoE`` (the nn.Module) and ``fused_moe`` (the function).

The expert computation and the routing are registered as ``torch.library`` custom ops with fake
(meta) implementations, so ``torch.compile`` traces through them and CUDA graphs can capture
them: the per-call path allocates only through the caching allocator and never syncs the host
(except the reference backend, which is a Python loop by design). Eager inference calls on plain
tensors run the ops' implementations directly (``_eager_direct``): the same code, without the
dispatcher's host cost.
"""

from __future__ import annotations

import functools
import os
from typing import Optional, Union

import torch

from . import backends as _backends
from .backends.base import MoERequest, resolve_activation_format, validate_call
from .config import Activation, ActivationParams, Format, RoutingConfig, RoutingMethod, TopK
from .formats import QuantizedTensor
from .routing import route, unpack_topk
from .weights import ExpertWeights

__all__ = ["FusedMoE", "fused_moe"]


# --- the custom op ---------------------------------------------------------------------------
# Tensors travel as op arguments; everything static travels in one string ``spec`` (parsed once
# per distinct value and cached), so one op covers every format and activation.

def _spec(backend: str, w: ExpertWeights, act_fmt: Format, offset: int, num_experts: int, on_input: bool) -> str:
    p = w.act_params
    pp = "" if p is None else f"{p.alpha!r},{p.beta!r},{p.limit!r}"
    # what the op's tensors do not carry: each weight's value layout and measured scale-code range
    qq = ";".join(f"{q.value_layout}:{'' if q.scale_code_range is None else '%d,%d' % q.scale_code_range}"
                  for q in (w.w13, w.w2))
    return "|".join([backend, w.format.name, act_fmt.name, w.activation.name, str(w.w13.block_rows),
                     str(w.intermediate_size), str(offset), str(num_experts), str(int(on_input)), pp, qq])


def _parse_q(field: str):
    layout, _, r = field.partition(":")
    return layout, (tuple(map(int, r.split(","))) if r else None)


@functools.lru_cache(maxsize=256)
def _parse_spec(spec: str):
    backend, wf, af, act, br, I, off, ne, oi, pp, qq = spec.split("|")
    params = ActivationParams(*map(float, pp.split(","))) if pp else None
    q13, q2 = map(_parse_q, qq.split(";"))
    return (backend, Format[wf], Format[af], Activation[act], int(br), int(I), int(off), int(ne), bool(int(oi)), params,
            q13, q2)


def _trusted(cls, **fields):
    """Rebuild a frozen container from fields that came out of an already validated instance
    (the op's arguments are ``_flatten`` of a checked ExpertWeights): no re-validation per call."""
    obj = object.__new__(cls)
    for k, v in fields.items():
        object.__setattr__(obj, k, v)
    return obj


def _flatten(w: ExpertWeights):
    return (w.w13.data, w.w13.scale, w.w13.global_scale, w.w2.data, w.w2.scale, w.w2.global_scale,
            w.w13_bias, w.w2_bias, w.input_scale, w.intermediate_scale)


@torch.library.custom_op("fusedmoe::experts", mutates_args=())
def _experts_op(
    hidden: torch.Tensor,
    ids: torch.Tensor,
    topk_weights: torch.Tensor,
    w13: torch.Tensor,
    w13_scale: Optional[torch.Tensor],
    w13_gscale: Optional[torch.Tensor],
    w2: torch.Tensor,
    w2_scale: Optional[torch.Tensor],
    w2_gscale: Optional[torch.Tensor],
    w13_bias: Optional[torch.Tensor],
    w2_bias: Optional[torch.Tensor],
    input_scale: Optional[torch.Tensor],
    intermediate_scale: Optional[torch.Tensor],
    spec: str,
) -> torch.Tensor:
    weights = _unflatten(spec, w13, w13_scale, w13_gscale, w2, w2_scale, w2_gscale, w13_bias, w2_bias, input_scale,
                         intermediate_scale)
    return _run_spec(hidden, weights, ids, topk_weights, spec)


def _unflatten(spec: str, w13, w13_scale, w13_gscale, w2, w2_scale, w2_gscale, w13_bias, w2_bias, input_scale,
               intermediate_scale) -> ExpertWeights:
    """The ExpertWeights that ``_flatten`` took apart (with ``_spec``'s fields), not re-validated."""
    _, wf, _, act, br, I, _, _, _, params, (l13, r13), (l2, r2) = _parse_spec(spec)
    return _trusted(
        ExpertWeights,
        w13=_trusted(QuantizedTensor, data=w13, fmt=wf, scale=w13_scale, global_scale=w13_gscale, block_rows=br,
                     scale_code_range=r13, value_layout=l13),
        w2=_trusted(QuantizedTensor, data=w2, fmt=wf, scale=w2_scale, global_scale=w2_gscale, block_rows=br,
                    scale_code_range=r2, value_layout=l2),
        activation=act, intermediate_size=I, w13_bias=w13_bias, w2_bias=w2_bias,
        input_scale=input_scale, intermediate_scale=intermediate_scale, act_params=params)


def _run_spec(hidden, weights: ExpertWeights, ids, topk_weights, spec: str) -> torch.Tensor:
    """The experts op's work: ``weights`` through the backend and options ``spec`` names."""
    backend, _, af, _, _, _, off, ne, on_input, _, _, _ = _parse_spec(spec)
    return _backends.get(backend).run(hidden, weights, TopK(ids, topk_weights), activation_format=af,
                                      local_expert_offset=off, weight_on_input=on_input, num_experts=ne)


def _eager_direct(tensors) -> bool:
    """Whether a call may run an op's implementation directly instead of through the dispatcher:
    eager (not traced by torch.compile / export), plain tensors (no fake / meta / subclass
    tensors, which need the fake implementation) and nothing that needs autograd (the op then
    raises its "no autograd formula" error at backward, as before). Saves the custom-op dispatch
    (~20-50 us of host time per op on our CPU machine) on every eager inference call."""
    if torch.compiler.is_compiling():
        return False
    grad = torch.is_grad_enabled()
    for t in tensors:
        if t is not None and (type(t) is not torch.Tensor or t.device.type == "meta" or (grad and t.requires_grad)):
            return False
    return True


@_experts_op.register_fake
def _(hidden, ids, topk_weights, *args):
    return hidden.new_empty(hidden.shape)


@torch.library.custom_op("fusedmoe::route", mutates_args=())
def _route_op(logits: torch.Tensor, bias: Optional[torch.Tensor], spec: str) -> tuple[torch.Tensor, torch.Tensor]:
    cfg = _parse_routing_spec(spec)
    r = route(logits, cfg, bias)
    return r.ids, r.weights


@_route_op.register_fake
def _(logits, bias, spec):
    k = _parse_routing_spec(spec).top_k
    T = logits.shape[0]
    return logits.new_empty((T, k), dtype=torch.int32), logits.new_empty((T, k), dtype=torch.float32)


@functools.lru_cache(maxsize=64)
def _parse_routing_spec(spec: str) -> RoutingConfig:
    m, k, ng, tg, s, r = spec.split("|")
    return RoutingConfig(RoutingMethod[m], int(k), int(ng), int(tg), float(s), r == "1")


def _routing_spec(c: RoutingConfig) -> str:
    return "|".join([c.method.name, str(c.top_k), str(c.n_group), str(c.topk_group),
                     repr(c.routed_scaling_factor), "1" if c.renormalize else "0"])


# --- public entry points ---------------------------------------------------------------------

def _as_topk(topk) -> TopK:
    if isinstance(topk, TopK):
        return topk
    if isinstance(topk, torch.Tensor):
        if topk.dtype != torch.int32:
            raise TypeError(f"a packed top-k tensor must be int32 [T, K] (fm.pack_topk), got {topk.dtype}")
        return unpack_topk(topk)
    if isinstance(topk, tuple) and len(topk) == 2:
        return TopK(*topk)
    raise TypeError(f"topk must be a fm.TopK, an (ids, weights) pair or a packed int32 tensor, got {type(topk).__name__}")


def _check_ids_now(t: torch.Tensor) -> bool:
    """Expert-id range checks need the values (a host sync on a GPU): done on CPU tensors and in
    eager GPU code, skipped while a CUDA graph is captured or torch.compile traces."""
    if t.device.type != "cuda":
        return True
    if torch.compiler.is_compiling():
        return False
    return not torch.cuda.is_current_stream_capturing()


@functools.lru_cache(maxsize=256)
def _resolve_backend(backend: str, request: MoERequest, device: torch.device, interpreter: Optional[str]) -> str:
    """Backend choice depends only on (name, request, device, whether Triton interprets):
    resolved once per distinct key (errors are not cached, so they are raised every time)."""
    return _backends.resolve(backend, request, device).name


def _run_experts(hidden, weights: ExpertWeights, topk: TopK, *, activation, backend, activation_format,
                 num_experts, local_expert_offset, weight_on_input, check_ids=None,
                 spec: Optional[str] = None) -> torch.Tensor:
    """Validate the call, then run the experts op. ``spec``: the op's static description when
    the caller (a FusedMoE layer) fixed it once; otherwise it is derived here."""
    ne = weights.num_experts if num_experts is None else num_experts
    validate_call(hidden, weights, topk, activation=activation, local_expert_offset=local_expert_offset,
                  num_experts=ne, weight_on_input=weight_on_input,
                  check_ids=_check_ids_now(hidden) if check_ids is None else check_ids)
    if spec is None:
        af = resolve_activation_format(weights.format, activation_format)
        req = MoERequest.from_weights(weights, af, weight_on_input=weight_on_input,
                                      expert_parallel=ne != weights.num_experts)
        name = _resolve_backend(backend, req, hidden.device, os.environ.get("TRITON_INTERPRET"))
        spec = _spec(name, weights, af, local_expert_offset, ne, weight_on_input)
    ids = topk.ids if topk.ids.dtype == torch.int32 else topk.ids.to(torch.int32)
    tw = topk.weights if topk.weights.dtype == torch.float32 else topk.weights.float()
    flat = _flatten(weights)
    if _eager_direct((hidden, ids, tw) + flat):
        return _run_spec(hidden, weights, ids, tw, spec)
    return _experts_op(hidden, ids, tw, *flat, spec)


def fused_moe(
    hidden: torch.Tensor,
    weights: ExpertWeights,
    topk,
    *,
    activation: Activation,
    backend: str = "auto",
    activation_format: Optional[Format] = None,
    num_experts: Optional[int] = None,
    local_expert_offset: int = 0,
    weight_on_input: bool = False,
) -> torch.Tensor:
    """Run the experts for precomputed routing (``topk``: fm.TopK, (ids, weights) or packed
    int32); weights are used as given. Returns ``[T, H]`` in hidden's dtype."""
    return _run_experts(hidden, weights, _as_topk(topk), activation=activation, backend=backend,
                        activation_format=activation_format, num_experts=num_experts,
                        local_expert_offset=local_expert_offset, weight_on_input=weight_on_input)


class FusedMoE(torch.nn.Module):
    """A MoE layer's experts with routing: ``moe(hidden, router_logits, routing_bias=None)``.

    Args:
        weights: prepared ``fm.ExpertWeights`` (the local experts when expert-parallel).
        routing: ``fm.RoutingConfig``; LLAMA4 applies the weight on the input.
        activation: must match the activation the weights were prepared for.
        backend: "auto" (``fm.backends.select``) or a backend name (raises if unsupported).
        activation_format: None for the weight format's natural pairing. The layer keeps
            ``weights.for_activation_format(activation_format)`` (MXFP4 weights run with MXFP8 activations on
            the E4M3 path -- not the default -- get a copy with plain-nibble FP4 values, faster there).
        num_experts: global expert count (default: the weights' count).
        local_expert_offset: global id of the first local expert.
    """

    def __init__(self, weights: ExpertWeights, *, routing: RoutingConfig, activation: Activation,
                 backend: str = "auto", activation_format: Optional[Format] = None,
                 num_experts: Optional[int] = None, local_expert_offset: int = 0):
        super().__init__()
        if not isinstance(weights, ExpertWeights):
            raise TypeError(f"weights must be a fm.ExpertWeights, got {type(weights).__name__}")
        if not isinstance(routing, RoutingConfig):
            raise TypeError(f"routing must be a fm.RoutingConfig, got {type(routing).__name__}")
        if activation is not weights.activation:
            raise ValueError(f"activation={activation!r} but the weights were prepared for {weights.activation!r}")
        self.routing = routing
        self.activation = activation
        self.num_experts = weights.num_experts if num_experts is None else int(num_experts)
        self.local_expert_offset = int(local_expert_offset)
        if routing.num_experts is not None and routing.num_experts != self.num_experts:
            raise ValueError(f"routing.num_experts={routing.num_experts} but num_experts={self.num_experts}")
        routing.check_num_experts(self.num_experts)
        if not 0 <= self.local_expert_offset <= self.num_experts - weights.num_experts:
            raise ValueError(f"local_expert_offset={local_expert_offset} with {weights.num_experts} local experts "
                             f"does not fit in num_experts={self.num_experts}")
        self.activation_format = resolve_activation_format(weights.format, activation_format)
        self.weights = weights.for_activation_format(self.activation_format)  # MXFP4 x MXFP8 E4M3: plain nibbles
        req = MoERequest.from_weights(weights, self.activation_format, weight_on_input=routing.weight_on_input,
                                      expert_parallel=self.num_experts != weights.num_experts)
        if backend == "auto":
            self.backend, self.backend_reason = _backends.select(req, weights.device)
        else:
            self.backend = _backends.resolve(backend, req, weights.device).name
            self.backend_reason = f"{backend}: requested explicitly"
        self._routing_spec = _routing_spec(routing)
        # the spec carries each weight's value layout: that of the weights the layer runs (self.weights)
        self._experts_spec = _spec(self.backend, self.weights, self.activation_format, self.local_expert_offset,
                                   self.num_experts, routing.weight_on_input)

    def extra_repr(self) -> str:
        return (f"{self.weights!r}, routing={self.routing!r}, backend={self.backend!r}, "
                f"activation_format={self.activation_format!r}, num_experts={self.num_experts}, "
                f"local_expert_offset={self.local_expert_offset}")

    def route(self, router_logits: torch.Tensor, routing_bias: Optional[torch.Tensor] = None) -> TopK:
        if not isinstance(router_logits, torch.Tensor) or router_logits.dim() != 2:
            raise ValueError(f"router_logits must be a [T, E] tensor, got {getattr(router_logits, 'shape', type(router_logits))}")
        if router_logits.shape[1] != self.num_experts:
            raise ValueError(f"router_logits has {router_logits.shape[1]} experts, the layer has num_experts={self.num_experts}")
        if routing_bias is not None and not self.routing.uses_bias:
            raise ValueError(f"routing_bias given, but {self.routing.method.name} routing takes no bias")
        if _eager_direct((router_logits, routing_bias)):
            return route(router_logits, _parse_routing_spec(self._routing_spec), routing_bias)
        ids, w = _route_op(router_logits, routing_bias, self._routing_spec)
        return TopK(ids, w)

    def forward(self, hidden: torch.Tensor, router_logits: torch.Tensor,
                routing_bias: Optional[torch.Tensor] = None) -> torch.Tensor:
        if isinstance(hidden, torch.Tensor) and isinstance(router_logits, torch.Tensor) and \
                hidden.dim() == 2 and router_logits.dim() == 2 and hidden.shape[0] != router_logits.shape[0]:
            raise ValueError(f"hidden has {hidden.shape[0]} tokens but router_logits has {router_logits.shape[0]}")
        topk = self.route(router_logits, routing_bias)
        # ids come from our own routing: in range by construction, no check (no host sync)
        return _run_experts(hidden, self.weights, topk, activation=self.activation, backend=self.backend,
                            activation_format=self.activation_format, num_experts=self.num_experts,
                            local_expert_offset=self.local_expert_offset,
                            weight_on_input=self.routing.weight_on_input, check_ids=False,
                            spec=self._experts_spec)

    def forward_routed(self, hidden: torch.Tensor, topk: Union[TopK, torch.Tensor]) -> torch.Tensor:
        """Precomputed routing (fm.TopK or packed int32 [T, K]); weights used as given."""
        tk = _as_topk(topk)
        return _run_experts(hidden, self.weights, tk, activation=self.activation, backend=self.backend,
                            activation_format=self.activation_format, num_experts=self.num_experts,
                            local_expert_offset=self.local_expert_offset,
                            weight_on_input=self.routing.weight_on_input, spec=self._experts_spec)
