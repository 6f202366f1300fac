"""GPUs other than Hopper: which formats the Triton kernels run where (``triton_moe.arch_problem``), the backend
choice that follows from it, and compiles for sm_80 / sm_89 / sm_100 / sm_120 with Triton's bundled ptxas that
keep the rule honest (no GPU needed): what the rule admits compiles, and the first thing it refuses does not.
"""

import os
from dataclasses import replace

import pytest
import torch

import fusedmoe as fm
from fusedmoe import backends
from fusedmoe.backends import triton_moe
from fusedmoe.backends.base import MoERequest
from fusedmoe.backends.triton import TritonBackend, run_weights
from fusedmoe.config import Activation, Format
from fusedmoe.backends.kernel_configs import KernelConfig, MoEKernelConfig
from test_triton_fp4 import DEV, E4M3, _SM90_SCRIPT, Case, _bounds, _errors, _random_operand, make_case, \
    run_reference, run_triton, run_sm90_script
from fusedmoe.backends.triton_moe import dequantize_tiles

PAIRS = [(wf, af) for wf in Format if wf.is_weight_format for af in wf.allowed_activation_formats()]
NO_E4M3 = {(Format.BF16, Format.BF16), (Format.MXFP4, Format.BF16), (Format.NVFP4, Format.BF16)}


@pytest.mark.parametrize("cap", [(7, 0), (7, 5), (8, 0), (8, 6), (8, 7), (8, 9), (9, 0), (10, 0), (12, 0)])
def test_arch_rule(cap):
    runs = {p for p in PAIRS if triton_moe.arch_problem(cap, *p) is None}
    if cap < (8, 0):
        assert runs == set()
    elif cap < (8, 9):
        assert runs == NO_E4M3
    else:
        assert runs == set(PAIRS)
    for p in set(PAIRS) - runs:  # every refusal says why, with the capability it got
        why = triton_moe.arch_problem(cap, *p)
        assert f"{cap[0]}.{cap[1]}" in why, why


def test_rule_names_the_formats_it_refuses():
    why = triton_moe.arch_problem((8, 0), Format.NVFP4, Format.FP8_TENSOR)
    assert "NVFP4" in why and "FP8_TENSOR" in why and "8.9" in why and "MXFP4" in why, why
    assert "bf16" in triton_moe.arch_problem((7, 5), Format.BF16, Format.BF16)


@pytest.fixture
def capability(monkeypatch):
    """Pretend the CUDA device has the given compute capability (the backend's check reads only this)."""
    def set_cap(cap):
        monkeypatch.setattr(triton_moe, "device_capability", lambda dev: cap if dev.type == "cuda" else None)
    return set_cap


def test_backend_supports_follows_the_rule(capability):
    dev = torch.device("cuda", 0)
    for cap in ((8, 0), (8, 9), (9, 0)):
        capability(cap)
        for wf, af in PAIRS:
            why = TritonBackend().supports(MoERequest(wf, af, Activation.SWIGLU), dev)
            assert why == triton_moe.arch_problem(cap, wf, af), (cap, wf, af, why)


def test_auto_falls_back_to_the_reference_with_the_reason(capability):
    capability((8, 0))
    name, reason = backends.select(MoERequest(Format.FP8_BLOCK, Format.FP8_BLOCK, Activation.SWIGLU), "cuda:0")
    assert name == "reference" and "compute capability 8.9" in reason and "got 8.0" in reason, reason
    # what the rule admits still gets the Triton kernels
    for wf in (Format.BF16, Format.MXFP4, Format.NVFP4):
        assert backends.select(MoERequest(wf, Format.BF16, Activation.RELU2), "cuda:0")[0] == "triton"
    with pytest.raises(fm.backends.UnsupportedError, match="8.9"):
        backends.resolve("triton", MoERequest(Format.NVFP4, Format.NVFP4, Activation.SWIGLU), "cuda:0")


def test_nvfp4_scales_as_bytes_below_sm89(capability, monkeypatch):
    """The launcher hands NVFP4 block scales to the kernels as bytes exactly below sm_89 (or when forced), as the
    same storage; other formats' scales as they are."""
    g = torch.Generator().manual_seed(1)
    nv, mx = _random_operand(Format.NVFP4, (2, 64, 64), g), _random_operand(Format.MXFP4, (2, 64, 64), g)
    dev = torch.device("cuda", 0)
    for cap, want in (((8, 0), True), ((8, 6), True), ((8, 9), False), ((9, 0), False)):
        capability(cap)
        got = triton_moe._kernel_scales(nv, dev)
        assert (got.dtype == torch.uint8) == want and got.data_ptr() == nv.scale.data_ptr()
        assert triton_moe._kernel_scales(mx, dev) is mx.scale
    assert triton_moe._kernel_scales(nv, torch.device("cpu")) is nv.scale
    monkeypatch.setattr(triton_moe, "_E4M3_SCALE_BYTES", True)
    assert torch.equal(triton_moe._kernel_scales(nv, torch.device("cpu")), nv.scale.view(torch.uint8))


@pytest.mark.interpreter
@pytest.mark.parametrize("fast", [False, pytest.param(True, marks=pytest.mark.gpu)], ids=["portable", "fast"])
def test_nvfp4_scale_bytes_dequantize_the_same(fast, monkeypatch):
    """Every E4M3 code as an NVFP4 block scale (signs, subnormals, the NaN codes 0x7F / 0xFF) decoded from its byte
    (``_blockscaled._e4m3_scales``) gives the tiles the e4m3 load gives, bit for bit (NaN where it has NaN); on the
    GPU also the fast path's bf16 tiles."""
    g = torch.Generator().manual_seed(3)
    q = _random_operand(Format.NVFP4, (2, 48, 96), g)
    codes = torch.arange(256, dtype=torch.uint8).repeat(3)[:q.scale.numel()].reshape(q.scale.shape)
    q = replace(q, scale=codes.view(E4M3))
    outs = []
    for as_bytes in (False, True):
        monkeypatch.setattr(triton_moe, "_E4M3_SCALE_BYTES", as_bytes)
        outs.append(dequantize_tiles(q.to(DEV), block_rows=16, block_k=64, fast_cvt=fast).cpu())
    nan = ((codes & 0x7F) == 0x7F).repeat_interleave(16, dim=-1)  # the elements of a NaN scale
    assert torch.equal(torch.isnan(outs[1]), nan)  # (Triton's interpreter decodes an e4m3 NaN as 480: not compared)
    assert (outs[1][~nan] != 0).any()
    assert torch.equal(outs[0][~nan].view(torch.int32), outs[1][~nan].view(torch.int32))


@pytest.mark.interpreter
@pytest.mark.parametrize("act,T,cfg", [
    (Activation.SWIGLU, 5, MoEKernelConfig(KernelConfig(16, 32, 64), KernelConfig(16, 32, 32))),
    (Activation.RELU2, 40, MoEKernelConfig(KernelConfig(32, 64, 32), KernelConfig(32, 32, 64))),
    (Activation.GEGLU, 7, None),
], ids=["swiglu-decode", "relu2-prefill", "geglu-heuristic"])
def test_nvfp4_scale_bytes_layer_same_bits(act, T, cfg, monkeypatch):
    """The NVFP4 x BF16 layer with its block scales read as bytes (the path below sm_89) gives the e4m3 path's
    bits (K-major scales, ExpertWeights' layout), within the reference bound."""
    c = Case(Format.NVFP4, Format.BF16, act, T=T, H=96, I=64, align=32, bias=True, seed=17,
             dtype=torch.bfloat16 if DEV == "cuda" else torch.float16)
    hidden, W, topk = make_case(c)
    outs = []
    for as_bytes in (False, True):
        monkeypatch.setattr(triton_moe, "_E4M3_SCALE_BYTES", as_bytes)
        outs.append(run_triton(hidden, W, topk, Format.BF16, config=cfg))
    assert torch.equal(outs[0], outs[1])
    mx, rms = _errors(outs[1], run_reference(hidden, W, topk, Format.BF16))
    bmax, brms = _bounds(c.dtype)
    assert mx <= bmax and rms <= brms, (mx, rms)


# ---- compiles for other targets ------------------------------------------------------------------------------

_TARGETS = r'''
sys.path.insert(0, TESTS_DIR)
import test_sm90_compile  # noqa: E402

FP4_VARIANTS = dict(VARIANTS)
exec(test_sm90_compile._VARIANTS.partition('if __name__ == "__main__":')[0])  # gemm8 and the 16-bit / FP8 table
VARIANTS.update(FP4_VARIANTS)


def compiles(name):
    """'ok' or the first line of the compile error (Triton's frontend or ptxas). ``u8:`` before a name: NVFP4
    block scales typed as bytes, as the launcher hands them to the kernels below sm_89."""
    u8 = name.startswith("u8:")
    SCL["nvfp4"] = "*u8" if u8 else "*fp8e4nv"
    try:
        sass_of(VARIANTS[name[3:] if u8 else name]())
        return "ok"
    except Exception as e:  # noqa: BLE001 - the error is the result
        text = str(e)
        m = re.search(r"error\s*: (.*)", text) or re.search(r"(type fp8e4nv not supported[^.\"]*)", text)
        return (m.group(1) if m else type(e).__name__).strip().replace("|", "/")


if __name__ == "__main__":
    for cc, name in CASES:
        TARGET[0] = cc
        print(f"RESULT|{cc}|{name}|{compiles(name)}", flush=True)  # (Triton prints a failed PTX to stdout)
'''

# (target, compile-table variant, weight format, activation format): decode tiles (quick to compile) of every
# kind the rule separates -- 16-bit, MXFP4 x BF16 through the inline-PTX converter (its bf16x2 scale multiply is an
# fma: mul.bf16x2 does not exist before sm_90), NVFP4 (E4M3 block scales: bytes below sm_89; FP8 activations
# still fail there), FP8 -- and on sm_100 the FP8
# per-tensor intermediate's max |h| (its reduction is one over the flattened tile: the nested one hit an internal
# Triton error in the TMEM layout pass for sm_100).
_CASES = [
    (80, "g1 BF16 swiglu decode", Format.BF16, Format.BF16),
    (80, "g2 BF16 decode K/N tails", Format.BF16, Format.BF16),
    (80, "g1 MXFP4xBF16 swiglu_oai bias", Format.MXFP4, Format.BF16),
    (80, "g2 MXFP4xBF16 split-K 2", Format.MXFP4, Format.BF16),
    (80, "dequant tiles fast", Format.MXFP4, Format.BF16),
    (80, "u8:g1 NVFP4xBF16 swiglu", Format.NVFP4, Format.BF16),
    (80, "u8:g2 NVFP4xBF16 K/N tails", Format.NVFP4, Format.BF16),
    (80, "u8:g1 NVFP4xBF16 prefill", Format.NVFP4, Format.BF16),
    (80, "u8:g1 NVFP4xFP8 relu2 fp8-static-out", Format.NVFP4, Format.FP8_TENSOR),
    (80, "g1 FP8 tensor relu2 static-out", Format.FP8_TENSOR, Format.FP8_TENSOR),
    (89, "g1 MXFP4xBF16 swiglu_oai bias", Format.MXFP4, Format.BF16),
    (89, "g1 NVFP4xBF16 swiglu", Format.NVFP4, Format.BF16),
    (89, "g1 FP8 block swiglu block-out", Format.FP8_BLOCK, Format.FP8_BLOCK),
    (100, "g1 FP8 tensor swiglu plain-out amax", Format.FP8_TENSOR, Format.FP8_TENSOR),
    (100, "g1 MXFP4xBF16 swiglu_oai bias", Format.MXFP4, Format.BF16),
    (120, "g2 NVFP4xNVFP4", Format.NVFP4, Format.NVFP4),
    (120, "g1 MXFP4xMXFP8 e4m3-mma mxfp8-out", Format.MXFP4, Format.MXFP8),
]


def test_kernels_compile_where_the_rule_admits_them(tmp_path):
    """Each case compiles for its target exactly when ``arch_problem`` admits its formats there; a refused case
    fails for the reason the rule gives (Triton's missing E4M3 type below sm_89)."""
    head, sep, _ = _SM90_SCRIPT.partition('if __name__ == "__main__":')
    assert sep and 'GPUTarget("cuda", 90, 32)' in head, "the fp4 test's script changed shape: update this test"
    head = "TARGET = [90]\n" + head.replace('GPUTarget("cuda", 90, 32)', 'GPUTarget("cuda", TARGET[0], 32)')
    cases = [(cc, name) for cc, name, _, _ in _CASES]
    tests_dir = os.path.dirname(os.path.abspath(__file__))
    rows = run_sm90_script(tmp_path, head + f"CASES = {cases!r}\nTESTS_DIR = {tests_dir!r}\n" + _TARGETS)
    rows = [r[1:] for r in rows if r[0] == "RESULT"]
    assert len(rows) == len(_CASES), rows
    for (cc, name, wf, af), (got_cc, got_name, result) in zip(_CASES, rows):
        assert (int(got_cc), got_name) == (cc, name)
        admitted = triton_moe.arch_problem(divmod(cc, 10), wf, af) is None
        if admitted:
            assert result == "ok", (cc, name, result)
        else:
            assert "fp8e4nv not supported" in result, (cc, name, result)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the H200: pytest -m gpu)")
def test_gpu_pretended_sm80(capability):
    """On the GPU, with the device taken for an sm_80: FP8 weights are refused by the kernels' entry point with the
    rule's reason and ``fm.FusedMoE`` runs them on the reference backend; NVFP4, MXFP4 and BF16 weights keep the
    Triton kernels, whose results do not depend on the pretence (the same bits; NVFP4's block scales then reach the
    kernels as bytes)."""
    g = torch.Generator().manual_seed(5)
    E, H, I, T = 8, 256, 128, 6
    x = torch.randn(T, H, generator=g).to("cuda", torch.bfloat16)
    logits = torch.randn(T, E, generator=g).to("cuda")
    routing = fm.RoutingConfig(fm.RoutingMethod.RENORMALIZE, top_k=2)
    made = {}
    for fmt in (Format.FP8_TENSOR, Format.NVFP4, Format.MXFP4, Format.BF16):
        w13 = torch.randn(E, 2 * I, H, generator=g) * H ** -0.5
        w2 = torch.randn(E, H, I, generator=g) * I ** -0.5
        w = fm.ExpertWeights.from_float(w13, w2, activation=Activation.SWIGLU, format=fmt).to("cuda")
        made[fmt] = (w, fm.FusedMoE(w, routing=routing, activation=Activation.SWIGLU)(x, logits))
    capability((8, 0))
    w, _ = made[Format.FP8_TENSOR]
    topk = fm.route(logits, routing)
    with pytest.raises(fm.backends.UnsupportedError, match="compute capability 8.9"):
        fm.fused_moe(x, w, topk, activation=Activation.SWIGLU, backend="triton")
    with pytest.raises(NotImplementedError, match="compute capability 8.9"):  # the kernels' own entry point
        run_weights(x, w, topk, activation_format=Format.FP8_TENSOR)
    moe = fm.FusedMoE(w, routing=routing, activation=Activation.SWIGLU)
    assert moe.backend == "reference" and "8.9" in moe.backend_reason, moe.backend_reason
    ref = fm.reference_moe(x, w, topk, activation=Activation.SWIGLU)
    torch.testing.assert_close(moe(x, logits), ref, rtol=1e-2, atol=1e-3)  # (the reference's own run)
    for fmt in (Format.NVFP4, Format.MXFP4, Format.BF16):
        w, before = made[fmt]
        moe = fm.FusedMoE(w, routing=routing, activation=Activation.SWIGLU)
        assert moe.backend == "triton", moe.backend_reason
        assert torch.equal(moe(x, logits), before)


def test_layer_launches_compile_for_sm80(tmp_path):
    """Every kernel a small layer launches -- routing (grouped DeepSeek-V3 and softmax), the one- and multi-program
    align, both GEMMs, the combine -- for 16-bit, MXFP4 and NVFP4 (scales as bytes) weights, recorded in the
    interpreter (``tests/record_launches.py``), compiles for sm_80."""
    import subprocess
    import sys

    import triton

    bin_dir = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    if not os.path.exists(os.path.join(bin_dir, "ptxas")):
        pytest.skip("Triton's bundled ptxas not found")
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "record_launches.py")
    recs = str(tmp_path / "launches.pkl")
    env = dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="", TRITON_CACHE_DIR=str(tmp_path / "cache"))
    res = subprocess.run([sys.executable, script, "record", recs], capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    env.pop("TRITON_INTERPRET")
    res = subprocess.run([sys.executable, script, "compile", recs, "80"], capture_output=True, text=True, env=env,
                         timeout=900)
    assert res.returncode == 0, res.stderr[-4000:]
    rows = [line.split("|")[1:] for line in res.stdout.splitlines() if line.startswith("RESULT|")]
    kernels = {k for k, _ in rows}
    for k in ("_routing.routing_kernel", "_align._align_count_kernel", "_align._align_scatter_kernel",
              "_moe_gemm._gemm1_kernel", "_moe_gemm._gemm2_kernel", "_combine._combine_kernel"):
        assert f"fusedmoe.kernels.{k}" in kernels, (k, kernels)
    assert all(r == "ok" for _, r in rows), [r for r in rows if r[1] != "ok"]
