set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s)
el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
timeout 290 python3 -m pytest -q -rfE --tb=short -m gpu -n 8 -p no:cacheprovider --timeout 250 tests > $OUT/gpu_all.txt 2>&1; el "gpu suite rc=$?"
tail -6 $OUT/gpu_all.txt
cp src/fusedmoe/configs/triton_moe_tuned.json $OUT/tuned.json
timeout 150 python3 -m fusedmoe tune --preset gpt-oss-120b,gpt-oss-20b --weight-format mxfp4,nvfp4 --tokens 1,8,64 --out $OUT/tuned.json --report $OUT/tune_report.json --budget-s 125 --max-candidates 14 --no-progress > $OUT/tune.txt 2>&1; el "tune rc=$?"
tail -16 $OUT/tune.txt
B="--preset gpt-oss-120b,gpt-oss-20b --tokens 1,8,64 --weight-format mxfp4,nvfp4 --peers triton --quick-ceilings --no-progress --no-plot --budget-s 40"
timeout 60 python3 -m fusedmoe bench $B --tuned-configs $OUT/tuned.json --out $OUT/new1 > $OUT/new1.log 2>&1; el "new1 rc=$?"
timeout 60 python3 -m fusedmoe bench $B --out $OUT/old1 > $OUT/old1.log 2>&1; el "old1 rc=$?"
if [ $(( $(date +%s)-T0 )) -lt 520 ]; then
timeout 40 python3 -m fusedmoe bench $B --tuned-configs $OUT/tuned.json --out $OUT/new2 > $OUT/new2.log 2>&1; el "new2 rc=$?"
timeout 40 python3 -m fusedmoe bench $B --out $OUT/old2 > $OUT/old2.log 2>&1; el "old2 rc=$?"
fi
python3 .calls/s23_cmp.py $OUT old1,old2 new1,new2 > $OUT/ab.txt 2>&1
cd $OUT && tar czf r.tgz new* old* *.log tune.txt 2>/dev/null; rm -rf new1 old1 new2 old2 *.log
cat ab.txt
