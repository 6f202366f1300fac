#!/usr/bin/env bash
# s37 call 2: the GPU suite on the current code (H200: all of it, 8 workers; H100: all but test_ws_gemm.py and
# test_triton_moe.py, 5 workers -- those two files are call 3), with the slowest 30 tests recorded.
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
cp .calls/s37_c2.sh "$OUT/script.sh"
T0=$(date +%s); el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$mem" -lt 100000 ]; then nw=5; sel="tests --ignore tests/test_ws_gemm.py --ignore tests/test_triton_moe.py"
else nw=8; sel="tests"; fi
[ "${PART:-}" = b ] && sel="tests/test_ws_gemm.py tests/test_triton_moe.py"
el "workers $nw: $sel"
timeout 580 python3 -m pytest -m gpu -n $nw -p no:cacheprovider --timeout 150 -q -rfE --durations=30 $sel \
  > "$OUT/gpu_suite.txt" 2>&1
el "suite rc=$?"
grep -E "^(FAILED|ERROR)" "$OUT/gpu_suite.txt" | head -40 | cut -c1-220
tail -3 "$OUT/gpu_suite.txt"
