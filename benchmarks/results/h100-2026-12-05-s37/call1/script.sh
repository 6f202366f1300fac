#!/usr/bin/env bash
# s37 call 1: the pipelined promotion's first GPU run (smoke in own processes, same-bits test, FP8 prefill A/B
# in the shared harness against plain fusedmoe and SGLang).
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
cp .calls/s37_c1.sh "$OUT/script.sh"
T0=$(date +%s); el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
timeout 150 python3 benchmarks/smoke_gluon.py --jobs 2 --timeout 120 --only wspipe-fp8c-prefill,wspipe-fp8t-relu2-prefill \
  > $OUT/smoke.txt 2>&1
el "smoke rc=$?"; tail -6 $OUT/smoke.txt | cut -c1-200
timeout 150 python3 -m pytest -m gpu -p no:cacheprovider --timeout 140 -q -rfE tests/test_ws_gemm.py -k pipelined \
  > $OUT/pipe_test.txt 2>&1
el "test rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $OUT/pipe_test.txt | head -8 | cut -c1-200
left=$(( 575 - ($(date +%s)-T0) ))
mkdir -p "$OUT/h"
OUT="$OUT/h" PEERS=sglang,fusedmoe,fusedmoe-wspipe PLAN_ARGS="--dtypes fp8_tensor fp8_channel --tokens 512 2048 8192" \
  PRECOMPILE_ARGS="--dtypes fp8_tensor,fp8_channel --tokens 512,2048,8192" BUDGET_S=$(( left - 150 )) \
  timeout $left bash benchmarks/harness_run.sh > $OUT/harness_tail.txt 2>&1
el "harness rc=$?"
cp "$OUT/h/peers.log" "$OUT/peers.log" 2>/dev/null
(cd "$OUT" && tar czf h.tgz h && rm -rf h)
tail -40 $OUT/peers.log | cut -c1-170
