#!/usr/bin/env bash
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
timeout 150 python3 benchmarks/kernel_breakdown.py --preset deepseek-v3 --weight-format fp8_channel,fp8_tensor,fp8_block --tokens 2048,8192 --calls 5 --bw 4.3 > $OUT/kb_dsv3.txt 2>&1
echo "kb_dsv3 rc=$?"; grep -E "T=|total|gemm|GEMM" $OUT/kb_dsv3.txt | head -40
timeout 100 python3 benchmarks/kernel_breakdown.py --preset gpt-oss-120b,nemotron-nano --weight-format mxfp4,nvfp4 \
  --tokens 1 --calls 30 --bw 4.3 --gemm1 '{"num_stages": 4}' --gemm2 '{"num_stages": 4}' > $OUT/kb_st4.txt 2>&1
timeout 100 python3 benchmarks/kernel_breakdown.py --preset gpt-oss-120b,nemotron-nano --weight-format mxfp4,nvfp4 \
  --tokens 1 --calls 30 --bw 4.3 > $OUT/kb_def.txt 2>&1
echo "kb rc=$?"; grep -E "T=1 |_ws_fp4_dec" $OUT/kb_st4.txt $OUT/kb_def.txt
timeout 200 python3 -m pytest -q -rfE --tb=short -m gpu -p no:cacheprovider --timeout 140 tests/test_ws_fp4_dec.py \
  > $OUT/t_fp4_dec.txt 2>&1; echo "t_fp4_dec rc=$?"; tail -3 $OUT/t_fp4_dec.txt
