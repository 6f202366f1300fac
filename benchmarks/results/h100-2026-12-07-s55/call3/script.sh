#!/usr/bin/env bash
# session 55: the fifty-fourth session's next_call2.sh (BF16 ReLU^2 cases of the SwiGLU models' shapes, no table
# entries of their own) in priority order (largest gap to the SwiGLU point first) under a deadline, so a short
# device budget still brings back the first shapes' entries merged into a copy of the shipped table
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
cp src/fusedmoe/configs/triton_moe_tuned.json $OUT/table.json
start=$SECONDS
for s in 2048,768,128,8 7168,256,256,8 3072,1536,256,8 4096,14336,8,2 7168,2048,256,8; do
  if (( SECONDS - start > ${DEADLINE_S:-330} )); then echo "$s skipped (deadline)"; continue; fi
  timeout 105 python3 -m fusedmoe tune --shape $s --activation relu2 --weight-format bf16 --tokens 1,8,512 \
    --max-candidates 20 --budget-s 70 --no-progress --out $OUT/table.json >> $OUT/tune_relu2.txt 2>&1
  echo "$s rc=$? t=$((SECONDS - start))"
done
grep -E "T=.*tuned|kept" $OUT/tune_relu2.txt | cut -c1-160
