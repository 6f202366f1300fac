#!/usr/bin/env bash
# One call on nvidia-h200-x2 / -x4 / -x8: independent single-GPU jobs at once, results packed into one
# archive ($OUT brings back at most 8 files).
#   GPU0_STAGES ... GPU7_STAGES: device_run.sh stages (a GPU without stages stays idle) (plus "harness": the shared peer harness with
#   PEERS, default sglang,fusedmoe); each GPU writes to $OUT/w/gpuN/, tuning into $OUT/w/tuned_gpuN.json
#   (a copy of the shipped table: merge it back with fusedmoe.bench.tune.merge_into_file).
set -uo pipefail
W="$OUT/w"; mkdir -p "$W"
run_gpu() {  # gpu index, stages
  local g=$1; shift
  export CUDA_VISIBLE_DEVICES=$g OUT="$W/gpu$g" TUNE_OUT="$W/tuned_gpu$g.json"
  mkdir -p "$OUT"; cp src/fusedmoe/configs/triton_moe_tuned.json "$TUNE_OUT"
  for st in "$@"; do
    local t0=$SECONDS
    if [[ $st == harness ]]; then
      PEERS="${PEERS:-sglang,fusedmoe}" BUDGET_S="${HARNESS_BUDGET_S:-200}" timeout "${HARNESS_TIMEOUT_S:-280}" \
          bash benchmarks/harness_run.sh >> "$OUT/run.log" 2>&1
    else
      bash benchmarks/device_run.sh "$st" >> "$OUT/run.log" 2>&1
    fi
    echo "gpu$g $st: $((SECONDS - t0)) s" | tee -a "$W/times.txt"
  done
}
for g in 0 1 2 3 4 5 6 7; do
  v="GPU${g}_STAGES"
  [[ -n "${!v:-}" ]] && run_gpu $g ${!v} &
done
wait
tar czf "$(dirname "$W")/results.tgz" -C "$W" . && rm -rf "$W"
