#!/usr/bin/env bash
# s43 call 4: DeepSeek-V3 FP8 per channel, 8192 tokens: GEMM1's tile walk (group_m) for the narrow and the wide tile
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/env.txt; cat $OUT/env.txt
timeout 280 python3 benchmarks/kernel_breakdown.py --preset deepseek-v3 --weight-format fp8_channel --tokens 8192 \
  --calls 10 --bw 3.1 --gemm1 '{"group_m": 4}' --gemm1 '{"group_m": 16}' --gemm1 '{"group_m": 32}' \
  --gemm1 '{"block_n": 128, "group_m": 16}' --gemm1 '{"block_n": 128, "group_m": 32}' --gemm1 '{"block_n": 128, "group_m": 4}' \
  > $OUT/kb.txt 2>&1; echo "kb rc=$?"; grep -E "T=8192|_ws_gemm" $OUT/kb.txt
timeout 200 python3 benchmarks/kernel_breakdown.py --preset deepseek-v3 --weight-format fp8_channel --tokens 8192 \
  --calls 10 --bw 3.1 --gemm2 '{"group_m": 16}' --gemm2 '{"group_m": 32}' --gemm2 '{"group_m": 4}' \
  > $OUT/kb2.txt 2>&1; echo "kb2 rc=$?"; grep -E "T=8192|_ws_gemm" $OUT/kb2.txt
