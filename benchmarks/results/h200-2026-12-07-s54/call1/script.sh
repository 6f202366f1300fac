#!/usr/bin/env bash
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
export PYTHONPATH=$PWD/src
if [[ "$name" == *H200* ]]; then
  bash benchmarks/results/h100-2026-12-06-s46/call1/harness_branch.sh
fi
timeout 110 python3 benchmarks/decode_ab.py --preset gpt-oss-120b,nemotron-super,nemotron-nano --weight-format mxfp4,nvfp4 \
  --tokens 1 --settings default,nows4mstatic,ws4st8 --rounds 3 --budget-s 0.2 > $OUT/ab_defaults.txt 2>&1
echo "abd rc=$?"
timeout 120 python3 benchmarks/decode_ab.py --preset deepseek-v3-tp8,qwen3-30b-a3b,nemotron-nano --weight-format bf16,fp8_tensor \
  --tokens 1,8 --settings default,efirst --rounds 2 --budget-s 0.2 > $OUT/ab_efirst.txt 2>&1
echo "abe rc=$?"; tail -13 $OUT/ab_efirst.txt
tail -7 $OUT/ab_defaults.txt
