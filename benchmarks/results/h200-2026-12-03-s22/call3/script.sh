set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s)
el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
timeout 150 python3 -m pytest -q -rfE --tb=short -m gpu -n 8 -p no:cacheprovider --timeout 140 tests/test_triton_fp4.py > $OUT/gpu_fp4.txt 2>&1
el "fp4 tests rc=$?"; tail -3 $OUT/gpu_fp4.txt
mkdir -p $OUT/hA $OUT/hB
P="--dtypes fp8_tensor fp8_channel --tokens 1 8"; PC="--dtypes fp8_tensor,fp8_channel --tokens 1,8"
OUT=$OUT/hA PEERS=sglang,fusedmoe PLAN_ARGS="$P" PRECOMPILE_ARGS="$PC" BUDGET_S=100 timeout 170 bash benchmarks/harness_run.sh > $OUT/hA/run.txt 2>&1; el "hA (new table) rc=$?"
cp .calls/tuned_before.json src/fusedmoe/configs/triton_moe_tuned.json
OUT=$OUT/hB PEERS=sglang,fusedmoe PLAN_ARGS="$P" PRECOMPILE_ARGS="$PC" BUDGET_S=100 timeout 170 bash benchmarks/harness_run.sh > $OUT/hB/run.txt 2>&1; el "hB (old table) rc=$?"
python3 benchmarks/harness_ab.py $OUT/hA/peers.jsonl $OUT/hB/peers.jsonl > $OUT/ab_table.txt 2>&1
cp $OUT/hA/peers.txt $OUT/peers_new.txt; cp $OUT/hB/peers.txt $OUT/peers_old.txt
cd $OUT && tar czf h.tgz hA hB && rm -rf hA hB
tail -30 ab_table.txt
