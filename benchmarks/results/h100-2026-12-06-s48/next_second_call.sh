#!/usr/bin/env bash
# The next session's second device call (BENCH_COMMANDS.md item 0; the first is the full harness:
# benchmarks/results/h100-2026-12-06-s46/call1/harness_branch.sh). Carry .peers; copy $OUT/triton_moe_tuned.json back
# into src/fusedmoe/configs/ if a tune row says "vs table" > 1.00x.
#   DeepSeek-V3 TP8: the tuner's new short-K pairs (the wide warp-specialized GEMM1 with the held-activation GEMM2)
#   at FP8 2048 tokens and BF16 2048 / 8192 on this card; on an H200 first the wide GEMM1 by hand at 8192 against the
#   H200 entries (the H100 gained 1.08-1.11x per layer); Nemotron-Nano FP8 GEMM1's 256-column tile at 8192.
export PYTHONPATH=$PWD/src
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$card" | tee $OUT/env.txt
W='{"warp_specialized": true, "block_m": 128, "block_n": 128, "block_k": 128, "num_warps": 4, "num_stages": 4, "pipelined_promotion": true}'
if [[ $card == *H200* ]]; then
  timeout 120 python3 benchmarks/kernel_breakdown.py --preset deepseek-v3-tp8 --weight-format fp8_channel,fp8_tensor,fp8_block \
    --tokens 8192 --calls 10 --bw 4.4 --gemm1 "$W" > $OUT/kb_tp8_wide.txt 2>&1; echo "kb rc=$?"
  grep -E "T=8192 |_gemm1_kernel|_ws_gemm_kernel" $OUT/kb_tp8_wide.txt | cut -c1-160
fi
TUNE_OUT=$PWD/src/fusedmoe/configs/triton_moe_tuned.json TUNE_MAX_CANDIDATES=8 timeout 330 bash benchmarks/device_run.sh \
  "tune:deepseek-v3-tp8:fp8_tensor,fp8_channel,fp8_block:110:2048" "tune:deepseek-v3-tp8:bf16:90:2048,8192" \
  > $OUT/tune.txt 2>&1; echo "tune rc=$?"
cp src/fusedmoe/configs/triton_moe_tuned.json $OUT/
timeout 120 python3 benchmarks/kernel_breakdown.py --preset nemotron-nano --weight-format fp8_channel,fp8_tensor \
  --tokens 8192 --calls 10 --bw 3.1 \
  --gemm1 '{"warp_specialized": true, "block_m": 128, "block_n": 256, "block_k": 128, "num_warps": 4, "num_stages": 3}' \
  --gemm1 '{"warp_specialized": true, "block_m": 128, "block_n": 256, "block_k": 128, "num_warps": 4, "num_stages": 4}' \
  > $OUT/kb_nem.txt 2>&1; echo "kb rc=$?"
grep -E "│ deepse" $OUT/tune.txt
grep -E "T=8192 |_ws_gemm" $OUT/kb_nem.txt | cut -c1-200
