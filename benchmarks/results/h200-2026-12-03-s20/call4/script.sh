set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s)
el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
timeout 150 python3 -m pytest -q -rfE --tb=short -m gpu -n 8 -p no:cacheprovider --timeout 140 tests/test_triton_moe.py -k "prefetch or programmatic or graph or direct_launch or fused_combine or align_quant or qwen3" > $OUT/gpu_tests.txt 2>&1; el "tests rc=$?"; tail -4 $OUT/gpu_tests.txt
run_h() {  # name env plan precompile budget timeout
  mkdir -p $OUT/$1
  env $2 OUT=$OUT/$1 PEERS=sglang,fusedmoe PLAN_ARGS="$3" PRECOMPILE_ARGS="$4" BUDGET_S=$5 timeout $6 bash benchmarks/harness_run.sh > $OUT/$1/run.txt 2>&1
  el "$1 rc=$?"
}
P="--tokens 1 8 32 128"; PC="--tokens 1,8,32,128"
run_h hA FUSEDMOE_W2_PREFETCH=1 "$P" "$PC" 70 120
run_h hB FUSEDMOE_W2_PREFETCH=0 "$P" "$PC" 70 120
python3 benchmarks/harness_ab.py $OUT/hA/peers.jsonl $OUT/hB/peers.jsonl > $OUT/ab_table.txt 2>&1
for h in hA hB; do echo "== $h"; grep -A9 "^summary" $OUT/$h/run.txt | cut -c1-160; done
tail -3 $OUT/ab_table.txt
cd $OUT && tar czf h.tgz hA hB && rm -rf hA hB
