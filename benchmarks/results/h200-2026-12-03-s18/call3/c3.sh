set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s)
el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
mkdir -p $OUT/h
OUT=$OUT/h PEERS=sglang,fusedmoe BUDGET_S=200 timeout 250 bash benchmarks/harness_run.sh > $OUT/harness.txt 2>&1
el "harness rc=$?"
cp $OUT/h/peers.txt $OUT/peers.txt 2>/dev/null; cp $OUT/h/peers.jsonl $OUT/peers.jsonl 2>/dev/null; rm -rf $OUT/h
timeout 250 python3 -m pytest -q -rfE --tb=short -m gpu -n 6 -p no:cacheprovider --timeout 200 tests > $OUT/gpu_suite.txt 2>&1
el "gpu suite rc=$?"; tail -3 $OUT/gpu_suite.txt
timeout 60 python3 benchmarks/kernel_breakdown.py --preset qwen3-30b-a3b,deepseek-v3-tp8,nemotron-nano --weight-format fp8_channel --tokens 1,8 --calls 20 --json $OUT/breakdown_decode.json > $OUT/breakdown_decode.txt 2>&1
el "breakdown rc=$?"
grep -A9 "^summary" $OUT/harness.txt | cut -c1-200
