#!/usr/bin/env bash
# Sixty-first session, call 4: the pair order's A/B again, five rounds of 0.3 s a setting, 2048 / 4096 / 8192 tokens.
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
export PYTHONPATH=$PWD/src
timeout 400 python3 benchmarks/decode_ab.py --preset gpt-oss-120b,nemotron-super,nemotron-nano \
  --weight-format mxfp4,nvfp4 --tokens 8192,4096,2048 --settings default,ws4pairs --rounds 5 \
  --budget-s 0.3 > $OUT/ab3.txt 2>&1; echo "ab rc=$?"
grep -vE "^\s*$" $OUT/ab3.txt | tail -19 | cut -c1-150
