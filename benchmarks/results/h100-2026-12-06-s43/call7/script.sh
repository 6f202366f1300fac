#!/usr/bin/env bash
# s43 call 7: the warp-specialized 16-bit / FP8 prefill GEMMs reading their A rows by cp.async (set_ws_x_gather,
# X_GATHER; built this session): same-bits GPU tests, then the in-process A/B at 2048 / 8192 tokens
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/env.txt; cat $OUT/env.txt
timeout 150 python3 -m pytest -v -rfE --tb=short -m gpu -n 4 -p no:cacheprovider --timeout 120 tests/test_ws_gemm.py \
  -k "x_gather or padded_handoff or pipelined_promotion_same_bits" > $OUT/ws_gpu.txt 2>&1; echo "tests rc=$?"
grep -E "FAILED|ERROR|passed|failed" $OUT/ws_gpu.txt | cut -c1-200 | tail -8
timeout 300 python3 benchmarks/decode_ab.py --preset deepseek-v3,qwen3-30b-a3b,mixtral-8x7b \
  --weight-format fp8_channel,fp8_tensor,fp8_block --tokens 2048,8192 --settings default,wsxg --rounds 1 --budget-s 2 \
  > $OUT/ab.txt 2>&1; echo "ab rc=$?"; grep -E "^preset|^[a-z]" $OUT/ab.txt | cut -c1-150 | tail -22
