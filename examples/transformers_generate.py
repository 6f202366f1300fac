#!/usr/bin/env python3
"""Run a transformers MoE model through fusedmoe, optionally quantized, and generate.

Examples::

    # CPU, seconds: a tiny random model of one architecture
    python examples/transformers_generate.py --tiny qwen3_moe
    python examples/transformers_generate.py --tiny nemotron_h --quantize fp8_tensor

    # GPU: a real checkpoint (local directory or a Hub id already in the cache)
    python examples/transformers_generate.py --model Qwen/Qwen3-30B-A3B --prompt "The capital of France is"

    # GPU: real shapes with random weights (no download of weights; the config must be local or
    # cached); --layers keeps the first N decoder layers to fit / to time quickly
    python examples/transformers_generate.py --config Qwen/Qwen3-30B-A3B --layers 8 --quantize fp8_block

It prints the chosen fusedmoe backend per format, the generated tokens of the default experts
implementation and of fusedmoe (greedy; whether they are identical), and the per-token decode
latency of both: ``(time(N new tokens) - time(1 new token)) / (N - 1)``, median of ``--repeats``
runs, with CUDA synchronization. Nothing here is a performance claim until you run it.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
import warnings

import torch


TINY = {
    "qwen3_moe": ("Qwen3MoeConfig", dict(hidden_size=128, intermediate_size=256, moe_intermediate_size=64,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                         head_dim=32, num_experts=8, num_experts_per_tok=2)),
    "mixtral": ("MixtralConfig", dict(hidden_size=128, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                                      num_local_experts=8, num_experts_per_tok=2)),
    "minimax_m2": ("MiniMaxM2Config", dict(hidden_size=128, intermediate_size=64, num_hidden_layers=2,
                                           num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                                           num_local_experts=8, num_experts_per_tok=2, bos_token_id=1,
                                           eos_token_id=2)),
    "deepseek_v3": ("DeepseekV3Config", dict(hidden_size=128, intermediate_size=256, moe_intermediate_size=64,
                                             num_hidden_layers=2, first_k_dense_replace=1, n_routed_experts=16,
                                             n_shared_experts=1, num_experts_per_tok=4, n_group=4, topk_group=2,
                                             routed_scaling_factor=2.5, q_lora_rank=None, kv_lora_rank=32,
                                             qk_nope_head_dim=16, qk_rope_head_dim=16, v_head_dim=16,
                                             num_attention_heads=4, num_key_value_heads=4)),
    "gpt_oss": ("GptOssConfig", dict(hidden_size=128, intermediate_size=64, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                                     num_local_experts=8, num_experts_per_tok=2)),
    "nemotron_h": ("NemotronHConfig", dict(hidden_size=128, layers_block_type=["moe", "full_attention", "moe"],
                                           n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=64,
                                           moe_shared_expert_intermediate_size=128, moe_latent_size=64,
                                           routed_scaling_factor=5.0, num_attention_heads=4,
                                           num_key_value_heads=2, head_dim=32, intermediate_size=256)),
    "llama4": ("Llama4TextConfig", dict(hidden_size=128, intermediate_size=64, intermediate_size_mlp=256,
                                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                        head_dim=32, num_local_experts=8, num_experts_per_tok=1)),
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--tiny", choices=sorted(TINY), help="a tiny random model of this architecture (CPU friendly)")
    src.add_argument("--model", help="a checkpoint directory or Hub id (weights loaded with from_pretrained)")
    src.add_argument("--config", help="a config directory or Hub id: real shapes, random weights")
    p.add_argument("--layers", type=int, default=None, help="keep only the first N decoder layers (--config)")
    p.add_argument("--quantize", default="none",
                   help="fusedmoe weight format for the experts: none, fp8_tensor, fp8_channel, fp8_block, mxfp8, "
                        "nvfp4, mxfp4")
    p.add_argument("--backend", default="auto", help="fusedmoe backend (auto, triton, reference)")
    p.add_argument("--dtype", default=None, choices=["bf16", "fp16", "fp32"],
                   help="model dtype (default: bf16 on CUDA, fp32 on CPU)")
    p.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    p.add_argument("--prompt", default=None, help="text prompt (needs the tokenizer); default: random token ids")
    p.add_argument("--prompt-len", type=int, default=16, help="length of the random prompt")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3, help="timed runs per measurement (median)")
    p.add_argument("--no-compare", action="store_true", help="skip the default implementation")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def build_model(args, device, dtype):
    import transformers as tf

    tok = None
    if args.tiny:
        cls_name, kw = TINY[args.tiny]
        cfg = getattr(tf, cls_name)(vocab_size=512, **kw)
    elif args.config:
        cfg = tf.AutoConfig.from_pretrained(args.config)
    else:
        cfg = None
    if cfg is not None and args.layers is not None:
        text = cfg.get_text_config()
        if hasattr(text, "layers_block_type") and text.layers_block_type is not None:
            text.layers_block_type = list(text.layers_block_type)[: args.layers]
        text.num_hidden_layers = args.layers
        if hasattr(text, "layer_types") and getattr(text, "layer_types", None) is not None and \
                not hasattr(text, "layers_block_type"):
            text.layer_types = list(text.layer_types)[: args.layers]
    kw = {}
    if getattr(cfg, "model_type", None) == "gpt_oss" or "gpt-oss" in str(args.model or args.config).lower():
        kw["attn_implementation"] = "eager"  # gpt-oss's sinks; sdpa is not available for it
    torch.manual_seed(args.seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if cfg is not None:
            if cfg.model_type == "llama4_text":
                model = tf.Llama4ForCausalLM(cfg)
            else:
                with torch.device(device):
                    model = tf.AutoModelForCausalLM.from_config(cfg, dtype=dtype, **kw)
            _visible_experts(model)
        else:
            model = tf.AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype, **kw)
            if args.prompt:
                tok = tf.AutoTokenizer.from_pretrained(args.model)
    return model.to(device=device, dtype=dtype).eval(), tok


def _visible_experts(model):
    """Random weights: give the experts std 1/sqrt(fan_in) so they matter (the default init makes
    them negligible next to the residual stream)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 3 and ".experts." in name:
                owner = model.get_submodule(name.rsplit(".", 1)[0])
                transposed = getattr(owner, "is_transposed", False) or "Llama4" in type(owner).__name__
                p.normal_(0.0, (p.shape[1] if transposed else p.shape[2]) ** -0.5)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def per_token_latency(model, ids, n_new, repeats, device):
    """Decode latency per token: for each repeat, ``(time(n_new tokens) - time(1 token)) /
    (n_new - 1)`` (the prefill cancels); the median over repeats. Also the median time of the
    prefill plus one token. Greedy; ``min_new_tokens`` keeps EOS from ending a run early."""

    def timed(n):
        sync(device)
        t = time.perf_counter()
        with torch.no_grad():
            model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)
        sync(device)
        return time.perf_counter() - t

    with torch.no_grad():  # warm-up (kernel compilation and autotuning, weight conversion)
        out = model.generate(ids, max_new_tokens=n_new, min_new_tokens=n_new, do_sample=False, pad_token_id=0)
    per_token, first = [], []
    for _ in range(repeats):
        t1 = timed(1)
        tn = timed(n_new)
        first.append(t1)
        per_token.append((tn - t1) / max(n_new - 1, 1))
    return out, statistics.median(per_token), statistics.median(first)


def main(argv=None):
    args = parse_args(argv)
    import transformers  # noqa: F401  (fail early with a clear message if missing)

    import fusedmoe as fm
    import fusedmoe.integrations as fi

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[
        args.dtype or ("bf16" if device.type == "cuda" else "fp32")]
    fi.register()  # before the model is built
    model, tok = build_model(args, device, dtype)
    print(f"model: {type(model).__name__}, {sum(p.numel() for p in model.parameters()) / 1e9:.3f} B parameters, "
          f"{dtype}, {device}")

    if tok is not None:
        ids = tok([args.prompt] * args.batch, return_tensors="pt").input_ids.to(device)
    else:
        g = torch.Generator().manual_seed(args.seed)
        vocab = model.config.get_text_config().vocab_size
        ids = torch.randint(0, vocab, (args.batch, args.prompt_len), generator=g).to(device)

    results = {}
    if not args.no_compare:
        impl = None
        if hasattr(model, "get_experts_implementation"):
            impl = model.get_experts_implementation().get("")
        out, lat, first = per_token_latency(model, ids, args.max_new_tokens, args.repeats, device)
        results["default"] = (out, lat, first)
        print(f"default ({impl or 'module forward'}): {lat * 1e3:.3f} ms/token decode, {first * 1e3:.1f} ms prefill+1")

    if args.quantize.lower() != "none":
        fi.quantize_model(model, format=args.quantize, backend=args.backend, release_parameters=args.no_compare)
    else:
        fi.enable(model, backend=args.backend)
    rows = fi.describe_experts(model)
    first_w = fi.prepare_experts(fi.find_experts(model)[0][1])
    req = fm.backends.MoERequest.from_weights(first_w)
    chosen = fm.backends.select(req, device) if args.backend == "auto" else (args.backend, "requested")
    print(f"fusedmoe: {len(rows)} experts modules, {rows[0]['activation']} experts, weights {rows[0]['format']}, "
          f"backend {chosen[0]} ({chosen[1]})")
    out, lat, first = per_token_latency(model, ids, args.max_new_tokens, args.repeats, device)
    results["fusedmoe"] = (out, lat, first)
    print(f"fusedmoe: {lat * 1e3:.3f} ms/token decode, {first * 1e3:.1f} ms prefill+1")

    if "default" in results:
        a, b = results["default"][0], results["fusedmoe"][0]
        same = torch.equal(a, b)
        print(f"greedy tokens identical to the default implementation: {same}"
              + ("" if same or args.quantize.lower() == "none" else " (expected: the experts are quantized)"))
        print(f"decode speed-up: {results['default'][1] / results['fusedmoe'][1]:.2f}x")
    gen = results["fusedmoe"][0][0, ids.shape[1]:]
    print("generated:", tok.decode(gen) if tok is not None else gen.tolist())
    return 0


if __name__ == "__main__":
    sys.exit(main())
