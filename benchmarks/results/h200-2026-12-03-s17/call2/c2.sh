set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s)
timeout 150 python3 -m pytest -q -rfE --tb=short -m gpu -n 3 -p no:cacheprovider --timeout 140 tests/test_ws_gemm.py \
  -k "padded_handoff or one_part" > $OUT/tests_handoff.txt 2>&1
echo "tests rc=$? $(( $(date +%s)-T0 ))s"; tail -2 $OUT/tests_handoff.txt
timeout 190 python3 -m fusedmoe tune --preset mixtral-8x7b,qwen3-30b-a3b,minimax-m2 --weight-format fp8_tensor,fp8_channel \
  --tokens 2048,8192 --max-candidates 12 --budget-s 150 --ws-wide --report $OUT/tune_a.json --no-progress > $OUT/tune_a.txt 2>&1
echo "tune a rc=$? $(( $(date +%s)-T0 ))s"
timeout 130 python3 -m fusedmoe tune --preset deepseek-v3,nemotron-nano --weight-format fp8_tensor,fp8_channel \
  --tokens 2048,8192 --max-candidates 12 --budget-s 100 --ws-wide --report $OUT/tune_b.json --no-progress > $OUT/tune_b.txt 2>&1
echo "tune b rc=$? $(( $(date +%s)-T0 ))s"
cp src/fusedmoe/configs/triton_moe_tuned.json $OUT/
left=$(( 580 - ($(date +%s)-T0) )); B=$(( left - 45 )); [ $B -gt 150 ] && B=150
echo "harness budget $B s"
mkdir -p $OUT/h
OUT=$OUT/h PEERS=sglang,fusedmoe BUDGET_S=$B PLAN_ARGS="--dtypes fp8_tensor fp8_channel --tokens 512 2048 8192" \
  PRECOMPILE_ARGS="--dtypes fp8_tensor,fp8_channel --tokens 512,2048,8192" timeout $(( left - 5 )) bash benchmarks/harness_run.sh > $OUT/harness.txt 2>&1
echo "harness rc=$? $(( $(date +%s)-T0 ))s"
cp $OUT/h/peers.txt $OUT/peers.txt 2>/dev/null; cp $OUT/h/peers.jsonl $OUT/peers.jsonl 2>/dev/null; rm -rf $OUT/h
grep -h "heuristic .* -> tuned\|-> tuned" $OUT/tune_a.txt $OUT/tune_b.txt | cut -c1-220 | head -30
grep -A9 "^summary" $OUT/harness.txt | cut -c1-200
