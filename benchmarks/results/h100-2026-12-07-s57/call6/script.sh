#!/usr/bin/env bash
# s57 call 6: the H100's own FP4 entries at 8 / 32 / 64 tokens (it ran the H200 sibling's 8 / 64-token entries):
# gpt-oss-120b, Nemotron-3-Nano, Nemotron-3-Super in MXFP4 / NVFP4, priority order under a deadline, merged into a
# copy of the shipped table; then the layers under that table (kernel_breakdown, all kernels of a call)
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
cp src/fusedmoe/configs/triton_moe_tuned.json $OUT/table.json
start=$SECONDS
for pf in gpt-oss-120b:mxfp4 nemotron-nano:nvfp4 nemotron-super:nvfp4 gpt-oss-120b:nvfp4 nemotron-nano:mxfp4 \
          nemotron-super:mxfp4; do
  if (( SECONDS - start > ${DEADLINE_S:-400} )); then echo "$pf skipped (deadline)"; continue; fi
  timeout 110 python3 -m fusedmoe tune --preset ${pf%%:*} --weight-format ${pf##*:} --tokens 8,32,64 \
    --max-candidates 14 --budget-s 75 --no-progress --out $OUT/table.json >> $OUT/tune_fp4.txt 2>&1
  echo "$pf rc=$? t=$((SECONDS - start))"
done
grep -E "T=.*tuned|kept|replace" $OUT/tune_fp4.txt | cut -c1-160
cp $OUT/table.json src/fusedmoe/configs/triton_moe_tuned.json
timeout 100 python3 benchmarks/kernel_breakdown.py --preset gpt-oss-120b,nemotron-nano,nemotron-super \
  --weight-format mxfp4,nvfp4 --tokens 8,32,64 --calls 10 --bw 3.1 > $OUT/kb_tuned.txt 2>&1; echo "kb rc=$?"
grep floor $OUT/kb_tuned.txt | cut -c1-110
