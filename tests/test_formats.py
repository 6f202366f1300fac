"""Torch reference of the numeric formats (fusedmoe.formats.reference): hand-computed vectors,
error bounds on random data, idempotence, validation.

Stated round-trip error bounds (per element, x finite, scales in their normal range):

* FP8 (TENSOR / TOKEN / CHANNEL / BLOCK, activations and weights) and MXFP8, with the element's
  scale s (MXFP8: s = 2^(e-127)):  |dq - x| <= 2^-4 |x| + 2^-10 s  (half an E4M3 ulp: 3 mantissa
  bits, subnormal spacing 2^-9), up to fp32 rounding (factor 1 + 2^-20 here).
* NVFP4 (s_eff = s_blk / g) and MXFP4 (s_eff = 2^(e-127)), with y = |x| / s_eff in grid units:
  |dq - x| <= h(y) s_eff, h = 0.25 for y <= 2, 0.5 for y <= 4, 1 above (half the E2M1 grid step;
  NVFP4's saturation at 6 after the block scale rounded down by up to 1/16 stays below 0.4 s_eff).
"""

import dataclasses
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import fusedmoe as fm
from fusedmoe.config import Format
from fusedmoe.formats import (
    FP8_MIN_SCALE,
    QuantizedTensor,
    dequantize,
    e2m1_to_float,
    float_to_e2m1,
    pack_fp4,
    quantize,
    quantize_weight,
    ue8m0_decode,
    ue8m0_encode_ceil,
    unpack_fp4,
)
from fusedmoe.formats.reference import _f32

E4M3 = torch.float8_e4m3fn
QUANT_FORMATS = [f for f in Format if f is not Format.BF16]
ACT_FORMATS = QUANT_FORMATS  # quantize() accepts every format (activation-style)
WEIGHT_FORMATS = [f for f in QUANT_FORMATS if f.is_weight_format]


def u8(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.element_size() == 1 else t


def bits(t: torch.Tensor) -> torch.Tensor:
    """Bit pattern for bitwise comparison (fp32 via int32, 1-byte types via uint8)."""
    if t.dtype == torch.float32:
        return t.view(torch.int32)
    return u8(t)


# ---------------------------------------------------------------------------------------------
# E2M1
# ---------------------------------------------------------------------------------------------

E2M1_TABLE = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def test_e2m1_decode_every_code():
    got = e2m1_to_float(torch.arange(16, dtype=torch.uint8))
    expect = torch.tensor(E2M1_TABLE + [-v for v in E2M1_TABLE])
    assert torch.equal(got, expect)
    assert torch.signbit(got[8]) and got[8] == 0  # 0b1000 is -0.0


def test_e2m1_encode_every_code():
    vals = torch.tensor(E2M1_TABLE + [-v for v in E2M1_TABLE])
    assert float_to_e2m1(vals).tolist() == list(range(16))


@pytest.mark.parametrize(
    "x, value",
    [
        (0.25, 0.0),  # tie 0 / 0.5 -> even code 0
        (0.26, 0.5),
        (0.74, 0.5),
        (0.75, 1.0),  # tie 0.5 / 1 -> even code 2
        (1.25, 1.0),  # tie 1 / 1.5 -> code 2
        (1.26, 1.5),
        (1.75, 2.0),  # tie 1.5 / 2 -> code 4
        (2.5, 2.0),  # tie 2 / 3 -> code 4
        (2.6, 3.0),
        (3.5, 4.0),  # tie 3 / 4 -> code 6
        (5.0, 4.0),  # tie 4 / 6 -> code 6
        (5.01, 6.0),
        (7.0, 6.0),  # saturation
        (1e30, 6.0),
        (0.1, 0.0),
    ],
)
def test_e2m1_round_half_even_and_saturation(x, value):
    for sign in (1.0, -1.0):
        code = float_to_e2m1(torch.tensor([sign * x]))
        got = e2m1_to_float(code)
        assert got.item() == sign * value
        assert bool(code.item() & 8) == (sign < 0)  # the sign bit is always kept


def test_e2m1_negative_to_zero_keeps_sign():
    codes = float_to_e2m1(torch.tensor([-0.1, -0.0, 0.0, -0.25, 0.1]))
    assert codes.tolist() == [0b1000, 0b1000, 0, 0b1000, 0]


def test_e2m1_bf16_input():
    assert float_to_e2m1(torch.tensor([1.75, -5.0], dtype=torch.bfloat16)).tolist() == [4, 8 | 6]


def test_pack_nibble_order():
    codes = torch.tensor([[1, 2, 15, 0]], dtype=torch.uint8)
    packed = pack_fp4(codes)
    assert packed.tolist() == [[0x21, 0x0F]]  # element 2i low nibble, 2i+1 high nibble
    assert torch.equal(unpack_fp4(packed), codes)
    allbytes = torch.arange(256, dtype=torch.uint8)
    assert torch.equal(pack_fp4(unpack_fp4(allbytes)), allbytes)


def test_pack_validation():
    with pytest.raises(ValueError, match="codes"):
        pack_fp4(torch.zeros(3, dtype=torch.uint8))
    with pytest.raises(TypeError, match="codes"):
        pack_fp4(torch.zeros(4, dtype=torch.int32))
    with pytest.raises(TypeError, match="packed"):
        unpack_fp4(torch.zeros(4))
    with pytest.raises(ValueError, match="codes"):
        e2m1_to_float(torch.tensor([16], dtype=torch.uint8))


# ---------------------------------------------------------------------------------------------
# UE8M0
# ---------------------------------------------------------------------------------------------


def test_ue8m0_round_up():
    x = torch.tensor([1.2, 1.0, 2.0, 0.75, 3.0, 0.0, 2.0**-127, 1.5 * 2.0**-127, 2.0**-126, 2.0**-140])
    expect = [128, 127, 128, 127, 129, 0, 0, 1, 1, 0]
    assert ue8m0_encode_ceil(x).tolist() == expect


def test_ue8m0_saturation_and_nan():
    x = torch.tensor([float("inf"), 3e38, 2.0**127, float("nan")])
    assert ue8m0_encode_ceil(x).tolist() == [254, 254, 254, 255]


def test_ue8m0_decode():
    e = torch.tensor([0, 1, 126, 127, 128, 254, 255], dtype=torch.uint8)
    d = ue8m0_decode(e)
    assert d[:6].tolist() == [2.0**-127, 2.0**-126, 0.5, 1.0, 2.0, 2.0**127]
    assert math.isnan(d[6].item())


def test_ue8m0_ceil_is_smallest_power_of_two_above():
    v = torch.rand(4096) * 10.0 ** torch.randint(-30, 30, (4096,)).float()
    e = ue8m0_encode_ceil(v)
    p = ue8m0_decode(e)
    assert (p >= v).all()
    assert (p / 2 < v).all()


# ---------------------------------------------------------------------------------------------
# FP8 known vectors
# ---------------------------------------------------------------------------------------------


def test_fp8_saturation_static_scale():
    x = torch.tensor([[500.0, -1000.0, 448.0, 464.0, 1e-5, -1e-5, 0.0, 3.0]])
    q = quantize(x, Format.FP8_TENSOR, scale=torch.tensor(1.0))
    assert q.data.float().tolist() == [[448.0, -448.0, 448.0, 448.0, 0.0, -0.0, 0.0, 3.0]]
    assert u8(q.data)[0, 5].item() == 0x80  # sign of a value rounding to zero is kept
    assert q.scale.shape == () and q.scale.item() == 1.0


def test_fp8_static_scale_divides():
    x = torch.tensor([[1.0, -2.0, 3.0]])
    q = quantize(x, Format.FP8_TENSOR, scale=0.5)
    assert q.data.float().tolist() == [[2.0, -4.0, 6.0]]
    assert dequantize(q).tolist() == x.tolist()


def test_fp8_dynamic_scales():
    x = torch.zeros(3, 128)
    x[0, 5] = -896.0
    x[0, 6] = 1.0
    x[2, 0] = 1e-7  # tiny row: scale floored at FP8_MIN_SCALE
    q = quantize(x, Format.FP8_TOKEN)
    assert q.scale.tolist() == [2.0, _f32(FP8_MIN_SCALE), _f32(FP8_MIN_SCALE)]
    assert q.data.float()[0, 5].item() == -448.0 and q.data.float()[0, 6].item() == 0.5
    assert (q.data.float()[1] == 0).all()  # all-zero row: values 0, no NaN
    assert torch.isfinite(dequantize(q)).all()
    t = quantize(x, Format.FP8_TENSOR)
    assert t.scale.item() == 2.0 and t.scale.shape == ()
    z = quantize(torch.zeros(2, 32), Format.FP8_TENSOR)
    assert z.scale.item() == _f32(FP8_MIN_SCALE) and (dequantize(z) == 0).all()


def test_fp8_block_groups():
    x = torch.zeros(2, 256)
    x[0, :128] = torch.linspace(-4.48, 4.48, 128)
    x[1, 200] = 1.0
    q = quantize(x, Format.FP8_BLOCK)
    assert q.block_rows == 1 and q.scale.shape == (2, 2)
    eps_scale = (torch.tensor(_f32(1e-10)) / torch.tensor(448.0)).item()
    assert q.scale[0, 0].item() == (torch.tensor(4.48) / torch.tensor(448.0)).item()
    assert q.scale[0, 1].item() == eps_scale  # zero group: eps floor
    assert q.scale[1, 1].item() == (torch.tensor(1.0) / torch.tensor(448.0)).item()
    assert q.data.float()[1, 200].item() == 448.0
    dq = dequantize(q)
    assert (dq[0, 128:] == 0).all() and torch.isfinite(dq).all()


def test_fp8_e4m3_subnormals_kept():
    x = torch.tensor([[448.0, 2.0**-9, 3 * 2.0**-10, 2.0**-11]])  # scale 1
    q = quantize(x, Format.FP8_TOKEN)
    assert q.scale.item() == 1.0
    assert q.data.float().tolist() == [[448.0, 2.0**-9, 2 * 2.0**-9, 0.0]]  # 1.5 ulp -> 2 (even)


# ---------------------------------------------------------------------------------------------
# MX known vectors
# ---------------------------------------------------------------------------------------------


def test_mxfp8_known_vector():
    x = torch.zeros(2, 64)
    x[0, 0], x[0, 1], x[0, 2] = 537.6, 1.0, -3.0  # amax/448 = 1.2 -> 2^1
    x[0, 32], x[0, 33] = 448.0, -0.5  # amax/448 = 1 exactly -> 2^0
    x[1, 0] = 1e-3  # amax/448 = 2.2e-6 -> 2^-18
    q = quantize(x, Format.MXFP8)
    assert q.scale.tolist() == [[128, 127], [127 - 18, 0]]
    assert q.data.float()[0, :3].tolist() == [256.0, 0.5, -1.5]  # 268.8 -> 256 (spacing 32)
    assert q.data.float()[0, 32:34].tolist() == [448.0, -0.5]
    assert (q.data.float()[1, 32:] == 0).all()  # zero block: e = 0, values 0
    dq = dequantize(q)
    assert dq[0, 0].item() == 512.0 and dq[0, 1].item() == 1.0 and (dq[1, 32:] == 0).all()
    assert dq[1, 0].item() == pytest.approx(1e-3, rel=2**-4)


def test_mxfp4_known_vector():
    x = torch.zeros(1, 64)
    x[0, :6] = torch.tensor([6.0, 3.0, -1.5, 0.25, 0.75, -7.0 / 8])  # amax 6 -> e = 127
    x[0, 32:36] = torch.tensor([12.0, 5.0, -2.0, 0.3])  # amax 12 -> 2^1; y = x / 2
    q = quantize(x, Format.MXFP4)
    assert q.scale.tolist() == [[127, 128]]
    assert q.data.shape == (1, 32)
    codes = unpack_fp4(q.data)[0]
    assert e2m1_to_float(codes[:6]).tolist() == [6.0, 3.0, -1.5, 0.0, 1.0, -1.0]
    assert e2m1_to_float(codes[32:36]).tolist() == [6.0, 2.0, -1.0, 0.0]
    assert dequantize(q)[0, 32:36].tolist() == [12.0, 4.0, -2.0, 0.0]


def test_mx_scale_underflow_gives_zero():
    x = torch.zeros(1, 32)
    x[0, 0] = -1e-38  # amax / 448 < 2^-127 -> e = 0 -> values 0 (sign kept)
    for fmt in (Format.MXFP8, Format.MXFP4):
        q = quantize(x, fmt)
        assert q.scale.tolist() == [[0]]
        dq = dequantize(q)
        assert (dq == 0).all() and torch.isfinite(dq).all()


# ---------------------------------------------------------------------------------------------
# NVFP4 known vectors
# ---------------------------------------------------------------------------------------------


def test_nvfp4_known_vector_unit_scale():
    x = torch.zeros(1, 32)
    x[0, :8] = torch.tensor([6.0, -4.0, 3.0, 1.75, -0.25, 0.5, 5.0, -0.1])
    q = quantize(x, Format.NVFP4, global_scale=torch.tensor(1.0))
    assert q.global_scale.item() == 1.0 and q.global_scale.shape == ()
    assert u8(q.scale).tolist() == [[0x38, 0x00]]  # e4m3(1.0) = 0x38; zero block -> 0
    codes = unpack_fp4(q.data)[0]
    assert codes[:8].tolist() == [7, 8 | 6, 5, 4, 8 | 0, 1, 6, 8 | 0]
    dq = dequantize(q)
    assert dq[0, :8].tolist() == [6.0, -4.0, 3.0, 2.0, -0.0, 0.5, 4.0, -0.0]
    assert (dq[0, 16:] == 0).all() and torch.isfinite(dq).all()  # zero block: no NaN


def test_nvfp4_subnormal_block_scales():
    g = torch.tensor(1.0)
    x = torch.zeros(3, 16)
    x[0, 0], x[0, 1] = 6 * 2.0**-8, -(2.0**-8)  # s = 2^-8 = 2 * 2^-9: E4M3 subnormal byte 0x02
    x[1, 0] = 6 * 1.5 * 2.0**-9  # s = 1.5 * 2^-9: tie -> even 2 * 2^-9
    x[2, 0] = 6 * 2.0**-11  # s = 2^-11 rounds to 0: whole block 0
    q = quantize(x, Format.NVFP4, global_scale=g)
    assert u8(q.scale).tolist() == [[0x02], [0x02], [0x00]]
    dq = dequantize(q)
    assert dq[0, 0].item() == 6 * 2.0**-8 and dq[0, 1].item() == -(2.0**-8)
    assert dq[1, 0].item() == 4 * 2.0**-8  # y = 9 * 2^-9 / 2^-8 = 4.5 -> 4
    assert (dq[2] == 0).all() and torch.isfinite(dq).all()


def test_nvfp4_global_scale_default_and_scale_formula():
    x = torch.randn(4, 64) * 3
    amax = x.abs().max()
    q = quantize(x, Format.NVFP4)
    g = torch.tensor(2688.0) / amax
    assert q.global_scale.item() == g.item()
    blk = x.reshape(4, 4, 16).abs().amax(-1)
    s_expect = (g * (blk * _f32(1 / 6))).clamp(max=448).to(E4M3)
    assert torch.equal(u8(q.scale), u8(s_expect))
    assert u8(q.scale).max().item() == 0x7E  # the block holding amax gets 448
    z = quantize(torch.zeros(2, 16), Format.NVFP4)
    assert torch.isfinite(z.global_scale).all() and (dequantize(z) == 0).all()


def test_nvfp4_per_slice_global_scale():
    x = torch.randn(2, 3, 32)
    g = torch.tensor([1.0, 100.0])
    q = quantize(x, Format.NVFP4, global_scale=g)
    assert torch.equal(q.global_scale, g)
    for b in range(2):
        qb = quantize(x[b], Format.NVFP4, global_scale=g[b])
        assert torch.equal(q.data[b], qb.data) and torch.equal(u8(q.scale[b]), u8(qb.scale))


# ---------------------------------------------------------------------------------------------
# weights
# ---------------------------------------------------------------------------------------------


def test_weight_scale_shapes():
    w = torch.randn(3, 200, 256)
    expect = {
        Format.FP8_TENSOR: (3,),
        Format.FP8_CHANNEL: (3, 200),
        Format.FP8_BLOCK: (3, 2, 2),
        Format.MXFP8: (3, 200, 8),
        Format.NVFP4: (3, 200, 16),
        Format.MXFP4: (3, 200, 8),
    }
    for fmt, shape in expect.items():
        q = quantize_weight(w, fmt)
        assert tuple(q.scale.shape) == shape, fmt
        assert q.shape == w.shape
    assert quantize_weight(w, Format.FP8_BLOCK).block_rows == 128
    assert quantize_weight(w, Format.NVFP4).global_scale.shape == (3,)


def test_weight_fp8_block_tiles():
    w = torch.randn(2, 200, 256)
    w[1, 128:] = 0  # a partial, all-zero tile
    q = quantize_weight(w, Format.FP8_BLOCK)
    for e in range(2):
        for nb in range(2):
            for kb in range(2):
                tile = w[e, nb * 128 : (nb + 1) * 128, kb * 128 : (kb + 1) * 128]
                s = torch.tensor(max(tile.abs().max().item(), _f32(1e-10)), dtype=torch.float32) / torch.tensor(448.0)
                assert q.scale[e, nb, kb].item() == s.item()
    dq = dequantize(q)
    assert (dq[1, 128:] == 0).all()
    assert torch.isfinite(dq).all()


def test_weight_fp8_all_zero_expert():
    w = torch.zeros(2, 4, 32)
    w[0, 0, 0] = 1.0
    for fmt in (Format.FP8_TENSOR, Format.FP8_CHANNEL, Format.NVFP4):
        q = quantize_weight(w, fmt)
        dq = dequantize(q)
        assert torch.isfinite(dq).all() and (dq[1] == 0).all() and dq[0, 0, 0].item() == 1.0


def test_weight_nvfp4_per_expert_global_scale():
    w = torch.randn(3, 8, 64) * torch.tensor([1.0, 10.0, 0.01])[:, None, None]
    q = quantize_weight(w, Format.NVFP4)
    g = torch.tensor(2688.0) / w.abs().amax(dim=(1, 2))
    assert torch.equal(q.global_scale, g)
    for e in range(3):
        qe = quantize(w[e], Format.NVFP4, global_scale=g[e])
        assert torch.equal(q.data[e], qe.data) and torch.equal(u8(q.scale[e]), u8(qe.scale))


def test_weight_bf16_keeps_16_bit_dtype():
    for dt, out in ((torch.float16, torch.float16), (torch.bfloat16, torch.bfloat16), (torch.float32, torch.bfloat16)):
        q = quantize_weight(torch.randn(2, 4, 8, dtype=dt), Format.BF16)
        assert q.data.dtype == out and q.scale is None


# ---------------------------------------------------------------------------------------------
# random data: error bounds, idempotence, leading dims
# ---------------------------------------------------------------------------------------------


def _data(seed: int, rows: int, cols: int, log_mag: float, dtype) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=gen) * 10.0**log_mag
    x.view(-1)[torch.randint(0, rows * cols, (3,), generator=gen)] *= 50.0  # outliers
    return x.to(dtype)


def _elem_scale(q: QuantizedTensor) -> torch.Tensor:
    """The per-element effective scale (the value of one unit of the element grid)."""
    C = q.shape[-1]
    lead = tuple(q.shape[:-1])
    if q.fmt is Format.FP8_TENSOR:
        return q.scale.reshape(q.scale.shape + (1,) * (len(q.shape) - q.scale.dim())).expand(q.shape)
    if q.fmt in (Format.FP8_TOKEN, Format.FP8_CHANNEL):
        return q.scale[..., None].expand(q.shape)
    if q.fmt is Format.FP8_BLOCK:
        s = q.scale.repeat_interleave(128, -1)
        if len(q.shape) >= 2:
            s = s.repeat_interleave(q.block_rows, -2)[..., : q.shape[-2], :]
        return s
    if q.fmt in (Format.MXFP8, Format.MXFP4):
        return ue8m0_decode(q.scale).repeat_interleave(32, -1).reshape(*lead, C)
    s = q.scale.float() / q.global_scale.reshape(q.global_scale.shape + (1,) * (len(q.shape) - q.global_scale.dim()))
    return s.repeat_interleave(16, -1).reshape(*lead, C)


def _check_bound(x: torch.Tensor, q: QuantizedTensor) -> None:
    xf = x.float()
    dq = dequantize(q)
    err = (dq - xf).abs()
    s = _elem_scale(q)
    slack = 1 + 2.0**-20
    if q.fmt.is_fp4:
        y = xf.abs() / s
        h = torch.where(y <= 2, 0.25, torch.where(y <= 4, 0.5, 1.0))
        bound = h * s * slack
    else:
        bound = (2.0**-4 * xf.abs() + 2.0**-10 * s) * slack
    bad = err > bound
    assert not bad.any(), f"{q.fmt}: max excess {(err - bound).max().item()} at {bad.nonzero()[:4].tolist()}"


_common = dict(
    seed=st.integers(0, 2**31 - 1),
    rows=st.integers(1, 5),
    log_mag=st.floats(-3.0, 2.0),  # fp16-safe with the x50 outliers
    dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float16]),
)


@settings(max_examples=50, deadline=None)
@given(fmt=st.sampled_from(ACT_FORMATS), ngroups=st.integers(1, 3), **_common)
def test_quantize_error_bound(fmt, ngroups, seed, rows, log_mag, dtype):
    x = _data(seed, rows, 128 * ngroups, log_mag, dtype)
    q = quantize(x, fmt)
    _check_bound(x, q)


@settings(max_examples=40, deadline=None)
@given(fmt=st.sampled_from(WEIGHT_FORMATS), n=st.integers(1, 140), **_common)
def test_quantize_weight_error_bound(fmt, n, seed, rows, log_mag, dtype):
    w = _data(seed, rows * n, 128, log_mag, dtype).reshape(rows, n, 128)
    q = quantize_weight(w, fmt)
    _check_bound(w, q)


def _check_idempotent(q1: QuantizedTensor, q2: QuantizedTensor) -> None:
    """Re-quantizing the dequantized tensor reproduces it exactly: the same values always; the
    same bytes for FP8 and NVFP4; for MX formats a block may come back one binade lower (the block
    max rounded onto 448 * 2^(e-128) resp. 3 * 2^(e-127)), its bytes then encode the same values."""
    assert torch.equal(dequantize(q1), dequantize(q2))
    if q1.fmt in (Format.MXFP8, Format.MXFP4):
        same = q1.scale == q2.scale
        assert ((q2.scale == q1.scale) | (q2.scale.int() == q1.scale.int() - 1)).all()
        gsize = 32 if q1.fmt is Format.MXFP8 else 16  # data bytes per scale group
        mask = same.repeat_interleave(gsize, -1)
        assert torch.equal(u8(q1.data)[mask], u8(q2.data)[mask])
        return
    assert torch.equal(u8(q1.data), u8(q2.data))
    assert torch.equal(bits(q1.scale), bits(q2.scale))
    if q1.global_scale is not None:
        assert torch.equal(q1.global_scale, q2.global_scale)


@settings(max_examples=50, deadline=None)
@given(fmt=st.sampled_from(ACT_FORMATS), **_common)
def test_quantize_idempotent(fmt, seed, rows, log_mag, dtype):
    x = _data(seed, rows, 256, log_mag, dtype)
    q1 = quantize(x, fmt)
    q2 = quantize(dequantize(q1), fmt)
    _check_idempotent(q1, q2)
    if fmt is Format.NVFP4:  # also with the global scale held fixed
        q3 = quantize(dequantize(q1), fmt, global_scale=q1.global_scale)
        _check_idempotent(q1, q3)


@settings(max_examples=30, deadline=None)
@given(fmt=st.sampled_from(WEIGHT_FORMATS), **_common)
def test_quantize_weight_idempotent(fmt, seed, rows, log_mag, dtype):
    w = _data(seed, rows * 130, 128, log_mag, dtype).reshape(rows, 130, 128)
    q1 = quantize_weight(w, fmt)
    _check_idempotent(q1, quantize_weight(dequantize(q1), fmt))


@pytest.mark.parametrize("fmt", ACT_FORMATS)
def test_leading_dims_and_1d(fmt):
    x = torch.randn(2, 3, 256)
    q = quantize(x, fmt)
    assert q.shape == x.shape
    dq = dequantize(q)
    if fmt in (Format.FP8_TOKEN, Format.FP8_CHANNEL, Format.FP8_BLOCK, Format.MXFP8, Format.MXFP4):
        # row-local formats: each row quantizes on its own
        for i in range(2):
            assert torch.equal(dequantize(quantize(x[i], fmt)), dq[i])
    if fmt is Format.FP8_TENSOR:
        assert q.scale.shape == (2,) and (q.scale == q.scale[0]).all()
    v = quantize(x[0, 0], fmt)
    assert v.shape == x[0, 0].shape and dequantize(v).shape == (256,)


def test_empty_tensors():
    for fmt in ACT_FORMATS:
        q = quantize(torch.zeros(0, 128), fmt)
        assert q.shape == (0, 128) and dequantize(q).shape == (0, 128)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_dequantize_dtype(dtype):
    x = torch.randn(2, 128)
    for fmt in Format:
        out = dequantize(quantize(x, fmt), dtype)
        assert out.dtype == dtype and out.shape == x.shape


def test_bf16_passthrough():
    x = torch.randn(2, 8, dtype=torch.float16)
    assert quantize(x, Format.BF16).data is x
    assert quantize(x.float(), Format.BF16).data.dtype == torch.bfloat16


# ---------------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------------


def test_validation_errors():
    x = torch.randn(2, 64)
    with pytest.raises(TypeError, match="x"):
        quantize([1.0, 2.0], Format.FP8_TOKEN)
    with pytest.raises(TypeError, match="x"):
        quantize(torch.ones(2, 64, dtype=torch.int32), Format.FP8_TOKEN)
    with pytest.raises(TypeError, match="x"):
        quantize(x.double(), Format.FP8_TOKEN)
    with pytest.raises(TypeError, match="fmt"):
        quantize(x, "fp8")
    with pytest.raises(ValueError, match="x"):
        quantize(torch.tensor(1.0), Format.FP8_TENSOR)
    with pytest.raises(ValueError, match="x.*128"):
        quantize(x, Format.FP8_BLOCK)
    with pytest.raises(ValueError, match="x.*32"):
        quantize(torch.randn(2, 48), Format.MXFP8)
    with pytest.raises(ValueError, match="x.*16"):
        quantize(torch.randn(2, 24), Format.NVFP4)
    with pytest.raises(ValueError, match="scale"):
        quantize(x, Format.FP8_TOKEN, scale=torch.tensor(1.0))
    with pytest.raises(ValueError, match="global_scale"):
        quantize(x, Format.MXFP4, global_scale=torch.tensor(1.0))
    with pytest.raises(ValueError, match="scale"):
        quantize(x, Format.FP8_TENSOR, scale=torch.tensor(0.0))
    with pytest.raises(ValueError, match="scale"):
        quantize(x, Format.FP8_TENSOR, scale=torch.ones(3))
    with pytest.raises(ValueError, match="global_scale"):
        quantize(x, Format.NVFP4, global_scale=torch.tensor(float("inf")))
    with pytest.raises(TypeError, match="scale"):
        quantize(x, Format.FP8_TENSOR, scale="1.0")


def test_nan_inf_rejected_on_cpu():
    for bad in (float("nan"), float("inf"), -float("inf")):
        x = torch.randn(2, 128)
        x[1, 7] = bad
        for fmt in QUANT_FORMATS:
            with pytest.raises(ValueError, match="x contains NaN/inf"):
                quantize(x, fmt)
        with pytest.raises(ValueError, match="w contains NaN/inf"):
            quantize_weight(x.reshape(1, 2, 128), Format.FP8_TENSOR)


def test_weight_validation_errors():
    with pytest.raises(ValueError, match="w"):
        quantize_weight(torch.randn(4, 128), Format.FP8_TENSOR)
    with pytest.raises(ValueError, match="FP8_TOKEN"):
        quantize_weight(torch.randn(1, 4, 128), Format.FP8_TOKEN)
    with pytest.raises(ValueError, match="w.*128"):
        quantize_weight(torch.randn(1, 128, 64), Format.FP8_BLOCK)
    with pytest.raises(TypeError, match="w"):
        quantize_weight(torch.ones(1, 4, 32, dtype=torch.int8), Format.MXFP4)


def test_dequantize_validation():
    with pytest.raises(TypeError, match="q"):
        dequantize(torch.randn(2, 2))
    with pytest.raises(TypeError, match="dtype"):
        dequantize(quantize(torch.randn(2, 32), Format.MXFP8), torch.int32)


def test_quantized_tensor_validation():
    d = torch.zeros(2, 64, dtype=E4M3)
    with pytest.raises(ValueError, match="scale"):
        QuantizedTensor(d, Format.FP8_TOKEN, torch.ones(3))
    with pytest.raises(TypeError, match="scale"):
        QuantizedTensor(d, Format.FP8_TOKEN, [1.0, 1.0])
    with pytest.raises(ValueError, match="multiple of 32"):
        QuantizedTensor(torch.zeros(2, 48, dtype=E4M3), Format.MXFP8, torch.zeros(2, 1, dtype=torch.uint8))
    with pytest.raises(TypeError, match="uint8"):
        QuantizedTensor(d, Format.NVFP4, torch.zeros(2, 8, dtype=E4M3), torch.tensor(1.0))


# ---------------------------------------------------------------------------------------------
# device independence
# ---------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("fmt", QUANT_FORMATS)
def test_reference_same_bits_on_gpu(fmt):
    x = _data(1, 64, 1024, 0.0, torch.bfloat16)
    qc, qg = quantize(x, fmt), quantize(x.cuda(), fmt)
    assert torch.equal(u8(qc.data), u8(qg.data).cpu())
    assert torch.equal(bits(qc.scale), bits(qg.scale).cpu())
    if fmt is Format.NVFP4:
        assert torch.equal(qc.global_scale, qg.global_scale.cpu())
    assert torch.equal(dequantize(qc), dequantize(qg).cpu())
    if fmt.is_weight_format:
        w = x.reshape(4, 16, 1024)
        wc, wg = quantize_weight(w, fmt), quantize_weight(w.cuda(), fmt)
        assert torch.equal(u8(wc.data), u8(wg.data).cpu())
        assert torch.equal(bits(wc.scale), bits(wg.scale).cpu())


# ---- QuantizedTensor.scale_code_range ---------------------------------------------------------


def _brute_code_range(q):
    nb = q.scale.shape[-1]
    d = q.data.reshape(-1, nb, q.data.shape[-1] // nb)
    if q.fmt is Format.MXFP4:
        nz = ((d & 0x77) != 0).any(-1)
    else:
        nz = ((d.view(torch.uint8) & 0x7F) != 0).any(-1)
    codes = [int(c) for c, z in zip(q.scale.reshape(-1).tolist(), nz.reshape(-1).tolist()) if z]
    return (min(codes), max(codes)) if codes else None


@pytest.mark.parametrize("fmt", [Format.MXFP4, Format.MXFP8], ids=lambda f: f.name)
def test_scale_code_range_of(fmt):
    """(min, max) UE8M0 code over the blocks holding a nonzero value: zero blocks (also -0 and
    their extreme codes) do not count; slices of any size give the same; all zero -> None."""
    from fusedmoe.formats import scale_code_range_of

    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, 40, 96, generator=g)
    x[0, 5, :32] = 0.0
    x[1, 7, 32:64] = -0.0
    q = quantize(x, fmt)
    s = q.scale.clone()
    s[0, 5, 0], s[1, 7, 1] = 0, 255  # zero blocks with codes that would widen the range
    q = QuantizedTensor(q.data, fmt, s)
    want = _brute_code_range(q)
    assert want is not None and want[0] > 0 and want[1] < 255
    assert scale_code_range_of(q) == want
    assert scale_code_range_of(q, chunk_bytes=1) == want  # one row a slice
    assert q.with_scale_code_range().scale_code_range == want
    z = quantize(torch.zeros(2, 4, 64), fmt)
    assert scale_code_range_of(z) is None


def test_scale_code_range_field():
    """Validated (MX formats only, a (min, max) int pair in [0, 255]) and carried by to(),
    index_select0() and k_major_scales(); other formats refuse it."""
    q = quantize(torch.randn(4, 8, 64), Format.MXFP4).with_scale_code_range()
    r = q.scale_code_range
    assert r is not None
    assert q.to("cpu").scale_code_range == r
    assert q.index_select0(torch.tensor([1, 2])).scale_code_range == r
    assert q.k_major_scales().scale_code_range == r
    for bad in ((5, 3), (-1, 3), (0, 256), [1, 2], (1.0, 2)):
        with pytest.raises(ValueError, match="scale_code_range"):
            QuantizedTensor(q.data, q.fmt, q.scale, scale_code_range=bad)
    nv = quantize(torch.randn(4, 8, 64), Format.NVFP4)
    with pytest.raises(ValueError, match="MXFP4 / MXFP8 only"):
        QuantizedTensor(nv.data, nv.fmt, nv.scale, nv.global_scale, scale_code_range=(1, 2))
    assert nv.with_scale_code_range() is nv


# ---- QuantizedTensor.value_layout (FP4 "tiled") ----------------------------------------------


@pytest.mark.parametrize("fmt", [Format.NVFP4, Format.MXFP4], ids=lambda f: f.name)
def test_tiled_values_layout(fmt):
    """tiled_values() stores the same bytes as [*B, R/64, C/TK, 64, TK/2] (checked element by
    element) with the widest tile width that divides C, or the one asked for; linear_values()
    inverts it, fm.dequantize reads both alike; shapes that do not divide, and non-FP4 formats, keep
    their layout; the field and the width are validated."""
    from fusedmoe.formats.tensor import TILE_ROWS, default_tile_k

    g = torch.Generator().manual_seed(5)
    q = quantize(torch.randn(2, 128, 192, generator=g), fmt)
    assert default_tile_k(192) == 64 and default_tile_k(256) == 128 and default_tile_k(96) == 32
    for tk in (None, 32, 64):
        t = q.tiled_values(tk)
        w = tk or 64
        assert t.value_layout == "tiled" and t.value_tile_k == w and t.shape == q.shape
        assert tuple(t.data.shape) == (2, 128 // TILE_ROWS, 192 // w, TILE_ROWS, w // 2)
        for e, r, cb in ((0, 0, 0), (1, 70, 17), (1, 127, 95), (0, 63, 48)):
            assert t.data[e, r // TILE_ROWS, cb // (w // 2), r % TILE_ROWS, cb % (w // 2)] == q.data[e, r, cb]
        assert not torch.equal(t.data.reshape(q.data.shape), q.data)
        assert torch.equal(t.linear_values().data, q.data) and t.linear_values().value_layout == "linear"
        assert torch.equal(dequantize(t), dequantize(q))
        assert t.tiled_values(w) is t and q.linear_values() is q
    t = q.tiled_values()
    assert torch.equal(t.tiled_values(32).data, q.tiled_values(32).data)  # re-tiled from the tiled layout
    with pytest.raises(ValueError, match="tile_k"):
        q.tiled_values(128)  # does not divide 192
    with pytest.raises(ValueError, match="tile_k"):
        q.tiled_values(48)
    with pytest.raises(ValueError, match="shape"):  # tiled bytes taken for linear ones: refused
        QuantizedTensor(t.data, fmt, q.scale, q.global_scale)
    with pytest.raises(ValueError, match="dense"):
        QuantizedTensor(t.data.transpose(-2, -3).contiguous().transpose(-2, -3), fmt, q.scale, q.global_scale,
                        value_layout="tiled")
    assert t.index_select0(torch.tensor([1])).value_layout == "tiled"
    assert torch.equal(dequantize(t.index_select0(torch.tensor([1]))), dequantize(q)[1:])
    odd = quantize(torch.randn(2, 96, 96, generator=g), fmt)  # 96 rows: no whole 64-row tiles
    assert odd.tiled_values() is odd
    with pytest.raises(ValueError, match="tiled"):
        QuantizedTensor(odd.data, fmt, odd.scale, odd.global_scale, value_layout="tiled")
    with pytest.raises(ValueError, match="value_layout"):
        QuantizedTensor(q.data, fmt, q.scale, q.global_scale, value_layout="blocked")
    f8 = quantize(torch.randn(2, 128, 128, generator=g), Format.FP8_CHANNEL)
    assert f8.tiled_values() is f8 and f8.value_tile_k == 0


def test_fp4_swizzle_bit_map():
    """swizzle_fp4_words moves bit i of every little-endian 16-bit word to FP4_SWIZZLE[i]: value 0's
    magnitude to bits 6-8 and its sign to 15 (bf16's e2m1 * 2^-126 bits), values 1 and 2 three and six
    bits below, value 3 to 13 / 10-11 / 14; the inverse undoes it; other dtypes and odd widths are refused."""
    from fusedmoe.formats.tensor import FP4_SWIZZLE, swizzle_fp4_words

    assert FP4_SWIZZLE[:4] == (6, 7, 8, 15)
    assert [b - 3 for b in FP4_SWIZZLE[:4]] == list(FP4_SWIZZLE[4:8])
    assert [b - 6 for b in FP4_SWIZZLE[:4]] == list(FP4_SWIZZLE[8:12])
    for i, dst in enumerate(FP4_SWIZZLE):  # one bit at a time, in either byte of the word
        w = torch.tensor([1 << i], dtype=torch.int32).to(torch.int16).view(torch.uint8)
        got = swizzle_fp4_words(w).view(torch.int16).to(torch.int32) & 0xFFFF
        assert int(got) == 1 << dst, (i, dst)
        assert torch.equal(swizzle_fp4_words(swizzle_fp4_words(w), inverse=True), w)
    g = torch.Generator().manual_seed(4)
    d = torch.randint(0, 256, (3, 2, 64, 32), dtype=torch.uint8, generator=g)
    sw = swizzle_fp4_words(d)
    assert not torch.equal(sw, d) and torch.equal(swizzle_fp4_words(sw, inverse=True), d)
    # the sign and magnitude bits: the popcount of each word is kept (a permutation of bits)
    pc = lambda t: sum(((t.view(torch.int16).to(torch.int32) >> b) & 1) for b in range(16))  # noqa: E731
    assert torch.equal(pc(sw), pc(d))
    with pytest.raises(ValueError, match="uint8"):
        swizzle_fp4_words(d.to(torch.int32))
    with pytest.raises(ValueError, match="even"):
        swizzle_fp4_words(d[..., :31])


@pytest.mark.parametrize("fmt", [Format.NVFP4, Format.MXFP4], ids=lambda f: f.name)
def test_swizzled_values_layout(fmt):
    """tiled_values(swizzle=True): the "tiled" bytes with every 16-bit word bit-swizzled; linear_values()
    and tiled_values() undo it, fm.dequantize reads it, expert selection and re-tiling keep it, and
    ExpertWeights stores tileable FP4 weights so by default."""
    from fusedmoe.formats.tensor import swizzle_fp4_words

    g = torch.Generator().manual_seed(6)
    q = quantize(torch.randn(2, 128, 192, generator=g), fmt)
    t = q.tiled_values()
    for tk in (None, 32, 64):
        s = q.tiled_values(tk, swizzle=True)
        assert s.value_layout == "swizzled" and s.value_swizzled and s.value_tile_k == (tk or 64)
        assert s.shape == q.shape and not t.value_swizzled
        assert torch.equal(s.data, swizzle_fp4_words(q.tiled_values(tk).data))
        assert torch.equal(s.linear_values().data, q.data) and s.linear_values().value_layout == "linear"
        assert torch.equal(dequantize(s), dequantize(q))
        assert s.tiled_values(tk, swizzle=True) is s
        assert torch.equal(s.tiled_values(tk).data, q.tiled_values(tk).data)  # unswizzled again
    s = t.tiled_values(swizzle=True)  # from the tiled layout
    assert torch.equal(s.data, swizzle_fp4_words(t.data))
    assert torch.equal(dequantize(s.index_select0(torch.tensor([1]))), dequantize(q)[1:])
    assert s.index_select0(torch.tensor([1])).value_layout == "swizzled"
    with pytest.raises(ValueError, match="swizzled"):  # linear bytes taken for swizzled ones: refused
        QuantizedTensor(q.data, fmt, q.scale, q.global_scale, value_layout="swizzled")
    W = fm.ExpertWeights.from_float(torch.randn(4, 256, 128, generator=g), torch.randn(4, 128, 128, generator=g),
                                    activation=fm.Activation.SWIGLU, format=fmt)
    assert W.w13.value_layout == W.w2.value_layout == "swizzled"
    assert torch.equal(dequantize(W.w13), dequantize(W.w13.linear_values()))
    # with_fp4_layout: plain nibbles (the cheaper E4M3 conversion of MX x MXFP8) and back; ExpertWeights keeps
    # a layout it is given (replace() runs __post_init__ again)
    Wt = W.with_fp4_layout("tiled")
    assert Wt.w13.value_layout == Wt.w2.value_layout == "tiled" and Wt.w13.value_tile_k == W.w13.value_tile_k
    assert torch.equal(Wt.w13.data, W.w13.tiled_values().data)
    assert dataclasses.replace(Wt).w13.value_layout == "tiled" and Wt.with_fp4_layout("tiled") is Wt
    Ws = Wt.with_fp4_layout("swizzled")
    assert torch.equal(Ws.w13.data, W.w13.data) and torch.equal(Ws.w2.data, W.w2.data)
    with pytest.raises(ValueError, match="layout"):
        W.with_fp4_layout("linear")
    Wb = fm.ExpertWeights.from_float(torch.randn(2, 128, 64, generator=g), torch.randn(2, 64, 64, generator=g),
                                     activation=fm.Activation.SWIGLU, format=Format.FP8_CHANNEL)
    assert Wb.with_fp4_layout("tiled") is Wb
