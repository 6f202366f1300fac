#!/usr/bin/env bash
# s59 call 2: the A/B of the FP4 prefill opt-ins at 4096 / 2048 tokens (their GPU tests passed in call 1)
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
timeout 280 python3 benchmarks/decode_ab.py --preset gpt-oss-120b,nemotron-super,nemotron-nano \
  --weight-format mxfp4,nvfp4 --tokens 4096,2048 --settings default,ws4ss,ws4one,ws4pair --rounds 2 --budget-s 0.12 \
  > $OUT/ab.txt 2>&1; echo "ab rc=$?"
grep -v -i warn $OUT/ab.txt | cut -c1-170 | tail -16
