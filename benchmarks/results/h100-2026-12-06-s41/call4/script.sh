#!/usr/bin/env bash
# s41 call 4: GPU tests after the table change (FP4 decode kernel, warp-specialized GEMMs, the FP4 Triton kernels)
export PYTHONPATH=$PWD/src
timeout 280 python3 -m pytest -q -rfE --tb=short -m gpu -n 4 -p no:cacheprovider --timeout 200 tests/test_ws_fp4_dec.py \
  tests/test_ws_gemm.py > $OUT/ws_gpu.txt 2>&1; echo "rc=$?"; tail -4 $OUT/ws_gpu.txt
timeout 150 python3 -m pytest -q -rfE --tb=short -m gpu -n 4 -p no:cacheprovider --timeout 140 tests/test_triton_fp4.py \
  -k "real or shape or gpt_oss or nemotron or decode" > $OUT/fp4_gpu.txt 2>&1; echo "rc=$?"; tail -4 $OUT/fp4_gpu.txt
