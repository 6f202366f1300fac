#!/usr/bin/env bash
# session 16, call 4: where FP8 prefill time goes (per-kernel breakdown; Nsight Compute on the warp-specialized GEMMs)
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s)
timeout 150 python3 benchmarks/kernel_breakdown.py --preset deepseek-v3,mixtral-8x7b,qwen3-30b-a3b,nemotron-nano \
  --weight-format fp8_tensor --tokens 2048,8192 --calls 6 > $OUT/breakdown.txt 2>&1
echo "breakdown rc=$? $(( $(date +%s)-T0 )) s" | tee -a $OUT/breakdown.txt
mkdir -p $OUT/ncu
for pt in deepseek-v3:fp8_tensor:8192 qwen3-30b-a3b:fp8_tensor:2048; do
  tag="${pt//:/_}"
  timeout 150 ncu --clock-control none --profile-from-start off \
      --section SpeedOfLight --section Occupancy --section SchedulerStats --section WarpStateStats \
      --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section SourceCounters --import-source no \
      --metrics sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_gmma.sum,lts__t_bytes.sum.per_second,dram__bytes_read.sum.per_second,dram__bytes_write.sum.per_second,sm__cycles_active.avg \
      -f -o "$OUT/ncu/$tag" python3 benchmarks/ncu_profile.py --point "$pt" > "$OUT/ncu/$tag.log" 2>&1
  echo "ncu $pt rc=$? $(( $(date +%s)-T0 )) s"
  ncu -i "$OUT/ncu/$tag.ncu-rep" --page details --csv > "$OUT/ncu/$tag.details.csv" 2>&1
  ncu -i "$OUT/ncu/$tag.ncu-rep" --page raw --csv --metrics sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,lts__t_bytes.sum.per_second,dram__bytes_read.sum.per_second,dram__bytes_write.sum.per_second,gpu__time_duration.sum > "$OUT/ncu/$tag.raw.csv" 2>&1
  ncu -i "$OUT/ncu/$tag.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu/$tag.sass.csv" 2>&1
  python3 benchmarks/ncu_summary.py details "$OUT/ncu/$tag.details.csv" > "$OUT/ncu/$tag.summary.txt" 2>&1
  python3 benchmarks/ncu_summary.py stalls "$OUT/ncu/$tag.sass.csv" _ws 25 >> "$OUT/ncu/$tag.summary.txt" 2>&1
  rm -f "$OUT/ncu/$tag.sass.csv"
done
tar czf $OUT/ncu.tgz -C $OUT ncu && rm -rf $OUT/ncu/*.ncu-rep
grep -v "^\s*$" $OUT/breakdown.txt | tail -40 | cut -c1-220
