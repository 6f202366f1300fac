#!/usr/bin/env bash
# s47 call 6: the row copies (X_GATHER) against the gather launch with counted tiles (DYN) in effect; GEMM2 wide tile repeat
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 300 python3 benchmarks/decode_ab.py --preset deepseek-v3,minimax-m2,nemotron-nano,qwen3-235b-a22b \
  --weight-format fp8_channel,fp8_tensor --tokens 2048,8192 --settings default,wsxg --rounds 2 --budget-s 2 > $OUT/xg_ab.txt 2>&1; echo "xg ab rc=$?"
timeout 60 python3 benchmarks/decode_ab.py --preset deepseek-v3 --weight-format fp8_block --tokens 2048,8192 \
  --settings default,wsxg --rounds 2 --budget-s 2 > $OUT/xg_ab_blk.txt 2>&1; echo "xg ab blk rc=$?"
KB="python3 benchmarks/kernel_breakdown.py --calls 10 --bw 3.1"
timeout 80 $KB --preset qwen3-30b-a3b,nemotron-nano --weight-format fp8_tensor,fp8_channel --tokens 8192 --gemm2 '{"block_n": 256, "num_stages": 3}' > $OUT/g2wide2.txt 2>&1; echo "g2 rc=$?"
tail -30 $OUT/xg_ab.txt; tail -6 $OUT/xg_ab_blk.txt; grep -E "T=8192|_ws_gemm" $OUT/g2wide2.txt | cut -c1-150
