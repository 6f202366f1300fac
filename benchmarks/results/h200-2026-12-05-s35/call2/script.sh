#!/usr/bin/env bash
# s35 call 2: FP4 decode kernel A/B (s33 options), 16-bit/FP8 per-thread release A/B
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
cp .calls/s35_c2.sh "$OUT/script.sh"
T0=$(date +%s); el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
timeout 250 python3 benchmarks/decode_ab.py --preset gpt-oss-120b,nemotron-super,nemotron-nano \
  --weight-format mxfp4,nvfp4 --tokens 1,8,64 --rounds 2 \
  --settings default,ws4dec,ws4dectma,ws4dec4,ws4decs,ws4dec4s,ws4dec4sr > $OUT/ab_ws4dec.txt 2>&1
el "ab_ws4dec rc=$?"
timeout 170 python3 benchmarks/decode_ab.py --preset deepseek-v3-tp8,qwen3-30b-a3b,nemotron-nano,minimax-m2 \
  --weight-format bf16,fp8_tensor,fp8_channel,fp8_block --tokens 1,8 --rounds 2 \
  --settings default,tabler,wsdecr > $OUT/ab_tabler.txt 2>&1
el "ab_tabler rc=$?"
grep -v "^\s*$" $OUT/ab_ws4dec.txt | tail -20; tail -34 $OUT/ab_tabler.txt | cut -c1-150
