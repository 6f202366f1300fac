#!/usr/bin/env bash
# s47 call 5: issue 4's FP4 prefill table with DYN; X_GATHER with DYN on DSv3 8192; GEMM2 wide tile elsewhere
export PYTHONPATH=$PWD/src
timeout 200 python3 -m fusedmoe bench --preset gpt-oss-120b,nemotron-super,nemotron-nano --weight-format mxfp4,nvfp4 \
  --tokens 2048,4096,8192 --peers triton --quick-ceilings > $OUT/fp4bench.txt 2>&1; echo "fp4 bench rc=$?"
KB="python3 benchmarks/kernel_breakdown.py --calls 10 --bw 3.1"
for xg in 0 1; do FUSEDMOE_WS_XGATHER=$xg timeout 60 $KB --preset deepseek-v3 --weight-format fp8_channel --tokens 8192 > $OUT/xg$xg.txt 2>&1; echo "xg$xg rc=$?"; done
for g in base wide; do
  a=(); [[ $g == wide ]] && a=(--gemm2 '{"block_n": 256, "num_stages": 3}')
  timeout 90 $KB --preset qwen3-30b-a3b,nemotron-nano,deepseek-v3-tp8 --weight-format fp8_channel,fp8_tensor --tokens 8192 "${a[@]}" > $OUT/g2$g.txt 2>&1; echo "g2 $g rc=$?"
done
tail -30 $OUT/fp4bench.txt
for f in xg0 xg1 g2base g2wide; do echo "== $f"; grep -E "preset|_ws_gemm_kernel|total" $OUT/$f.txt | head -20; done
