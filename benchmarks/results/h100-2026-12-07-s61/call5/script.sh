#!/usr/bin/env bash
# Sixty-first session, call 5: gpt-oss-120b (gated) pair order A/B with six rounds; the Nemotron (ReLU^2) FP4 prefill
# standing with the pair order on (FUSEDMOE_WS_FP4_PAIRS=1: what the non-gated rule makes the default).
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
export PYTHONPATH=$PWD/src
timeout 100 python3 benchmarks/decode_ab.py --preset gpt-oss-120b --weight-format mxfp4,nvfp4 --tokens 8192,4096 \
  --settings default,ws4pairs --rounds 6 --budget-s 0.3 > $OUT/ab4.txt 2>&1; echo "ab rc=$?"
grep -vE "^\s*$" $OUT/ab4.txt | tail -5 | cut -c1-150
FUSEDMOE_WS_FP4_PAIRS=1 timeout 270 python3 -m fusedmoe bench --preset nemotron-super,nemotron-nano \
  --weight-format mxfp4,nvfp4 --tokens 2048,4096,8192 --peers triton --quick-ceilings --no-progress \
  --out $OUT/bench > $OUT/bench.txt 2>&1; echo "bench rc=$?"
grep -E "│ (gpt|nemo)|ceilings" $OUT/bench.txt | cut -c1-150
