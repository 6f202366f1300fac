set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s)
el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
B="--preset nemotron-super,nemotron-nano,gpt-oss-120b,gpt-oss-20b --tokens 1,8,64,4096 --weight-format mxfp4,nvfp4 --peers triton --quick-ceilings --no-progress --no-plot --budget-s 70"
timeout 100 python3 -m fusedmoe bench $B --out $OUT/b1 > $OUT/b1.log 2>&1; el "bench1 rc=$?"
timeout 170 python3 -m pytest -q -rfE --tb=short -m gpu -n 8 -p no:cacheprovider --timeout 150 tests/test_triton_fp4.py tests/test_layer_triton.py > $OUT/gpu_fp4.txt 2>&1; el "gpu fp4 rc=$?"
tail -4 $OUT/gpu_fp4.txt
timeout 100 python3 -m fusedmoe bench $B --out $OUT/b2 > $OUT/b2.log 2>&1; el "bench2 rc=$?"
python3 .calls/s23_cmp.py $OUT b1 b2 > $OUT/now.txt 2>&1
cd $OUT && tar czf r.tgz b1 b2 *.log && rm -rf b1 b2 *.log
cat now.txt
