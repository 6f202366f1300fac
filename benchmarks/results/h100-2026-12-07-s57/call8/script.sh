bash -c "PYTHONPATH=src pytest -q -m gpu tests/test_triton_moe.py -k \"amax or dynamic or tensor\""
