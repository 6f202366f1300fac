set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s)
el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
timeout 230 python3 -m pytest -q -rfE --tb=short -m gpu -n 8 -p no:cacheprovider --timeout 200 tests/test_triton_fp4.py tests/test_layer_triton.py tests/test_layer.py tests/test_transformers.py tests/test_formats.py > $OUT/gpu_fp4.txt 2>&1; el "gpu fp4 rc=$?"
grep -E "passed|failed|FAILED|Error" $OUT/gpu_fp4.txt | tail -12
timeout 90 python3 .calls/race.py 30 shipped > $OUT/race_shipped.txt 2>&1; el "race rc=$?"
cat $OUT/race_shipped.txt | grep -v "^==" 
grep "^==" $OUT/race_shipped.txt | cut -c1-60
