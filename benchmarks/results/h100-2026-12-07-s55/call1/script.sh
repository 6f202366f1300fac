#!/usr/bin/env bash
# session 55 call 1: the align-zeroed GEMM1 amax on a GPU first (compiled, not interpreted), then next_call.sh
export PYTHONPATH=$PWD/src
timeout 70 python3 -m pytest -q -x -p no:cacheprovider --timeout 60 tests/test_triton_moe.py \
  -k "amax or fp8_tensor_dynamic" > $OUT/amax_tests.txt 2>&1; echo "amax tests rc=$?"; tail -3 $OUT/amax_tests.txt
bash benchmarks/results/h200-2026-12-07-s54/next_call.sh
