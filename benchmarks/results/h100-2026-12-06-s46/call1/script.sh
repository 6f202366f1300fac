#!/usr/bin/env bash
# s46 call 2: FP4 prefill DYN and the lag: GPU same-bits tests, then FP4 decode_ab default vs wsdyn, then per-kernel
# times with FUSEDMOE_WS_LAG 0 / 2 (GEMM2 6 stages)
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/env.txt; cat $OUT/env.txt
timeout 200 python3 -m pytest -q -rfE --tb=short -m gpu -n 4 -p no:cacheprovider --timeout 180 tests/test_ws_fp4.py \
  tests/test_ws_gemm.py -k "dynamic_tiles_same_bits or lag" > $OUT/gpu_tests.txt 2>&1; echo "tests rc=$?"
grep -E "FAILED|ERROR|passed|failed" $OUT/gpu_tests.txt | cut -c1-300 | tail -8
timeout 170 python3 benchmarks/decode_ab.py --preset gpt-oss-120b,nemotron-super,nemotron-nano \
  --weight-format mxfp4,nvfp4 --tokens 2048,8192 --settings default,wsdyn --rounds 2 --budget-s 2 \
  > $OUT/ab_fp4.txt 2>&1; echo "ab rc=$?"; tail -16 $OUT/ab_fp4.txt
for l in 0 2; do
  FUSEDMOE_WS_LAG=$l timeout 70 python3 benchmarks/kernel_breakdown.py --preset deepseek-v3,qwen3-30b-a3b \
    --weight-format fp8_channel --tokens 2048,8192 --calls 10 --bw 3.1 --gemm2 '{"num_stages": 6}' \
    > $OUT/kb_lag$l.txt 2>&1; echo "== lag=$l rc=$?"; grep -E "T=|_ws_gemm|rror" $OUT/kb_lag$l.txt | cut -c1-140 | head -12
done
