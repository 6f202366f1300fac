#!/usr/bin/env bash
# session 16, call 3: FP8 per-channel prefill retune (+ Mixtral 2048), then the full harness on the final table
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
W=$OUT/work; mkdir -p $W
T0=$(date +%s)
timeout 160 python3 -m fusedmoe tune --preset nemotron-nano,qwen3-30b-a3b,minimax-m2 --weight-format fp8_channel \
  --tokens 2048,8192 --max-candidates 10 --budget-s 120 --report $OUT/tune_fp8c.json --no-progress > $OUT/tune_fp8c.txt 2>&1
echo "tune rc=$? $(( $(date +%s)-T0 )) s" | tee -a $OUT/tune_fp8c.txt
timeout 130 python3 -m fusedmoe tune --preset mixtral-8x7b,deepseek-v3 --weight-format fp8_tensor,fp8_channel \
  --tokens 2048,8192 --max-candidates 10 --budget-s 90 --report $OUT/tune_mix.json --no-progress > $OUT/tune_mix.txt 2>&1
echo "tune mixtral rc=$? $(( $(date +%s)-T0 )) s" | tee -a $OUT/tune_mix.txt
cp src/fusedmoe/configs/triton_moe_tuned.json $OUT/
left=$(( 575 - ($(date +%s)-T0) )); B=$(( left - 90 )); [ $B -gt 220 ] && B=220
echo "harness budget $B s"
t0=$(date +%s)
OUT=$W/h PEERS=sglang,fusedmoe BUDGET_S=$B timeout $(( left - 5 )) bash benchmarks/harness_run.sh > $OUT/harness.txt 2>&1
echo "harness rc=$? $(( $(date +%s)-t0 )) s" | tee -a $OUT/harness.txt
cp $W/h/peers.txt $OUT/peers.txt 2>/dev/null; cp $W/h/peers.jsonl $OUT/peers.jsonl 2>/dev/null
grep "heuristic .* -> tuned" $OUT/tune_fp8c.txt $OUT/tune_mix.txt | cut -d: -f2-; grep -A9 "^summary" $OUT/harness.txt | cut -c1-200
