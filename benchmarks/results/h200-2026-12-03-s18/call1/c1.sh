set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s)
el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
# 1. GPU tests of the changed code
timeout 230 python3 -m pytest -q -rfE --tb=short -m gpu -n 6 -p no:cacheprovider --timeout 200 \
  tests/test_quant_kernels.py tests/test_ws_gemm.py > $OUT/gpu_tests.txt 2>&1
el "tests rc=$?"; tail -4 $OUT/gpu_tests.txt
# 2. harness A/B, each variant in its own invocation
run_h() {  # name peers plan precompile budget timeout
  mkdir -p $OUT/$1
  OUT=$OUT/$1 PEERS=$2 PLAN_ARGS="$3" PRECOMPILE_ARGS="$4" BUDGET_S=$5 timeout $6 bash benchmarks/harness_run.sh > $OUT/$1/run.txt 2>&1
  el "$1 rc=$?"
}
run_h hA sglang,fusedmoe "--dtypes fp8_channel fp8_block --tokens 1 8 32 128 512 2048 8192" "--dtypes fp8_channel,fp8_block" 70 130
run_h hB sglang,fusedmoe-s17 "--dtypes fp8_channel fp8_block --tokens 1 8 32 128 512 2048 8192" "--dtypes fp8_channel,fp8_block" 70 110
run_h hC sglang,fusedmoe-nohandoff "--dtypes fp8_channel fp8_block --tokens 512 2048 8192" "--dtypes fp8_channel,fp8_block --tokens 512,2048,8192" 40 80
for h in hA hB hC; do echo "== $h"; grep -A9 "^summary" $OUT/$h/run.txt | cut -c1-160; done
cd $OUT && tar czf h.tgz hA hB hC && rm -rf hA hB hC
