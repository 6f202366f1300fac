#!/usr/bin/env bash
# Planned in the fifty-fourth session: the next H200 session's second call. The harness's BF16 ReLU^2 cases of the
# SwiGLU models (DeepSeek-V3 / TP8, Qwen3-30B, MiniMax-M2, Mixtral shapes with a non-gated activation) have no table
# entries of their own (the table is keyed by activation), and trail the same shapes' SwiGLU points by 5-21 points of
# the roofline at one token on the H200 (fifty-fourth session's full run: Qwen3-30B 44.1 against 65.0 %, DeepSeek-V3
# TP8 50.7 against 63.9 %, MiniMax-M2 68.2 against 84.9 %, Mixtral 82.1 against 92.7 %) and at 512 tokens (Mixtral
# 60.4 against 70.3 %, DeepSeek-V3 TP8 81.5 against 91.6 %). Tune them (merged into the shipped table; copy
# $OUT/table.json back to src/fusedmoe/configs/triton_moe_tuned.json and commit with the summary).
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
cp src/fusedmoe/configs/triton_moe_tuned.json $OUT/table.json
for s in 7168,256,256,8 2048,768,128,8 3072,1536,256,8 7168,2048,256,8 4096,14336,8,2; do
  timeout 110 python3 -m fusedmoe tune --shape $s --activation relu2 --weight-format bf16 --tokens 1,8,512 \
    --max-candidates 24 --budget-s 90 --no-progress --out $OUT/table.json >> $OUT/tune_relu2.txt 2>&1
  echo "$s rc=$?"
done
grep -E "custom|kept|new" $OUT/tune_relu2.txt | tail -20
