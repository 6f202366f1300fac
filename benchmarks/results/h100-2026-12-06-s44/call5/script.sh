#!/usr/bin/env bash
# s44 call 5: the tree as it stands (loader-fence opt-in removed, prefetch not kept): the warp-specialized GPU tests
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/env.txt
timeout 420 python3 -m pytest -q -rfE --tb=short -m gpu -n 4 -p no:cacheprovider --timeout 400 tests/test_ws_gemm.py \
  > $OUT/ws_gpu.txt 2>&1; echo "rc=$?"; tail -4 $OUT/ws_gpu.txt
