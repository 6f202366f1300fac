#!/usr/bin/env bash
# s51 call 3: issue 3's harness at the BF16 2048 / 8192-token points of the many-expert models: SGLang vs the default
# vs fusedmoe-dyn (counted tiles; 16-bit weights keep static tiles by default) in one process
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/env.txt; git rev-parse HEAD >> $OUT/env.txt; cat $OUT/env.txt
export PEERS=sglang,fusedmoe,fusedmoe-dyn BUDGET_S=250
export PLAN_ARGS="--models dsv3 dsv3_tp8 qwen3_30b_a3b minimax_m2.5 nemotron --dtypes bf16 --tokens 2048 8192"
export PRECOMPILE_ARGS="--models dsv3,dsv3_tp8,qwen3_30b_a3b,minimax_m2.5,nemotron --dtypes bf16 --tokens 2048,8192"
OUT=$OUT/h timeout 130 bash benchmarks/harness_run.sh prep > $OUT/h_prep.txt 2>&1; echo "prep rc=$?"
OUT=$OUT/h timeout 260 bash benchmarks/harness_run.sh measure > $OUT/h_log.txt 2>&1; echo "harness rc=$?"
python3 benchmarks/peer_ratio.py $OUT/h/peers.jsonl fusedmoe > $OUT/ratio.txt 2>&1
tail -8 $OUT/h_log.txt; tail -26 $OUT/ratio.txt
cd $OUT && tar czf h.tgz h && rm -rf h
