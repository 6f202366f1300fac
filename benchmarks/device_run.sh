#!/usr/bin/env bash
# One device call: environment, GPU tests, demo, the shared peer harness with our plugin, tuning.
#   bash benchmarks/device_run.sh [tests] [demo] [quick|full] [tune-fp8] [tune-fp4] [tune-rest] [bench] [bench-all]
# tune-*: merged into src/fusedmoe/configs/triton_moe_tuned.json, copied to $OUT (copy it back
# into the repo and commit); budgets in TUNE_BUDGET_S (default 300 each).
# Needs .peers/ (a copy of ../shared/bench/peers with vendor/ filled by get_peers.sh) carried along.
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
OUT="${OUT:-$PWD/bench_results}"
mkdir -p "$OUT"
stages=" $* "
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/env.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)" | tee -a "$OUT/env.txt"
if [[ "$stages" == *" tests "* ]]; then
  # real-shape GPU tests hold 10-50 GB each: at most 3 workers share the H200
  python3 -m pytest -q -rfE --tb=short -m gpu -n 3 -p no:cacheprovider tests 2>&1 | tee "$OUT/gpu_tests.log" | tail -25
fi
if [[ "$stages" == *" demo "* ]]; then
  python3 -m fusedmoe demo 2>&1 | tee "$OUT/demo.log" | tail -20
fi
if [[ "$stages" == *" quick "* ]]; then
  PLAN_ARGS="--quick ${PEERS_ARGS:-}" bash benchmarks/harness_run.sh 2>&1 | tee "$OUT/peers_quick.log" | tail -40
fi
if [[ "$stages" == *" full "* ]]; then
  PLAN_ARGS="${PEERS_ARGS:-}" bash benchmarks/harness_run.sh 2>&1 | tee "$OUT/peers_full.log" | tail -40
fi
if [[ "$stages" == *" tune-fp8 "* ]]; then
  python3 -m fusedmoe tune --preset qwen3-30b-a3b,deepseek-v3-tp8,minimax-m2,deepseek-v3,mixtral-8x7b \
      --weight-format fp8_tensor,fp8_channel,fp8_block --max-candidates 12 --jobs 8 --budget-s "${TUNE_BUDGET_S:-300}" \
      --report "$OUT/tune_fp8.json" --no-progress 2>&1 | tee "$OUT/tune_fp8.log" | tail -30
  cp src/fusedmoe/configs/triton_moe_tuned.json "$OUT/"
fi
if [[ "$stages" == *" tune-fp4 "* ]]; then
  python3 -m fusedmoe tune --preset qwen3-30b-a3b,gpt-oss-120b,nemotron-nano --weight-format nvfp4,mxfp4,mxfp8 \
      --max-candidates 12 --jobs 8 --budget-s "${TUNE_BUDGET_S:-300}" \
      --report "$OUT/tune_fp4.json" --no-progress 2>&1 | tee "$OUT/tune_fp4.log" | tail -30
  cp src/fusedmoe/configs/triton_moe_tuned.json "$OUT/"
fi
if [[ "$stages" == *" tune-rest "* ]]; then
  # what the 2026-11-29 sessions had not tuned: the other presets in BF16 / FP8 block (what bench-all
  # measures), FP8 per channel and MXFP8 for the three main presets
  python3 -m fusedmoe tune --preset minimax-m2,deepseek-v3,mixtral-8x7b,qwen3-235b-a22b,nemotron-super,gpt-oss-20b \
      --weight-format bf16,fp8_block --max-candidates 8 --jobs 12 --budget-s "${TUNE_BUDGET_S:-260}" \
      --report "$OUT/tune_rest.json" --no-progress 2>&1 | tee "$OUT/tune_rest.log" | tail -30
  python3 -m fusedmoe tune --preset qwen3-30b-a3b,deepseek-v3-tp8,nemotron-nano --weight-format fp8_channel,mxfp8 \
      --max-candidates 8 --jobs 12 --budget-s "${TUNE_BUDGET_S2:-150}" \
      --report "$OUT/tune_rest2.json" --no-progress 2>&1 | tee "$OUT/tune_rest2.log" | tail -30
  cp src/fusedmoe/configs/triton_moe_tuned.json "$OUT/"
fi
if [[ "$stages" == *" bench-all "* ]]; then
  # one table per model preset (TP1 and TP8 shards), BF16 and FP8 block, decode and prefill, vs SGLang
  python3 -m fusedmoe bench --preset all --weight-format bf16,fp8_block --tokens 1,8,64,512,4096 \
      --peers triton,sglang --sglang-path .peers/vendor --out "$OUT/bench_all" --budget-s 420 \
      --no-progress 2>&1 | tee "$OUT/bench_all.log" | tail -40
fi
if [[ "$stages" == *" bench "* ]]; then
  python3 -m fusedmoe bench --compare-heuristic --sglang-path .peers/vendor --out "$OUT" --budget-s 300 \
      --no-progress 2>&1 | tee "$OUT/bench.log" | tail -40
fi
