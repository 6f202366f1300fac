set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s)
el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
timeout 230 python3 -m pytest -q -rfE --tb=short -m gpu -n 8 -p no:cacheprovider --timeout 200 tests > $OUT/gpu_tests.txt 2>&1
el "tests rc=$?"; tail -4 $OUT/gpu_tests.txt
timeout 30 python3 benchmarks/quant_probe.py --shapes 49152x1856,65536x2048,8192x2688,8192x7168,16384x14336,6x1856 > $OUT/quant_probe_new.txt 2>&1; el "qprobe new rc=$?"
timeout 30 python3 benchmarks/kernel_breakdown.py --preset deepseek-v3-tp8 --weight-format fp8_tensor,bf16 --tokens 1 --calls 20 > $OUT/breakdown_trim.txt 2>&1; el "bd rc=$?"
FUSEDMOE_TRIM_STAGES=0 timeout 30 python3 benchmarks/kernel_breakdown.py --preset deepseek-v3-tp8 --weight-format fp8_tensor,bf16 --tokens 1 --calls 20 > $OUT/breakdown_notrim.txt 2>&1; el "bd notrim rc=$?"
mkdir -p /tmp/oldrepo && tar -c --exclude=./.git . | tar -x -C /tmp/oldrepo && rm -rf /tmp/oldrepo/src && tar xzf .calls/old_src.tgz -C /tmp/oldrepo
mkdir -p $OUT/hA $OUT/hB
REM=$(( 580 - ($(date +%s)-T0) - 95 ))
OUT=$OUT/hA PEERS=sglang,fusedmoe BUDGET_S=$(( REM - 60 )) timeout $REM bash benchmarks/harness_run.sh > $OUT/hA/run.txt 2>&1; el "hA rc=$?"
P="--dtypes bf16 fp8_tensor fp8_channel --tokens 1 8 2048 8192"; PC="--dtypes bf16,fp8_tensor,fp8_channel --tokens 1,8,2048,8192"
REM=$(( 585 - ($(date +%s)-T0) ))
(cd /tmp/oldrepo && OUT=$OUT/hB PEERS=sglang,fusedmoe PLAN_ARGS="$P" PRECOMPILE_ARGS="$PC" BUDGET_S=$(( REM - 45 )) timeout $REM bash benchmarks/harness_run.sh > $OUT/hB/run.txt 2>&1); el "hB rc=$?"
python3 benchmarks/harness_ab.py $OUT/hA/peers.jsonl $OUT/hB/peers.jsonl > $OUT/ab_table.txt 2>&1
cp $OUT/hA/peers.txt $OUT/peers_full.txt 2>/dev/null; grep -A9 "^summary" $OUT/hA/run.txt | cut -c1-160 > $OUT/summary_full.txt
cd $OUT && tar czf h.tgz hA hB && rm -rf hA hB
cat quant_probe_new.txt | cut -c1-80
tail -9 ab_table.txt
cat summary_full.txt
paste <(grep -E "floor|_gemm" breakdown_trim.txt | cut -c1-75) <(grep -E "floor|_gemm" breakdown_notrim.txt | cut -c1-75)
