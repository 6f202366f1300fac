set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s)
el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
timeout 115 python3 -m pytest -q -rfE --tb=short -m gpu -n 8 -p no:cacheprovider --timeout 110 \
  tests/test_ws_gemm.py tests/test_quant_kernels.py -k "handoff or gpu_realistic or graph_capture or skip_padding" > $OUT/gpu_tests.txt 2>&1
el "tests rc=$?"; tail -3 $OUT/gpu_tests.txt
run_h() {
  mkdir -p $OUT/$1
  OUT=$OUT/$1 PEERS=$2 PLAN_ARGS="$3" PRECOMPILE_ARGS="$4" BUDGET_S=$5 timeout $6 bash benchmarks/harness_run.sh > $OUT/$1/run.txt 2>&1
  el "$1 rc=$?"
}
P="--dtypes fp8_channel fp8_block --tokens 2048 8192"; PC="--dtypes fp8_channel,fp8_block --tokens 2048,8192"
run_h hA sglang,fusedmoe "$P" "$PC" 25 75
run_h hC sglang,fusedmoe-nohandoff "$P" "$PC" 25 60
python3 benchmarks/harness_ab.py $OUT/hA/peers.jsonl $OUT/hC/peers.jsonl > $OUT/ab_table.txt 2>&1
cd $OUT && tar czf h.tgz hA hC && rm -rf hA hC; cat ab_table.txt
