set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s)
el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
for L in swizzled tiled; do FUSEDMOE_FP4_LAYOUT=$L timeout 45 python3 .calls/mx8_probe.py >> $OUT/mx8.txt 2>&1; done; el "mx8 probe"
PR=qwen3-30b-a3b
cp src/fusedmoe/configs/triton_moe_tuned.json $OUT/tuned.json
timeout 75 python3 -m fusedmoe tune --preset $PR --weight-format mxfp4,nvfp4 --tokens 1,8,64 --out $OUT/tuned.json --report $OUT/tune_report.json --budget-s 60 --max-candidates 10 --no-progress > $OUT/tune.txt 2>&1; el "tune rc=$?"
B="--preset $PR --tokens 1,8,64 --weight-format mxfp4,nvfp4 --peers triton --quick-ceilings --no-progress --no-plot --budget-s 25"
timeout 45 python3 -m fusedmoe bench $B --tuned-configs $OUT/tuned.json --out $OUT/new1 > $OUT/new1.log 2>&1; el "new1 rc=$?"
timeout 45 python3 -m fusedmoe bench $B --out $OUT/old1 > $OUT/old1.log 2>&1; el "old1 rc=$?"
python3 .calls/s23_cmp.py $OUT old1 new1 > $OUT/ab.txt 2>&1
cd $OUT && tar czf r.tgz new1 old1 *.log && rm -rf new1 old1 *.log
sort mx8.txt; cat ab.txt
