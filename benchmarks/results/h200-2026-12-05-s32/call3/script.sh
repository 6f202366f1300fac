#!/usr/bin/env bash
# s32 call 4: Nsight Compute of the opt-in FP4 decode kernel (gpt-oss-120b MXFP4, 1 and 8 tokens) and the default
# Triton decode GEMMs at the same point, for the reading of why it is not faster
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
cp .calls/s32_c4.sh "$OUT/script.sh"
mkdir -p "$OUT/ncu"
prof() {  # tag point env...
  local tag=$1 pt=$2; shift 2
  env "$@" timeout 150 ncu --clock-control none --profile-from-start off \
      --section SpeedOfLight --section LaunchStats --section Occupancy --section SchedulerStats \
      --section WarpStateStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
      --section SourceCounters --import-source no -f -o "$OUT/ncu/$tag" \
      python3 benchmarks/ncu_profile.py --point "$pt" > "$OUT/ncu/$tag.log" 2>&1
  echo "ncu $tag rc=$?"; tail -2 "$OUT/ncu/$tag.log"
  ncu -i "$OUT/ncu/$tag.ncu-rep" --page details --csv > "$OUT/ncu/$tag.details.csv" 2>&1
  ncu -i "$OUT/ncu/$tag.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu/$tag.sass.csv" 2>&1
  python3 benchmarks/ncu_summary.py details "$OUT/ncu/$tag.details.csv" > "$OUT/ncu/$tag.summary.txt" 2>&1
  for k in _ws_fp4_dec _gemm1 _gemm2; do
    python3 benchmarks/ncu_summary.py stalls "$OUT/ncu/$tag.sass.csv" $k 40 >> "$OUT/ncu/$tag.summary.txt" 2>&1
  done
}
prof ws4dec_t1 gpt-oss-120b:mxfp4:1 FUSEDMOE_WS_FP4_DECODE=1
prof ws4dec_t8 gpt-oss-120b:mxfp4:8 FUSEDMOE_WS_FP4_DECODE=1
prof triton_t1 gpt-oss-120b:mxfp4:1 FUSEDMOE_WS_FP4_DECODE=0
for t in ws4dec_t1 triton_t1 ws4dec_t8; do echo "== $t"; head -60 "$OUT/ncu/$t.summary.txt"; done
tar czf "$OUT/ncu.tgz" -C "$OUT" ncu && rm -rf "$OUT/ncu"
