#!/usr/bin/env bash
# s27 call 5: activations in the dot order at decode tiles (GEMM2 only / both GEMMs): in-process speed A/B, then
# bit stability (dot_order_probe: each setting 20 runs against the register permutation's bits)
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
cp .calls/s27_call5.sh "$OUT/script.sh"
timeout 200 python3 benchmarks/decode_ab.py --preset gpt-oss-120b,nemotron-super,nemotron-nano --weight-format mxfp4,nvfp4 \
   --tokens 1,8,64 --settings default,dot2dec,dotdec --rounds 3 2>&1 | tee "$OUT/decode_ab.txt" | tail -20
for T in 1 64; do
  timeout 150 python3 benchmarks/dot_order_probe.py --runs 20 --tokens $T --min-block-m 16 2>&1 \
     | tee "$OUT/probe_T$T.txt" | grep -E '==|differ' | cut -c1-150
done
