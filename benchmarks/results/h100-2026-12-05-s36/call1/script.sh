#!/usr/bin/env bash
# s36 call 1: FP4 decode default A/B at 1-2 tokens, then the full GPU suite with the new default (HEAD ef46e4c)
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
cp .calls/s36_c1.sh "$OUT/script.sh"
T0=$(date +%s); el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
timeout 120 python3 benchmarks/decode_ab.py --preset gpt-oss-120b,nemotron-super,nemotron-nano \
  --weight-format mxfp4,nvfp4 --tokens 1,2 --rounds 2 --settings default,nows4dec,ws4dec4sr > $OUT/ab_default.txt 2>&1
el "ab rc=$?"
grep -v "^\s*$" $OUT/ab_default.txt | tail -16
left=$(( 580 - ($(date +%s)-T0) ))
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1); nw=8; [ "$mem" -lt 100000 ] && nw=5
el "workers $nw (GPU memory $mem MiB), $left s left"
timeout $left python3 -m pytest -m gpu -n $nw -p no:cacheprovider --timeout 150 -q -rfE tests > "$OUT/gpu_suite.txt" 2>&1
el "suite rc=$?"
grep -E "^(FAILED|ERROR)" "$OUT/gpu_suite.txt" | head -40
tail -3 "$OUT/gpu_suite.txt"
