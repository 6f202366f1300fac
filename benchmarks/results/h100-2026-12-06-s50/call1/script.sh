#!/usr/bin/env bash
# s50 H200 call 1: issue 3's full harness (the s46 script), then the 16-bit skip-half A/B at prefill
bash benchmarks/results/h100-2026-12-06-s46/call1/harness_branch.sh
export PYTHONPATH=$PWD/src
git rev-parse HEAD >> $OUT/env.txt
timeout 170 python3 benchmarks/decode_ab.py --preset deepseek-v3,qwen3-30b-a3b,deepseek-v3-tp8 \
  --weight-format bf16 --tokens 2048,8192 --settings default,ws16skip --rounds 2 > $OUT/ab_skip16.txt 2>&1
echo "ab_skip16 rc=$?"; grep -vE "^\s*$" $OUT/ab_skip16.txt | tail -14
