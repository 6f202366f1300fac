#!/usr/bin/env bash
# Sixty-first session, call 3: where the pair order's time goes at 8192 tokens (kernel times, default vs PAIRS=1).
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
export PYTHONPATH=$PWD/src
for pairs in 0 1; do
  for pf in gpt-oss-120b:nvfp4 nemotron-super:mxfp4; do
    FUSEDMOE_WS_FP4_PAIRS=$pairs timeout 100 python3 benchmarks/kernel_breakdown.py --preset ${pf%%:*} \
      --weight-format ${pf##*:} --tokens 8192 --calls 5 --bw 3.1 > $OUT/kb_${pf%%:*}_${pf##*:}_p$pairs.txt 2>&1
    echo "== pairs=$pairs $pf rc=$?"; grep -iE "gather|_ws_fp4|combine|total" $OUT/kb_${pf%%:*}_${pf##*:}_p$pairs.txt | cut -c1-140
  done
done
