#!/usr/bin/env bash
# s32 call 1: the full GPU suite (last run s28) on HEAD b097075
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
cp .calls/s32_c1.sh "$OUT/script.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 560 python3 -m pytest -m gpu -n 8 -p no:cacheprovider --timeout 300 -q -rfE tests > "$OUT/gpu_suite.txt" 2>&1
echo "suite rc=$?"
grep -E "^(FAILED|ERROR)" "$OUT/gpu_suite.txt" | head -40
tail -4 "$OUT/gpu_suite.txt"
