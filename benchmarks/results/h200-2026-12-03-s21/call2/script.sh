set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s)
el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
timeout 120 python3 benchmarks/quant_probe.py --variants > $OUT/quant_probe.txt 2>&1; el "qprobe rc=$?"
timeout 120 python3 benchmarks/kernel_breakdown.py --preset deepseek-v3-tp8,qwen3-30b-a3b,nemotron-nano --weight-format fp8_channel,fp8_tensor --tokens 1 --calls 20 > $OUT/breakdown_decode.txt 2>&1; el "bd rc=$?"
cat $OUT/quant_probe.txt
grep -E "floor|us  " $OUT/breakdown_decode.txt | cut -c1-120
