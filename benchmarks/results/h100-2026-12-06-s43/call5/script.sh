#!/usr/bin/env bash
# s43 call 5: the FP4 prefill GPU tests on the tree with the opt-ins removed; DeepSeek-V3 FP8 per channel 8192 tokens:
# more ring stages for the (L2 / DRAM-latency-bound) FP8 GEMMs
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/env.txt; cat $OUT/env.txt
timeout 200 python3 -m pytest -v -rfE --tb=short -m gpu -n 3 -p no:cacheprovider --timeout 90 tests/test_ws_fp4.py \
  > $OUT/ws_fp4_gpu.txt 2>&1; echo "tests rc=$?"; grep -E "FAILED|ERROR|passed|failed" $OUT/ws_fp4_gpu.txt | tail -5
timeout 250 python3 benchmarks/kernel_breakdown.py --preset deepseek-v3 --weight-format fp8_channel --tokens 8192 \
  --calls 10 --bw 3.1 --gemm1 '{"num_stages": 5}' --gemm1 '{"num_stages": 6}' --gemm1 '{"num_stages": 3}' \
  > $OUT/kb.txt 2>&1; echo "kb rc=$?"; grep -E "T=8192|_ws_gemm" $OUT/kb.txt
timeout 150 python3 benchmarks/kernel_breakdown.py --preset deepseek-v3 --weight-format fp8_channel --tokens 8192 \
  --calls 10 --bw 3.1 --gemm2 '{"num_stages": 5}' --gemm2 '{"num_stages": 3}' \
  > $OUT/kb2.txt 2>&1; echo "kb2 rc=$?"; grep -E "T=8192|_ws_gemm" $OUT/kb2.txt
