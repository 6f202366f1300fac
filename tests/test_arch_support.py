"""GPUs other than Hopper: which capabilities the Triton kernels run on (``triton_moe.arch_problem``), the byte path
for E4M3 numbers below sm_89 (``_host.e4m3_in_bytes``: quantizers write fp32 that torch rounds, FP8 tensors reach
the GEMMs as uint8 views decoded in the kernels), the backend choice, and compiles for sm_80 / sm_89 / sm_100 /
sm_120 with Triton's bundled ptxas (no GPU needed). On the CPU the byte path runs in the interpreter; on the H200
the same tests force it (``E4M3_BYTES_FORCED``) and run it on the GPU.
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
from fusedmoe.backends.triton_moe import dequantize_tiles
from fusedmoe.config import Activation, Format
from fusedmoe.kernels import _host
from test_triton_fp4 import DEV, E4M3, OAI_SMALL, _SM90_SCRIPT, Case, _bounds, _errors, _random_operand, make_case, \
    run_reference, run_sm90_script, run_triton

PAIRS = [(wf, af) for wf in Format if wf.is_weight_format for af in wf.allowed_activation_formats()]


@pytest.mark.parametrize("cap", [(7, 0), (7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0)])
def test_arch_rule(cap):
    """From sm_80 every format runs (the byte path below sm_89); below, a refusal that says why, with the
    capability it got."""
    why = triton_moe.arch_problem(cap)
    if cap < (8, 0):
        assert why is not None and f"{cap[0]}.{cap[1]}" in why and "8.0" in why, why
    else:
        assert why is None, why


@pytest.fixture
def capability(monkeypatch):
    """Pretend the CUDA device has the given compute capability (the checks read only ``_host.device_capability``)."""
    def set_cap(cap):
        monkeypatch.setattr(_host, "device_capability", lambda dev: cap if dev.type == "cuda" else None)
    return set_cap


def test_backend_supports_follows_the_rule(capability):
    dev = torch.device("cuda", 0)
    for cap in ((7, 5), (8, 0), (9, 0)):
        capability(cap)
        for wf, af in PAIRS:
            why = TritonBackend().supports(MoERequest(wf, af, Activation.SWIGLU), dev)
            assert why == triton_moe.arch_problem(cap), (cap, wf, af, why)


def test_auto_falls_back_to_the_reference_with_the_reason(capability):
    capability((7, 5))
    name, reason = backends.select(MoERequest(Format.BF16, Format.BF16, Activation.SWIGLU), "cuda:0")
    assert name == "reference" and "compute capability 8.0" in reason and "got 7.5" in reason, reason
    with pytest.raises(fm.backends.UnsupportedError, match="8.0"):
        backends.resolve("triton", MoERequest(Format.FP8_BLOCK, Format.FP8_BLOCK, Activation.SWIGLU), "cuda:0")
    capability((8, 0))
    for wf, af in PAIRS:
        assert backends.select(MoERequest(wf, af, Activation.RELU2), "cuda:0")[0] == "triton"


def test_rocm_is_refused_with_the_reason(capability, monkeypatch):
    """An AMD GPU answers as device type "cuda" under ROCm: the Triton kernels (NVIDIA inline PTX) refuse it, with
    the reason, and ``auto`` runs the reference there."""
    capability((9, 4))  # (what torch reports for an MI300's gfx942)
    monkeypatch.setattr(_host, "rocm", lambda: True)
    why = TritonBackend().supports(MoERequest(Format.BF16, Format.BF16, Activation.SWIGLU), torch.device("cuda", 0))
    assert why is not None and "ROCm" in why, why
    name, reason = backends.select(MoERequest(Format.MXFP4, Format.BF16, Activation.SWIGLU), "cuda:0")
    assert name == "reference" and "ROCm" in reason, reason
    assert triton_moe.device_problem(torch.device("cpu")) is None


def test_e4m3_bytes_below_sm89(capability, monkeypatch):
    """E4M3 numbers go to the kernels as bytes exactly below sm_89 (or when forced), as views of the same storage;
    other dtypes as they are."""
    g = torch.Generator().manual_seed(1)
    nv, mx = _random_operand(Format.NVFP4, (2, 64, 64), g), _random_operand(Format.MXFP4, (2, 64, 64), g)
    dev = torch.device("cuda", 0)
    for cap, want in (((8, 0), True), ((8, 6), True), ((8, 9), False), ((9, 0), False)):
        capability(cap)
        eb = _host.e4m3_in_bytes(dev)
        assert eb == want
        got = triton_moe._kv(nv.scale, eb)
        assert (got.dtype == torch.uint8) == want and got.data_ptr() == nv.scale.data_ptr()
        assert triton_moe._kv(mx.scale, eb) is mx.scale
    assert not _host.e4m3_in_bytes(torch.device("cpu"))
    monkeypatch.setattr(_host, "E4M3_BYTES_FORCED", True)
    assert _host.e4m3_in_bytes(torch.device("cpu"))
    assert torch.equal(triton_moe._kv(nv.scale, True), nv.scale.view(torch.uint8))


def test_no_gluon_kernels_with_e4m3_bytes(monkeypatch):
    """With E4M3 numbers as bytes (forced here, on a pretended Hopper) a call without a config never runs a Gluon
    kernel -- they take typed E4M3 tensors: a tuned decode-kernel entry or a warp-specialized prefill choice runs as
    the heuristic's Triton config -- and an explicit warp-specialized config raises saying why."""
    from fusedmoe.backends.kernel_configs import (MoEKernelConfig, TunedTable, choose_moe_config, triton_tile,
                                                  warp_specialized_config)
    from test_triton_moe import make_problem

    monkeypatch.setattr(triton_moe, "_cuda_major", lambda index: 9)
    monkeypatch.setattr(triton_moe, "_device_info", lambda dev: ("NVIDIA H200", 132))
    monkeypatch.setattr(_host, "E4M3_BYTES_FORCED", True)
    cuda = torch.device("cuda", 0)
    F, A = Format, Activation
    prob = make_problem(T=2, H=256, I=128, I_pad=128, E=4, K=2, act=A.SWIGLU, wfmt=F.FP8_TENSOR,
                        dtype=torch.bfloat16, seed=1, device="cpu")

    def auto(cfg, tokens):
        return triton_moe.auto_ws(cfg, prob["q13"], prob["q2"], F.FP8_TENSOR, torch.bfloat16, cuda, tokens, 2,
                                  A.SWIGLU)

    for cfg, tokens in ((triton_moe.ws_decode_config(1, 256, 128, 4, 2, F.FP8_TENSOR, True, 1, 132, 3), 1),
                        (MoEKernelConfig(warp_specialized_config(True, weight_format=F.FP8_TENSOR),
                                         warp_specialized_config(False, weight_format=F.FP8_TENSOR)), 4096)):
        want = choose_moe_config(tokens, 256, 128, 4, 2, F.FP8_TENSOR, A.SWIGLU, "NVIDIA H200", table=TunedTable(),
                                 num_sms=132)
        assert auto(cfg, tokens) == MoEKernelConfig(triton_tile(want.gemm1), triton_tile(want.gemm2))
    prev = triton_moe.set_ws_decode(True)
    try:  # the opt-in switch does not bring the decode kernel back
        heur = choose_moe_config(1, 256, 128, 4, 2, F.FP8_TENSOR, A.SWIGLU, "NVIDIA H200", table=TunedTable(),
                                 num_sms=132)
        assert auto(heur, 1) is heur
    finally:
        triton_moe.set_ws_decode(*prev)
    with pytest.raises(NotImplementedError, match="as bytes"):
        triton_moe._ws_check(cuda, False, prob["q13"], torch.bfloat16)


@pytest.mark.interpreter
@pytest.mark.parametrize("fmt,fast", [(Format.NVFP4, False), (Format.MXFP8, False), (Format.FP8_TENSOR, False),
                                      # the fast path's bf16 tiles (inline PTX: a GPU); FP8 per tensor has none
                                      pytest.param(Format.NVFP4, True, marks=pytest.mark.gpu),
                                      pytest.param(Format.MXFP8, True, marks=pytest.mark.gpu)],
                         ids=["NVFP4", "MXFP8", "FP8_TENSOR", "NVFP4-fast", "MXFP8-fast"])
def test_e4m3_bytes_dequantize_the_same(fmt, fast, monkeypatch):
    """Every E4M3 code -- as an NVFP4 block scale, an MXFP8 or FP8 value; signs, subnormals, the NaN codes 0x7F /
    0xFF -- decoded from its byte (``_blockscaled._e4m3_f32``) gives the tiles the e4m3 load gives, bit for bit, and
    NaN where ``torch.float8_e4m3fn`` has NaN; on the GPU also the fast path's bf16 tiles."""
    g = torch.Generator().manual_seed(3)
    q = _random_operand(fmt, (2, 48, 96), g)
    t = q.scale if fmt is Format.NVFP4 else q.data
    codes = torch.arange(256, dtype=torch.uint8).repeat(-(-t.numel() // 256))[:t.numel()].reshape(t.shape)
    q = replace(q, scale=codes.view(E4M3)) if fmt is Format.NVFP4 else replace(q, data=codes.view(E4M3))
    outs = []
    for as_bytes in (False, True):
        monkeypatch.setattr(_host, "E4M3_BYTES_FORCED", as_bytes)
        outs.append(dequantize_tiles(q.to(DEV), block_rows=16, block_k=64, fast_cvt=fast).cpu().float())
    nan = (codes & 0x7F) == 0x7F
    if fmt is Format.NVFP4:
        nan = nan.repeat_interleave(16, dim=-1)  # the elements of a NaN scale
    assert torch.equal(torch.isnan(outs[1]), nan)  # (Triton's interpreter decodes an e4m3 NaN as 480: not compared)
    assert (outs[1][~nan] != 0).any()
    assert torch.equal(outs[0][~nan].view(torch.int32), outs[1][~nan].view(torch.int32))


# (weights, activations, activation): every pair with an E4M3 number in a GEMM operand, and NVFP4 x BF16 (scales)
_E4M3_PAIRS = [(Format.FP8_TENSOR, Format.FP8_TENSOR, Activation.RELU2), (Format.FP8_CHANNEL, Format.FP8_TOKEN,
               Activation.SWIGLU), (Format.FP8_BLOCK, Format.FP8_BLOCK, Activation.GEGLU),
               (Format.MXFP8, Format.MXFP8, Activation.SWIGLU_OAI), (Format.NVFP4, Format.FP8_TENSOR, Activation.RELU2),
               (Format.NVFP4, Format.NVFP4, Activation.SWIGLU), (Format.MXFP4, Format.MXFP8, Activation.RELU2),
               (Format.NVFP4, Format.BF16, Activation.SWIGLU)]


@pytest.mark.interpreter
@pytest.mark.parametrize("T", [5, 40], ids=["decode", "prefill"])
@pytest.mark.parametrize("wfmt,afmt,act", _E4M3_PAIRS, ids=lambda v: v.name)
def test_e4m3_bytes_layer(wfmt, afmt, act, T, monkeypatch):
    """The layer with E4M3 numbers as bytes (the path below sm_89) against the typed path: the same bits in the
    interpreter (both multiply in fp32; the MX x MXFP8 E4M3 partial sums, typed only, excepted), and within the
    reference bound everywhere -- on the H200 it runs on the GPU (bf16 tensor cores on the decoded operands)."""
    block = 128 if wfmt is Format.FP8_BLOCK else 32
    c = Case(wfmt, afmt, act, T=T, H=256 if block == 128 else 96, I=128 if block == 128 else 64, align=block,
             bias=True, seed=17, params=OAI_SMALL if act is Activation.SWIGLU_OAI else None,
             dtype=torch.bfloat16 if DEV == "cuda" else torch.float16)
    hidden, W, topk = make_case(c)
    outs = []
    for as_bytes in (False, True):
        monkeypatch.setattr(_host, "E4M3_BYTES_FORCED", as_bytes)
        cap = {}
        outs.append(run_triton(hidden, W, topk, afmt, capture=cap))
    assert not (as_bytes and cap["mxdot"])
    mx, rms = _errors(outs[1], run_reference(hidden, W, topk, afmt))
    bmax, brms = _bounds(c.dtype)
    assert mx <= bmax and rms <= brms, (mx, rms)
    mx_dot = afmt is Format.MXFP8 and wfmt in (Format.MXFP4, Format.MXFP8) and T <= 16
    if DEV == "cpu" and not mx_dot:
        assert torch.equal(outs[0], outs[1])


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
    for table, key in ((SCL, "nvfp4"), (VAL, "fp8"), (VAL, "mxfp8")):
        table[key] = "*u8" if u8 else "*fp8e4nv"
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

# (target, compile-table variant, compiles?): decode tiles (quick to compile) of each kind -- 16-bit, MXFP4 x BF16
# through the inline-PTX converter (its bf16x2 scale multiply is an fma: mul.bf16x2 does not exist before sm_90),
# NVFP4 and FP8 (``u8:``: E4M3 tensors typed as bytes, as the launcher hands them over below sm_89; typed E4M3 does
# not compile there) -- and on sm_100 the FP8 per-tensor intermediate's max |h| (a reduction over the flattened
# tile: the nested one hit an internal Triton error in the TMEM layout pass for sm_100).
_CASES = [
    (80, "g1 BF16 swiglu decode", True),
    (80, "g2 BF16 decode K/N tails", True),
    (80, "g1 MXFP4xBF16 swiglu_oai bias", True),
    (80, "g2 MXFP4xBF16 split-K 2", True),
    (80, "dequant tiles fast", True),
    (80, "u8:g1 NVFP4xBF16 swiglu", True),
    (80, "u8:g2 NVFP4xBF16 K/N tails", True),
    (80, "u8:g1 NVFP4xBF16 prefill", True),
    (80, "u8:g2 NVFP4xNVFP4", True),
    (80, "u8:g2 FP8 tensor", True),
    (80, "u8:g1 FP8 row geglu", True),
    (80, "u8:g2 FP8 block prefill", True),
    (80, "g1 NVFP4xBF16 swiglu", False),
    (80, "g2 FP8 tensor", False),
    (89, "g1 MXFP4xBF16 swiglu_oai bias", True),
    (89, "g1 NVFP4xBF16 swiglu", True),
    (89, "g1 FP8 block swiglu block-out", True),
    (100, "g1 FP8 tensor swiglu plain-out amax", True),
    (100, "g1 MXFP4xBF16 swiglu_oai bias", True),
    (120, "g2 NVFP4xNVFP4", True),
    (120, "g1 MXFP4xMXFP8 e4m3-mma mxfp8-out", True),
]


def test_kernels_compile_for_other_targets(tmp_path):
    """Each case compiles for its target, or fails for want of an E4M3 type (typed E4M3 below sm_89: why the
    launcher hands bytes there)."""
    head, sep, _ = _SM90_SCRIPT.partition('if __name__ == "__main__":')
    assert sep and 'GPUTarget("cuda", 90, 32)' in head, "the fp4 test's script changed shape: update this test"
    head = "TARGET = [90]\n" + head.replace('GPUTarget("cuda", 90, 32)', 'GPUTarget("cuda", TARGET[0], 32)')
    cases = [(cc, name) for cc, name, _ in _CASES]
    tests_dir = os.path.dirname(os.path.abspath(__file__))
    rows = run_sm90_script(tmp_path, head + f"CASES = {cases!r}\nTESTS_DIR = {tests_dir!r}\n" + _TARGETS)
    rows = [r[1:] for r in rows if r[0] == "RESULT"]
    assert len(rows) == len(_CASES), rows
    for (cc, name, ok), (got_cc, got_name, result) in zip(_CASES, rows):
        assert (int(got_cc), got_name) == (cc, name)
        if ok:
            assert result == "ok", (cc, name, result)
        else:
            assert "fp8e4nv not supported" in result, (cc, name, result)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the H200: pytest -m gpu)")
def test_gpu_pretended_sm80(capability):
    """On the GPU, with the device taken for an sm_80: every format keeps the Triton kernels, E4M3 numbers as bytes
    -- 16-bit, MXFP4 and NVFP4 x BF16 layers with the same bits as without the pretence, FP8 ones within the
    reference bound; taken for an sm_75: the kernels' entry point refuses and ``fm.FusedMoE`` runs the reference."""
    g = torch.Generator().manual_seed(5)
    E, H, I, T = 8, 256, 128, 6
    x = torch.randn(T, H, generator=g).to("cuda", torch.bfloat16)
    logits = torch.randn(T, E, generator=g).to("cuda")
    routing = fm.RoutingConfig(fm.RoutingMethod.RENORMALIZE, top_k=2)
    topk = fm.route(logits, routing)
    made = {}
    for fmt in (Format.BF16, Format.MXFP4, Format.NVFP4, Format.FP8_TENSOR, Format.FP8_CHANNEL, Format.FP8_BLOCK,
                Format.MXFP8):
        w13 = torch.randn(E, 2 * I, H, generator=g) * H ** -0.5
        w2 = torch.randn(E, H, I, generator=g) * I ** -0.5
        w = fm.ExpertWeights.from_float(w13, w2, activation=Activation.SWIGLU, format=fmt).to("cuda")
        made[fmt] = (w, fm.FusedMoE(w, routing=routing, activation=Activation.SWIGLU)(x, logits))
    capability((8, 0))
    for fmt, (w, before) in made.items():
        moe = fm.FusedMoE(w, routing=routing, activation=Activation.SWIGLU)
        assert moe.backend == "triton", moe.backend_reason
        got = moe(x, logits)
        if fmt in (Format.BF16, Format.MXFP4, Format.NVFP4):
            assert torch.equal(got, before), fmt
        ref = fm.reference_moe(x, w, topk, activation=Activation.SWIGLU, activation_format=moe.activation_format)
        mx, rms = _errors(got, ref)
        assert mx <= 6e-2 and rms <= 1.2e-2, (fmt, mx, rms)
    capability((7, 5))
    w, _ = made[Format.BF16]
    with pytest.raises(fm.backends.UnsupportedError, match="compute capability 8.0"):
        fm.fused_moe(x, w, topk, activation=Activation.SWIGLU, backend="triton")
    with pytest.raises(NotImplementedError, match="compute capability 8.0"):  # the kernels' own entry point
        run_weights(x, w, topk, activation_format=Format.BF16)
    moe = fm.FusedMoE(w, routing=routing, activation=Activation.SWIGLU)
    assert moe.backend == "reference" and "8.0" in moe.backend_reason, moe.backend_reason


def test_layer_launches_compile_for_sm80(tmp_path):
    """Every kernel a small layer launches -- routing (grouped DeepSeek-V3 and softmax), the one- and multi-program
    align with and without the fused FP8 quantization, the quantizers, both GEMMs, the combine -- for 16-bit, MXFP4,
    NVFP4 (x BF16 and x NVFP4) and FP8 (per tensor, block, MXFP8) weights with E4M3 numbers as bytes, recorded in
    the interpreter (``tests/record_launches.py``), compiles for sm_80."""
    import subprocess
    import sys

    import triton

    bin_dir = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    if not os.path.exists(os.path.join(bin_dir, "ptxas")):
        pytest.skip("Triton's bundled ptxas not found (a Triton build without the NVIDIA backend tools)")
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
