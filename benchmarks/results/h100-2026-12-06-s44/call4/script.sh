#!/usr/bin/env bash
# s44 call 4: per-kernel times with the warp-specialized GEMMs' own row copies forced off / on (FUSEDMOE_WS_XGATHER)
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/env.txt
for xg in 0 1; do for p in deepseek-v3 qwen3-30b-a3b; do
  FUSEDMOE_WS_XGATHER=$xg timeout 100 python3 benchmarks/kernel_breakdown.py --preset $p --weight-format fp8_channel \
    --tokens 8192 --calls 10 --bw 3.1 > $OUT/kb_${p}_xg$xg.txt 2>&1
  echo "== $p xg=$xg"; grep -E "T=8192|us  _" $OUT/kb_${p}_xg$xg.txt | head -8
done; done
