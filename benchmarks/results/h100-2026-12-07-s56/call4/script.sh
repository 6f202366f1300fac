#!/usr/bin/env bash
# Planned in the fifty-sixth session (after its two H100 calls; ~330 device-seconds were left): issue 3's harness at
# the FP8 prefill points of DeepSeek-V3, its TP8 shard and MiniMax-M2 (2048 / 8192 tokens) -- on an H200 the
# confirmation of the fifty-fourth session's H200 entries and of the one point behind SGLang (DeepSeek-V3 FP8 per
# channel at 8192, 0.89x before them); on an H100 the same points against the fiftieth session's H100 run.
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
export PYTHONPATH=$PWD/src
P="--models dsv3,dsv3_tp8,minimax_m2.5 --dtypes fp8_channel,fp8_tensor,fp8_block --tokens 2048,8192"
export PEERS=sglang,fusedmoe BUDGET_S=90 PLAN_ARGS="${P//,/ }" PRECOMPILE_ARGS="$P"   # the harness: spaces
OUT=$OUT/h timeout 110 bash benchmarks/harness_run.sh prep > $OUT/h_prep.txt 2>&1; echo "prep rc=$?"
OUT=$OUT/h timeout 110 bash benchmarks/harness_run.sh measure > $OUT/h_log.txt 2>&1; echo "harness rc=$?"
python3 benchmarks/peer_ratio.py $OUT/h/peers.jsonl fusedmoe > $OUT/ratio.txt 2>&1; grep -E "^fp8" $OUT/ratio.txt
(cd $OUT && tar czf h.tgz h && rm -rf h)
