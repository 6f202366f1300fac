#!/usr/bin/env bash
# s37 call 5: the pipelined promotion by config (KernelConfig.pipelined_promotion) on the GPU -- its same-bits test
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
cp .calls/s37_c5.sh "$OUT/script.sh"
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 170 python3 -m pytest -m gpu -p no:cacheprovider --timeout 160 -q -rfE tests/test_ws_gemm.py -k pipelined \
  > $OUT/pipe_test.txt 2>&1
echo "rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $OUT/pipe_test.txt | head -8 | cut -c1-300
