# call 2 (twenty-sixth session): GEMM2 weight prefetch -- GPU tests, then the in-process decode A/B
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -q -rfE --tb=short -m gpu -n 4 -p no:cacheprovider --timeout 180 tests/test_triton_moe.py \
    tests/test_triton_fp4.py -k "prefetch or split_k_cuda_graph" > $OUT/pf_tests.log 2>&1
tail -4 $OUT/pf_tests.log
timeout 360 python3 benchmarks/decode_ab.py --preset qwen3-30b-a3b,deepseek-v3-tp8,gpt-oss-120b,nemotron-super \
    --weight-format bf16,fp8_block,nvfp4,mxfp4 --tokens 1,8,64 --settings default,g2pf,g2pf-early --rounds 2 \
    --budget-s 0.3 > $OUT/decode_ab.txt 2>&1
cat $OUT/decode_ab.txt | cut -c1-140
