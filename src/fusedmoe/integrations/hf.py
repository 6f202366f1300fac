"""Hugging Face transformers (5.x) integration: fusedmoe as an experts implementation.

transformers 5 stores the experts of a MoE layer as 3-D parameters (``gate_up_proj [E, 2I, H]``,
``down_proj [E, H, I]``; variants below) in classes decorated with
``@use_experts_implementation``, whose ``forward(hidden_states, top_k_index, top_k_weights)``
dispatches to ``ExpertsInterface[config._experts_implementation]``. :func:`register` adds
``"fusedmoe"`` to that registry; :func:`enable` switches a model to it (and patches the Llama-4
MoE blocks, which have no registry hook). Routing stays the model's own: the experts receive
transformers' top-k ids and weights and run in fusedmoe's routed mode, weights used as given.

Layouts handled (``docs/models.md`` section 6 of the shared docs):

======================  =====================================  ==============================
experts class           parameters                              fusedmoe view
======================  =====================================  ==============================
default (Qwen3-MoE,     ``gate_up_proj [E, 2I, H]`` ([gate;up]), SWIGLU / GEGLU from ``act_fn``
Mixtral, DeepSeek-V3,   ``down_proj [E, H, I]``
MiniMax-M2)
Nemotron-H              ``up_proj [E, I, H_in]``,               RELU2 (non-gated); H_in is
(``has_gate=False``)    ``down_proj [E, H_in, I]``              ``moe_latent_size`` for Super
gpt-oss                 ``gate_up_proj [E, H, 2I]`` transposed  SWIGLU_OAI (alpha, limit from
                        and interleaved (gate = even columns),  the module, beta 1), biases
                        ``gate_up_proj_bias [E, 2I]``,
                        ``down_proj [E, I, H]``, ``down_proj_bias``
Llama-4 (module patch)  ``gate_up_proj [E, H, 2I]`` transposed,  SWIGLU, routing weight on the
                        ``down_proj [E, I, H]``                  input (sigmoid of the top-1 logit)
======================  =====================================  ==============================

Weights are converted once per experts module and cached on it (``module._fusedmoe_state``);
the cache is rebuilt when a source parameter is replaced or modified in place (its ``data_ptr``
or autograd version counter changes) or the device changes. Unquantized weights whose layout is
already fusedmoe's canonical one are shared, not copied. :func:`quantize_model` converts every
experts module to a quantized :class:`fusedmoe.Format` (FP8 / NVFP4 / MXFP4 ...) once.

Inference only: the fused experts have no backward.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

import torch
import torch.nn.functional as F

from ..config import Activation, ActivationParams, Format, TopK
from ..weights import ExpertWeights
from ..weights.expert_weights import padded_intermediate

try:  # the routed-mode entry point that can skip the id-range check (no host sync per layer)
    from ..layer import _run_experts as _RUN_EXPERTS
except ImportError:  # pragma: no cover - fall back to the public API
    _RUN_EXPERTS = None
from ..layer import fused_moe

__all__ = [
    "IMPLEMENTATION_NAME",
    "UnsupportedModelError",
    "register",
    "is_registered",
    "experts_forward",
    "find_experts",
    "describe_experts",
    "enable",
    "disable",
    "quantize_model",
    "prepare_experts",
    "set_expert_weights",
    "clear_cache",
    "patch_llama4_moe",
    "load_checkpoint_experts",
]

IMPLEMENTATION_NAME = "fusedmoe"
"""The name fusedmoe registers under in transformers' ``ExpertsInterface``."""

_STATE_ATTR = "_fusedmoe_state"
_ORIG_FORWARD_ATTR = "_fusedmoe_original_forward"
_PREV_IMPL_ATTR = "_fusedmoe_previous_experts_implementation"

_LLAMA4_EXPERTS = "Llama4TextExperts"
_LLAMA4_MOE = "Llama4TextMoe"
_GPT_OSS_EXPERTS = "GptOssExperts"


class UnsupportedModelError(ValueError):
    """The model (or one of its MoE layers) is not something fusedmoe can run."""


# ----------------------------------------------------------------------------------------------
# registration
# ----------------------------------------------------------------------------------------------


def _transformers():
    try:
        import transformers  # noqa: F401
        from transformers.integrations import moe as tf_moe
    except ImportError as e:  # pragma: no cover - exercised only without transformers
        raise ImportError(
            "fusedmoe.integrations needs transformers >= 5.0 (pip install 'fusedmoe[transformers]')"
        ) from e
    if not hasattr(tf_moe, "ExpertsInterface"):
        raise ImportError(
            f"transformers {transformers.__version__} has no ExpertsInterface; fusedmoe needs transformers >= 5.0"
        )
    return tf_moe


def register(name: str = IMPLEMENTATION_NAME) -> str:
    """Register fusedmoe in transformers' (global) ``ExpertsInterface`` under ``name``.

    Call it **before** building a model with ``experts_implementation=name``
    (``from_pretrained`` / ``from_config`` validate the name at construction). Idempotent;
    returns ``name``. :func:`enable` calls it for you.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    tf_moe = _transformers()
    tf_moe.ExpertsInterface.register(name, experts_forward)
    try:  # transformers' own FP8-quantized experts dispatch through a separate registry: make the
        # name resolve there too, so such a model gets fusedmoe's "not supported" message, not a KeyError
        from transformers.integrations import finegrained_fp8

        finegrained_fp8.FP8ExpertsInterface.register(name, experts_forward)
    except (ImportError, AttributeError):
        pass
    return name


def is_registered(name: str = IMPLEMENTATION_NAME) -> bool:
    """Whether ``name`` is registered in transformers' ``ExpertsInterface``."""
    try:
        tf_moe = _transformers()
    except ImportError:
        return False
    return name in tf_moe.ALL_EXPERTS_FUNCTIONS


# ----------------------------------------------------------------------------------------------
# layouts
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Layout:
    """How one experts module stores its weights."""

    gated: bool
    transposed: bool  # [E, in, out] instead of [E, out, in]
    interleaved: bool  # gated rows alternate gate/up (gpt-oss)
    has_bias: bool
    activation: Activation
    act_params: Optional[ActivationParams]
    w13_name: str
    w2_name: str
    w13_bias_name: Optional[str]
    w2_bias_name: Optional[str]


def _act_name(act) -> Optional[str]:
    """The name of a transformers / torch activation module, as fusedmoe understands it."""
    try:
        from transformers import activations as tfa
    except ImportError:  # pragma: no cover
        tfa = None
    if tfa is not None:
        if isinstance(act, getattr(tfa, "ReLUSquaredActivation", ())):
            return "relu2"
        if isinstance(act, getattr(tfa, "SiLUActivation", ())):
            return "silu"
        if isinstance(act, getattr(tfa, "GELUActivation", ())):
            return "gelu"
        if isinstance(act, getattr(tfa, "LinearActivation", ())):
            return "identity"
    if isinstance(act, torch.nn.SiLU):
        return "silu"
    if isinstance(act, torch.nn.ReLU):
        return "relu"
    if isinstance(act, torch.nn.GELU) and getattr(act, "approximate", "none") == "none":
        return "gelu"
    if isinstance(act, torch.nn.Identity):
        return "identity"
    if act is F.silu:
        return "silu"
    if act is F.gelu:
        return "gelu"
    if act is F.relu:
        return "relu"
    return None


_GATED = {"silu": Activation.SWIGLU, "gelu": Activation.GEGLU}
_NON_GATED = {
    "relu2": Activation.RELU2,
    "silu": Activation.SILU,
    "gelu": Activation.GELU,
    "relu": Activation.RELU,
    "identity": Activation.IDENTITY,
}


def _layout(module: torch.nn.Module, name: str = "") -> _Layout:
    """The layout of a transformers experts module, or UnsupportedModelError saying why not."""
    cls = type(module).__name__
    where = f"{name} ({cls})" if name else cls
    if cls == _LLAMA4_EXPERTS:
        gated, transposed, concatenated, has_bias = True, True, True, False
    elif all(hasattr(module, a) for a in ("has_gate", "is_transposed", "is_concatenated", "has_bias")):
        gated, transposed = bool(module.has_gate), bool(module.is_transposed)
        concatenated, has_bias = bool(module.is_concatenated), bool(module.has_bias)
    else:
        raise UnsupportedModelError(
            f"{where} is not a transformers experts module (no @use_experts_implementation flags)")
    w13_name = "gate_up_proj" if gated else "up_proj"
    for p in (w13_name, "down_proj"):
        t = getattr(module, p, None)
        if not isinstance(t, torch.Tensor) or t.dim() != 3:
            raise UnsupportedModelError(
                f"{where}: expected a 3-D expert parameter '{p}', found "
                f"{'none' if t is None else type(t).__name__ + ' of shape ' + str(tuple(getattr(t, 'shape', ())))}"
                " (quantized experts modules such as transformers' FP8Experts are not supported: load the "
                "checkpoint with fusedmoe.weights.loaders and attach it with set_expert_weights)")
        if t.dtype not in (torch.bfloat16, torch.float16, torch.float32):
            raise UnsupportedModelError(
                f"{where}: parameter '{p}' has dtype {t.dtype}; fusedmoe converts bf16/fp16/fp32 expert parameters "
                "(a model quantized by transformers itself, e.g. FP8Experts, is not supported: load it dequantized "
                "and attach the checkpoint's experts with load_checkpoint_experts, or use quantize_model)")
    act_params = None
    if cls == _GPT_OSS_EXPERTS:
        if not (gated and transposed and not concatenated and has_bias):
            raise UnsupportedModelError(f"{where}: unexpected gpt-oss layout flags")
        activation = Activation.SWIGLU_OAI
        act_params = ActivationParams(alpha=float(module.alpha), beta=1.0, limit=float(module.limit))
    else:
        custom_gate = getattr(type(module), "_apply_gate", None)
        if gated and custom_gate is not None:
            default_gate = getattr(_transformers(), "_default_apply_gate", None)
            if custom_gate is not default_gate:
                raise UnsupportedModelError(
                    f"{where} defines its own _apply_gate; fusedmoe supports the default "
                    "act(gate) * up and gpt-oss's clamped SwiGLU only")
        if not concatenated:
            raise UnsupportedModelError(f"{where}: interleaved gate/up weights are supported for gpt-oss only")
        act = getattr(module, "act_fn", None)
        an = _act_name(act)
        table = _GATED if gated else _NON_GATED
        if an not in table:
            kind = "gated" if gated else "non-gated"
            raise UnsupportedModelError(
                f"{where}: the {kind} expert activation {type(act).__name__} is not supported by fusedmoe "
                f"(supported {kind}: {sorted(table)})")
        activation = table[an]
    return _Layout(
        gated=gated, transposed=transposed, interleaved=gated and not concatenated, has_bias=has_bias,
        activation=activation, act_params=act_params, w13_name=w13_name, w2_name="down_proj",
        w13_bias_name=(w13_name + "_bias") if has_bias else None,
        w2_bias_name="down_proj_bias" if has_bias else None,
    )


def _sources(module, layout: _Layout) -> List[torch.Tensor]:
    names = [layout.w13_name, layout.w2_name, layout.w13_bias_name, layout.w2_bias_name]
    return [getattr(module, n) for n in names if n is not None]


def _version(t: torch.Tensor) -> int:
    try:
        return t._version
    except RuntimeError:  # inference tensors have no version counter (and cannot change in place)
        return -1


def _key(tensors) -> tuple:
    """Identity of the source parameters: storage, in-place version, device, dtype, shape."""
    return tuple((t.data_ptr(), _version(t), t.device, t.dtype, tuple(t.shape)) for t in tensors)


def _canonical_float(module, layout: _Layout):
    """(w13 [E, M, H] gate-first, w2 [E, H, I], b13 [E, M] | None, b2 [E, H] | None), detached."""
    w13 = getattr(module, layout.w13_name).detach()
    w2 = getattr(module, layout.w2_name).detach()
    b13 = getattr(module, layout.w13_bias_name).detach() if layout.w13_bias_name else None
    b2 = getattr(module, layout.w2_bias_name).detach() if layout.w2_bias_name else None
    if layout.transposed:
        w13 = w13.transpose(1, 2)
        w2 = w2.transpose(1, 2)
    if layout.interleaved:
        w13 = torch.cat([w13[:, 0::2], w13[:, 1::2]], dim=1)
        if b13 is not None:
            b13 = torch.cat([b13[:, 0::2], b13[:, 1::2]], dim=1)
    return w13, w2, b13, b2


def _convert(module, layout: _Layout, fmt: Format, name: str = "") -> ExpertWeights:
    """The module's weights as ExpertWeights in ``fmt`` (shared storage when possible)."""
    w13, w2, b13, b2 = _canonical_float(module, layout)
    E, M, H = w13.shape
    if w2.dim() != 3 or w2.shape[0] != E or w2.shape[1] != H:
        raise UnsupportedModelError(
            f"{name or type(module).__name__}: down_proj gives [E, H, I] = {tuple(w2.shape)}, expected "
            f"[{E}, {H}, I] to match {layout.w13_name}")
    I = w2.shape[2]
    if fmt is Format.BF16:
        # Zero-copy when the layout already is the canonical one (no reorder, no padding).
        I_pad = padded_intermediate(I, fmt, layout.gated)
        if (I == I_pad and not layout.transposed and not layout.interleaved and w13.is_contiguous()
                and w2.is_contiguous() and w13.dtype in (torch.bfloat16, torch.float16, torch.float32)
                and w2.dtype == w13.dtype):
            from ..formats import QuantizedTensor

            return ExpertWeights(
                w13=QuantizedTensor(w13, Format.BF16), w2=QuantizedTensor(w2, Format.BF16),
                activation=layout.activation, intermediate_size=I,
                w13_bias=None if b13 is None else b13.float().contiguous(),
                w2_bias=None if b2 is None else b2.float().contiguous(),
                act_params=layout.act_params)
        dtype = w13.dtype if w13.dtype in (torch.bfloat16, torch.float16, torch.float32) else torch.bfloat16
        return ExpertWeights.from_float(w13, w2, activation=layout.activation, format=fmt, w13_bias=b13,
                                        w2_bias=b2, act_params=layout.act_params, dtype=dtype)
    try:
        return ExpertWeights.from_float(w13, w2, activation=layout.activation, format=fmt,
                                        w13_bias=b13, w2_bias=b2, act_params=layout.act_params)
    except ValueError as e:
        raise ValueError(f"{name or type(module).__name__}: cannot quantize the experts to {fmt!r}: {e}") from e


# ----------------------------------------------------------------------------------------------
# per-module state
# ----------------------------------------------------------------------------------------------


@dataclass
class _State:
    layout: Optional[_Layout]
    format: Format = Format.BF16
    activation_format: Optional[Format] = None
    backend: str = "auto"
    weights: Optional[ExpertWeights] = None  # converted (or pinned) weights
    key: Optional[tuple] = None  # source identity of ``weights``; None when pinned
    pinned: bool = False  # weights attached by the user (loaded checkpoint): never rebuilt
    by_device: Dict[str, ExpertWeights] = field(default_factory=dict)  # pinned weights per device
    conversions: int = 0  # how many times weights were built (tests, diagnostics)
    name: str = ""


def _state(module, name: str = "") -> _State:
    st = module.__dict__.get(_STATE_ATTR)
    if st is None:
        st = _State(layout=_layout(module, name), name=name)
        module.__dict__[_STATE_ATTR] = st
    return st


def _weights_for(module, device: torch.device) -> Tuple[_State, ExpertWeights]:
    st = _state(module)
    if st.pinned:
        w = st.by_device.get(str(device))
        if w is None:
            w = st.weights.to(device)
        # the value layout for the activation format (MXFP4 x MXFP8 on the E4M3 path: plain nibbles), converted once
        # and cached
        w = st.by_device[str(device)] = w.for_activation_format(st.activation_format)
        return st, w
    srcs = _sources(module, st.layout)
    key = _key(srcs)
    if st.weights is None or st.key != key:
        st.weights = None  # drop the stale copy before building the new one
        st.weights = _convert(module, st.layout, st.format, st.name)
        st.key = key
        st.conversions += 1
    w = st.weights = st.weights.for_activation_format(st.activation_format)  # once: then it is ``st.weights``
    if w.device != device:
        raise ValueError(
            f"{st.name or type(module).__name__}: hidden states are on {device} but the expert weights on "
            f"{w.device}; move the model (model.to(device)) instead of the inputs")
    return st, w


def prepare_experts(module: torch.nn.Module, *, format: Union[Format, str, None] = None,
                    activation_format: Union[Format, str, None] = None, backend: Optional[str] = None,
                    name: str = "") -> ExpertWeights:
    """Convert (once) and return the fusedmoe weights of a transformers experts module.

    ``format`` / ``activation_format`` / ``backend`` change the module's fusedmoe settings (the
    next forward uses them); None keeps the current ones (default BF16, the natural activation
    format, "auto"). Returns the cached :class:`fusedmoe.ExpertWeights`.
    """
    st = _state(module, name)
    fmt = _as_format(format, "format") if format is not None else st.format
    if fmt is not None and not fmt.is_weight_format:
        raise ValueError(f"format must be a weight format, got {fmt!r}")
    changed = fmt is not st.format
    if activation_format is not None:
        st.activation_format = _as_format(activation_format, "activation_format")
    if backend is not None:
        if not isinstance(backend, str):
            raise TypeError(f"backend must be a string, got {backend!r}")
        st.backend = backend
    if st.pinned and changed:
        raise ValueError(f"{st.name or type(module).__name__}: its weights were attached with set_expert_weights "
                         f"({st.weights.format!r}); they cannot be re-quantized to {fmt!r}")
    if changed:
        st.format, st.weights, st.key = fmt, None, None
    if st.pinned:
        return st.weights
    dev = getattr(module, st.layout.w13_name).device
    return _weights_for(module, dev)[1]


def set_expert_weights(module: torch.nn.Module, weights: ExpertWeights, *,
                       activation_format: Union[Format, str, None] = None, backend: Optional[str] = None,
                       release_parameters: bool = False) -> None:
    """Attach prepared weights (e.g. from a checkpoint loader) to a transformers experts module.

    The fusedmoe implementation then uses ``weights`` (moved to the hidden states' device on
    first use) instead of converting the module's parameters. Checks that ``weights`` match the
    module (experts, hidden size, intermediate size, activation). ``release_parameters=True``
    replaces the module's own expert parameters by empty tensors to free their memory (the eager
    implementation can then no longer run this module).
    """
    if not isinstance(weights, ExpertWeights):
        raise TypeError(f"weights must be a fm.ExpertWeights, got {type(weights).__name__}")
    st = _state(module)
    lay = st.layout
    where = st.name or type(module).__name__
    if weights.activation is not lay.activation:
        raise ValueError(f"{where}: the module's experts use {lay.activation!r}, the weights {weights.activation!r}")
    if lay.act_params is not None and weights.act_params != lay.act_params:
        raise ValueError(f"{where}: act_params {weights.act_params} differ from the module's {lay.act_params}")
    if not st.pinned:
        w13 = getattr(module, lay.w13_name)
        w2 = getattr(module, lay.w2_name)
        E = w13.shape[0]
        H = w13.shape[1] if lay.transposed else w13.shape[2]
        I = w2.shape[1] if lay.transposed else w2.shape[2]
        if w13.numel() and (weights.num_experts, weights.hidden_size, weights.intermediate_size) != (E, H, I):
            raise ValueError(
                f"{where}: the weights have (experts, hidden, intermediate) = "
                f"({weights.num_experts}, {weights.hidden_size}, {weights.intermediate_size}); the module has "
                f"({E}, {H}, {I})")
    if (weights.w13_bias is not None) != lay.has_bias:
        raise ValueError(f"{where}: the module {'has' if lay.has_bias else 'has no'} expert biases, the weights "
                         f"{'do' if weights.w13_bias is not None else 'do not'}")
    st.weights, st.key, st.pinned, st.format = weights, None, True, weights.format
    st.by_device = {str(weights.device): weights}
    if activation_format is not None:
        st.activation_format = _as_format(activation_format, "activation_format")
    if backend is not None:
        st.backend = backend
    if release_parameters:
        with torch.no_grad():
            for t in _sources(module, lay):
                t.data = torch.empty(0, dtype=t.dtype, device=t.device)


def clear_cache(model: torch.nn.Module) -> None:
    """Forget converted weights (they are rebuilt on the next forward); keeps settings and weights
    attached with :func:`set_expert_weights`. Needed only after writing a parameter through
    ``param.data`` (which bypasses the version counter the cache watches)."""
    for _, m in _iter_modules(model):
        st = m.__dict__.get(_STATE_ATTR)
        if st is not None and not st.pinned:
            st.weights, st.key = None, None


# ----------------------------------------------------------------------------------------------
# the experts function
# ----------------------------------------------------------------------------------------------


def _run(hidden: torch.Tensor, w: ExpertWeights, ids: torch.Tensor, tw: torch.Tensor, st: _State,
         weight_on_input: bool = False) -> torch.Tensor:
    E = w.num_experts
    ids = ids.to(torch.int32)
    # Expert-parallel sentinels (ids >= E, weight 0) become the id E, which is outside the local
    # experts [0, E) of a layer declared with E + 1 experts: they contribute nothing.
    ids = torch.where(ids < E, ids, torch.full_like(ids, E))
    tw = tw.to(torch.float32)
    topk = TopK(ids, tw)
    if _RUN_EXPERTS is not None:
        return _RUN_EXPERTS(hidden, w, topk, activation=w.activation, backend=st.backend,
                            activation_format=st.activation_format, num_experts=E + 1, local_expert_offset=0,
                            weight_on_input=weight_on_input, check_ids=False)
    return fused_moe(hidden, w, topk, activation=w.activation, backend=st.backend,  # pragma: no cover
                     activation_format=st.activation_format, num_experts=E + 1, weight_on_input=weight_on_input)


def experts_forward(self: torch.nn.Module, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                    top_k_weights: torch.Tensor) -> torch.Tensor:
    """The ``ExpertsInterface`` function: transformers' experts forward through fusedmoe.

    ``hidden_states [T, H_in]``, ``top_k_index [T, K]`` (ids >= E are expert-parallel sentinels
    and contribute nothing), ``top_k_weights [T, K]`` (normalized and scaled by the model; used as
    given). Returns ``[T, H_in]`` in ``hidden_states.dtype``.
    """
    if hidden_states.dim() != 2:
        raise ValueError(f"hidden_states must be [T, H], got shape {tuple(hidden_states.shape)}")
    st, w = _weights_for(self, hidden_states.device)
    return _run(hidden_states, w, top_k_index, top_k_weights, st)


# ----------------------------------------------------------------------------------------------
# Llama-4: no registry hook; the MoE block's forward is patched per instance
# ----------------------------------------------------------------------------------------------


def _llama4_moe_forward(self, hidden_states: torch.Tensor):
    """``Llama4TextMoe.forward`` through fusedmoe: top-k of the router logits, weight =
    sigmoid(logit) applied to the expert **input** (as transformers does), plus the shared expert.
    Returns ``(out [T, H], router_logits [T, E])`` like the original."""
    hidden_states = hidden_states.reshape(-1, self.hidden_dim)
    router = self.router
    router_logits = F.linear(hidden_states, router.weight, router.bias)
    top_v, top_i = torch.topk(router_logits, router.top_k, dim=1)
    scores = torch.sigmoid(top_v.float()).to(router_logits.dtype)  # as Llama4Router computes them
    st, w = _weights_for(self.experts, hidden_states.device)
    T, K = top_i.shape
    if K == 1:
        routed = _run(hidden_states, w, top_i, scores, st, weight_on_input=True)
    else:  # one top-1 row per (token, slot), summed: weight-on-input needs top_k == 1 per row
        rep = hidden_states.repeat_interleave(K, dim=0)
        routed = _run(rep, w, top_i.reshape(-1, 1), scores.reshape(-1, 1), st, weight_on_input=True)
        routed = routed.float().view(T, K, -1).sum(1).to(hidden_states.dtype)
    out = self.shared_expert(hidden_states)
    out.add_(routed)
    return out, router_logits


def patch_llama4_moe(block: torch.nn.Module) -> None:
    """Route one ``Llama4TextMoe`` block's experts through fusedmoe (per-instance forward patch;
    the parameters stay the module's own). :func:`enable` calls this for every such block."""
    if type(block).__name__ != _LLAMA4_MOE:
        raise UnsupportedModelError(f"patch_llama4_moe expects a Llama4TextMoe, got {type(block).__name__}")
    _state(block.experts)  # validates the layout now, not at the first forward
    if _ORIG_FORWARD_ATTR not in block.__dict__:
        block.__dict__[_ORIG_FORWARD_ATTR] = block.__dict__.get("forward")
    block.forward = types.MethodType(_llama4_moe_forward, block)


def _unpatch_llama4_moe(block) -> None:
    if _ORIG_FORWARD_ATTR in block.__dict__:
        orig = block.__dict__.pop(_ORIG_FORWARD_ATTR)
        if orig is None:
            block.__dict__.pop("forward", None)
        else:
            block.forward = orig


# ----------------------------------------------------------------------------------------------
# model-level API
# ----------------------------------------------------------------------------------------------


def _is_experts_module(m: torch.nn.Module) -> bool:
    if type(m).__name__ == _LLAMA4_EXPERTS:
        return True
    return all(hasattr(m, a) for a in ("has_gate", "is_transposed", "is_concatenated", "has_bias")) and (
        hasattr(m, "gate_up_proj") or hasattr(m, "up_proj"))


def _iter_modules(model) -> Iterator[Tuple[str, torch.nn.Module]]:
    for name, m in model.named_modules():
        if _is_experts_module(m):
            yield name, m


def find_experts(model: torch.nn.Module) -> List[Tuple[str, torch.nn.Module]]:
    """``(qualified name, module)`` of every experts module fusedmoe can run in ``model``.

    Raises UnsupportedModelError when an experts module exists but cannot run (unsupported
    activation or layout), naming it; returns an empty list for models without experts."""
    out = []
    for name, m in _iter_modules(model):
        st = _state(m, name)
        st.name = st.name or name
        out.append((name, m))
    return out


def describe_experts(model: torch.nn.Module) -> List[Dict[str, Any]]:
    """One dict per experts module: name, class, activation, layout and fusedmoe settings."""
    rows = []
    for name, m in find_experts(model):
        st = _state(m)
        lay = st.layout
        rows.append(dict(name=name, cls=type(m).__name__, activation=lay.activation.name,
                         gated=lay.gated, transposed=lay.transposed, interleaved=lay.interleaved,
                         bias=lay.has_bias, format=st.format.name, pinned=st.pinned, backend=st.backend,
                         activation_format=None if st.activation_format is None else st.activation_format.name))
    return rows


def _model_desc(model) -> str:
    cfg = getattr(model, "config", None)
    mt = getattr(cfg, "model_type", None)
    return f"{type(model).__name__}" + (f" (model_type={mt!r})" if mt else "")


def _as_format(fmt, name: str) -> Format:
    if isinstance(fmt, Format):
        return fmt
    if isinstance(fmt, str):
        key = fmt.strip()
        for f in Format:
            if key.upper() == f.name or key.lower() == f.value:
                return f
        raise ValueError(f"{name}: unknown format {fmt!r}; expected one of {[f.name for f in Format]}")
    raise TypeError(f"{name} must be a fm.Format or its name, got {fmt!r}")


def enable(model: torch.nn.Module, *, backend: str = "auto", activation_format: Union[Format, str, None] = None,
           name: str = IMPLEMENTATION_NAME) -> torch.nn.Module:
    """Run every MoE layer of a transformers model through fusedmoe; returns ``model``.

    Registers the implementation, switches the model with
    ``model.set_experts_implementation(name)`` (remembering the previous one for
    :func:`disable`) and patches Llama-4 MoE blocks. ``backend`` / ``activation_format`` apply
    to every experts module. Raises UnsupportedModelError when the model has no MoE layer
    fusedmoe can run.
    """
    experts = find_experts(model)
    if not experts:
        raise UnsupportedModelError(
            f"{_model_desc(model)} has no MoE experts module fusedmoe can run. Supported: transformers 5 "
            "experts classes decorated with @use_experts_implementation (Nemotron-H, DeepSeek-V3, MiniMax-M2, "
            "Qwen3-MoE, Mixtral, gpt-oss, ...) and Llama-4 (Llama4TextMoe, patched per block)")
    register(name)
    for _, m in experts:
        prepare_experts(m, activation_format=activation_format, backend=backend)
    llama4_blocks = [m for _, m in model.named_modules() if type(m).__name__ == _LLAMA4_MOE]
    for b in llama4_blocks:
        patch_llama4_moe(b)
    registry_experts = [m for _, m in experts if type(m).__name__ != _LLAMA4_EXPERTS]
    if registry_experts:
        if hasattr(model, "set_experts_implementation") and hasattr(model, "get_experts_implementation"):
            if _PREV_IMPL_ATTR not in model.__dict__:
                model.__dict__[_PREV_IMPL_ATTR] = model.get_experts_implementation()
            model.set_experts_implementation(name)
            missed = [m for m in registry_experts
                      if getattr(getattr(m, "config", None), "_experts_implementation", name) != name]
            if missed:
                raise UnsupportedModelError(
                    f"{_model_desc(model)}: set_experts_implementation({name!r}) did not reach "
                    f"{len(missed)} experts module(s) (e.g. {type(missed[0]).__name__}); transformers could not "
                    "set an experts implementation for their sub-model")
        else:  # a bare module (e.g. one MoE block): switch the configs its experts read
            prev = {}
            for m in registry_experts:
                cfg = m.config
                prev.setdefault(id(cfg), (cfg, cfg._experts_implementation))
                cfg._experts_implementation_internal = name
            model.__dict__[_PREV_IMPL_ATTR] = list(prev.values())
    return model


def disable(model: torch.nn.Module) -> torch.nn.Module:
    """Undo :func:`enable`: restore the previous experts implementation and the Llama-4 forwards.
    Cached weights stay (``clear_cache`` drops them)."""
    for _, m in model.named_modules():
        if type(m).__name__ == _LLAMA4_MOE:
            _unpatch_llama4_moe(m)
    prev = model.__dict__.pop(_PREV_IMPL_ATTR, None)
    if isinstance(prev, dict):
        model.set_experts_implementation(prev)
    elif isinstance(prev, list):
        for cfg, impl in prev:
            cfg._experts_implementation_internal = impl
    return model


def quantize_model(model: torch.nn.Module, format: Union[Format, str] = Format.FP8_TENSOR, *,
                   activation_format: Union[Format, str, None] = None, backend: str = "auto",
                   enable_fusedmoe: bool = True, release_parameters: bool = False) -> torch.nn.Module:
    """Quantize the experts of every MoE layer to ``format`` (once, now) and run them through
    fusedmoe; returns ``model``.

    ``format``: a weight :class:`fusedmoe.Format` or its name ("fp8_tensor", "FP8_BLOCK",
    "nvfp4", "mxfp4", ...); "bf16" keeps unquantized weights. Quantization follows
    :meth:`fusedmoe.ExpertWeights.from_float` (per-expert scales computed from the weights).
    ``activation_format`` defaults to the format's natural pairing. ``release_parameters=True``
    frees the original expert parameters (the eager implementation can then no longer run).
    ``enable_fusedmoe=False`` only prepares the weights.
    """
    fmt = _as_format(format, "format")
    if not fmt.is_weight_format:
        raise ValueError(f"format must be a weight format, got {fmt!r}")
    if activation_format is not None:
        activation_format = _as_format(activation_format, "activation_format")
        if activation_format not in fmt.allowed_activation_formats():
            raise ValueError(f"activation_format={activation_format!r} is not available with {fmt!r} weights; "
                             f"expected one of {list(fmt.allowed_activation_formats())}")
    experts = find_experts(model)
    if not experts:
        raise UnsupportedModelError(f"{_model_desc(model)} has no MoE experts module fusedmoe can quantize")
    for name, m in experts:
        st = _state(m, name)
        if st.pinned:
            raise ValueError(f"{name}: its weights were attached with set_expert_weights ({st.format!r}); "
                             "quantize_model converts the module's own parameters")
        w = prepare_experts(m, format=fmt, activation_format=activation_format, backend=backend, name=name)
        if release_parameters:
            set_expert_weights(m, w, release_parameters=True)
    if enable_fusedmoe:
        enable(model, backend=backend, activation_format=activation_format)
    return model


# ----------------------------------------------------------------------------------------------
# quantized checkpoints -> a transformers model
# ----------------------------------------------------------------------------------------------


def _candidate_prefixes(name: str) -> List[str]:
    """Checkpoint key prefixes of the experts module ``name`` (transformers renames some on load:
    Mixtral / MiniMax ``block_sparse_moe`` -> ``mlp``, Nemotron-H ``backbone.`` -> ``model.``)."""
    cands = [name]
    if ".mlp." in name:
        cands.append(name.replace(".mlp.", ".block_sparse_moe."))
    if name.startswith("model."):
        cands.append("backbone." + name[len("model."):])
    return [c + "." for c in cands]


def load_checkpoint_experts(model: torch.nn.Module, checkpoint, *, checkpoint_format: Optional[str] = None,
                            prefix_fn=None, device=None, release_parameters: bool = False,
                            enable_fusedmoe: bool = True, backend: str = "auto",
                            activation_format: Union[Format, str, None] = None) -> Dict[str, ExpertWeights]:
    """Load the experts of every MoE layer of ``model`` from a quantized checkpoint and run them
    through fusedmoe; returns ``{module name: ExpertWeights}``.

    ``checkpoint``: a state dict, a safetensors file, a list of files or a checkpoint directory.
    ``checkpoint_format``: one of :data:`fusedmoe.weights.loaders.CHECKPOINT_FORMATS`; None detects
    it from the directory's ``config.json`` / ``hf_quant_config.json``. ``prefix_fn(module_name)``
    returns the checkpoint key prefix of an experts module (default: the module name, or its
    ``block_sparse_moe`` / ``backbone.`` spelling, whichever the checkpoint has). Non-expert
    weights are not touched: load the model itself as usual (e.g. ``from_pretrained`` of the
    unquantized or dequantized model, or random weights for a test). ``device``: where the
    weights go (default: the device of the module's parameters, CPU for meta parameters).
    """
    import os

    from ..weights import loaders as L

    if isinstance(checkpoint, (str, os.PathLike, list, tuple)):
        if checkpoint_format is None:
            cfg = L._read_configs(checkpoint) if isinstance(checkpoint, (str, os.PathLike)) and \
                os.path.isdir(checkpoint) else None
            if cfg is None:
                raise ValueError("checkpoint_format is needed (no config.json next to the checkpoint to detect it)")
            checkpoint_format = L.detect_checkpoint_format(cfg)
        sd = L.safetensors_state_dict(checkpoint)
    elif isinstance(checkpoint, dict) or hasattr(checkpoint, "keys"):
        sd = checkpoint
        if checkpoint_format is None:
            raise ValueError("checkpoint_format is needed when the checkpoint is a state dict")
    else:
        raise TypeError(f"checkpoint must be a state dict, a path or a list of paths, got {type(checkpoint).__name__}")
    if checkpoint_format not in L.CHECKPOINT_FORMATS:
        raise ValueError(f"checkpoint_format must be one of {list(L.CHECKPOINT_FORMATS)}, got {checkpoint_format!r}")
    experts = find_experts(model)
    if not experts:
        raise UnsupportedModelError(f"{_model_desc(model)} has no MoE experts module fusedmoe can run")
    keys = list(sd.keys())
    out: Dict[str, ExpertWeights] = {}
    for name, m in experts:
        st = _state(m, name)
        cands = [prefix_fn(name)] if prefix_fn is not None else _candidate_prefixes(name)
        prefix = next((p for p in cands if any(k.startswith(p) for k in keys)), None)
        if prefix is None:
            raise L.CheckpointError(f"no checkpoint tensors for experts module '{name}' (tried prefixes {cands})")
        lay = st.layout
        src = getattr(m, lay.w13_name)
        dev = device if device is not None else ("cpu" if src.device.type == "meta" else src.device)
        E = src.shape[0] if src.numel() or src.device.type == "meta" else None
        if checkpoint_format == "gpt_oss_mxfp4":
            w = L.load_gpt_oss_mxfp4_experts(sd, prefix, act_params=lay.act_params, num_experts=E, device=dev)
        else:
            if lay.interleaved or lay.has_bias:
                raise UnsupportedModelError(f"{name}: {type(m).__name__} experts cannot be loaded from a "
                                            f"{checkpoint_format!r} checkpoint (only gpt_oss_mxfp4)")
            w = L.load_experts(sd, prefix, checkpoint_format=checkpoint_format, activation=lay.activation,
                               num_experts=E, device=dev)
        set_expert_weights(m, w, release_parameters=release_parameters, backend=backend,
                           activation_format=activation_format)
        out[name] = w
    if enable_fusedmoe:
        enable(model, backend=backend, activation_format=activation_format)
    return out
