set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s)
el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
B="--preset nemotron-super,nemotron-nano,gpt-oss-120b --tokens 1,8,64,4096 --peers triton --quick-ceilings --no-progress --no-plot"
timeout 150 python3 -m fusedmoe bench $B --weight-format mxfp4 --budget-s 110 --out $OUT/fold_on > $OUT/fold_on.log 2>&1; el "fold_on rc=$?"
FUSEDMOE_MX_FOLD=0 timeout 150 python3 -m fusedmoe bench $B --weight-format mxfp4 --budget-s 110 --out $OUT/fold_off > $OUT/fold_off.log 2>&1; el "fold_off rc=$?"
timeout 200 python3 -m pytest -q -rfE --tb=short -m gpu -n 6 -p no:cacheprovider --timeout 180 tests/test_triton_fp4.py \
  -k "fold or fast_conversions or tile_dequantization" > $OUT/gpu_tests.txt 2>&1; el "tests rc=$?"; tail -3 $OUT/gpu_tests.txt
timeout 120 python3 benchmarks/kernel_breakdown.py --preset gpt-oss-120b,nemotron-super --weight-format mxfp4,nvfp4 --tokens 1,8,64 --calls 20 --json $OUT/breakdown.json > $OUT/breakdown.txt 2>&1; el "breakdown rc=$?"
for v in fold_on fold_off; do echo "== $v"; grep -E "^\| (nemotron|gpt)" $OUT/$v/bench.md | cut -c1-200 | head -8; done
tail -40 $OUT/breakdown.txt
cd $OUT && tar czf r.tgz fold_on fold_off && rm -rf fold_on fold_off
