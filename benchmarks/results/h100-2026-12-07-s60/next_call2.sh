#!/usr/bin/env bash
# Planned in the sixtieth session (carried over since the fifty-eighth): the next session's second call (carry .peers).
# On an H200: issue 3's harness at the FP8 prefill points of the fifty-fourth session's H200 entries (the 0.89x
# DeepSeek-V3 FP8 per channel 8192 point), then the FP4 prefill standing on the H200 (issue 4 asks for H200 numbers).
# On an H100: the GPU tests outside the kernel files (the layer path, graphs, compile, transformers, bench) under the
# fifty-ninth / sixtieth sessions' defaults.
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
export PYTHONPATH=$PWD/src
if [[ "$name" == *H200* ]]; then
  export PEERS=sglang,fusedmoe BUDGET_S=90
  export POINTS="--models dsv3,dsv3_tp8,minimax_m2.5 --dtypes fp8_channel,fp8_tensor,fp8_block --tokens 2048,8192"
  OUT=$OUT/h timeout 110 bash benchmarks/harness_run.sh prep > $OUT/h_prep.txt 2>&1; echo "prep rc=$?"
  OUT=$OUT/h timeout 150 bash benchmarks/harness_run.sh measure > $OUT/h_log.txt 2>&1; echo "harness rc=$?"
  python3 benchmarks/peer_ratio.py $OUT/h/peers.jsonl fusedmoe > $OUT/ratio.txt 2>&1; grep -E "^fp8" $OUT/ratio.txt
  (cd $OUT && tar czf h.tgz h && rm -rf h)
  timeout 150 python3 -m fusedmoe bench --preset gpt-oss-120b,nemotron-super,nemotron-nano \
    --weight-format mxfp4,nvfp4 --tokens 1536,2048,4096,8192 --peers triton --quick-ceilings --out $OUT/bench_fp4 \
    > $OUT/bench_fp4.txt 2>&1; echo "bench rc=$?"
  grep -E "│ (gpt|nemo)|ceilings" $OUT/bench_fp4.txt | cut -c1-130
else
  timeout 420 python3 -m pytest -q -rfE --tb=short -m gpu -n 4 -p no:cacheprovider --timeout 240 \
    --ignore tests/test_triton_moe.py --ignore tests/test_triton_fp4.py --ignore tests/test_distributed.py \
    --ignore tests/test_ws_fp4.py tests > $OUT/tests_rest.txt 2>&1; echo "tests rc=$?"; tail -5 $OUT/tests_rest.txt
fi
