#!/usr/bin/env bash
# Planned in the sixty-first session: the next session's second call (carry .peers). On an H200: the sixtieth
# session's next_call2.sh (issue 3's FP8 prefill harness points of the H200 entries; the FP4 prefill standing on the
# H200). On an H100: the kernel files' GPU tests (tests-core) under the sixty-first session's defaults (the rings'
# unsigned positions reach every warp-specialized kernel), then the GPU tests outside the kernel files.
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
export PYTHONPATH=$PWD/src
if [[ "$name" == *H200* ]]; then
  bash benchmarks/results/h100-2026-12-07-s60/next_call2.sh
else
  timeout 300 python3 -m pytest -q -rfE --tb=short -m gpu -n 4 -p no:cacheprovider --timeout 240 \
    tests/test_triton_moe.py tests/test_triton_fp4.py > $OUT/tests_core.txt 2>&1; echo "core rc=$?"
  tail -3 $OUT/tests_core.txt
  timeout 280 python3 -m pytest -q -rfE --tb=short -m gpu -n 4 -p no:cacheprovider --timeout 240 \
    --ignore tests/test_triton_moe.py --ignore tests/test_triton_fp4.py --ignore tests/test_distributed.py \
    --ignore tests/test_ws_fp4.py --ignore tests/test_ws_fp4_dec.py tests > $OUT/tests_rest.txt 2>&1
  echo "rest rc=$?"; tail -3 $OUT/tests_rest.txt
fi
