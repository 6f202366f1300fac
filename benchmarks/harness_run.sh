#!/usr/bin/env bash
# The shared peer harness (.peers = ../shared/bench/peers with vendor/ filled) with our plugin, with
# both peers' Triton kernels compiled up front in parallel (the harness compiles a plugin's kernels
# lazily in its one measuring process, which would spend most of its time budget on them).
#   bash benchmarks/harness_run.sh prep      # compile only (can overlap with other GPU work)
#   bash benchmarks/harness_run.sh measure   # measure (after prep; nothing else on the GPU)
#   bash benchmarks/harness_run.sh           # both
# Env: OUT (results), PEERS (default sglang,fusedmoe,fusedmoe-fastacc,fusedmoe-pdl: the FP8
# fast-accumulation variant, FP8 tensor/channel cases only, and programmatic dependent launch), BUDGET_S (default 430), PLAN_ARGS (e.g. --quick),
# PRECOMPILE_ARGS (precompile_harness.py's filters matching PLAN_ARGS, e.g. --dtypes fp8_tensor --tokens 1,8).
# POINTS: a subset of the plan as precompile_harness.py spells it ("--models dsv3,mixtral --dtypes fp8_tensor
# --tokens 1,8", comma lists): sets PRECOMPILE_ARGS to it and appends it to PLAN_ARGS with spaces (the harness's
# --models / --dtypes / --tokens take space-separated lists) -- the two spellings from one string.
set -uo pipefail
if [[ -n "${POINTS:-}" ]]; then
  PRECOMPILE_ARGS="$POINTS"; PLAN_ARGS="${PLAN_ARGS:-} ${POINTS//,/ }"
fi
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
OUT="${OUT:-$PWD/bench_results}"; mkdir -p "$OUT"
export PEERS="${PEERS:-sglang,fusedmoe,fusedmoe-fastacc,fusedmoe-pdl}"
ARGS=(--peers "$PEERS" --plugin ../benchmarks/harness_plugin.py ${PLAN_ARGS:-})
stage="${1:-all}"
if [[ $stage == prep || $stage == all ]]; then
  quick=""; [[ "${PLAN_ARGS:-}" == *--quick* ]] && quick="--quick"
  python3 benchmarks/precompile_harness.py --jobs 6 $quick ${PRECOMPILE_ARGS:-} > "$OUT/precompile_fusedmoe.log" 2>&1 &
  ours=$!
  # an 80 GB card (H100) cannot hold our precompile's weights and SGLang's 8 shards at once (s36: 30 of SGLang's
  # shard points ran out of memory and compiled inside the measuring process instead): one after the other there
  mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
  if [[ "${mem:-0}" -lt 100000 ]]; then wait "$ours"; fi
  for i in 0 1 2 3 4 5 6 7; do
    (cd .peers && python3 run_peers.py "${ARGS[@]}" --precompile-shard "$i/8") >> "$OUT/precompile_sglang.log" 2>&1 &
  done
  wait
  tail -3 "$OUT/precompile_fusedmoe.log"; grep -h "precompile" "$OUT/precompile_sglang.log" | tail -8
fi
if [[ $stage == measure || $stage == all ]]; then
  (cd .peers && python3 run_peers.py "${ARGS[@]}" --jobs 0 --budget-s "${BUDGET_S:-430}" --out "$OUT" 2>&1 \
     | tee "$OUT/peers.log" | tail -70)
fi
