set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s)
el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
run_h() {  # name peers plan precompile budget timeout
  mkdir -p $OUT/$1
  OUT=$OUT/$1 PEERS=$2 PLAN_ARGS="$3" PRECOMPILE_ARGS="$4" BUDGET_S=$5 timeout $6 bash benchmarks/harness_run.sh > $OUT/$1/run.txt 2>&1
  el "$1 rc=$?"
}
P="--dtypes fp8_channel fp8_tensor fp8_block --tokens 512 2048 8192"
PC="--dtypes fp8_channel,fp8_tensor,fp8_block --tokens 512,2048,8192"
run_h hA sglang,fusedmoe "$P" "$PC" 50 120
timeout 150 python3 -m pytest -q -rfE --tb=short -m gpu -n 6 -p no:cacheprovider --timeout 140 \
  tests/test_ws_gemm.py -k "handoff or skip or amax" > $OUT/gpu_tests.txt 2>&1
el "tests rc=$?"; tail -3 $OUT/gpu_tests.txt
run_h hB sglang,fusedmoe-padgarbage "$P" "$PC" 50 100
run_h hC sglang,fusedmoe-nohandoff "$P" "$PC" 50 100
for h in hA hB hC; do echo "== $h"; grep -A9 "^summary" $OUT/$h/run.txt | cut -c1-160; done
cd $OUT && tar czf h.tgz hA hB hC && rm -rf hA hB hC
