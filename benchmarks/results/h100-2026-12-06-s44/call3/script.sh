#!/usr/bin/env bash
# s44 call 3: the warp-specialized prefill GEMMs' epilogue operands loaded ahead (set_ws_epilogue_prefetch, PREFETCH):
# same-bits GPU test, then the in-process A/B
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/env.txt; cat $OUT/env.txt
timeout 200 python3 -m pytest -v -rfE --tb=short -m gpu -n 4 -p no:cacheprovider --timeout 190 tests/test_ws_gemm.py \
  -k "prefetch" > $OUT/ws_gpu.txt 2>&1; echo "tests rc=$?"
grep -E "FAILED|ERROR|passed|failed" $OUT/ws_gpu.txt | cut -c1-300 | tail -8
timeout 330 python3 benchmarks/decode_ab.py --preset deepseek-v3,qwen3-30b-a3b,deepseek-v3-tp8 \
  --weight-format fp8_channel,fp8_tensor,bf16 --tokens 2048,8192 --settings default,wspf --rounds 2 --budget-s 2 \
  > $OUT/ab.txt 2>&1; echo "ab rc=$?"; grep -E "^preset|^[a-z]" $OUT/ab.txt | cut -c1-150 | tail -26
