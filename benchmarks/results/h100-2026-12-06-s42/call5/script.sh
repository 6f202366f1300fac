#!/usr/bin/env bash
# s42 call 5: Nsight Compute on one layer call -- the FP4 prefill (joined chunks, the new default) at 4096 tokens and
# issue 3's worst point (DeepSeek-V3 FP8 per channel, 8192 tokens): SOL, pipes, memory, stalls, scheduler
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/env.txt
which ncu >> $OUT/env.txt 2>&1
SEC="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy"
for c in "gpt-oss-120b mxfp4 4096" "nemotron-super nvfp4 4096" "deepseek-v3 fp8_channel 8192"; do
  set -- $c
  timeout 130 ncu --profile-from-start off --clock-control none $SEC --print-summary none \
    python3 benchmarks/ncu_layer.py --preset $1 --weight-format $2 --tokens $3 > $OUT/ncu_$1_$2_$3.txt 2>&1
  echo "$c rc=$?"; grep -E "one call|==PROF==|==ERROR==" $OUT/ncu_$1_$2_$3.txt | head -5
  grep -E "^  [a-zA-Z_].*\(|Duration|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput|Issue Slots Busy|No Eligible" $OUT/ncu_$1_$2_$3.txt | head -40
done
