set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/h
OUT=$OUT/h PEERS=sglang,fusedmoe BUDGET_S=230 timeout 420 bash benchmarks/harness_run.sh > $OUT/harness.txt 2>&1
echo "harness rc=$? $(( $(date +%s)-T0 ))s"
cp $OUT/h/peers.txt $OUT/peers.txt 2>/dev/null; cp $OUT/h/peers.jsonl $OUT/peers.jsonl 2>/dev/null; rm -rf $OUT/h
grep -A9 "^summary" $OUT/harness.txt | cut -c1-200
