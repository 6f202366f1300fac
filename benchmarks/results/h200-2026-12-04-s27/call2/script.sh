#!/usr/bin/env bash
# s27 call 2: issue 3's full shared harness on the current code (fusedmoe vs SGLang, 175 points)
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
cp .calls/s27_call2.sh "$OUT/script.sh"
mkdir -p "$OUT/h"
OUT="$OUT/h" PEERS=sglang,fusedmoe BUDGET_S=300 bash benchmarks/harness_run.sh 2>&1 | tail -60
cp "$OUT/h/peers.log" "$OUT/peers.log" 2>/dev/null
(cd "$OUT" && tar czf h.tgz h && rm -rf h)
