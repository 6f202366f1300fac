set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s)
el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
cp src/fusedmoe/configs/triton_moe_tuned.json $OUT/tuned.json
timeout 230 python3 -m fusedmoe tune --preset qwen3-30b-a3b,qwen3-235b-a22b,minimax-m2 --weight-format mxfp4,nvfp4 --tokens 4096 --out $OUT/tuned.json --report $OUT/tune_report.json --budget-s 190 --max-candidates 22 --no-progress > $OUT/tune.txt 2>&1; el "tune rc=$?"
tail -12 $OUT/tune.txt
B="--preset qwen3-30b-a3b,qwen3-235b-a22b,minimax-m2 --tokens 4096 --weight-format mxfp4,nvfp4 --peers triton --quick-ceilings --no-progress --no-plot --budget-s 60"
timeout 90 python3 -m fusedmoe bench $B --tuned-configs $OUT/tuned.json --out $OUT/new1 > $OUT/new1.log 2>&1; el "new1 rc=$?"
timeout 90 python3 -m fusedmoe bench $B --out $OUT/old1 > $OUT/old1.log 2>&1; el "old1 rc=$?"
timeout 90 python3 -m fusedmoe bench $B --tuned-configs $OUT/tuned.json --out $OUT/new2 > $OUT/new2.log 2>&1; el "new2 rc=$?"
timeout 90 python3 -m fusedmoe bench $B --out $OUT/old2 > $OUT/old2.log 2>&1; el "old2 rc=$?"
python3 .calls/s23_cmp.py $OUT old1,old2 new1,new2 > $OUT/ab.txt 2>&1
cd $OUT && tar czf r.tgz new1 old1 new2 old2 *.log tune.txt && rm -rf new1 old1 new2 old2 *.log
cat ab.txt
