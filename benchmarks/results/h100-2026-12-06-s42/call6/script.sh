#!/usr/bin/env bash
# s42 call 6: Nsight Compute source counters (SASS-level warp stall sampling) of the FP4 prefill GEMM1 (gpt-oss-120b
# MXFP4, 4096 tokens, joined chunks) and the FP8 per-channel GEMM1 (DeepSeek-V3, 8192 tokens)
export PYTHONPATH=$PWD/src
for c in "gpt-oss-120b mxfp4 4096 _ws_fp4_kernel" "deepseek-v3 fp8_channel 8192 _ws_gemm_kernel"; do
  set -- $c
  timeout 150 ncu --profile-from-start off --clock-control none --kernel-name regex:$4 --launch-count 1 \
    --section SourceCounters --section WarpStateStats --import-source no -o $OUT/src_$1 \
    python3 benchmarks/ncu_layer.py --preset $1 --weight-format $2 --tokens $3 > $OUT/src_$1.log 2>&1
  echo "$c rc=$?"; tail -2 $OUT/src_$1.log
  ncu --import $OUT/src_$1.ncu-rep --page source --print-source sass --csv > $OUT/sass_$1.csv 2> $OUT/sass_$1.err
  echo "csv rc=$? $(wc -l < $OUT/sass_$1.csv) lines"; head -c 600 $OUT/sass_$1.err
  ncu --import $OUT/src_$1.ncu-rep --page details > $OUT/det_$1.txt 2>&1
done
head -3 $OUT/sass_gpt-oss-120b.csv | cut -c1-600
cd $OUT && tar czf reps.tgz *.ncu-rep && rm -f *.ncu-rep
