#!/usr/bin/env bash
# s46 call 1: issue 3's full harness (sglang vs fusedmoe with DYN "auto"), nothing beside it
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/env.txt; cat $OUT/env.txt
export PEERS=sglang,fusedmoe BUDGET_S=340
OUT=$OUT/h timeout 200 bash benchmarks/harness_run.sh prep > $OUT/h_prep.txt 2>&1; echo "prep rc=$?"
OUT=$OUT/h timeout 355 bash benchmarks/harness_run.sh measure > $OUT/h_log.txt 2>&1; echo "harness rc=$?"
python3 benchmarks/peer_ratio.py $OUT/h/peers.jsonl fusedmoe > $OUT/ratio.txt 2>&1
tail -4 $OUT/h_log.txt; tail -24 $OUT/ratio.txt
cd $OUT && tar czf h.tgz h && rm -rf h
