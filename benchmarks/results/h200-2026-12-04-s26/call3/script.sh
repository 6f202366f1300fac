# call 3 (twenty-sixth session): the decode combine tiles and the slot-space align, new code (HEAD) against the
# code before them (git archive 8a0b7ff src = .calls/old_src.tgz): per-kernel times and the harness at 1 / 8 tokens
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
mkdir -p /tmp/oldrepo && tar -c --exclude=./.git . | tar -x -C /tmp/oldrepo && rm -rf /tmp/oldrepo/src && tar xzf .calls/old_src.tgz -C /tmp/oldrepo
KB="--preset nemotron-super,qwen3-30b-a3b,deepseek-v3-tp8,gpt-oss-120b --weight-format bf16,nvfp4 --tokens 1,8 --calls 20"
timeout 100 python3 benchmarks/kernel_breakdown.py $KB > $OUT/kb_new.txt 2>&1; el "kb new rc=$?"
(cd /tmp/oldrepo && PYTHONPATH=/tmp/oldrepo/src timeout 100 python3 benchmarks/kernel_breakdown.py $KB > $OUT/kb_old.txt 2>&1); el "kb old rc=$?"
mkdir -p $OUT/hA $OUT/hB
P="--tokens 1 8"; PC="--tokens 1,8"
OUT=$OUT/hA PEERS=sglang,fusedmoe PLAN_ARGS="$P" PRECOMPILE_ARGS="$PC" BUDGET_S=90 timeout 190 bash benchmarks/harness_run.sh > $OUT/hA/run.txt 2>&1; el "hA rc=$?"
(cd /tmp/oldrepo && OUT=$OUT/hB PEERS=sglang,fusedmoe PLAN_ARGS="$P" PRECOMPILE_ARGS="$PC" BUDGET_S=90 timeout 190 bash benchmarks/harness_run.sh > $OUT/hB/run.txt 2>&1); el "hB rc=$?"
python3 benchmarks/harness_ab.py $OUT/hA/peers.jsonl $OUT/hB/peers.jsonl > $OUT/ab_table.txt 2>&1
cp $OUT/hA/peers.txt $OUT/peers_new.txt 2>/dev/null; grep -A9 "^summary" $OUT/hA/run.txt | cut -c1-160 > $OUT/summary_new.txt
grep -A9 "^summary" $OUT/hB/run.txt | cut -c1-160 > $OUT/summary_old.txt
cd $OUT && tar czf h.tgz hA hB && rm -rf hA hB
tail -12 ab_table.txt
cat summary_new.txt summary_old.txt
paste <(grep -E "floor|_kernel" kb_new.txt | cut -c1-70) <(grep -E "floor|_kernel" kb_old.txt | cut -c1-70) | grep -E "floor|align|combine"
