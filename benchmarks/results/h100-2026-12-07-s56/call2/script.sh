#!/usr/bin/env bash
# Planned in the fifty-fifth session: the next session's second call. On an H200 afterwards: the BF16 ReLU^2 tune
# on the H200 (call3/script.sh, priority order under a deadline; copy back only the entries the tuner wrote -- it now
# skips kept heuristics -- after checking their neighbours, see BENCHMARKS.md). On either GPU first, ~220 s: where a one-token layer's time goes
# for ReLU^2 against SwiGLU at the same shapes (the H200 harness: Qwen3-30B 26.2 us ReLU^2 against 26.7 us SwiGLU for
# 2/3 of the bytes -- the fifty-fifth session's H100 tune found the heuristic within 0-9 % of the best candidate, so
# not a table matter), and the top-k combine inside GEMM2 at 1 / 8 tokens (decode_ab's fusecomb; last measured in the
# sixth session, 4 % slower at one token, before programmatic dependent launch and the decode kernels).
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
export PYTHONPATH=$PWD/src
bw=3.1; [[ "$name" == *H200* ]] && bw=4.3
for act in swiglu relu2; do
  timeout 70 python3 benchmarks/kernel_breakdown.py --preset qwen3-30b-a3b,deepseek-v3-tp8 --activation $act \
    --weight-format bf16,fp8_channel --tokens 1 --calls 10 --bw $bw > $OUT/kb_t1_$act.txt 2>&1; echo "kb $act rc=$?"
  grep -E "floor|kernel|align|combine|_row" $OUT/kb_t1_$act.txt | grep -v Warn | cut -c1-110
done
timeout 80 python3 benchmarks/decode_ab.py --preset qwen3-30b-a3b,deepseek-v3-tp8,nemotron-nano,minimax-m2 \
  --weight-format bf16,fp8_tensor --tokens 1,8 --settings default,fusecomb --rounds 2 --budget-s 0.2 \
  > $OUT/ab_fusecomb.txt 2>&1; echo "ab rc=$?"; cut -c1-110 $OUT/ab_fusecomb.txt
if [[ "$name" == *H200* ]]; then
  DEADLINE_S=200 bash benchmarks/results/h100-2026-12-07-s55/call3/script.sh
fi
