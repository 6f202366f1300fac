set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s)
el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
timeout 150 python3 -m pytest -q -rfE --tb=short -m gpu -n 8 -p no:cacheprovider --timeout 140 \
  tests/test_quant_kernels.py "tests/test_triton_moe.py::test_gpu_gemm1_row_quant_same_bits" > $OUT/gpu_tests.txt 2>&1
el "tests rc=$?"; tail -4 $OUT/gpu_tests.txt
P="--dtypes fp8_channel --tokens 1 8 32 128"; PC="--dtypes fp8_channel --tokens 1,8,32,128"
mkdir -p $OUT/hA $OUT/hB
OUT=$OUT/hA PEERS=sglang,fusedmoe PLAN_ARGS="$P" PRECOMPILE_ARGS="$PC" BUDGET_S=40 timeout 100 bash benchmarks/harness_run.sh > $OUT/hA/run.txt 2>&1; el "hA rc=$?"
OUT=$OUT/hB PEERS=sglang,fusedmoe-rowq PLAN_ARGS="$P" PRECOMPILE_ARGS="$PC" BUDGET_S=40 timeout 100 bash benchmarks/harness_run.sh > $OUT/hB/run.txt 2>&1; el "hB rc=$?"
python3 benchmarks/harness_ab.py $OUT/hA/peers.jsonl $OUT/hB/peers.jsonl > $OUT/ab_table.txt 2>&1
timeout 60 python3 benchmarks/fp4_stream_probe.py --quick-ladder > $OUT/quick_ladder.txt 2>&1; el "ladder rc=$?"
for pf in "deepseek-v3 fp8_tensor,fp8_channel 8192" "qwen3-30b-a3b fp8_channel 2048" "nemotron-nano fp8_channel 8192" "mixtral-8x7b fp8_tensor 8192"; do
  set -- $pf
  timeout 100 python3 benchmarks/kernel_breakdown.py --preset $1 --weight-format $2 --tokens $3 --calls 20 >> $OUT/breakdown.txt 2>&1; el "breakdown $1 rc=$?"
done
cd $OUT && tar czf h.tgz hA hB && rm -rf hA hB
cat quick_ladder.txt | tail -25; cat ab_table.txt | tail -30
grep -E "^#|floor|us  " breakdown.txt | cut -c1-160
