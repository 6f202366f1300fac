"""Checkpoint loaders: build :class:`~fusedmoe.ExpertWeights` from the experts of one MoE layer
in a safetensors state dict, in the on-disk formats real MoE checkpoints use.

=========================  ====================================================  ===================
``checkpoint_format``      tensors per expert ``e`` and projection ``p``          fusedmoe format
=========================  ====================================================  ===================
``"bf16"``                 ``{prefix}{e}.{p}.weight`` float [N, K]                BF16 (or ``format=``)
``"modelopt_fp8"``         ``weight`` e4m3 [N, K], ``weight_scale`` fp32 [],       FP8_TENSOR
                           ``input_scale`` fp32 [] (optional, static)
``"modelopt_nvfp4"``       ``weight`` uint8 [N, K/2], ``weight_scale`` e4m3        NVFP4
                           [N, K/16], ``weight_scale_2`` fp32 [], ``input_scale``
``"compressed_tensors_     ``weight`` e4m3 [N, K], ``weight_scale`` [N, 1]         FP8_CHANNEL /
fp8"``                     (channel), [ceil(N/128), K/128] (block) or [] (tensor)  FP8_BLOCK / FP8_TENSOR
``"fp8_block"``            ``weight`` e4m3 [N, K], ``weight_scale_inv`` fp32       FP8_BLOCK
                           [ceil(N/128), K/128] (DeepSeek-V3 / R1, MiniMax-M2)
``"gpt_oss_mxfp4"``        fused: ``{prefix}gate_up_proj_blocks [E, 2I, H/32,      MXFP4 + biases,
                           16]`` uint8, ``_scales [E, 2I, H/32]`` uint8,           SWIGLU_OAI
                           ``_bias [E, 2I]``, ``down_proj_blocks/_scales/_bias``
=========================  ====================================================  ===================

Projections ``p``: ``gate_proj`` / ``up_proj`` / ``down_proj`` (Qwen3, DeepSeek, Nemotron-H
without a gate) or ``w1`` / ``w3`` / ``w2`` (Mixtral, MiniMax-M2); found automatically or given
with ``proj_names=(gate, up, down)`` (``gate=None`` for non-gated experts). ``prefix`` is the
experts' key prefix, e.g. ``"model.layers.3.mlp.experts."``.

Conventions (``docs/semantics.md`` 5.3, 5.5, 5.7, 5.8, 6):

* Every scale is taken in the **dequant** convention ``w ≈ q · s`` (ModelOpt ``weight_scale``,
  compressed-tensors ``weight_scale``, DeepSeek's ``weight_scale_inv`` despite its name, and
  ModelOpt ``input_scale`` / ``weight_scale_2 = 1/g``).
* ModelOpt FP8 stores one scale per shard (w1, w3); the w13 scale is their maximum and the other
  shard is re-quantized to it, ``q' = e4m3(q · s_shard / s_max)`` (SGLang's
  ``process_weights_after_loading``). Static input scales are the maximum over the experts.
* ModelOpt NVFP4 stores ``weight_scale_2`` per shard; when w1's and w3's differ, the block scales
  of the shard with the smaller one are rescaled to the larger one (rounded to E4M3, a warning
  says so; SGLang uses w1's value for both). ``global_scale = 1 / weight_scale_2``.
* gpt-oss interleaves gate and up rows (gate = even rows); they are de-interleaved into
  fusedmoe's canonical ``[gate; up]`` order, biases likewise.
* The intermediate size is padded per half to :func:`~fusedmoe.weights.default_alignment`
  with zero values (and zero / epsilon scales), which is exact.

Bad input raises :class:`CheckpointError` (a ``ValueError``) naming the tensor and the expected
shape / dtype.
"""

from __future__ import annotations

import glob
import json
import os
import re
import warnings
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import torch

from ..config import Activation, ActivationParams, Format
from ..formats import QuantizedTensor
from .expert_weights import ExpertWeights, padded_intermediate

__all__ = [
    "CheckpointError",
    "CHECKPOINT_FORMATS",
    "load_experts",
    "load_bf16_experts",
    "load_modelopt_fp8_experts",
    "load_modelopt_nvfp4_experts",
    "load_compressed_tensors_fp8_experts",
    "load_fp8_block_experts",
    "load_gpt_oss_mxfp4_experts",
    "safetensors_state_dict",
    "load_experts_from_safetensors",
    "detect_checkpoint_format",
]

_E4M3 = torch.float8_e4m3fn
_FP8_MAX = 448.0
_EPS_SCALE = torch.tensor(1e-10, dtype=torch.float32) / torch.tensor(448.0, dtype=torch.float32)
"""Scale of an all-zero (padded) FP8 row / tile: what ``quantize_weight`` gives zeros."""

CHECKPOINT_FORMATS = (
    "bf16",
    "modelopt_fp8",
    "modelopt_nvfp4",
    "compressed_tensors_fp8",
    "fp8_block",
    "gpt_oss_mxfp4",
)
"""The ``checkpoint_format`` names :func:`load_experts` accepts."""

_PROJ_CANDIDATES = (("gate_proj", "up_proj", "down_proj"), ("w1", "w3", "w2"))


class CheckpointError(ValueError):
    """A checkpoint tensor is missing, mis-shaped or of the wrong dtype (the message names it)."""


# ----------------------------------------------------------------------------------------------
# tensor access with clear errors
# ----------------------------------------------------------------------------------------------


def _fmt_shape(shape) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"


def _dtype_names(dtypes) -> str:
    return " or ".join(str(d).replace("torch.", "") for d in dtypes)


def _take(sd: Mapping[str, torch.Tensor], key: str, shape: Optional[Sequence[int]], dtypes, what: str = "",
          scalar: bool = False) -> torch.Tensor:
    """``sd[key]`` checked against ``shape`` (or a one-element scalar) and ``dtypes``."""
    dtypes = tuple(dtypes) if isinstance(dtypes, (tuple, list)) else (dtypes,)
    desc = "a scalar ([] or [1])" if scalar else f"shape {_fmt_shape(shape)}" if shape is not None else "a tensor"
    if key not in sd:
        raise CheckpointError(
            f"checkpoint is missing tensor '{key}'{' (' + what + ')' if what else ''}: expected {desc}, "
            f"dtype {_dtype_names(dtypes)}")
    t = sd[key]
    if not isinstance(t, torch.Tensor):
        raise CheckpointError(f"checkpoint entry '{key}' is a {type(t).__name__}, expected a tensor")
    if scalar:
        if t.numel() != 1:
            raise CheckpointError(f"tensor '{key}' has shape {_fmt_shape(t.shape)}; expected {desc}")
    elif shape is not None and tuple(t.shape) != tuple(shape):
        raise CheckpointError(f"tensor '{key}' has shape {_fmt_shape(t.shape)}; expected {_fmt_shape(shape)}")
    if t.dtype not in dtypes:
        raise CheckpointError(f"tensor '{key}' has dtype {str(t.dtype).replace('torch.', '')}; expected "
                              f"{_dtype_names(dtypes)}")
    return t


_FLOAT_SCALE = (torch.float32, torch.bfloat16, torch.float16)
_FLOAT_W = (torch.bfloat16, torch.float16, torch.float32)


def _first_shape(sd, prefix: str, proj: str, dtypes, what: str = "") -> Tuple[int, int]:
    """(I, H) from expert 0's ``proj`` weight (2-D ``[I, H]``): the shape every expert is checked against."""
    key = _key(prefix, 0, proj, "weight")
    first = _take(sd, key, None, dtypes, what)
    if first.dim() != 2:
        raise CheckpointError(f"tensor '{key}' has shape {_fmt_shape(first.shape)}; expected [I, H]")
    return tuple(first.shape)


def _norm_prefix(prefix: str) -> str:
    if not isinstance(prefix, str):
        raise TypeError(f"prefix must be a string, got {type(prefix).__name__}")
    return prefix if prefix == "" or prefix.endswith(".") else prefix + "."


def _infer_num_experts(sd: Mapping, prefix: str) -> int:
    pat = re.compile(re.escape(prefix) + r"(\d+)\.")
    ids = {int(m.group(1)) for k in sd for m in [pat.match(k)] if m}
    if not ids:
        raise CheckpointError(f"no per-expert tensors under '{prefix}' (expected keys like '{prefix}0.gate_proj.weight' "
                              f"or '{prefix}0.w1.weight')")
    return max(ids) + 1


def _infer_proj_names(sd: Mapping, prefix: str, suffix: str = "weight") -> Tuple[Optional[str], str, str]:
    for gate, up, down in _PROJ_CANDIDATES:
        if f"{prefix}0.{gate}.{suffix}" in sd:
            return gate, up, down
    if f"{prefix}0.up_proj.{suffix}" in sd:
        return None, "up_proj", "down_proj"
    raise CheckpointError(
        f"cannot find the expert projections under '{prefix}': expected '{prefix}0.gate_proj.{suffix}', "
        f"'{prefix}0.w1.{suffix}' or (non-gated) '{prefix}0.up_proj.{suffix}'; pass proj_names=(gate, up, down)")


def _resolve(sd, prefix, proj_names, num_experts, activation, suffix="weight"):
    if not isinstance(sd, Mapping):
        raise TypeError(f"state_dict must be a mapping of names to tensors, got {type(sd).__name__}")
    prefix = _norm_prefix(prefix)
    if proj_names is None:
        proj_names = _infer_proj_names(sd, prefix, suffix)
    if not (isinstance(proj_names, (tuple, list)) and len(proj_names) == 3):
        raise ValueError(f"proj_names must be (gate, up, down) names (gate None for non-gated), got {proj_names!r}")
    gate, up, down = proj_names
    if activation is None:
        activation = Activation.SWIGLU if gate is not None else Activation.RELU2
    if not isinstance(activation, Activation):
        raise TypeError(f"activation must be a fm.Activation, got {activation!r}")
    if activation.is_gated and gate is None:
        raise ValueError(f"activation {activation!r} is gated but proj_names has no gate projection")
    if not activation.is_gated and gate is not None:
        raise ValueError(f"activation {activation!r} is not gated but proj_names has a gate projection ({gate!r}); "
                         "pass proj_names=(None, up, down)")
    E = _infer_num_experts(sd, prefix) if num_experts is None else int(num_experts)
    if E < 1:
        raise ValueError(f"num_experts must be >= 1, got {num_experts}")
    return prefix, (gate, up, down), E, activation


def _key(prefix, e, proj, name):
    return f"{prefix}{e}.{proj}.{name}"


def _scalar(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(()).to(torch.float32)


def _pad_dim(t: torch.Tensor, dim: int, n: int, value=0) -> torch.Tensor:
    """Pad ``t`` along ``dim`` to ``n`` with ``value`` (works for fp8 / uint8 storage)."""
    cur = t.shape[dim]
    if cur == n:
        return t
    shape = list(t.shape)
    shape[dim] = n - cur
    if t.dtype == _E4M3:
        pad = torch.full(shape, float(value), dtype=torch.float32, device=t.device).to(_E4M3)
    else:
        pad = torch.full(shape, value, dtype=t.dtype, device=t.device)
    return torch.cat([t, pad], dim=dim)


def _stack_w13(gate: Optional[torch.Tensor], up: torch.Tensor, I: int, I_pad_rows: int, dim: int = 1,
               value=0) -> torch.Tensor:
    """[gate(I); 0; up(I); 0] (or [up(I); 0] non-gated) along ``dim``, each half padded to
    ``I_pad_rows`` rows (rows of the data or of a per-row / per-block scale)."""
    halves = [up] if gate is None else [gate, up]
    return torch.cat([_pad_dim(h, dim, I_pad_rows, value) for h in halves], dim=dim).contiguous()


def _check_finite_scale(t: torch.Tensor, key: str) -> None:
    if t.device.type == "cpu" and not bool((torch.isfinite(t) & (t > 0)).all()):
        raise CheckpointError(f"tensor '{key}' must hold finite positive scales")


def _to_device(w: ExpertWeights, device) -> ExpertWeights:
    return w if device is None else w.to(device)


def _static_scale(sd, keys: List[str]) -> Optional[torch.Tensor]:
    """Max over the given scalar scale tensors; None when none exists; error when some are missing."""
    present = [k for k in keys if k in sd]
    if not present:
        return None
    if len(present) != len(keys):
        missing = next(k for k in keys if k not in sd)
        raise CheckpointError(f"checkpoint is missing tensor '{missing}' (static activation scale): expected a "
                              f"scalar ([] or [1]), dtype float32, since '{present[0]}' exists")
    vals = torch.stack([_scalar(_take(sd, k, None, _FLOAT_SCALE, scalar=True)) for k in keys])
    _check_finite_scale(vals, keys[0].rsplit(".", 1)[0] + ".input_scale")
    return vals.max().reshape(1).contiguous()


# ----------------------------------------------------------------------------------------------
# bf16 / float
# ----------------------------------------------------------------------------------------------


def load_bf16_experts(state_dict: Mapping[str, torch.Tensor], prefix: str, *, activation: Optional[Activation] = None,
                      num_experts: Optional[int] = None, proj_names=None, format: Format = Format.BF16,
                      device=None) -> ExpertWeights:
    """Unquantized per-expert weights (``{prefix}{e}.{gate|up|down}.weight``, bf16/fp16/fp32),
    optionally quantized to ``format`` (:meth:`ExpertWeights.from_float`)."""
    prefix, (g, u, d), E, activation = _resolve(state_dict, prefix, proj_names, num_experts, activation)
    sd = state_dict
    I, H = _first_shape(sd, prefix, u, _FLOAT_W)
    w13, w2 = [], []
    for e in range(E):
        rows = [] if g is None else [_take(sd, _key(prefix, e, g, "weight"), (I, H), _FLOAT_W)]
        rows.append(_take(sd, _key(prefix, e, u, "weight"), (I, H), _FLOAT_W))
        w13.append(torch.cat(rows, 0))
        w2.append(_take(sd, _key(prefix, e, d, "weight"), (H, I), _FLOAT_W))
    w13t, w2t = torch.stack(w13), torch.stack(w2)
    if device is not None:
        w13t, w2t = w13t.to(device), w2t.to(device)
    kw = {"dtype": w13t.dtype} if format is Format.BF16 else {}
    return ExpertWeights.from_float(w13t, w2t, activation=activation, format=format, **kw)


# ----------------------------------------------------------------------------------------------
# FP8: ModelOpt per-tensor, compressed-tensors (tensor / channel / block), native block
# ----------------------------------------------------------------------------------------------


def _requant_fp8(q: torch.Tensor, s_from: torch.Tensor, s_to: torch.Tensor) -> torch.Tensor:
    """SGLang's shard unification: ``e4m3(clamp(q * s_from / s_to, ±448))``."""
    dq = q.float() * s_from
    return torch.div(dq, s_to).clamp(-_FP8_MAX, _FP8_MAX).to(_E4M3)


def _load_fp8_tensor(sd, prefix, names, E, activation, scale_name: str, device, what: str) -> ExpertWeights:
    g, u, d = names
    I, H = _first_shape(sd, prefix, u, _E4M3, what)
    gated = g is not None
    I_pad = padded_intermediate(I, Format.FP8_TENSOR, gated)
    q13, s13, q2, s2 = [], [], [], []
    for e in range(E):
        shards = []
        for p in ([g, u] if gated else [u]):
            q = _take(sd, _key(prefix, e, p, "weight"), (I, H), _E4M3, what)
            s = _scalar(_take(sd, _key(prefix, e, p, scale_name), None, _FLOAT_SCALE, what, scalar=True))
            _check_finite_scale(s, _key(prefix, e, p, scale_name))
            shards.append((q, s))
        s_max = torch.stack([s for _, s in shards]).max()
        qs = [q if bool(s == s_max) else _requant_fp8(q, s, s_max) for q, s in shards]
        q13.append(_stack_w13(qs[0] if gated else None, qs[-1], I, I_pad, dim=0))
        s13.append(s_max)
        q2.append(_pad_dim(_take(sd, _key(prefix, e, d, "weight"), (H, I), _E4M3, what), 1, I_pad))
        s = _scalar(_take(sd, _key(prefix, e, d, scale_name), None, _FLOAT_SCALE, what, scalar=True))
        _check_finite_scale(s, _key(prefix, e, d, scale_name))
        s2.append(s)
    in_keys = [_key(prefix, e, p, "input_scale") for e in range(E) for p in ([g, u] if gated else [u])]
    a1 = _static_scale(sd, in_keys)
    a2 = _static_scale(sd, [_key(prefix, e, d, "input_scale") for e in range(E)])
    w = ExpertWeights(
        w13=QuantizedTensor(torch.stack(q13), Format.FP8_TENSOR, torch.stack(s13).contiguous()),
        w2=QuantizedTensor(torch.stack(q2).contiguous(), Format.FP8_TENSOR, torch.stack(s2).contiguous()),
        activation=activation, intermediate_size=I, input_scale=a1, intermediate_scale=a2)
    return _to_device(w, device)


def load_modelopt_fp8_experts(state_dict: Mapping[str, torch.Tensor], prefix: str, *,
                              activation: Optional[Activation] = None, num_experts: Optional[int] = None,
                              proj_names=None, device=None) -> ExpertWeights:
    """ModelOpt FP8 (``quant_algo: FP8``; Nemotron-H / Mixtral / Llama-4 FP8 checkpoints): E4M3
    weights with one fp32 ``weight_scale`` per shard (w1/w3 unified to their max, the other
    re-quantized), optional static ``input_scale`` (max over experts) -> FP8_TENSOR."""
    prefix, names, E, activation = _resolve(state_dict, prefix, proj_names, num_experts, activation)
    return _load_fp8_tensor(state_dict, prefix, names, E, activation, "weight_scale", device, "ModelOpt FP8")


def _load_fp8_block(sd, prefix, names, E, activation, scale_name, device, what) -> ExpertWeights:
    g, u, d = names
    I, H = _first_shape(sd, prefix, u, _E4M3, what)
    if H % 128:
        raise CheckpointError(f"tensor '{_key(prefix, 0, u, 'weight')}': hidden size {H} is not a multiple of 128, "
                              "which 128x128 block FP8 needs")
    gated = g is not None
    I_pad = padded_intermediate(I, Format.FP8_BLOCK, gated)
    nI, nH, nIp = -(-I // 128), H // 128, I_pad // 128
    eps = _EPS_SCALE.item()
    q13, s13, q2, s2 = [], [], [], []
    for e in range(E):
        qs, ss = [], []
        for p in ([g, u] if gated else [u]):
            qs.append(_take(sd, _key(prefix, e, p, "weight"), (I, H), _E4M3, what))
            s = _take(sd, _key(prefix, e, p, scale_name), (nI, nH), _FLOAT_SCALE, what).float()
            _check_finite_scale(s, _key(prefix, e, p, scale_name))
            ss.append(s)
        q13.append(_stack_w13(qs[0] if gated else None, qs[-1], I, I_pad, dim=0))
        s13.append(_stack_w13(ss[0] if gated else None, ss[-1], nI, nIp, dim=0, value=eps))
        q2.append(_pad_dim(_take(sd, _key(prefix, e, d, "weight"), (H, I), _E4M3, what), 1, I_pad))
        s = _take(sd, _key(prefix, e, d, scale_name), (nH, nI), _FLOAT_SCALE, what).float()
        _check_finite_scale(s, _key(prefix, e, d, scale_name))
        s2.append(_pad_dim(s, 1, nIp, eps))
    w = ExpertWeights(
        w13=QuantizedTensor(torch.stack(q13), Format.FP8_BLOCK, torch.stack(s13).contiguous(), block_rows=128),
        w2=QuantizedTensor(torch.stack(q2).contiguous(), Format.FP8_BLOCK, torch.stack(s2).contiguous(), block_rows=128),
        activation=activation, intermediate_size=I)
    return _to_device(w, device)


def load_fp8_block_experts(state_dict: Mapping[str, torch.Tensor], prefix: str, *,
                           activation: Optional[Activation] = None, num_experts: Optional[int] = None,
                           proj_names=None, scale_name: str = "weight_scale_inv", device=None) -> ExpertWeights:
    """Native block FP8 (DeepSeek-V3 / R1, MiniMax-M2; ``quant_method: fp8``,
    ``weight_block_size: [128, 128]``): E4M3 ``weight [N, K]`` and fp32 ``weight_scale_inv
    [ceil(N/128), K/128]`` (a dequant multiplier) -> FP8_BLOCK (dynamic 1x128 activations)."""
    prefix, names, E, activation = _resolve(state_dict, prefix, proj_names, num_experts, activation)
    return _load_fp8_block(state_dict, prefix, names, E, activation, scale_name, device, "block FP8")


def _load_fp8_channel(sd, prefix, names, E, activation, device, what) -> ExpertWeights:
    g, u, d = names
    I, H = _first_shape(sd, prefix, u, _E4M3, what)
    gated = g is not None
    I_pad = padded_intermediate(I, Format.FP8_CHANNEL, gated)
    eps = _EPS_SCALE.item()

    def scale(key, n):
        t = _take(sd, key, None, _FLOAT_SCALE, what)
        if tuple(t.shape) not in ((n, 1), (n,)):
            raise CheckpointError(f"tensor '{key}' has shape {_fmt_shape(t.shape)}; expected [{n}, 1] (per-channel)")
        t = t.reshape(n).float()
        _check_finite_scale(t, key)
        return t

    q13, s13, q2, s2 = [], [], [], []
    for e in range(E):
        qs, ss = [], []
        for p in ([g, u] if gated else [u]):
            qs.append(_take(sd, _key(prefix, e, p, "weight"), (I, H), _E4M3, what))
            ss.append(scale(_key(prefix, e, p, "weight_scale"), I))
        q13.append(_stack_w13(qs[0] if gated else None, qs[-1], I, I_pad, dim=0))
        s13.append(_stack_w13(ss[0] if gated else None, ss[-1], I, I_pad, dim=0, value=eps))
        q2.append(_pad_dim(_take(sd, _key(prefix, e, d, "weight"), (H, I), _E4M3, what), 1, I_pad))
        s2.append(scale(_key(prefix, e, d, "weight_scale"), H))
    if any(_key(prefix, e, p, "input_scale") in sd for e in range(E) for p in names if p is not None):
        warnings.warn(f"{what} under '{prefix}': static input_scale is ignored with per-channel weights; "
                      "activations are quantized per token, dynamically (FP8_TOKEN)", stacklevel=3)
    w = ExpertWeights(
        w13=QuantizedTensor(torch.stack(q13), Format.FP8_CHANNEL, torch.stack(s13).contiguous()),
        w2=QuantizedTensor(torch.stack(q2).contiguous(), Format.FP8_CHANNEL, torch.stack(s2).contiguous()),
        activation=activation, intermediate_size=I)
    return _to_device(w, device)


def load_compressed_tensors_fp8_experts(state_dict: Mapping[str, torch.Tensor], prefix: str, *,
                                        activation: Optional[Activation] = None, num_experts: Optional[int] = None,
                                        proj_names=None, strategy: Optional[str] = None,
                                        device=None) -> ExpertWeights:
    """compressed-tensors ``float-quantized`` FP8 (llm-compressor / RedHatAI checkpoints):
    E4M3 ``weight`` and ``weight_scale`` whose shape gives the strategy (``strategy=None``) or
    ``strategy=`` "channel" ([N, 1] -> FP8_CHANNEL, dynamic per-token activations), "block"
    ([ceil(N/128), K/128] -> FP8_BLOCK) or "tensor" ([] / [1] -> FP8_TENSOR, shards unified as
    for ModelOpt, static ``input_scale`` kept)."""
    prefix, names, E, activation = _resolve(state_dict, prefix, proj_names, num_experts, activation)
    sd = state_dict
    what = "compressed-tensors FP8"
    if strategy is None:
        wkey = _key(prefix, 0, names[1], "weight")
        skey = _key(prefix, 0, names[1], "weight_scale")
        w0 = _take(sd, wkey, None, _E4M3, what)
        s0 = _take(sd, skey, None, _FLOAT_SCALE, what)
        if w0.dim() != 2:
            raise CheckpointError(f"tensor '{wkey}' has shape {_fmt_shape(w0.shape)}; expected [I, H]")
        N, K = w0.shape
        if s0.numel() == 1:
            strategy = "tensor"
        elif tuple(s0.shape) in ((N, 1), (N,)):
            strategy = "channel"
        elif tuple(s0.shape) == (-(-N // 128), -(-K // 128)):
            strategy = "block"
        else:
            raise CheckpointError(
                f"tensor '{skey}' has shape {_fmt_shape(s0.shape)}; expected [] (tensor), [{N}, 1] (channel) or "
                f"[{-(-N // 128)}, {-(-K // 128)}] (128x128 block) for weight [{N}, {K}]")
    if strategy == "tensor":
        return _load_fp8_tensor(sd, prefix, names, E, activation, "weight_scale", device, what)
    if strategy == "channel":
        return _load_fp8_channel(sd, prefix, names, E, activation, device, what)
    if strategy == "block":
        return _load_fp8_block(sd, prefix, names, E, activation, "weight_scale", device, what)
    raise ValueError(f"strategy must be None, 'tensor', 'channel' or 'block', got {strategy!r}")


# ----------------------------------------------------------------------------------------------
# NVFP4 (ModelOpt)
# ----------------------------------------------------------------------------------------------


def load_modelopt_nvfp4_experts(state_dict: Mapping[str, torch.Tensor], prefix: str, *,
                                activation: Optional[Activation] = None, num_experts: Optional[int] = None,
                                proj_names=None, device=None) -> ExpertWeights:
    """ModelOpt NVFP4 (``quant_algo: NVFP4``, group 16): ``weight`` uint8 [N, K/2] (two E2M1 per
    byte, low nibble first), ``weight_scale`` E4M3 [N, K/16], ``weight_scale_2`` fp32 [] (= 1/g),
    ``input_scale`` fp32 [] (= 1/g of the activations, max over experts) -> NVFP4."""
    prefix, (g, u, d), E, activation = _resolve(state_dict, prefix, proj_names, num_experts, activation)
    sd = state_dict
    what = "ModelOpt NVFP4"
    first = _take(sd, _key(prefix, 0, u, "weight"), None, torch.uint8, what)
    if first.dim() != 2:
        raise CheckpointError(f"tensor '{_key(prefix, 0, u, 'weight')}' has shape {_fmt_shape(first.shape)}; "
                              "expected [I, H/2]")
    I, H = first.shape[0], first.shape[1] * 2
    if H % 16:
        raise CheckpointError(f"tensor '{_key(prefix, 0, u, 'weight')}': hidden size {H} is not a multiple of 16")
    down0 = _take(sd, _key(prefix, 0, d, "weight"), None, torch.uint8, what)
    if down0.dim() != 2 or down0.shape[0] != H or down0.shape[1] * 2 != I:
        raise CheckpointError(f"tensor '{_key(prefix, 0, d, 'weight')}' has shape {_fmt_shape(down0.shape)}; "
                              f"expected [{H}, {I // 2}]")
    if I % 16:
        raise CheckpointError(f"intermediate size {I} (from '{_key(prefix, 0, u, 'weight')}') is not a multiple of 16, "
                              "which NVFP4 needs")
    gated = g is not None
    I_pad = padded_intermediate(I, Format.NVFP4, gated)
    q13, s13, g13, q2, s2, g2 = [], [], [], [], [], []
    rescaled = []
    for e in range(E):
        qs, ss, ws = [], [], []
        for p in ([g, u] if gated else [u]):
            qs.append(_take(sd, _key(prefix, e, p, "weight"), (I, H // 2), torch.uint8, what))
            ss.append(_take(sd, _key(prefix, e, p, "weight_scale"), (I, H // 16), _E4M3, what))
            ws2 = _scalar(_take(sd, _key(prefix, e, p, "weight_scale_2"), None, _FLOAT_SCALE, what, scalar=True))
            _check_finite_scale(ws2, _key(prefix, e, p, "weight_scale_2"))
            ws.append(ws2)
        ws_max = torch.stack(ws).max()
        for i, w_ in enumerate(ws):
            if not bool(w_ == ws_max):  # fold the ratio into the block scales (rounded to E4M3)
                ss[i] = (ss[i].float() * torch.div(w_, ws_max)).clamp(max=_FP8_MAX).to(_E4M3)
                rescaled.append(e)
        q13.append(_stack_w13(qs[0] if gated else None, qs[-1], I, I_pad, dim=0))
        s13.append(_stack_w13(ss[0] if gated else None, ss[-1], I, I_pad, dim=0))
        g13.append(torch.div(torch.ones((), dtype=torch.float32), ws_max))
        q2.append(_pad_dim(_take(sd, _key(prefix, e, d, "weight"), (H, I // 2), torch.uint8, what), 1, I_pad // 2))
        s2.append(_pad_dim(_take(sd, _key(prefix, e, d, "weight_scale"), (H, I // 16), _E4M3, what), 1, I_pad // 16))
        ws2 = _scalar(_take(sd, _key(prefix, e, d, "weight_scale_2"), None, _FLOAT_SCALE, what, scalar=True))
        _check_finite_scale(ws2, _key(prefix, e, d, "weight_scale_2"))
        g2.append(torch.div(torch.ones((), dtype=torch.float32), ws2))
    if rescaled:
        warnings.warn(
            f"ModelOpt NVFP4 under '{prefix}': w1 and w3 weight_scale_2 differ for {len(set(rescaled))} expert(s) "
            f"(first: {rescaled[0]}); their block scales were rescaled to the larger global scale (E4M3 rounding)",
            stacklevel=2)
    in_keys = [_key(prefix, e, p, "input_scale") for e in range(E) for p in ([g, u] if gated else [u])]
    a1 = _static_scale(sd, in_keys)
    a2 = _static_scale(sd, [_key(prefix, e, d, "input_scale") for e in range(E)])
    w = ExpertWeights(
        w13=QuantizedTensor(torch.stack(q13), Format.NVFP4, torch.stack(s13).contiguous(),
                            global_scale=torch.stack(g13).contiguous()),
        w2=QuantizedTensor(torch.stack(q2).contiguous(), Format.NVFP4, torch.stack(s2).contiguous(),
                           global_scale=torch.stack(g2).contiguous()),
        activation=activation, intermediate_size=I, input_scale=a1, intermediate_scale=a2)
    return _to_device(w, device)


# ----------------------------------------------------------------------------------------------
# gpt-oss MXFP4
# ----------------------------------------------------------------------------------------------


def load_gpt_oss_mxfp4_experts(state_dict: Mapping[str, torch.Tensor], prefix: str, *,
                               act_params: Optional[ActivationParams] = None, num_experts: Optional[int] = None,
                               device=None) -> ExpertWeights:
    """gpt-oss MXFP4 experts (fused per layer): ``{prefix}gate_up_proj_blocks [E, 2I, H/32, 16]``
    uint8, ``gate_up_proj_scales [E, 2I, H/32]`` uint8 (UE8M0 exponent bytes, value 2^(b-127)),
    ``gate_up_proj_bias [E, 2I]``, ``down_proj_blocks [E, H, I/32, 16]``, ``down_proj_scales
    [E, H, I/32]``, ``down_proj_bias [E, H]``. Gate/up rows are interleaved (gate = even rows).
    -> MXFP4 weights with fp32 biases, SWIGLU_OAI (``act_params`` default: alpha 1.702,
    beta 1, limit 7; pass the config's ``swiglu_limit`` if it differs)."""
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"state_dict must be a mapping of names to tensors, got {type(state_dict).__name__}")
    sd = state_dict
    prefix = _norm_prefix(prefix)
    what = "gpt-oss MXFP4"
    k = lambda n: f"{prefix}{n}"  # noqa: E731
    b13 = _take(sd, k("gate_up_proj_blocks"), None, torch.uint8, what)
    if b13.dim() != 4 or b13.shape[-1] != 16 or b13.shape[1] % 2:
        raise CheckpointError(f"tensor '{k('gate_up_proj_blocks')}' has shape {_fmt_shape(b13.shape)}; expected "
                              "[E, 2I, H/32, 16] with an even 2I")
    E, M, G, _ = b13.shape
    if num_experts is not None and int(num_experts) != E:
        raise CheckpointError(f"tensor '{k('gate_up_proj_blocks')}' holds {E} experts; expected num_experts={num_experts}")
    I, H = M // 2, G * 32
    if I % 32:
        raise CheckpointError(f"intermediate size {I} (from '{k('gate_up_proj_blocks')}') is not a multiple of 32, "
                              "which MXFP4 needs")
    sc13 = _take(sd, k("gate_up_proj_scales"), (E, M, G), torch.uint8, what)
    bias13 = _take(sd, k("gate_up_proj_bias"), (E, M), _FLOAT_W, what)
    b2 = _take(sd, k("down_proj_blocks"), (E, H, I // 32, 16), torch.uint8, what)
    sc2 = _take(sd, k("down_proj_scales"), (E, H, I // 32), torch.uint8, what)
    bias2 = _take(sd, k("down_proj_bias"), (E, H), _FLOAT_W, what)
    I_pad = padded_intermediate(I, Format.MXFP4, True)
    d13 = b13.reshape(E, M, H // 2)
    w13 = _stack_w13(d13[:, 0::2], d13[:, 1::2], I, I_pad, dim=1)
    s13 = _stack_w13(sc13[:, 0::2], sc13[:, 1::2], I, I_pad, dim=1)
    bb = bias13.float()
    bias13c = _stack_w13(bb[:, 0::2], bb[:, 1::2], I, I_pad, dim=1)
    w2 = _pad_dim(b2.reshape(E, H, I // 2), 2, I_pad // 2).contiguous()
    s2 = _pad_dim(sc2, 2, I_pad // 32).contiguous()
    w = ExpertWeights(
        w13=QuantizedTensor(w13, Format.MXFP4, s13), w2=QuantizedTensor(w2, Format.MXFP4, s2),
        activation=Activation.SWIGLU_OAI, intermediate_size=I, w13_bias=bias13c,
        w2_bias=bias2.float().contiguous(), act_params=act_params or ActivationParams())
    return _to_device(w, device)


# ----------------------------------------------------------------------------------------------
# dispatch, safetensors files, format detection
# ----------------------------------------------------------------------------------------------

_LOADERS: Dict[str, Callable[..., ExpertWeights]] = {
    "bf16": load_bf16_experts,
    "modelopt_fp8": load_modelopt_fp8_experts,
    "modelopt_nvfp4": load_modelopt_nvfp4_experts,
    "compressed_tensors_fp8": load_compressed_tensors_fp8_experts,
    "fp8_block": load_fp8_block_experts,
    "gpt_oss_mxfp4": load_gpt_oss_mxfp4_experts,
}


def load_experts(state_dict: Mapping[str, torch.Tensor], prefix: str, *, checkpoint_format: str,
                 **kwargs) -> ExpertWeights:
    """Build the ExpertWeights of one MoE layer from ``state_dict`` in ``checkpoint_format``
    (one of :data:`CHECKPOINT_FORMATS`); ``kwargs`` go to the format's loader."""
    if checkpoint_format not in _LOADERS:
        raise ValueError(f"checkpoint_format must be one of {list(CHECKPOINT_FORMATS)}, got {checkpoint_format!r}")
    return _LOADERS[checkpoint_format](state_dict, prefix, **kwargs)


def _files(path) -> List[str]:
    if isinstance(path, (list, tuple)):
        out = [str(p) for p in path]
    elif os.path.isdir(path):
        out = sorted(glob.glob(os.path.join(path, "*.safetensors")))
        if not out:
            raise FileNotFoundError(f"no *.safetensors files in {path}")
    else:
        out = [str(path)]
    for f in out:
        if not os.path.isfile(f):
            raise FileNotFoundError(f"safetensors file not found: {f}")
    return out


class _LazyTensors(Mapping):
    """A read-only mapping over safetensors files that loads a tensor when it is accessed."""

    def __init__(self, where: Dict[str, str], device: str):
        self._where = where
        self._device = device
        self._handles: Dict[str, object] = {}

    def __getitem__(self, key):
        f = self._where[key]
        h = self._handles.get(f)
        if h is None:
            from safetensors import safe_open

            h = self._handles[f] = safe_open(f, framework="pt", device=self._device)
        return h.get_tensor(key)

    def __iter__(self):
        return iter(self._where)

    def __len__(self):
        return len(self._where)

    def __contains__(self, key):
        return key in self._where


def safetensors_state_dict(path, prefix: str = "", *, device: str = "cpu") -> Mapping[str, torch.Tensor]:
    """A lazy read-only state dict of the tensors whose names start with ``prefix`` in a
    safetensors file, a list of files, or a checkpoint directory (all its ``*.safetensors``; the
    ``model.safetensors.index.json`` weight map is used to open only the files that matter).
    Tensors are read when accessed."""
    try:
        from safetensors import safe_open
    except ImportError as e:  # pragma: no cover
        raise ImportError("reading safetensors files needs the safetensors package (pip install safetensors)") from e
    where: Dict[str, str] = {}
    index = os.path.join(path, "model.safetensors.index.json") if isinstance(path, (str, os.PathLike)) and \
        os.path.isdir(path) else None
    if index and os.path.isfile(index):
        with open(index) as fh:
            wm = json.load(fh).get("weight_map", {})
        for k, f in wm.items():
            if k.startswith(prefix):
                where[k] = os.path.join(path, f)
        for f in set(where.values()):
            if not os.path.isfile(f):
                raise FileNotFoundError(f"{index} names {f}, which does not exist")
    else:
        for f in _files(path):
            with safe_open(f, framework="pt", device="cpu") as h:
                for k in h.keys():
                    if k.startswith(prefix):
                        where[k] = f
    return _LazyTensors(where, device)


def load_experts_from_safetensors(path, prefix: str, *, checkpoint_format: Optional[str] = None,
                                  config: Optional[dict] = None, device: str = "cpu", **kwargs) -> ExpertWeights:
    """:func:`load_experts` on the tensors under ``prefix`` of a safetensors file / directory.
    ``checkpoint_format=None`` detects it from ``config`` or, for a directory, its
    ``config.json`` / ``hf_quant_config.json`` (:func:`detect_checkpoint_format`)."""
    if checkpoint_format is None:
        if config is None and isinstance(path, (str, os.PathLike)) and os.path.isdir(path):
            config = _read_configs(path)
        if config is None:
            raise ValueError("checkpoint_format is needed (no config to detect it from)")
        checkpoint_format = detect_checkpoint_format(config)
    sd = safetensors_state_dict(path, _norm_prefix(prefix), device=device)
    return load_experts(sd, prefix, checkpoint_format=checkpoint_format, **kwargs)


def _read_configs(path) -> Optional[dict]:
    out = None
    for name in ("config.json", "hf_quant_config.json"):
        f = os.path.join(path, name)
        if os.path.isfile(f):
            with open(f) as fh:
                d = json.load(fh)
            out = {**(out or {}), **({"hf_quant_config": d} if name == "hf_quant_config.json" else d)}
    return out


def detect_checkpoint_format(config: Mapping) -> str:
    """The ``checkpoint_format`` of a Hugging Face ``config.json`` dict (its
    ``quantization_config``) or ModelOpt ``hf_quant_config.json`` (``{"quantization": {...}}``,
    also accepted under the key ``"hf_quant_config"``). Raises ValueError for formats fusedmoe
    does not load."""
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a dict, got {type(config).__name__}")
    hq = config.get("hf_quant_config", config if "quantization" in config else None)
    qc = config.get("quantization_config")
    algo = None
    if isinstance(hq, Mapping):
        algo = (hq.get("quantization") or {}).get("quant_algo")
    if algo is None and isinstance(qc, Mapping) and qc.get("quant_method") == "modelopt":
        algo = qc.get("quant_algo") or (qc.get("quantization") or {}).get("quant_algo")
    if algo is not None:
        a = str(algo).upper()
        if a == "FP8":
            return "modelopt_fp8"
        if a == "NVFP4":
            return "modelopt_nvfp4"
        raise ValueError(f"ModelOpt quant_algo {algo!r} is not supported (supported: FP8, NVFP4)")
    if qc is None:
        return "bf16"
    if not isinstance(qc, Mapping):
        raise ValueError(f"quantization_config must be a dict, got {type(qc).__name__}")
    method = qc.get("quant_method")
    if method == "fp8":
        bs = qc.get("weight_block_size")
        if bs is not None and list(bs) != [128, 128]:
            raise ValueError(f"fp8 weight_block_size {bs} is not supported (only [128, 128])")
        if bs is None:
            raise ValueError("quant_method 'fp8' without weight_block_size (per-tensor) is not a native block "
                             "checkpoint; use checkpoint_format='modelopt_fp8' or 'compressed_tensors_fp8'")
        return "fp8_block"
    if method == "compressed-tensors":
        return "compressed_tensors_fp8"
    if method == "mxfp4":
        return "gpt_oss_mxfp4"
    raise ValueError(f"quant_method {method!r} is not supported (supported: fp8 block, compressed-tensors FP8, "
                     "modelopt FP8/NVFP4, mxfp4)")
