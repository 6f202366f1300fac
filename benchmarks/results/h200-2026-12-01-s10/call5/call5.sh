#!/usr/bin/env bash
# session 10, call 5: FP8 per-token quantizer tiling (one tile per row): kernel A/B, GPU tests, harness A/B
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
t0=$(date +%s); ts() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/times.txt; }
ts start
timeout 60 python3 benchmarks/fp8_row_tile_ab.py --json $R/row_tile_ab.json > $R/row_tile_ab.txt 2>&1
ts ab done
timeout 150 python3 -m pytest -q -rfE --tb=short -m gpu -n 3 -p no:cacheprovider --timeout 140 \
  tests/test_quant_kernels.py tests/test_triton_moe.py -k "quant or CHANNEL or TOKEN or channel" > $R/gpu_tests.log 2>&1
ts tests done
OUT=$R/harness PEERS=sglang,fusedmoe,fusedmoe-rows1024 PLAN_ARGS="--dtypes fp8_channel" \
  PRECOMPILE_ARGS="--dtypes fp8_channel" BUDGET_S=90 timeout 170 bash benchmarks/harness_run.sh > $R/harness.log 2>&1
ts harness done
cp $R/harness/peers.txt $R/harness_peers.txt 2>/dev/null
tar czf $OUT/results.tgz -C $OUT r
cat $R/row_tile_ab.txt
tail -4 $R/gpu_tests.log
grep -A3 "^summary\|^speedup" $R/harness/peers.log | tail -9
cat $R/times.txt
