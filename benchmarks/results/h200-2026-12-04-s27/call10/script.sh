#!/usr/bin/env bash
# s27 call 6: the whole GPU test suite on the session's code
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
cp .calls/s27_call6.sh "$OUT/script.sh"
timeout 560 python3 -m pytest -q -rfE --tb=short -m gpu -n 8 -p no:cacheprovider --timeout 300 tests > "$OUT/gpu_all.txt" 2>&1
echo "suite rc=$?"; tail -15 "$OUT/gpu_all.txt"
