set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s)
el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
B="--preset nemotron-super,nemotron-nano,gpt-oss-120b --tokens 1,8,64,4096 --weight-format nvfp4,mxfp4 --peers triton --quick-ceilings --no-progress --no-plot"
timeout 150 python3 -m fusedmoe bench $B --budget-s 120 --out $OUT/tiled > $OUT/tiled.log 2>&1; el "tiled rc=$?"
FUSEDMOE_FP4_LAYOUT=linear timeout 150 python3 -m fusedmoe bench $B --budget-s 120 --out $OUT/linear > $OUT/linear.log 2>&1; el "linear rc=$?"
for v in linear tiled; do echo "== $v"; grep -E "^\| (nemotron|gpt)" $OUT/$v/bench.md | cut -c1-150 | head -8; grep -iE "error|fail|Traceback" $OUT/$v.log | head -3; done
timeout 200 python3 -m pytest -q -rfE --tb=short -m gpu -n 8 -p no:cacheprovider --timeout 190 tests/test_triton_fp4.py tests/test_triton_moe.py > $OUT/gpu_fp4.txt 2>&1; el "gpu tests rc=$?"
tail -6 $OUT/gpu_fp4.txt
cd $OUT && tar czf r.tgz tiled linear && rm -rf tiled linear
