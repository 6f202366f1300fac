#!/usr/bin/env bash
# s32 call 2: FP4 prefill options A/B (mxfp4 chunks/skip/pad, nvfp4 ws kernel)
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
cp .calls/s32_c2.sh "$OUT/script.sh"
timeout 330 python3 benchmarks/decode_ab.py --preset gpt-oss-120b,nemotron-super,nemotron-nano --weight-format mxfp4 \
  --tokens 2048,4096,8192 --settings default,ws4skip,ws4ch4,ws4pad,nows4 --rounds 2 > "$OUT/ab_mxfp4.txt" 2>&1
echo "mxfp4 rc=$?"
timeout 200 python3 benchmarks/decode_ab.py --preset gpt-oss-120b,nemotron-super,nemotron-nano --weight-format nvfp4 \
  --tokens 1024,4096 --settings default,ws4nv --rounds 2 > "$OUT/ab_nvfp4.txt" 2>&1
echo "nvfp4 rc=$?"
tail -25 "$OUT/ab_mxfp4.txt"; tail -12 "$OUT/ab_nvfp4.txt"
