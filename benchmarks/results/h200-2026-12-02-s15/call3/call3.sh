#!/usr/bin/env bash
# session 15, call 3: the ws padding-half skip -- GPU tests (hang-guarded), then the harness A/B at prefill
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
W=$OUT/work; mkdir -p $W
t0=$(date +%s)
timeout 300 python3 -m pytest -q -rfE --tb=short -m gpu -n 3 -p no:cacheprovider --timeout 150 tests/test_ws_gemm.py > $OUT/ws_tests.txt 2>&1
rc=$?; echo "ws tests rc=$rc $(( $(date +%s)-t0 )) s" | tee -a $OUT/ws_tests.txt
if [[ $rc == 0 ]]; then
  t0=$(date +%s)
  OUT=$W/h PEERS=sglang,fusedmoe,fusedmoe-ws,fusedmoe-ws-noskip PLAN_ARGS="--dtypes bf16 fp8_tensor fp8_channel fp8_block --tokens 512 2048 8192" \
    PRECOMPILE_ARGS="--dtypes bf16,fp8_tensor,fp8_channel,fp8_block --tokens 512,2048,8192" BUDGET_S=240 timeout 400 bash benchmarks/harness_run.sh > $OUT/harness_ab.txt 2>&1
  echo "harness rc=$? $(( $(date +%s)-t0 )) s" | tee -a $OUT/harness_ab.txt
  cp $W/h/peers.jsonl $OUT/peers_ab.jsonl
fi
tar czf $OUT/work.tgz -C $W .
tail -3 $OUT/ws_tests.txt; grep -A12 "^summary" $OUT/harness_ab.txt | cut -c1-190
