# call 5 (twenty-sixth session): as call 3 at 32 / 128 tokens (harness only), then the FP4 bench of the final code
# (new code against git archive 8a0b7ff src = .calls/old_src.tgz, each next to its own SGLang run)
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
mkdir -p /tmp/oldrepo && tar -c --exclude=./.git . | tar -x -C /tmp/oldrepo && rm -rf /tmp/oldrepo/src && tar xzf .calls/old_src.tgz -C /tmp/oldrepo
mkdir -p $OUT/hA $OUT/hB
P="--tokens 32 128"; PC="--tokens 32,128"
OUT=$OUT/hA PEERS=sglang,fusedmoe PLAN_ARGS="$P" PRECOMPILE_ARGS="$PC" BUDGET_S=90 timeout 190 bash benchmarks/harness_run.sh > $OUT/hA/run.txt 2>&1; el "hA rc=$?"
(cd /tmp/oldrepo && OUT=$OUT/hB PEERS=sglang,fusedmoe PLAN_ARGS="$P" PRECOMPILE_ARGS="$PC" BUDGET_S=90 timeout 190 bash benchmarks/harness_run.sh > $OUT/hB/run.txt 2>&1); el "hB rc=$?"
python3 benchmarks/harness_ab.py $OUT/hA/peers.jsonl $OUT/hB/peers.jsonl > $OUT/ab_table.txt 2>&1
cp $OUT/hA/peers.txt $OUT/peers_new.txt 2>/dev/null; grep -A9 "^summary" $OUT/hA/run.txt | cut -c1-160 > $OUT/summary_new.txt
grep -A9 "^summary" $OUT/hB/run.txt | cut -c1-160 > $OUT/summary_old.txt
cd $OUT && tar czf h.tgz hA hB && rm -rf hA hB
tail -12 ab_table.txt
cat summary_new.txt summary_old.txt
cd - > /dev/null
timeout 200 python3 -m fusedmoe bench --preset gpt-oss-120b,nemotron-super,nemotron-nano --weight-format nvfp4,mxfp4 \
    --tokens 1,8,64 --peers triton --quick-ceilings --no-progress --no-plot --budget-s 150 --out $OUT/fp4 > $OUT/fp4.log 2>&1
el "fp4 bench rc=$?"; (cd $OUT && tar czf fp4.tgz fp4 && rm -rf fp4); grep -E "^\|" $OUT/fp4.log | head -30
