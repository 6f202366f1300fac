set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s)
el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
timeout 90 python3 benchmarks/fp4_stream_probe.py --quick-ladder > $OUT/quick_ladder.txt 2>&1; el "ladder rc=$?"
cat $OUT/quick_ladder.txt
mkdir -p $OUT/h
OUT=$OUT/h PEERS=sglang,fusedmoe BUDGET_S=200 timeout 260 bash benchmarks/harness_run.sh > $OUT/harness.txt 2>&1
el "harness rc=$?"
cp $OUT/h/peers.txt $OUT/peers.txt 2>/dev/null; cp $OUT/h/peers.jsonl $OUT/peers.jsonl 2>/dev/null; rm -rf $OUT/h
grep -A9 "^summary" $OUT/harness.txt | cut -c1-200
