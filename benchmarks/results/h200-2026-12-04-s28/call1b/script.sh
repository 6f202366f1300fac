#!/usr/bin/env bash
# s28 call 1b: the full GPU suite on the session's starting code (last session's GPU-drawn CUDA-graph test unrun)
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
cp .calls/s28_call1b.sh "$OUT/script.sh"
timeout 560 python3 -m pytest -m gpu -n 8 -p no:cacheprovider --timeout 300 -q tests > "$OUT/gpu_suite.txt" 2>&1
echo "suite rc=$?"
tail -25 "$OUT/gpu_suite.txt"
