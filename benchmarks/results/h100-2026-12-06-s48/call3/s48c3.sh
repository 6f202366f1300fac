#!/usr/bin/env bash
# s48 call 3: DeepSeek-V3 TP8 FP8: the wide warp-specialized GEMM1 (2 x 128 columns, pipelined promotion) at 2048 and
# 8192 tokens for all three formats, and warp-specialized GEMM2 tiles against the held-activation GEMM2.
export PYTHONPATH=$PWD/src
W='{"warp_specialized": true, "block_m": 128, "block_n": 128, "block_k": 128, "num_warps": 4, "num_stages": 4, "pipelined_promotion": true}'
timeout 250 python3 benchmarks/kernel_breakdown.py --preset deepseek-v3-tp8 --weight-format fp8_channel,fp8_tensor,fp8_block \
  --tokens 2048,8192 --calls 10 --bw 3.1 --gemm1 "$W" > $OUT/kb_wide.txt 2>&1; echo "wide rc=$?"
timeout 250 python3 benchmarks/kernel_breakdown.py --preset deepseek-v3-tp8 --weight-format fp8_channel,fp8_tensor \
  --tokens 8192 --calls 10 --bw 3.1 --gemm1 "$W" \
  --gemm2 '{"warp_specialized": true, "block_m": 128, "block_n": 256, "block_k": 128, "num_warps": 4, "num_stages": 3, "n_tiles": 1, "group_m": 8}' \
  --gemm2 '{"warp_specialized": true, "block_m": 128, "block_n": 128, "block_k": 128, "num_warps": 4, "num_stages": 4, "n_tiles": 1, "group_m": 8}' \
  > $OUT/kb_g2.txt 2>&1; echo "g2 rc=$?"
grep -E "T=(2048|8192) |_gemm|_ws_gemm|_combine" $OUT/kb_wide.txt $OUT/kb_g2.txt | cut -c1-200
