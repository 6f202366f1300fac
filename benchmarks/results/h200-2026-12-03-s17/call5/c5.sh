export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
timeout 140 python3 benchmarks/kernel_breakdown.py --preset qwen3-30b-a3b,deepseek-v3-tp8,nemotron-nano \
  --weight-format fp8_channel,fp8_tensor,bf16 --tokens 1,8 --calls 20 --json $OUT/breakdown_decode.json > $OUT/breakdown_decode.txt 2>&1
echo rc=$?; tail -60 $OUT/breakdown_decode.txt | cut -c1-180
