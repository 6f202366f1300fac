"""End-to-end: transformers 5.x models with fusedmoe as their experts implementation.

Tiny random models of every target architecture, built from their config classes (no downloads),
following the procedure of the shared ``docs/models.md`` section 8:

* fusedmoe is registered before any model is built; every model gets its own deep copy of the
  config (``from_config(..., experts_implementation=)`` writes into the config it is given);
* the reference asks for ``experts_implementation="eager"`` explicitly (the default is grouped_mm);
* expert weights are re-initialized with std 1/sqrt(fan_in), expert biases N(0, 0.1) and the
  routing correction bias N(0, 0.05), so that the experts (and the bias path) matter;
* logits are compared with ``rel = max|a - b| / max|ref|``: <= 1e-4 in fp32 on the CPU, <= 3e-2 in
  bf16; per-layer experts outputs are compared too (forward hooks), to localize a failure;
* a negative control (a deliberately wrong gate/up order, or each slot given another slot's
  routing weight) must fail the same comparison.

Quantized runs (``quantize_model``, checkpoint loading) are compared with the eager model whose
expert parameters hold the *dequantized* weights: <= 1e-4 for weight-only formats (NVFP4 / MXFP4
with BF16 activations: the same math), <= 5e-2 for FP8 formats, whose activations are quantized too.

GPU tests (marker ``gpu``): bf16 logits within 3e-2 through the Triton backend, and a short greedy
generation with identical tokens in BF16.
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")

import fusedmoe as fm  # noqa: E402
import fusedmoe.integrations as fi  # noqa: E402
from fusedmoe.integrations import hf  # noqa: E402

fi.register()  # before any model is built (the name is validated at model construction)

V = 128
FP32_BOUND = 1e-4
BF16_BOUND = 3e-2
FP8_BOUND = 5e-2
QUANT_NOISE = {fm.Format.FP8_TENSOR: 0.1, fm.Format.FP8_CHANNEL: 0.1, fm.Format.FP8_BLOCK: 0.1,
               fm.Format.NVFP4: 0.25, fm.Format.MXFP4: 0.3}  # layer error against the float weights
NEG_MIN = 1e-2  # the negative control must be off by more than this


def _configs():
    c = {}
    c["qwen3_moe"] = transformers.Qwen3MoeConfig(
        vocab_size=V, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=8, num_experts_per_tok=2)
    c["mixtral"] = transformers.MixtralConfig(
        vocab_size=V, hidden_size=64, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, num_local_experts=8, num_experts_per_tok=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c["minimax_m2"] = transformers.MiniMaxM2Config(
            vocab_size=V, hidden_size=64, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, num_local_experts=8, num_experts_per_tok=2,
            bos_token_id=1, eos_token_id=2)
    c["deepseek_v3"] = transformers.DeepseekV3Config(
        vocab_size=V, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=2,
        first_k_dense_replace=1, n_routed_experts=16, n_shared_experts=1, num_experts_per_tok=4, n_group=4,
        topk_group=2, routed_scaling_factor=2.5, q_lora_rank=None, kv_lora_rank=16, qk_nope_head_dim=8,
        qk_rope_head_dim=8, v_head_dim=8, num_attention_heads=4, num_key_value_heads=4)
    c["gpt_oss"] = transformers.GptOssConfig(
        vocab_size=V, hidden_size=64, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, num_local_experts=8, num_experts_per_tok=2)
    nemo = dict(vocab_size=V, hidden_size=64, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=48,
                moe_shared_expert_intermediate_size=48, routed_scaling_factor=5.0, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, intermediate_size=64)
    c["nemotron_h"] = transformers.NemotronHConfig(layers_block_type=["moe", "full_attention", "moe"], **nemo)
    c["nemotron_h_latent"] = transformers.NemotronHConfig(  # Nemotron-3-Super's latent MoE
        layers_block_type=["moe", "full_attention", "moe"], moe_latent_size=32, **nemo)
    c["nemotron_h_mamba"] = transformers.NemotronHConfig(
        layers_block_type=["linear_attention", "moe", "full_attention"], mamba_num_heads=4, mamba_head_dim=16,
        ssm_state_size=16, n_groups=2, chunk_size=8, use_mamba_kernels=False, **nemo)
    c["llama4"] = transformers.Llama4TextConfig(
        vocab_size=V, hidden_size=64, intermediate_size=32, intermediate_size_mlp=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=8, num_experts_per_tok=1)
    c["llama4_top2"] = transformers.Llama4TextConfig(
        vocab_size=V, hidden_size=64, intermediate_size=32, intermediate_size_mlp=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=8, num_experts_per_tok=2)
    return c


CONFIGS = _configs()
ARCHS = list(CONFIGS)
REGISTRY_ARCHS = [a for a in ARCHS if not a.startswith("llama4")]


def enlarge_experts(model, seed=1):
    """Make the experts matter: 3-D expert weights ~ N(0, 1/fan_in), expert biases N(0, 0.1),
    routing correction biases N(0, 0.05) (the defaults hide a broken kernel, models.md 7.2)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 3 and ".experts." in name:
                transposed = getattr(_owner(model, name), "is_transposed", False) or "Llama4" in type(
                    _owner(model, name)).__name__
                fan_in = p.shape[1] if transposed else p.shape[2]
                p.copy_(torch.randn(p.shape, generator=g) * fan_in ** -0.5)
            elif name.endswith("_bias") and ".experts." in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(torch.randn(b.shape, generator=g) * 0.05)


def _owner(model, param_name):
    return model.get_submodule(param_name.rsplit(".", 1)[0])


def build(arch, *, impl="eager", dtype=torch.float32, seed=0, device="cpu"):
    """A tiny random model of ``arch`` from its own deep copy of the config."""
    cfg = copy.deepcopy(CONFIGS[arch])
    torch.manual_seed(seed)
    kw = {}
    if arch == "gpt_oss":
        kw["attn_implementation"] = "eager"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if arch.startswith("llama4"):
            model = transformers.Llama4ForCausalLM(cfg)
        else:
            model = transformers.AutoModelForCausalLM.from_config(cfg, experts_implementation=impl, **kw)
    enlarge_experts(model, seed + 1)
    return model.to(device=device, dtype=dtype).eval()


def candidate_of(ref, arch, **enable_kw):
    """A fusedmoe copy of ``ref``: registry archs are built with experts_implementation="fusedmoe"
    (the from_config argument path) and get ref's weights; Llama-4 is a deep copy, patched."""
    if arch.startswith("llama4"):
        cand = copy.deepcopy(ref)
    else:
        cand = build(arch, impl=fi.IMPLEMENTATION_NAME, dtype=next(ref.parameters()).dtype,
                     device=next(ref.parameters()).device)
        cand.load_state_dict(ref.state_dict())
        assert cand.config._experts_implementation == fi.IMPLEMENTATION_NAME
    fi.enable(cand, **enable_kw)
    return cand


def tokens(batch=2, seq=9, seed=3, device="cpu"):
    return torch.randint(0, V, (batch, seq), generator=torch.Generator().manual_seed(seed)).to(device)


def rel(a, ref):
    return ((a.float() - ref.float()).abs().max() / ref.float().abs().max()).item()


def experts_outputs(model, ids):
    """Logits and the output of every experts module (forward hooks)."""
    outs = {}
    hooks = []
    for name, m in model.named_modules():
        if hf._is_experts_module(m) and type(m).__name__ != "Llama4TextExperts":  # Llama-4: the block
            hooks.append(m.register_forward_hook(lambda mod, a, o, n=name: outs.__setitem__(n, o)))
        if type(m).__name__ == "Llama4TextMoe":
            hooks.append(m.register_forward_hook(lambda mod, a, o, n=name: outs.__setitem__(n, o[0])))
    try:
        with torch.no_grad():
            logits = model(ids).logits
    finally:
        for h in hooks:
            h.remove()
    return logits, outs


def _moe_units(model):
    """The modules whose calls are compared layer by layer: experts modules (registry archs) or
    Llama-4 MoE blocks (patched as a whole)."""
    out = {}
    for name, m in model.named_modules():
        if type(m).__name__ == "Llama4TextMoe" or (hf._is_experts_module(m) and type(m).__name__ != "Llama4TextExperts"):
            out[name] = m
    return out


def layerwise(model, other, ids):
    """Run ``model`` on ``ids``, capture every MoE unit's inputs and output, and run the same unit
    of ``other`` on exactly those inputs: ``{name: (model's output, other's output)}``. Routing
    is the captured one, so near-ties cannot flip between the two."""
    calls = {}
    hooks = [m.register_forward_hook(lambda mod, a, o, n=n: calls.__setitem__(n, (a, o)))
             for n, m in _moe_units(model).items()]
    try:
        with torch.no_grad():
            model(ids)
    finally:
        for h in hooks:
            h.remove()
    units = _moe_units(other)
    out = {}
    with torch.no_grad():
        for n, (args, o) in calls.items():
            o2 = units[n](*args)
            out[n] = (o[0] if isinstance(o, tuple) else o, o2[0] if isinstance(o2, tuple) else o2)
    assert out
    return out


def frob(a, ref):
    return ((a.float() - ref.float()).norm() / ref.float().norm()).item()


def routing_of(model, ids):
    """Every routing decision of ``model`` on ``ids`` (expert ids per MoE call)."""
    got = []
    hooks = []
    for n, m in model.named_modules():
        if type(m).__name__ == "Llama4Router":
            hooks.append(m.register_forward_hook(
                lambda mod, a, o: got.append(torch.topk(o[1].float(), mod.top_k, dim=1)[1].sort(-1)[0].cpu())))
        elif hf._is_experts_module(m) and type(m).__name__ != "Llama4TextExperts":
            hooks.append(m.register_forward_pre_hook(lambda mod, a: got.append(a[1].sort(-1)[0].cpu())))
    try:
        with torch.no_grad():
            model(ids)
    finally:
        for h in hooks:
            h.remove()
    return got


def stable_tokens(ref_bf16, arch, device="cpu", tries=12, **kw):
    """Token ids whose routing is the same in the fp32 and the bf16 eager model: inputs away from
    routing near-ties, which bf16 rounding may flip (models.md 8.7) for any two implementations."""
    ref32 = copy.deepcopy(ref_bf16).float()
    for seed in range(tries):
        ids = tokens(seed=seed, device=device, **kw)
        a, b = routing_of(ref32, ids), routing_of(ref_bf16, ids)
        if all(torch.equal(x, y) for x, y in zip(a, b)):
            return ids
    pytest.fail(f"{arch}: no input among {tries} seeds routes identically in fp32 and bf16")


# ----------------------------------------------------------------------------------------------
# fp32 logits, per-layer outputs, negative control
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ARCHS)
def test_logits_match_eager_fp32(arch):
    ref = build(arch)
    assert ref.config._experts_implementation in (None, "eager") or arch.startswith("llama4")
    cand = candidate_of(ref, arch)
    ids = tokens()
    lr, er = experts_outputs(ref, ids)
    lc, ec = experts_outputs(cand, ids)
    assert er.keys() == ec.keys() and er
    for name in er:
        assert rel(ec[name], er[name]) <= FP32_BOUND, f"{arch}: experts output of {name} differs"
    r = rel(lc, lr)
    assert r <= FP32_BOUND, f"{arch}: logits rel {r:.2e}"
    # fusedmoe really ran, and converted each experts module exactly once
    convs = [m._fusedmoe_state.conversions for _, m in fi.find_experts(cand)]
    assert convs and all(c == 1 for c in convs)


def _negative(monkeypatch, arch):
    """Break the candidate: gated archs get gate and up swapped, non-gated ones (Nemotron-H) get
    each slot's routing weight from another slot."""
    gated = not arch.startswith("nemotron_h")
    if gated:
        orig = hf._canonical_float

        def swapped(module, layout):
            w13, w2, b13, b2 = orig(module, layout)
            I = w13.shape[1] // 2
            w13 = torch.cat([w13[:, I:], w13[:, :I]], 1)
            b13 = None if b13 is None else torch.cat([b13[:, I:], b13[:, :I]], 1)
            return w13, w2, b13, b2

        monkeypatch.setattr(hf, "_canonical_float", swapped)
    else:
        orig_run = hf._run
        monkeypatch.setattr(hf, "_run", lambda h, w, i, tw, st, weight_on_input=False:
                            orig_run(h, w, i, tw.roll(1, -1), st, weight_on_input))


@pytest.mark.parametrize("arch", ARCHS)
def test_negative_control_fails(arch, monkeypatch):
    ref = build(arch)
    _negative(monkeypatch, arch)
    cand = candidate_of(ref, arch)
    ids = tokens()
    with torch.no_grad():
        r = rel(cand(ids).logits, ref(ids).logits)
    assert r > NEG_MIN, f"{arch}: the broken candidate still matches (rel {r:.2e}): the test cannot see errors"


@pytest.mark.parametrize("arch", ["qwen3_moe", "minimax_m2", "gpt_oss", "nemotron_h_latent", "llama4"])
def test_bf16_layers_and_logits_cpu(arch):  # every arch in bf16: the GPU test
    ref = build(arch, dtype=torch.bfloat16)
    cand = candidate_of(ref, arch)
    for name, (a, b) in layerwise(ref, cand, tokens()).items():  # identical inputs and routing
        assert rel(b, a) <= BF16_BOUND, f"{arch}: bf16 MoE output of {name} rel {rel(b, a):.2e}"
    ids = stable_tokens(ref, arch)
    with torch.no_grad():
        r = rel(cand(ids).logits, ref(ids).logits)
    assert r <= BF16_BOUND, f"{arch}: bf16 logits rel {r:.2e}"


@pytest.mark.parametrize("arch", ["qwen3_moe", "nemotron_h", "llama4"])
def test_greedy_generation_fp32_cpu(arch):
    ref = build(arch)
    cand = candidate_of(ref, arch)
    ids = tokens(batch=1, seq=5)
    kw = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        a = ref.generate(ids, **kw)
        b = cand.generate(ids, **kw)  # decode steps run the experts with T = 1
    assert torch.equal(a, b)


@pytest.mark.interpreter
@pytest.mark.skipif(torch.cuda.is_available(), reason="the GPU tests run the Triton backend for real")
@pytest.mark.parametrize("arch", ["qwen3_moe", "nemotron_h_latent", "gpt_oss", "llama4_top2"])
def test_triton_backend_in_interpreter_fp32(arch):
    """The Triton kernels (Triton's CPU interpreter; fp32, whose interpreter dot is exact enough)
    behind the transformers integration: every MoE layer and the logits within 1e-4."""
    ref = build(arch)
    cand = candidate_of(ref, arch, backend="triton")
    ids = tokens(seq=5)
    for name, (a, b) in layerwise(ref, cand, ids).items():
        assert rel(b, a) <= FP32_BOUND, f"{arch}: {name} rel {rel(b, a):.2e}"
    with torch.no_grad():
        assert rel(cand(ids).logits, ref(ids).logits) <= FP32_BOUND
    if arch == "qwen3_moe":  # expert-parallel sentinels through the kernels
        experts = cand.model.layers[0].mlp.experts
        x = torch.randn(4, 64, generator=torch.Generator().manual_seed(2))
        ids_ = torch.tensor([[0, 8], [3, 100], [8, 8], [5, 1]])
        w = torch.tensor([[0.5, 0.0], [0.7, 0.0], [0.0, 0.0], [0.4, 0.6]])
        with torch.no_grad():
            got = fi.experts_forward(experts, x, ids_, w)
            want = fi.experts_forward(experts, x, torch.where(ids_ < 8, ids_, 0), w)
        torch.testing.assert_close(got, want)


# ----------------------------------------------------------------------------------------------
# caching, sentinels, switching
# ----------------------------------------------------------------------------------------------


def test_weights_converted_once_and_rebuilt_after_in_place_update():
    ref = build("mixtral")  # I = 40: not aligned, so the canonical weights are a copy
    cand = candidate_of(ref, "mixtral")
    ids = tokens()
    experts = [m for _, m in fi.find_experts(cand)]
    with torch.no_grad():
        for _ in range(3):
            cand(ids)
    assert [m._fusedmoe_state.conversions for m in experts] == [1] * len(experts)
    with torch.no_grad():  # in-place update (bumps the version counter): the cache is rebuilt
        for m in (ref, cand):
            m.model.layers[0].mlp.experts.down_proj.mul_(1.5)
        r = rel(cand(ids).logits, ref(ids).logits)
    assert r <= FP32_BOUND
    assert experts[0]._fusedmoe_state.conversions == 2 and experts[1]._fusedmoe_state.conversions == 1
    # replacing a parameter's storage is seen as well
    with torch.no_grad():
        for m in (ref, cand):
            e = m.model.layers[1].mlp.experts
            e.gate_up_proj.data = e.gate_up_proj.data * 0.5
        assert rel(cand(ids).logits, ref(ids).logits) <= FP32_BOUND
    assert experts[1]._fusedmoe_state.conversions == 2


def test_aligned_bf16_weights_are_shared_not_copied():
    ref = build("qwen3_moe")  # I = 32: already the canonical layout
    cand = candidate_of(ref, "qwen3_moe")
    for _, m in fi.find_experts(cand):
        w = fi.prepare_experts(m)
        assert w.w13.data.data_ptr() == m.gate_up_proj.data_ptr()
        assert w.w2.data.data_ptr() == m.down_proj.data_ptr()


def test_expert_parallel_sentinels_contribute_nothing():
    model = build("qwen3_moe")
    experts = model.model.layers[0].mlp.experts
    E = experts.num_experts
    g = torch.Generator().manual_seed(5)
    x = torch.randn(6, 64, generator=g)
    ids = torch.randint(0, E, (6, 3), generator=g)
    w = torch.rand(6, 3, generator=g)
    sent = ids.clone()
    sent[:, 2] = E + 7  # sentinels ...
    sent[0, 0] = E
    ws = w.clone()
    ws[:, 2] = 0.0  # ... carry weight 0
    ws[0, 0] = 0.0
    with torch.no_grad():
        out = fi.experts_forward(experts, x, sent, ws)
        keep = torch.where(sent < E, sent, torch.zeros_like(sent))
        want = fi.experts_forward(experts, x, keep, ws)  # sentinel slots as weight-0 real experts
    torch.testing.assert_close(out, want)  # equal up to fp32 GEMM blocking


def test_disable_restores_previous_implementation_and_llama4_forward():
    for arch, want in (("qwen3_moe", "eager"), ("llama4", None)):
        ref = build(arch)
        cand = copy.deepcopy(ref)
        fi.enable(cand)
        fi.disable(cand)
        if want:
            assert cand.config._experts_implementation == want
        for m in cand.modules():
            assert "forward" not in m.__dict__
        ids = tokens()
        with torch.no_grad():
            assert torch.equal(cand(ids).logits, ref(ids).logits)


def test_config_copies_are_not_shared():
    cfg = copy.deepcopy(CONFIGS["qwen3_moe"])
    transformers.AutoModelForCausalLM.from_config(cfg, experts_implementation="fusedmoe")
    assert cfg._experts_implementation == "fusedmoe"  # the transformers gotcha this file avoids
    assert CONFIGS["qwen3_moe"]._experts_implementation != "fusedmoe"


def test_backend_and_activation_format_options_reach_the_layers():
    ref = build("qwen3_moe")
    cand = candidate_of(ref, "qwen3_moe", backend="reference")
    assert {d["backend"] for d in fi.describe_experts(cand)} == {"reference"}
    ids = tokens()
    with torch.no_grad():
        assert rel(cand(ids).logits, ref(ids).logits) <= FP32_BOUND


# ----------------------------------------------------------------------------------------------
# quantize_model and checkpoint loading
# ----------------------------------------------------------------------------------------------


def write_dequantized(model):
    """Put each experts module's fusedmoe weights, dequantized, back into its own parameters
    (inverse of the layout conversion), so that the eager implementation computes the reference."""
    with torch.no_grad():
        for _, m in fi.find_experts(model):
            st = m._fusedmoe_state
            lay = st.layout
            w = st.weights
            I, Ip = w.intermediate_size, w.padded_intermediate_size
            w13 = fm.dequantize(w.w13)
            w2 = fm.dequantize(w.w2)[:, :, :I]
            b13 = w.w13_bias
            if lay.gated:
                gate, up = w13[:, :I], w13[:, Ip:Ip + I]
                bg, bu = (None, None) if b13 is None else (b13[:, :I], b13[:, Ip:Ip + I])
                if lay.interleaved:
                    w13 = torch.stack([gate, up], 2).reshape(gate.shape[0], 2 * I, -1)
                    b13 = None if b13 is None else torch.stack([bg, bu], 2).reshape(b13.shape[0], 2 * I)
                else:
                    w13 = torch.cat([gate, up], 1)
                    b13 = None if b13 is None else torch.cat([bg, bu], 1)
            else:
                w13 = w13[:, :I]
                b13 = None if b13 is None else b13[:, :I]
            if lay.transposed:
                w13, w2 = w13.transpose(1, 2), w2.transpose(1, 2)
            for name, val in ((lay.w13_name, w13), (lay.w2_name, w2), (lay.w13_bias_name, b13),
                              (lay.w2_bias_name, w.w2_bias)):
                if name is not None:
                    p = getattr(m, name)
                    if p.numel() == 0:
                        p.data = torch.empty(val.shape, dtype=p.dtype)
                    p.copy_(val)


QUANT_CASES = [
    ("qwen3_moe", "fp8_tensor", FP8_BOUND),
    ("qwen3_moe", "FP8_CHANNEL", FP8_BOUND),
    ("qwen3_moe", fm.Format.NVFP4, FP32_BOUND),
    ("qwen3_moe", "mxfp4", FP32_BOUND),
    ("nemotron_h_latent", "fp8_tensor", FP8_BOUND),
    ("nemotron_h", "nvfp4", FP32_BOUND),
    ("gpt_oss", "mxfp4", FP32_BOUND),
    ("llama4", "nvfp4", FP32_BOUND),
]


def dequantized_twin(ref, cand):
    """A copy of the float model ``ref`` whose expert parameters hold ``cand``'s fusedmoe weights,
    dequantized; it runs the eager implementation."""
    deq = copy.deepcopy(ref)
    deq_experts = dict(fi.find_experts(deq))
    for name, m in fi.find_experts(cand):
        fi.set_expert_weights(deq_experts[name], m._fusedmoe_state.weights)
    write_dequantized(deq)
    return deq


@pytest.mark.parametrize("arch, fmt, bound", QUANT_CASES)
def test_quantize_model_matches_eager_on_dequantized_weights(arch, fmt, bound):
    ref = build(arch)
    cand = copy.deepcopy(ref)
    fi.quantize_model(cand, format=fmt)
    want = hf._as_format(fmt, "format")
    assert {d["format"] for d in fi.describe_experts(cand)} == {want.name}
    deq = dequantized_twin(ref, cand)
    ids = tokens()
    # every MoE layer on the candidate's own inputs: against the dequantized weights (the format's
    # bound), and against the float weights (the quantization error itself, a sanity bound)
    for name, (q, d) in layerwise(cand, deq, ids).items():
        assert frob(q, d) <= bound, f"{arch} {fmt}: {name} rel {frob(q, d):.2e} against dequantized weights"
    for name, (q, f) in layerwise(cand, ref, ids).items():
        assert frob(q, f) <= QUANT_NOISE[want], f"{arch} {fmt}: {name} rel {frob(q, f):.2e} against float weights"
    if bound == FP32_BOUND:  # weight-only formats: the same math end to end, so the logits match too
        with torch.no_grad():
            r = rel(cand(ids).logits, deq(ids).logits)
        assert r <= FP32_BOUND, f"{arch} {fmt}: logits rel {r:.2e} against the dequantized eager model"
    assert all(m._fusedmoe_state.conversions == 1 for _, m in fi.find_experts(cand))


def test_quantize_model_fp8_block_and_release_parameters():
    cfg = copy.deepcopy(CONFIGS["deepseek_v3"])
    cfg.hidden_size = 128  # FP8_BLOCK needs H % 128 == 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = transformers.AutoModelForCausalLM.from_config(cfg, experts_implementation="eager").eval()
    enlarge_experts(ref)
    cand = copy.deepcopy(ref)
    fi.quantize_model(cand, format="fp8_block", release_parameters=True)
    for _, m in fi.find_experts(cand):
        assert m.gate_up_proj.numel() == 0 and m._fusedmoe_state.weights.format is fm.Format.FP8_BLOCK
    for name, (q, d) in layerwise(cand, dequantized_twin(ref, cand), tokens()).items():
        assert frob(q, d) <= FP8_BOUND, f"{name}: rel {frob(q, d):.2e}"


def test_quantize_model_rejects_bad_requests():
    model = build("gpt_oss")  # H = 64
    with pytest.raises(ValueError, match="multiple of 128"):
        fi.quantize_model(copy.deepcopy(model), format="fp8_block")
    with pytest.raises(ValueError, match="unknown format 'int3'"):
        fi.quantize_model(model, format="int3")
    with pytest.raises(ValueError, match="must be a weight format"):
        fi.quantize_model(model, format="fp8_token")
    with pytest.raises(ValueError, match="not available with"):
        fi.quantize_model(model, format="nvfp4", activation_format="mxfp8")


def _ckpt_helpers():
    import importlib

    return importlib.import_module("test_loaders")


def test_load_modelopt_nvfp4_checkpoint_into_qwen3():
    tl = _ckpt_helpers()
    ref = build("qwen3_moe")
    cand = copy.deepcopy(ref)
    sd = {}
    for i in range(2):
        part, _, _ = tl.nvfp4_ckpt(f"model.layers.{i}.mlp.experts.", 8, 32, 64, ("gate_proj", "up_proj", "down_proj"),
                                   seed=i)
        sd.update(part)
    loaded = fi.load_checkpoint_experts(cand, sd, checkpoint_format="modelopt_nvfp4")
    assert sorted(loaded) == ["model.layers.0.mlp.experts", "model.layers.1.mlp.experts"]
    deq = dequantized_twin(ref, cand)  # the loaded weights, dequantized, in the eager model
    ids = tokens()
    with torch.no_grad():
        assert rel(cand(ids).logits, deq(ids).logits) <= FP32_BOUND


def test_load_modelopt_fp8_checkpoint_into_nemotron_h_backbone_names(tmp_path):
    from safetensors.torch import save_file

    tl = _ckpt_helpers()
    ref = build("nemotron_h")
    sd = {}
    for i in (0, 2):  # Nemotron-H checkpoints name the decoder "backbone."; transformers calls it "model."
        part, _, _ = tl.modelopt_fp8_ckpt(f"backbone.layers.{i}.mixer.experts.", 8, 48, 64,
                                          (None, "up_proj", "down_proj"), seed=i, static=False)
        sd.update(part)
    save_file(sd, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text('{"model_type": "nemotron_h"}')
    (tmp_path / "hf_quant_config.json").write_text('{"quantization": {"quant_algo": "FP8"}}')
    cand = copy.deepcopy(ref)
    loaded = fi.load_checkpoint_experts(cand, tmp_path)  # format detected from hf_quant_config.json
    assert all(w.format is fm.Format.FP8_TENSOR and w.activation is fm.Activation.RELU2 for w in loaded.values())
    deq = dequantized_twin(ref, cand)
    for name, (q, d) in layerwise(cand, deq, tokens()).items():  # FP8 activations: layer by layer
        assert frob(q, d) <= FP8_BOUND, f"{name}: rel {frob(q, d):.2e}"


def test_load_gpt_oss_mxfp4_checkpoint(monkeypatch):
    tl = _ckpt_helpers()
    cfg = copy.deepcopy(CONFIGS["gpt_oss"])
    cfg.intermediate_size = 64  # MXFP4 needs I % 32 == 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = transformers.AutoModelForCausalLM.from_config(cfg, experts_implementation="eager",
                                                            attn_implementation="eager").eval()
    enlarge_experts(ref)
    sd = {}
    for i in range(2):
        part, *_ = tl.gpt_oss_ckpt(f"model.layers.{i}.mlp.experts.", 8, 64, 64, seed=i)
        sd.update(part)
    cand = copy.deepcopy(ref)
    loaded = fi.load_checkpoint_experts(cand, sd, checkpoint_format="gpt_oss_mxfp4", release_parameters=True)
    assert sorted(loaded) == ["model.layers.0.mlp.experts", "model.layers.1.mlp.experts"]
    deq = dequantized_twin(ref, cand)  # the loaded weights, dequantized, in the eager model
    ids = tokens()
    with torch.no_grad():
        assert rel(cand(ids).logits, deq(ids).logits) <= FP32_BOUND
    # with MXFP8 activations, where MXFP4 decode tiles run the E4M3 partial-sum path (not the default), the layers
    # switch (once) to plain-nibble FP4 values: the same experts
    from fusedmoe.backends import triton_moe

    experts = [m for _, m in fi.find_experts(cand)]
    w0 = [fi.prepare_experts(m) for m in experts]
    assert all(w.w13.value_layout == "swizzled" for w in w0)
    with torch.no_grad():
        for m in experts:
            fi.prepare_experts(m, activation_format="mxfp8")
        assert all(w.for_activation_format(fm.Format.MXFP8) is w for w in w0)  # the default keeps swizzled words
        monkeypatch.setitem(triton_moe._MXDOT_FORMATS, "formats", frozenset({fm.Format.MXFP4, fm.Format.MXFP8}))
        with monkeypatch.context() as mp:
            mp.setenv("FUSEDMOE_FP4_LAYOUT", "swizzled")  # the A/B switch: the layout stays
            want = cand(ids).logits
        assert all(m._fusedmoe_state.by_device[str(ids.device)] is w for m, w in zip(experts, w0))
        out = cand(ids).logits
        w1 = [m._fusedmoe_state.by_device[str(ids.device)] for m in experts]
        assert all(w.w13.value_layout == w.w2.value_layout == "tiled" for w in w1)
        assert all(torch.equal(fm.dequantize(a.w13), fm.dequantize(b.w13)) for a, b in zip(w1, w0))
        assert torch.equal(out, want)
        assert cand(ids).logits.equal(out) and all(m._fusedmoe_state.by_device[str(ids.device)] is w
                                                  for m, w in zip(experts, w1))  # converted once


def test_load_checkpoint_errors():
    tl = _ckpt_helpers()
    model = build("qwen3_moe")
    part, _, _ = tl.nvfp4_ckpt("model.layers.0.mlp.experts.", 8, 32, 64, ("gate_proj", "up_proj", "down_proj"))
    from fusedmoe.weights.loaders import CheckpointError

    with pytest.raises(CheckpointError, match=r"no checkpoint tensors for experts module 'model\.layers\.1\.mlp\.experts'"):
        fi.load_checkpoint_experts(copy.deepcopy(model), part, checkpoint_format="modelopt_nvfp4")
    part2, _, _ = tl.nvfp4_ckpt("model.layers.1.mlp.experts.", 8, 48, 64, ("gate_proj", "up_proj", "down_proj"))
    with pytest.raises(ValueError, match=r"\(experts, hidden, intermediate\) = \(8, 64, 48\); the module has \(8, 64, 32\)"):
        fi.load_checkpoint_experts(copy.deepcopy(model), {**part, **part2}, checkpoint_format="modelopt_nvfp4")
    with pytest.raises(ValueError, match="checkpoint_format is needed"):
        fi.load_checkpoint_experts(copy.deepcopy(model), part)


# ----------------------------------------------------------------------------------------------
# unsupported models
# ----------------------------------------------------------------------------------------------


def test_unsupported_architecture_says_so():
    cfg = transformers.Qwen3Config(vocab_size=V, hidden_size=64, intermediate_size=96, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    dense = transformers.AutoModelForCausalLM.from_config(cfg)
    with pytest.raises(fi.UnsupportedModelError, match=r"Qwen3ForCausalLM \(model_type='qwen3'\) has no MoE experts"):
        fi.enable(dense)
    with pytest.raises(fi.UnsupportedModelError, match="no MoE experts module fusedmoe can quantize"):
        fi.quantize_model(dense, format="fp8_tensor")


def test_unsupported_expert_activation_names_the_module():
    cfg = copy.deepcopy(CONFIGS["qwen3_moe"])
    cfg.hidden_act = "gelu_pytorch_tanh"
    model = transformers.AutoModelForCausalLM.from_config(cfg, experts_implementation="eager")
    with pytest.raises(fi.UnsupportedModelError, match=r"model\.layers\.0\.mlp\.experts \(Qwen3MoeExperts\): the "
                                                       r"gated expert activation GELUTanh is not supported"):
        fi.enable(model)


# ----------------------------------------------------------------------------------------------
# GPU (H200): bf16 through the Triton backend, greedy generation
# ----------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("arch", ARCHS)
def test_gpu_bf16_logits_match_eager(arch):
    ref = build(arch, dtype=torch.bfloat16, device="cuda")
    cand = candidate_of(ref, arch)
    assert {d["backend"] for d in fi.describe_experts(cand)} == {"auto"}
    for name, (a, b) in layerwise(ref, cand, tokens(device="cuda")).items():
        assert rel(b, a) <= BF16_BOUND, f"{arch}: bf16 MoE output of {name} rel {rel(b, a):.2e}"
    ids = stable_tokens(ref, arch, device="cuda")
    with torch.no_grad():
        r = rel(cand(ids).logits, ref(ids).logits)
    assert r <= BF16_BOUND, f"{arch}: bf16 logits rel {r:.2e}"


@pytest.mark.gpu
@pytest.mark.parametrize("arch", ARCHS)
def test_gpu_bf16_greedy_generation_identical(arch):
    """Greedy tokens of the fusedmoe model equal the eager model's, on a prompt whose every step has
    a clear winner: fp32 and bf16 eager agree and the top-2 logit gap is >= 2 % of max |logit| at
    each step. (Any two correct bf16 implementations may break a near-tie differently: a tiny random
    model has many, so the prompt is chosen away from them rather than hoping for agreement.)"""
    ref = build(arch, dtype=torch.bfloat16, device="cuda")
    cand = candidate_of(ref, arch)
    ref32 = copy.deepcopy(ref).float()
    kw = dict(max_new_tokens=8, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        for seed in range(32):
            ids = tokens(batch=1, seq=6, seed=seed, device="cuda")
            g32 = ref32.generate(ids, output_scores=True, return_dict_in_generate=True, **kw)
            margins = []
            for sc in g32.scores:
                top2 = sc[0].float().topk(2).values
                margins.append(((top2[0] - top2[1]) / sc[0].float().abs().max()).item())
            a = ref.generate(ids, **kw)
            if min(margins) >= 0.02 and torch.equal(a, g32.sequences):
                break
        else:
            pytest.fail(f"{arch}: no prompt among 32 has clear greedy winners and fp32 == bf16 eager")
        b = cand.generate(ids, **kw)
    assert torch.equal(a, b), f"{arch}: greedy tokens differ: {a.tolist()} vs {b.tolist()} (margins {margins})"


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["fp8_tensor", "fp8_channel", "nvfp4", "mxfp4"])
def test_gpu_quantized_qwen3_through_triton(fmt):
    """quantize_model + the Triton backend on the GPU: every MoE layer on the candidate's own inputs
    (so routing cannot flip) against the same quantized model through the reference backend (the
    spec: same weights, same activation quantization; bf16 rounding and re-quantization flips only),
    and against the float weights (the quantization error itself)."""
    ref = build("qwen3_moe", dtype=torch.bfloat16, device="cuda")
    cand = copy.deepcopy(ref)
    fi.quantize_model(cand, format=fmt, backend="triton")
    spec = copy.deepcopy(ref)
    fi.quantize_model(spec, format=fmt, backend="reference")
    assert {d["backend"] for d in fi.describe_experts(cand)} == {"triton"}
    want = hf._as_format(fmt, "format")
    ids = tokens(device="cuda")
    for name, (q, d) in layerwise(cand, spec, ids).items():
        assert frob(q, d) <= 2e-2, f"{fmt}: {name} rel {frob(q, d):.2e} against the reference backend"
    for name, (q, f) in layerwise(cand, ref, ids).items():
        assert frob(q, f) <= QUANT_NOISE[want], f"{fmt}: {name} rel {frob(q, f):.2e} against float weights"


# ----------------------------------------------------------------------------------------------
# the example script
# ----------------------------------------------------------------------------------------------


def test_example_script_tiny_cpu(capsys):
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[1] / "examples" / "transformers_generate.py"
    spec = importlib.util.spec_from_file_location("transformers_generate", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--tiny", "nemotron_h", "--max-new-tokens", "3", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "greedy tokens identical to the default implementation: True" in out
    assert "ms/token decode" in out
    assert mod.main(["--tiny", "mixtral", "--max-new-tokens", "3", "--repeats", "1", "--quantize", "mxfp4",
                     "--no-compare"]) == 0
    assert "weights MXFP4" in capsys.readouterr().out
