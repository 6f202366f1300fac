"""Triton activation quantization (formats.triton_quant.quantize_act) against the torch reference:
scales bitwise equal, values bitwise equal, for every activation format.

On a CPU machine the kernels run in Triton's interpreter (tiny shapes, marked ``interpreter``);
on a GPU the same tests run compiled, plus realistic shapes and a CUDA-graph capture (``gpu``).
"""

import math
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels are first imported

from fusedmoe.config import Format
from fusedmoe.formats import QuantizedTensor, quantize, quantize_act

ON_GPU = torch.cuda.is_available()
DEV = "cuda" if ON_GPU else "cpu"
KERNEL_FORMATS = [Format.FP8_TENSOR, Format.FP8_TOKEN, Format.FP8_BLOCK, Format.MXFP8, Format.NVFP4]

pytestmark = [] if ON_GPU else [pytest.mark.interpreter]


def _bits(t: torch.Tensor) -> torch.Tensor:
    if t.element_size() == 1:
        return t.view(torch.uint8)
    if t.dtype == torch.float32:
        return t.view(torch.int32)
    return t


def assert_same(a: QuantizedTensor, r: QuantizedTensor) -> None:
    """Bitwise equality of data, scales and global scale (values and scales bit-identical)."""
    assert a.fmt is r.fmt and a.block_rows == r.block_rows
    assert a.data.dtype == r.data.dtype and a.data.shape == r.data.shape
    mism = _bits(a.data) != _bits(r.data)
    assert not mism.any(), f"{a.fmt}: {int(mism.sum())} data bytes differ, first at {mism.nonzero()[:4].tolist()}"
    assert a.scale.dtype == r.scale.dtype and a.scale.shape == r.scale.shape
    smism = _bits(a.scale) != _bits(r.scale)
    assert not smism.any(), f"{a.fmt}: {int(smism.sum())} scales differ, first at {smism.nonzero()[:4].tolist()}"
    if r.global_scale is not None:
        assert torch.equal(_bits(a.global_scale), _bits(r.global_scale))


def _tricky(T: int, C: int, dtype, seed: int = 0) -> torch.Tensor:
    """Random data with a wide range, plus the edge cases: an all-zero group, tiny values, -0.0,
    exact E2M1/E4M3 ties after scaling, one large outlier."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, C, generator=g) * torch.logspace(-3, 2, C)[torch.randperm(C, generator=g)]
    x[0, :32] = 0.0
    x[0, 5] = -0.0
    if T > 1:
        x[1, 32:64] *= 1e-6
        x[1, 64:80] = torch.tensor([6.0, 5.0, 3.5, 2.5, 1.75, 1.25, 0.75, 0.25] * 2)
    x[-1, -1] = 1000.0
    return x.to(dtype).to(DEV)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("fmt", KERNEL_FORMATS)
def test_matches_reference(fmt, dtype):
    for T, C in ((3, 256), (1, 128)):
        x = _tricky(T, C, dtype)
        assert_same(quantize_act(x, fmt), quantize(x, fmt))


@pytest.mark.parametrize("fmt", [Format.FP8_TOKEN, Format.FP8_BLOCK, Format.MXFP8, Format.NVFP4])
def test_more_rows_than_a_block(fmt):
    x = _tricky(37, 384, torch.bfloat16, seed=3)
    assert_same(quantize_act(x, fmt), quantize(x, fmt))


@pytest.mark.parametrize("T,C", [(1, 128), (5, 384), (3, 8192), (129, 128)])
def test_fp8_tensor_dynamic_one_program_and_two_pass_agree(T, C, monkeypatch):
    """Dynamic per-tensor FP8: the one-program path (small tensors, one launch) and the parallel
    two-pass path (absmax, then quantize) give the reference's bits; shapes on both sides of the
    size threshold, several row and column tiles."""
    import fusedmoe.formats.triton_quant as tq

    x = _tricky(T, C, torch.bfloat16, seed=T + C)
    ref = quantize(x, Format.FP8_TENSOR)
    one = quantize_act(x, Format.FP8_TENSOR)
    assert_same(one, ref)
    monkeypatch.setattr(tq, "_ONE_PROGRAM_ELEMS", 0)  # force the two-pass path
    assert_same(quantize_act(x, Format.FP8_TENSOR), ref)
    monkeypatch.setattr(tq, "_ONE_PROGRAM_ELEMS", 1 << 30)  # force one program
    assert_same(quantize_act(x, Format.FP8_TENSOR), ref)


@pytest.mark.parametrize("fmt", [Format.FP8_TENSOR, Format.NVFP4], ids=lambda f: f.name)
def test_precomputed_amax(fmt):
    """``amax`` (a GEMM epilogue's reduced max |x| bits) instead of the absmax pass: the reference's
    bits when it is the tensor's amax, small and large tensors; rows outside it (the intermediate
    rows of non-local slots, never written) do not move the scale; bad ``amax`` is refused."""
    for T, C in ((3, 256), (129, 1024)):
        x = _tricky(T, C, torch.bfloat16, seed=T)
        bits = x.float().abs().max().view(torch.int32).reshape(1)
        assert_same(quantize_act(x, fmt, amax=bits.clone()), quantize(x, fmt))
    x = _tricky(6, 256, torch.bfloat16, seed=9)
    junk = x.clone()
    junk[4:] = 3.0e4  # rows the amax did not cover
    bits = x[:4].float().abs().max().view(torch.int32).reshape(1)
    got, want = quantize_act(junk, fmt, amax=bits), quantize(x[:4], fmt)
    if fmt is Format.FP8_TENSOR:
        assert torch.equal(got.scale, want.scale) and torch.equal(_bits(got.data[:4]), _bits(want.data))
    else:
        assert torch.equal(got.global_scale, want.global_scale) and torch.equal(got.data[:4], want.data)
    ok = torch.zeros(1, dtype=torch.int32, device=DEV)
    for kw, words in ((dict(amax=ok.float()), "int32"), (dict(amax=torch.zeros(2, dtype=torch.int32, device=DEV)),
                                                          "one element")):
        with pytest.raises(ValueError, match=words):
            quantize_act(x, fmt, **kw)
    with pytest.raises(ValueError, match="does not take it"):
        quantize_act(x, Format.FP8_TOKEN, amax=ok)
    with pytest.raises(ValueError, match="does not take it"):
        quantize_act(x, Format.FP8_TENSOR, static_scale=torch.ones(1, device=DEV), amax=ok)
    if DEV == "cuda":
        with pytest.raises(ValueError, match="device"):
            quantize_act(x, fmt, amax=ok.cpu())


def test_fp8_tensor_static_scale_saturates():
    x = _tricky(3, 256, torch.bfloat16, seed=1)
    s = torch.tensor([0.05], device=DEV)  # small: most values saturate at +-448
    a = quantize_act(x, Format.FP8_TENSOR, static_scale=s)
    assert_same(a, quantize(x, Format.FP8_TENSOR, scale=s))
    assert a.scale.shape == () and a.data.float().abs().max().item() == 448.0


def test_nvfp4_given_global_scale():
    x = _tricky(3, 256, torch.bfloat16, seed=2)
    for gv in (1.0, 2688.0 / 1000.0, 1e4):  # 1e4: many blocks saturate the E4M3 block scale
        g = torch.tensor(gv, device=DEV)
        assert_same(quantize_act(x, Format.NVFP4, global_scale=g), quantize(x, Format.NVFP4, global_scale=g))


def test_row_strided_input():
    big = _tricky(4, 512, torch.bfloat16, seed=4)
    x = big[:, 128:384]  # row stride 512, last dim contiguous
    for fmt in KERNEL_FORMATS:
        assert_same(quantize_act(x, fmt), quantize(x, fmt))


def test_all_zero_input():
    x = torch.zeros(2, 128, dtype=torch.bfloat16, device=DEV)
    for fmt in KERNEL_FORMATS:
        assert_same(quantize_act(x, fmt), quantize(x, fmt))


def test_empty_input():
    for fmt in KERNEL_FORMATS:
        x = torch.zeros(0, 128, dtype=torch.bfloat16, device=DEV)
        assert_same(quantize_act(x, fmt), quantize(x, fmt))


def test_bf16_passthrough():
    x = torch.randn(2, 64, dtype=torch.bfloat16, device=DEV)
    assert quantize_act(x, Format.BF16).data is x


def test_validation_errors():
    x = torch.randn(2, 256, dtype=torch.bfloat16, device=DEV)
    with pytest.raises(ValueError, match="x"):
        quantize_act(x.reshape(2, 2, 128), Format.FP8_TOKEN)
    with pytest.raises(TypeError, match="x"):
        quantize_act(x.to(torch.int32), Format.FP8_TOKEN)
    with pytest.raises(ValueError, match="fmt"):
        quantize_act(x, Format.FP8_CHANNEL)
    with pytest.raises(ValueError, match="fmt"):
        quantize_act(x, Format.MXFP4)
    with pytest.raises(TypeError, match="fmt"):
        quantize_act(x, "nvfp4")
    with pytest.raises(ValueError, match="x.*128"):
        quantize_act(x[:, :192], Format.FP8_BLOCK)
    with pytest.raises(ValueError, match="static_scale"):
        quantize_act(x, Format.FP8_TOKEN, static_scale=torch.ones(1, device=DEV))
    with pytest.raises(ValueError, match="global_scale"):
        quantize_act(x, Format.MXFP8, global_scale=torch.ones(1, device=DEV))
    with pytest.raises(ValueError, match="static_scale"):
        quantize_act(x, Format.FP8_TENSOR, static_scale=torch.ones(2, device=DEV))
    with pytest.raises(TypeError, match="static_scale"):
        quantize_act(x, Format.FP8_TENSOR, static_scale=1.0)
    with pytest.raises(ValueError, match="stride"):
        quantize_act(torch.randn(256, 2, dtype=torch.bfloat16, device=DEV).t(), Format.FP8_TOKEN)


# ---------------------------------------------------------------------------------------------
# GPU: realistic shapes, bitwise; CUDA-graph capture
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("fmt", KERNEL_FORMATS)
@pytest.mark.parametrize("T, C", [(1, 7168), (257, 2688), (4096, 4096), (16384, 1024)])
@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
def test_gpu_realistic_shapes(fmt, dtype, T, C):
    x = (torch.randn(T, C, device="cuda") * torch.logspace(-2, 1, C, device="cuda")).to(dtype)
    x[T // 2, : C // 2] = 0
    assert_same(quantize_act(x, fmt), quantize(x, fmt))
    if fmt is Format.FP8_TENSOR:
        s = torch.tensor([0.01], device="cuda")
        assert_same(quantize_act(x, fmt, static_scale=s), quantize(x, fmt, scale=s))
    if fmt is Format.NVFP4:
        g = torch.tensor([300.0], device="cuda")
        assert_same(quantize_act(x, fmt, global_scale=g), quantize(x, fmt, global_scale=g))


@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("fmt", KERNEL_FORMATS)
def test_gpu_cuda_graph_capture(fmt):
    x = torch.randn(64, 2048, device="cuda", dtype=torch.bfloat16)
    quantize_act(x, fmt)  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = quantize_act(x, fmt)
    x.copy_(torch.randn_like(x) * 7)
    graph.replay()
    torch.cuda.synchronize()
    assert_same(out, quantize(x, fmt))


@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("T, C", [(1, 1920), (61, 2688), (2048, 2048)])
def test_gpu_reciprocal_division_over_the_whole_range(dtype, T, C):
    """The compiled FP8 quantizers divide by a dynamic scale's reciprocal (``_quant._div_by_scale``,
    ``triton_quant._rcp_div``): bit-identical to the reference's IEEE division with rows (and 128-wide
    groups) whose magnitudes span the dtype's whole range -- all-zero rows (the floor scale), rows at
    the dtype's largest values, rows of subnormal-sized values -- per token, per tensor, in blocks."""
    import fusedmoe.formats.triton_quant as tq

    big = 3.0e38 if dtype == torch.bfloat16 else 6.0e4
    tiny = 1e-38 if dtype == torch.bfloat16 else 1e-7
    g = torch.Generator().manual_seed(T + C)
    exps = torch.linspace(math.log10(tiny), math.log10(big / 4), T).reshape(T, 1)
    x = torch.randn(T, C, generator=g) * 10.0 ** exps
    x[T // 2] = 0.0
    if T > 2:
        x[1] = torch.where(torch.rand(C, generator=g) < 0.5, big, -big)
    x = x.to(dtype).to("cuda")
    assert tq.plan_fp8(x, Format.FP8_TOKEN).rcp_div and tq.plan_fp8(x, Format.FP8_BLOCK).rcp_div
    for fmt in (Format.FP8_TOKEN, Format.FP8_TENSOR, Format.FP8_BLOCK):
        assert_same(quantize_act(x, fmt), quantize(x, fmt))


def test_reciprocal_division_only_where_proven():
    """``_rcp_div``: reciprocals only for compiled kernels (``out_fp32`` False), 16-bit x and dynamic
    scales; fp32 x, the interpreter and a caller's static scale keep the IEEE division."""
    import fusedmoe.formats.triton_quant as tq

    x16 = torch.randn(4, 256, dtype=torch.bfloat16, device=DEV)
    assert tq._rcp_div(x16, False) == tq._QUANT_RCP_DIV
    assert not tq._rcp_div(x16, True) and not tq._rcp_div(x16.float(), False)
    s = torch.tensor([0.5], device=DEV)
    assert not tq.plan_fp8(x16, Format.FP8_TENSOR, static_scale=s).rcp_div
    assert tq.plan_fp8(x16, Format.FP8_TOKEN).rcp_div == tq._QUANT_RCP_DIV
    assert not tq.plan_fp8(x16, Format.FP8_TOKEN, out_fp32=True).rcp_div


@pytest.mark.parametrize("T,C", [(2, 8320), (1100, 96)])
def test_row_sizes_wide_rows_and_many_rows(T, C):
    """The launch sizes of the per-row / per-tensor-scaled FP8 kernel (``_row_blocks``) outside the
    one-row-in-registers case: rows wider than ``_ROW_IN_REGISTERS_MAX`` (column chunks, two
    passes for a per-row scale) and more rows than ``_ONE_ROW_PER_PROGRAM_MAX`` (several rows a
    program); per-token, static and dynamic (given amax) per-tensor scales."""
    import fusedmoe.formats.triton_quant as tq

    bt, bc, _ = tq._row_blocks(T, C)
    assert (bc < C) if C > tq._ROW_IN_REGISTERS_MAX else (bt > 1)
    x = _tricky(T, C, torch.bfloat16, seed=T)
    assert_same(quantize_act(x, Format.FP8_TOKEN), quantize(x, Format.FP8_TOKEN))
    s = torch.tensor([0.02], device=DEV)
    assert_same(quantize_act(x, Format.FP8_TENSOR, static_scale=s), quantize(x, Format.FP8_TENSOR, scale=s))
    bits = x.float().abs().max().view(torch.int32).reshape(1)
    assert_same(quantize_act(x, Format.FP8_TENSOR, amax=bits), quantize(x, Format.FP8_TENSOR))


@pytest.mark.parametrize("fmt", [Format.FP8_BLOCK, Format.MXFP8], ids=lambda f: f.name)
def test_plan_quantizes_the_rows_in_use_only(fmt):
    """``plan_fp8(..., rows=n)`` (a block-padded intermediate whose used rows only the device knows):
    the first ``n`` rows get the reference's bits, the values and scales of the others are not
    written; a bad row count, or one for a format without groups, is refused."""
    from fusedmoe.formats.triton_quant import plan_fp8
    from fusedmoe.kernels import _quant as k
    from fusedmoe.kernels._host import interpreted

    x = _tricky(9, 256, torch.bfloat16, seed=5)
    n = 5
    plan = plan_fp8(x, fmt, out_fp32=interpreted(k._fp8_row_kernel),
                    rows=torch.tensor([n], dtype=torch.int32, device=DEV))
    plan.q.view(torch.uint8).fill_(0x55)
    plan.s.view(torch.uint8).fill_(0x55)
    got = plan.run()
    want = quantize(x[:n], fmt)
    assert torch.equal(_bits(got.data[:n]), _bits(want.data)) and torch.equal(_bits(got.scale[:n]), _bits(want.scale))
    assert (plan.q.view(torch.uint8)[n:] == 0x55).all() and (plan.s.view(torch.uint8)[n:] == 0x55).all()
    for bad in (torch.tensor([n], device=DEV), torch.tensor([n, n], dtype=torch.int32, device=DEV)):
        with pytest.raises(ValueError, match="rows must be an int32 tensor of one element"):
            plan_fp8(x, fmt, rows=bad)
    with pytest.raises(ValueError, match="group formats"):
        plan_fp8(x, Format.FP8_TOKEN, rows=torch.tensor([n], dtype=torch.int32, device=DEV))


@pytest.mark.parametrize("block_c", [64, 256])
@pytest.mark.parametrize("mode", [0, 1, 2])
def test_row_kernel_one_step_and_column_steps(mode, block_c):
    """The per-row / per-tensor FP8 kernel gives the reference's bits both when a row is one
    column step (block_c >= C: loaded once, kept in registers) and in several (block_c < C), with
    rows and columns masked (T, C not multiples of the tile); static, dynamic (given amax) and
    per-row scales."""
    from fusedmoe.kernels import _quant as k
    from fusedmoe.kernels._host import cdiv, interpreted, launch

    T, C, bt = 5, 200, 2
    x = _tricky(T, C, torch.bfloat16, seed=3)
    out_fp32 = interpreted(k._fp8_row_kernel)
    q = torch.empty((T, C), dtype=torch.float32 if out_fp32 else torch.float8_e4m3fn, device=DEV)
    if mode == 2:
        s = torch.empty((T,), dtype=torch.float32, device=DEV)
        src, want = s, quantize(x, Format.FP8_TOKEN)
    elif mode == 1:
        s = torch.empty((1,), dtype=torch.float32, device=DEV)
        src, want = x.float().abs().max().view(torch.int32).reshape(1), quantize(x, Format.FP8_TENSOR)
    else:
        s = src = torch.tensor([0.05], device=DEV)
        want = quantize(x, Format.FP8_TENSOR, scale=s)
    launch(k._fp8_row_kernel, (cdiv(T, bt),), x, q, s, src, T, C, x.stride(0), q.stride(0),
           SCALE_MODE=mode, OUT_FP32=out_fp32, BLOCK_T=bt, BLOCK_C=block_c)
    got = QuantizedTensor(q.to(torch.float8_e4m3fn) if out_fp32 else q, want.fmt,
                          s if mode == 2 else s.reshape(()))
    assert_same(got, want)

