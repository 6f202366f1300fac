set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
timeout 330 python3 -m pytest -q -rfE --tb=short -m gpu -n 4 -p no:cacheprovider --timeout 200 \
   tests/test_ws_dec.py tests/test_ws_fp4_dec.py 2>&1 | tee "$OUT/optin_tests.txt" | tail -25
timeout 200 python3 benchmarks/decode_ab.py --preset gpt-oss-120b,nemotron-super,nemotron-nano \
   --weight-format mxfp4,nvfp4 --tokens 1,8,64 --settings default,ws4dec,ws4dec2 --rounds 2 \
   2>&1 | tee "$OUT/ab_ws4dec.txt" | tail -20
