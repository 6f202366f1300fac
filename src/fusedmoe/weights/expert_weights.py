"""``ExpertWeights``: expert weights prepared once for the kernels.

Canonical in-memory layout (what every backend reads):

* ``w13``: ``QuantizedTensor`` of logical shape ``[E, M, H]``; gated: ``M = 2 * I_pad`` with rows
  ``[0, I_pad)`` = gate and ``[I_pad, 2 * I_pad)`` = up, **each half zero-padded at its own end**
  (``[gate(I); 0; up(I); 0]``, semantics.md 8.3); non-gated: ``M = I_pad``.
* ``w2``: ``QuantizedTensor`` of logical shape ``[E, H, I_pad]``, padded columns zero.
* ``w13_bias`` fp32 ``[E, M]`` (padded per half like the rows) and ``w2_bias`` fp32 ``[E, H]``.
* ``input_scale`` / ``intermediate_scale``: optional static activation scales (checkpoint
  ``input_scale``) of GEMM1's and GEMM2's inputs, fp32 scalars in the *dequant* convention
  ``x ≈ q * s`` (FP8 per-tensor: ``q = e4m3(x / s)``; NVFP4: ``s = 1/g``, ModelOpt's
  ``input_scale``). Without them the activation scale is computed per call on the device.

Padding is exact: padded GEMM1 rows give ``act(0) = 0`` (or ``act(0) * 0``) and padded GEMM2
columns are zero, so results do not depend on the alignment.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Optional

import torch

from ..config import Activation, ActivationParams, Format
from ..formats import QuantizedTensor, quantize_weight
from ..formats.tensor import default_tile_k, tileable

# FUSEDMOE_FP4_LAYOUT=tiled / linear: FP4 weight values tiled without the bit swizzle, or linear (A/B runs; the
# kernels read every layout)
_FP4_LAYOUT = os.environ.get("FUSEDMOE_FP4_LAYOUT", "swizzled")
if _FP4_LAYOUT not in ("swizzled", "tiled", "linear"):
    raise ValueError(f"FUSEDMOE_FP4_LAYOUT must be swizzled, tiled or linear, got {_FP4_LAYOUT!r}")
# MX block scales in rows padded to 16 bytes (QuantizedTensor.padded_scale_rows); A/B switch:
# FUSEDMOE_MX_SCALE_PAD=0 keeps the checkpoint's rows
_MX_SCALE_ROWS_PADDED = os.environ.get("FUSEDMOE_MX_SCALE_PAD", "1") != "0"

__all__ = ["ExpertWeights", "default_alignment", "padded_intermediate", "round_up"]


def round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


def default_alignment(fmt: Format, gated: bool) -> int:
    """Alignment of the intermediate size: 16 gated / 128 non-gated (FlashInfer's TRTLLM-Gen
    rule, semantics.md 8.1), raised to the format's K block (FP8 block 128, MX 32, NVFP4 16) so
    GEMM2's K blocks never straddle real and padded columns."""
    base = 16 if gated else 128
    return max(base, fmt.block_size or 1)


def padded_intermediate(intermediate: int, fmt: Format, gated: bool) -> int:
    """The intermediate size as the weights store it by default: rounded up to :func:`default_alignment` (the
    ``I_pad`` the kernels and the tuned table's keys see)."""
    return round_up(intermediate, default_alignment(fmt, gated))


def _check_float(name: str, t, dims: int):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if not t.is_floating_point() or t.element_size() < 2:
        raise TypeError(f"{name} must be a 16- or 32-bit floating tensor, got {t.dtype}")
    if t.dim() != dims:
        raise ValueError(f"{name} must have {dims} dims, got shape {tuple(t.shape)}")


def _pad_rows(t: torch.Tensor, rows: int) -> torch.Tensor:
    """Zero-pad dim -2 (or the last dim of a 2-D bias viewed as rows) to ``rows``."""
    if t.shape[-2] == rows:
        return t
    pad = t.new_zeros(t.shape[:-2] + (rows - t.shape[-2], t.shape[-1]))
    return torch.cat([t, pad], dim=-2)


def _pad_last(t: torch.Tensor, n: int) -> torch.Tensor:
    if t.shape[-1] == n:
        return t
    return torch.nn.functional.pad(t, (0, n - t.shape[-1]))


@dataclass(frozen=True, eq=False)
class ExpertWeights:
    """Prepared expert weights; build with :meth:`from_float` (or a checkpoint loader)."""

    w13: QuantizedTensor
    w2: QuantizedTensor
    activation: Activation
    intermediate_size: int
    w13_bias: Optional[torch.Tensor] = None
    w2_bias: Optional[torch.Tensor] = None
    input_scale: Optional[torch.Tensor] = None
    intermediate_scale: Optional[torch.Tensor] = None
    act_params: Optional[ActivationParams] = None

    def __post_init__(self):
        if not isinstance(self.activation, Activation):
            raise TypeError(f"ExpertWeights.activation must be a fm.Activation, got {self.activation!r}")
        for name in ("w13", "w2"):
            if not isinstance(getattr(self, name), QuantizedTensor):
                raise TypeError(f"ExpertWeights.{name} must be a fm.QuantizedTensor")
        if self.w13.fmt is not self.w2.fmt:
            raise ValueError(f"w13 is {self.w13.fmt!r} but w2 is {self.w2.fmt!r}; both must share one format")
        s13, s2 = self.w13.shape, self.w2.shape
        if len(s13) != 3 or len(s2) != 3:
            raise ValueError(f"w13 and w2 must be [E, M, H] and [E, H, I]; got {tuple(s13)} and {tuple(s2)}")
        E, M, H = s13
        if s2[0] != E or s2[1] != H:
            raise ValueError(f"w2 must be [E={E}, H={H}, I_pad]; got {tuple(s2)}")
        I_pad = s2[2]
        want_m = 2 * I_pad if self.activation.is_gated else I_pad
        if M != want_m:
            kind = "gated" if self.activation.is_gated else "non-gated"
            raise ValueError(f"w13 has {M} rows; a {kind} {self.activation.name} layer with I_pad={I_pad} needs {want_m}")
        if not 0 < self.intermediate_size <= I_pad:
            raise ValueError(f"intermediate_size must be in (0, {I_pad}], got {self.intermediate_size}")
        if self.w13.device != self.w2.device:
            raise ValueError(f"w13 on {self.w13.device} but w2 on {self.w2.device}")
        for name, shape in (("w13_bias", (E, M)), ("w2_bias", (E, H))):
            b = getattr(self, name)
            if b is None:
                continue
            if not isinstance(b, torch.Tensor) or b.dtype != torch.float32 or tuple(b.shape) != shape:
                raise ValueError(f"ExpertWeights.{name} must be fp32 of shape {shape}, got "
                                 f"{(tuple(b.shape), b.dtype) if isinstance(b, torch.Tensor) else type(b).__name__}")
            if b.device != self.w13.device:
                raise ValueError(f"ExpertWeights.{name} is on {b.device}, weights on {self.w13.device}")
        for name in ("input_scale", "intermediate_scale"):
            s = getattr(self, name)
            if s is None:
                continue
            if self.format not in (Format.FP8_TENSOR, Format.NVFP4):
                raise ValueError(f"ExpertWeights.{name}: static activation scales exist only for FP8_TENSOR and NVFP4, not {self.format!r}")
            if not isinstance(s, torch.Tensor) or s.dtype != torch.float32 or s.numel() != 1:
                raise ValueError(f"ExpertWeights.{name} must be a one-element fp32 tensor")
        if self.activation is Activation.SWIGLU_OAI and self.act_params is None:
            object.__setattr__(self, "act_params", ActivationParams())
        if self.act_params is not None and self.activation is not Activation.SWIGLU_OAI:
            raise ValueError("ExpertWeights.act_params applies only to Activation.SWIGLU_OAI")
        if self.format is Format.NVFP4:
            # NVFP4 block scales K-major (QuantizedTensor.k_major_scales; values unchanged): a Triton
            # tile's e4m3 scales are then block_k / 16 runs of block_n contiguous bytes -- coalesced,
            # and from 4 bytes per thread prefetched with the values -- instead of block_k / 16 bytes
            # at a row stride. H200, same process (benchmarks/fp4_layout_ab.py, session 8):
            # Nemotron-Nano 8 tokens 1.33x, gpt-oss-120b 1-64 tokens 1.05-1.06x and 4096 tokens
            # 1.16x faster; Nemotron prefill 1.05-1.08x slower. MX scales (one byte per 32) stay
            # row-major: their tiles rarely reach 4 bytes per thread, so every K step loads them
            # directly, and then a row's next scales sharing the 32-byte sector (an L1 hit)
            # win -- K-major made gpt-oss-120b MXFP4 prefill 1.28x and Nemotron-Nano 1.12x slower.
            object.__setattr__(self, "w13", self.w13.k_major_scales())
            object.__setattr__(self, "w2", self.w2.k_major_scales())
        if self.format is Format.MXFP4 and self.device.type != "meta":
            # the UE8M0 code range of the blocks in use (one device sync here, none per call): with
            # codes in [11, 144] the Triton kernels fold the E2M1 converter's 2^126 into the block
            # scale (kernels/_blockscaled.MX_FOLD: one bf16x2 multiply less per two weights, same bits)
            for name in ("w13", "w2"):
                q = getattr(self, name)
                if q.scale_code_range is None:
                    object.__setattr__(self, name, q.with_scale_code_range())
        if self.format in (Format.MXFP4, Format.MXFP8) and _MX_SCALE_ROWS_PADDED:
            # MX block scales row-major in rows padded to 16 bytes (QuantizedTensor.padded_scale_rows;
            # values unchanged, 6 extra bytes a row for gpt-oss's 90): Triton then knows the scale
            # rows 16-byte aligned, and a decode K step's scale bytes of a row load as one vector
            # (4 bytes at block_k 128: copied ahead by the pipeline's cp.async) instead of byte by
            # byte in the step that uses them. H200, fusedmoe bench (twenty-second session):
            # MXFP4 decode 1.02-1.09x faster (gpt-oss-120b 1.08-1.09x at 8-64 tokens); prefill
            # gpt-oss-120b 1.04x faster, Nemotron-3-Nano 1.06x slower.
            for name in ("w13", "w2"):
                object.__setattr__(self, name, getattr(self, name).padded_scale_rows())
        if self.format.is_fp4 and _FP4_LAYOUT != "linear":
            # FP4 values in 64-row tiles, each K piece of the kernels' block_k (128 / 64 columns: the
            # widest that divides K) one contiguous run (QuantizedTensor.value_layout "tiled"; shapes
            # that do not divide stay linear): a decode GEMM program's K step then reads one run of
            # 2-4 KB instead of 64-128 pieces a row apart (benchmarks/fp4_stream_probe.py, H200:
            # 2.2-2.8 TB/s linear, 4.3-4.5 TB/s tiled, in gpt-oss-120b's GEMM1 read pattern).
            # "swizzled" (the default) also permutes the bits of every 16-bit word so that the
            # kernels' E2M1 -> bf16 conversion takes 11 integer instructions per 8 values instead of
            # 15 (formats/tensor.py, FP4_SWIZZLE). Values that arrive tiled or swizzled keep their
            # layout (with_fp4_layout, the custom op's rebuild).
            for name in ("w13", "w2"):
                q = getattr(self, name)
                if q.value_layout == "linear" and tileable(q.fmt, q.shape) and default_tile_k(q.shape[-1]) >= 64:
                    object.__setattr__(self, name, q.tiled_values(swizzle=_FP4_LAYOUT == "swizzled"))

    # --- shape properties -------------------------------------------------------------------
    @property
    def format(self) -> Format:
        return self.w13.fmt

    @property
    def num_experts(self) -> int:
        return self.w13.shape[0]

    @property
    def hidden_size(self) -> int:
        return self.w13.shape[2]

    @property
    def padded_intermediate_size(self) -> int:
        return self.w2.shape[2]

    @property
    def is_gated(self) -> bool:
        return self.activation.is_gated

    @property
    def device(self) -> torch.device:
        return self.w13.device

    def static_scales_for(self, activation_format: Format):
        """(input_scale, intermediate_scale) that apply to ``activation_format``: the stored
        static scales belong to the weight format's own quantized activations (FP8_TENSOR
        weights -> FP8 per-tensor activations; NVFP4 weights -> NVFP4 activations, ``s = 1/g``).
        Any other pairing (e.g. NVFP4 weights with FP8 activations) quantizes dynamically."""
        if activation_format is self.format and self.format in (Format.FP8_TENSOR, Format.NVFP4):
            return self.input_scale, self.intermediate_scale
        return None, None

    def to(self, device) -> "ExpertWeights":
        mv = lambda t: None if t is None else t.to(device)  # noqa: E731
        return replace(
            self,
            w13=self.w13.to(device),
            w2=self.w2.to(device),
            w13_bias=mv(self.w13_bias),
            w2_bias=mv(self.w2_bias),
            input_scale=mv(self.input_scale),
            intermediate_scale=mv(self.intermediate_scale),
        )

    def with_fp4_layout(self, layout: str) -> "ExpertWeights":
        """The same weights with their tiled FP4 values in ``layout``: ``"swizzled"`` (the default:
        bit-swizzled 16-bit words, the cheaper conversion to the bf16 operands of BF16 / FP8 / NVFP4
        activations) or ``"tiled"`` (plain nibbles: the cheaper conversion to E4M3 for MXFP4 weights
        run with MXFP8 activations on the E4M3 path, ``triton_moe.set_mx_e4m3_dot`` -- sm_90 SASS of that
        decode GEMM1, 627 against 771 instructions a K step). A copy of the values; ``self`` where they are so already, and weights that are not
        FP4 or whose shapes stay linear are returned unchanged. ``FUSEDMOE_FP4_LAYOUT`` sets the
        default for a process instead."""
        if layout not in ("swizzled", "tiled"):
            raise ValueError(f"with_fp4_layout: layout must be 'swizzled' or 'tiled', got {layout!r}")
        qs = {}
        for name in ("w13", "w2"):
            q = getattr(self, name)
            if q.value_layout not in ("linear", layout):
                qs[name] = q.tiled_values(q.value_tile_k, swizzle=layout == "swizzled")
        return replace(self, **qs) if qs else self

    def for_activation_format(self, activation_format: Optional[Format]) -> "ExpertWeights":
        """These weights in the FP4 value layout that runs fastest with ``activation_format`` (None: the natural
        pairing). MXFP4 weights with MXFP8 activations get plain nibbles (``with_fp4_layout("tiled")``) only where
        their decode tiles run the E4M3 partial-sum path (``fusedmoe.backends.triton_moe.set_mx_e4m3_dot``, off for
        MXFP4 by default: its E4M3 conversion is cheaper on plain nibbles, 1.03-1.15x). The default dequantizing path
        runs fastest on the swizzled words, as with BF16 activations (H200, twenty-fifth session: 1.25-1.82x faster
        than the E4M3 path on plain nibbles). Everything else, and any process with ``FUSEDMOE_FP4_LAYOUT`` set (an
        A/B run), keeps ``self``. ``fm.FusedMoE`` and the transformers integration call it once per layer."""
        if (self.format is Format.MXFP4 and activation_format is Format.MXFP8
                and "FUSEDMOE_FP4_LAYOUT" not in os.environ):
            from ..backends.triton_moe import mx_e4m3_dot_formats

            if Format.MXFP4 in mx_e4m3_dot_formats():
                return self.with_fp4_layout("tiled")
        return self

    def slice_experts(self, start: int, count: int) -> "ExpertWeights":
        """The experts ``[start, start + count)`` (expert parallelism: one rank's share)."""
        if not (0 <= start and count > 0 and start + count <= self.num_experts):
            raise ValueError(f"slice_experts: [{start}, {start + count}) is not inside [0, {self.num_experts})")
        idx = slice(start, start + count)
        sel = lambda t: None if t is None else t[idx]  # noqa: E731
        return replace(
            self,
            w13=self.w13.index_select0(idx),
            w2=self.w2.index_select0(idx),
            w13_bias=sel(self.w13_bias),
            w2_bias=sel(self.w2_bias),
        )

    def __repr__(self) -> str:
        return (
            f"ExpertWeights(E={self.num_experts}, H={self.hidden_size}, I={self.intermediate_size}, "
            f"I_pad={self.padded_intermediate_size}, activation={self.activation!r}, format={self.format!r}, "
            f"bias={self.w13_bias is not None or self.w2_bias is not None}, device={self.device})"
        )

    # --- construction ---------------------------------------------------------------------------
    @classmethod
    def from_float(
        cls,
        w13: torch.Tensor,
        w2: torch.Tensor,
        *,
        activation: Activation,
        format: Format = Format.BF16,
        w13_order: str = "gate_up",
        w13_bias: Optional[torch.Tensor] = None,
        w2_bias: Optional[torch.Tensor] = None,
        alignment: Optional[int] = None,
        act_params: Optional[ActivationParams] = None,
        input_scale=None,
        intermediate_scale=None,
        dtype: Optional[torch.dtype] = None,
    ) -> "ExpertWeights":
        """Prepare float expert weights: reorder gate/up, pad I (each half separately), quantize.

        Args:
            w13: ``[E, 2I, H]`` gated (``w13_order`` "gate_up": gate rows first, transformers'
                order; "up_gate": FlashInfer's ``[up; gate]``) or ``[E, I, H]`` non-gated.
            w2: ``[E, H, I]``.
            activation: the expert activation (decides gated or not).
            format: the weight format; quantization is offline, here.
            w13_bias, w2_bias: optional ``[E, 2I | I]`` and ``[E, H]`` biases (gpt-oss), any float
                dtype, stored fp32 (``w13_bias`` in the same order as ``w13``).
            alignment: I is padded to a multiple of this (default :func:`default_alignment`);
                must be a multiple of the format's K block.
            input_scale, intermediate_scale: static activation scales (FP8_TENSOR, NVFP4),
                dequant convention ``x ≈ q * s``; float or one-element tensor.
            dtype: storage dtype of BF16-format weights (default: the input dtype if 16-bit,
                else bfloat16).
        """
        if not isinstance(activation, Activation):
            raise TypeError(f"activation must be a fm.Activation, got {activation!r}")
        if not isinstance(format, Format) or not format.is_weight_format:
            raise ValueError(f"format must be a weight fm.Format, got {format!r}")
        if w13_order not in ("gate_up", "up_gate"):
            raise ValueError(f"w13_order must be 'gate_up' or 'up_gate', got {w13_order!r}")
        _check_float("w13", w13, 3)
        _check_float("w2", w2, 3)
        E, M, H = w13.shape
        if w2.shape[0] != E or w2.shape[1] != H:
            raise ValueError(f"w2 must be [E={E}, H={H}, I]; got {tuple(w2.shape)}")
        I = w2.shape[2]
        gated = activation.is_gated
        if M != (2 * I if gated else I):
            raise ValueError(
                f"w13 must be [E, {2 * I if gated else I}, H] for a {'gated' if gated else 'non-gated'} "
                f"activation with I={I} (from w2); got {tuple(w13.shape)}"
            )
        if w13.device != w2.device:
            raise ValueError(f"w13 on {w13.device} but w2 on {w2.device}")
        blk = format.block_size or 1
        if format.block_size and H % format.block_size:
            raise ValueError(f"hidden size {H} must be a multiple of {format.block_size} for {format!r} weights")
        align = default_alignment(format, gated) if alignment is None else int(alignment)
        if align < 1 or align % blk:
            raise ValueError(f"alignment must be a positive multiple of {blk} for {format!r}, got {alignment}")
        I_pad = round_up(I, align)

        def split(t):  # -> (gate, up) along dim -2 / last dim of a bias
            a, b = t[..., :I, :], t[..., I:, :]
            return (a, b) if w13_order == "gate_up" else (b, a)

        if gated:
            g, u = split(w13)
            w13c = torch.cat([_pad_rows(g, I_pad), _pad_rows(u, I_pad)], dim=1)
        else:
            w13c = _pad_rows(w13, I_pad)
        w2c = _pad_last(w2, I_pad)

        b13 = b2 = None
        if w13_bias is not None:
            if not isinstance(w13_bias, torch.Tensor) or tuple(w13_bias.shape) != (E, M):
                raise ValueError(f"w13_bias must be [E={E}, {M}], got {getattr(w13_bias, 'shape', w13_bias)}")
            bb = w13_bias.float().unsqueeze(-1)
            if gated:
                g, u = split(bb)
                b13 = torch.cat([_pad_rows(g, I_pad), _pad_rows(u, I_pad)], dim=1).squeeze(-1)
            else:
                b13 = _pad_rows(bb, I_pad).squeeze(-1)
            b13 = b13.to(w13.device).contiguous()
        if w2_bias is not None:
            if not isinstance(w2_bias, torch.Tensor) or tuple(w2_bias.shape) != (E, H):
                raise ValueError(f"w2_bias must be [E={E}, H={H}], got {getattr(w2_bias, 'shape', w2_bias)}")
            b2 = w2_bias.float().to(w13.device).contiguous()

        if format is Format.BF16:
            sd = dtype or (w13.dtype if w13.element_size() == 2 else torch.bfloat16)
            if sd not in (torch.bfloat16, torch.float16, torch.float32):
                raise ValueError(f"dtype must be bfloat16, float16 or float32, got {sd}")
            q13 = QuantizedTensor(w13c.to(sd).contiguous(), Format.BF16)
            q2 = QuantizedTensor(w2c.to(sd).contiguous(), Format.BF16)
        else:
            if dtype is not None:
                raise ValueError("dtype applies only to BF16-format weights")
            q13 = quantize_weight(w13c.float().contiguous(), format)
            q2 = quantize_weight(w2c.float().contiguous(), format)

        def as_scale(name, s):
            if s is None:
                return None
            t = torch.as_tensor(s, dtype=torch.float32, device=w13.device).reshape(1)
            if not bool(torch.isfinite(t).all()) or float(t) <= 0:
                raise ValueError(f"{name} must be finite and > 0, got {float(t)}")
            return t

        return cls(
            w13=q13,
            w2=q2,
            activation=activation,
            intermediate_size=I,
            w13_bias=b13,
            w2_bias=b2,
            input_scale=as_scale("input_scale", input_scale),
            intermediate_scale=as_scale("intermediate_scale", intermediate_scale),
            act_params=act_params,
        )
