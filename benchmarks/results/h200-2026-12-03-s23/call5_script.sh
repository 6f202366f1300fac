set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s)
el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
timeout 500 python3 -m pytest -q -rfE --tb=short -m gpu -n 8 -p no:cacheprovider --timeout 250 tests > $OUT/gpu_all.txt 2>&1; el "gpu suite rc=$?"
tail -8 $OUT/gpu_all.txt
