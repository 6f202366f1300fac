"""Weight preparation: per-half padding, orders, biases, scales, validation."""

import pytest
import torch

import fusedmoe as fm
from fusedmoe.formats import quantize_weight
from fusedmoe.weights import default_alignment, padded_intermediate

A, F = fm.Activation, fm.Format


def test_default_alignment():
    assert default_alignment(F.BF16, True) == 16
    assert default_alignment(F.BF16, False) == 128
    assert default_alignment(F.FP8_BLOCK, True) == 128
    assert default_alignment(F.MXFP4, True) == 32
    assert default_alignment(F.NVFP4, True) == 16
    # the I_pad the weights store and the tuned table keys: Nemotron-Nano's 1856 non-gated -> 1920, gated stays
    assert padded_intermediate(1856, F.FP8_CHANNEL, False) == 1920
    assert padded_intermediate(1856, F.FP8_CHANNEL, True) == 1856
    assert padded_intermediate(2880, F.MXFP4, True) == 2880 and padded_intermediate(1, F.FP8_BLOCK, True) == 128


def test_gated_padding_is_per_half_and_bias_follows():
    E, H, I = 2, 16, 20
    w13 = torch.randn(E, 2 * I, H)
    w2 = torch.randn(E, H, I)
    b13 = torch.randn(E, 2 * I)
    w = fm.ExpertWeights.from_float(w13, w2, activation=A.SWIGLU, w13_bias=b13, dtype=torch.float32)
    P = w.padded_intermediate_size
    assert (w.intermediate_size, P) == (I, 32)
    d = w.w13.data
    assert torch.equal(d[:, :I], w13[:, :I]) and torch.equal(d[:, P:P + I], w13[:, I:])
    assert not d[:, I:P].any() and not d[:, P + I:].any()
    assert torch.equal(w.w13_bias[:, :I], b13[:, :I]) and torch.equal(w.w13_bias[:, P:P + I], b13[:, I:])
    assert not w.w13_bias[:, I:P].any()
    assert torch.equal(w.w2.data[:, :, :I], w2) and not w.w2.data[:, :, I:].any()


def test_up_gate_order_is_converted():
    E, H, I = 2, 16, 16
    gate, up = torch.randn(E, I, H), torch.randn(E, I, H)
    w = fm.ExpertWeights.from_float(torch.cat([up, gate], 1), torch.randn(E, H, I), activation=A.GEGLU,
                                    w13_order="up_gate", dtype=torch.float32)
    assert torch.equal(w.w13.data[:, :I], gate) and torch.equal(w.w13.data[:, I:], up)


@pytest.mark.parametrize("fmt", [f for f in F if f.is_weight_format and f is not F.BF16], ids=lambda f: f.name)
@pytest.mark.parametrize("act", [A.SWIGLU, A.RELU2], ids=lambda a: a.name)
def test_quantized_weights_pad_scales_consistently(fmt, act):
    E, H, I = 2, 128, 96
    M = 2 * I if act.is_gated else I
    w = fm.ExpertWeights.from_float(torch.randn(E, M, H), torch.randn(E, H, I), activation=act, format=fmt)
    P = w.padded_intermediate_size
    assert P % default_alignment(fmt, act.is_gated) == 0 and P >= I
    assert tuple(w.w13.shape) == (E, (2 if act.is_gated else 1) * P, H)
    assert tuple(w.w2.shape) == (E, H, P)
    # padded rows / columns dequantize to exactly zero
    d13, d2 = fm.dequantize(w.w13), fm.dequantize(w.w2)
    assert not d13[:, I:P].any() and not d2[:, :, I:].any()
    assert torch.isfinite(d13).all() and torch.isfinite(d2).all()


def test_static_scales_only_for_per_tensor_formats():
    w13, w2 = torch.randn(2, 16, 128), torch.randn(2, 128, 16)
    w = fm.ExpertWeights.from_float(w13, w2, activation=A.RELU2, format=F.FP8_TENSOR, input_scale=0.01)
    assert w.input_scale.dtype == torch.float32 and w.intermediate_scale is None
    with pytest.raises(ValueError, match="static activation scales"):
        fm.ExpertWeights.from_float(w13, w2, activation=A.RELU2, format=F.FP8_BLOCK, input_scale=0.01)
    with pytest.raises(ValueError, match="input_scale"):
        fm.ExpertWeights.from_float(w13, w2, activation=A.RELU2, format=F.FP8_TENSOR, input_scale=-1.0)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(w13=torch.randn(2, 30, 16), w2=torch.randn(2, 16, 16)), ValueError, r"w13 must be \[E, 32, H\]"),
        (dict(w2=torch.randn(3, 16, 16)), ValueError, "w2 must be"),
        (dict(w13=torch.randn(2, 32, 16).to(torch.int32)), TypeError, "w13"),
        (dict(w13_order="gate-up"), ValueError, "w13_order"),
        (dict(format=F.FP8_TOKEN), ValueError, "weight fm.Format"),
        (dict(alignment=0), ValueError, "alignment"),
        (dict(w13=torch.randn(2, 32, 128), w2=torch.randn(2, 128, 16), format=F.FP8_BLOCK, alignment=64), ValueError, "alignment"),
        (dict(w13_bias=torch.randn(2, 16)), ValueError, "w13_bias"),
        (dict(activation="swiglu"), TypeError, "activation"),
        (dict(format=F.FP8_BLOCK), ValueError, "multiple of 128"),
    ],
)
def test_from_float_rejects(kwargs, exc, match):
    args = dict(w13=torch.randn(2, 32, 16), w2=torch.randn(2, 16, 16), activation=A.SWIGLU)
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        fm.ExpertWeights.from_float(args.pop("w13"), args.pop("w2"), **args)


def test_slice_and_properties():
    w13, w2 = torch.randn(8, 64, 32), torch.randn(8, 32, 32)
    w = fm.ExpertWeights.from_float(w13, w2, activation=A.SWIGLU, w2_bias=torch.randn(8, 32))
    s = w.slice_experts(2, 3)
    assert (s.num_experts, s.hidden_size, s.intermediate_size) == (3, 32, 32)
    assert torch.equal(s.w13.data, w.w13.data[2:5]) and torch.equal(s.w2_bias, w.w2_bias[2:5])
    with pytest.raises(ValueError, match="slice_experts"):
        w.slice_experts(6, 3)
    assert "E=8" in repr(w)


@pytest.mark.parametrize("fmt", [F.NVFP4, F.MXFP4], ids=lambda f: f.name)
def test_fp4_values_stored_tiled_where_shapes_divide(fmt):
    """ExpertWeights keep FP4 values in the tiled layout when rows % 64 == 0 and 64 or 128 columns
    divide the columns (the widest that does is the tile width), else linear; either way
    fm.dequantize gives the weights of the linear preparation."""
    from fusedmoe.formats import dequantize

    g = torch.Generator().manual_seed(0)
    w13, w2 = torch.randn(2, 128, 128, generator=g), torch.randn(2, 128, 64, generator=g)
    W = fm.ExpertWeights.from_float(w13, w2, activation=A.SWIGLU, format=fmt)
    assert W.w13.value_tile_k == 128 and W.w2.value_tile_k == 64
    assert torch.equal(dequantize(W.w13), dequantize(quantize_weight(w13, fmt)))
    w13o, w2o = torch.randn(2, 96, 64, generator=g), torch.randn(2, 64, 96, generator=g)
    Wo = fm.ExpertWeights.from_float(w13o, w2o, activation=A.RELU2, format=fmt, alignment=32)
    assert Wo.w13.shape[1] == 96 and Wo.w13.value_layout == "linear"  # 96 rows: no whole row tiles
    assert Wo.w2.value_layout == "linear"  # [2, 64, 96]: only 32-column tiles divide 96
    assert torch.equal(dequantize(Wo.w13), dequantize(quantize_weight(w13o, fmt)))
