"""``QuantizedTensor``: a quantized operand and everything needed to dequantize it.

A plain container, not a ``torch.Tensor``. The format is explicit (``fmt``): storage dtypes are
never sniffed ("uint8 means FP4" is exactly the trap this avoids).

Storage per format, for a logical tensor ``x`` of shape ``[*B, R, C]`` (C = the quantized,
contracted dim; ``*B`` = batch dims, e.g. experts):

=============  =========================  ==============================================  =================
fmt            data                       scale                                           global_scale
=============  =========================  ==============================================  =================
BF16           x itself (bf16/fp16/fp32)  None                                            None
FP8_TENSOR     e4m3 [*B, R, C]            fp32 [*B] (dequant: x = q * s)                  None
FP8_CHANNEL    e4m3 [*B, R, C]            fp32 [*B, R]                                    None
FP8_TOKEN      e4m3 [*B, R, C]            fp32 [*B, R]                                    None
FP8_BLOCK      e4m3 [*B, R, C]            fp32 [*B, ceil(R/br), C/128], br = block_rows   None
MXFP8          e4m3 [*B, R, C]            uint8 UE8M0 exponent bytes [*B, R, C/32]        None
NVFP4          uint8 [*B, R, C/2]         e4m3 (UE4M3) [*B, R, C/16]                      fp32 [*B]: g, x = e2m1*s/g
MXFP4          uint8 [*B, R, C/2]         uint8 UE8M0 exponent bytes [*B, R, C/32]        None
=============  =========================  ==============================================  =================

FP4 packing: element 2i in the low nibble, 2i+1 in the high nibble. ``block_rows`` is 128 for
FP8_BLOCK weights (128x128 tiles) and 1 for activations (1x128 groups).

FP4 value layouts (``value_layout``; the scales are not affected):

* ``"linear"`` (default): ``data[*B, r, c]`` is the byte of row r, columns 2c and 2c + 1.
* ``"tiled"`` (weights, chosen by ``ExpertWeights``; R % 64 == 0 and C % TK == 0): ``data`` is
  ``[*B, R/64, C/TK, 64, TK/2]`` uint8 with the tile width TK (``value_tile_k``) 32, 64 or 128
  columns -- each TK-column piece of 64 rows one dense run (1-4 KB), the pieces of a row tile one
  after the other; the last three dims dense (any strides for the others). ``shape`` is still the
  logical ``[*B, R, C]`` (a tiled ``data`` handed to a linear QuantizedTensor fails its shape
  checks instead of being misread). A GEMM program whose K step covers at most TK columns of 64
  rows then reads one contiguous run instead of 64 pieces a row stride apart (the Triton kernels'
  ``_blockscaled._w_rows`` / ``_k_base``; their block_k must divide TK). H200, 912 MB streamed in
  gpt-oss-120b's GEMM1 pattern (``benchmarks/fp4_stream_probe.py``, 128 rows x 16-32 bytes a
  step): 2.2-2.8 TB/s linear, 4.3-4.5 TB/s tiled. :meth:`linear_values` / :meth:`tiled_values`
  convert; ``fm.dequantize`` reads both.
* ``"swizzled"`` (weights, ``ExpertWeights``' default where "tiled" applies): the "tiled" layout
  with the 16 bits of every little-endian 16-bit word (four E2M1 values: K = 4j .. 4j + 3, value t
  in bits 4t .. 4t + 3 of the linear word) permuted (``FP4_SWIZZLE``) so that the Triton kernels'
  E2M1 -> bf16 converter needs 11 integer instructions per 8 values instead of 15: value 0 has its
  sign at bit 15 and its magnitude at bits 6-8, where a bf16 ``e2m1 * 2^-126`` has them (one AND),
  values 1 and 2 get there by a left shift of 3 and 6 (shift, AND), value 3 by three shifts. The
  idea is the Hopper value layout of OpenAI's triton_kernels (MXFP4 x BF16); the bit map here is
  our own. Words never straddle a tile piece (TK/2 >= 16 bytes). :meth:`linear_values` /
  :meth:`tiled_values` (``swizzle=True``) convert; ``fm.dequantize`` reads it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional, Tuple

import torch

from ..config import Format

SCALE_ROW_ALIGN = 16  # QuantizedTensor.padded_scale_rows' default: scale rows start 16 bytes apart

__all__ = ["QuantizedTensor", "scale_code_range_of"]

_E4M3 = torch.float8_e4m3fn


@dataclass(frozen=True, eq=False)
class QuantizedTensor:
    data: torch.Tensor
    fmt: Format
    scale: Optional[torch.Tensor] = None
    global_scale: Optional[torch.Tensor] = None
    block_rows: int = 1  # FP8_BLOCK only: 128 for 128x128 weight tiles, 1 for 1x128 groups
    # MXFP4 / MXFP8 only, optional: (min, max) of the UE8M0 scale codes over the 32-blocks that hold
    # a nonzero value (``scale_code_range_of``; ``ExpertWeights`` sets it at preparation, one device
    # sync). A hint for the kernels (a faster exact conversion when the codes allow it) that must
    # bound the true codes -- measure it, do not guess it (a wrong range gives wrong results); None:
    # unknown, the general path
    scale_code_range: Optional[Tuple[int, int]] = None
    value_layout: str = "linear"  # FP4 only: "linear", "tiled" or "swizzled" (module docstring)

    def __post_init__(self):
        fmt = self.fmt
        if not isinstance(fmt, Format):
            raise TypeError(f"QuantizedTensor.fmt must be a fm.Format, got {fmt!r}")
        if self.value_layout not in VALUE_LAYOUTS:
            raise ValueError(f"QuantizedTensor.value_layout must be one of {VALUE_LAYOUTS}, got {self.value_layout!r}")
        d, s, g = self.data, self.scale, self.global_scale
        if not isinstance(d, torch.Tensor):
            raise TypeError(f"QuantizedTensor.data must be a tensor, got {type(d).__name__}")
        if d.dim() < 1:
            raise ValueError("QuantizedTensor.data must have at least one dim")
        if fmt is Format.BF16:
            if not d.is_floating_point() or d.element_size() < 2:
                raise TypeError(f"BF16 QuantizedTensor.data must be a 16/32-bit float tensor, got {d.dtype}")
            if s is not None or g is not None:
                raise ValueError("BF16 QuantizedTensor carries no scale")
            return
        if fmt.is_fp4:
            if d.dtype != torch.uint8:
                raise TypeError(f"{fmt.name} data must be uint8 (two E2M1 per byte), got {d.dtype}")
        elif d.dtype != _E4M3:
            raise TypeError(f"{fmt.name} data must be torch.float8_e4m3fn, got {d.dtype}")
        if s is None:
            raise ValueError(f"{fmt.name} QuantizedTensor needs a scale")
        if not isinstance(s, torch.Tensor):
            raise TypeError(f"QuantizedTensor.scale must be a tensor, got {type(s).__name__}")
        if s.device != d.device:
            raise ValueError(f"QuantizedTensor.scale is on {s.device} but data on {d.device}")
        if self.value_layout != "linear":
            if not fmt.is_fp4 or d.dim() < 4 or d.shape[-2] != TILE_ROWS or d.shape[-1] * 2 not in TILE_WIDTHS:
                raise ValueError(f"value_layout {self.value_layout!r} needs FP4 data "
                                 f"[*B, R/{TILE_ROWS}, C/TK, {TILE_ROWS}, TK/2] with TK in {TILE_WIDTHS}, "
                                 f"got {fmt.name} {tuple(d.shape)}")
            if any(d.stride(i) != want and d.shape[i] > 1
                   for i, want in ((-1, 1), (-2, d.shape[-1]), (-3, TILE_ROWS * d.shape[-1]))):
                raise ValueError(f"tiled FP4 data needs its last three dims dense, got strides {tuple(d.stride())}")
        C = self.shape[-1]
        lead = tuple(self.shape[:-1])
        if fmt is Format.FP8_TENSOR:
            expect, sdt = lead[:-1] if d.dim() >= 2 else (), torch.float32
        elif fmt in (Format.FP8_CHANNEL, Format.FP8_TOKEN):
            expect, sdt = lead, torch.float32
        elif fmt is Format.FP8_BLOCK:
            if self.block_rows not in (1, 128):
                raise ValueError(f"QuantizedTensor.block_rows must be 1 or 128, got {self.block_rows}")
            R = lead[-1] if lead else 1
            rows = -(-R // self.block_rows) if lead else ()
            expect = (lead[:-1] + (rows,) if lead else ()) + (-(-C // 128),)
            sdt = torch.float32
        elif fmt in (Format.MXFP8, Format.MXFP4):
            if C % 32:
                raise ValueError(f"{fmt.name} QuantizedTensor: the last dim ({C}) must be a multiple of 32")
            expect, sdt = lead + (C // 32,), torch.uint8
        else:  # NVFP4
            if C % 16:
                raise ValueError(f"NVFP4 QuantizedTensor: the last dim ({C}) must be a multiple of 16")
            expect, sdt = lead + (C // 16,), _E4M3
        if tuple(s.shape) != tuple(expect):
            raise ValueError(f"{fmt.name} QuantizedTensor.scale must have shape {tuple(expect)}, got {tuple(s.shape)}")
        if s.dtype != sdt:
            raise TypeError(f"{fmt.name} QuantizedTensor.scale must be {sdt}, got {s.dtype}")
        if fmt is Format.NVFP4:
            gexp = lead[:-1] if d.dim() >= 2 else ()
            if not isinstance(g, torch.Tensor) or tuple(g.shape) != tuple(gexp) or g.dtype != torch.float32:
                raise ValueError(
                    f"NVFP4 QuantizedTensor.global_scale must be fp32 of shape {tuple(gexp)}, got "
                    f"{(tuple(g.shape), g.dtype) if isinstance(g, torch.Tensor) else g!r}"
                )
            if g.device != d.device:
                raise ValueError(f"QuantizedTensor.global_scale is on {g.device} but data on {d.device}")
        elif g is not None:
            raise ValueError(f"{fmt.name} QuantizedTensor carries no global_scale")
        r = self.scale_code_range
        if r is not None:
            if fmt not in (Format.MXFP4, Format.MXFP8):
                raise ValueError(f"QuantizedTensor.scale_code_range applies to MXFP4 / MXFP8 only, not {fmt.name}")
            if (not isinstance(r, tuple) or len(r) != 2 or not all(isinstance(v, int) for v in r)
                    or not 0 <= r[0] <= r[1] <= 255):
                raise ValueError(f"QuantizedTensor.scale_code_range must be a (min, max) pair of ints in "
                                 f"[0, 255], got {r!r}")

    @property
    def shape(self) -> torch.Size:
        """Logical (unpacked) shape."""
        if self.value_layout != "linear":
            d = self.data.shape
            return torch.Size(tuple(d[:-4]) + (d[-4] * TILE_ROWS, d[-3] * d[-1] * 2))
        if self.fmt.is_fp4:
            return torch.Size(tuple(self.data.shape[:-1]) + (self.data.shape[-1] * 2,))
        return self.data.shape

    @property
    def value_tile_k(self) -> int:
        """The tiled (or swizzled) layout's tile width TK in logical columns; 0 for linear values."""
        return self.data.shape[-1] * 2 if self.value_layout != "linear" else 0

    @property
    def value_swizzled(self) -> bool:
        """Whether the FP4 values' 16-bit words are bit-swizzled (``value_layout`` "swizzled")."""
        return self.value_layout == "swizzled"

    @property
    def device(self) -> torch.device:
        return self.data.device

    def to(self, device) -> "QuantizedTensor":
        mv = lambda t: None if t is None else t.to(device)  # noqa: E731
        return dataclasses.replace(self, data=mv(self.data), scale=mv(self.scale), global_scale=mv(self.global_scale))

    def k_major_scales(self) -> "QuantizedTensor":
        """The same tensor with its per-block scales (NVFP4, MXFP4, MXFP8) stored K-major: logical
        shape unchanged, stride 1 along the rows (dim -2); ``self`` where that holds already or the
        format has no block scales. The Triton kernels read either layout (``ExpertWeights`` keeps
        NVFP4 weight scales K-major, see there)."""
        s = self.scale
        if (self.fmt not in (Format.NVFP4, Format.MXFP4, Format.MXFP8) or s is None or s.dim() < 2
                or s.stride(-2) == 1):
            return self
        s = s.transpose(-1, -2).contiguous().transpose(-1, -2)
        return dataclasses.replace(self, scale=s)

    def padded_scale_rows(self, align: int = SCALE_ROW_ALIGN) -> "QuantizedTensor":
        """The same tensor with its row-major block scales (NVFP4, MXFP4, MXFP8) re-stored so that
        rows start a multiple of ``align`` scale bytes apart: a view ``[..., :K / G]`` of a
        zero-padded ``[..., cdiv(K / G, align) * align]`` buffer (logical shape and values
        unchanged; a copy). ``self`` where the rows are so already (any multiple of ``align``, the
        leading dims dense over the rows), the scales are K-major, or the format has no block scales.
        ``ExpertWeights`` pads MX scales so: Triton then knows every row's offset a multiple of 16
        and loads a K step's scale bytes of a row as one vector (see there)."""
        s = self.scale
        if align < 1:
            raise ValueError(f"align must be >= 1, got {align}")
        if (self.fmt not in (Format.NVFP4, Format.MXFP4, Format.MXFP8) or s is None or s.dim() < 2
                or s.stride(-1) != 1):
            return self
        nb = s.shape[-1]
        row = -(-nb // align) * align
        # already so: rows a multiple of `align` apart, the leading dims dense over them, an aligned start
        dense = all(s.stride(d) == s.stride(d + 1) * s.shape[d + 1] for d in range(s.dim() - 2))
        if s.stride(-2) % align == 0 and s.stride(-2) >= row and dense and s.storage_offset() % align == 0:
            return self
        buf = torch.zeros(*s.shape[:-1], row, dtype=s.dtype, device=s.device)
        buf[..., :nb] = s
        return dataclasses.replace(self, scale=buf[..., :nb])

    def index_select0(self, idx) -> "QuantizedTensor":
        """Select along the first (expert) dim; scales follow."""
        sel = lambda t: None if t is None else t[idx]  # noqa: E731
        # a subset's codes lie within the whole's range: still a valid (min, max) bound
        return dataclasses.replace(self, data=sel(self.data), scale=sel(self.scale), global_scale=sel(self.global_scale))

    def with_scale_code_range(self) -> "QuantizedTensor":
        """The same tensor with ``scale_code_range`` measured (:func:`scale_code_range_of`; one
        device sync); ``self`` for formats without UE8M0 block scales."""
        if self.fmt not in (Format.MXFP4, Format.MXFP8):
            return self
        return dataclasses.replace(self, scale_code_range=scale_code_range_of(self))

    def tiled_values(self, tile_k: Optional[int] = None, swizzle: bool = False) -> "QuantizedTensor":
        """FP4 values in the ``"tiled"`` layout (``"swizzled"`` with ``swizzle``) with tile width
        ``tile_k`` (default :func:`default_tile_k`; a copy); ``self`` where they are already so, or
        where the format / shape has no tiled layout (not FP4, rows % 64 or columns % 32 not 0)."""
        if not tileable(self.fmt, self.shape):
            return self
        tk = default_tile_k(self.shape[-1]) if tile_k is None else tile_k
        if tk not in TILE_WIDTHS or self.shape[-1] % tk:
            raise ValueError(f"tile_k must be one of {TILE_WIDTHS} and divide the columns ({self.shape[-1]}), got {tile_k!r}")
        if self.value_tile_k == tk and self.value_swizzled == bool(swizzle):
            return self
        q = self.linear_values()
        *B, R, Cb = q.data.shape
        d = q.data.reshape(*B, R // TILE_ROWS, TILE_ROWS, Cb // (tk // 2), tk // 2).transpose(-3, -2).contiguous()
        if swizzle:
            d = swizzle_fp4_words(d)
        return dataclasses.replace(self, data=d, value_layout="swizzled" if swizzle else "tiled")

    def linear_values(self) -> "QuantizedTensor":
        """FP4 values in the ``"linear"`` layout (a copy where they are tiled or swizzled, else ``self``)."""
        if self.value_layout == "linear":
            return self
        *B, RT, CT, _, TB = self.data.shape
        d = self.data.transpose(-3, -2).contiguous()
        if self.value_swizzled:
            d = swizzle_fp4_words(d, inverse=True)
        return dataclasses.replace(self, data=d.reshape(*B, RT * TILE_ROWS, CT * TB), value_layout="linear")

    def __repr__(self) -> str:
        return (
            f"QuantizedTensor(fmt={self.fmt!r}, shape={tuple(self.shape)}, data={self.data.dtype}, "
            f"scale={None if self.scale is None else (tuple(self.scale.shape), self.scale.dtype)})"
        )


VALUE_LAYOUTS = ("linear", "tiled", "swizzled")
TILE_ROWS = 64  # rows of a tile of the "tiled" FP4 layout
TILE_WIDTHS = (32, 64, 128)  # its tile widths (logical columns)
# the "swizzled" layout's bit map: FP4_SWIZZLE[i] = where bit i of a linear 16-bit word goes (bits 4t .. 4t + 3
# of the word = value t's mantissa, exponent bits 0 and 1, sign). Value 0: magnitude at 6-8 and sign at 15 (bf16's
# e2m1 * 2^-126 bits: kernels/_blockscaled._e2m1x4_bf16_nib reads it with one AND); value 1 at 3-5 and 12 (a left
# shift by 3, then the same AND); value 2 at 0-2 and 9 (shift 6); value 3: mantissa 13, exponent 10-11, sign 14.
FP4_SWIZZLE = (6, 7, 8, 15, 3, 4, 5, 12, 0, 1, 2, 9, 13, 10, 11, 14)
assert sorted(FP4_SWIZZLE) == list(range(16))


def swizzle_fp4_words(data: torch.Tensor, inverse: bool = False) -> torch.Tensor:
    """Packed FP4 bytes (uint8, last dim even, dense) with every little-endian 16-bit word's bits
    moved by :data:`FP4_SWIZZLE` (``inverse``: moved back); a new tensor, in slices of the leading
    dim (bounded temporary memory)."""
    if data.dtype != torch.uint8 or data.shape[-1] % 2:
        raise ValueError(f"swizzle_fp4_words needs uint8 data with an even last dim, got {data.dtype} "
                         f"{tuple(data.shape)}")
    moves = {}  # shift -> mask of source bits: one shift and one AND per distinct distance
    for src, dst in enumerate(FP4_SWIZZLE):
        if inverse:
            src, dst = dst, src
        moves[dst - src] = moves.get(dst - src, 0) | (1 << src)
    flat = data.contiguous().reshape(-1, data.shape[-1])
    out = torch.empty_like(flat)
    rows = max(1, (1 << 26) // max(1, flat.shape[-1]))
    for r0 in range(0, flat.shape[0], rows):
        w = flat[r0:r0 + rows].view(torch.int16).to(torch.int32) & 0xFFFF
        o = torch.zeros_like(w)
        for sh, mask in moves.items():
            o |= (w & mask) << sh if sh >= 0 else (w & mask) >> -sh
        out[r0:r0 + rows] = o.to(torch.int16).view(torch.uint8).reshape(-1, flat.shape[-1])
    return out.reshape(data.shape)


def tileable(fmt: Format, shape) -> bool:
    """Whether an operand of format ``fmt`` and logical shape ``[*B, R, C]`` has a "tiled" layout."""
    return fmt.is_fp4 and len(shape) >= 2 and shape[-2] % TILE_ROWS == 0 and shape[-1] % TILE_WIDTHS[0] == 0


def default_tile_k(cols: int) -> int:
    """The tile width ``ExpertWeights`` uses for ``cols`` columns: the widest of 128 / 64 / 32 that
    divides them -- the block_k of the block-scaled kernels' heuristic
    (``kernel_configs._block_scaled_bk``), so that a decode K step is one tile."""
    for tk in reversed(TILE_WIDTHS):
        if cols % tk == 0:
            return tk
    raise ValueError(f"no tile width of {TILE_WIDTHS} divides {cols} columns")


def scale_code_range_of(q: QuantizedTensor, chunk_bytes: int = 1 << 28) -> Optional[Tuple[int, int]]:
    """(min, max) of the UE8M0 block-scale codes of an MXFP4 / MXFP8 tensor over the 32-blocks
    holding a nonzero value (a block of zeros -- padding, pruned rows -- is 0 whatever its scale);
    None when every block is zero. Works in slices of about ``chunk_bytes`` of values (bounded
    temporary memory) and synchronizes with the device once."""
    if q.fmt not in (Format.MXFP4, Format.MXFP8):
        raise ValueError(f"scale_code_range_of: MXFP4 / MXFP8 only, got {q.fmt.name}")
    q = q.linear_values()  # a copy where tiled (ExpertWeights measures before tiling)
    nb = q.scale.shape[-1]
    d = q.data.reshape(-1, q.data.shape[-1])
    s = q.scale.reshape(-1, nb)
    per_block = d.shape[-1] // nb
    rows = max(1, chunk_bytes // max(1, d.shape[-1]))
    lo = torch.full((), 256, dtype=torch.int32, device=d.device)
    hi = torch.full((), -1, dtype=torch.int32, device=d.device)
    for r0 in range(0, d.shape[0], rows):
        blk = d[r0:r0 + rows].reshape(-1, nb, per_block)
        if q.fmt is Format.MXFP4:  # magnitude bits of both nibbles (-0 is zero too)
            nz = (blk & 0x77).ne(0).any(-1)
        else:  # e4m3: 0x00 / 0x80 are the zeros
            nz = (blk.view(torch.uint8) & 0x7F).ne(0).any(-1)
        c = s[r0:r0 + rows].to(torch.int32)
        lo = torch.minimum(lo, torch.where(nz, c, 256).amin())
        hi = torch.maximum(hi, torch.where(nz, c, -1).amax())
    lo_i, hi_i = int(lo), int(hi)
    return None if hi_i < 0 else (lo_i, hi_i)
