#!/usr/bin/env bash
# s27 call 1: dot-order repro (bf16, no FP4), then Nsight Compute on three decode points
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
cp .calls/s27_call1.sh "$OUT/script.sh"
NCU_POINTS="gpt-oss-120b:mxfp4:1 deepseek-v3-tp8:fp8_tensor:1 nemotron-super:nvfp4:1" \
  bash benchmarks/device_run.sh dot-repro ncu 2>&1 | tail -40
for f in "$OUT"/ncu.tgz; do tar xzf "$f" -C /tmp; done
for s in /tmp/ncu/*.summary.txt; do echo "== $s"; head -60 "$s"; done
