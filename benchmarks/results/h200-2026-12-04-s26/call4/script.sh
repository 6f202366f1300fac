export PYTHONPATH=$PWD/src; timeout 430 python3 -m pytest -q -rfE --tb=short -m gpu -n 8 -p no:cacheprovider --timeout 300 tests > $OUT/gpu_tests.txt 2>&1
