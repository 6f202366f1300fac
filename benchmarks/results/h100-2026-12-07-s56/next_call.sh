#!/usr/bin/env bash
# Planned in the fifty-sixth session: the next session's first call (carry .peers). On either GPU, ~200 s: the
# GEMM2 on-load quantization of the FP8 per-token intermediate (built without a GPU in the fifty-sixth session,
# opt-in) -- its GPU test (same bits as the quantization launch, eager and in a CUDA graph), then the layer with it
# against the default at 1 / 8 tokens (decode_ab's qload) and a one-token breakdown with it. On an H200 then (~220 s):
# issue 3's harness at the FP8 prefill points whose H200 entries changed in the fifty-fourth session (the one point
# behind SGLang, DeepSeek-V3 FP8 per channel at 8192 tokens, 0.89x before them).
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
export PYTHONPATH=$PWD/src
bw=3.1; [[ "$name" == *H200* ]] && bw=4.3
timeout 150 python3 -m pytest -q -rfE --tb=short -m gpu -p no:cacheprovider tests/test_triton_moe.py \
  -k "gemm2_quant_on_load" > $OUT/t_qload.txt 2>&1; echo "t_qload rc=$?"; tail -3 $OUT/t_qload.txt
timeout 130 python3 benchmarks/decode_ab.py --preset deepseek-v3-tp8,qwen3-30b-a3b,nemotron-nano,minimax-m2,mixtral-8x7b,deepseek-v3 \
  --weight-format fp8_channel,fp8_block --tokens 1,8 --settings default,qload --rounds 3 --budget-s 0.2 \
  > $OUT/ab_qload.txt 2>&1
echo "ab rc=$?"; cut -c1-110 $OUT/ab_qload.txt
FUSEDMOE_GEMM2_QLOAD=1 timeout 60 python3 benchmarks/kernel_breakdown.py --preset qwen3-30b-a3b,deepseek-v3-tp8 \
  --weight-format fp8_channel,fp8_block --tokens 1 --calls 10 --bw $bw > $OUT/kb_qload.txt 2>&1; echo "kb rc=$?"
grep -E "floor|_kernel" $OUT/kb_qload.txt | grep -v Warn | cut -c1-110
if [[ "$name" == *H200* ]]; then
  P="--models dsv3,dsv3_tp8,minimax_m2.5 --dtypes fp8_channel,fp8_tensor,fp8_block --tokens 2048,8192"
  export PEERS=sglang,fusedmoe BUDGET_S=90 PLAN_ARGS="${P//,/ }" PRECOMPILE_ARGS="$P"   # the harness: spaces
  OUT=$OUT/h timeout 110 bash benchmarks/harness_run.sh prep > $OUT/h_prep.txt 2>&1; echo "prep rc=$?"
  OUT=$OUT/h timeout 110 bash benchmarks/harness_run.sh measure > $OUT/h_log.txt 2>&1; echo "harness rc=$?"
  python3 benchmarks/peer_ratio.py $OUT/h/peers.jsonl fusedmoe > $OUT/ratio.txt 2>&1; grep -E "^fp8" $OUT/ratio.txt
  (cd $OUT && tar czf h.tgz h && rm -rf h)
fi
