#!/usr/bin/env bash
# session 15, call 1: W2-prefetch same-bits tests, decode A/B in the harness, BF16 ws tuning
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
W=$OUT/work; mkdir -p $W
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
t0=$(date +%s)
timeout 300 python3 -m pytest -q -rfE --tb=short -m gpu -n 3 -p no:cacheprovider --timeout 200 tests/test_triton_moe.py \
  -k "w2_prefetch or programmatic or direct_launch" > $OUT/tests1.txt 2>&1; echo "tests rc=$? $(( $(date +%s)-t0 )) s" | tee -a $OUT/tests1.txt
t0=$(date +%s)
OUT=$W/h PEERS=sglang,fusedmoe,fusedmoe-w2pf,fusedmoe-w2pf-all PLAN_ARGS="--tokens 1 8 32" PRECOMPILE_ARGS="--tokens 1,8,32" \
  BUDGET_S=150 timeout 330 bash benchmarks/harness_run.sh > $OUT/harness_dec.txt 2>&1; echo "harness rc=$? $(( $(date +%s)-t0 )) s" | tee -a $OUT/harness_dec.txt
t0=$(date +%s)
timeout 280 python3 -m fusedmoe tune --preset mixtral-8x7b,deepseek-v3,qwen3-30b-a3b --weight-format bf16 --tokens 512,2048,8192 \
  --max-candidates 10 --budget-s 230 --report $OUT/tune_bf16.json --no-progress > $OUT/tune_bf16.txt 2>&1
echo "tune rc=$? $(( $(date +%s)-t0 )) s" | tee -a $OUT/tune_bf16.txt
cp src/fusedmoe/configs/triton_moe_tuned.json $OUT/
tar czf $OUT/work.tgz -C $W .
tail -3 $OUT/tests1.txt; grep -A12 "^summary" $OUT/harness_dec.txt; grep "heuristic .* -> tuned" $OUT/tune_bf16.txt
