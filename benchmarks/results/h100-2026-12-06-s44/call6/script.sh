#!/usr/bin/env bash
# s44 call 6: neighbouring programs' loaders in loose lockstep (set_ws_sync / FUSEDMOE_WS_SYNC, SYNC): same bits, then
# per-kernel times of DeepSeek-V3 (narrow and wide GEMM1 tiles) and Qwen3-30B FP8 per channel at 8192 tokens
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/env.txt; cat $OUT/env.txt
timeout 170 python3 -m pytest -q -rfE --tb=short -m gpu -n 4 -p no:cacheprovider --timeout 160 tests/test_ws_gemm.py \
  -k "ws_sync" > $OUT/ws_gpu.txt 2>&1; echo "tests rc=$?"; grep -E "FAILED|ERROR|passed|failed" $OUT/ws_gpu.txt | cut -c1-300 | tail -6
for sy in 0 8 16; do
  FUSEDMOE_WS_SYNC=$sy timeout 70 python3 benchmarks/kernel_breakdown.py --preset deepseek-v3 --weight-format fp8_channel \
    --tokens 8192 --calls 10 --bw 3.1 --gemm1 '{"block_n": 128}' > $OUT/kb_dsv3_sync$sy.txt 2>&1
  echo "== dsv3 sync=$sy"; grep -E "T=8192|_ws_gemm" $OUT/kb_dsv3_sync$sy.txt | cut -c1-140
done
for sy in 0 8; do
  FUSEDMOE_WS_SYNC=$sy timeout 40 python3 benchmarks/kernel_breakdown.py --preset qwen3-30b-a3b --weight-format fp8_channel \
    --tokens 8192 --calls 10 --bw 3.1 > $OUT/kb_qwen_sync$sy.txt 2>&1
  echo "== qwen sync=$sy"; grep -E "T=8192|_ws_gemm" $OUT/kb_qwen_sync$sy.txt | cut -c1-140
done
