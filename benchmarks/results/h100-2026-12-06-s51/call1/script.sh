#!/usr/bin/env bash
# s51 call 1: on an H200 the full harness (no H200 number for twelve sessions); on an H100: the FP4 decode kernel's
# L2 prefetch (s51, opt-in) A/B, the one-token FP4 layers with their weights hot in L2 (--sets 1), then s50's
# planned next call (16-bit skip with counted tiles; the align's column tiles; the FP4 decode GPU tests -- with
# this session's L2PF same-bits assertions)
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
if [[ "$name" == *H200* ]]; then
  bash benchmarks/results/h100-2026-12-06-s46/call1/harness_branch.sh
else
  export PYTHONPATH=$PWD/src
  timeout 150 python3 -u benchmarks/decode_ab.py --preset gpt-oss-120b,nemotron-nano --weight-format mxfp4,nvfp4 \
    --tokens 1,8 --settings default,ws4l2pf,ws4l2pfn,ws4decsr,ws4decsr+ws4l2pfn --rounds 2 --budget-s 0.3 \
    > $OUT/ab_l2pf.txt 2>&1; echo "ab_l2pf rc=$?"; tail -9 $OUT/ab_l2pf.txt
  timeout 90 python3 benchmarks/kernel_breakdown.py --preset gpt-oss-120b,nemotron-nano \
    --weight-format mxfp4 --tokens 1 --calls 20 --bw 3.1 --sets 1 > $OUT/kb_fp4_t1_hot.txt 2>&1; echo "kbhot rc=$?"
  grep -E "T=|_dec|_align" $OUT/kb_fp4_t1_hot.txt
  bash benchmarks/results/h100-2026-12-06-s50/next_call.sh
fi
