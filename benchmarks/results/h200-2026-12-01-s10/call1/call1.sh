#!/usr/bin/env bash
# session 10, call 1: torch grouped-GEMM probe, per-kernel breakdown of our prefill, full harness
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
t0=$(date +%s); ts() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/times.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $R/env.txt
ts start
timeout 110 python3 benchmarks/grouped_mm_probe.py --tokens 2048,8192 --json $R/probe.json > $R/probe.txt 2>&1
ts probe done
timeout 150 python3 benchmarks/kernel_breakdown.py --preset deepseek-v3,deepseek-v3-tp8,mixtral-8x7b,nemotron-nano \
  --weight-format fp8_channel,bf16 --tokens 2048,8192 --calls 10 --json $R/breakdown.json > $R/breakdown.txt 2>&1
ts breakdown done
OUT=$R/harness PEERS=sglang,fusedmoe BUDGET_S=260 timeout 330 bash benchmarks/harness_run.sh > $R/harness.log 2>&1
ts harness done
tar czf $OUT/results.tgz -C $OUT r
cat $R/probe.txt
grep -E "T=|us  _" $R/breakdown.txt | head -80
grep -A3 "summary\|geomean" $R/harness/peers.log | tail -14
cat $R/times.txt
