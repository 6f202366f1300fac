set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 320 python3 benchmarks/smoke_gluon.py --jobs 5 --timeout 120 --json "$OUT/smoke.json" 2>&1 | tee "$OUT/smoke.txt" | tail -30
timeout 200 python3 benchmarks/decode_ab.py --preset deepseek-v3-tp8,qwen3-30b-a3b,nemotron-nano \
  --weight-format bf16,fp8_tensor,fp8_block --tokens 1,8 --settings default,wsdec,wsdectma,wsdecfused --rounds 2 2>&1 | tee "$OUT/ab_wsdec.txt" | tail -40
