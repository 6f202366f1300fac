#!/usr/bin/env bash
# Planned in the fifty-sixth session: the next session's second call (carry .peers). Issue 3's harness at the FP8
# per-channel and block decode points with the on-load quantization as a peer (fusedmoe-qload; if next_call.sh's A/B and GPU
# test hold, its default goes on), ~200 s; on an H200 then the fifty-fifth session's second call (the H200's BF16
# ReLU^2 tune under a deadline: its one-token breakdowns and fusecomb A/B already ran on the H100 in the fifty-sixth).
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
export PYTHONPATH=$PWD/src
P="--models dsv3,dsv3_tp8,qwen3_30b_a3b,minimax_m2.5,mixtral,nemotron --dtypes fp8_channel,fp8_block --tokens 1,8"
export PEERS=sglang,fusedmoe,fusedmoe-qload BUDGET_S=70 PLAN_ARGS="${P//,/ }" PRECOMPILE_ARGS="$P"
OUT=$OUT/h timeout 100 bash benchmarks/harness_run.sh prep > $OUT/h_prep.txt 2>&1; echo "prep rc=$?"
OUT=$OUT/h timeout 100 bash benchmarks/harness_run.sh measure > $OUT/h_log.txt 2>&1; echo "harness rc=$?"
python3 benchmarks/peer_ratio.py $OUT/h/peers.jsonl fusedmoe > $OUT/ratio.txt 2>&1; head -20 $OUT/ratio.txt
(cd $OUT && tar czf h.tgz h && rm -rf h)
if [[ "$name" == *H200* ]]; then
  DEADLINE_S=250 bash benchmarks/results/h100-2026-12-07-s55/call3/script.sh
fi
