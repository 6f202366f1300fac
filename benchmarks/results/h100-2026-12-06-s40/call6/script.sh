# (call 5's table copied back first)
export PYTHONPATH=$PWD/src; timeout 130 python3 -m pytest -q -rfE --tb=short -m gpu -n 4 -p no:cacheprovider --timeout 120 tests/test_triton_moe.py -k "deepseek or dsv3 or real or shape or block" > $OUT/tm_gpu.txt 2>&1; echo "rc=$?"; tail -5 $OUT/tm_gpu.txt
