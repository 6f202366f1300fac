set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s)
el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
timeout 150 python3 .calls/race.py 60 > $OUT/race.txt 2>&1; el "race rc=$?"
timeout 330 python3 -m pytest -q -rfE --tb=short -m gpu -n 8 -p no:cacheprovider --timeout 280 tests > $OUT/gpu_all.txt 2>&1; el "gpu suite rc=$?"
tail -8 $OUT/gpu_all.txt
cat $OUT/race.txt
