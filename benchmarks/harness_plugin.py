"""fusedmoe as a plugin of the shared peer harness (../shared/bench/peers/run_peers.py).

    PYTHONPATH=src python3 ../shared/bench/peers/run_peers.py --plugin benchmarks/harness_plugin.py --out DIR

Uses the harness's own quantized weights and scales (so both peers compute on identical data),
wrapped as fm.ExpertWeights without re-quantization, and runs the public ``fm.fused_moe`` with the
``triton`` backend. The harness's I values are multiples of 16, so no padding is needed.
"""

import torch

import fusedmoe as fm

_FMT = {
    "bf16": (fm.Format.BF16, fm.Format.BF16),
    "fp8_tensor": (fm.Format.FP8_TENSOR, fm.Format.FP8_TENSOR),
    "fp8_channel": (fm.Format.FP8_CHANNEL, fm.Format.FP8_TOKEN),
    "fp8_block": (fm.Format.FP8_BLOCK, fm.Format.FP8_BLOCK),
}
_ACT = {"swiglu": fm.Activation.SWIGLU, "relu2": fm.Activation.RELU2}


def _weights(case):
    wf, _ = _FMT[case.dtype]
    act = _ACT[case.activation]
    if wf is fm.Format.BF16:
        q13 = fm.QuantizedTensor(case.w1.contiguous(), wf)
        q2 = fm.QuantizedTensor(case.w2.contiguous(), wf)
        extra = {}
    else:
        br = 128 if wf is fm.Format.FP8_BLOCK else 1
        s1 = case.w1_scale.float().reshape(-1) if wf is fm.Format.FP8_TENSOR else case.w1_scale.float()
        s2 = case.w2_scale.float().reshape(-1) if wf is fm.Format.FP8_TENSOR else case.w2_scale.float()
        q13 = fm.QuantizedTensor(case.w1_q.contiguous(), wf, s1.contiguous(), block_rows=br)
        q2 = fm.QuantizedTensor(case.w2_q.contiguous(), wf, s2.contiguous(), block_rows=br)
        extra = {}
        if wf is fm.Format.FP8_TENSOR:
            extra = dict(input_scale=case.a1_scale.float().reshape(1), intermediate_scale=case.a2_scale.float().reshape(1))
    return fm.ExpertWeights(w13=q13, w2=q2, activation=act, intermediate_size=case.I, **extra), act


def make_fusedmoe(case):
    if case.dtype not in _FMT:
        raise NotImplementedError(f"{case.dtype}: not a harness format fusedmoe maps")
    weights, act = _weights(case)
    backend = "triton" if case.device.type == "cuda" else "auto"

    def prepare(M):
        return {"backend": backend}

    def run(x, topk_weights, topk_ids):
        return fm.fused_moe(x, weights, fm.TopK(topk_ids, topk_weights), activation=act, backend=backend)

    return prepare, run


PEERS = {"fusedmoe": make_fusedmoe}
