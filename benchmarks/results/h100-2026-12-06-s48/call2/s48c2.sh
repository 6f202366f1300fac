#!/usr/bin/env bash
# s48 call 2: DeepSeek-V3 TP8 FP8 re-tune at 2048 / 8192 tokens with counted tiles and the row-copy rule in effect,
# then the layer's kernels with the new table.
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tee $OUT/env.txt
TUNE_OUT=$PWD/src/fusedmoe/configs/triton_moe_tuned.json TUNE_MAX_CANDIDATES=8 timeout 300 bash benchmarks/device_run.sh \
  "tune:deepseek-v3-tp8:fp8_tensor,fp8_channel,fp8_block:200:2048,8192" > $OUT/tune.txt 2>&1; echo "tune rc=$?"
cp src/fusedmoe/configs/triton_moe_tuned.json $OUT/
timeout 150 python3 benchmarks/kernel_breakdown.py --preset deepseek-v3-tp8 --weight-format fp8_channel,fp8_tensor,fp8_block \
  --tokens 2048,8192 --calls 10 --bw 3.1 > $OUT/kb_tp8.txt 2>&1; echo "kb rc=$?"
tail -14 $OUT/tune.txt
grep -E "config:|T=(2048|8192)|_gemm|_combine" $OUT/kb_tp8.txt | cut -c1-240
