#!/usr/bin/env bash
# s35 call 1: smoke of the s32/s33 opt-in variants, then the full GPU suite (HEAD a12b9c3)
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
cp .calls/s35_c1.sh "$OUT/script.sh"
T0=$(date +%s); el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 200 python3 benchmarks/smoke_gluon.py --jobs 4 --timeout 120 --json $OUT/smoke.json \
  --only ws4dec-mxfp4-oai-t1,ws4dec-nvfp4-relu2-t8,ws4dec-nvfp4-relu2-4cta-t8,ws4dec-mxfp4-oai-t1-tma,wsdec-bf16-4cta-t1,ws4dec-mxfp4-oai-t1-ssmem,ws4dec-nvfp4-relu2-t8-ssmem,ws4dec-mxfp4-oai-t1-ssmem-trel,wsdec-bf16-relu2-t8,ws4pad-prefill,ws4ch2-prefill,ws4nv-prefill \
  > $OUT/smoke.txt 2>&1
el "smoke rc=$?"
tail -16 $OUT/smoke.txt
left=$(( 585 - ($(date +%s)-T0) ))
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1); nw=8; [ "$mem" -lt 100000 ] && nw=5
el "workers $nw (GPU memory $mem MiB)"
timeout $left python3 -m pytest -m gpu -n $nw -p no:cacheprovider --timeout 150 -q -rfE tests > "$OUT/gpu_suite.txt" 2>&1
el "suite rc=$?"
grep -E "^(FAILED|ERROR)" "$OUT/gpu_suite.txt" | head -40
tail -3 "$OUT/gpu_suite.txt"
