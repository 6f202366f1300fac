#!/usr/bin/env bash
# s47 call 8: the new row-copy rule (gated layers with counted tiles) against X_GATHER off, in the harness, at the points it changes
export PYTHONPATH=$PWD/src
export PEERS=fusedmoe,fusedmoe-noxg BUDGET_S=150 PLAN_ARGS="--models dsv3 minimax_m2.5 --dtypes fp8_channel fp8_tensor fp8_block --tokens 8192"
export PRECOMPILE_ARGS="--models dsv3,minimax_m2.5 --dtypes fp8_channel,fp8_tensor,fp8_block --tokens 8192"
OUT=$OUT/h timeout 400 bash benchmarks/harness_run.sh > $OUT/h_log.txt 2>&1; echo "harness rc=$?"
tail -12 $OUT/h_log.txt
