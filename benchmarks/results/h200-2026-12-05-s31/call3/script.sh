set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
timeout 60 python3 benchmarks/smoke_gluon.py --only wsdec-fp8c-t1,wsdec-fp8b-t8-2blocks --jobs 2 --timeout 55 2>&1 | tail -3
timeout 150 python3 -m pytest -q -rfE --tb=short -m gpu -n 4 -p no:cacheprovider --timeout 120 \
   tests/test_ws_dec.py tests/test_ws_fp4_dec.py -k "matches_reference or model_shapes or fused_same_bits" 2>&1 | tee "$OUT/optin_tests2.txt" | tail -12
timeout 100 python3 benchmarks/decode_ab.py --preset deepseek-v3-tp8,qwen3-30b-a3b,nemotron-nano \
  --weight-format bf16,fp8_tensor --tokens 1 --settings default,wsdec1,wsdec3,wsdec2b,wsdecfused --rounds 2 2>&1 | tee "$OUT/ab_wsdec2.txt" | tail -8
