#!/usr/bin/env bash
# s44 call 1: the X_GATHER loader-fence opt-in's bits (never run), then the in-process A/B wsxg vs wsxg+wsxglf
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/env.txt; cat $OUT/env.txt
timeout 150 python3 -m pytest -v -rfE --tb=short -m gpu -n 4 -p no:cacheprovider --timeout 120 tests/test_ws_gemm.py \
  -k "x_gather" > $OUT/ws_gpu.txt 2>&1; echo "tests rc=$?"
grep -E "FAILED|ERROR|passed|failed" $OUT/ws_gpu.txt | cut -c1-200 | tail -8
timeout 380 python3 benchmarks/decode_ab.py --preset deepseek-v3,qwen3-30b-a3b,mixtral-8x7b \
  --weight-format fp8_channel,fp8_tensor --tokens 2048,8192 --settings default,wsxg,wsxg+wsxglf,nowsxg --rounds 1 --budget-s 2 \
  > $OUT/ab.txt 2>&1; echo "ab rc=$?"; grep -E "^preset|^[a-z]" $OUT/ab.txt | cut -c1-150 | tail -22
