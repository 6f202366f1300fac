#!/usr/bin/env bash
# s43 call 8: the X_GATHER A/B again, two rounds, on four of call 7 points
export PYTHONPATH=$PWD/src; timeout 130 python3 benchmarks/decode_ab.py --preset qwen3-30b-a3b,deepseek-v3 --weight-format fp8_channel --tokens 2048,8192 --settings default,wsxg --rounds 2 --budget-s 2 > $OUT/ab2.txt 2>&1
