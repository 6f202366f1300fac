#!/usr/bin/env bash
# session 16, call 1: reciprocal re-quantization same-bits on the GPU; FP8 prefill A/B (default, ws, rcpq)
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
W=$OUT/work; mkdir -p $W
t0=$(date +%s)
timeout 220 python3 -m pytest -q -rfE --tb=short -m gpu -n 3 -p no:cacheprovider --timeout 200 tests/test_triton_moe.py \
  tests/test_ws_gemm.py -k "reciprocal" > $OUT/tests_rcp.txt 2>&1; echo "tests rc=$? $(( $(date +%s)-t0 )) s" | tee -a $OUT/tests_rcp.txt
t0=$(date +%s)
OUT=$W/h PEERS=sglang,fusedmoe,fusedmoe-ws,fusedmoe-rcpq PLAN_ARGS="--dtypes fp8_tensor fp8_channel fp8_block --tokens 512 2048 8192" \
  PRECOMPILE_ARGS="--dtypes fp8_tensor,fp8_channel,fp8_block --tokens 512,2048,8192" \
  BUDGET_S=270 timeout 420 bash benchmarks/harness_run.sh > $OUT/harness_ab.txt 2>&1; echo "harness rc=$? $(( $(date +%s)-t0 )) s" | tee -a $OUT/harness_ab.txt
cp $W/h/peers.txt $OUT/peers_ab.txt 2>/dev/null; cp $W/h/peers.jsonl $OUT/peers_ab.jsonl 2>/dev/null
tar czf $OUT/work.tgz -C $W .
grep -v "warner\|Warning" $OUT/tests_rcp.txt | tail -6; grep -A8 "^summary" $OUT/harness_ab.txt | cut -c1-200
