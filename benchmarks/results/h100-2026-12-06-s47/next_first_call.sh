#!/usr/bin/env bash
# The next session's first device call (BENCH_COMMANDS.md item 0), picking its work by card; carry .peers.
#   H200: issue 3's full harness alone (its targets are the H200's).
#   H100: the forty-seventh session's two changes (row copies for gated layers with counted tiles; GEMM2's wide tile
#   for Qwen3-30B per tensor / Nemotron per channel at 8192) through the harness at the points they touch, with
#   X_GATHER forced off beside them (= the old behaviour at DeepSeek-V3 / MiniMax-M2 8192), then DeepSeek-V3 TP8's
#   GEMM1 warp-specialized (narrow and wide tiles) against its table entry.
export PYTHONPATH=$PWD/src
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$card" | tee $OUT/env.txt
if [[ $card == *H200* ]]; then
  export PEERS=sglang,fusedmoe BUDGET_S=340
  OUT=$OUT/h timeout 200 bash benchmarks/harness_run.sh prep > $OUT/h_prep.txt 2>&1; echo "prep rc=$?"
  OUT=$OUT/h timeout 355 bash benchmarks/harness_run.sh measure > $OUT/h_log.txt 2>&1; echo "harness rc=$?"
else
  export PEERS=sglang,fusedmoe,fusedmoe-noxg BUDGET_S=200
  export PLAN_ARGS="--models dsv3 minimax_m2.5 qwen3_30b_a3b nemotron --dtypes fp8_channel fp8_tensor fp8_block --tokens 2048 8192"
  export PRECOMPILE_ARGS="--models dsv3,minimax_m2.5,qwen3_30b_a3b,nemotron --dtypes fp8_channel,fp8_tensor,fp8_block --tokens 2048,8192"
  OUT=$OUT/h timeout 400 bash benchmarks/harness_run.sh > $OUT/h_log.txt 2>&1; echo "harness rc=$?"
  timeout 150 python3 benchmarks/kernel_breakdown.py --preset deepseek-v3-tp8 --weight-format fp8_channel,fp8_tensor \
    --tokens 8192 --calls 10 --bw 3.1 \
    --gemm1 '{"warp_specialized": true, "block_n": 64, "num_warps": 4, "num_stages": 5}' \
    --gemm1 '{"warp_specialized": true, "block_n": 128, "num_warps": 4, "num_stages": 4, "pipelined_promotion": true}' \
    > $OUT/tp8_ws_gemm1.txt 2>&1; echo "tp8 rc=$?"
  grep -E "T=8192|_gemm1_kernel|_ws_gemm_kernel" $OUT/tp8_ws_gemm1.txt | cut -c1-150
fi
python3 benchmarks/peer_ratio.py $OUT/h/peers.jsonl fusedmoe > $OUT/ratio.txt 2>&1
tail -4 $OUT/h_log.txt; tail -24 $OUT/ratio.txt
cd $OUT && tar czf h.tgz h && rm -rf h
