#!/usr/bin/env bash
# s43 call 3: issue 3's worst H100 point (DeepSeek-V3 FP8 per channel, 8192 tokens): per-kernel times of the tuned
# narrow GEMM1 tile vs the wide 128 x (128 + 128) one (with / without pipelined promotion), then Nsight on the wide one
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/env.txt; cat $OUT/env.txt
timeout 200 python3 benchmarks/kernel_breakdown.py --preset deepseek-v3 --weight-format fp8_channel --tokens 8192 \
  --calls 10 --bw 3.1 --gemm1 '{"block_n": 128}' --gemm1 '{"block_n": 128, "pipelined_promotion": false}' \
  --gemm1 '{"pipelined_promotion": false}' > $OUT/kb.txt 2>&1; echo "kb rc=$?"; tail -40 $OUT/kb.txt
NCU_TIMEOUT_S=300 NCU_POINTS=deepseek-v3:fp8_channel:8192 NCU_GEMM1='{"block_n": 128}' NCU_TAG=wide NCU_KERNELS=_ws \
  bash benchmarks/device_run.sh ncu > $OUT/ncu_run.txt 2>&1; echo "ncu rc=$?"; tail -5 $OUT/ncu_run.txt
mkdir -p /tmp/n && tar xzf $OUT/ncu_wide.tgz -C /tmp/n && cat /tmp/n/ncu/*summary.txt | head -80
