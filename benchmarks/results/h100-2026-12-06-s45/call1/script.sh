#!/usr/bin/env bash
# s45 call 1: tiles from a global counter (FUSEDMOE_WS_DYN): GPU tests of the ws GEMMs (refactor + DYN same bits),
# per-kernel times DYN off/on (DeepSeek-V3 narrow + wide GEMM1 tile, Qwen3-30B), then decode_ab default vs wsdyn
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/env.txt; cat $OUT/env.txt
timeout 200 python3 -m pytest -q -rfE --tb=short -m gpu -n 4 -p no:cacheprovider --timeout 150 tests/test_ws_gemm.py \
  > $OUT/ws_gpu.txt 2>&1; echo "tests rc=$?"; grep -E "FAILED|ERROR|passed|failed" $OUT/ws_gpu.txt | cut -c1-300 | tail -8
for d in 0 1; do
  for g in '{}' '{"block_n": 128}'; do
    FUSEDMOE_WS_DYN=$d timeout 60 python3 benchmarks/kernel_breakdown.py --preset deepseek-v3 --weight-format fp8_channel \
      --tokens 8192 --calls 10 --bw 3.1 --gemm1 "$g" > $OUT/kb_dsv3_dyn${d}_$(echo $g | tr -dc 0-9).txt 2>&1
    echo "== dsv3 dyn=$d gemm1=$g rc=$?"; grep -E "T=8192|_ws_gemm|Error|error" $OUT/kb_dsv3_dyn${d}_$(echo $g | tr -dc 0-9).txt | cut -c1-140 | head -6
  done
  FUSEDMOE_WS_DYN=$d timeout 40 python3 benchmarks/kernel_breakdown.py --preset qwen3-30b-a3b --weight-format fp8_channel \
    --tokens 8192 --calls 10 --bw 3.1 > $OUT/kb_qwen_dyn$d.txt 2>&1
  echo "== qwen dyn=$d rc=$?"; grep -E "T=8192|_ws_gemm|Error|error" $OUT/kb_qwen_dyn$d.txt | cut -c1-140 | head -6
done
timeout 230 python3 benchmarks/decode_ab.py --preset deepseek-v3,qwen3-30b-a3b,mixtral-8x7b,minimax-m2,deepseek-v3-tp8 \
  --weight-format fp8_channel,bf16 --tokens 2048,8192 --settings default,wsdyn --rounds 2 --budget-s 2 \
  > $OUT/ab.txt 2>&1; echo "ab rc=$?"; tail -30 $OUT/ab.txt
