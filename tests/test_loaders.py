"""Checkpoint loaders (fusedmoe.weights.loaders) on small synthetic checkpoints in the real formats.

Each checkpoint uses the real tensor names, dtypes and shape rules of its family, scaled down, and
is built from random *codes* (FP8 values, FP4 nibbles, scale bytes), not from fusedmoe's own
quantizer. The test dequantizes the checkpoint independently (its own LUTs and formulas), then
checks:

* the loaded weights dequantize to exactly that (after undoing the padding and the gate/up order);
* the MoE output of the loaded weights matches the reference MoE run on the independently
  dequantized float weights: relative Frobenius error <= 1e-5 for weight-only formats (NVFP4 and
  MXFP4 with BF16 activations: the same math), <= 6e-2 for FP8 formats, whose activations are
  quantized to FP8 as well (E4M3 has a 2^-4 relative step);
* bad checkpoints raise CheckpointError naming the tensor and the expected shape / dtype.
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch

import fusedmoe as fm
from fusedmoe.weights.loaders import (
    CHECKPOINT_FORMATS,
    CheckpointError,
    detect_checkpoint_format,
    load_bf16_experts,
    load_compressed_tensors_fp8_experts,
    load_experts,
    load_experts_from_safetensors,
    load_fp8_block_experts,
    load_gpt_oss_mxfp4_experts,
    load_modelopt_fp8_experts,
    load_modelopt_nvfp4_experts,
    safetensors_state_dict,
)

E4M3 = torch.float8_e4m3fn
# transformers' FP4_VALUES (integrations/mxfp4.py): index = the 4-bit code, low nibble first
FP4_LUT = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def rand_e4m3(shape, g, scale=40.0):
    return (torch.randn(shape, generator=g) * scale).clamp(-448, 448).to(E4M3)


def rand_pos(shape, g, lo=0.5, hi=2.0):
    return lo + (hi - lo) * torch.rand(shape, generator=g)


def fp4_bytes_to_float(b: torch.Tensor) -> torch.Tensor:
    """[..., n] packed bytes -> [..., 2n] values, low nibble first."""
    lo = FP4_LUT[(b & 0xF).long()]
    hi = FP4_LUT[(b >> 4).long()]
    return torch.stack([lo, hi], -1).reshape(*b.shape[:-1], b.shape[-1] * 2)


def dq_block(q, s):
    """128x128 block dequant: q [N, K] * s [ceil(N/128), ceil(K/128)]."""
    N, K = q.shape
    se = s.float().repeat_interleave(128, 0)[:N].repeat_interleave(128, 1)[:, :K]
    return q.float() * se


def dq_nvfp4(w, s, s2):
    v = fp4_bytes_to_float(w)
    N, K = v.shape
    return (v.reshape(N, K // 16, 16) * s.float()[..., None]).reshape(N, K) * float(s2)


def unpad_canonical(weights: fm.ExpertWeights):
    """Dequantized (w13 [E, 2I|I, H] gate-first, w2 [E, H, I]) without padding; checks padding is 0."""
    I, Ip = weights.intermediate_size, weights.padded_intermediate_size
    w13 = fm.dequantize(weights.w13)
    w2 = fm.dequantize(weights.w2)
    if weights.is_gated:
        assert torch.all(w13[:, I:Ip] == 0) and torch.all(w13[:, Ip + I:] == 0)
        w13 = torch.cat([w13[:, :I], w13[:, Ip:Ip + I]], 1)
    else:
        assert torch.all(w13[:, I:] == 0)
        w13 = w13[:, :I]
    assert torch.all(w2[:, :, I:] == 0)
    return w13, w2[:, :, :I]


def moe_vs_dequant_reference(weights, w13_f, w2_f, bound, *, b13=None, b2=None, T=37, seed=0):
    """reference MoE of the loaded weights vs the reference MoE of float weights; rel. Frobenius.
    Static activation scales are calibration data for real activations (their values are checked
    by the callers); the comparison on random activations runs with dynamic scales."""
    weights = dataclasses.replace(weights, input_scale=None, intermediate_scale=None)
    g = _gen(seed)
    E, H = weights.num_experts, weights.hidden_size
    K = min(4, E - 1)
    x = torch.randn(T, H, generator=g)
    ids = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(T)]).to(torch.int32)
    w = torch.rand(T, K, generator=g) + 0.1
    topk = fm.TopK(ids, w)
    act = weights.activation
    out = fm.fused_moe(x, weights, topk, activation=act)  # auto backend: the reference on CPU
    ref_w = fm.ExpertWeights.from_float(w13_f, w2_f, activation=act, dtype=torch.float32, w13_bias=b13, w2_bias=b2,
                                        act_params=weights.act_params)
    ref = fm.reference_moe(x, ref_w, topk, activation=act)
    rel = ((out - ref).norm() / ref.norm()).item()
    assert ref.norm() > 0
    assert rel <= bound, f"relative error {rel:.3e} > {bound}"
    return rel


# ----------------------------------------------------------------------------------------------
# synthetic checkpoints with the families' real names
# ----------------------------------------------------------------------------------------------


def modelopt_fp8_ckpt(prefix, E, I, H, names, seed=0, static=True):
    """ModelOpt FP8: per-expert weight e4m3 [N, K], weight_scale fp32 [], input_scale fp32 []."""
    g = _gen(seed)
    sd, f13, f2 = {}, [], []
    gate, up, down = names
    for e in range(E):
        rows = []
        for p in ([gate, up] if gate else [up]):
            q = rand_e4m3((I, H), g)
            s = rand_pos((), g, 1e-3, 4e-3)
            sd[f"{prefix}{e}.{p}.weight"] = q
            sd[f"{prefix}{e}.{p}.weight_scale"] = s
            if static:
                sd[f"{prefix}{e}.{p}.input_scale"] = rand_pos((), g, 0.005, 0.01)
            rows.append(q.float() * s)
        q = rand_e4m3((H, I), g)
        s = rand_pos((), g, 1e-3, 4e-3)
        sd[f"{prefix}{e}.{down}.weight"], sd[f"{prefix}{e}.{down}.weight_scale"] = q, s
        if static:
            sd[f"{prefix}{e}.{down}.input_scale"] = rand_pos((), g, 0.005, 0.01)
        f13.append(torch.cat(rows))
        f2.append(q.float() * s)
    return sd, torch.stack(f13), torch.stack(f2)


def test_modelopt_fp8_mixtral_gated_unifies_shard_scales():
    prefix = "model.layers.0.block_sparse_moe.experts."
    E, I, H = 8, 40, 64
    sd, f13, f2 = modelopt_fp8_ckpt(prefix, E, I, H, ("w1", "w3", "w2"))
    w = load_modelopt_fp8_experts(sd, prefix)
    assert w.format is fm.Format.FP8_TENSOR and w.activation is fm.Activation.SWIGLU
    assert (w.num_experts, w.hidden_size, w.intermediate_size, w.padded_intermediate_size) == (E, H, I, 48)
    d13, d2 = unpad_canonical(w)
    torch.testing.assert_close(d2, f2, rtol=0, atol=0)
    for e in range(E):
        s1, s3 = sd[f"{prefix}{e}.w1.weight_scale"], sd[f"{prefix}{e}.w3.weight_scale"]
        smax = torch.maximum(s1, s3)
        assert w.w13.scale[e] == smax
        for half, s in ((slice(0, I), s1), (slice(I, 2 * I), s3)):
            if s == smax:  # the shard that owns the max scale is copied bit for bit
                torch.testing.assert_close(d13[e, half], f13[e, half], rtol=0, atol=0)
            else:  # SGLang's re-quantization: q' = e4m3(q * s / s_max), within half an E4M3 step
                err = (d13[e, half] - f13[e, half]).abs()
                assert torch.all(err <= f13[e, half].abs() * 2.0**-4 + smax * 2.0**-9)
                want = (f13[e, half] / smax).to(E4M3).float() * smax
                torch.testing.assert_close(d13[e, half], want, rtol=0, atol=0)
    a1 = max(float(sd[k]) for k in sd if k.endswith("input_scale") and (".w1." in k or ".w3." in k))
    a2 = max(float(sd[k]) for k in sd if k.endswith("input_scale") and ".w2." in k)
    assert float(w.input_scale) == a1 and float(w.intermediate_scale) == a2
    moe_vs_dequant_reference(w, d13, d2, 6e-2)


def test_modelopt_fp8_nemotron_h_non_gated_pads_to_128():
    prefix = "backbone.layers.1.mixer.experts."
    E, I, H = 8, 48, 64
    sd, f13, f2 = modelopt_fp8_ckpt(prefix, E, I, H, (None, "up_proj", "down_proj"), seed=1)
    w = load_modelopt_fp8_experts(sd, prefix)  # projections and RELU2 inferred (no gate tensors)
    assert w.activation is fm.Activation.RELU2 and w.padded_intermediate_size == 128
    d13, d2 = unpad_canonical(w)
    torch.testing.assert_close(d13, f13, rtol=0, atol=0)
    torch.testing.assert_close(d2, f2, rtol=0, atol=0)
    moe_vs_dequant_reference(w, d13, d2, 6e-2)


def test_modelopt_fp8_dynamic_without_input_scales():
    prefix = "model.layers.0.mlp.experts."
    sd, f13, f2 = modelopt_fp8_ckpt(prefix, 4, 32, 64, ("gate_proj", "up_proj", "down_proj"), static=False)
    w = load_modelopt_fp8_experts(sd, prefix)
    assert w.input_scale is None and w.intermediate_scale is None
    moe_vs_dequant_reference(w, *unpad_canonical(w), 6e-2)


def nvfp4_ckpt(prefix, E, I, H, names, seed=0, same_ws2=True):
    """ModelOpt NVFP4: weight uint8 [N, K/2], weight_scale e4m3 [N, K/16], weight_scale_2 fp32 [],
    input_scale fp32 []."""
    g = _gen(seed)
    sd, f13, f2 = {}, [], []
    gate, up, down = names

    def proj(key, N, K, ws2):
        w = torch.randint(0, 256, (N, K // 2), generator=g, dtype=torch.uint8)
        s = rand_pos((N, K // 16), g, 0.5, 8.0).to(E4M3)
        sd[key + ".weight"], sd[key + ".weight_scale"] = w, s
        sd[key + ".weight_scale_2"] = torch.tensor(ws2, dtype=torch.float32)
        sd[key + ".input_scale"] = rand_pos((), g, 1e-3, 2e-3)
        return dq_nvfp4(w, s, ws2)

    for e in range(E):
        ws2 = float(rand_pos((), g, 1e-3, 3e-3))
        rows = []
        for i, p in enumerate([gate, up] if gate else [up]):
            rows.append(proj(f"{prefix}{e}.{p}", I, H, ws2 if same_ws2 or i == 0 else ws2 * 0.75))
        f13.append(torch.cat(rows))
        f2.append(proj(f"{prefix}{e}.{down}", H, I, float(rand_pos((), g, 1e-3, 3e-3))))
    return sd, torch.stack(f13), torch.stack(f2)


def test_modelopt_nvfp4_qwen3_gated():
    prefix = "model.layers.0.mlp.experts."
    E, I, H = 8, 48, 64
    sd, f13, f2 = nvfp4_ckpt(prefix, E, I, H, ("gate_proj", "up_proj", "down_proj"))
    w = load_modelopt_nvfp4_experts(sd, prefix)
    assert w.format is fm.Format.NVFP4 and (w.intermediate_size, w.padded_intermediate_size) == (I, 48)
    d13, d2 = unpad_canonical(w)
    # global_scale = 1 / weight_scale_2: equal to the checkpoint's dequant up to fp32 rounding of 1/x
    torch.testing.assert_close(d13, f13, rtol=1e-6, atol=0)
    torch.testing.assert_close(d2, f2, rtol=1e-6, atol=0)
    assert float(w.input_scale) == max(float(v) for k, v in sd.items()
                                       if k.endswith("input_scale") and "down_proj" not in k)
    moe_vs_dequant_reference(w, d13, d2, 1e-5)


def test_modelopt_nvfp4_nemotron_h_non_gated():
    prefix = "backbone.layers.3.mixer.experts."
    sd, f13, f2 = nvfp4_ckpt(prefix, 4, 32, 64, (None, "up_proj", "down_proj"), seed=3)
    w = load_modelopt_nvfp4_experts(sd, prefix)
    assert w.activation is fm.Activation.RELU2 and w.padded_intermediate_size == 128
    d13, d2 = unpad_canonical(w)
    torch.testing.assert_close(d13, f13, rtol=1e-6, atol=0)
    moe_vs_dequant_reference(w, d13, d2, 1e-5)


def test_modelopt_nvfp4_different_shard_global_scales_warns():
    prefix = "model.layers.0.mlp.experts."
    sd, f13, f2 = nvfp4_ckpt(prefix, 4, 32, 64, ("gate_proj", "up_proj", "down_proj"), seed=4, same_ws2=False)
    with pytest.warns(UserWarning, match="weight_scale_2 differ"):
        w = load_modelopt_nvfp4_experts(sd, prefix)
    d13, d2 = unpad_canonical(w)
    torch.testing.assert_close(d13[:, :32], f13[:, :32], rtol=1e-6, atol=0)  # w1 holds the larger scale
    # w3's block scales were multiplied by 0.75 and rounded to E4M3: within 2^-4 of the value
    assert torch.all((d13[:, 32:] - f13[:, 32:]).abs() <= f13[:, 32:].abs() * 2.0**-4 + 1e-12)


def ct_fp8_ckpt(prefix, E, I, H, names, strategy, seed=0, scale_name="weight_scale", scale_dtype=torch.float32):
    """compressed-tensors FP8 (channel [N, 1] / block [ceil(N/128), K/128]) or native block FP8
    (DeepSeek / MiniMax: weight_scale_inv)."""
    g = _gen(seed)
    sd, f13, f2 = {}, [], []
    gate, up, down = names

    def proj(key, N, K):
        q = rand_e4m3((N, K), g)
        if strategy == "channel":
            s = rand_pos((N, 1), g, 1e-3, 4e-3).to(scale_dtype)
            f = q.float() * s.float()
        else:
            s = rand_pos((math.ceil(N / 128), math.ceil(K / 128)), g, 1e-3, 4e-3).to(scale_dtype)
            f = dq_block(q, s)
        sd[key + ".weight"], sd[f"{key}.{scale_name}"] = q, s
        return f

    for e in range(E):
        f13.append(torch.cat([proj(f"{prefix}{e}.{p}", I, H) for p in ([gate, up] if gate else [up])]))
        f2.append(proj(f"{prefix}{e}.{down}", H, I))
    return sd, torch.stack(f13), torch.stack(f2)


def test_compressed_tensors_fp8_channel_qwen3():
    prefix = "model.layers.0.mlp.experts."
    sd, f13, f2 = ct_fp8_ckpt(prefix, 8, 48, 64, ("gate_proj", "up_proj", "down_proj"), "channel",
                              scale_dtype=torch.bfloat16)
    w = load_compressed_tensors_fp8_experts(sd, prefix)
    assert w.format is fm.Format.FP8_CHANNEL
    d13, d2 = unpad_canonical(w)
    torch.testing.assert_close(d13, f13, rtol=0, atol=0)
    torch.testing.assert_close(d2, f2, rtol=0, atol=0)
    moe_vs_dequant_reference(w, d13, d2, 6e-2)


def test_compressed_tensors_fp8_block_qwen3():
    prefix = "model.layers.0.mlp.experts."
    sd, f13, f2 = ct_fp8_ckpt(prefix, 4, 192, 256, ("gate_proj", "up_proj", "down_proj"), "block", seed=5)
    w = load_compressed_tensors_fp8_experts(sd, prefix)
    assert w.format is fm.Format.FP8_BLOCK and w.padded_intermediate_size == 256
    d13, d2 = unpad_canonical(w)
    torch.testing.assert_close(d13, f13, rtol=0, atol=0)
    torch.testing.assert_close(d2, f2, rtol=0, atol=0)
    moe_vs_dequant_reference(w, d13, d2, 6e-2, T=19)


def test_compressed_tensors_fp8_tensor_strategy():
    prefix = "model.layers.0.mlp.experts."
    sd, f13, f2 = modelopt_fp8_ckpt(prefix, 4, 32, 64, ("gate_proj", "up_proj", "down_proj"), seed=6)
    w = load_compressed_tensors_fp8_experts(sd, prefix)
    assert w.format is fm.Format.FP8_TENSOR and w.input_scale is not None


def test_deepseek_v3_native_fp8_block_partial_block():
    # DeepSeek-V3 names; I = 192 is not a multiple of 128 (a TP shard cutting a block)
    prefix = "model.layers.3.mlp.experts."
    sd, f13, f2 = ct_fp8_ckpt(prefix, 8, 192, 256, ("gate_proj", "up_proj", "down_proj"), "block",
                              scale_name="weight_scale_inv", seed=7)
    w = load_fp8_block_experts(sd, prefix)
    assert w.format is fm.Format.FP8_BLOCK and w.w13.block_rows == 128
    d13, d2 = unpad_canonical(w)
    torch.testing.assert_close(d13, f13, rtol=0, atol=0)
    torch.testing.assert_close(d2, f2, rtol=0, atol=0)
    moe_vs_dequant_reference(w, d13, d2, 6e-2, T=19)


def test_minimax_m2_native_fp8_block():
    prefix = "model.layers.0.block_sparse_moe.experts."
    sd, f13, f2 = ct_fp8_ckpt(prefix, 4, 128, 256, ("w1", "w3", "w2"), "block", scale_name="weight_scale_inv", seed=8)
    w = load_experts(sd, prefix, checkpoint_format="fp8_block")
    d13, d2 = unpad_canonical(w)
    torch.testing.assert_close(d13, f13, rtol=0, atol=0)
    moe_vs_dequant_reference(w, d13, d2, 6e-2, T=19)


def gpt_oss_ckpt(prefix, E, I, H, seed=0):
    """gpt-oss MXFP4: fused blocks [E, N, K/32, 16] + UE8M0 scales [E, N, K/32], interleaved gate/up
    rows, bf16 biases. Returns the float weights in transformers' parameter layout too."""
    g = _gen(seed)
    b13 = torch.randint(0, 256, (E, 2 * I, H // 32, 16), generator=g, dtype=torch.uint8)
    s13 = torch.randint(118, 124, (E, 2 * I, H // 32), generator=g, dtype=torch.uint8)
    b2 = torch.randint(0, 256, (E, H, I // 32, 16), generator=g, dtype=torch.uint8)
    s2 = torch.randint(118, 124, (E, H, I // 32), generator=g, dtype=torch.uint8)
    bias13 = (torch.randn(E, 2 * I, generator=g) * 0.1).to(torch.bfloat16)
    bias2 = (torch.randn(E, H, generator=g) * 0.1).to(torch.bfloat16)
    sd = {prefix + "gate_up_proj_blocks": b13, prefix + "gate_up_proj_scales": s13, prefix + "gate_up_proj_bias": bias13,
          prefix + "down_proj_blocks": b2, prefix + "down_proj_scales": s2, prefix + "down_proj_bias": bias2}

    def dq(blocks, scales):  # transformers' convert_moe_packed_tensors, without the final transpose
        v = fp4_bytes_to_float(blocks.reshape(*blocks.shape[:-2], -1))
        v = v.reshape(*scales.shape, 32)
        return torch.ldexp(v, scales.to(torch.int32)[..., None] - 127).reshape(*blocks.shape[:2], -1)

    return sd, dq(b13, s13), dq(b2, s2), bias13, bias2


def test_gpt_oss_mxfp4_deinterleaves_gate_up_and_biases():
    prefix = "model.layers.0.mlp.experts."
    E, I, H = 4, 96, 64
    sd, f13_inter, f2, bias13, bias2 = gpt_oss_ckpt(prefix, E, I, H)
    w = load_gpt_oss_mxfp4_experts(sd, prefix)
    assert w.format is fm.Format.MXFP4 and w.activation is fm.Activation.SWIGLU_OAI
    assert w.act_params == fm.ActivationParams(alpha=1.702, beta=1.0, limit=7.0)
    d13, d2 = unpad_canonical(w)
    want13 = torch.cat([f13_inter[:, 0::2], f13_inter[:, 1::2]], 1)  # gate = even rows
    torch.testing.assert_close(d13, want13, rtol=0, atol=0)
    torch.testing.assert_close(d2, f2, rtol=0, atol=0)
    Ip = w.padded_intermediate_size
    torch.testing.assert_close(w.w13_bias[:, :I], bias13[:, 0::2].float(), rtol=0, atol=0)
    torch.testing.assert_close(w.w13_bias[:, Ip:Ip + I], bias13[:, 1::2].float(), rtol=0, atol=0)
    b13c = torch.cat([bias13[:, 0::2], bias13[:, 1::2]], 1)
    moe_vs_dequant_reference(w, want13, d2, 1e-5, b13=b13c, b2=bias2)


def test_bf16_per_expert_loader_and_quantize_on_load():
    g = _gen(9)
    prefix = "model.layers.0.mlp.experts."
    E, I, H = 4, 32, 64
    sd = {}
    for e in range(E):
        for p, shp in (("gate_proj", (I, H)), ("up_proj", (I, H)), ("down_proj", (H, I))):
            sd[f"{prefix}{e}.{p}.weight"] = torch.randn(shp, generator=g).to(torch.bfloat16)
    w = load_bf16_experts(sd, prefix)
    assert w.format is fm.Format.BF16 and w.w13.data.dtype == torch.bfloat16
    d13, d2 = unpad_canonical(w)
    torch.testing.assert_close(d13[1, :I], sd[f"{prefix}1.gate_proj.weight"].float(), rtol=0, atol=0)
    wq = load_bf16_experts(sd, prefix, format=fm.Format.NVFP4)
    assert wq.format is fm.Format.NVFP4
    moe_vs_dequant_reference(wq, *unpad_canonical(wq), 1e-5)


# ----------------------------------------------------------------------------------------------
# files, dispatch and detection
# ----------------------------------------------------------------------------------------------


def test_safetensors_file_and_indexed_directory(tmp_path):
    from safetensors.torch import save_file

    prefix = "model.layers.0.mlp.experts."
    sd, f13, f2 = nvfp4_ckpt(prefix, 4, 32, 64, ("gate_proj", "up_proj", "down_proj"), seed=10)
    other = {"model.layers.0.mlp.gate.weight": torch.randn(4, 64), "lm_head.weight": torch.randn(8, 64)}
    keys = sorted(sd)
    half = len(keys) // 2
    part1 = {k: sd[k].contiguous() for k in keys[:half]}
    part2 = {**{k: sd[k].contiguous() for k in keys[half:]}, **other}
    save_file(part1, str(tmp_path / "model-00001-of-00002.safetensors"))
    save_file(part2, str(tmp_path / "model-00002-of-00002.safetensors"))
    wm = {**{k: "model-00001-of-00002.safetensors" for k in part1}, **{k: "model-00002-of-00002.safetensors" for k in part2}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wm}))
    (tmp_path / "hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "NVFP4", "group_size": 16}}))

    lazy = safetensors_state_dict(tmp_path, prefix)
    assert set(lazy) == set(sd)
    w = load_experts_from_safetensors(tmp_path, prefix)  # format detected from hf_quant_config.json
    d13, d2 = unpad_canonical(w)
    torch.testing.assert_close(d13, f13, rtol=1e-6, atol=0)
    # one file of the two, explicit format: the experts are split over both, so it is incomplete
    with pytest.raises(CheckpointError, match="missing tensor|cannot find the expert projections"):
        load_experts_from_safetensors([tmp_path / "model-00002-of-00002.safetensors"], prefix,
                                      checkpoint_format="modelopt_nvfp4", num_experts=4)


@pytest.mark.parametrize("config, want", [
    ({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128], "fmt": "e4m3"}}, "fp8_block"),
    ({"quantization_config": {"quant_method": "compressed-tensors"}}, "compressed_tensors_fp8"),
    ({"quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": ["router"]}}, "gpt_oss_mxfp4"),
    ({"quantization": {"quant_algo": "FP8"}}, "modelopt_fp8"),
    ({"hf_quant_config": {"quantization": {"quant_algo": "NVFP4"}}}, "modelopt_nvfp4"),
    ({"quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}}, "modelopt_nvfp4"),
    ({"model_type": "qwen3_moe"}, "bf16"),
])
def test_detect_checkpoint_format(config, want):
    assert detect_checkpoint_format(config) == want
    assert want in CHECKPOINT_FORMATS


def test_detect_checkpoint_format_rejects_unsupported():
    with pytest.raises(ValueError, match="quant_method 'awq' is not supported"):
        detect_checkpoint_format({"quantization_config": {"quant_method": "awq"}})
    with pytest.raises(ValueError, match="W4A8_AWQ"):
        detect_checkpoint_format({"quantization": {"quant_algo": "W4A8_AWQ"}})
    with pytest.raises(ValueError, match=r"\[64, 64\]"):
        detect_checkpoint_format({"quantization_config": {"quant_method": "fp8", "weight_block_size": [64, 64]}})


# ----------------------------------------------------------------------------------------------
# bad input
# ----------------------------------------------------------------------------------------------


def test_missing_tensor_names_key_and_expected_shape():
    prefix = "model.layers.0.block_sparse_moe.experts."
    sd, _, _ = modelopt_fp8_ckpt(prefix, 4, 32, 64, ("w1", "w3", "w2"))
    del sd[prefix + "2.w3.weight"]
    with pytest.raises(CheckpointError, match=r"missing tensor 'model\.layers\.0\.block_sparse_moe\.experts\.2\.w3\.weight'"
                                              r".*expected shape \[32, 64\], dtype float8_e4m3fn"):
        load_modelopt_fp8_experts(sd, prefix)


def test_misshaped_tensor_names_key_and_expected_shape():
    prefix = "model.layers.3.mlp.experts."
    sd, _, _ = ct_fp8_ckpt(prefix, 4, 128, 256, ("gate_proj", "up_proj", "down_proj"), "block",
                           scale_name="weight_scale_inv")
    sd[prefix + "1.down_proj.weight_scale_inv"] = torch.ones(2, 2)
    with pytest.raises(CheckpointError, match=r"'model\.layers\.3\.mlp\.experts\.1\.down_proj\.weight_scale_inv' has "
                                              r"shape \[2, 2\]; expected \[2, 1\]"):
        load_fp8_block_experts(sd, prefix)
    sd2, _, _ = nvfp4_ckpt(prefix, 2, 32, 64, ("gate_proj", "up_proj", "down_proj"))
    sd2[prefix + "1.up_proj.weight"] = torch.zeros(32, 16, dtype=torch.uint8)
    with pytest.raises(CheckpointError, match=r"'model\.layers\.3\.mlp\.experts\.1\.up_proj\.weight' has shape "
                                              r"\[32, 16\]; expected \[32, 32\]"):
        load_modelopt_nvfp4_experts(sd2, prefix)


def test_wrong_dtype_and_missing_static_scale_and_bad_gpt_oss():
    prefix = "model.layers.0.mlp.experts."
    sd, _, _ = modelopt_fp8_ckpt(prefix, 2, 32, 64, ("gate_proj", "up_proj", "down_proj"))
    sd[prefix + "0.gate_proj.weight"] = sd[prefix + "0.gate_proj.weight"].float()
    with pytest.raises(CheckpointError, match=r"'model\.layers\.0\.mlp\.experts\.0\.gate_proj\.weight' has dtype "
                                              r"float32; expected float8_e4m3fn"):
        load_modelopt_fp8_experts(sd, prefix)
    sd, _, _ = modelopt_fp8_ckpt(prefix, 2, 32, 64, ("gate_proj", "up_proj", "down_proj"))
    del sd[prefix + "1.down_proj.input_scale"]
    with pytest.raises(CheckpointError, match=r"missing tensor 'model\.layers\.0\.mlp\.experts\.1\.down_proj\.input_scale'"):
        load_modelopt_fp8_experts(sd, prefix)
    sd, *_ = gpt_oss_ckpt(prefix, 2, 64, 64)
    sd[prefix + "down_proj_scales"] = sd[prefix + "down_proj_scales"][:, :, :1]
    with pytest.raises(CheckpointError, match=r"'model\.layers\.0\.mlp\.experts\.down_proj_scales' has shape "
                                              r"\[2, 64, 1\]; expected \[2, 64, 2\]"):
        load_gpt_oss_mxfp4_experts(sd, prefix)


def test_no_experts_and_bad_arguments():
    with pytest.raises(CheckpointError, match="cannot find the expert projections"):
        load_modelopt_fp8_experts({"x.weight": torch.zeros(1)}, "model.layers.0.mlp.experts")
    with pytest.raises(ValueError, match="checkpoint_format must be one of"):
        load_experts({}, "p.", checkpoint_format="gguf")
    prefix = "model.layers.0.mlp.experts."
    sd, _, _ = modelopt_fp8_ckpt(prefix, 2, 32, 64, ("gate_proj", "up_proj", "down_proj"))
    with pytest.raises(ValueError, match="is not gated but proj_names has a gate"):
        load_modelopt_fp8_experts(sd, prefix, activation=fm.Activation.RELU2)
    with pytest.raises(CheckpointError, match="missing tensor 'model.layers.0.mlp.experts.2.gate_proj.weight'"):
        load_modelopt_fp8_experts(sd, prefix, num_experts=3)
    with pytest.raises(CheckpointError, match="has shape"):
        load_compressed_tensors_fp8_experts({**sd, prefix + "0.up_proj.weight_scale": torch.ones(3, 3)}, prefix)
